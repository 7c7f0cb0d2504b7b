/*
 * stream.c — the transport's long-lived stream (relay/transport.h,
 * RELAY_TRANSPORT_STREAM; spec/guest.md §17): one guest command started by the
 * guest init (ctl.c) as the guest user, in a session and process group of
 * its own, with a pipe we write as its standard input and a pipe we read as
 * its standard output; its standard error is /dev/null. The control
 * connection stays open beside the pipes, so close() can have the init kill
 * the command's group when it does not end on its own after end of input.
 * What the command starts in sessions of its own is never touched.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"
#include "relay_kit/stream.h"
#include "relay_support/fdstream.h"

#define STREAM_CLOSE_WAIT_MS 2000

typedef struct local_stream {
	int in_fd;  /* our end of the command's standard input; -1 once closed */
	int out_fd; /* our end of its standard output */
	int cfd;    /* the control connection of the spawn */
	pid_t pid;  /* the command's guest pid (its group) */
} local_stream;

static void stream_free(local_stream *s)
{
	if (s->in_fd >= 0)
		close(s->in_fd);
	if (s->out_fd >= 0)
		close(s->out_fd);
	if (s->cfd >= 0)
		close(s->cfd);
	free(s);
}

relay_status stream_open(local_state *st, local_conn *conn, const relay_exec_request *req_in,
                         relay_call *call, unsigned flags, relay_transport_stream **out, relay_error *err)
{
	(void)call;
	*out = NULL;
	relay_exec_request req;
	relay_status checked = rk_stream_open_request(st->host, req_in, flags, &req, err);
	if (checked != RELAY_OK)
		return checked;
	local_stream *s = calloc(1, sizeof *s);
	int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
	char **env = NULL;
	relay_status status = RELAY_OK;
	if (s == NULL)
		return lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	s->in_fd = s->out_fd = s->cfd = -1;
	env = ctl_guest_env(st, conn->record, req.envp);
	if (env == NULL) {
		status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory building the environment");
		goto done;
	}
	if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) {
		status = lu_err(st, err, RELAY_E_TRANSIENT, errno, "cannot create the stream's pipes");
		goto done;
	}
	s->cfd = ctl_connect(conn->lease_dir);
	if (s->cfd < 0) {
		status = lu_err(st, err, RELAY_E_TRANSIENT, errno,
		                "cannot reach the init of guest %s (%s); the guest may have been released",
		                conn->vm, strerror(errno));
		goto done;
	}
	ctl_spawn sp = {req.argv,
	                (const char *const *)env,
	                req.cwd && req.cwd[0] ? req.cwd : conn->home,
	                conn->uid,
	                conn->gid,
	                LP_SPAWN_NO_NEW_PRIVS,
	                out_pipe[1],
	                -1,
	                in_pipe[0]};
	int e = 0;
	char why[256];
	int rc = ctl_spawn_cmd(s->cfd, &sp, &s->pid, &e, why, sizeof why);
	if (rc == -2) {
		status =
		    lu_err(st, err, RELAY_E_INDETERMINATE, e,
		           "the init of guest %s did not confirm the start of %s", conn->vm, req.argv[0]);
		goto done;
	}
	if (rc != 0) {
		status = lu_err(st, err, RELAY_E_TRANSIENT, e, "guest %s could not start %s: %s: %s",
		                conn->vm, req.argv[0], why, strerror(e));
		goto done;
	}
	s->in_fd = in_pipe[1];
	s->out_fd = out_pipe[0];
	in_pipe[1] = out_pipe[0] = -1;
	fcntl(s->in_fd, F_SETFL, fcntl(s->in_fd, F_GETFL) | O_NONBLOCK);
	*out = s;
	s = NULL;
done:
	for (int i = 0; i < 2; i++) {
		if (in_pipe[i] >= 0)
			close(in_pipe[i]);
		if (out_pipe[i] >= 0)
			close(out_pipe[i]);
	}
	ctl_env_free(env);
	if (s)
		stream_free(s);
	return status;
}

relay_status stream_write(local_state *st, relay_transport_stream *stream, const void *data, size_t len,
                          uint64_t timeout_ms, unsigned flags, relay_error *err)
{
	local_stream *s = stream;
	relay_status status =
	    rk_stream_write_check(st->host, s && s->in_fd >= 0, data, len, timeout_ms, flags, err);
	return status != RELAY_OK
	           ? status
	           : rk_stream_fd_write(st->host, s->in_fd, data, len, timeout_ms, "the guest command", err);
}

relay_status stream_read(local_state *st, relay_transport_stream *stream, void *buf, size_t cap,
                         uint64_t timeout_ms, unsigned flags, size_t *got_out, relay_error *err)
{
	local_stream *s = stream;
	*got_out = 0;
	relay_status status = rk_stream_read_check(st->host, s != NULL, buf, cap, flags, err);
	return status != RELAY_OK ? status
	                          : rk_stream_fd_read(st->host, s->out_fd, buf, cap, timeout_ms,
	                                              "the guest command", got_out, err);
}

void stream_close(local_state *st, relay_transport_stream *stream, unsigned flags)
{
	(void)st;
	(void)flags;
	local_stream *s = stream;
	if (s == NULL)
		return;
	close(s->in_fd);
	s->in_fd = -1;
	/* End of input ends the command; the init's EXIT says so. One that
	 * does not end in time has its group killed (its own sessions live). */
	int64_t deadline = lu_monotonic_ms() + STREAM_CLOSE_WAIT_MS;
	bool exited = false;
	while (!exited) {
		int64_t left = deadline - lu_monotonic_ms();
		uint32_t op = 0, a = 0;
		int32_t c = 0;
		if (left <= 0 || ctl_recv(s->cfd, &op, &a, &c, NULL, 0, (int)left) != 0)
			break;
		exited = op == LP_R_EXIT;
	}
	if (!exited)
		ctl_send(s->cfd, LP_KILL, (uint32_t)s->pid);
	stream_free(s);
}
