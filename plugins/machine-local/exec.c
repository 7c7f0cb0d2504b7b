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
 * (guest.md §16.1 item 7): its output is read for 250 ms more, then a
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
/* write() that cannot raise SIGPIPE in the relay: the signal is blocked in
 * this thread for the call and a pending one is consumed. */
static ssize_t write_nosigpipe(int fd, const void *data, size_t len)
{
	sigset_t pipe_set, old;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	ssize_t n = write(fd, data, len);
	int e = errno;
	if (n < 0 && e == EPIPE) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return n;
}

static void feed_stdin(int *in_fd, const char *data, size_t len, size_t *sent)
{
	while (*in_fd >= 0 && *sent < len) {
		ssize_t n = write_nosigpipe(*in_fd, data + *sent, len - *sent);
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

relay_status exec_run(local_state *st, local_conn *conn, const relay_exec_request *req_in, relay_call *call,
                      unsigned flags, relay_exec_result *res, relay_error *err)
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
	relay_exec_request rq;
	memset(&rq, 0, sizeof rq);
	memcpy(&rq, req_in, req_in->struct_size < sizeof rq ? req_in->struct_size : sizeof rq);
	const relay_exec_request *req = &rq;
	if (req->argv == NULL || req->argv[0] == NULL || req->argv[0][0] == '\0')
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a non-empty argv");
	if (req->timeout_ms == 0)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "exec needs a positive timeout_ms");
	uint32_t res_size = res->struct_size;
	memset(res, 0, res_size < sizeof *res ? res_size : sizeof *res);
	res->struct_size = res_size;
	res->exit_code = -1;

	const bool merge = (flags & RELAY_EXEC_MERGE_OUTPUT) != 0;
	const bool keep_tail = (flags & RELAY_EXEC_KEEP_TAIL) != 0;
	const bool stdio_bytes = (flags & RELAY_EXEC_STDIO_BYTES) != 0;
	const size_t max_out = req->max_output_bytes ? req->max_output_bytes : 65536;
	const size_t max_stdout = req->max_stdout_bytes ? req->max_stdout_bytes : STDOUT_BYTES_DEFAULT;
	relay_status status = RELAY_OK;
	int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1};
	size_t stdin_sent = 0;
	int cfd = -1;
	char **env = NULL;
	stream_buf ob = {0}, eb = {0};

	env = ctl_guest_env(st, conn->record, req->envp);
	if (env == NULL) {
		status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory building the environment");
		goto cleanup;
	}
	if (pipe2(out_pipe, O_CLOEXEC) != 0 || (!merge && pipe2(err_pipe, O_CLOEXEC) != 0) ||
	    (stdio_bytes && pipe2(in_pipe, O_CLOEXEC) != 0)) {
		status = lu_err(st, err, RELAY_E_TRANSIENT, errno, "cannot create the command's pipes");
		goto cleanup;
	}
	cfd = ctl_connect(conn->lease_dir);
	if (cfd < 0) {
		status = lu_err(
		    st, err, RELAY_E_TRANSIENT, errno,
		    "cannot reach the init of guest %s (%s); the guest may have been released or reaped",
		    conn->vm, strerror(errno));
		goto cleanup;
	}
	ctl_spawn sp = {req->argv,
	                (const char *const *)env,
	                req->cwd && req->cwd[0] ? req->cwd : conn->home,
	                conn->uid,
	                conn->gid,
	                LP_SPAWN_NO_NEW_PRIVS | (merge ? LP_SPAWN_MERGE : 0u),
	                out_pipe[1],
	                merge ? -1 : err_pipe[1],
	                in_pipe[0]};
	pid_t pid = 0;
	int e = 0;
	char why[256];
	int rc = ctl_spawn_cmd(cfd, &sp, &pid, &e, why, sizeof why);
	close(out_pipe[1]);
	out_pipe[1] = -1;
	if (err_pipe[1] >= 0) {
		close(err_pipe[1]);
		err_pipe[1] = -1;
	}
	if (in_pipe[0] >= 0) {
		close(in_pipe[0]);
		in_pipe[0] = -1;
	}
	if (rc == -2) {
		status = lu_err(st, err, RELAY_E_INDETERMINATE, e,
		                "the init of guest %s did not confirm the start of %s; it may be running",
		                conn->vm, req->argv[0]);
		goto cleanup;
	}
	if (rc != 0) {
		if (strcmp(why, "exec") != 0 && strcmp(why, "cwd") != 0 && strcmp(why, "user") != 0 &&
		    strcmp(why, "stdio") != 0) {
			status = lu_err(st, err, RELAY_E_TRANSIENT, e, "guest %s could not start %s: %s: %s",
			                conn->vm, req->argv[0], why, strerror(e));
			goto cleanup;
		}
		/* The command did not start: report it the way a shell would. */
		char msg[512];
		int n;
		if (strcmp(why, "cwd") == 0)
			n = snprintf(msg, sizeof msg, "machine-local: cannot enter %s: %s\n",
			             sp.cwd ? sp.cwd : "?", strerror(e));
		else
			n = snprintf(msg, sizeof msg, "machine-local: %s: %s\n", req->argv[0],
			             e == ENOENT ? "not found" : strerror(e));
		res->exit_code = (e == ENOENT && strcmp(why, "exec") == 0) ? 127 : 126;
		res->termination_confirmed = 1;
		stream_buf mb = {0};
		buf_append(&mb, msg, (size_t)n);
		if (merge) {
			res->out = host_copy(st, &mb, 0, mb.len);
			res->out_len = mb.len;
		} else {
			res->out = host_copy(st, &ob, 0, 0);
			res->err = host_copy(st, &mb, 0, mb.len);
			res->err_len = mb.len;
		}
		free(mb.data);
		goto cleanup;
	}

	fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
	if (!merge)
		fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
	if (in_pipe[1] >= 0) {
		fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
		feed_stdin(&in_pipe[1], req->stdin_data, req->stdin_data ? req->stdin_len : 0, &stdin_sent);
	}
	bool exited = false, out_eof = false, err_eof = merge, killed = false, conn_lost = false;
	bool group_known = false, cancelled = false;
	int gone = 0;
	int wstatus = 0;
	int64_t start = lu_monotonic_ms();
	int64_t deadline = start + (int64_t)(req->timeout_ms > INT32_MAX ? INT32_MAX : req->timeout_ms);
	int64_t kill_at = 0, exited_at = 0;
	char chunk[65536];
	for (;;) {
		if (exited && out_eof && err_eof)
			break;
		int64_t now = lu_monotonic_ms();
		if (exited && exited_at == 0)
			exited_at = now;
		if (exited && !killed && now - exited_at > SURVIVOR_DRAIN_MS)
			break; /* what the command left running holds the pipes (§16.1) */
		if (!killed && !conn_lost) {
			bool why_kill = false;
			if (st->host->call_cancelled(call)) {
				cancelled = true;
				why_kill = true;
			} else if (now >= deadline) {
				res->timed_out = 1;
				why_kill = true;
			}
			if (why_kill) {
				ctl_send(cfd, LP_KILL, (uint32_t)pid);
				killed = true;
				kill_at = now;
			}
		}
		if (killed && now - kill_at > 3000)
			break; /* the group is killed; whatever holds the pipes is reported below */
		if (conn_lost && now - start > 0 && (out_eof && err_eof))
			break;
		int wait_ms = 100;
		if (!killed && deadline - now < wait_ms)
			wait_ms = (int)(deadline - now < 0 ? 0 : deadline - now);
		struct pollfd pfd[4];
		int np = 0, io = -1, ie = -1, ic = -1, ii = -1;
		if (in_pipe[1] >= 0) {
			ii = np;
			pfd[np++] = (struct pollfd){in_pipe[1], POLLOUT, 0};
		}
		if (!out_eof) {
			io = np;
			pfd[np++] = (struct pollfd){out_pipe[0], POLLIN, 0};
		}
		if (!err_eof) {
			ie = np;
			pfd[np++] = (struct pollfd){err_pipe[0], POLLIN, 0};
		}
		if (!conn_lost) {
			ic = np;
			pfd[np++] = (struct pollfd){cfd, POLLIN, 0};
		}
		if (np == 0) {
			if (conn_lost)
				break;
			lu_sleep_ms(wait_ms);
			continue;
		}
		int prc = poll(pfd, (nfds_t)np, wait_ms);
		if (prc < 0 && errno != EINTR) {
			status = lu_err(st, err, RELAY_E_INDETERMINATE, errno,
			                "poll failed while %s ran in %s", req->argv[0], conn->vm);
			break;
		}
		if (prc <= 0)
			continue;
		if (ii >= 0 && pfd[ii].revents)
			feed_stdin(&in_pipe[1], req->stdin_data, req->stdin_len, &stdin_sent);
		for (int s = 0; s < 2; s++) {
			int idx = s == 0 ? io : ie;
			if (idx < 0 || !(pfd[idx].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			int fd = s == 0 ? out_pipe[0] : err_pipe[0];
			stream_buf *b = s == 0 ? &ob : &eb;
			for (;;) {
				ssize_t n = read(fd, chunk, sizeof chunk);
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0)
					break; /* EAGAIN */
				if (n == 0) {
					if (s == 0)
						out_eof = true;
					else
						err_eof = true;
					break;
				}
				if (keep_tail) {
					buf_append(b, chunk, (size_t)n);
					if (b->len > 2 * max_out)
						buf_keep_tail(b, max_out);
					continue;
				}
				size_t room;
				if (stdio_bytes && s == 0)
					room = ob.len < max_stdout ? max_stdout - ob.len : 0;
				else if (stdio_bytes)
					room = eb.len < max_out ? max_out - eb.len : 0;
				else
					room = ob.len + eb.len < max_out ? max_out - (ob.len + eb.len) : 0;
				size_t take = (size_t)n < room ? (size_t)n : room;
				if (take)
					buf_append(b, chunk, take);
				if ((size_t)n > take) {
					res->output_truncated = 1;
					if (!killed) {
						ctl_send(cfd, LP_KILL, (uint32_t)pid);
						killed = true;
						kill_at = lu_monotonic_ms();
					}
				}
			}
		}
		if (ic >= 0 && (pfd[ic].revents & (POLLIN | POLLHUP | POLLERR))) {
			uint32_t op = 0, a = 0;
			int32_t c = 0;
			if (ctl_recv(cfd, &op, &a, &c, NULL, 0, 0) != 0) {
				conn_lost = true;
			} else if (op == LP_R_EXIT) {
				exited = true;
				wstatus = c;
				gone = (int)a;
				group_known = true;
			} else if (op == LP_R_GROUP) {
				gone = (int)a;
				group_known = true;
			}
		}
		if (conn_lost && !exited) {
			/* The guest init is gone: so is the command. */
			status =
			    lu_err(st, err, RELAY_E_INDETERMINATE, EPIPE,
			           "the init of guest %s went away while %s ran", conn->vm, req->argv[0]);
			break;
		}
	}
	if (killed && !conn_lost) {
		/* Collect the kill's answer and the exit, if not in yet. */
		int64_t until = lu_monotonic_ms() + 2000;
		while (lu_monotonic_ms() < until && !(exited && group_known)) {
			uint32_t op = 0, a = 0;
			int32_t c = 0;
			if (ctl_recv(cfd, &op, &a, &c, NULL, 0, 200) != 0) {
				if (errno == ETIMEDOUT)
					continue;
				break;
			}
			if (op == LP_R_EXIT) {
				exited = true;
				wstatus = c;
			} else if (op == LP_R_GROUP) {
				gone = (int)a;
				group_known = true;
			}
		}
	} else if (exited && !gone && !conn_lost) {
		/* The leader is done; check once more whether the rest of its group is. */
		if (ctl_send(cfd, LP_QUERY, (uint32_t)pid) == 0) {
			uint32_t op = 0, a = 0;
			int32_t c = 0;
			while (ctl_recv(cfd, &op, &a, &c, NULL, 0, 2000) == 0) {
				if (op == LP_R_GROUP) {
					gone = (int)a;
					break;
				}
			}
		}
	}
	if (exited) {
		if (WIFEXITED(wstatus))
			res->exit_code = WEXITSTATUS(wstatus);
		else if (WIFSIGNALED(wstatus)) {
			res->exit_code = -1;
			res->signal = WTERMSIG(wstatus);
		}
	}
	res->termination_confirmed = (exited && gone && out_eof && err_eof) ? 1 : 0;
	if (exited && !killed) {
		leave_to_drainer(out_eof ? &(int){-1} : &out_pipe[0], err_eof ? &(int){-1} : &err_pipe[0]);
		out_eof = err_eof = true;
	}
	if (keep_tail) {
		size_t total = ob.len + eb.len;
		if (total > max_out || ob.dropped || eb.dropped) {
			size_t err_keep = eb.len < max_out / 2 ? eb.len : max_out / 2;
			if (merge)
				err_keep = 0;
			buf_keep_tail(&eb, err_keep);
			buf_keep_tail(&ob, max_out - err_keep);
			if (ob.dropped || eb.dropped)
				res->output_truncated = 1;
		}
	}
	res->out = host_copy(st, &ob, 0, ob.len);
	res->out_len = ob.len;
	if (!merge) {
		res->err = host_copy(st, &eb, 0, eb.len);
		res->err_len = eb.len;
	}
	if (res->out == NULL || (!merge && res->err == NULL)) {
		st->host->free(res->out);
		st->host->free(res->err);
		res->out = res->err = NULL;
		status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory keeping the output of %s",
		                req->argv[0]);
	} else if (cancelled && status == RELAY_OK) {
		status =
		    lu_err(st, err, RELAY_E_CANCELLED, 0, "cancelled; the command's process group was %s",
		           res->termination_confirmed ? "killed" : "signalled but not confirmed gone");
	}
cleanup:
	ctl_env_free(env);
	free(ob.data);
	free(eb.data);
	for (int i = 0; i < 2; i++) {
		if (out_pipe[i] >= 0)
			close(out_pipe[i]);
		if (err_pipe[i] >= 0)
			close(err_pipe[i]);
		if (in_pipe[i] >= 0)
			close(in_pipe[i]);
	}
	if (cfd >= 0)
		close(cfd);
	return status;
}
