/* lutil.c — small helpers of machine-local (local.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "local.h"
#include "relay_support/json_get.h"
#include "relay_support/tree.h"
#include "relay_support/which.h"

/* The search path of lu_find_program when PATH is unset or empty. */
#define LU_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

int lu_write_json_durable(const char *path, json_object *obj, bool sync)
{
	const char *text = json_object_to_json_string_ext(
	    obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (text == NULL)
		return ENOMEM;
	size_t len = strlen(text);
	char *buf = malloc(len + 2);
	if (buf == NULL)
		return ENOMEM;
	memcpy(buf, text, len);
	buf[len] = '\n';
	int rc = lu_write_durable(path, buf, len + 1, 0600, sync);
	free(buf);
	return rc;
}

json_object *lu_read_json(const char *path, size_t max_bytes, int *errno_out)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno_out)
			*errno_out = errno;
		return NULL;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size > max_bytes) {
		close(fd);
		if (errno_out)
			*errno_out = EINVAL;
		return NULL;
	}
	char *buf = malloc((size_t)sb.st_size + 1);
	if (buf == NULL) {
		close(fd);
		if (errno_out)
			*errno_out = ENOMEM;
		return NULL;
	}
	size_t got = 0;
	while (got < (size_t)sb.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	buf[got] = '\0';
	json_object *obj = json_tokener_parse(buf);
	free(buf);
	if (obj == NULL && errno_out)
		*errno_out = EINVAL;
	return obj;
}

int lu_remove_tree(const char *path)
{
	return rs_remove_tree(path, NULL) == 0 ? 0 : errno;
}

int lu_mkdir_p(const char *path, mode_t mode)
{
	return rs_mkdir_p(path, mode, 0, NULL) == 0 ? 0 : errno;
}

int lu_pidfd_checked(pid_t pid, unsigned long long start)
{
	if (pid <= 0)
		return -1;
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -1;
	if (!lu_proc_alive(pid, start)) {
		close(fd);
		errno = ESRCH;
		return -1;
	}
	return fd;
}

unsigned long long lu_ns_inode(pid_t pid, const char *name)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, name);
	struct stat sb;
	if (stat(path, &sb) != 0)
		return 0;
	return (unsigned long long)sb.st_ino;
}

void lu_spawn_detached_init(posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr, int log_fd)
{
	posix_spawn_file_actions_init(fa);
	posix_spawnattr_init(attr);
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(attr, &none);
	posix_spawnattr_setsigdefault(attr, &all);
	posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(fa, log_fd, 1);
	posix_spawn_file_actions_adddup2(fa, log_fd, 2);
}

int lu_read_line_until(int fd, char *line, size_t size, int64_t until)
{
	size_t n = 0;
	for (;;) {
		int left = (int)(until - lu_monotonic_ms());
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd pfd = {fd, POLLIN, 0};
		int rc = poll(&pfd, 1, left);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			continue;
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			errno = EPIPE;
			return -1;
		}
		if (c == '\n') {
			line[n] = '\0';
			return 0;
		}
		if (n + 1 < size)
			line[n++] = c;
	}
}

char *lu_find_program(const char *name)
{
	const char *path = getenv("PATH");
	return rs_which(name, path != NULL && *path != '\0' ? path : LU_DEFAULT_PATH);
}

bool lu_valid_guest_name(const char *name)
{
	if (name == NULL || !(islower((unsigned char)name[0]) || isdigit((unsigned char)name[0])))
		return false;
	size_t len = strlen(name);
	if (len > 48)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if (!(islower(c) || isdigit(c) || c == '-'))
			return false;
	}
	return true;
}

bool lu_valid_token(const char *text, size_t max)
{
	if (text == NULL || !isalnum((unsigned char)text[0]))
		return false;
	size_t len = strlen(text);
	if (len > max)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		if (!(isalnum(c) || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

void lu_tree_path(char *out, size_t size, const char *tree, const char *rel)
{
	if (strcmp(tree, "/") == 0)
		snprintf(out, size, "/%s", rel);
	else
		snprintf(out, size, "%s/%s", tree, rel);
}

char *lu_read_small(const char *path, size_t max, size_t *len_out)
{
	*len_out = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = malloc(max + 1);
	if (buf == NULL) {
		close(fd);
		return NULL;
	}
	size_t got = 0;
	ssize_t n;
	while (got < max && (n = read(fd, buf + got, max - got)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	*len_out = got;
	return buf;
}
