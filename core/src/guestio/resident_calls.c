/* A step download's guest work on the resident channel; see resident_calls.h. */
#include "guestio/resident_calls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call/call.h"
#include "guestio/frame.h"
#include "guestio/resident.h"
#include "receiver_protocol.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"

/* The header line of a serve request {"protocol":1, key: body} (body
 * taken), or NULL when it does not fit RECEIVER_STDIN_HEADER_MAX_BYTES. */
static char *request_line(const char *key, json_object *body, size_t *len_out)
{
	json_object *h = json_object_new_object();
	jsonx_add_int(h, RECEIVER_FRAME_PROTOCOL, RECEIVER_PROTOCOL_VERSION);
	jsonx_add(h, key, body);
	char *text = jsonx_to_string(h, 0);
	json_object_put(h);
	size_t n = text ? strlen(text) : 0;
	if (text == NULL || n + 1 >= RECEIVER_STDIN_HEADER_MAX_BYTES) {
		free(text);
		return NULL;
	}
	char *line = realloc(text, n + 2);
	if (line == NULL) {
		free(text);
		return NULL;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	*len_out = n + 1;
	return line;
}

/* Sends a request on the idle channel: RELAY_OK with the whole answer
 * (malloc'd), or RELAY_E_UNAVAILABLE / RELAY_E_CANCELLED. */
static relay_status lend(guest_io *io, char *line, size_t len, uint64_t limit_ms, char **answer,
                         size_t *answer_len, relay_error *err)
{
	if (line == NULL)
		return relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "the request does not fit a header line");
	gio_resident_end end = gio_resident_lend(io, line, len, limit_ms, answer, answer_len, err);
	free(line);
	if (end == GIO_RESIDENT_ANSWERED)
		return RELAY_OK;
	if (end == GIO_RESIDENT_CANCELLED || relay_call_is_cancelled(io->call))
		return relay_error_set(err, RELAY_E_CANCELLED, 0, "the call was cancelled on the channel");
	if (end != GIO_RESIDENT_NOT_SENT)
		log_info("guest %s: a step download's request on the channel got no whole answer (%s); the "
		         "transport takes it",
		         io->g->name, err->message);
	return relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "no answer on the channel");
}

static char *copy_bytes(const char *data, size_t len)
{
	char *out = malloc(len + 1);
	if (out == NULL)
		return NULL;
	if (len)
		memcpy(out, data, len);
	out[len] = '\0';
	return out;
}

relay_status gio_resident_command(guest_io *io, const char *const *args, uint64_t timeout_ms,
                                  relay_exec_result *res, relay_error *err)
{
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	/* only what serve runs (RECEIVER_SERVE_COMMANDS): any other would be refused */
	if (args[0] == NULL ||
	    (strcmp(args[0], RECEIVER_CMD_ARCHIVE) != 0 && strcmp(args[0], RECEIVER_CMD_REMOVE) != 0))
		return relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "serve does not run %s",
		                       args[0] ? args[0] : "(none)");
	json_object *argv = json_object_new_array();
	for (size_t i = 0; args[i]; i++)
		json_object_array_add(argv, json_object_new_string(args[i]));
	json_object *body = json_object_new_object();
	jsonx_add(body, RECEIVER_COMMAND_ARGV, argv);
	size_t len = 0, answer_len = 0;
	char *answer = NULL;
	char *line = request_line(RECEIVER_REQ_COMMAND, body, &len);
	relay_status st = lend(io, line, len, timeout_ms, &answer, &answer_len, err);
	if (st != RELAY_OK)
		return st;
	static const char *const names[] = {RECEIVER_PART_STDOUT, RECEIVER_PART_STDERR, NULL};
	const char *data[2];
	size_t sizes[2];
	json_object *frame = gio_answer_parts(answer, answer_len, names, data, sizes);
	json_object *ex = jsonx_get_obj(frame, RECEIVER_FRAME_COMMAND_EXIT);
	int64_t code = -1, sig = 0;
	bool has_code = jsonx_get_int(ex, RECEIVER_FRAME_CODE, &code);
	jsonx_get_int(ex, RECEIVER_FRAME_SIGNAL, &sig);
	if (ex == NULL || data[0] == NULL || data[1] == NULL) {
		st = relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "serve's answer to %s is not whole",
		                     args[0]);
		log_info("guest %s: %s; the transport takes it", io->g->name, err->message);
		goto cleanup;
	}
	res->exit_code = has_code ? (int)code : -1;
	res->signal = (int)sig;
	res->termination_confirmed = 1;
	res->out = copy_bytes(data[0], sizes[0]);
	res->out_len = sizes[0];
	res->err = copy_bytes(data[1], sizes[1]);
	res->err_len = sizes[1];
	if (res->out == NULL || res->err == NULL) {
		gio_exec_result_free(res);
		st = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
cleanup:
	json_object_put(frame);
	free(answer);
	return st;
}

relay_status gio_resident_pull(guest_io *io, const char *remote, const char *local, relay_error *err)
{
	size_t rl = strlen(io->root);
	if (strncmp(remote, io->root, rl) != 0 || remote[rl] != '/')
		return relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "%s is not below the guest root", remote);
	json_object *body = json_object_new_object();
	jsonx_add_str(body, RECEIVER_FILE_PATH, remote);
	size_t len = 0, answer_len = 0;
	char *answer = NULL;
	char *line = request_line(RECEIVER_REQ_FILE, body, &len);
	/* a whole 8 MiB file at a slow 1 MiB/s, and the 30 s of any answer */
	relay_status st =
	    lend(io, line, len, 30000 + RECEIVER_SERVE_FILE_MAX_BYTES / 1000, &answer, &answer_len, err);
	if (st != RELAY_OK)
		return st;
	static const char *const names[] = {RECEIVER_PART_FILE, NULL};
	const char *data[1];
	size_t sizes[1];
	int fd = -1;
	json_object *frame = gio_answer_parts(answer, answer_len, names, data, sizes);
	if (data[0] == NULL) {
		const char *why = jsonx_get_str(frame, RECEIVER_FRAME_ERROR);
		st = relay_error_set(err, RELAY_E_UNAVAILABLE, 0, "serve did not send %s: %s", remote,
		                     why ? why : "no whole part");
		goto cleanup;
	}
	fd = open(local, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		st = relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", local, strerror(errno));
		goto cleanup;
	}
	st = fs_write_all(fd, data[0], sizes[0], local, err);
cleanup:
	if (fd >= 0 && close(fd) != 0 && st == RELAY_OK)
		st = relay_error_set(err, RELAY_E_IO, errno, "cannot write %s: %s", local, strerror(errno));
	json_object_put(frame);
	free(answer);
	return st;
}
