/*
 * ssh_exec.h — transfer-ssh's exec(): one command in the guest through the
 * multiplexed connection, with a guest-side process group, a timeout that
 * kills that group, a second ssh session that confirms it is gone, and
 * output capped as relay/transport.h describes.
 *
 * The protocol (docs/transfer-ssh.md has the full story):
 *   1. A session (ssh_session.h; a warm spare when one waits) runs the
 *      guest's 'exec' operation (ssh_scripts.h) with a random token. sshd
 *      starts every session in a new session and process group, so the
 *      wrapper is the leader of the command's group; it prints
 *      "\036relay <token> start <pgid>" and waits on standard input.
 *   2. Only after that line arrived do we send the command text (cwd,
 *      exports, argv, each shell-quoted, ending "relay_go=<token>") and
 *      close stdin. The wrapper runs nothing unless the text arrived whole.
 *      So a failure before step 2 is RELAY_E_TRANSIENT (nothing ran); after
 *      it, RELAY_E_INDETERMINATE.
 *   3. The wrapper runs the command with stdin from /dev/null, then SIGKILLs
 *      whatever is left of its group and prints
 *      "\036relay <token> end <exit status> <sweep status>".
 *   4. On timeout, output overflow (without KEEP_TAIL) or cancellation, a
 *      second session runs ssh_script_kill <pgid>, which kills the group and
 *      polls until no live member remains: termination_confirmed is 1 only
 *      when that session says so.
 */
#ifndef TRANSFER_SSH_EXEC_H
#define TRANSFER_SSH_EXEC_H

#include "relay/transport.h"
#include "ssh_conn.h"

relay_status ssh_exec(const ssh_conn *conn, const relay_exec_request *req, relay_call *call, unsigned flags,
                      relay_exec_result *res, relay_error *err);

#endif
