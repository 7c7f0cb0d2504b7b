/*
 * ssh_pull.h — transfer-ssh's pull(): a guest file or tree to the host as
 * one tar stream.
 *
 * One session (ssh_session.h) runs the guest's 'pull' operation: it
 * refuses a path that is a symbolic link and any tree holding links,
 * devices, FIFOs, sockets or names the facts format cannot carry, prints
 * the sha256/wc facts, then the line "\036relay-stream <token>" and `tar -c`
 * of the path, which libarchive reads on the host straight from ssh's
 * standard output. The host applies the same
 * refusals again while unpacking (absolute names, "..", links, hard links,
 * devices, FIFOs, duplicates), writes into a fresh temporary sibling of
 * local_path (files O_EXCL|O_NOFOLLOW 0600, folders 0700), hashes every
 * byte as it is written, compares with the guest's facts, and only then
 * renames the result to local_path without replacing anything. On failure
 * the temporary copy is removed and nothing is left at local_path.
 */
#ifndef TRANSFER_SSH_PULL_H
#define TRANSFER_SSH_PULL_H

#include "ssh_conn.h"

relay_status ssh_pull(const ssh_conn *conn, const char *remote_path, const char *local_path, relay_call *call,
                      unsigned flags, char **facts_json_out, relay_error *err);

#endif
