/* durable.c — whole-file replacement (relay_kit/durable.h). */
#include "relay_kit/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "relay_kit/clock.h"
#include "relay_support/fds.h"

static int fsync_parent(const char *path)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		snprintf(dir, sizeof dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	int rc = fsync(fd) == 0 ? 0 : errno;
	close(fd);
	return rc;
}

int rk_write_durable(const char *path, const void *data, size_t len, mode_t mode, unsigned flags)
{
	if (flags & ~(unsigned)RK_DURABLE_SYNC)
		return EINVAL;
	char tmp[PATH_MAX];
	unsigned long long salt = (unsigned long long)rk_monotonic_ms() ^
	                          ((unsigned long long)getpid() << 20) ^ (unsigned long long)(uintptr_t)&salt;
	int n = snprintf(tmp, sizeof tmp, "%s.tmp-%llx", path, salt);
	if (n < 0 || (size_t)n >= sizeof tmp)
		return ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return errno;
	int rc = rs_write_all(fd, data, len) == 0 ? 0 : errno;
	if (rc == 0 && (flags & RK_DURABLE_SYNC) && fsync(fd) != 0)
		rc = errno;
	if (close(fd) != 0 && rc == 0)
		rc = errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = errno;
	if (rc != 0) {
		unlink(tmp);
		return rc;
	}
	return (flags & RK_DURABLE_SYNC) ? fsync_parent(path) : 0;
}
