/*
 * receiver/frame.c — see frame.h.
 */
#include "frame.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

void frame_emit(jv *value)
{
	buf line;
	size_t off = 0;
	buf_init(&line);
	jv_write(&line, value, 0);
	buf_putc(&line, '\n');
	while (off < line.len) {
		ssize_t n = write(STDOUT_FILENO, line.data + off, line.len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		off += (size_t)n;
	}
	buf_free(&line);
	jv_free(value);
}

int frame_error(int exit_code, const char *message)
{
	jv *o = jv_object();
	fprintf(stderr, "receiver: %s\n", message);
	jv_set_str(o, "error", message);
	frame_emit(o);
	return exit_code;
}
