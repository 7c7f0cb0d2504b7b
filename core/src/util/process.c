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

#include "util/clock.h"
#include "util/error.h"
#include "util/strbuf.h"

#define PROCESS_KNOWN_FLAGS                                                                                  \
	(RELAY_PROCESS_MERGE_OUTPUT | RELAY_PROCESS_KEEP_TAIL | RELAY_PROCESS_NEW_SESSION | RELAY_PROCESS_SHARED_CAP)

void process_close_from(int lowfd)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0u) == 0)
		return;
#endif
	long max = sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 65536)
		max = 65536;
	for (int fd = lowfd; fd < max; fd++)
		close(fd);
}

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

relay_status process_run(const relay_process_request *req, process_cancel_fn cancelled, const void *cancel_ctx,
			 unsigned flags, relay_process_result *res, relay_error *err)
{
	if (flags & ~PROCESS_KNOWN_FLAGS)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown process flags 0x%x", flags);
	if (req == NULL || req->argv == NULL || req->argv[0] == NULL || res == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "process_run needs argv and a result");
	uint32_t res_size = res->struct_size;
	memset(res, 0, res_size < sizeof *res ? res_size : sizeof *res);
	res->struct_size = res_size;
	res->exit_code = -1;

	relay_status status = RELAY_OK;
	int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
	int merge = (flags & RELAY_PROCESS_MERGE_OUTPUT) != 0;
	size_t cap = req->max_output_bytes ? req->max_output_bytes : 65536;
	capture out = {-1, STRBUF_INIT, cap, (flags & RELAY_PROCESS_KEEP_TAIL) != 0, 0, NULL};
	capture errc = {-1, STRBUF_INIT, cap, (flags & RELAY_PROCESS_KEEP_TAIL) != 0, 0, NULL};
	if (flags & RELAY_PROCESS_SHARED_CAP) {
		out.peer = &errc;
		errc.peer = &out;
	}
	pid_t pid = -1;

	if ((req->stdin_data && req->stdin_fd < 0 && pipe2(in_pipe, O_CLOEXEC) != 0) ||
	    (req->stdout_fd < 0 && pipe2(out_pipe, O_CLOEXEC) != 0) || (!merge && pipe2(err_pipe, O_CLOEXEC) != 0) ||
	    pipe2(exec_pipe, O_CLOEXEC) != 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot create pipes: %s", strerror(errno));
		goto cleanup;
	}
	out.fd = out_pipe[0];
	errc.fd = err_pipe[0];

	pid = fork();
	if (pid < 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot fork: %s", strerror(errno));
		goto cleanup;
	}
	if (pid == 0) {
		if (flags & RELAY_PROCESS_NEW_SESSION)
			setsid();
		else
			setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		int in_fd = req->stdin_fd >= 0 ? req->stdin_fd : in_pipe[0];
		if (in_fd < 0)
			in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		int out_fd = req->stdout_fd >= 0 ? req->stdout_fd : out_pipe[1];
		int err_fd = merge ? out_fd : err_pipe[1];
		/* dup2 onto 0..2 in an order that cannot clobber a source. */
		int fds[3] = {fcntl(in_fd, F_DUPFD_CLOEXEC, 10), fcntl(out_fd, F_DUPFD_CLOEXEC, 10),
			      fcntl(err_fd, F_DUPFD_CLOEXEC, 10)};
		for (int i = 0; i < 3; i++)
			if (fds[i] < 0 || dup2(fds[i], i) < 0)
				_exit(126);
		if (req->cwd && chdir(req->cwd) != 0) {
			int e = errno;
			ssize_t ignored = write(exec_pipe[1], &e, sizeof e);
			(void)ignored;
			_exit(126);
		}
		/* Keep only 0..2 and the exec-error pipe (close-on-exec). */
		int keep = exec_pipe[1];
		if (keep != 3) {
			if (dup2(keep, 3) < 0)
				_exit(126);
			fcntl(3, F_SETFD, FD_CLOEXEC);
		}
		process_close_from(4);
		if (req->envp)
			execvpe(req->argv[0], (char *const *)req->argv, (char *const *)req->envp);
		else
			execvp(req->argv[0], (char *const *)req->argv);
		int e = errno;
		ssize_t ignored = write(3, &e, sizeof e);
		(void)ignored;
		_exit(127);
	}
	setpgid(pid, pid);
	close(exec_pipe[1]);
	exec_pipe[1] = -1;
	{
		int child_errno = 0;
		ssize_t n;
		do
			n = read(exec_pipe[0], &child_errno, sizeof child_errno);
		while (n < 0 && errno == EINTR);
		if (n == (ssize_t)sizeof child_errno) {
			waitpid(pid, NULL, 0);
			pid = -1;
			status = relay_error_set(err, child_errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, child_errno,
						 "cannot run %s: %s", req->argv[0], strerror(child_errno));
			goto cleanup;
		}
	}
	if (in_pipe[0] >= 0) {
		close(in_pipe[0]);
		in_pipe[0] = -1;
		set_nonblock(in_pipe[1]);
	}
	if (out_pipe[1] >= 0) {
		close(out_pipe[1]);
		out_pipe[1] = -1;
		set_nonblock(out.fd);
	}
	if (err_pipe[1] >= 0) {
		close(err_pipe[1]);
		err_pipe[1] = -1;
		set_nonblock(errc.fd);
	}

	const char *in_data = req->stdin_data;
	size_t in_left = in_pipe[1] >= 0 ? req->stdin_len : 0;
	if (in_pipe[1] >= 0 && in_left == 0) {
		close(in_pipe[1]);
		in_pipe[1] = -1;
	}
	int64_t started = clock_monotonic_ms();
	int exited = 0, wstatus = 0, killed = 0;
	for (;;) {
		if (!exited) {
			pid_t w = waitpid(pid, &wstatus, WNOHANG);
			if (w == pid)
				exited = 1;
		}
		if (exited && out.fd < 0 && errc.fd < 0)
			break;
		struct pollfd pfd[3];
		int n = 0;
		if (out.fd >= 0)
			pfd[n++] = (struct pollfd){out.fd, POLLIN, 0};
		if (errc.fd >= 0)
			pfd[n++] = (struct pollfd){errc.fd, POLLIN, 0};
		if (in_pipe[1] >= 0)
			pfd[n++] = (struct pollfd){in_pipe[1], POLLOUT, 0};
		int timeout = exited ? 0 : 100;
		int rc = poll(pfd, (nfds_t)n, timeout);
		if (rc < 0 && errno != EINTR) {
			status = relay_error_set(err, RELAY_E_IO, errno, "poll failed: %s", strerror(errno));
			break;
		}
		int progressed = 0;
		for (int i = 0; i < n && rc > 0; i++) {
			if (pfd[i].revents == 0)
				continue;
			if (pfd[i].fd == in_pipe[1]) {
				ssize_t w = write(in_pipe[1], in_data, in_left);
				if (w > 0) {
					in_data += w;
					in_left -= (size_t)w;
				}
				if (w < 0 && errno != EAGAIN && errno != EINTR)
					in_left = 0;
				if (in_left == 0) {
					close(in_pipe[1]);
					in_pipe[1] = -1;
				}
				continue;
			}
			capture *c = pfd[i].fd == out.fd ? &out : &errc;
			char buf[65536];
			ssize_t r = read(c->fd, buf, sizeof buf);
			if (r > 0) {
				progressed = 1;
				capture_add(c, buf, (size_t)r);
				if (c->overflowed && !c->keep_tail && !killed) {
					kill(-pid, SIGKILL);
					killed = 1;
				}
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				close(c->fd);
				c->fd = -1;
			}
		}
		if (exited && !progressed) {
			/* The program ended; descendants holding the pipes do not
			 * keep us waiting. What was readable has been read. */
			if (out.fd >= 0) {
				close(out.fd);
				out.fd = -1;
			}
			if (errc.fd >= 0) {
				close(errc.fd);
				errc.fd = -1;
			}
		}
		if (!exited && !killed && req->timeout_ms &&
		    (uint64_t)(clock_monotonic_ms() - started) >= req->timeout_ms) {
			kill(-pid, SIGKILL);
			killed = 1;
			res->timed_out = 1;
		}
		if (!exited && !killed && cancelled && cancelled(cancel_ctx)) {
			kill(-pid, SIGKILL);
			killed = 1;
			status = relay_error_set(err, RELAY_E_CANCELLED, 0, "cancelled while %s was running",
						 req->argv[0]);
		}
	}
	if (!exited)
		waitpid(pid, &wstatus, 0);
	if (WIFEXITED(wstatus)) {
		res->exit_code = WEXITSTATUS(wstatus);
	} else if (WIFSIGNALED(wstatus)) {
		res->signal = WTERMSIG(wstatus);
		res->exit_code = -1;
	}
	if (killed)
		kill(-pid, SIGKILL);
	res->termination_confirmed = process_group_gone(pid, killed ? 1000 : 0);
	pid = -1;
	capture_finish(&out);
	capture_finish(&errc);
	if ((flags & RELAY_PROCESS_SHARED_CAP) && out.keep_tail)
		capture_trim_shared(&out, &errc);
	res->output_truncated = out.overflowed || errc.overflowed;
	if (req->stdout_fd < 0) {
		res->out = strbuf_detach(&out.buf, &res->out_len);
		if (res->out == NULL && status == RELAY_OK)
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	if (!merge) {
		res->err = strbuf_detach(&errc.buf, &res->err_len);
		if (res->err == NULL && status == RELAY_OK)
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
cleanup:
	if (pid > 0) {
		kill(-pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	int all[] = {in_pipe[0], in_pipe[1], out_pipe[1], err_pipe[1], exec_pipe[0], exec_pipe[1], out.fd, errc.fd};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i] >= 0)
			close(all[i]);
	strbuf_free(&out.buf);
	strbuf_free(&errc.buf);
	return status;
}
