/*
 * delivery/image_context.h — one image delivery in progress (a `dctx`),
 * shared by the files of image delivery (image_*.c) and by nothing else:
 * the guest's facts copied under the manager's lock, the 90 s deadline,
 * the shared budget of three byte-transfer attempts, the answer being
 * built, and the guest's transport once it is reached.
 *
 * The first status set wins (dctx_status); every path that gives up sets
 * one, and a delivery that ends without one is the fixed "unexpected"
 * transfer-failed.
 *
 * Also the small checks every selector uses (idl_*). Nothing here reaches
 * the guest (image_guest.h does).
 */
#ifndef RELAY_DELIVERY_IMAGE_CONTEXT_H
#define RELAY_DELIVERY_IMAGE_CONTEXT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "delivery/image_result.h"
#include "guestio/guest_io.h"
#include "session/manager_internal.h"
#include "util/error.h"
#include "util/sha256.h"

typedef struct dctx {
	session_manager *m;
	guest *g;
	relay_call *call;
	int64_t deadline_mono_ms;
	int attempts_left;
	char last_transfer_error[RELAY_ERROR_MESSAGE_BYTES];
	image_delivery_result *out;

	/* the guest, copied under the lock */
	char *owner;       /* the session identity */
	char *session_dir; /* <state root>/<session key> */
	char *name;
	char *purpose;
	char *guest_root;
	char *evidence; /* the current recording */
	char *recording_session_id;
	json_object *backend;     /* {machine, endpoint, store, environmentFingerprint} */
	json_object *previous;    /* [{path, sessionId, ...}] */
	json_object *extractions; /* [{name, path}] */
	bool staged;
	bool closed; /* finished, released, sealed or closed */

	char binding_hex[SHA256_HEX_LEN + 1];
	char *catalog_dir; /* <session dir>/image-catalog/<purpose> */

	/* the guest, reached on first need */
	bool guest_confirmed;
	bool io_open;
	guest_io io;
} dctx;

/* Fills *c from the guest (under the manager's lock) and computes the
 * image binding and catalog folder. False with err: out of memory
 * (RELAY_E_NO_MEMORY), no lease yet (RELAY_E_NOT_FOUND), or the binding's
 * failure. `out` is where statuses go (borrowed); `call` may be NULL.
 * Call dctx_free() in every case. */
bool dctx_init(dctx *c, session_manager *m, guest *g, relay_call *call, int64_t deadline_mono_ms,
               image_delivery_result *out, relay_error *err);
void dctx_free(dctx *c);

/* Sets the answer's status and diagnostic (fmt may be NULL), unless one is
 * set already. */
void dctx_status(dctx *c, const char *status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Milliseconds left before the deadline (0 when it passed). */
int64_t dctx_remaining_ms(const dctx *c);

/* True (and the status set) when the call was cancelled or the deadline
 * passed; `doing` completes "while ...". */
bool dctx_out_of_time(dctx *c, const char *doing);

/* strdup, NULL for NULL. */
char *idl_dup(const char *s);

/* A deep copy of a JSON value through its text (json-c reference counts are
 * not shared across threads). NULL for NULL. */
json_object *idl_json_copy(const json_object *value);

/* A formatted path (malloc'd), NULL when out of memory. */
char *idl_pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ^[A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}$ */
bool idl_id_ok(const char *s, size_t max_len);

/* Both non-NULL and equal. */
bool idl_str_eq(const char *a, const char *b);

/* lstat says a regular file. */
bool idl_regular_file(const char *path);

#endif
