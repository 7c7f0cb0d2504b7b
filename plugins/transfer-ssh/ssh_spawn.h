/*
 * ssh_spawn.h — starting the local `ssh` client with its standard streams
 * connected to the plugin, for the operations that must talk to the guest
 * while the command runs.
 *
 * Why not host->process_run: process_run feeds a fixed stdin buffer and
 * returns the captured output only when the program has ended. exec must
 * read the wrapper's first line (the guest process group) and only then
 * send the command text; push must stream a tar archive that libarchive
 * produces on the fly into ssh's stdin; pull must hand ssh's stdout to
 * libarchive as it arrives. So this module starts ssh itself, with the same
 * care as process_run: the child's standard output is a pipe to us, never
 * the relay's fd 1; every other descriptor is closed; it runs in its own
 * process group; standard input is a socket (so a write after ssh died
 * gives EPIPE, not SIGPIPE, through MSG_NOSIGNAL / SO_NOSIGPIPE).
 */
#ifndef TRANSFER_SSH_SPAWN_H
#define TRANSFER_SSH_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "relay/host.h"

typedef struct ssh_child {
	pid_t pid;   /* -1 once reaped */
	int in_fd;   /* our end of the child's stdin socket; -1 once closed */
	int out_fd;  /* read end of the child's stdout pipe; -1 at EOF */
	int err_fd;  /* read end of the child's stderr pipe; -1 at EOF */
	bool exited; /* reaped */
	int wstatus; /* waitpid status once exited */
} ssh_child;

/* Receives bytes read from the child's stdout or stderr. */
typedef void (*ssh_sink_fn)(void *ctx, const char *data, size_t len);

typedef struct ssh_io {
	/* Bytes to send to the child's stdin this step; advanced as sent. */
	const char *in_data;
	size_t in_len;
	/* When out_buf is set, at most out_cap bytes of stdout are read into it
	 * (out_got says how many) and on_out is not called. */
	char *out_buf;
	size_t out_cap;
	size_t out_got;
	ssh_sink_fn on_out;
	ssh_sink_fn on_err;
	void *ctx;
	/* Set when sending to stdin failed (the child closed it). */
	bool in_broken;
} ssh_io;

/* Starts argv (argv[0] looked up on PATH). On RELAY_OK `c` holds the child.
 * RELAY_E_NOT_FOUND when the program cannot be executed. */
relay_status ssh_child_start(const relay_host *host, const char *const *argv, ssh_child *c, relay_error *err);

/* One step: waits up to wait_ms for the child's streams, sends what it can
 * of io->in_data, reads what is ready into the sinks, and reaps the child
 * when it has ended. Returns RELAY_OK or RELAY_E_IO (poll failed). */
relay_status ssh_child_step(const relay_host *host, ssh_child *c, ssh_io *io, int wait_ms, relay_error *err);

/* Sends what the child's stdin takes right now without waiting (the fast
 * path of a stream). Returns true when it sent something. Sets
 * io->in_broken when the child closed its stdin. */
bool ssh_child_try_send(ssh_child *c, ssh_io *io);

/* For a child nobody has read from yet (a spare session): false when it
 * has exited or its output streams hung up. Either way what it has written
 * to standard error so far (up to 4 KiB; ssh's own messages, such as a
 * refused multiplexed session it then opened over a connection of its own)
 * is read and appended to `err_text`. Does not block. */
struct rk_buf;
bool ssh_child_alive(ssh_child *c, struct rk_buf *err_text);

/* Closes our end of the child's stdin (the child sees EOF). */
void ssh_child_close_stdin(ssh_child *c);

/* True when the child was reaped and both output streams reached EOF. */
bool ssh_child_done(const ssh_child *c);

/* Kills the child (SIGKILL to its pid and group), reaps it, closes every
 * descriptor. Safe to call on a finished or never-started child. */
void ssh_child_destroy(ssh_child *c);

/* Monotonic milliseconds, for the plugin's own deadlines. */
int64_t ssh_now_ms(void);

/* Exit code of a reaped child, or -1 when it was killed by a signal or is
 * not reaped. */
int ssh_child_exit_code(const ssh_child *c);

#endif
