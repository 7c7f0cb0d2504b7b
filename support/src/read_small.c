/* read_small.c — a small file read whole in one read(2) (relay_support/read_small.h). */
#include "relay_support/read_small.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

ssize_t rs_read_small(const char *path, int open_flags, char *buf, size_t size)
{
	buf[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC | open_flags);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	int saved = errno;
	close(fd);
	if (n < 0) {
		errno = saved;
		return -1;
	}
	buf[n] = '\0';
	return n;
}
