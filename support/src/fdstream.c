/*
 * fdstream.c — see relay_support/fdstream.h.
 */
#include "relay_support/fdstream.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

ssize_t rs_fd_write_some(int fd, const void *data, size_t len)
{
	ssize_t n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	sigset_t pipe_set, old;
	int e;
	if (n >= 0 || errno != ENOTSOCK)
		return n;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	n = write(fd, data, len);
	e = errno;
	if (n < 0 && e == EPIPE) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return n;
}

/* Waits until fd is ready for `events` or the deadline passes. 0 ready,
 * -1 with errno ETIMEDOUT or poll's. */
static int wait_ready(int fd, short events, int64_t deadline_ms)
{
	for (;;) {
		int64_t left = deadline_ms - monotonic_ms();
		struct pollfd p;
		int r;
		if (left < 0)
			left = 0;
		p.fd = fd;
		p.events = events;
		p.revents = 0;
		r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
		if (r == 0 && monotonic_ms() >= deadline_ms) {
			errno = ETIMEDOUT;
			return -1;
		}
	}
}

int rs_fd_write_all(int fd, const void *data, size_t len, int64_t timeout_ms)
{
	const char *p = data;
	size_t sent = 0;
	int64_t deadline = monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	while (sent < len) {
		ssize_t n = rs_fd_write_some(fd, p + sent, len - sent);
		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (wait_ready(fd, POLLOUT, deadline) != 0)
				return -1;
			continue;
		}
		if (n == 0)
			errno = EPIPE;
		return -1;
	}
	return 0;
}

ssize_t rs_fd_read_wait(int fd, void *buf, size_t cap, int64_t timeout_ms)
{
	int64_t deadline = monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		ssize_t n;
		if (wait_ready(fd, POLLIN, deadline) != 0)
			return -1;
		n = read(fd, buf, cap);
		if (n >= 0)
			return n;
		if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (monotonic_ms() >= deadline) {
			errno = ETIMEDOUT;
			return -1;
		}
	}
}
