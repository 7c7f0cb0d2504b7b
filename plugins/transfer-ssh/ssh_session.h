/*
 * ssh_session.h — the ssh sessions exec, push and pull run in, and the warm
 * spare sessions that take the login shell's start-up off their path.
 *
 * Every session runs the same guest program, ssh_script_session
 * (ssh_scripts.h): it reads one line from standard input, the operation and
 * its arguments ("'exec' '<token>'", "'push' ...", "'pull' ..."), each word
 * in POSIX single quotes, and runs that operation with the rest of standard
 * input. Until the line arrives the session only waits, and a line that does
 * not arrive whole runs nothing.
 *
 * So a session can be started before anyone needs it. On this project's
 * build machine a session's start-up (sshd's fork, the guest user's login
 * shell reading its rc files, /bin/sh parsing the program) costs 100-600 ms,
 * most of it root's ~/.bashrc running `pyenv init`; a run needs three
 * sessions one after the other (push, `receiver run`, the receipt's pull).
 * A connection therefore keeps up to `spareSessions` (plugin option, default
 * SSH_SPARES_DEFAULT, 0 turns it off) sessions started and waiting: an
 * operation takes one if there is one and starts a replacement after it has
 * sent its line. A spare found dead when it is taken (its ssh exited, or
 * closed its output) is dropped and a fresh session started instead.
 *
 * What a spare costs: one idle ssh client on the host, one sshd session and
 * one waiting /bin/sh in the guest, one of sshd's MaxSessions (default 10)
 * per spare, and the master connection never idles out while a spare holds
 * a session (ControlPersist counts from the last session). A guest that
 * refuses a session ("open failed", or "Session open refused by peer" when
 * sshd's MaxSessions is reached, after which ssh quietly opens a connection
 * of its own) gets no more spares on that connection: the refusal is seen in
 * a spare's standard error when it is taken, or in a failed operation's.
 */
#ifndef TRANSFER_SSH_SESSION_H
#define TRANSFER_SSH_SESSION_H

#include <pthread.h>
#include <stdbool.h>

#include "ssh_conn.h"
#include "ssh_spawn.h"

#define SSH_SPARES_MAX     8
#define SSH_SPARES_DEFAULT 4

/* The warm sessions of one connection; guarded by `lock` (operations run
 * on several threads at once: RELAY_TRANSPORT_CONCURRENT). */
typedef struct ssh_spares {
	pthread_mutex_t lock;
	ssh_child child[SSH_SPARES_MAX];
	unsigned count;    /* started and waiting, child[0..count) */
	unsigned starting; /* being started by ssh_spares_fill right now */
	unsigned wanted;   /* how many to keep; 0 after a refusal or close */
	bool closed;       /* ssh_spares_stop ran: keep none */
} ssh_spares;

/* Sets up `s` to keep `wanted` (at most SSH_SPARES_MAX) spares. */
void ssh_spares_init(ssh_spares *s, unsigned wanted);
/* Kills every spare and keeps none from now on. */
void ssh_spares_stop(ssh_spares *s);
/* Starts spares until `wanted` are waiting (at open, and after each take). */
void ssh_spares_fill(const ssh_conn *conn);

/* Starts the operation `op` ("exec", "push", "pull") with `args`
 * (NULL-terminated) in a session: a spare when one is waiting and `may_use_spare`,
 * else a new one. The operation's line has been sent when this returns; `c`
 * then belongs to the caller (standard input still open for the operation's
 * data). *was_spare says which it was. RELAY_E_NO_MEMORY, or what
 * ssh_child_start returns. */
relay_status ssh_session_start(const ssh_conn *conn, const char *op, const char *const *args,
                               bool may_use_spare, ssh_child *c, bool *was_spare, relay_error *err);

/* Called by an operation whose session ended with ssh's standard error
 * `err_text`: a refusal to open another session ("open failed", "refused
 * by peer": sshd's MaxSessions) turns the connection's spares off and ends
 * the waiting ones. True when that freed sessions just now, so trying
 * again may succeed. */
bool ssh_spares_note_failure(const ssh_conn *conn, const char *err_text, size_t err_len);

/* One push or pull in one session (`from` and `to` its source and
 * destination): may_use_spare as for ssh_session_start; *retry_cold set
 * when a spare turned out dead or the guest refused a session while spares
 * held some, before the guest did anything of the transfer. */
typedef relay_status (*ssh_transfer_attempt)(const ssh_conn *conn, const char *from, const char *to,
                                             relay_call *call, unsigned flags, bool may_use_spare,
                                             bool *retry_cold, char **facts_json_out, relay_error *err);

/* Runs `attempt` (a spare session allowed), and once more in a new session
 * when it asks for that, with file names in UTF-8 whatever the relay's locale. */
relay_status ssh_session_transfer(ssh_transfer_attempt attempt, const ssh_conn *conn, const char *from,
                                  const char *to, relay_call *call, unsigned flags, char **facts_json_out,
                                  relay_error *err);

#endif
