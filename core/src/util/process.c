#include "util/process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "relay_support/fds.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/strbuf.h"

#define PROCESS_KNOWN_FLAGS                                                                                  \
	(RELAY_PROCESS_MERGE_OUTPUT | RELAY_PROCESS_KEEP_TAIL | RELAY_PROCESS_NEW_SESSION |                  \
	 RELAY_PROCESS_SHARED_CAP)

int process_group_gone(pid_t pgid, int wait_ms)
{
	for (int waited = 0;; waited += 20) {
		if (kill(-pgid, 0) != 0 && errno == ESRCH)
			return 1;
		if (waited >= wait_ms)
			return 0;
		struct timespec ts = {0, 20 * 1000000};
		nanosleep(&ts, NULL);
	}
}

void process_result_release(relay_process_result *res)
{
	free(res->out);
	free(res->err);
	res->out = NULL;
	res->err = NULL;
	res->out_len = res->err_len = 0;
}

/* One captured stream with its cap. With keep_tail the buffer keeps the
 * last `cap` bytes (compacting when it doubles). */
typedef struct capture {
	int fd;
	strbuf buf;
	size_t cap;
	int keep_tail;
	int overflowed;
	const struct capture *peer; /* RELAY_PROCESS_SHARED_CAP: the other stream, counted against cap */
} capture;

static void capture_add(capture *c, const char *data, size_t len)
{
	if (!c->keep_tail) {
		size_t used = c->buf.len + (c->peer ? c->peer->buf.len : 0);
		size_t room = used < c->cap ? c->cap - used : 0;
		if (len > room) {
			c->overflowed = 1;
			len = room;
		}
		strbuf_append(&c->buf, data, len);
		return;
	}
	strbuf_append(&c->buf, data, len);
	if (c->buf.len > 2 * c->cap) {
		size_t drop = c->buf.len - c->cap;
		memmove(c->buf.data, c->buf.data + drop, c->cap);
		c->buf.len = c->cap;
		c->buf.data[c->buf.len] = '\0';
		c->overflowed = 1;
	}
}

static void capture_finish(capture *c)
{
	if (c->keep_tail && c->buf.len > c->cap) {
		size_t drop = c->buf.len - c->cap;
		memmove(c->buf.data, c->buf.data + drop, c->cap);
		c->buf.len = c->cap;
		c->buf.data[c->buf.len] = '\0';
		c->overflowed = 1;
	}
}

/* RELAY_PROCESS_SHARED_CAP with KEEP_TAIL: each stream kept its last `cap`
 * bytes; drop standard output's oldest bytes first, then standard error's,
 * until both together fit. */
