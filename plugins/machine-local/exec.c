/*
 * exec.c — transport exec for machine-local guests.
 *
 * The command is started by the guest init (ctl.c) as the guest user, in a
 * session and process group of its own, with our pipes as its stdout and
 * stderr (and, with RELAY_EXEC_STDIO_BYTES, a pipe we feed as its stdin).
 * We read both until the leader has exited and both pipes are closed, or
 * until the timeout, cancellation or the output cap, where the init kills
 * the whole group and tells whether anything of it survived.
 *
 * What the command leaves running when it exits on its own keeps running
 * (spec/guest.md §16.1 item 7): its output is read for 250 ms more, then a
 * detached thread drains what still holds the pipes, so a survivor never
 * blocks on a full pipe nor dies of SIGPIPE.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"
#include "relay_support/fdstream.h"

typedef struct stream_buf {
	char *data;
	size_t len;
	size_t cap;
	size_t dropped; /* bytes dropped from the front (KEEP_TAIL) */
} stream_buf;

static int buf_append(stream_buf *b, const char *data, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->data, cap);
		if (p == NULL)
			return -1;
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

/* Keeps only the last `keep` bytes. */
static void buf_keep_tail(stream_buf *b, size_t keep)
{
	if (b->len <= keep)
		return;
	size_t drop = b->len - keep;
	memmove(b->data, b->data + drop, keep);
	b->len = keep;
	b->data[b->len] = '\0';
	b->dropped += drop;
}

static char *host_copy(local_state *st, const stream_buf *b, size_t from, size_t len)
{
	char *out = st->host->alloc(len + 1);
	if (out == NULL)
		return NULL;
	if (len)
		memcpy(out, b->data + from, len);
	out[len] = '\0';
	return out;
}

#define EXEC_KNOWN_FLAGS     (RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL | RELAY_EXEC_STDIO_BYTES)
#define SURVIVOR_DRAIN_MS    250
#define STDOUT_BYTES_DEFAULT ((size_t)64 << 20)

/* Reads what survivors of a command still write, until they close it. */
static void *drain_leftovers(void *arg)
{
	int *fds = arg;
	char chunk[16384];
	for (;;) {
		struct pollfd pfd[2];
		nfds_t n = 0;
		for (int i = 0; i < 2; i++)
			if (fds[i] >= 0)
				pfd[n++] = (struct pollfd){fds[i], POLLIN, 0};
		if (n == 0)
			break;
		if (poll(pfd, n, -1) < 0 && errno != EINTR)
			break;
		for (nfds_t k = 0; k < n; k++) {
			if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t got = read(pfd[k].fd, chunk, sizeof chunk);
			if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
				for (int i = 0; i < 2; i++)
					if (fds[i] == pfd[k].fd)
						fds[i] = -1;
				close(pfd[k].fd);
			}
		}
	}
	free(fds);
	return NULL;
}

/* Hands the still-open read ends (either may be -1) to a detached drainer
 * thread; the caller's copies become -1. Where no thread can be started the
 * pipes are closed (a survivor then gets EPIPE on its next write). */
static void leave_to_drainer(int *out_fd, int *err_fd)
{
	if (*out_fd < 0 && *err_fd < 0)
		return;
	int *fds = malloc(2 * sizeof *fds);
	pthread_t thread;
	pthread_attr_t attr;
	bool started = false;
	if (fds != NULL) {
		fds[0] = *out_fd;
		fds[1] = *err_fd;
		if (pthread_attr_init(&attr) == 0) {
			pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
			pthread_attr_setstacksize(&attr, 64 * 1024);
			started = pthread_create(&thread, &attr, drain_leftovers, fds) == 0;
			pthread_attr_destroy(&attr);
		}
	}
	if (!started) {
		free(fds);
		if (*out_fd >= 0)
			close(*out_fd);
		if (*err_fd >= 0)
			close(*err_fd);
	}
	*out_fd = -1;
	*err_fd = -1;
}

/* Writes what is left of the standard input without blocking; closes the
 * pipe when all is written or the command stopped reading. */
static void feed_stdin(int *in_fd, const char *data, size_t len, size_t *sent)
{
	while (*in_fd >= 0 && *sent < len) {
		ssize_t n = rs_fd_write_some(*in_fd, data + *sent, len - *sent); /* no SIGPIPE */
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			break; /* EPIPE: the command does not read it */
		*sent += (size_t)n;
	}
	if (*in_fd >= 0) {
		close(*in_fd);
		*in_fd = -1;
	}
}

/* One exec_run: the request, the pipes, the connection to the init and what
 * is known of the command so far. */
