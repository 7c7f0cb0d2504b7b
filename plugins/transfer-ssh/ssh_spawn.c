#include "ssh_spawn.h"

#include "relay_kit/buf.h"
#include "relay_support/fds.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#ifdef MSG_NOSIGNAL
#define SSH_SEND_FLAGS MSG_NOSIGNAL
#else
#define SSH_SEND_FLAGS 0
#endif

static int set_cloexec_nonblock(int fd, bool nonblock)
{
	int fdfl = fcntl(fd, F_GETFD);
	if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) != 0)
		return -1;
	if (!nonblock)
		return 0;
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Pipes and sockets are created close-on-exec atomically where the system
 * can (Linux), so a child started by another thread never inherits them. */
static int make_pipe(int fds[2])
{
#ifdef __linux__
	return pipe2(fds, O_CLOEXEC);
#else
	if (pipe(fds) != 0)
		return -1;
	set_cloexec_nonblock(fds[0], false);
	set_cloexec_nonblock(fds[1], false);
	return 0;
#endif
}

static int make_socketpair(int fds[2])
{
#ifdef SOCK_CLOEXEC
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
		return -1;
#else
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
		return -1;
	set_cloexec_nonblock(fds[0], false);
	set_cloexec_nonblock(fds[1], false);
#endif
#ifdef SO_NOSIGPIPE
	int one = 1;
	setsockopt(fds[0], SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

relay_status ssh_child_start(const relay_host *host, const char *const *argv, ssh_child *c, relay_error *err)
{
	relay_status status = RELAY_OK;
	int in_sock[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
	*c = (ssh_child){.pid = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1};

	if (make_socketpair(in_sock) != 0 || make_pipe(out_pipe) != 0 || make_pipe(err_pipe) != 0 ||
	    make_pipe(exec_pipe) != 0) {
		status = host->error_set(err, RELAY_E_IO, errno, "cannot create pipes for ssh: %s",
		                         strerror(errno));
		goto cleanup;
	}
	pid_t pid = fork();
	if (pid < 0) {
		status =
		    host->error_set(err, RELAY_E_IO, errno, "cannot fork to start ssh: %s", strerror(errno));
		goto cleanup;
	}
	if (pid == 0) {
		/* Child: async-signal-safe calls only until exec. */
		setpgid(0, 0);
		struct sigaction dfl;
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		sigaction(SIGPIPE, &dfl, NULL);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		/* Move every source above 2 first so dup2 cannot clobber one. */
		int fds[4] = {fcntl(in_sock[1], F_DUPFD_CLOEXEC, 10), fcntl(out_pipe[1], F_DUPFD_CLOEXEC, 10),
		              fcntl(err_pipe[1], F_DUPFD_CLOEXEC, 10),
		              fcntl(exec_pipe[1], F_DUPFD_CLOEXEC, 10)};
		for (int i = 0; i < 3; i++)
			if (fds[i] < 0 || dup2(fds[i], i) < 0)
				_exit(126);
		if (fds[3] < 0 || dup2(fds[3], 3) < 0)
			_exit(126);
		fcntl(3, F_SETFD, FD_CLOEXEC);
		rs_close_from(4);
		execvp(argv[0], (char *const *)argv);
		int e = errno;
		ssize_t ignored = write(3, &e, sizeof e);
		(void)ignored;
		_exit(127);
	}
	setpgid(pid, pid);
	c->pid = pid;
	close_fd(&in_sock[1]);
	close_fd(&out_pipe[1]);
	close_fd(&err_pipe[1]);
	close_fd(&exec_pipe[1]);
	{
		int child_errno = 0;
		ssize_t n;
		do
			n = read(exec_pipe[0], &child_errno, sizeof child_errno);
		while (n < 0 && errno == EINTR);
		if (n == (ssize_t)sizeof child_errno) {
			waitpid(pid, NULL, 0);
			c->pid = -1;
			status = host->error_set(
			    err, child_errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, child_errno,
			    "cannot run %s: %s; install the OpenSSH client or set the plugin "
			    "option \"ssh\" to its path",
			    argv[0], strerror(child_errno));
			goto cleanup;
		}
	}
	/* A deep send buffer lets a stream run ahead of ssh's reads. */
	int sndbuf = 1 << 20;
	setsockopt(in_sock[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
	c->in_fd = in_sock[0];
	c->out_fd = out_pipe[0];
	c->err_fd = err_pipe[0];
	in_sock[0] = out_pipe[0] = err_pipe[0] = -1;
	if (set_cloexec_nonblock(c->in_fd, true) != 0 || set_cloexec_nonblock(c->out_fd, true) != 0 ||
	    set_cloexec_nonblock(c->err_fd, true) != 0) {
		status = host->error_set(err, RELAY_E_IO, errno, "cannot configure the pipes to ssh: %s",
		                         strerror(errno));
		ssh_child_destroy(c);
		goto cleanup;
	}
cleanup:
	close_fd(&in_sock[0]);
	close_fd(&in_sock[1]);
	close_fd(&out_pipe[0]);
	close_fd(&out_pipe[1]);
	close_fd(&err_pipe[0]);
	close_fd(&err_pipe[1]);
	close_fd(&exec_pipe[0]);
	close_fd(&exec_pipe[1]);
	return status;
}

static void reap(ssh_child *c, bool block)
{
	if (c->exited || c->pid <= 0)
		return;
	pid_t w;
	do
		w = waitpid(c->pid, &c->wstatus, block ? 0 : WNOHANG);
	while (w < 0 && errno == EINTR);
	if (w == c->pid) {
		c->exited = true;
	} else if (w < 0 && errno == ECHILD) {
		/* Reaped elsewhere (SIGCHLD ignored): the status is unknown. */
		c->exited = true;
		c->wstatus = -1;
	}
}

/* Reads once from *fd into the sink or the caller's buffer; closes at EOF. */
static void read_stream(int *fd, ssh_io *io, bool is_out)
{
	char chunk[65536];
	char *dst = chunk;
	size_t room = sizeof chunk;
	if (is_out && io->out_buf) {
		dst = io->out_buf + io->out_got;
		room = io->out_cap - io->out_got;
		if (room == 0)
			return;
	}
	ssize_t r = read(*fd, dst, room);
	if (r > 0) {
		if (is_out && io->out_buf)
			io->out_got += (size_t)r;
		else if (is_out && io->on_out)
			io->on_out(io->ctx, chunk, (size_t)r);
		else if (!is_out && io->on_err)
			io->on_err(io->ctx, chunk, (size_t)r);
		return;
	}
	if (r == 0 || (errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK))
		close_fd(fd);
}

relay_status ssh_child_step(const relay_host *host, ssh_child *c, ssh_io *io, int wait_ms, relay_error *err)
{
	struct pollfd pfd[3];
	int n = 0, in_i = -1, out_i = -1, err_i = -1;
	bool want_out = c->out_fd >= 0 && (!io->out_buf || io->out_got < io->out_cap);
	if (c->in_fd >= 0 && io->in_len > 0) {
		in_i = n;
		pfd[n++] = (struct pollfd){c->in_fd, POLLOUT, 0};
	}
	if (want_out) {
		out_i = n;
		pfd[n++] = (struct pollfd){c->out_fd, POLLIN, 0};
	}
	if (c->err_fd >= 0) {
		err_i = n;
		pfd[n++] = (struct pollfd){c->err_fd, POLLIN, 0};
	}
	if (n == 0) {
		/* Nothing to watch: wait for the child itself, checking often
		 * at first (ssh exits right after closing its output). */
		for (int slept = 0, step = 1; !c->exited; slept += step, step *= 2) {
			reap(c, false);
			if (c->exited || slept >= wait_ms || slept >= 20)
				break;
			struct pollfd none;
			poll(&none, 0, step);
		}
		return RELAY_OK;
	}
	int rc = poll(pfd, (nfds_t)n, wait_ms);
	if (rc < 0) {
		if (errno == EINTR)
			return RELAY_OK;
		return host->error_set(err, RELAY_E_IO, errno, "cannot wait for ssh: %s", strerror(errno));
	}
	if (in_i >= 0 && pfd[in_i].revents) {
		ssize_t w = send(c->in_fd, io->in_data, io->in_len, SSH_SEND_FLAGS);
		if (w > 0) {
			io->in_data += w;
			io->in_len -= (size_t)w;
		} else if (w < 0 && errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK) {
			io->in_broken = true;
			close_fd(&c->in_fd);
		}
	}
	if (out_i >= 0 && pfd[out_i].revents)
		read_stream(&c->out_fd, io, true);
	if (err_i >= 0 && pfd[err_i].revents)
		read_stream(&c->err_fd, io, false);
	reap(c, false);
	return RELAY_OK;
}

bool ssh_child_try_send(ssh_child *c, ssh_io *io)
{
	if (c->in_fd < 0 || io->in_len == 0)
		return false;
	ssize_t w = send(c->in_fd, io->in_data, io->in_len, SSH_SEND_FLAGS | MSG_DONTWAIT);
	if (w > 0) {
		io->in_data += w;
		io->in_len -= (size_t)w;
		return true;
	}
	if (w < 0 && errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK) {
		io->in_broken = true;
		close_fd(&c->in_fd);
	}
	return false;
}

bool ssh_child_alive(ssh_child *c, rk_buf *err_text)
{
	reap(c, false);
	bool alive = !c->exited && c->out_fd >= 0 && c->err_fd >= 0;
	bool err_ready = !alive;
	if (alive) {
		struct pollfd p[2] = {{c->out_fd, POLLIN, 0}, {c->err_fd, POLLIN, 0}};
		if (poll(p, 2, 0) > 0) {
			if ((p[0].revents | p[1].revents) & (POLLHUP | POLLERR))
				alive = false;
			err_ready = (p[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
		}
	}
	if (err_ready && c->err_fd >= 0) {
		char chunk[4096];
		ssize_t r = read(c->err_fd, chunk, sizeof chunk);
		if (r > 0)
			rk_buf_append(err_text, chunk, (size_t)r);
	}
	return alive;
}

void ssh_child_close_stdin(ssh_child *c)
{
	if (c->in_fd >= 0)
		shutdown(c->in_fd, SHUT_WR);
	close_fd(&c->in_fd);
}

bool ssh_child_done(const ssh_child *c)
{
	return c->exited && c->out_fd < 0 && c->err_fd < 0;
}

void ssh_child_destroy(ssh_child *c)
{
	if (c->pid > 0 && !c->exited) {
		kill(c->pid, SIGKILL);
		kill(-c->pid, SIGKILL);
		reap(c, true);
	}
	close_fd(&c->in_fd);
	close_fd(&c->out_fd);
	close_fd(&c->err_fd);
}

int ssh_child_exit_code(const ssh_child *c)
{
	if (!c->exited || !WIFEXITED(c->wstatus))
		return -1;
	return WEXITSTATUS(c->wstatus);
}

int64_t ssh_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
