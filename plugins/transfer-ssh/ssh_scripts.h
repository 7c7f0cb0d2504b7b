/*
 * ssh_scripts.h — the POSIX sh programs transfer-ssh runs in the guest.
 *
 * The scripts are real files, plugins/transfer-ssh/guest/<name>.sh, embedded at
 * build time (core/embed.cmake). Each program below is a NULL-terminated
 * list of those parts (shared functions first); ssh_script_command() joins
 * them and sends `exec /bin/sh -c '<parts>' relay-ssh <args...>` (every
 * argument in POSIX single quotes), so the guest user's login shell only
 * has to understand `exec` and single quotes; everything else runs under
 * /bin/sh. docs/transfer-ssh.md explains each script; the exit codes below
 * are the contract with ssh_conn.c's failure classification.
 *
 * Exit codes of the transfer scripts:
 *   0 done, 2 invalid argument, 3 not found, 4 unsafe path (link, device,
 *   FIFO, socket, a name the facts format cannot carry), 5 guest I/O error,
 *   6 the guest's hashes differ from the host's.
 * A script failing with 2..6 writes one line "relay-ssh: <sentence>" to
 * standard error. ssh itself exits 255 when the connection fails.
 */
#ifndef TRANSFER_SSH_SCRIPTS_H
#define TRANSFER_SSH_SCRIPTS_H

#define SSH_SCRIPT_EXIT_INVALID   2
#define SSH_SCRIPT_EXIT_NOT_FOUND 3
#define SSH_SCRIPT_EXIT_UNSAFE    4
#define SSH_SCRIPT_EXIT_IO        5
#define SSH_SCRIPT_EXIT_INTEGRITY 6

/* The session program every exec, push and pull runs in (ssh_session.h):
 * the guest library, the three operations as functions, and the dispatcher
 * (guest/session.sh). It reads one line from standard input, the
 * operation and its arguments as single-quoted words, and runs it:
 *
 * 'exec' <token>: the exec wrapper. Prints "\036relay <token> start <pgid>"
 *   on standard output, reads the command text from standard input until
 *   EOF (it must end with "relay_go=<token>", else nothing runs), then runs
 *   it with standard input from /dev/null, sweeps the rest of its process
 *   group and prints "\036relay <token> end <exit status> <sweep status>".
 *   A missing working folder prints "\036relay <token> nocwd" (exit 125).
 *
 * 'push' <token> <guest path> file|tree overlap|after|unchecked: reads a tar stream on
 *   standard input and unpacks it into <parent>/.relay-push-<token>. The
 *   stream's last member, .relay-expected-<token>, lists
 *   "<sha256> ./<path>" for every file the host sent. The script checks
 *   that only files and folders were unpacked, prints the facts block
 *   (ssh_facts.h) of what it wrote, and only when its hashes equal the
 *   expected list moves the copy into place (a new folder is renamed, an
 *   existing one merged with files replaced, a file moved over) and prints
 *   "\036relay-committed". A difference exits 6 and removes the copy:
 *   nothing was replaced. With "overlap" (large trees) files are hashed
 *   while tar unpacks the next ones, with "after" once tar has ended; with
 *   "unchecked" (RELAY_XFER_CALLER_VERIFIES) nothing is hashed or compared
 *   and the facts block is "\036relay-nohash".
 *
 * 'pull' <token> <guest path> file|tree: refuses a path that is a link, a
 *   tree holding links, devices, FIFOs, sockets or names with a newline or
 *   backslash, prints the facts block of the files, then the line
 *   "\036relay-stream <token>" and a tar stream of the file (member
 *   "./<name>") or tree (members "./..."). */
extern const char *const ssh_script_session[];

/* Kills process group <pgid> and confirms it is gone. Args: <pgid>.
 * Exit 0 when no live member remains, 1 when some survive 5 s, 2 when the
 * guest can list no processes (neither /proc nor ps). */
extern const char *const ssh_script_kill[];

/* Push abort. Args: <token> <guest path>. Removes the temporary folder. */
extern const char *const ssh_script_push_abort[];

#endif
