/*
 * md_util.c — machine-docker's small helpers: errors and messages, JSON
 * fields, reading JSON files (clocks, random ids, durable writes and
 * processes are the plugin kit's, md.h).
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

void md_guest_env(const md_state *st, json_object *env, bool display)
{
	json_object_array_add(env, json_object_new_string(st->guest_uid == 0 ? "HOME=/root" : "HOME=/tmp"));
	json_object_array_add(env, json_object_new_string("LANG=C.UTF-8"));
	json_object_array_add(env, json_object_new_string("MCP_RELAY_GUEST=1"));
	if (display)
		json_object_array_add(env, json_object_new_string("DISPLAY=:0"));
}
