/*
 * relay_support/fdstream.h — a byte stream over two descriptors (a pipe or
 * socket to a child's standard input, one from its standard output) with
 * deadlines: what every transport's long-lived stream (relay/transport.h,
 * RELAY_TRANSPORT_STREAM) does under its own connection set-up.
 */
#ifndef RELAY_SUPPORT_FDSTREAM_H
#define RELAY_SUPPORT_FDSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes all `len` bytes to `fd` (blocking or not) within timeout_ms
 * milliseconds (the deadline holds for a non-blocking `fd`; a blocking one
 * may wait in write itself). Never raises SIGPIPE: a socket is written with
 * MSG_NOSIGNAL, anything else with SIGPIPE blocked in the calling thread
 * (a pending one is consumed). 0, or -1 with errno ETIMEDOUT (the reader
 * did not take the bytes in time), EPIPE (the reader is gone) or what
 * poll or write set; some bytes may have been written after a failure. */
int rs_fd_write_all(int fd, const void *data, size_t len, int64_t timeout_ms);

/* One write(2) of at most `len` bytes that cannot raise SIGPIPE, as
 * rs_fd_write_all does it (a socket without waiting). The count, or -1 with
 * errno (EPIPE: the reader is gone; EAGAIN: a non-blocking `fd` is full). */
ssize_t rs_fd_write_some(int fd, const void *data, size_t len);

/* Waits up to timeout_ms milliseconds (0: not at all) for `fd` to be
 * readable and reads at most `cap` bytes into `buf`. The count (> 0),
 * 0 at end of file, or -1 with errno ETIMEDOUT (nothing arrived) or what
 * poll or read set. */
ssize_t rs_fd_read_wait(int fd, void *buf, size_t cap, int64_t timeout_ms);

#endif
