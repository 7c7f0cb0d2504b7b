/*
 * ssh_push.h — transfer-ssh's push(): a host file or tree to the guest as
 * one tar stream.
 *
 * The host walks the source (sorted; symbolic links and special files
 * refused), writes a GNU tar stream with libarchive straight into ssh's
 * standard input, hashing every file as it is read, and ends the stream
 * with a member listing those hashes. In the guest, the session's 'push'
 * operation (ssh_session.h, ssh_scripts.h) unpacks
 * it with the system tar into a temporary folder beside the destination,
 * hashes what it wrote, prints the facts and, only when they equal the
 * list, moves the copy into place, all in one session. The host compares
 * the facts with its own hashes again. A failure removes the temporary
 * folder (the script itself, or ssh_script_push_abort when the connection
 * broke), so nothing half-written is left under the destination's name.
 */
#ifndef TRANSFER_SSH_PUSH_H
#define TRANSFER_SSH_PUSH_H

#include "ssh_conn.h"

relay_status ssh_push(const ssh_conn *conn, const char *local_path, const char *remote_path, relay_call *call,
                      unsigned flags, char **facts_json_out, relay_error *err);

#endif
