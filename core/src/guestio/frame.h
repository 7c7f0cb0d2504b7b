/*
 * guestio/frame.h — the host's reading of what the guest receiver prints
 * (spec/guest.md §5.1, §5.3, §5.4, §16.2), driven by the names of
 * guest/receiver_protocol.h, the protocol header the receiver compiles
 * against too. Pure functions of the bytes: no transport, no guest state
 * (tests/unit/guestio/test_guestio_frames.c, tests/fuzz/fuzz_guest_frame.c).
 *
 * Everything a guest prints is hostile input: a frame is an object or
 * nothing, a part is taken only whole and with its SHA-256.
 */
#ifndef RELAY_GUESTIO_FRAME_H
#define RELAY_GUESTIO_FRAME_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/status.h"

/* The frame of a receiver invocation: the last line of `out` that parses
 * as a JSON object (spec/guest.md §5.1, §15 step 5), or NULL. New reference. */
json_object *gio_parse_frame(const char *out, size_t len);

/* The status of a receiver's exit code (spec/guest.md §5.3): RELAY_OK for 0,
 * RELAY_E_INVALID_ARGUMENT for 2 (usage, nothing started),
 * RELAY_E_REFUSED for 3 (internal failure), RELAY_E_PROTOCOL otherwise. */
relay_status gio_frame_exit_status(int exit_code);

/* What `receiver run --stdin` answered (spec/guest.md §16.2): the frame line,
 * then the parts it names, each checked against its own fact. The part
 * bytes are borrowed from the output parsed; a part that is short or
 * fails its hash is left NULL (the host then pulls it) and named in
 * `dropped`. */
typedef struct gio_run_answer {
	json_object *frame; /* new reference, or NULL */
	const char *receipt;
	size_t receipt_len; /* bytes */
	const char *image;
	size_t image_len;        /* bytes */
	json_object *image_part; /* the part's fact {name, path, bytes, sha256}; borrowed from frame */
	char dropped[160];       /* why a part was not taken, or "" */
} gio_run_answer;

/* Parses `out` (len bytes) into *a (cleared first); a->frame stays NULL
 * when the first line is no JSON object. The caller puts a->frame. */
void gio_run_answer_parse(const char *out, size_t len, gio_run_answer *a);

/* Any answer of `receiver serve` (guest/receiver_protocol.h): its frame (a
 * new reference, or NULL when the first line is no JSON object) and, for
 * each name of the NULL-terminated `names`, the bytes of the part of that
 * name (borrowed from out; NULL with length 0 when there is none, or it is
 * not whole, or it fails its sha256). */
json_object *gio_answer_parts(const char *out, size_t len, const char *const *names, const char **data_out,
                              size_t *len_out);

/* True when the frame of `receiver run` refused what it read on standard
 * input without a receipt (exit 2, outcome kind "refused", no receipt):
 * nothing ran. */
bool gio_run_answer_refused(const char *out, size_t len);

/* Checks a run frame's receipt fact (spec/guest.md §5.4): the path of execution
 * `execution_id`'s receipt, a SHA-256, a size of 1 byte to
 * RECEIVER_RECEIPT_MAX_BYTES. *sha_out (borrowed from the fact, may be
 * NULL) and *bytes_out (-1 when absent) are set in every case. */
bool gio_frame_receipt_fact(json_object *frame_receipt, const char *execution_id, const char **sha_out,
                            int64_t *bytes_out);

#endif
