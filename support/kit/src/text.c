/* text.c — plugin text (relay_kit/text.h). */
#include "relay_kit/text.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void rk_textf(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, size, fmt, ap);
	va_end(ap);
}

char *rk_json_text(const relay_host *host, json_object *obj)
{
	const char *text =
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return text ? host->strdup(text) : NULL;
}

json_object *rk_json_object(const char *text)
{
	json_object *o = text ? json_tokener_parse(text) : NULL;
	if (o && !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	return o;
}

void rk_read_line(const char *path, char *out, size_t size)
{
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, out, size - 1);
	close(fd);
	out[n > 0 ? n : 0] = '\0';
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
}
