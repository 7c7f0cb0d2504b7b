/*
 * receiver/stdio_parts.c — see stdio_parts.h.
 */
#include "stdio_parts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../receiver_protocol.h"
#include "frame.h"
#include "fsx.h"
#include "relay_support/fds.h"
#include "sha256.h"

static int sha_hex_ok(const char *s)
{
	size_t i;
	if (!s || strlen(s) != 64)
		return 0;
	for (i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* Appends what one read of fd gives (64 KiB at most) to b: the byte count,
 * 0 at the end of the file, -1 with err. */
static ssize_t read_chunk(int fd, buf *b, rerr *err)
{
	char chunk[65536];
	ssize_t n;
	do
		n = read(fd, chunk, sizeof(chunk));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		err_set(err, "cannot read standard input: %s", strerror(errno));
	else
		buf_append(b, chunk, (size_t)n);
	return n;
}

/* Reads fd to its end into b, at most max_bytes (one more is an error). */
static int read_to_end(int fd, buf *b, size_t max_bytes, rerr *err)
{
	for (;;) {
		ssize_t n = read_chunk(fd, b, err);
		if (n <= 0)
			return (int)n;
		if (b->len > max_bytes) {
			err_set(err, "standard input holds more than its header announces");
			return -1;
		}
	}
}

/* One part of the header: its name, a path under R with the given prefix,
 * its size (at most max_bytes) and hash. */
static int header_part(const jv *part, const char *name, const char *const *prefixes, size_t max_bytes,
                       char **rel_out, int64_t *bytes_out, const char **sha_out, rerr *err)
{
	const char *pname = jv_get_str(part, RECEIVER_PART_KEY_NAME);
	const char *path = jv_get_str(part, RECEIVER_PART_KEY_PATH);
	const char *sha = jv_get_str(part, RECEIVER_PART_KEY_SHA256);
	int64_t bytes = -1;
	int prefix_ok = 0;
	size_t i;
	if (!jv_is(part, JV_OBJECT) || !pname || strcmp(pname, name) != 0) {
		err_set(err, "standard input header: part \"%s\" is missing or out of order", name);
		return -1;
	}
	for (i = 0; path && prefixes[i]; i++)
		if (strncmp(path, prefixes[i], strlen(prefixes[i])) == 0)
			prefix_ok = 1;
	if (!path || !rel_path_ok(path) || !prefix_ok) {
		err_set(err, "standard input header: the %s part's path is not a file below %s", name,
		        prefixes[0]);
		return -1;
	}
	if (!jv_get_int(part, RECEIVER_PART_KEY_BYTES, &bytes) || bytes < 0 || (uint64_t)bytes > max_bytes ||
	    !sha_hex_ok(sha)) {
		err_set(err,
		        "standard input header: the %s part needs bytes (0 to %zu) and a lowercase sha256",
		        name, max_bytes);
		return -1;
	}
	*rel_out = xstrdup(path);
	*bytes_out = bytes;
	*sha_out = sha;
	return 0;
}

/* The header line (without its newline): both parts' paths, sizes and
 * hashes. The hashes are copied into sha_request/sha_script. */
static int parse_header(const char *line, size_t len, stdin_parts *out, int64_t *n_request, int64_t *n_script,
                        char sha_request[65], char sha_script[65], rerr *err)
{
	static const char *const request_prefixes[] = {"requests/", NULL};
	static const char *const script_prefixes[] = {"streamed/", "scripts/", NULL};
	const char *sr = NULL, *ss = NULL;
	int64_t protocol = 0;
	jv *parts;
	int rc = -1;
	jv *header = jv_parse(line, len, err);
	if (!header) {
		err_prefix(err, "standard input header");
		return -1;
	}
	parts = jv_get(header, RECEIVER_FRAME_PARTS);
	if (!jv_is(header, JV_OBJECT) || !jv_get_int(header, RECEIVER_FRAME_PROTOCOL, &protocol) ||
	    protocol != RECEIVER_PROTOCOL_VERSION || !jv_is(parts, JV_ARRAY) || parts->count != 2) {
		err_set(err,
		        "standard input header: needs protocol %d and exactly two parts (request, "
		        "script)",
		        RECEIVER_PROTOCOL_VERSION);
		goto cleanup;
	}
	if (header_part(parts->items[0], RECEIVER_PART_REQUEST, request_prefixes, RECEIVER_REQUEST_MAX_BYTES,
	                &out->request_rel, n_request, &sr, err) != 0 ||
	    header_part(parts->items[1], RECEIVER_PART_SCRIPT, script_prefixes, RECEIVER_SCRIPT_MAX_BYTES,
	                &out->script_rel, n_script, &ss, err) != 0)
		goto cleanup;
	memcpy(sha_request, sr, 65);
	memcpy(sha_script, ss, 65);
	rc = 0;
cleanup:
	jv_free(header);
	return rc;
}

/* Both parts' bytes (exactly n_request + n_script at `data`) checked
 * against their hashes. */
static int take_parts(const char *data, int64_t n_request, int64_t n_script, const char *sha_request,
                      const char *sha_script, stdin_parts *out, rerr *err)
{
	char hex[65];
	buf_append(&out->request, data, (size_t)n_request);
	buf_append(&out->script, data + n_request, (size_t)n_script);
	sha256_hex_of(out->request.data, out->request.len, hex);
	if (strcmp(hex, sha_request) != 0) {
		err_set(err, "the request part does not match its sha256 (corrupted on the way)");
		return -1;
	}
	sha256_hex_of(out->script.data, out->script.len, hex);
	if (strcmp(hex, sha_script) != 0) {
		err_set(err, "the script part does not match its sha256 (corrupted on the way)");
		return -1;
	}
	return 0;
}

static void parts_init(stdin_parts *out)
{
	memset(out, 0, sizeof(*out));
	buf_init(&out->request);
	buf_init(&out->script);
}

int stdin_parts_read(int fd, stdin_parts *out, rerr *err)
{
	buf all;
	const char *nl;
	char sha_request[65], sha_script[65];
	int64_t n_request = 0, n_script = 0;
	size_t header_len;
	int rc = -1;
	parts_init(out);
	buf_init(&all);
	if (read_to_end(fd, &all,
	                RECEIVER_STDIN_HEADER_MAX_BYTES + RECEIVER_REQUEST_MAX_BYTES +
	                    RECEIVER_SCRIPT_MAX_BYTES,
	                err) != 0)
		goto cleanup;
	nl = all.len ? memchr(all.data, '\n', all.len) : NULL;
	if (!nl || (size_t)(nl - all.data) + 1 > RECEIVER_STDIN_HEADER_MAX_BYTES) {
		err_set(err, "standard input has no header line (at most %u bytes)",
		        RECEIVER_STDIN_HEADER_MAX_BYTES);
		goto cleanup;
	}
	header_len = (size_t)(nl - all.data) + 1;
	if (parse_header(all.data, header_len - 1, out, &n_request, &n_script, sha_request, sha_script,
	                 err) != 0)
		goto cleanup;
	if (all.len - header_len != (size_t)(n_request + n_script)) {
		err_set(err,
		        "standard input holds %zu bytes after its header, not the %lld its parts announce",
		        all.len - header_len, (long long)(n_request + n_script));
		goto cleanup;
	}
	rc = take_parts(all.data + header_len, n_request, n_script, sha_request, sha_script, out, err);
cleanup:
	buf_free(&all);
	return rc;
}

/* Fills `b` from the reader until it holds `want` bytes. 0, 1 at end of
 * file (nothing or a part of it read), -1 on a read error. */
static int reader_fill(stdin_reader *r, size_t want, rerr *err)
{
	while (r->pending.len < want) {
		ssize_t n = read_chunk(r->fd, &r->pending, err);
		if (n <= 0)
			return n < 0 ? -1 : 1;
	}
	return 0;
}

static void reader_consume(stdin_reader *r, size_t n)
{
	memmove(r->pending.data, r->pending.data + n, r->pending.len - n);
	r->pending.len -= n;
}

/* What a header line asks for: STDIN_NEXT_DIAGNOSTIC, STDIN_NEXT_COMMAND,
 * STDIN_NEXT_FILE, or 0 for a run (stdio_parts.h). */
static int header_kind(const char *line, size_t len)
{
	rerr ignored;
	jv *header = jv_parse(line, len, &ignored);
	int kind = 0;
	if (jv_is(jv_get(header, RECEIVER_REQ_DIAGNOSTIC), JV_OBJECT))
		kind = STDIN_NEXT_DIAGNOSTIC;
	else if (jv_is(jv_get(header, RECEIVER_REQ_COMMAND), JV_OBJECT))
		kind = STDIN_NEXT_COMMAND;
	else if (jv_is(jv_get(header, RECEIVER_REQ_FILE), JV_OBJECT))
		kind = STDIN_NEXT_FILE;
	jv_free(header);
	return kind;
}

int stdin_header_next(stdin_reader *r, jv **header_out, rerr *err)
{
	const char *nl = r->pending.len ? memchr(r->pending.data, '\n', r->pending.len) : NULL;
	size_t header_len;
	*header_out = NULL;
	if (nl == NULL) {
		err_set(err, "a request has no header line");
		return -1;
	}
	header_len = (size_t)(nl - r->pending.data) + 1;
	*header_out = jv_parse(r->pending.data, header_len - 1, err);
	reader_consume(r, header_len);
	return *header_out ? 0 : -1;
}

/* The diagnostic part of a header: its id, argv and limit, and the
 * script's size and hash. */
static int diag_header(const jv *header, diag_request *out, int64_t *n_script, char sha_script[65], rerr *err)
{
	const jv *d = jv_get(header, RECEIVER_REQ_DIAGNOSTIC);
	const jv *argv = jv_get(d, RECEIVER_DIAG_ARGV);
	const jv *parts = jv_get(header, RECEIVER_FRAME_PARTS);
	const jv *part = jv_is(parts, JV_ARRAY) && parts->count == 1 ? parts->items[0] : NULL;
	const char *id = jv_get_str(d, RECEIVER_FRAME_EXECUTION_ID);
	const char *name = jv_get_str(part, RECEIVER_PART_KEY_NAME);
	const char *sha = jv_get_str(part, RECEIVER_PART_KEY_SHA256);
	int64_t protocol = 0;
	size_t i;
	if (!jv_get_int(header, RECEIVER_FRAME_PROTOCOL, &protocol) ||
	    protocol != RECEIVER_PROTOCOL_VERSION || !id || strncmp(id, "diagnostic-", 11) != 0 ||
	    !jv_is(argv, JV_ARRAY) || argv->count == 0 || argv->count > RECEIVER_DIAG_ARGV_MAX ||
	    !jv_get_int(d, RECEIVER_DIAG_LIMIT_MS, &out->limit_ms) || out->limit_ms < 1 || !name ||
	    strcmp(name, RECEIVER_PART_SCRIPT) != 0 || !jv_get_int(part, RECEIVER_PART_KEY_BYTES, n_script) ||
	    *n_script < 0 || (uint64_t)*n_script > RECEIVER_DIAG_SCRIPT_MAX_BYTES || !sha_hex_ok(sha)) {
		err_set(err,
		        "diagnostic header: needs protocol %d, an executionId diagnostic-…, argv (1 to "
		        "%d strings), a positive limitMs and one script part (at most %u bytes, sha256)",
		        RECEIVER_PROTOCOL_VERSION, RECEIVER_DIAG_ARGV_MAX, RECEIVER_DIAG_SCRIPT_MAX_BYTES);
		return -1;
	}
	out->argv = xmalloc((argv->count + 2) * sizeof(char *));
	memset(out->argv, 0, (argv->count + 2) * sizeof(char *));
	for (i = 0; i < argv->count; i++) {
		if (!jv_is(argv->items[i], JV_STRING) ||
		    strlen(argv->items[i]->str) != argv->items[i]->str_len) {
			err_set(err, "diagnostic header: argv[%zu] is not a string without NUL bytes", i);
			return -1;
		}
		out->argv[i] = xstrdup(argv->items[i]->str);
	}
	out->execution_id = xstrdup(id);
	memcpy(sha_script, sha, 65);
	return 0;
}

int stdin_diag_next(stdin_reader *r, diag_request *out, rerr *err)
{
	const char *nl = memchr(r->pending.data, '\n', r->pending.len);
	size_t header_len = (size_t)(nl - r->pending.data) + 1, argc = 0;
	int64_t n_script = 0;
	char sha_script[65], hex[65];
	jv *header = jv_parse(r->pending.data, header_len - 1, err);
	int rc = -1, f;
	memset(out, 0, sizeof(*out));
	if (!header || diag_header(header, out, &n_script, sha_script, err) != 0)
		goto cleanup; /* its size is unknown: the reader is out of step */
	f = reader_fill(r, header_len + (size_t)n_script, err);
	if (f != 0) {
		if (f > 0)
			err_set(err, "standard input ended inside a diagnostic request");
		goto cleanup;
	}
	while (out->argv[argc])
		argc++;
	out->argv[argc] = xstrndup(r->pending.data + header_len, (size_t)n_script);
	sha256_hex_of(r->pending.data + header_len, (size_t)n_script, hex);
	reader_consume(r, header_len + (size_t)n_script);
	rc = 0;
	if (strcmp(hex, sha_script) != 0 || strlen(out->argv[argc]) != (size_t)n_script) {
		err_set(err,
		        "the diagnostic script does not match its sha256 or holds a NUL byte; nothing ran");
		rc = -2;
	}
cleanup:
	jv_free(header);
	if (rc != 0)
		diag_request_free(out);
	return rc;
}

void diag_request_free(diag_request *d)
{
	size_t i;
	for (i = 0; d->argv && d->argv[i]; i++)
		free(d->argv[i]);
	free(d->argv);
	free(d->execution_id);
	memset(d, 0, sizeof(*d));
}

int stdin_parts_next(stdin_reader *r, stdin_parts *out, rerr *err)
{
	char sha_request[65], sha_script[65];
	int64_t n_request = 0, n_script = 0;
	const char *nl = NULL;
	size_t header_len;
	int f;
	parts_init(out);
	while (!(nl = r->pending.len ? memchr(r->pending.data, '\n', r->pending.len) : NULL)) {
		if (r->pending.len >= RECEIVER_STDIN_HEADER_MAX_BYTES)
			break;
		f = reader_fill(r, r->pending.len + 1, err);
		if (f < 0)
			return -1;
		if (f > 0 && r->pending.len == 0)
			return 1;
		if (f > 0) {
			err_set(err, "standard input ended inside a request's header line");
			return -1;
		}
	}
	if (!nl || (size_t)(nl - r->pending.data) + 1 > RECEIVER_STDIN_HEADER_MAX_BYTES) {
		err_set(err, "a request has no header line (at most %u bytes)",
		        RECEIVER_STDIN_HEADER_MAX_BYTES);
		return -1;
	}
	header_len = (size_t)(nl - r->pending.data) + 1;
	f = header_kind(r->pending.data, header_len - 1);
	if (f != 0)
		return f;
	if (parse_header(r->pending.data, header_len - 1, out, &n_request, &n_script, sha_request, sha_script,
	                 err) != 0)
		return -1;
	f = reader_fill(r, header_len + (size_t)(n_request + n_script), err);
	if (f != 0) {
		if (f > 0)
			err_set(err, "standard input ended inside a request (%lld bytes announced)",
			        (long long)(n_request + n_script));
		return -1;
	}
	f = take_parts(r->pending.data + header_len, n_request, n_script, sha_request, sha_script, out, err);
	reader_consume(r, header_len + (size_t)(n_request + n_script));
	return f == 0 ? 0 : -2;
}

int stdin_parts_match(const stdin_parts *parts, const char *root, const jv *request, rerr *err)
{
	const char *id = jv_get_str(request, "executionId");
	const char *script_path = jv_get_str(jv_get(request, RECEIVER_REQ_SCRIPT), RECEIVER_SCRIPT_PATH);
	char *want_request = xasprintf("requests/%s.json", id ? id : "");
	char *want_script = path_join(root, parts->script_rel);
	int rc = -1;
	if (strcmp(parts->request_rel, want_request) != 0)
		err_set(err, "the request part's path must be %s", want_request);
	else if (!script_path || strcmp(script_path, want_script) != 0)
		err_set(err, "the script part's path is not the request's script.path");
	else
		rc = 0;
	free(want_request);
	free(want_script);
	return rc;
}

static int write_part(const char *root, const char *rel, const buf *data, rerr *err)
{
	const char *slash = strrchr(rel, '/');
	char *dir_rel = xstrndup(rel, (size_t)(slash - rel));
	char *dir = path_join(root, dir_rel);
	int rc = dir_ensure(root, dir_rel, err);
	if (rc == 0)
		rc = path_walk_check(root, rel, 1, NULL, err);
	if (rc == 0)
		rc = durable_write(dir, slash + 1, data->data ? data->data : "", data->len, err);
	free(dir_rel);
	free(dir);
	return rc;
}

int stdin_parts_write(const char *root, const stdin_parts *parts, rerr *err)
{
	if (write_part(root, parts->script_rel, &parts->script, err) != 0)
		return -1;
	return write_part(root, parts->request_rel, &parts->request, err);
}

void stdin_parts_free(stdin_parts *parts)
{
	free(parts->request_rel);
	free(parts->script_rel);
	buf_free(&parts->request);
	buf_free(&parts->script);
	memset(parts, 0, sizeof(*parts));
}

static jv *part_fact(const char *name, const char *rel, const buf *data)
{
	jv *o = jv_object();
	char hex[65];
	sha256_hex_of(data->data ? data->data : "", data->len, hex);
	jv_set_str(o, RECEIVER_PART_KEY_NAME, name);
	if (rel)
		jv_set_str(o, RECEIVER_PART_KEY_PATH, rel);
	jv_set_int(o, RECEIVER_PART_KEY_BYTES, (int64_t)data->len);
	jv_set_str(o, RECEIVER_PART_KEY_SHA256, hex);
	return o;
}

/* The after-snapshot original named by the receipt, when it is small
 * enough and still what the descriptor says. */
static char *after_image(const char *root, const jv *receipt, buf *data)
{
	jv *snaps = jv_get(jv_get(receipt, "imageEvidence"), "snapshots");
	const char *attach = getenv("RELAY_RECEIVER_ATTACH");
	size_t i;
	/* RELAY_RECEIVER_ATTACH=off in the guest leaves the image to the step
	 * download (to compare both paths, or to rule this one out). */
	if (attach && strcmp(attach, "off") == 0)
		return NULL;
	for (i = 0; jv_is(snaps, JV_ARRAY) && i < snaps->count; i++) {
		const jv *d = snaps->items[i];
		const char *phase = jv_get_str(d, "phase");
		const char *session = jv_get_str(d, "sessionId");
		const char *file = jv_get_str(d, "fileName");
		const char *sha = jv_get_str(d, "sha256");
		int64_t bytes = -1;
		char *rel, *path, hex[65];
		rerr err;
		if (!phase || strcmp(phase, "after") != 0 || !session || !file || !sha ||
		    !jv_get_int(d, "bytes", &bytes) || bytes <= 0 ||
		    (uint64_t)bytes > RECEIVER_ATTACH_IMAGE_MAX_BYTES)
			continue;
		rel = xasprintf("state/snapshots/%s/%s", session, file);
		path = path_join(root, rel);
		if (!rel_path_ok(rel) || path_walk_check(root, rel, 0, NULL, &err) != 0 ||
		    read_file_limited(path, RECEIVER_ATTACH_IMAGE_MAX_BYTES, data, NULL, NULL, &err) != 0) {
			free(rel);
			free(path);
			data->len = 0;
			continue;
		}
		free(path);
		sha256_hex_of(data->data, data->len, hex);
		if ((int64_t)data->len == bytes && strcmp(hex, sha) == 0)
			return rel;
		free(rel);
		data->len = 0;
	}
	return NULL;
}

void stdout_parts_emit(const char *root, jv *frame, const char *receipt_rel)
{
	buf receipt_text, image;
	char *receipt_path = path_join(root, receipt_rel);
	char *image_rel = NULL;
	jv *parts = jv_array();
	jv *receipt = NULL;
	rerr err;
	buf_init(&receipt_text);
	buf_init(&image);
	if (read_file_limited(receipt_path, RECEIVER_RECEIPT_MAX_BYTES, &receipt_text, NULL, NULL, &err) ==
	    0) {
		jv_push(parts, part_fact(RECEIVER_PART_RECEIPT, NULL, &receipt_text));
		receipt = jv_parse(receipt_text.data, receipt_text.len, &err);
		image_rel = receipt ? after_image(root, receipt, &image) : NULL;
		if (image_rel)
			jv_push(parts, part_fact(RECEIVER_PART_AFTER_IMAGE, image_rel, &image));
	} else {
		fprintf(stderr, "receiver: the receipt is not sent on standard output: %s\n", err.msg);
	}
	jv_set(frame, RECEIVER_FRAME_PARTS, parts);
	frame_emit(frame);
	if (receipt_text.len) {
		rs_write_all(STDOUT_FILENO, receipt_text.data, receipt_text.len);
		if (image_rel)
			rs_write_all(STDOUT_FILENO, image.data, image.len);
	}
	jv_free(receipt);
	free(image_rel);
	free(receipt_path);
	buf_free(&receipt_text);
	buf_free(&image);
}
