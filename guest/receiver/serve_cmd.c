/*
 * receiver/serve_cmd.c — see serve_cmd.h.
 */
#include "serve_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../receiver_protocol.h"
#include "cmds.h"
#include "frame.h"
#include "fsx.h"
#include "relay_support/fds.h"
#include "sha256.h"

/* The commands serve runs itself: what a step download asks of the guest
 * (RECEIVER_SERVE_COMMANDS). */
static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} serve_commands[] = {
    {RECEIVER_CMD_ARCHIVE, cmd_archive},
    {RECEIVER_CMD_REMOVE, cmd_remove},
};

typedef struct command_end {
	int status; /* waitpid's */
	buf out;    /* the first RECEIVER_SERVE_COMMAND_OUTPUT_MAX bytes of standard output */
	buf err;    /* the last RECEIVER_SERVE_COMMAND_OUTPUT_MAX bytes of standard error */
} command_end;

static void keep(buf *b, const char *data, size_t n, int tail)
{
	if (!tail) {
		size_t room = b->len < RECEIVER_SERVE_COMMAND_OUTPUT_MAX
		                  ? RECEIVER_SERVE_COMMAND_OUTPUT_MAX - b->len
		                  : 0;
		buf_append(b, data, n < room ? n : room);
		return;
	}
	buf_append(b, data, n);
	if (b->len > RECEIVER_SERVE_COMMAND_OUTPUT_MAX) {
		size_t drop = b->len - RECEIVER_SERVE_COMMAND_OUTPUT_MAX;
		memmove(b->data, b->data + drop, RECEIVER_SERVE_COMMAND_OUTPUT_MAX);
		b->len = RECEIVER_SERVE_COMMAND_OUTPUT_MAX;
	}
}

/* Reads both pipes of the worker until they end. */
static void collect_both(int out_fd, int err_fd, command_end *e)
{
	char chunk[65536];
	struct pollfd p[2];
	p[0].fd = out_fd;
	p[1].fd = err_fd;
	while (p[0].fd >= 0 || p[1].fd >= 0) {
		int i;
		p[0].events = p[1].events = POLLIN;
		p[0].revents = p[1].revents = 0;
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		for (i = 0; i < 2; i++) {
			ssize_t n;
			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			n = read(p[i].fd, chunk, sizeof(chunk));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				continue;
			}
			keep(i == 0 ? &e->out : &e->err, chunk, (size_t)n, i == 1);
		}
	}
}

static jv *stream_part(const char *name, const buf *b)
{
	jv *o = jv_object();
	char hex[65];
	sha256_hex_of(b->data ? b->data : "", b->len, hex);
	jv_set_str(o, RECEIVER_PART_KEY_NAME, name);
	jv_set_int(o, RECEIVER_PART_KEY_BYTES, (int64_t)b->len);
	jv_set_str(o, RECEIVER_PART_KEY_SHA256, hex);
	return o;
}

/* The frame and its parts in one write when they fit (the host reads them as one answer). */
static void emit_with(jv *frame, const buf *first, const buf *second)
{
	buf line;
	buf_init(&line);
	jv_write(&line, frame, 0);
	buf_putc(&line, '\n');
	if (first && first->len)
		buf_append(&line, first->data, first->len);
	if (second && second->len)
		buf_append(&line, second->data, second->len);
	rs_write_all(STDOUT_FILENO, line.data, line.len);
	buf_free(&line);
	jv_free(frame);
}

static void command_answer(const command_end *e)
{
	jv *f = jv_object(), *ex = jv_object(), *parts = jv_array();
	if (WIFEXITED(e->status))
		jv_set_int(ex, RECEIVER_FRAME_CODE, WEXITSTATUS(e->status));
	else
		jv_set_null(ex, RECEIVER_FRAME_CODE);
	if (WIFSIGNALED(e->status))
		jv_set_int(ex, RECEIVER_FRAME_SIGNAL, WTERMSIG(e->status));
	else
		jv_set_null(ex, RECEIVER_FRAME_SIGNAL);
	jv_push(parts, stream_part(RECEIVER_PART_STDOUT, &e->out));
	jv_push(parts, stream_part(RECEIVER_PART_STDERR, &e->err));
	jv_set(f, RECEIVER_FRAME_COMMAND_EXIT, ex);
	jv_set(f, RECEIVER_FRAME_PARTS, parts);
	emit_with(f, &e->out, &e->err);
}

/* argv of the header (NULL-terminated, malloc'd strings) and its command;
 * NULL with err when it is not one serve runs. */
