/*
 * receiver/stdio_parts.h — the standard-input and standard-output framing of
 * a run in one round trip (spec/guest.md §16.2, guest/receiver_protocol.h).
 */
#ifndef RECEIVER_STDIO_PARTS_H
#define RECEIVER_STDIO_PARTS_H

#include "json.h"
#include "util.h"

typedef struct stdin_parts {
	char *request_rel; /* relative to R */
	char *script_rel;
	buf request;
	buf script;
} stdin_parts;

/* Reads the header line and both parts from fd up to end of file and checks
 * their sizes and SHA-256. 0 on success; -1 with the refusal's diagnostic
 * in err (nothing was written anywhere). */
int stdin_parts_read(int fd, stdin_parts *out, rerr *err);

/* The requests of `receiver serve` (spec/guest.md §17 item 2): each framed as
 * above, one after another on one descriptor, each ending where its
 * header's sizes say. */
typedef struct stdin_reader {
	int fd;
	buf pending; /* read, not yet taken */
} stdin_reader;

/* Reads the next request from r into *out (cleared first) and checks its
 * sizes and SHA-256. 0 with a request; 1 at end of file before a request
 * began; -1 with the refusal's diagnostic in err when a header cannot be
 * parsed or the stream ends inside a request (the reader is out of step:
 * the caller stops); -2 with it when a part fails its hash (the request
 * was consumed whole; the next one may follow). */
int stdin_parts_next(stdin_reader *r, stdin_parts *out, rerr *err);
/* stdin_parts_next answers 2, consuming nothing, when the next request's
 * header is a diagnostic script's (receiver_protocol.h
 * RECEIVER_REQ_DIAGNOSTIC); stdin_diag_next then takes it. */
#define STDIN_NEXT_DIAGNOSTIC 2
/* The same for serve's own requests (receiver_protocol.h RECEIVER_REQ_COMMAND,
 * RECEIVER_REQ_FILE): a header line and no parts, taken with stdin_header_next. */
#define STDIN_NEXT_COMMAND 3
#define STDIN_NEXT_FILE    4

/* Takes the header line at the head of r (stdin_parts_next has seen it
 * whole) and parses it: 0 with *header_out (free with jv_free); -1 with
 * the diagnostic in err when it is no JSON (consumed: serve answers the
 * refusal and goes on, the stream is still in step). */
int stdin_header_next(stdin_reader *r, jv **header_out, rerr *err);

typedef struct diag_request {
	char *execution_id;
	char **argv; /* NULL-terminated; the script is the last argument */
	int64_t limit_ms;
} diag_request;

/* Takes the diagnostic request at the head of r: 0; -1 (the reader is out
 * of step) or -2 (consumed whole, refused: nothing runs) with the refusal's
 * diagnostic in err, as stdin_parts_next. */
int stdin_diag_next(stdin_reader *r, diag_request *out, rerr *err);
void diag_request_free(diag_request *d);

/* Checks the parts against the parsed request: the request part's path is
 * requests/<executionId>.json and the script part's path is the request's
 * script.path below root. -1 with the refusal's diagnostic. */
int stdin_parts_match(const stdin_parts *parts, const char *root, const jv *request, rerr *err);

/* Writes both parts where their paths say (durable writes, folders 0700). */
int stdin_parts_write(const char *root, const stdin_parts *parts, rerr *err);

void stdin_parts_free(stdin_parts *parts);

/* Prints `frame` (taken) with a "parts" array, then the parts' bytes: the
 * receipt at root/receipt_rel and, when its after-snapshot original is at
 * most RECEIVER_ATTACH_IMAGE_MAX_BYTES and still matches the receipt's
 * descriptor, that original (not with RELAY_RECEIVER_ATTACH=off in the
 * environment). A part that cannot be read is left out (the host then pulls
 * it). */
void stdout_parts_emit(const char *root, jv *frame, const char *receipt_rel);

#endif
