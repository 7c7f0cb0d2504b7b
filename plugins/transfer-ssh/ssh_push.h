/*
 * ssh_push.h — transfer-ssh's push(): a host file or tree to the guest as
 * one tar stream.
 *
 * The host walks the source (sorted; symbolic links and special files
 * refused), writes a POSIX tar stream with libarchive straight into ssh's
 * standard input, hashing every file as it is read. In the guest,
 * ssh_script_push_receive unpacks it with the system tar into a temporary
 * folder beside the destination and reports sha256sum/wc facts of what it
 * wrote; the host compares them with its own, and only when they agree runs
 * ssh_script_push_commit, which moves the copy into place. Any failure runs
 * ssh_script_push_abort, so nothing half-written is left under the
 * destination's name.
 */
#ifndef TRANSFER_SSH_PUSH_H
#define TRANSFER_SSH_PUSH_H

#include "ssh_conn.h"

relay_status ssh_push(const ssh_conn *conn, const char *local_path, const char *remote_path, relay_call *call,
                      unsigned flags, char **facts_json_out, relay_error *err);

#endif
