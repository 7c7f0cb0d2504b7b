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

relay_status lu_err(local_state *st, relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
{
	(void)st;
	if (err == NULL)
		return code;
	err->code = code;
	err->sys_errno = sys_errno;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	/* Name the system error unless the message already does. */
	if (sys_errno > 0) {
		const char *why = strerror(sys_errno);
		size_t len = strlen(err->message);
		if (strstr(err->message, why) == NULL && len + strlen(why) + 4 < sizeof err->message)
			snprintf(err->message + len, sizeof err->message - len, " (%s)", why);
	}
	return code;
}

void lu_textf(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, size, fmt, ap);
	va_end(ap);
}

char *lu_json_out(local_state *st, json_object *obj)
{
	const char *text =
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return text ? st->host->strdup(text) : NULL;
}

const char *lu_get_string(json_object *obj, const char *key)
{
	return rsj_get_str(obj, key);
}

int64_t lu_get_int(json_object *obj, const char *key, int64_t fallback)
{
	int64_t value;
	return rsj_get_int(obj, key, &value) ? value : fallback;
}

bool lu_get_bool(json_object *obj, const char *key, bool fallback)
{
	bool value;
	return rsj_get_bool(obj, key, &value) ? value : fallback;
}

json_object *lu_get_object(json_object *obj, const char *key)
{
	return rsj_get_obj(obj, key);
}

void lu_random_hex(local_state *st, char *out, size_t hex_digits)
{
	unsigned char bytes[64];
	size_t n = (hex_digits + 1) / 2;
	if (n > sizeof bytes)
		n = sizeof bytes;
	relay_error e;
	if (st->host->random_bytes(bytes, n, &e) != RELAY_OK) {
		/* The host's random source failed: fall back to the kernel's. */
		if (syscall(SYS_getrandom, bytes, n, 0) != (long)n)
			memset(bytes, 0, n);
	}
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < hex_digits; i++) {
		unsigned b = bytes[i / 2];
		out[i] = digits[(i % 2 == 0) ? (b >> 4) : (b & 15)];
	}
	out[hex_digits] = '\0';
}

int64_t lu_monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void lu_sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

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

int lu_write_durable(const char *path, const void *data, size_t len, mode_t mode, bool sync)
{
	char tmp[PATH_MAX];
	unsigned long long salt = (unsigned long long)lu_monotonic_ms() ^
	                          ((unsigned long long)getpid() << 20) ^ (unsigned long long)(uintptr_t)&salt;
	int n = snprintf(tmp, sizeof tmp, "%s.tmp-%llx", path, salt);
	if (n < 0 || (size_t)n >= sizeof tmp)
		return ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return errno;
	const char *p = data;
	size_t left = len;
	int rc = 0;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			rc = errno;
			break;
		}
		p += w;
		left -= (size_t)w;
	}
	if (rc == 0 && sync && fsync(fd) != 0)
		rc = errno;
	if (close(fd) != 0 && rc == 0)
		rc = errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = errno;
	if (rc != 0) {
		unlink(tmp);
		return rc;
	}
	return sync ? fsync_parent(path) : 0;
}

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

void lu_read_line(const char *path, char *out, size_t size)
{
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, out, size - 1);
	close(fd);
	if (n <= 0)
		return;
	out[n] = '\0';
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
}

/* Reads field 22 (starttime) and field 3 (state) of /proc/<pid>/stat. */
static int proc_stat(pid_t pid, unsigned long long *start, char *state)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ')
		return -1;
	p += 2;
	*state = *p;
	/* p is at field 3; starttime is field 22. */
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (p == NULL)
			return -1;
		p++;
	}
	*start = strtoull(p, NULL, 10);
	return 0;
}

unsigned long long lu_proc_start(pid_t pid)
{
	unsigned long long start = 0;
	char state = 0;
	if (pid <= 0 || proc_stat(pid, &start, &state) != 0)
		return 0;
	return start;
}

bool lu_proc_alive(pid_t pid, unsigned long long start)
{
	unsigned long long s = 0;
	char state = 0;
	if (pid <= 0 || proc_stat(pid, &s, &state) != 0)
		return false;
	return s == start && state != 'Z' && state != 'X';
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