typedef struct exec_job {
	local_state *st;
	local_conn *conn;
	const relay_exec_request *req;
	relay_call *call;
	relay_exec_result *res;
	relay_error *err;
	bool merge, keep_tail, stdio_bytes;
	size_t max_out, max_stdout;
	int out_pipe[2], err_pipe[2], in_pipe[2];
	size_t stdin_sent;
	int cfd;
	char **env;
	stream_buf ob, eb;
	pid_t pid;
	bool exited, out_eof, err_eof, killed, conn_lost, group_known, cancelled;
	int gone;
	int wstatus;
	int64_t start, deadline, kill_at, exited_at;
	char chunk[65536];
} exec_job;

/* Checks the flags and the request, copies it into *rq and resets res. */
static relay_status exec_check(local_state *st, const relay_exec_request *req_in, unsigned flags,
                               relay_exec_result *res, relay_exec_request *rq, relay_error *err)
{
	if (flags & ~EXEC_KNOWN_FLAGS)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown exec flags 0x%x",
		              flags & ~EXEC_KNOWN_FLAGS);
	if ((flags & RELAY_EXEC_STDIO_BYTES) && (flags & RELAY_EXEC_MERGE_OUTPUT))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "exec: RELAY_EXEC_STDIO_BYTES returns standard output alone; it cannot be "
		              "merged with standard error");
	if (req_in == NULL || res == NULL || req_in->struct_size < RELAY_EXEC_REQUEST_V1_0_SIZE)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a request and a result");
	memset(rq, 0, sizeof *rq);
	memcpy(rq, req_in, req_in->struct_size < sizeof *rq ? req_in->struct_size : sizeof *rq);
	if (rq->argv == NULL || rq->argv[0] == NULL || rq->argv[0][0] == '\0')
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a non-empty argv");
	if (rq->timeout_ms == 0)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a positive timeout_ms");
	uint32_t res_size = res->struct_size;
	memset(res, 0, res_size < sizeof *res ? res_size : sizeof *res);
	res->struct_size = res_size;
	res->exit_code = -1;
	return RELAY_OK;
}

/* The init could not start the command (why: "exec", "cwd", "user" or
 * "stdio"): reports it the way a shell would, as the command's result. */
static void exec_not_started(exec_job *j, const char *why, int e, const char *cwd)
{
	relay_exec_result *res = j->res;
	char msg[512];
	int n;
	if (strcmp(why, "cwd") == 0)
		n = snprintf(msg, sizeof msg, "machine-local: cannot enter %s: %s\n", cwd ? cwd : "?",
		             strerror(e));
	else
		n = snprintf(msg, sizeof msg, "machine-local: %s: %s\n", j->req->argv[0],
		             e == ENOENT ? "not found" : strerror(e));
	res->exit_code = (e == ENOENT && strcmp(why, "exec") == 0) ? 127 : 126;
	res->termination_confirmed = 1;
	stream_buf mb = {0};
	buf_append(&mb, msg, (size_t)n);
	if (j->merge) {
		res->out = host_copy(j->st, &mb, 0, mb.len);
		res->out_len = mb.len;
	} else {
		res->out = host_copy(j->st, &j->ob, 0, 0);
		res->err = host_copy(j->st, &mb, 0, mb.len);
		res->err_len = mb.len;
	}
	free(mb.data);
}

/* Makes the pipes and has the guest init start the command. *started is
 * false when the command did not start (its result is then filled in). */
