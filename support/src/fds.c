#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* MSG_CMSG_CLOEXEC, SOCK_CLOEXEC */
#endif
#include "relay_support/fds.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int rs_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds, int msg_flags)
{
	if (nfds < 0 || nfds > RS_FDS_MAX) {
		errno = EINVAL;
		return -1;
	}
	struct iovec iov = {(void *)buf, len};
	struct msghdr mh;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * RS_FDS_MAX)];
	} control;
	if (nfds > 0) {
		memset(&control, 0, sizeof control);
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		ssize_t w = sendmsg(sock, &mh, msg_flags | MSG_NOSIGNAL);
		if (w == (ssize_t)len)
			return 0;
		if (w < 0 && errno == EINTR)
			continue;
		if (w >= 0)
			errno = EIO;
		return -1;
	}
}

ssize_t rs_recv_fds(int sock, void *buf, size_t cap, int msg_flags, int *fds, int max, int *nfds,
                    int *truncated)
{
	*nfds = 0;
	if (truncated)
		*truncated = 0;
	struct iovec iov = {buf, cap};
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * RS_FDS_MAX)];
	} control;
	struct msghdr mh;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = control.buf;
	mh.msg_controllen = sizeof control.buf;
	ssize_t n;
	do
		n = recvmsg(sock, &mh, msg_flags | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	int extra = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t k = 0; k < count; k++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
			if (*nfds < max)
				fds[(*nfds)++] = fd;
			else {
				close(fd);
				extra = 1;
			}
		}
	}
	if (truncated)
		*truncated = extra || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
	return n;
}

int rs_loopback_socket(int type, int port)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    (type == SOCK_STREAM && listen(fd, 1024) != 0)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

void rs_close_from(int lowfd)
{
#if defined(__linux__) && defined(SYS_close_range)
	if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0u) == 0)
		return;
#endif
	long max = sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 65536)
		max = 65536;
	for (int fd = lowfd; fd < max; fd++)
		close(fd);
}

int rs_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
