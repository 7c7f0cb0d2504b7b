/*
 * relay_support/fds.h — descriptors passed over a unix socket
 * (SCM_RIGHTS), and a socket bound to the loopback address: the plumbing of
 * a guest's control socket and of the egress sockets made in its network
 * namespace. Only async-signal-safe calls, so a child of a threaded process
 * may use them before it execs or exits.
 */
#ifndef RELAY_SUPPORT_SOCKETS_H
#define RELAY_SUPPORT_SOCKETS_H

#include <stddef.h>
#include <sys/types.h>

/* The most descriptors one message carries. */
#define RS_FDS_MAX 8

/* Sends len bytes of buf with nfds (0 to RS_FDS_MAX) descriptors of fds in
 * one message on sock, with msg_flags and MSG_NOSIGNAL; retried on EINTR.
 * 0 when all of buf went; -1 with errno otherwise (EIO for a short send,
 * EINVAL for too many descriptors). */
int rs_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds, int msg_flags);

/* Receives one message of at most cap bytes into buf on sock, with
 * msg_flags and MSG_CMSG_CLOEXEC; retried on EINTR. The descriptors it
 * carries go to fds, at most max of them (*nfds says how many; any further
 * ones are closed). *truncated (may be NULL) is 1 when the message had more
 * bytes or descriptors than fit. The byte count (0 at the end of the
 * stream), or -1 with errno (*nfds 0). */
ssize_t rs_recv_fds(int sock, void *buf, size_t cap, int msg_flags, int *fds, int max, int *nfds,
                    int *truncated);

/* A socket of `type` (SOCK_STREAM, listening, or SOCK_DGRAM), close-on-exec,
 * bound to 127.0.0.1:port with SO_REUSEADDR; the descriptor, or -1 with errno. */
int rs_loopback_socket(int type, int port);

/* Writes all len bytes of data to fd, retried on EINTR and short writes:
 * 0, or -1 with errno (EIO when write wrote nothing). */
int rs_write_all(int fd, const void *data, size_t len);

/* Closes every descriptor from lowfd up (close_range where the kernel has
 * it, else one close each up to the limit, at most 65,536). */
void rs_close_from(int lowfd);

#endif