static relay_status exec_start(exec_job *j, bool *started)
{
	local_state *st = j->st;
	local_conn *conn = j->conn;
	const relay_exec_request *req = j->req;
	*started = false;
	j->env = ctl_guest_env(st, conn->record, req->envp);
	if (j->env == NULL)
		return lu_err(st, j->err, RELAY_E_NO_MEMORY, ENOMEM,
		              "out of memory building the environment");
	if (pipe2(j->out_pipe, O_CLOEXEC) != 0 || (!j->merge && pipe2(j->err_pipe, O_CLOEXEC) != 0) ||
	    (j->stdio_bytes && pipe2(j->in_pipe, O_CLOEXEC) != 0))
		return lu_err(st, j->err, RELAY_E_TRANSIENT, errno, "cannot create the command's pipes");
	j->cfd = ctl_connect(conn->lease_dir);
	if (j->cfd < 0)
		return lu_err(
		    st, j->err, RELAY_E_TRANSIENT, errno,
		    "cannot reach the init of guest %s (%s); the guest may have been released or reaped",
		    conn->vm, strerror(errno));
	ctl_spawn sp = {req->argv,
	                (const char *const *)j->env,
	                req->cwd && req->cwd[0] ? req->cwd : conn->home,
	                conn->uid,
	                conn->gid,
	                LP_SPAWN_NO_NEW_PRIVS | (j->merge ? LP_SPAWN_MERGE : 0u),
	                j->out_pipe[1],
	                j->merge ? -1 : j->err_pipe[1],
	                j->in_pipe[0]};
	int e = 0;
	char why[256];
	int rc = ctl_spawn_cmd(j->cfd, &sp, &j->pid, &e, why, sizeof why);
	close(j->out_pipe[1]);
	j->out_pipe[1] = -1;
	if (j->err_pipe[1] >= 0) {
		close(j->err_pipe[1]);
		j->err_pipe[1] = -1;
	}
	if (j->in_pipe[0] >= 0) {
		close(j->in_pipe[0]);
		j->in_pipe[0] = -1;
	}
	if (rc == -2)
		return lu_err(st, j->err, RELAY_E_INDETERMINATE, e,
		              "the init of guest %s did not confirm the start of %s; it may be running",
		              conn->vm, req->argv[0]);
	if (rc != 0) {
		if (strcmp(why, "exec") != 0 && strcmp(why, "cwd") != 0 && strcmp(why, "user") != 0 &&
		    strcmp(why, "stdio") != 0)
			return lu_err(st, j->err, RELAY_E_TRANSIENT, e, "guest %s could not start %s: %s: %s",
			              conn->vm, req->argv[0], why, strerror(e));
		exec_not_started(j, why, e, sp.cwd);
		return RELAY_OK;
	}
	*started = true;
	return RELAY_OK;
}

/* Has the init kill the command's group (once). */
static void exec_kill(exec_job *j, int64_t now)
{
	ctl_send(j->cfd, LP_KILL, (uint32_t)j->pid);
	j->killed = true;
	j->kill_at = now;
}

/* Reads what stream s (0 stdout, 1 stderr) holds now, within the caps; a
 * command over its output cap is killed. */