static char **command_argv(const jv *header, int (**fn_out)(int, char **), rerr *err)
{
	const jv *argv = jv_get(jv_get(header, RECEIVER_REQ_COMMAND), RECEIVER_COMMAND_ARGV);
	int64_t protocol = 0;
	char **out;
	size_t i;
	*fn_out = NULL;
	if (!jv_get_int(header, RECEIVER_FRAME_PROTOCOL, &protocol) ||
	    protocol != RECEIVER_PROTOCOL_VERSION || !jv_is(argv, JV_ARRAY) || argv->count == 0) {
		err_set(err, "command header: needs protocol %d and a non-empty argv; nothing ran",
		        RECEIVER_PROTOCOL_VERSION);
		return NULL;
	}
	for (i = 0; i < argv->count; i++)
		if (!jv_is(argv->items[i], JV_STRING) ||
		    strlen(argv->items[i]->str) != argv->items[i]->str_len) {
			err_set(err,
			        "command header: argv[%zu] is not a string without NUL bytes; nothing ran",
			        i);
			return NULL;
		}
	for (i = 0; i < sizeof(serve_commands) / sizeof(serve_commands[0]); i++)
		if (strcmp(argv->items[0]->str, serve_commands[i].name) == 0)
			*fn_out = serve_commands[i].fn;
	if (*fn_out == NULL) {
		err_set(err, "serve runs only the commands %s, not %s; nothing ran", RECEIVER_SERVE_COMMANDS,
		        argv->items[0]->str);
		return NULL;
	}
	out = xmalloc((argv->count + 1) * sizeof(char *));
	for (i = 0; i < argv->count; i++)
		out[i] = xstrdup(argv->items[i]->str);
	out[argv->count] = NULL;
	return out;
}

int serve_command(stdin_reader *reader, rerr *err)
{
	jv *header = NULL;
	int (*fn)(int, char **) = NULL;
	char **argv = NULL;
	int out[2] = {-1, -1}, errp[2] = {-1, -1}, argc = 0, rc = -1;
	pid_t pid;
	command_end e;
	memset(&e, 0, sizeof(e));
	buf_init(&e.out);
	buf_init(&e.err);
	if (stdin_header_next(reader, &header, err) != 0 || (argv = command_argv(header, &fn, err)) == NULL)
		goto cleanup;
	while (argv[argc])
		argc++;
	fflush(NULL);
	if (pipe2(out, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 || (pid = fork()) < 0) {
		err_set(err, "cannot start a worker for the command (pipe or fork failed); nothing ran");
		goto cleanup;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0 && devnull != STDIN_FILENO) {
			dup2(devnull, STDIN_FILENO);
			close(devnull);
		}
		dup2(out[1], STDOUT_FILENO);
		dup2(errp[1], STDERR_FILENO);
		signal(SIGHUP, SIG_IGN);
		{
			int status = fn(argc - 1, argv + 1);
			fflush(NULL);
			_exit(status);
		}
	}
	close(out[1]);
	close(errp[1]);
	out[1] = errp[1] = -1;
	collect_both(out[0], errp[0], &e);
	out[0] = errp[0] = -1; /* closed by collect_both */
	while (waitpid(pid, &e.status, 0) < 0)
		if (errno != EINTR) {
			e.status = 0x7f00; /* no status: answered as an exit 127 */
			break;
		}
	command_answer(&e);
	rc = 0;
cleanup:
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (errp[i] >= 0)
			close(errp[i]);
	}
	for (int i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
	jv_free(header);
	buf_free(&e.out);
	buf_free(&e.err);
	return rc;
}

/* path's part below root, or NULL when it is not root/<a safe relative path>. */
static const char *below_root(const char *root, const char *path)
{
	size_t n = strlen(root);
	if (path == NULL || strncmp(path, root, n) != 0 || path[n] != '/' || !rel_path_ok(path + n + 1))
		return NULL;
	return path + n + 1;
}

int serve_file(stdin_reader *reader, const char *root, rerr *err)
{
	jv *header = NULL, *f, *fact;
	const char *path;
	buf data;
	int too_large = 0, missing = 0;
	rerr why;
	buf_init(&data);
	if (stdin_header_next(reader, &header, err) != 0)
		return -1;
	path = jv_get_str(jv_get(header, RECEIVER_REQ_FILE), RECEIVER_FILE_PATH);
	if (below_root(root, path) == NULL) {
		err_set(err,
		        "file request: the path must be a file below %s (no .., no //); nothing was read",
		        root);
		jv_free(header);
		return -1;
	}
	f = jv_object();
	fact = jv_object();
	jv_set_str(fact, RECEIVER_FILE_PATH, path);
	jv_set(f, RECEIVER_FRAME_FILE, fact);
	if (read_file_limited(path, RECEIVER_SERVE_FILE_MAX_BYTES, &data, &missing, &too_large, &why) == 0) {
		jv *parts = jv_array();
		jv_push(parts, stream_part(RECEIVER_PART_FILE, &data));
		jv_set(f, RECEIVER_FRAME_PARTS, parts);
	} else {
		jv_set_str(f, RECEIVER_FRAME_ERROR, why.msg);
		jv_set_bool(f, RECEIVER_FRAME_TOO_LARGE, too_large);
		jv_set(f, RECEIVER_FRAME_PARTS, jv_array());
		data.len = 0;
	}
	emit_with(f, &data, NULL);
	buf_free(&data);
	jv_free(header);
	return 0;
}