static void capture_trim_shared(capture *out, capture *errc)
{
	capture *order[2] = {out, errc};
	for (int i = 0; i < 2; i++) {
		size_t total = out->buf.len + errc->buf.len;
		if (total <= out->cap)
			return;
		capture *c = order[i];
		size_t drop = total - out->cap < c->buf.len ? total - out->cap : c->buf.len;
		memmove(c->buf.data, c->buf.data + drop, c->buf.len - drop);
		c->buf.len -= drop;
		if (c->buf.data)
			c->buf.data[c->buf.len] = '\0';
		c->overflowed = 1;
	}
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* One process_run: the request, its pipes, the two captures and how the
 * child ended. Every fd is -1 when closed. */
typedef struct run {
	const relay_process_request *req;
	unsigned flags;
	int merge;
	int in_pipe[2], out_pipe[2], err_pipe[2], exec_pipe[2];
	capture out, errc;
	pid_t pid;
	const char *in_data;
	size_t in_left;
	int exited, wstatus, killed;
} run;

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* In the child: its own process group (or session), fds 0..2 wired, the
 * working directory set, everything else closed, then exec. Never returns;
 * an errno that stops it goes up the exec-error pipe. */
static _Noreturn void run_child(const run *r)
{
	const relay_process_request *req = r->req;
	if (r->flags & RELAY_PROCESS_NEW_SESSION)
		setsid();
	else
		setpgid(0, 0);
	signal(SIGPIPE, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	int in_fd = req->stdin_fd >= 0 ? req->stdin_fd : r->in_pipe[0];
	if (in_fd < 0)
		in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int out_fd = req->stdout_fd >= 0 ? req->stdout_fd : r->out_pipe[1];
	int err_fd = r->merge ? out_fd : r->err_pipe[1];
	/* dup2 onto 0..2 in an order that cannot clobber a source. */
	int fds[3] = {fcntl(in_fd, F_DUPFD_CLOEXEC, 10), fcntl(out_fd, F_DUPFD_CLOEXEC, 10),
	              fcntl(err_fd, F_DUPFD_CLOEXEC, 10)};
	for (int i = 0; i < 3; i++)
		if (fds[i] < 0 || dup2(fds[i], i) < 0)
			_exit(126);
	if (req->cwd && chdir(req->cwd) != 0) {
		int e = errno;
		ssize_t ignored = write(r->exec_pipe[1], &e, sizeof e);
		(void)ignored;
		_exit(126);
	}
	/* Keep only 0..2 and the exec-error pipe (close-on-exec). */
	int keep = r->exec_pipe[1];
	if (keep != 3) {
		if (dup2(keep, 3) < 0)
			_exit(126);
		fcntl(3, F_SETFD, FD_CLOEXEC);
	}
	rs_close_from(4);
	if (req->envp)
		execvpe(req->argv[0], (char *const *)req->argv, (char *const *)req->envp);
	else
		execvp(req->argv[0], (char *const *)req->argv);
	int e = errno;
	ssize_t ignored = write(3, &e, sizeof e);
	(void)ignored;
	_exit(127);
}

/* Pipes, fork, and the exec-error pipe read: RELAY_OK once the program
 * runs, with the parent's ends non-blocking and the child's closed. */
static relay_status run_spawn(run *r, relay_error *err)
{
	const relay_process_request *req = r->req;
	if ((req->stdin_data && req->stdin_fd < 0 && pipe2(r->in_pipe, O_CLOEXEC) != 0) ||
	    (req->stdout_fd < 0 && pipe2(r->out_pipe, O_CLOEXEC) != 0) ||
	    (!r->merge && pipe2(r->err_pipe, O_CLOEXEC) != 0) || pipe2(r->exec_pipe, O_CLOEXEC) != 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot create pipes: %s", strerror(errno));
	r->out.fd = r->out_pipe[0];
	r->errc.fd = r->err_pipe[0];

	r->pid = fork();
	if (r->pid < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot fork: %s", strerror(errno));
	if (r->pid == 0)
		run_child(r);
	setpgid(r->pid, r->pid);
	close_fd(&r->exec_pipe[1]);
	int child_errno = 0;
	ssize_t n;
	do
		n = read(r->exec_pipe[0], &child_errno, sizeof child_errno);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof child_errno) {
		waitpid(r->pid, NULL, 0);
		r->pid = -1;
		return relay_error_set(err, child_errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO,
		                       child_errno, "cannot run %s: %s", req->argv[0], strerror(child_errno));
	}
	if (r->in_pipe[0] >= 0) {
		close_fd(&r->in_pipe[0]);
		set_nonblock(r->in_pipe[1]);
	}
	if (r->out_pipe[1] >= 0) {
		close_fd(&r->out_pipe[1]);
		set_nonblock(r->out.fd);
	}
	if (r->err_pipe[1] >= 0) {
		close_fd(&r->err_pipe[1]);
		set_nonblock(r->errc.fd);
	}
	r->in_data = req->stdin_data;
	r->in_left = r->in_pipe[1] >= 0 ? req->stdin_len : 0;
	if (r->in_pipe[1] >= 0 && r->in_left == 0)
		close_fd(&r->in_pipe[1]);
	return RELAY_OK;
}

static void run_kill(run *r)
{
	kill(-r->pid, SIGKILL);
	r->killed = 1;
}

/* Standard input is writable: write what fits, close it when all is
 * written or the program stopped reading. */
static void run_feed_stdin(run *r)
{
	ssize_t w = write(r->in_pipe[1], r->in_data, r->in_left);
	if (w > 0) {
		r->in_data += w;
		r->in_left -= (size_t)w;
	}
	if (w < 0 && errno != EAGAIN && errno != EINTR)
		r->in_left = 0;
	if (r->in_left == 0)
		close_fd(&r->in_pipe[1]);
}

/* One stream is readable: read a chunk into its capture (1 when bytes
 * came). Past the cap without keep_tail the group is killed. */
static int run_read(run *r, capture *c)
{
	char buf[65536];
	ssize_t n = read(c->fd, buf, sizeof buf);
	if (n > 0) {
		capture_add(c, buf, (size_t)n);
		if (c->overflowed && !c->keep_tail && !r->killed)
			run_kill(r);
		return 1;
	}
	if (n == 0 || (errno != EAGAIN && errno != EINTR))
		close_fd(&c->fd);
	return 0;
}

/* Poll the streams and standard input until the program ended and the
 * streams are drained; kills the group on timeout or cancel. */
static relay_status run_drain(run *r, process_cancel_fn cancelled, const void *cancel_ctx,
                              relay_process_result *res, relay_error *err)
{
	relay_status status = RELAY_OK;
	int64_t started = clock_monotonic_ms();
	for (;;) {
		if (!r->exited && waitpid(r->pid, &r->wstatus, WNOHANG) == r->pid)
			r->exited = 1;
		if (r->exited && r->out.fd < 0 && r->errc.fd < 0)
			break;
		struct pollfd pfd[3];
		int n = 0;
		if (r->out.fd >= 0)
			pfd[n++] = (struct pollfd){r->out.fd, POLLIN, 0};
		if (r->errc.fd >= 0)
			pfd[n++] = (struct pollfd){r->errc.fd, POLLIN, 0};
		if (r->in_pipe[1] >= 0)
			pfd[n++] = (struct pollfd){r->in_pipe[1], POLLOUT, 0};
		int rc = poll(pfd, (nfds_t)n, r->exited ? 0 : 100);
		if (rc < 0 && errno != EINTR) {
			status = relay_error_set(err, RELAY_E_IO, errno, "poll failed: %s", strerror(errno));
			break;
		}
		int progressed = 0;
		for (int i = 0; i < n && rc > 0; i++) {
			if (pfd[i].revents == 0)
				continue;
			if (pfd[i].fd == r->in_pipe[1])
				run_feed_stdin(r);
			else if (run_read(r, pfd[i].fd == r->out.fd ? &r->out : &r->errc))
				progressed = 1;
		}
		if (r->exited && !progressed) {
			/* The program ended; descendants holding the pipes do not
			 * keep us waiting. What was readable has been read. */
			close_fd(&r->out.fd);
			close_fd(&r->errc.fd);
		}
		if (!r->exited && !r->killed && r->req->timeout_ms &&
		    (uint64_t)(clock_monotonic_ms() - started) >= r->req->timeout_ms) {
			run_kill(r);
			res->timed_out = 1;
		}
		if (!r->exited && !r->killed && cancelled && cancelled(cancel_ctx)) {
			run_kill(r);
			status = relay_error_set(err, RELAY_E_CANCELLED, 0, "cancelled while %s was running",
			                         r->req->argv[0]);
		}
	}
	return status;
}

/* Reap the program, confirm its group is gone, and hand the captures to
 * the result. `status` is what the drain returned; it is kept unless
 * memory runs out first. */
static relay_status run_finish(run *r, relay_status status, relay_process_result *res, relay_error *err)
{
	if (!r->exited)
		waitpid(r->pid, &r->wstatus, 0);
	if (WIFEXITED(r->wstatus)) {
		res->exit_code = WEXITSTATUS(r->wstatus);
	} else if (WIFSIGNALED(r->wstatus)) {
		res->signal = WTERMSIG(r->wstatus);
		res->exit_code = -1;
	}
	if (r->killed)
		kill(-r->pid, SIGKILL);
	res->termination_confirmed = process_group_gone(r->pid, r->killed ? 1000 : 0);
	r->pid = -1;
	capture_finish(&r->out);
	capture_finish(&r->errc);
	if ((r->flags & RELAY_PROCESS_SHARED_CAP) && r->out.keep_tail)
		capture_trim_shared(&r->out, &r->errc);
	res->output_truncated = r->out.overflowed || r->errc.overflowed;
	if (r->req->stdout_fd < 0) {
		res->out = strbuf_detach(&r->out.buf, &res->out_len);
		if (res->out == NULL && status == RELAY_OK)
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	if (!r->merge) {
		res->err = strbuf_detach(&r->errc.buf, &res->err_len);
		if (res->err == NULL && status == RELAY_OK)
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	return status;
}

relay_status process_run(const relay_process_request *req, process_cancel_fn cancelled,
                         const void *cancel_ctx, unsigned flags, relay_process_result *res, relay_error *err)
{
	if (flags & ~PROCESS_KNOWN_FLAGS)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown process flags 0x%x",
		                       flags);
	if (req == NULL || req->argv == NULL || req->argv[0] == NULL || res == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "process_run needs argv and a result");
	uint32_t res_size = res->struct_size;
	memset(res, 0, res_size < sizeof *res ? res_size : sizeof *res);
	res->struct_size = res_size;
	res->exit_code = -1;

	size_t cap = req->max_output_bytes ? req->max_output_bytes : 65536;
	int keep_tail = (flags & RELAY_PROCESS_KEEP_TAIL) != 0;
	run r = {
	    .req = req,
	    .flags = flags,
	    .merge = (flags & RELAY_PROCESS_MERGE_OUTPUT) != 0,
	    .in_pipe = {-1, -1},
	    .out_pipe = {-1, -1},
	    .err_pipe = {-1, -1},
	    .exec_pipe = {-1, -1},
	    .out = {-1, STRBUF_INIT, cap, keep_tail, 0, NULL},
	    .errc = {-1, STRBUF_INIT, cap, keep_tail, 0, NULL},
	    .pid = -1,
	};
	if (flags & RELAY_PROCESS_SHARED_CAP) {
		r.out.peer = &r.errc;
		r.errc.peer = &r.out;
	}
	relay_status status = run_spawn(&r, err);
	if (status != RELAY_OK)
		goto cleanup;
	status = run_drain(&r, cancelled, cancel_ctx, res, err);
	status = run_finish(&r, status, res, err);
cleanup:
	if (r.pid > 0) {
		kill(-r.pid, SIGKILL);
		waitpid(r.pid, NULL, 0);
	}
	int *all[] = {&r.in_pipe[0],   &r.in_pipe[1],   &r.out_pipe[1], &r.err_pipe[1],
	              &r.exec_pipe[0], &r.exec_pipe[1], &r.out.fd,      &r.errc.fd};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		close_fd(all[i]);
	strbuf_free(&r.out.buf);
	strbuf_free(&r.errc.buf);
	return status;
}