static void exec_read_stream(exec_job *j, int s)
{
	int fd = s == 0 ? j->out_pipe[0] : j->err_pipe[0];
	stream_buf *b = s == 0 ? &j->ob : &j->eb;
	for (;;) {
		ssize_t n = read(fd, j->chunk, sizeof j->chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break; /* EAGAIN */
		if (n == 0) {
			if (s == 0)
				j->out_eof = true;
			else
				j->err_eof = true;
			break;
		}
		if (j->keep_tail) {
			buf_append(b, j->chunk, (size_t)n);
			if (b->len > 2 * j->max_out)
				buf_keep_tail(b, j->max_out);
			continue;
		}
		size_t room;
		if (j->stdio_bytes && s == 0)
			room = j->ob.len < j->max_stdout ? j->max_stdout - j->ob.len : 0;
		else if (j->stdio_bytes)
			room = j->eb.len < j->max_out ? j->max_out - j->eb.len : 0;
		else
			room = j->ob.len + j->eb.len < j->max_out ? j->max_out - (j->ob.len + j->eb.len) : 0;
		size_t take = (size_t)n < room ? (size_t)n : room;
		if (take)
			buf_append(b, j->chunk, take);
		if ((size_t)n > take) {
			j->res->output_truncated = 1;
			if (!j->killed)
				exec_kill(j, lu_monotonic_ms());
		}
	}
}

/* Takes one message of the init: the exit, or what is left of the group. */
static void exec_ctl_event(exec_job *j)
{
	uint32_t op = 0, a = 0;
	int32_t c = 0;
	if (ctl_recv(j->cfd, &op, &a, &c, NULL, 0, 0) != 0) {
		j->conn_lost = true;
	} else if (op == LP_R_EXIT) {
		j->exited = true;
		j->wstatus = c;
		j->gone = (int)a;
		j->group_known = true;
	} else if (op == LP_R_GROUP) {
		j->gone = (int)a;
		j->group_known = true;
	}
}

/* Kills the command at cancellation or the deadline. */
static void exec_check_kill(exec_job *j, int64_t now)
{
	if (j->killed || j->conn_lost)
		return;
	if (j->st->host->call_cancelled(j->call)) {
		j->cancelled = true;
		exec_kill(j, now);
	} else if (now >= j->deadline) {
		j->res->timed_out = 1;
		exec_kill(j, now);
	}
}

/* Reads the command's output and the init's messages until the command is
 * done (or given up on). */
static relay_status exec_loop(exec_job *j)
{
	for (;;) {
		if (j->exited && j->out_eof && j->err_eof)
			return RELAY_OK;
		int64_t now = lu_monotonic_ms();
		if (j->exited && j->exited_at == 0)
			j->exited_at = now;
		if (j->exited && !j->killed && now - j->exited_at > SURVIVOR_DRAIN_MS)
			return RELAY_OK; /* what the command left running holds the pipes (§16.1) */
		exec_check_kill(j, now);
		if (j->killed && now - j->kill_at > 3000)
			return RELAY_OK; /* the group is killed; whatever holds the pipes is reported below */
		if (j->conn_lost && now - j->start > 0 && (j->out_eof && j->err_eof))
			return RELAY_OK;
		int wait_ms = 100;
		if (!j->killed && j->deadline - now < wait_ms)
			wait_ms = (int)(j->deadline - now < 0 ? 0 : j->deadline - now);
		struct pollfd pfd[4];
		int np = 0, io = -1, ie = -1, ic = -1, ii = -1;
		if (j->in_pipe[1] >= 0) {
			ii = np;
			pfd[np++] = (struct pollfd){j->in_pipe[1], POLLOUT, 0};
		}
		if (!j->out_eof) {
			io = np;
			pfd[np++] = (struct pollfd){j->out_pipe[0], POLLIN, 0};
		}
		if (!j->err_eof) {
			ie = np;
			pfd[np++] = (struct pollfd){j->err_pipe[0], POLLIN, 0};
		}
		if (!j->conn_lost) {
			ic = np;
			pfd[np++] = (struct pollfd){j->cfd, POLLIN, 0};
		}
		if (np == 0) {
			if (j->conn_lost)
				return RELAY_OK;
			lu_sleep_ms(wait_ms);
			continue;
		}
		int prc = poll(pfd, (nfds_t)np, wait_ms);
		if (prc < 0 && errno != EINTR)
			return lu_err(j->st, j->err, RELAY_E_INDETERMINATE, errno,
			              "poll failed while %s ran in %s", j->req->argv[0], j->conn->vm);
		if (prc <= 0)
			continue;
		if (ii >= 0 && pfd[ii].revents)
			feed_stdin(&j->in_pipe[1], j->req->stdin_data, j->req->stdin_len, &j->stdin_sent);
		for (int s = 0; s < 2; s++) {
			int idx = s == 0 ? io : ie;
			if (idx >= 0 && (pfd[idx].revents & (POLLIN | POLLHUP | POLLERR)))
				exec_read_stream(j, s);
		}
		if (ic >= 0 && (pfd[ic].revents & (POLLIN | POLLHUP | POLLERR)))
			exec_ctl_event(j);
		if (j->conn_lost && !j->exited)
			/* The guest init is gone: so is the command. */
			return lu_err(j->st, j->err, RELAY_E_INDETERMINATE, EPIPE,
			              "the init of guest %s went away while %s ran", j->conn->vm,
			              j->req->argv[0]);
	}
}

/* After the loop: collects the kill's answer, or asks once more whether the
 * group is gone, then fills in the exit and hands survivors' pipes over. */
static void exec_settle(exec_job *j)
{
	relay_exec_result *res = j->res;
	if (j->killed && !j->conn_lost) {
		/* Collect the kill's answer and the exit, if not in yet. */
		int64_t until = lu_monotonic_ms() + 2000;
		while (lu_monotonic_ms() < until && !(j->exited && j->group_known)) {
			uint32_t op = 0, a = 0;
			int32_t c = 0;
			if (ctl_recv(j->cfd, &op, &a, &c, NULL, 0, 200) != 0) {
				if (errno == ETIMEDOUT)
					continue;
				break;
			}
			if (op == LP_R_EXIT) {
				j->exited = true;
				j->wstatus = c;
			} else if (op == LP_R_GROUP) {
				j->gone = (int)a;
				j->group_known = true;
			}
		}
	} else if (j->exited && !j->gone && !j->conn_lost) {
		/* The leader is done; check once more whether the rest of its group is. */
		if (ctl_send(j->cfd, LP_QUERY, (uint32_t)j->pid) == 0) {
			uint32_t op = 0, a = 0;
			int32_t c = 0;
			while (ctl_recv(j->cfd, &op, &a, &c, NULL, 0, 2000) == 0) {
				if (op == LP_R_GROUP) {
					j->gone = (int)a;
					break;
				}
			}
		}
	}
	if (j->exited) {
		if (WIFEXITED(j->wstatus))
			res->exit_code = WEXITSTATUS(j->wstatus);
		else if (WIFSIGNALED(j->wstatus)) {
			res->exit_code = -1;
			res->signal = WTERMSIG(j->wstatus);
		}
	}
	res->termination_confirmed = (j->exited && j->gone && j->out_eof && j->err_eof) ? 1 : 0;
	if (j->exited && !j->killed) {
		leave_to_drainer(j->out_eof ? &(int){-1} : &j->out_pipe[0],
		                 j->err_eof ? &(int){-1} : &j->err_pipe[0]);
		j->out_eof = j->err_eof = true;
	}
}

/* Cuts the output to its caps and hands it to the result; status is what
 * the run has so far. */
static relay_status exec_output(exec_job *j, relay_status status)
{
	relay_exec_result *res = j->res;
	local_state *st = j->st;
	if (j->keep_tail) {
		size_t total = j->ob.len + j->eb.len;
		if (total > j->max_out || j->ob.dropped || j->eb.dropped) {
			size_t err_keep = j->eb.len < j->max_out / 2 ? j->eb.len : j->max_out / 2;
			if (j->merge)
				err_keep = 0;
			buf_keep_tail(&j->eb, err_keep);
			buf_keep_tail(&j->ob, j->max_out - err_keep);
			if (j->ob.dropped || j->eb.dropped)
				res->output_truncated = 1;
		}
	}
	res->out = host_copy(st, &j->ob, 0, j->ob.len);
	res->out_len = j->ob.len;
	if (!j->merge) {
		res->err = host_copy(st, &j->eb, 0, j->eb.len);
		res->err_len = j->eb.len;
	}
	if (res->out == NULL || (!j->merge && res->err == NULL)) {
		st->host->free(res->out);
		st->host->free(res->err);
		res->out = res->err = NULL;
		return lu_err(st, j->err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory keeping the output of %s",
		              j->req->argv[0]);
	}
	if (j->cancelled && status == RELAY_OK)
		return lu_err(st, j->err, RELAY_E_CANCELLED, 0,
		              "cancelled; the command's process group was %s",
		              res->termination_confirmed ? "killed" : "signalled but not confirmed gone");
	return status;
}

relay_status exec_run(local_state *st, local_conn *conn, const relay_exec_request *req_in, relay_call *call,
                      unsigned flags, relay_exec_result *res, relay_error *err)
{
	relay_exec_request rq;
	relay_status status = exec_check(st, req_in, flags, res, &rq, err);
	if (status != RELAY_OK)
		return status;
	exec_job job = {.st = st,
	                .conn = conn,
	                .req = &rq,
	                .call = call,
	                .res = res,
	                .err = err,
	                .merge = (flags & RELAY_EXEC_MERGE_OUTPUT) != 0,
	                .keep_tail = (flags & RELAY_EXEC_KEEP_TAIL) != 0,
	                .stdio_bytes = (flags & RELAY_EXEC_STDIO_BYTES) != 0,
	                .max_out = rq.max_output_bytes ? rq.max_output_bytes : 65536,
	                .max_stdout = rq.max_stdout_bytes ? rq.max_stdout_bytes : STDOUT_BYTES_DEFAULT,
	                .out_pipe = {-1, -1},
	                .err_pipe = {-1, -1},
	                .in_pipe = {-1, -1},
	                .cfd = -1};
	exec_job *j = &job;
	j->err_eof = j->merge;
	bool started = false;
	status = exec_start(j, &started);
	if (status != RELAY_OK || !started)
		goto cleanup;
	fcntl(j->out_pipe[0], F_SETFL, O_NONBLOCK);
	if (!j->merge)
		fcntl(j->err_pipe[0], F_SETFL, O_NONBLOCK);
	if (j->in_pipe[1] >= 0) {
		fcntl(j->in_pipe[1], F_SETFL, O_NONBLOCK);
		feed_stdin(&j->in_pipe[1], rq.stdin_data, rq.stdin_data ? rq.stdin_len : 0, &j->stdin_sent);
	}
	j->start = lu_monotonic_ms();
	j->deadline = j->start + (int64_t)(rq.timeout_ms > INT32_MAX ? INT32_MAX : rq.timeout_ms);
	status = exec_loop(j);
	exec_settle(j);
	status = exec_output(j, status);
cleanup:
	ctl_env_free(j->env);
	free(j->ob.data);
	free(j->eb.data);
	for (int i = 0; i < 2; i++) {
		if (j->out_pipe[i] >= 0)
			close(j->out_pipe[i]);
		if (j->err_pipe[i] >= 0)
			close(j->err_pipe[i]);
		if (j->in_pipe[i] >= 0)
			close(j->in_pipe[i]);
	}
	if (j->cfd >= 0)
		close(j->cfd);
	return status;
}
