/*
 * md_util.c — machine-docker's small helpers: errors and messages, JSON
 * fields, clocks, random ids, durable file writes, process start times.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "md.h"
#include "relay_support/json_get.h"

/* ---- helpers ----------------------------------------------------------------- */

relay_status md_err(md_state *st, relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
{
	char text[RELAY_ERROR_MESSAGE_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return st->host->error_set(err, code, sys_errno, "%s", text);
}

void md_textf(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, size, fmt, ap);
	va_end(ap);
}

char *md_json_out(md_state *st, json_object *obj)
{
	const char *text =
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return text ? st->host->strdup(text) : NULL;
}

const char *md_str(json_object *obj, const char *key)
{
	return rsj_get_str(obj, key);
}

int64_t md_int(json_object *obj, const char *key, int64_t fallback)
{
	int64_t value;
	return rsj_get_int(obj, key, &value) ? value : fallback;
}

json_object *md_obj(json_object *obj, const char *key)
{
	return rsj_get_obj(obj, key);
}

int64_t md_monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void md_sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

void md_random_hex(md_state *st, char *out, size_t digits)
{
	unsigned char raw[64];
	relay_error e;
	size_t n = (digits + 1) / 2;
	if (n > sizeof raw)
		n = sizeof raw;
	if (st->host->random_bytes(raw, n, &e) != RELAY_OK)
		for (size_t i = 0; i < n; i++)
			raw[i] = (unsigned char)(md_monotonic_ms() >> (i % 8)) ^ (unsigned char)rand();
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < digits && i / 2 < n; i++)
		out[i] = hex[(raw[i / 2] >> ((i % 2) ? 0 : 4)) & 15];
	out[digits] = '\0';
}

static int fsync_parent(const char *path)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		return 0;
	*slash = '\0';
	int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	int rc = fsync(fd) == 0 ? 0 : errno;
	close(fd);
	return rc;
}

int md_write_durable(const char *path, const void *data, size_t len)
{
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.tmp-%d-%lld", path, (int)getpid(), (long long)md_monotonic_ms());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno;
	const char *p = data;
	size_t left = len;
	int rc = 0;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = errno ? errno : EIO;
			break;
		}
		p += w;
		left -= (size_t)w;
	}
	if (rc == 0 && fsync(fd) != 0)
		rc = errno;
	if (close(fd) != 0 && rc == 0)
		rc = errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = errno;
	if (rc != 0) {
		unlink(tmp);
		return rc;
	}
	return fsync_parent(path);
}

json_object *md_read_json(const char *path, int *errno_out)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno_out)
			*errno_out = errno;
		return NULL;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (1 << 20)) {
		close(fd);
		if (errno_out)
			*errno_out = EINVAL;
		return NULL;
	}
	char *buf = malloc((size_t)sb.st_size + 1);
	ssize_t n = buf ? read(fd, buf, (size_t)sb.st_size) : -1;
	close(fd);
	json_object *obj = NULL;
	if (n >= 0) {
		buf[n] = '\0';
		obj = json_tokener_parse(buf);
	}
	free(buf);
	if (obj == NULL && errno_out)
		*errno_out = EINVAL;
	return obj;
}

unsigned long long md_proc_start(pid_t pid)
{
	char path[64], buf[2048];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (p == NULL || p[1] == '\0' || p[2] == 'Z')
		return 0;
	unsigned long long start = 0;
	int field = 2;
	for (char *t = p + 1; *t; t++) {
		if (*t == ' ') {
			field++;
			if (field == 22) {
				start = strtoull(t + 1, NULL, 10);
				break;
			}
		}
	}
	return start;
}

void md_guest_env(const md_state *st, json_object *env, bool display)
{
	json_object_array_add(env, json_object_new_string(st->guest_uid == 0 ? "HOME=/root" : "HOME=/tmp"));
	json_object_array_add(env, json_object_new_string("LANG=C.UTF-8"));
	json_object_array_add(env, json_object_new_string("MCP_RELAY_GUEST=1"));
	if (display)
		json_object_array_add(env, json_object_new_string("DISPLAY=:0"));
}
