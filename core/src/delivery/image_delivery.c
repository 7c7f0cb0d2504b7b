/*
 * Saved images as the tools deliver them (image_delivery.h; images.md §1,
 * §3, §5-§8).
 *
 * One delivery is a `dctx`: the guest's facts copied under the manager's
 * lock, the 90 s deadline, the shared budget of three byte-transfer
 * attempts, and the answer being built. The first status set wins; every
 * path that gives up sets one, and a delivery that ends without one is the
 * fixed "unexpected" transfer-failed.
 */
#include "delivery/image_delivery.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/container.h"
#include "image/image.h"
#include "delivery/downloads.h"
#include "guestio/guest_io.h"
#include "delivery/image_catalog.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"
#include "receiver_protocol.h"

/* The step downloads (downloads.c) may not be linked into every build of
 * the core yet: without them there is nothing to wait for. */
#pragma weak downloads_expedite
#pragma weak downloads_guest_reached

#define REQUEST_MAX_BYTES  RECEIVER_REQUEST_MAX_BYTES /* receiver_protocol.h */
#define CONFIRM_TIMEOUT_MS 10000
#define SCAN_TIMEOUT_MS    60000
#define SNAPSHOT_NAME_MAX  255

/* ---- results ------------------------------------------------------------------------- */

void image_delivery_result_clear(image_delivery_result *r)
{
	if (r == NULL)
		return;
	json_object_put(r->image);
	json_object_put(r->presentation);
	free(r->diagnostic);
	free(r->preview_base64);
	memset(r, 0, sizeof *r);
}

json_object *image_delivery_json(const image_delivery_result *r)
{
	json_object *d = json_object_new_object();
	if (d == NULL)
		return NULL;
	jsonx_add_str(d, "status", r->status ? r->status : IMAGE_STATUS_TRANSFER_FAILED);
	if (r->image)
		jsonx_add(d, "image", json_object_get(r->image));
	if (r->diagnostic)
		jsonx_add_str(d, "diagnostic", r->diagnostic);
	else if (r->status == NULL)
		jsonx_add_str(d, "diagnostic", IMAGE_DIAG_UNEXPECTED);
	if (r->presentation)
		jsonx_add(d, "presentation", json_object_get(r->presentation));
	return d;
}

bool image_delivery_status_is_error(const char *status)
{
	return status == NULL ||
	       !(strcmp(status, IMAGE_STATUS_ATTACHED) == 0 || strcmp(status, IMAGE_STATUS_PENDING) == 0 ||
	         strcmp(status, IMAGE_STATUS_NOT_REQUESTED) == 0);
}

char *image_delivery_headline(const json_object *image_delivery, bool execution_failed)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"imageDelivery\":");
	jsonx_write(&sb, image_delivery, 0);
	strbuf_printf(&sb, ",\"executionFailed\":%s}", execution_failed ? "true" : "false");
	if (!strbuf_ok(&sb)) {
		strbuf_free(&sb);
		return NULL;
	}
	return strbuf_detach(&sb, NULL);
}

char *image_delivery_phrase(const json_object *image_delivery, const char *what)
{
	const char *status = jsonx_get_str(image_delivery, "status");
	const char *id = jsonx_get_str(jsonx_get_obj(image_delivery, "image"), "imageId");
	strbuf sb = STRBUF_INIT;
	if (status == NULL)
		strbuf_printf(&sb, "%s unknown", what);
	else if (strcmp(status, IMAGE_STATUS_NOT_REQUESTED) == 0)
		strbuf_printf(&sb, "no %s (not requested)", what);
	else
		strbuf_printf(&sb, "%s %s", what, status);
	/* "image-" and the first 8 hex digits name it well enough in a sentence. */
	if (id && strlen(id) > 14)
		strbuf_printf(&sb, " (%.14s…)", id);
	else if (id)
		strbuf_printf(&sb, " (%s)", id);
	if (!strbuf_ok(&sb)) {
		strbuf_free(&sb);
		return NULL;
	}
	return strbuf_detach(&sb, NULL);
}

void image_delivery_attach(image_delivery_result *r, tool_result *result)
{
	if (r == NULL || result == NULL || r->preview_base64 == NULL)
		return;
	char *mime = strdup(r->preview_mime ? r->preview_mime : IMAGE_MIME_PNG);
	if (mime == NULL)
		return;
	free(result->image_base64);
	free(result->image_mime);
	result->image_base64 = r->preview_base64;
	result->image_mime = mime;
	r->preview_base64 = NULL;
}

json_object *image_delivery_capability_json(void)
{
	json_object *c = json_object_new_object();
	jsonx_add_int(c, "version", 1);
	jsonx_add_str(c, "action", "image");
	json_object *sources = json_object_new_array();
	json_object_array_add(sources, json_object_new_string("display"));
	json_object_array_add(sources, json_object_new_string("application"));
	json_object_array_add(sources, json_object_new_string("reference"));
	jsonx_add(c, "sources", sources);
	jsonx_add_int(c, "deadlineMs", IMAGE_DELIVERY_DEADLINE_MS);
	jsonx_add_int(c, "transferAttempts", IMAGE_DELIVERY_ATTEMPTS);
	jsonx_add_int(c, "recommendedRecoveryCalls", IMAGE_DELIVERY_RECOVERY_CALLS);
	return c;
}

/* ---- the delivery context ------------------------------------------------------------ */

typedef struct dctx {
	manager *m;
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

static void set_status(dctx *c, const char *status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets the answer's status and diagnostic, unless one is set already. */
static void set_status(dctx *c, const char *status, const char *fmt, ...)
{
	if (c->out->status != NULL)
		return;
	c->out->status = status;
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		strbuf sb = STRBUF_INIT;
		strbuf_vprintf(&sb, fmt, ap);
		va_end(ap);
		free(c->out->diagnostic);
		c->out->diagnostic = strbuf_detach(&sb, NULL);
	}
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A deep copy of a JSON value through its text (json-c reference counts are
 * not shared across threads). */
static json_object *json_copy(const json_object *value)
{
	if (value == NULL)
		return NULL;
	char *text = jsonx_to_string(value, 0);
	json_object *copy = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	return copy;
}

/* The backend binding reduced to the four keys of images.md §2.2, each a
 * string or null. */
static json_object *normalized_backend(const json_object *binding)
{
	static const char *const keys[] = {"machine", "endpoint", "store", "environmentFingerprint"};
	json_object *b = json_object_new_object();
	for (size_t i = 0; b && i < sizeof keys / sizeof keys[0]; i++)
		jsonx_add_str(b, keys[i], jsonx_get_str(binding, keys[i]));
	return b;
}

static bool ctx_init(dctx *c, manager *m, guest *g, relay_call *call, int64_t deadline_mono_ms,
                     image_delivery_result *out, relay_error *err)
{
	memset(c, 0, sizeof *c);
	c->m = m;
	c->g = g;
	c->call = call;
	c->deadline_mono_ms = deadline_mono_ms;
	c->attempts_left = IMAGE_DELIVERY_ATTEMPTS;
	c->out = out;
	manager_lock(m);
	c->owner = dup_or_null(m->settings->session_id);
	c->session_dir = dup_or_null(m->settings->session_dir);
	c->name = dup_or_null(g->name);
	c->purpose = dup_or_null(g->purpose);
	c->guest_root = dup_or_null(g->guest_root);
	c->evidence = dup_or_null(g->evidence_path);
	c->recording_session_id = dup_or_null(g->recording_session_id);
	c->backend = normalized_backend(g->binding);
	c->previous = json_copy(g->previous_evidence);
	c->extractions = json_copy(g->extractions);
	c->staged = g->staged;
	c->closed = g->phase == PHASE_CLOSED || g->delivered || g->released || g->closed != NULL;
	manager_unlock(m);
	if (c->owner == NULL || c->session_dir == NULL || c->name == NULL || c->backend == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory reading guest %s",
		                g->name ? g->name : "(unnamed)");
		return false;
	}
	if (c->purpose == NULL || c->evidence == NULL) {
		relay_error_set(err, RELAY_E_NOT_FOUND, 0,
		                "guest %s holds no lease yet, so it has no saved images", c->name);
		return false;
	}
	if (image_catalog_binding(c->owner, c->purpose, c->backend, c->binding_hex, err) != RELAY_OK)
		return false;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/image-catalog/%s", c->session_dir, c->purpose);
	c->catalog_dir = strbuf_detach(&sb, NULL);
	if (c->catalog_dir == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		return false;
	}
	return true;
}

static void ctx_free(dctx *c)
{
	if (c->io_open)
		gio_end(&c->io);
	free(c->owner);
	free(c->session_dir);
	free(c->name);
	free(c->purpose);
	free(c->guest_root);
	free(c->evidence);
	free(c->recording_session_id);
	json_object_put(c->backend);
	json_object_put(c->previous);
	json_object_put(c->extractions);
	free(c->catalog_dir);
	memset(c, 0, sizeof *c);
}

static int64_t remaining_ms(const dctx *c)
{
	int64_t left = c->deadline_mono_ms - clock_monotonic_ms();
	return left > 0 ? left : 0;
}

/* True (and the status set) when the call was cancelled or the deadline
 * passed. */
static bool out_of_time(dctx *c, const char *doing)
{
	if (relay_call_is_cancelled(c->call)) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		           "relay_image was cancelled while %s; execution was not replayed", doing);
		return true;
	}
	if (remaining_ms(c) <= 0) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		           "the 90-second delivery deadline passed while %s; execution was not replayed",
		           doing);
		return true;
	}
	return false;
}

/* ---- small checks -------------------------------------------------------------------- */

/* ^[A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}$ */
static bool id_ok(const char *s, size_t max_len)
{
	if (s == NULL || s[0] == '\0' || strlen(s) > max_len)
		return false;
	for (const char *p = s; *p; p++) {
		char ch = *p;
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
		if (!alnum && (p == s || (ch != '_' && ch != '.' && ch != '-')))
			return false;
	}
	return true;
}

/* ^[A-Za-z0-9][A-Za-z0-9_.-]*\.png$, at most 255 characters. */
static bool snapshot_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	return n > 4 && n <= SNAPSHOT_NAME_MAX && id_ok(s, SNAPSHOT_NAME_MAX) &&
	       strcmp(s + n - 4, ".png") == 0;
}

static bool str_eq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* A string member, where JSON null and absence both read as NULL. */
static const char *opt_str(const json_object *obj, const char *key)
{
	return jsonx_get_str(obj, key);
}

static bool regular_file(const char *path)
{
	struct stat sb;
	return path && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Validates one snapshot descriptor of a receipt (guest.md §7.7). */
static bool snapshot_valid(const json_object *s, char *why, size_t why_len)
{
	const char *bad = NULL;
	int64_t bytes = 0;
	const char *phase = jsonx_get_str(s, "phase");
	if (!json_object_is_type(s, json_type_object))
		bad = "it is not an object";
	else if (!id_ok(jsonx_get_str(s, "sessionId"), 120))
		bad = "sessionId";
	else if (!id_ok(jsonx_get_str(s, "executionId"), 160))
		bad = "executionId";
	else if (jsonx_get_str(s, "actionId") == NULL || jsonx_get_str(s, "actionId")[0] == '\0')
		bad = "actionId";
	else if (jsonx_has(s, "stepId") && json_object_object_get((json_object *)s, "stepId") != NULL &&
	         !id_ok(jsonx_get_str(s, "stepId"), 120))
		bad = "stepId";
	else if (jsonx_has(s, "groupId") && json_object_object_get((json_object *)s, "groupId") != NULL &&
	         !id_ok(jsonx_get_str(s, "groupId"), 120))
		bad = "groupId";
	else if (phase == NULL || (strcmp(phase, "before") != 0 && strcmp(phase, "after") != 0))
		bad = "phase";
	else if (jsonx_get_str(s, "capturedAt") == NULL)
		bad = "capturedAt";
	else if (!sha256_hex_valid(jsonx_get_str(s, "sha256")))
		bad = "sha256";
	else if (!jsonx_get_int(s, "bytes", &bytes) || bytes < 1 || bytes > (int64_t)IMAGE_MAX_ORIGINAL_BYTES)
		bad = "bytes";
	else if (!str_eq(jsonx_get_str(s, "mimeType"), IMAGE_MIME_PNG))
		bad = "mimeType";
	else if (!snapshot_name_ok(jsonx_get_str(s, "fileName")))
		bad = "fileName";
	if (bad) {
		snprintf(why, why_len, "a snapshot descriptor of the receipt is malformed (%s)", bad);
		return false;
	}
	return true;
}

/* ---- identities ---------------------------------------------------------------------- */

/* The display descriptor (images.md §2.1) of a valid snapshot descriptor
 * with its imageId, without originalPath: keys in the order of tools.md
 * §3.6. */
static json_object *display_descriptor(const char *binding_hex, const char *enclosure, const json_object *s,
                                       relay_error *err)
{
	json_object *d = json_object_new_object();
	if (d == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		return NULL;
	}
	int64_t bytes = 0;
	jsonx_get_int(s, "bytes", &bytes);
	jsonx_add_str(d, "imageId", "");
	jsonx_add_str(d, "source", "display");
	jsonx_add_str(d, "enclosure", enclosure);
	jsonx_add_str(d, "sessionId", jsonx_get_str(s, "sessionId"));
	jsonx_add_str(d, "executionId", jsonx_get_str(s, "executionId"));
	jsonx_add_str(d, "actionId", jsonx_get_str(s, "actionId"));
	if (opt_str(s, "stepId"))
		jsonx_add_str(d, "stepId", opt_str(s, "stepId"));
	if (opt_str(s, "groupId"))
		jsonx_add_str(d, "groupId", opt_str(s, "groupId"));
	jsonx_add_str(d, "phase", jsonx_get_str(s, "phase"));
	jsonx_add_str(d, "capturedAt", jsonx_get_str(s, "capturedAt"));
	jsonx_add_str(d, "sha256", jsonx_get_str(s, "sha256"));
	jsonx_add_int(d, "bytes", bytes);
	jsonx_add_str(d, "mimeType", jsonx_get_str(s, "mimeType"));
	char id[IMAGE_CATALOG_ID_LEN + 1];
	if (image_catalog_image_id(binding_hex, d, jsonx_get_str(s, "fileName"), id, err) != RELAY_OK) {
		json_object_put(d);
		return NULL;
	}
	jsonx_add_str(d, "imageId", id);
	return d;
}

/* A catalog entry (images.md §2.3); `descriptor` is copied. */
static json_object *catalog_entry(const char *binding_hex, const json_object *descriptor,
                                  const char *file_name, const char *recording, const char *remote,
                                  const char *approved_root, const char *local)
{
	json_object *e = json_object_new_object();
	json_object *d = json_copy(descriptor);
	if (e == NULL || d == NULL) {
		json_object_put(e);
		json_object_put(d);
		return NULL;
	}
	json_object_object_del(d, "originalPath");
	json_object_object_del(d, "retrievedAt");
	jsonx_add_str(e, "binding", binding_hex);
	jsonx_add(e, "descriptor", d);
	jsonx_add_str(e, "fileName", file_name);
	jsonx_add_str(e, "recording", recording);
	jsonx_add_str(e, "remote", remote);
	jsonx_add_str(e, "approvedRoot", approved_root);
	jsonx_add_str(e, "local", local);
	return e;
}

static char *original_path_of(const char *recording, const char *image_id, const char *ext)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/host/images/%s/original.%s", recording, image_id, ext);
	return strbuf_detach(&sb, NULL);
}

/* The image object of a result: the catalog descriptor with originalPath
 * (and retrievedAt when given). */
static json_object *result_image(const json_object *descriptor, const char *original_path,
                                 const char *retrieved_at)
{
	json_object *img = json_copy(descriptor);
	if (img == NULL)
		return NULL;
	json_object_object_del(img, "originalPath");
	json_object_object_del(img, "retrievedAt");
	jsonx_add_str(img, "originalPath", original_path);
	if (retrieved_at)
		jsonx_add_str(img, "retrievedAt", retrieved_at);
	return img;
}

/* Identity and catalog entry of a display snapshot of the recording
 * `recording` (sessionId's evidence folder). On success *entry_out is the
 * stored entry (new reference) and the return value the result image. */
static json_object *display_identity(dctx *c, const char *recording, const json_object *snap, bool record,
                                     json_object **entry_out, relay_error *err)
{
	json_object *entry = NULL, *stored = NULL, *image = NULL;
	char *remote = NULL, *approved = NULL, *local = NULL;
	if (entry_out)
		*entry_out = NULL;
	char why[200];
	if (!snapshot_valid(snap, why, sizeof why)) {
		relay_error_set(err, RELAY_E_PROTOCOL, 0, "%s", why);
		return NULL;
	}
	json_object *d = display_descriptor(c->binding_hex, c->purpose, snap, err);
	if (d == NULL)
		return NULL;
	const char *id = jsonx_get_str(d, "imageId");
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/state/snapshots/%s", c->guest_root ? c->guest_root : "",
	              jsonx_get_str(snap, "sessionId"));
	approved = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", approved ? approved : "", jsonx_get_str(snap, "fileName"));
	remote = strbuf_detach(&sb, NULL);
	local = original_path_of(recording, id, "png");
	entry = catalog_entry(c->binding_hex, d, jsonx_get_str(snap, "fileName"), recording, remote, approved,
	                      local);
	if (entry == NULL || remote == NULL || approved == NULL || local == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		goto cleanup;
	}
	if (record) {
		if (image_catalog_put(c->catalog_dir, entry, &stored, err) != RELAY_OK)
			goto cleanup;
	} else {
		stored = json_object_get(entry);
	}
	image = result_image(jsonx_get_obj(stored, "descriptor"), jsonx_get_str(stored, "local"), NULL);
	if (image == NULL) {
		relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		goto cleanup;
	}
	if (entry_out) {
		*entry_out = stored;
		stored = NULL;
	}
cleanup:
	json_object_put(d);
	json_object_put(entry);
	json_object_put(stored);
	free(remote);
	free(approved);
	free(local);
	return image;
}

json_object *image_delivery_display_image(manager *m, guest *g, const char *recording,
                                          const json_object *snapshot, bool catalog, char **file_name_out,
                                          relay_error *err)
{
	image_delivery_result unused;
	memset(&unused, 0, sizeof unused);
	if (file_name_out)
		*file_name_out = NULL;
	dctx c;
	if (!ctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, &unused, err)) {
		ctx_free(&c);
		return NULL;
	}
	json_object *image =
	    display_identity(&c, recording ? recording : c.evidence, snapshot, catalog, NULL, err);
	if (image && file_name_out) {
		*file_name_out = dup_or_null(jsonx_get_str(snapshot, "fileName"));
		if (*file_name_out == NULL) {
			json_object_put(image);
			image = NULL;
			relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		}
	}
	ctx_free(&c);
	image_delivery_result_clear(&unused);
	return image;
}

/* ---- the guest ----------------------------------------------------------------------- */

/* images.md §5 last item: before a guest pull, the guest must still be the
 * one the image belongs to. Then the transport is opened. */
static bool confirm_guest(dctx *c)
{
	if (c->guest_confirmed)
		return true;
	if (out_of_time(c, "confirming the guest"))
		return false;
	manager_wait_startup(c->m);
	loaded_plugin *machine = c->m->backends->plugins[SLOT_MACHINE];
	char *lease = guest_lease_text(c->m, c->g);
	relay_error err;
	memset(&err, 0, sizeof err);
	if (lease == NULL) {
		set_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_GUEST_GONE);
		return false;
	}
	bool ok = true;
	if (machine && machine->machine.inspect) {
		int64_t limit = remaining_ms(c) < CONFIRM_TIMEOUT_MS ? remaining_ms(c) : CONFIRM_TIMEOUT_MS;
		relay_call *sub = manager_internal_call(c->m, limit);
		char *answer = NULL;
		relay_status st = machine->machine.inspect(machine->state, lease, sub, 0, &answer, &err);
		manager_internal_call_done(c->m, sub);
		json_object *doc = answer ? jsonx_parse_str(answer, NULL, 0) : NULL;
		free(answer);
		if (st == RELAY_E_NOT_FOUND) {
			set_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_GUEST_GONE);
			ok = false;
		} else if (st != RELAY_OK) {
			set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
			           "cannot confirm that guest %s still exists before pulling its image: %s",
			           c->name, err.message[0] ? err.message : relay_status_str(st));
			ok = false;
		} else if (doc && jsonx_get_str(doc, "purpose") &&
		           !str_eq(jsonx_get_str(doc, "purpose"), c->purpose)) {
			set_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
			           "the machine behind guest %s now holds lease purpose %s, not %s; the "
			           "image belongs to "
			           "another lease",
			           c->name, jsonx_get_str(doc, "purpose"), c->purpose);
			ok = false;
		}
		json_object_put(doc);
	}
	if (ok && machine && machine->machine.health) {
		int64_t limit = remaining_ms(c) < CONFIRM_TIMEOUT_MS ? remaining_ms(c) : CONFIRM_TIMEOUT_MS;
		relay_call *sub = manager_internal_call(c->m, limit);
		memset(&err, 0, sizeof err);
		relay_status st = machine->machine.health(machine->state, sub, 0, NULL, &err);
		manager_internal_call_done(c->m, sub);
		if (st != RELAY_OK) {
			set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
			           "the machine backend of guest %s failed its identity check: %s", c->name,
			           err.message[0] ? err.message : relay_status_str(st));
			ok = false;
		}
	}
	free(lease);
	if (!ok)
		return false;
	memset(&err, 0, sizeof err);
	if (gio_begin(&c->io, c->m, c->g, c->call, &err) != RELAY_OK) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot reach guest %s through its transport: %s",
		           c->name, err.message);
		return false;
	}
	c->io_open = true;
	c->guest_confirmed = true;
	if (downloads_guest_reached)
		downloads_guest_reached(c->m, c->g);
	return true;
}

static bool transient_failure(relay_status st, const relay_error *err)
{
	if (st == RELAY_E_TRANSIENT || st == RELAY_E_TIMEOUT || st == RELAY_E_INDETERMINATE ||
	    st == RELAY_E_UNAVAILABLE)
		return true;
	if (st == RELAY_E_IO && (err->sys_errno == ECONNRESET || err->sys_errno == EPIPE ||
	                         err->sys_errno == ECONNREFUSED || err->sys_errno == ETIMEDOUT))
		return true;
	if (st == RELAY_E_IO || st == RELAY_E_PROTOCOL)
		return gio_transient(st, err->message);
	return false;
}

/* One byte transfer from the guest within the budget and the deadline
 * (images.md §6): transient failures are tried again at once while
 * attempts are left; lasting ones end the delivery with their status.
 * `local` must not exist; on failure nothing is left there. */
static bool guest_pull(dctx *c, const char *remote, const char *local, const char *what, uint64_t max_bytes)
{
	if (!confirm_guest(c))
		return false;
	for (;;) {
		if (out_of_time(c, what))
			return false;
		if (c->attempts_left <= 0) {
			set_status(
			    c, IMAGE_STATUS_TRANSFER_FAILED,
			    "the %d transfer attempts of this delivery are used up (last failure, %s: %s); "
			    "ask "
			    "relay_image again by the same imageId or selector, never by repeating the input",
			    IMAGE_DELIVERY_ATTEMPTS, what,
			    c->last_transfer_error[0] ? c->last_transfer_error : "none recorded");
			return false;
		}
		c->attempts_left--;
		relay_call *sub = manager_internal_call(c->m, remaining_ms(c));
		relay_error err;
		memset(&err, 0, sizeof err);
		char *facts = NULL;
		relay_status st = c->io.plugin->transport.pull(c->io.plugin->state, c->io.conn, remote, local,
		                                               sub, 0, &facts, &err);
		bool sub_cancelled = relay_call_is_cancelled(sub);
		manager_internal_call_done(c->m, sub);
		free(facts);
		if (st == RELAY_OK) {
			struct stat sb;
			if (lstat(local, &sb) != 0 || !S_ISREG(sb.st_mode)) {
				set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
				           "the transport reported %s pulled, but no regular file arrived",
				           what);
				return false;
			}
			if ((uint64_t)sb.st_size > max_bytes) {
				unlink(local);
				set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
				           "%s is %lld bytes, more than the %" PRIu64
				           " bytes allowed; it was discarded",
				           what, (long long)sb.st_size, max_bytes);
				return false;
			}
			return true;
		}
		relay_error ignored;
		fs_remove_tree(local, &ignored);
		snprintf(c->last_transfer_error, sizeof c->last_transfer_error, "%s",
		         err.message[0] ? err.message : relay_status_str(st));
		if (st == RELAY_E_CANCELLED || sub_cancelled) {
			out_of_time(c, what);
			set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "pulling %s was cancelled: %s", what,
			           c->last_transfer_error);
			return false;
		}
		if (transient_failure(st, &err)) {
			log_info("relay_image: transient failure pulling %s from %s (%d attempt%s left): %s",
			         what, c->name, c->attempts_left, c->attempts_left == 1 ? "" : "s",
			         c->last_transfer_error);
			continue;
		}
		switch (st) {
		case RELAY_E_UNSAFE_PATH:
			set_status(c, IMAGE_STATUS_UNSAFE_PATH,
			           "the guest answered an unsafe path for %s: %s", what,
			           c->last_transfer_error);
			break;
		case RELAY_E_NOT_FOUND:
			set_status(c, IMAGE_STATUS_IMAGE_MISSING, "%s is not in the guest: %s", what,
			           c->last_transfer_error);
			break;
		case RELAY_E_INTEGRITY:
			set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s failed its transfer check: %s", what,
			           c->last_transfer_error);
			break;
		default:
			set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
			           "%s could not be pulled (not retried: %s)", what, c->last_transfer_error);
			break;
		}
		return false;
	}
}

/* A scratch path for pulled metadata (malloc'd). */
static char *scratch_path(dctx *c, const char *prefix, const char *suffix)
{
	relay_error err;
	char *p = gio_scratch_path(&c->io, prefix, suffix, &err);
	if (p == NULL)
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "no host scratch space for the delivery: %s",
		           err.message);
	return p;
}

/* Pulls a guest metadata file (receipt, action record, journal) of at most
 * 4 MiB and parses it (`jsonl`: returns the raw text in *text_out instead). */
static bool guest_metadata(dctx *c, const char *remote, const char *what, json_object **obj_out,
                           char **text_out)
{
	if (obj_out)
		*obj_out = NULL;
	if (text_out)
		*text_out = NULL;
	if (!confirm_guest(c))
		return false;
	char *local = scratch_path(c, "meta-", ".json");
	if (local == NULL)
		return false;
	bool ok = guest_pull(c, remote, local, what, IMAGE_DELIVERY_METADATA_BYTES);
	if (ok) {
		relay_error err;
		char *data = NULL;
		size_t len = 0;
		if (fs_read_file(local, IMAGE_DELIVERY_METADATA_BYTES, &data, &len, &err) != RELAY_OK) {
			set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot read %s after pulling it: %s",
			           what, err.message);
			ok = false;
		} else if (text_out) {
			*text_out = data;
			data = NULL;
		} else {
			char why[128];
			json_object *obj = jsonx_parse(data, len, NULL, why, sizeof why);
			if (!json_object_is_type(obj, json_type_object)) {
				json_object_put(obj);
				set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
				           "%s pulled from the guest is not a JSON object (%s)", what, why);
				ok = false;
			} else {
				*obj_out = obj;
			}
		}
		free(data);
	}
	relay_error ignored;
	fs_remove_tree(local, &ignored);
	free(local);
	return ok;
}

/* ---- the original -------------------------------------------------------------------- */

typedef struct original_spec {
	const char *local;             /* where it is published (the catalog's "local") */
	const char *sha256;            /* the identity's */
	uint64_t bytes;                /* the identity's */
	const char *mime;              /* the identity's */
	const char *const *candidates; /* host copies to try, NULL-terminated (may be NULL) */
	const char *remote;            /* the guest path, or NULL when the guest must not be asked */
	const char *no_guest_status;   /* when remote is NULL and no copy is on the host */
	const char *no_guest_diag;
	bool check_signature; /* the bytes must carry the signature of `mime` (application images) */
	const char *what;     /* "the image x.png", for messages */
} original_spec;

/* Reads a published original into memory and checks its bytes once more. */
static bool read_verified(dctx *c, const char *path, const original_spec *spec, unsigned char **data_out,
                          size_t *len_out)
{
	relay_error err;
	char *data = NULL;
	size_t len = 0;
	relay_status st = fs_read_file(path, (size_t)spec->bytes + 1, &data, &len, &err);
	if (st != RELAY_OK) {
		set_status(c,
		           st == RELAY_E_TOO_LARGE || st == RELAY_E_UNSAFE_PATH
		               ? IMAGE_STATUS_INTEGRITY_FAILED
		               : IMAGE_STATUS_TRANSFER_FAILED,
		           "cannot read the published original %s: %s", path, err.message);
		return false;
	}
	char hex[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(data, len, hex);
	if (len != spec->bytes || strcmp(hex, spec->sha256) != 0) {
		free(data);
		set_status(
		    c, IMAGE_STATUS_INTEGRITY_FAILED,
		    "the published original %s changed: it holds %zu bytes with SHA-256 %.12s…, not the "
		    "image's %" PRIu64 " bytes",
		    path, len, hex, spec->bytes);
		return false;
	}
	*data_out = (unsigned char *)data;
	*len_out = len;
	return true;
}

/* The signature check of images.md §1.2 on a staged copy. */
static bool signature_matches(dctx *c, const char *path, const original_spec *spec)
{
	unsigned char head[32];
	FILE *f = fopen(path, "rb");
	size_t n = f ? fread(head, 1, sizeof head, f) : 0;
	if (f)
		fclose(f);
	const char *found = image_mime_from_signature(head, n);
	if (found == NULL || strcmp(found, spec->mime) != 0) {
		set_status(c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		           "the image's bytes do not match its extension (%s "
		           "holds %s, the extension says %s)",
		           spec->what, found ? found : "no PNG, JPEG or WebP signature", spec->mime);
		return false;
	}
	return true;
}

/* Publishes a staged copy (verify, link) and reads it back. */
static bool publish_staged(dctx *c, image_catalog_staging *staging, const original_spec *spec,
                           unsigned char **data_out, size_t *len_out)
{
	if (spec->check_signature && !signature_matches(c, staging->file, spec))
		return false;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_catalog_staging_publish(staging, spec->sha256, spec->bytes, NULL, &err);
	if (st != RELAY_OK) {
		set_status(
		    c, st == RELAY_E_INTEGRITY ? IMAGE_STATUS_INTEGRITY_FAILED : IMAGE_STATUS_TRANSFER_FAILED,
		    "%s: %s", spec->what, err.message);
		return false;
	}
	return read_verified(c, staging->published, spec, data_out, len_out);
}

/* Finds the original on the host (published, then the candidates), else
 * pulls it from the guest; publishes it; returns its verified bytes. */
static bool obtain_original(dctx *c, const original_spec *spec, unsigned char **data_out, size_t *len_out)
{
	*data_out = NULL;
	*len_out = 0;
	bool ok = false;
	char *image_dir = fs_dirname(spec->local);
	const char *dot = strrchr(spec->local, '.');
	const char *ext = dot ? dot + 1 : "png";
	image_catalog_staging staging;
	memset(&staging, 0, sizeof staging);
	relay_error err;
	memset(&err, 0, sizeof err);
	if (image_dir == NULL) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	/* 1. the published original */
	bool present = false;
	relay_status st =
	    image_catalog_original_check(image_dir, ext, spec->sha256, spec->bytes, &present, &err);
	if (st != RELAY_OK) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		goto cleanup;
	}
	if (present) {
		ok = read_verified(c, spec->local, spec, data_out, len_out);
		goto cleanup;
	}
	/* 2. host copies: the recording's canonical snapshot, the step folder */
	for (size_t i = 0; spec->candidates && spec->candidates[i]; i++) {
		const char *cand = spec->candidates[i];
		if (!regular_file(cand))
			continue;
		char hex[SHA256_HEX_LEN + 1];
		uint64_t got = 0;
		if (sha256_file_hex(cand, hex, &got, &err) != RELAY_OK) {
			set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot read the host copy %s: %s", cand,
			           err.message);
			goto cleanup;
		}
		if (got != spec->bytes || strcmp(hex, spec->sha256) != 0) {
			set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
			           "the host copy %s holds %" PRIu64
			           " bytes with SHA-256 %.12s…, not the image's %" PRIu64
			           " bytes with %.12s…",
			           cand, got, hex, spec->bytes, spec->sha256);
			goto cleanup;
		}
		if (image_catalog_staging_open(image_dir, ext, &staging, &err) != RELAY_OK ||
		    fs_copy_file(cand, staging.file, 0600, &err) != RELAY_OK) {
			set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot stage %s for publication: %s",
			           cand, err.message);
			goto cleanup;
		}
		ok = publish_staged(c, &staging, spec, data_out, len_out);
		goto cleanup;
	}
	/* 3. the guest */
	if (spec->remote == NULL) {
		set_status(c, spec->no_guest_status, "%s", spec->no_guest_diag);
		goto cleanup;
	}
	if (!confirm_guest(c))
		goto cleanup;
	if (image_catalog_staging_open(image_dir, ext, &staging, &err) != RELAY_OK) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot prepare publication of %s: %s",
		           spec->what, err.message);
		goto cleanup;
	}
	if (!guest_pull(c, spec->remote, staging.file, spec->what, IMAGE_MAX_ORIGINAL_BYTES))
		goto cleanup;
	ok = publish_staged(c, &staging, spec, data_out, len_out);
cleanup:
	image_catalog_staging_close(&staging);
	free(image_dir);
	return ok;
}

/* Presents verified bytes (images.md §9) and writes the delivery receipt.
 * The preview stays in the answer even when the receipt cannot be written
 * (mcp.md §7: an image that was produced stays beside isError). */
static void present_and_record(dctx *c, const char *image_dir, const unsigned char *data, size_t len,
                               const char *mime)
{
	image_presentation p;
	memset(&p, 0, sizeof p);
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_present(data, len, mime, &p, &err);
	if (st != RELAY_OK) {
		const char *status = image_delivery_status(st);
		set_status(c, status, "%s", err.message[0] ? err.message : relay_status_str(st));
		return;
	}
	c->out->presentation = json_object_get(p.receipt);
	c->out->preview_base64 = p.base64;
	c->out->preview_mime = p.mime_type;
	p.base64 = NULL;
	image_presentation_free(&p);

	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	json_object *receipt = json_object_new_object();
	jsonx_add(receipt, "image", json_object_get(c->out->image));
	jsonx_add(receipt, "presentation", json_object_get(c->out->presentation));
	jsonx_add_str(receipt, "at", at);
	jsonx_add_str(receipt, "status", IMAGE_STATUS_ATTACHED);
	memset(&err, 0, sizeof err);
	st = receipt ? image_catalog_receipt_write(image_dir, receipt, NULL, &err)
	             : relay_error_set(&err, RELAY_E_NO_MEMORY, 0, "out of memory");
	json_object_put(receipt);
	if (st != RELAY_OK) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		           "the preview was produced and is attached, but its delivery receipt could not be "
		           "written in "
		           "%s: %s",
		           image_dir, err.message);
		return;
	}
	set_status(c, IMAGE_STATUS_ATTACHED, NULL);
}

/* Obtains, publishes and presents the original of a resolved image. */
static void deliver(dctx *c, const original_spec *spec)
{
	unsigned char *data = NULL;
	size_t len = 0;
	if (!obtain_original(c, spec, &data, &len))
		return;
	char *image_dir = fs_dirname(spec->local);
	if (image_dir)
		present_and_record(c, image_dir, data, len, spec->mime);
	else
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
	free(image_dir);
	free(data);
}

/* ---- recordings ---------------------------------------------------------------------- */

/* The evidence folder of recording `session_id` of this guest (current or
 * previous), malloc'd, or NULL. *current says which. */
static char *recording_of(dctx *c, const char *session_id, bool *current)
{
	*current = false;
	if (str_eq(c->recording_session_id, session_id)) {
		*current = true;
		return dup_or_null(c->evidence);
	}
	size_t n =
	    json_object_is_type(c->previous, json_type_array) ? json_object_array_length(c->previous) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *p = json_object_array_get_idx(c->previous, i);
		if (str_eq(jsonx_get_str(p, "sessionId"), session_id))
			return dup_or_null(jsonx_get_str(p, "path"));
	}
	return NULL;
}

/* True when `path` is one of this guest's recordings; *current says which. */
static bool own_recording(dctx *c, const char *path, bool *current)
{
	*current = str_eq(path, c->evidence);
	if (*current)
		return true;
	size_t n =
	    json_object_is_type(c->previous, json_type_array) ? json_object_array_length(c->previous) : 0;
	for (size_t i = 0; i < n; i++)
		if (str_eq(jsonx_get_str(json_object_array_get_idx(c->previous, i), "path"), path))
			return true;
	return false;
}

/* The other guest of this session that owns recording `session_id`
 * (malloc'd name), or NULL. */
static char *recording_owner_elsewhere(dctx *c, const char *session_id)
{
	char *owner = NULL;
	manager_lock(c->m);
	for (guest *o = c->m->guests; o && owner == NULL; o = o->next) {
		if (o == c->g)
			continue;
		if (str_eq(o->recording_session_id, session_id)) {
			owner = dup_or_null(o->name);
			break;
		}
		size_t n = json_object_is_type(o->previous_evidence, json_type_array)
		               ? json_object_array_length(o->previous_evidence)
		               : 0;
		for (size_t i = 0; i < n && owner == NULL; i++)
			if (str_eq(jsonx_get_str(json_object_array_get_idx(o->previous_evidence, i),
			                         "sessionId"),
			           session_id))
				owner = dup_or_null(o->name);
	}
	manager_unlock(c->m);
	return owner;
}

/* The guest of this session whose purpose is `purpose` (malloc'd name). */
static char *guest_of_purpose(dctx *c, const char *purpose)
{
	char *name = NULL;
	manager_lock(c->m);
	for (guest *o = c->m->guests; o && name == NULL; o = o->next)
		if (str_eq(o->purpose, purpose))
			name = dup_or_null(o->name);
	manager_unlock(c->m);
	return name;
}

/* Waits for the execution's step download when it is queued or running
 * (images.md §7 step 4). False (status set) when the deadline passed or the
 * call was cancelled first. */
static bool wait_for_step(dctx *c, const char *execution_id)
{
	if (downloads_expedite == NULL || c->closed)
		return true;
	downloads_wait_result w = downloads_expedite(c->m, c->g, execution_id, c->deadline_mono_ms, c->call);
	if (w == DOWNLOADS_WAIT_DEADLINE || w == DOWNLOADS_WAIT_CANCELLED) {
		out_of_time(c, "waiting for the step's background download");
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		           "the background download of %s did not finish within the delivery's deadline",
		           execution_id);
		return false;
	}
	return true;
}

/* Reads the first existing candidate as a JSON object. NULL when none
 * exists; on a damaged one the status is set and *failed true. */
static json_object *host_json(dctx *c, const char *const *paths, const char *what, bool *failed)
{
	*failed = false;
	for (size_t i = 0; paths[i]; i++) {
		if (!regular_file(paths[i]))
			continue;
		json_object *obj = NULL;
		relay_error err;
		if (fs_read_json(paths[i], IMAGE_DELIVERY_METADATA_BYTES, &obj, &err) != RELAY_OK ||
		    !json_object_is_type(obj, json_type_object)) {
			json_object_put(obj);
			set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s on the host (%s) cannot be read: %s",
			           what, paths[i], err.message);
			*failed = true;
			return NULL;
		}
		return obj;
	}
	return NULL;
}

static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	return strbuf_detach(&sb, NULL);
}

/* The snapshot plan of a request (guest.md §6, §10): whether `phase` is
 * captured. Sets not-requested and returns false when it is not. */
static bool plan_captures(dctx *c, const json_object *request, const char *phase)
{
	json_object *capture = NULL;
	if (request && json_object_object_get_ex((json_object *)request, "capture", &capture) &&
	    capture == NULL) {
		set_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_SNAPSHOTS_OFF);
		return false;
	}
	const char *group_phase =
	    jsonx_get_str(jsonx_get_obj(jsonx_get_obj(request, "snapshots"), "group"), "phase");
	bool captured = true;
	if (group_phase) {
		if (strcmp(group_phase, "first") == 0)
			captured = strcmp(phase, "before") == 0;
		else if (strcmp(group_phase, "last") == 0)
			captured = strcmp(phase, "after") == 0;
		else
			captured = false;
	}
	if (!captured)
		set_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_PLAN);
	return captured;
}

/* Validates a receipt's imageEvidence for (sessionId, executionId). */
static bool image_evidence_valid(const json_object *ev, const char *session_id, const char *execution_id,
                                 char *why, size_t why_len)
{
	const char *status = jsonx_get_str(ev, "status");
	if (status == NULL ||
	    (strcmp(status, "available") != 0 && strcmp(status, "not-requested") != 0 &&
	     strcmp(status, "capture-failed") != 0 && strcmp(status, "capture-unknown") != 0)) {
		snprintf(why, why_len, "the receipt's imageEvidence has no valid status");
		return false;
	}
	json_object *snaps = NULL;
	if (json_object_object_get_ex((json_object *)ev, "snapshots", &snaps) && snaps != NULL &&
	    !json_object_is_type(snaps, json_type_array)) {
		snprintf(why, why_len, "the receipt's imageEvidence.snapshots is not an array");
		return false;
	}
	size_t n = snaps ? json_object_array_length(snaps) : 0;
	if (n > 2) {
		snprintf(why, why_len, "the receipt lists %zu snapshots; a run has at most two", n);
		return false;
	}
	const char *seen = NULL;
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(snaps, i);
		if (!snapshot_valid(s, why, why_len))
			return false;
		if (!str_eq(jsonx_get_str(s, "executionId"), execution_id) ||
		    !str_eq(jsonx_get_str(s, "sessionId"), session_id)) {
			snprintf(why, why_len,
			         "a snapshot descriptor of the receipt names another execution or recording");
			return false;
		}
		if (seen && str_eq(seen, jsonx_get_str(s, "phase"))) {
			snprintf(why, why_len, "the receipt lists the %s snapshot twice", seen);
			return false;
		}
		seen = jsonx_get_str(s, "phase");
	}
	return true;
}

static json_object *snapshot_for_phase(const json_object *ev, const char *phase)
{
	json_object *snaps = jsonx_get_array(ev, "snapshots");
	size_t n = snaps ? json_object_array_length(snaps) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(snaps, i);
		if (str_eq(jsonx_get_str(s, "phase"), phase))
			return s;
	}
	return NULL;
}

/* Does the journal (text of events.jsonl) record this snapshot? */
static bool journal_names(const char *text, const json_object *snap)
{
	const char *line = text;
	while (line && *line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		json_object *ev = jsonx_parse(line, len, NULL, NULL, 0);
		int64_t bytes = -1, want = -2;
		jsonx_get_int(ev, "bytes", &bytes);
		jsonx_get_int(snap, "bytes", &want);
		bool match = ev && str_eq(jsonx_get_str(ev, "type"), "snapshot-captured") &&
		             str_eq(jsonx_get_str(ev, "executionId"), jsonx_get_str(snap, "executionId")) &&
		             str_eq(jsonx_get_str(ev, "phase"), jsonx_get_str(snap, "phase")) &&
		             str_eq(jsonx_get_str(ev, "fileName"), jsonx_get_str(snap, "fileName")) &&
		             str_eq(jsonx_get_str(ev, "sha256"), jsonx_get_str(snap, "sha256")) &&
		             bytes == want;
		json_object_put(ev);
		if (match)
			return true;
		line = end ? end + 1 : NULL;
	}
	return false;
}

/* images.md §1.1: the action record must match the receipt's descriptor in
 * identity, group and step, with snapshotRole the group's phase (or
 * single), and its reverse references (or else the journal) must name the
 * same image. */
static bool cross_check(dctx *c, const char *recording, bool live, const json_object *snap,
                        const char *group_phase)
{
	const char *eid = jsonx_get_str(snap, "executionId");
	const char *sid = jsonx_get_str(snap, "sessionId");
	const char *aid = jsonx_get_str(snap, "actionId");
	bool ok = false, failed = false;
	json_object *action = NULL;
	char *journal_text = NULL;
	char *p1 = pathf("%s/state/records/action/%s.json", recording, aid);
	char *p2 = pathf("%s/host/steps/%s/state/records/action/%s.json", recording, eid, aid);
	char *remote = pathf("%s/state/records/action/%s.json", c->guest_root ? c->guest_root : "", aid);
	char *expected_path = pathf("state/snapshots/%s/%s", sid, jsonx_get_str(snap, "fileName"));
	if (p1 == NULL || p2 == NULL || remote == NULL || expected_path == NULL) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	if (strchr(aid, '/') || strcmp(aid, "..") == 0) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the receipt names an unusable actionId %s",
		           aid);
		goto cleanup;
	}
	const char *const host[] = {p1, p2, NULL};
	action = host_json(c, host, "the action record", &failed);
	if (failed)
		goto cleanup;
	if (action == NULL) {
		if (!live) {
			set_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_STATE_GONE);
			goto cleanup;
		}
		if (!guest_metadata(c, remote, "the action record", &action, NULL)) {
			if (str_eq(c->out->status, IMAGE_STATUS_IMAGE_MISSING)) {
				c->out->status = NULL;
				set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
				           "the guest holds no action record %s for execution %s, so the "
				           "image cannot be "
				           "trusted",
				           aid, eid);
			}
			goto cleanup;
		}
	}
	const char *role = group_phase ? group_phase : "single";
	const char *why = NULL;
	if (!str_eq(jsonx_get_str(action, "actionId"), aid))
		why = "actionId";
	else if (!str_eq(jsonx_get_str(action, "executionId"), eid))
		why = "executionId";
	else if (!str_eq(jsonx_get_str(action, "sessionId"), sid))
		why = "sessionId";
	else if (opt_str(snap, "stepId") && !str_eq(opt_str(action, "stepId"), opt_str(snap, "stepId")))
		why = "stepId";
	else if (!(opt_str(action, "groupId") == NULL && opt_str(snap, "groupId") == NULL) &&
	         !str_eq(opt_str(action, "groupId"), opt_str(snap, "groupId")))
		why = "groupId";
	else if (!str_eq(jsonx_get_str(action, "snapshotRole"), role))
		why = "snapshotRole";
	if (why) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		           "the action record %s disagrees with the run's receipt in %s, so the image cannot "
		           "be trusted",
		           aid, why);
		goto cleanup;
	}
	/* reverse references */
	json_object *refs = jsonx_get_array(action, "snapshots");
	size_t n = refs ? json_object_array_length(refs) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *r = json_object_array_get_idx(refs, i);
		if (!str_eq(jsonx_get_str(r, "phase"), jsonx_get_str(snap, "phase")))
			continue;
		int64_t rb = -1, sb = -2;
		jsonx_get_int(r, "bytes", &rb);
		jsonx_get_int(snap, "bytes", &sb);
		if (!str_eq(jsonx_get_str(r, "path"), expected_path) ||
		    !str_eq(jsonx_get_str(r, "sha256"), jsonx_get_str(snap, "sha256")) || rb != sb) {
			set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
			           "the action record %s names another %s image than the run's receipt", aid,
			           jsonx_get_str(snap, "phase"));
			goto cleanup;
		}
		ok = true;
		goto cleanup;
	}
	/* no reverse reference: the journal must name it */
	char *jpath = pathf("%s/state/journal/events.jsonl", recording);
	if (jpath && regular_file(jpath)) {
		relay_error err;
		size_t len = 0;
		if (fs_read_file(jpath, 64u * 1024 * 1024, &journal_text, &len, &err) != RELAY_OK)
			journal_text = NULL;
	}
	free(jpath);
	if (journal_text == NULL && live) {
		char *jremote = pathf("%s/state/journal/events.jsonl", c->guest_root ? c->guest_root : "");
		bool got =
		    jremote && guest_metadata(c, jremote, "the recording's journal", NULL, &journal_text);
		free(jremote);
		if (!got)
			goto cleanup;
	}
	if (journal_text && journal_names(journal_text, snap)) {
		ok = true;
		goto cleanup;
	}
	set_status(
	    c, IMAGE_STATUS_INTEGRITY_FAILED,
	    "neither the action record %s nor the journal names the %s image of %s, so it cannot be trusted",
	    aid, jsonx_get_str(snap, "phase"), eid);
cleanup:
	json_object_put(action);
	free(journal_text);
	free(p1);
	free(p2);
	free(remote);
	free(expected_path);
	return ok;
}

/* ---- display ------------------------------------------------------------------------- */

/* Keeps a receipt's validated imageEvidence fetched from the guest at
 * <recording>/host/image-evidence/<executionId>.json (evidence.md §2.2), so
 * a later delivery finds it on the host. Best effort: a failure only costs
 * another fetch. */
static void cache_image_evidence(const char *session_id, const char *execution_id, const json_object *ev,
                                 const char *path)
{
	if (path == NULL || fs_exists_nofollow(path))
		return;
	json_object *cache = json_object_new_object();
	jsonx_add_str(cache, "executionId", execution_id);
	jsonx_add_str(cache, "sessionId", session_id);
	jsonx_add(cache, "imageEvidence", json_copy(ev));
	char *dir = fs_dirname(path);
	relay_error err;
	if (cache == NULL || dir == NULL || fs_mkdir_p(dir, 0700, &err) != RELAY_OK ||
	    fs_write_json_durable(path, cache, &err) != RELAY_OK)
		log_warning("relay_image: cannot cache the image evidence of %s at %s", execution_id, path);
	free(dir);
	json_object_put(cache);
}

static void deliver_display_image(dctx *c, const char *recording, bool live, const json_object *entry);

static void resolve_display(dctx *c, const json_object *target)
{
	const char *sid = jsonx_get_str(target, "sessionId");
	const char *eid = jsonx_get_str(target, "executionId");
	const char *phase = jsonx_get_str(target, "phase");
	bool current = false, failed = false, from_guest = false;
	char *recording = NULL, *req_path = NULL, *diag_path = NULL, *other = NULL;
	json_object *request = NULL, *receipt = NULL, *entry = NULL;
	char *p[5] = {NULL, NULL, NULL, NULL, NULL};
	if (!id_ok(sid, 120) || !id_ok(eid, 160) || phase == NULL) {
		set_status(c, IMAGE_STATUS_IMAGE_MISSING,
		           "the display target needs sessionId, executionId and phase");
		goto cleanup;
	}
	recording = recording_of(c, sid, &current);
	if (recording == NULL) {
		other = recording_owner_elsewhere(c, sid);
		if (other)
			set_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
			           "recording session %s belongs to guest %s of this session, not to %s", sid,
			           other, c->name);
		else
			set_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
			           "recording session %s is not one of guest %s's recordings (its current "
			           "one is %s)",
			           sid, c->name,
			           c->recording_session_id ? c->recording_session_id
			                                   : "none: it is not staged");
		goto cleanup;
	}
	bool live = current && !c->closed;
	req_path = pathf("%s/host/requests/%s.json", recording, eid);
	diag_path = pathf("%s/host/diagnostics/%s.request.json", recording, eid);
	if (req_path == NULL || diag_path == NULL) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	if (!regular_file(req_path)) {
		if (regular_file(diag_path))
			set_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_DIAGNOSTIC);
		else
			set_status(c, IMAGE_STATUS_IMAGE_MISSING,
			           "execution %s has no request record in recording %s (%s/host/requests/)",
			           eid, sid, recording);
		goto cleanup;
	}
	relay_error err;
	if (fs_read_json(req_path, REQUEST_MAX_BYTES, &request, &err) != RELAY_OK ||
	    !json_object_is_type(request, json_type_object)) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the request record %s cannot be read: %s",
		           req_path, err.message);
		goto cleanup;
	}
	if (!str_eq(jsonx_get_str(request, "executionId"), eid) ||
	    (jsonx_get_str(request, "sessionId") && !str_eq(jsonx_get_str(request, "sessionId"), sid))) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		           "the request record %s names another execution or recording", req_path);
		goto cleanup;
	}
	if (!plan_captures(c, request, phase))
		goto cleanup;
	const char *group_phase =
	    jsonx_get_str(jsonx_get_obj(jsonx_get_obj(request, "snapshots"), "group"), "phase");

	if (live && !wait_for_step(c, eid))
		goto cleanup;

	/* the receipt: host first (§1.1), then the guest */
	p[0] = pathf("%s/host/receiver-receipts/%s.json", recording, eid);
	p[1] = pathf("%s/host/steps/%s/state/receiver/receipts/%s.json", recording, eid, eid);
	p[2] = pathf("%s/state/receiver/receipts/%s.json", recording, eid);
	p[3] = pathf("%s/host/image-evidence/%s.json", recording, eid);
	if (!p[0] || !p[1] || !p[2] || !p[3]) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	receipt = host_json(c, (const char *const *)p, "the run's receipt", &failed);
	if (failed)
		goto cleanup;
	if (receipt == NULL) {
		if (!live) {
			set_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_STATE_GONE);
			goto cleanup;
		}
		char *remote =
		    pathf("%s/state/receiver/receipts/%s.json", c->guest_root ? c->guest_root : "", eid);
		bool got = remote && guest_metadata(c, remote, "the run's receipt", &receipt, NULL);
		free(remote);
		from_guest = got;
		if (!got) {
			if (str_eq(c->out->status, IMAGE_STATUS_IMAGE_MISSING)) {
				c->out->status = NULL;
				set_status(c, IMAGE_STATUS_IMAGE_MISSING,
				           "execution %s has no receipt on the host or in the guest: the run "
				           "may still be "
				           "running, or it was refused before the receiver recorded it",
				           eid);
			}
			goto cleanup;
		}
	}
	json_object *ev = jsonx_get_obj(receipt, "imageEvidence");
	if (ev == NULL && jsonx_get_str(receipt, "status"))
		ev = receipt; /* the host/image-evidence cache holds the imageEvidence itself */
	if (jsonx_get_str(receipt, "executionId") && !str_eq(jsonx_get_str(receipt, "executionId"), eid)) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the receipt found for %s names execution %s",
		           eid, jsonx_get_str(receipt, "executionId"));
		goto cleanup;
	}
	char why[256];
	if (ev == NULL || !image_evidence_valid(ev, sid, eid, why, sizeof why)) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s",
		           ev ? why : "the run's receipt has no imageEvidence");
		goto cleanup;
	}
	if (from_guest)
		cache_image_evidence(sid, eid, ev, p[3]);
	json_object *snap = snapshot_for_phase(ev, phase);
	if (snap == NULL) {
		const char *st = jsonx_get_str(ev, "status");
		if (str_eq(st, "capture-failed"))
			set_status(c, IMAGE_STATUS_CAPTURE_FAILED,
			           "the planned %s capture of %s failed in the guest", phase, eid);
		else if (str_eq(st, "capture-unknown"))
			set_status(c, IMAGE_STATUS_CAPTURE_UNKNOWN,
			           "the result of the planned %s capture of %s cannot be decided", phase,
			           eid);
		else if (str_eq(st, "not-requested"))
			set_status(c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_SNAPSHOTS_OFF);
		else
			set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
			           "the receipt of %s says its images are available but lists no %s snapshot",
			           eid, phase);
		goto cleanup;
	}
	if (!cross_check(c, recording, live, snap, group_phase))
		goto cleanup;
	relay_error ierr;
	memset(&ierr, 0, sizeof ierr);
	json_object *image = display_identity(c, recording, snap, true, &entry, &ierr);
	if (image == NULL) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", ierr.message);
		goto cleanup;
	}
	c->out->image = image;
	deliver_display_image(c, recording, live, entry);
cleanup:
	for (size_t i = 0; i < 5; i++)
		free(p[i]);
	json_object_put(request);
	json_object_put(receipt);
	json_object_put(entry);
	free(recording);
	free(req_path);
	free(diag_path);
	free(other);
}

/* Obtains and presents a display image whose catalog entry is `entry`. */
static void deliver_display_image(dctx *c, const char *recording, bool live, const json_object *entry)
{
	json_object *d = jsonx_get_obj(entry, "descriptor");
	const char *sid = jsonx_get_str(d, "sessionId");
	const char *eid = jsonx_get_str(d, "executionId");
	const char *file_name = jsonx_get_str(entry, "fileName");
	char *cand0 = pathf("%s/state/snapshots/%s/%s", recording, sid, file_name);
	char *cand1 = pathf("%s/host/steps/%s/state/snapshots/%s/%s", recording, eid, sid, file_name);
	char *what = pathf("the %s snapshot %s", jsonx_get_str(d, "phase"), file_name);
	int64_t bytes = 0;
	jsonx_get_int(d, "bytes", &bytes);
	if (cand0 && cand1 && what) {
		const char *const candidates[] = {cand0, cand1, NULL};
		original_spec spec = {
		    .local = jsonx_get_str(entry, "local"),
		    .sha256 = jsonx_get_str(d, "sha256"),
		    .bytes = (uint64_t)bytes,
		    .mime = IMAGE_MIME_PNG,
		    .candidates = candidates,
		    .remote = live ? jsonx_get_str(entry, "remote") : NULL,
		    .no_guest_status = IMAGE_STATUS_STALE_REFERENCE,
		    .no_guest_diag = IMAGE_DIAG_STATE_GONE,
		    .check_signature = false,
		    .what = what,
		};
		deliver(c, &spec);
	} else {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
	}
	free(cand0);
	free(cand1);
	free(what);
}

/* ---- application --------------------------------------------------------------------- */

/* The relative path rules of evidence.md §8.1 for a path inside a
 * declaration. NULL when fine, else what is wrong. */
static const char *relative_path_problem(const json_object *value)
{
	const char *p = json_object_get_string((json_object *)value);
	size_t len = (size_t)json_object_get_string_len(value);
	if (len == 0)
		return "it is empty";
	if (strlen(p) != len)
		return "it contains a NUL character";
	if (p[0] == '/')
		return "it is absolute";
	if (strchr(p, '\\'))
		return "it contains a backslash";
	const char *seg = p;
	for (;;) {
		const char *end = strchr(seg, '/');
		size_t n = end ? (size_t)(end - seg) : strlen(seg);
		if (n == 0)
			return "it has an empty segment";
		if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return "it has a '.' or '..' segment";
		if (!end)
			break;
		seg = end + 1;
	}
	return NULL;
}

/* Maps a failed `receiver scan --image` to a status (images.md §1.2). */
static void scan_failed(dctx *c, relay_status st, const char *message, const char *rel, bool has_path,
                        const char *decl_name)
{
	if (strstr(message, "missing "))
		set_status(c, IMAGE_STATUS_IMAGE_MISSING, "no file %s in the guest workspace (output %s)",
		           rel, decl_name);
	else if (strstr(message, "symlink"))
		set_status(c, IMAGE_STATUS_UNSAFE_PATH, "%s crosses a symbolic link in the guest: %s", rel,
		           message);
	else if (strstr(message, "is not a directory"))
		set_status(c, IMAGE_STATUS_UNSAFE_PATH,
		           "output %s is a file, so it takes no path; omit path for a file declaration",
		           decl_name);
	else if (strstr(message, "needs a single regular file"))
		set_status(
		    c, has_path ? IMAGE_STATUS_IMAGE_MISSING : IMAGE_STATUS_UNSAFE_PATH,
		    has_path
		        ? "%s is not a file in the guest workspace (output %s)"
		        : "output %2$s is a directory, so it needs a path to one image file inside it (%1$s)",
		    rel, decl_name);
	else if (strstr(message, "larger than 64 MiB"))
		set_status(c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		           "%s is larger than 64 MiB, the limit for an image original; it stays evidence for "
		           "relay_finish",
		           rel);
	else if (strstr(message, "is not a PNG, JPEG, GIF or WebP image"))
		set_status(
		    c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		    "the image's bytes do not match its extension (%s has no PNG, JPEG or WebP signature)",
		    rel);
	else if (strstr(message, "source changed"))
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		           "%s changed while the guest hashed it; ask again once it is "
		           "written",
		           rel);
	else if (st == RELAY_E_TIMEOUT || st == RELAY_E_CANCELLED)
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		           "hashing %s in the guest did not finish in time: %s", rel, message);
	else
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "the guest could not hash %s: %s", rel, message);
}

static void resolve_application(dctx *c, const json_object *target)
{
	const char *name = jsonx_get_str(target, "name");
	json_object *path_value = NULL;
	if (!json_object_object_get_ex(target, "path", &path_value) ||
	    !json_object_is_type(path_value, json_type_string))
		path_value = NULL;
	const char *path = path_value ? json_object_get_string(path_value) : NULL;
	const char *decl_path = NULL;
	char *rel = NULL, *remote = NULL, *approved = NULL, *what = NULL, *inventory = NULL, *local = NULL;
	json_object *frame = NULL, *facts = NULL, *entry = NULL, *stored = NULL, *descriptor = NULL;
	strbuf declared = STRBUF_INIT;
	size_t n = json_object_is_type(c->extractions, json_type_array)
	               ? json_object_array_length(c->extractions)
	               : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *d = json_object_array_get_idx(c->extractions, i);
		if (declared.len)
			strbuf_puts(&declared, ", ");
		strbuf_puts(&declared, jsonx_get_str(d, "name") ? jsonx_get_str(d, "name") : "?");
		if (str_eq(jsonx_get_str(d, "name"), name))
			decl_path = jsonx_get_str(d, "path");
	}
	if (decl_path == NULL) {
		set_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
		           "output %s was not declared at relay_acquire for %s (declared: %s); only declared "
		           "outputs can "
		           "be read",
		           name ? name : "(none)", c->name, declared.len ? strbuf_str(&declared) : "none");
		goto cleanup;
	}
	if (path_value) {
		const char *problem = relative_path_problem(path_value);
		if (problem) {
			set_status(c, IMAGE_STATUS_UNSAFE_PATH,
			           "path must be a relative path inside output %s, but %s; nothing was read",
			           name, problem);
			goto cleanup;
		}
		rel = pathf("%s/%s", decl_path, path);
	} else {
		rel = strdup(decl_path);
	}
	if (rel == NULL) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	const char *file_name = fs_basename(rel);
	/* The type comes from the extension; an unsupported one is answered
	 * after the guest's scan, so that a declaration used the wrong way round
	 * (a folder without path) is reported as such. */
	const char *mime = image_mime_for_path(file_name);
	if (c->closed) {
		set_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_CLOSED);
		goto cleanup;
	}
	if (!c->staged || c->guest_root == NULL) {
		set_status(
		    c, IMAGE_STATUS_IMAGE_MISSING,
		    "guest %s is not staged, so its workspace holds no outputs yet; call relay_stage first",
		    c->name);
		goto cleanup;
	}
	if (!confirm_guest(c))
		goto cleanup;
	/* the guest's image fact (receiver scan --image) */
	char *base = pathf("%s/workspace", c->guest_root);
	if (base == NULL) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	int64_t left = remaining_ms(c);
	const char *args[] = {"scan", "--root", c->guest_root, "--base", base, "--image", rel, NULL};
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = gio_receiver(
	    &c->io, args, (uint64_t)(left < SCAN_TIMEOUT_MS ? left : SCAN_TIMEOUT_MS), &frame, &err);
	free(base);
	if (st != RELAY_OK) {
		scan_failed(c, st, err.message, rel, path_value != NULL, name);
		goto cleanup;
	}
	const char *inv_path = jsonx_get_str(frame, "path");
	const char *inv_sha = jsonx_get_str(frame, "sha256");
	int64_t inv_bytes = -1;
	jsonx_get_int(frame, "bytes", &inv_bytes);
	if (inv_path == NULL || !sha256_hex_valid(inv_sha) || inv_bytes < 0) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		           "the guest's scan of %s answered a malformed frame", rel);
		goto cleanup;
	}
	c->io.receiver_ready = true; /* it answered: its transients can be removed */
	gio_add_transient(&c->io, fs_basename(inv_path));
	inventory = scratch_path(c, "image-fact-", ".json");
	if (inventory == NULL ||
	    !guest_pull(c, inv_path, inventory, "the image fact", IMAGE_DELIVERY_METADATA_BYTES))
		goto cleanup;
	char hex[SHA256_HEX_LEN + 1];
	uint64_t got = 0;
	if (sha256_file_hex(inventory, hex, &got, &err) != RELAY_OK || got != (uint64_t)inv_bytes ||
	    strcmp(hex, inv_sha) != 0) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		           "the image fact of %s does not match the guest's frame", rel);
		goto cleanup;
	}
	json_object *arr = NULL;
	relay_error perr;
	if (fs_read_json(inventory, IMAGE_DELIVERY_METADATA_BYTES, &arr, &perr) == RELAY_OK &&
	    json_object_is_type(arr, json_type_array))
		facts = arr;
	else
		json_object_put(arr);
	json_object *fact =
	    facts && json_object_array_length(facts) == 1 ? json_object_array_get_idx(facts, 0) : NULL;
	int64_t bytes = -1;
	if (fact == NULL || !str_eq(jsonx_get_str(fact, "path"), "") ||
	    !sha256_hex_valid(jsonx_get_str(fact, "sha256")) || !jsonx_get_int(fact, "bytes", &bytes) ||
	    bytes < 0 || jsonx_get_obj(fact, "identity") == NULL) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "the guest's image fact for %s is malformed",
		           rel);
		goto cleanup;
	}
	if (mime == NULL) {
		set_status(
		    c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		    "only PNG, JPEG and WebP images are supported (%s has no .png, .jpg, .jpeg or .webp "
		    "extension)",
		    file_name);
		goto cleanup;
	}
	if (bytes > (int64_t)IMAGE_MAX_ORIGINAL_BYTES) {
		set_status(c, IMAGE_STATUS_PRESENTATION_UNAVAILABLE,
		           "%s is larger than 64 MiB, the limit for an image "
		           "original",
		           rel);
		goto cleanup;
	}
	/* identity */
	descriptor = json_object_new_object();
	jsonx_add_str(descriptor, "imageId", "");
	jsonx_add_str(descriptor, "source", "application");
	jsonx_add_str(descriptor, "enclosure", c->purpose);
	jsonx_add_str(descriptor, "name", name);
	if (path_value)
		jsonx_add_str(descriptor, "path", path);
	jsonx_add_str(descriptor, "sha256", jsonx_get_str(fact, "sha256"));
	jsonx_add_int(descriptor, "bytes", bytes);
	jsonx_add_str(descriptor, "mimeType", mime);
	char id[IMAGE_CATALOG_ID_LEN + 1];
	if (image_catalog_image_id(c->binding_hex, descriptor, file_name, id, &err) != RELAY_OK) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "cannot compute the image's identity: %s",
		           err.message);
		goto cleanup;
	}
	jsonx_add_str(descriptor, "imageId", id);
	remote = pathf("%s/workspace/%s", c->guest_root, rel);
	/* Declarations are confined to the workspace (evidence.md §8.1). */
	approved = pathf("%s/workspace", c->guest_root);
	local = original_path_of(c->evidence, id, image_catalog_ext(mime));
	what = pathf("the image %s of output %s", rel, name);
	entry = catalog_entry(c->binding_hex, descriptor, file_name, c->evidence, remote, approved, local);
	if (remote == NULL || approved == NULL || local == NULL || what == NULL || entry == NULL) {
		set_status(c, IMAGE_STATUS_TRANSFER_FAILED, "out of memory");
		goto cleanup;
	}
	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	c->out->image = result_image(descriptor, local, at);
	original_spec spec = {
	    .local = local,
	    .sha256 = jsonx_get_str(fact, "sha256"),
	    .bytes = (uint64_t)bytes,
	    .mime = mime,
	    .candidates = NULL,
	    .remote = remote,
	    .no_guest_status = IMAGE_STATUS_STALE_REFERENCE,
	    .no_guest_diag = IMAGE_DIAG_GUEST_GONE,
	    .check_signature = true,
	    .what = what,
	};
	unsigned char *data = NULL;
	size_t len = 0;
	if (!obtain_original(c, &spec, &data, &len))
		goto cleanup;
	/* The catalog entry is recorded once the bytes proved to be an image
	 * of the declared type. */
	if (image_catalog_put(c->catalog_dir, entry, &stored, &err) != RELAY_OK) {
		free(data);
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		goto cleanup;
	}
	char *image_dir = fs_dirname(local);
	if (image_dir)
		present_and_record(c, image_dir, data, len, mime);
	free(image_dir);
	free(data);
cleanup:
	strbuf_free(&declared);
	json_object_put(frame);
	json_object_put(facts);
	json_object_put(entry);
	json_object_put(stored);
	json_object_put(descriptor);
	if (inventory) {
		relay_error ignored;
		fs_remove_tree(inventory, &ignored);
	}
	free(inventory);
	free(rel);
	free(remote);
	free(approved);
	free(local);
	free(what);
}

/* ---- reference ----------------------------------------------------------------------- */

/* Looks an imageId up in the catalogs of the session's other guests:
 * the name of the guest it belongs to (malloc'd), or NULL. */
static char *reference_elsewhere(dctx *c, const char *image_id)
{
	char *catalog = pathf("%s/image-catalog", c->session_dir);
	char *owner = NULL;
	if (catalog == NULL)
		return NULL;
	DIR *dir = opendir(catalog);
	struct dirent *e;
	while (dir && owner == NULL && (e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.' || str_eq(e->d_name, c->purpose))
			continue;
		char *p = pathf("%s/%s/%s.json", catalog, e->d_name, image_id);
		if (p && regular_file(p)) {
			owner = guest_of_purpose(c, e->d_name);
			if (owner == NULL)
				owner = pathf("(lease %s)", e->d_name);
		}
		free(p);
	}
	if (dir)
		closedir(dir);
	free(catalog);
	return owner;
}

/* True when `inner` lies strictly inside `outer` (string prefix at a
 * component boundary, no ".." segment). */
static bool path_inside(const char *inner, const char *outer)
{
	size_t n = outer ? strlen(outer) : 0;
	if (inner == NULL || n == 0 || strncmp(inner, outer, n) != 0 || inner[n] != '/' ||
	    inner[n + 1] == '\0')
		return false;
	size_t len = strlen(inner);
	return strstr(inner, "/../") == NULL && strstr(inner, "/./") == NULL && strstr(inner, "//") == NULL &&
	       !(len >= 3 && strcmp(inner + len - 3, "/..") == 0) &&
	       !(len >= 2 && strcmp(inner + len - 2, "/.") == 0);
}

/* Reads and checks this guest's catalog entry for `image_id`: sets the
 * status and returns NULL when it is missing, foreign or damaged. */
static json_object *reference_entry(dctx *c, const char *image_id)
{
	json_object *entry = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_catalog_get(c->catalog_dir, image_id, &entry, &err);
	if (st == RELAY_E_NOT_FOUND) {
		char *other = reference_elsewhere(c, image_id);
		if (other)
			set_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
			           "%s belongs to guest %s of this session, not to %s", image_id, other,
			           c->name);
		else
			set_status(c, IMAGE_STATUS_IMAGE_MISSING,
			           "%s is not in this session's image catalog for guest %s; use an imageId "
			           "from a run result "
			           "or an earlier delivery on this guest",
			           image_id, c->name);
		free(other);
		return NULL;
	}
	if (st != RELAY_OK) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		return NULL;
	}
	if (!str_eq(jsonx_get_str(entry, "binding"), c->binding_hex)) {
		set_status(
		    c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
		    "%s was issued for another session, guest or backend than guest %s of this session",
		    image_id, c->name);
		json_object_put(entry);
		return NULL;
	}
	return entry;
}

static void resolve_reference(dctx *c, const json_object *target)
{
	const char *image_id = jsonx_get_str(target, "imageId");
	json_object *entry = reference_entry(c, image_id);
	if (entry == NULL)
		return;
	json_object *d = jsonx_get_obj(entry, "descriptor");
	const char *recording = jsonx_get_str(entry, "recording");
	const char *local = jsonx_get_str(entry, "local");
	const char *remote = jsonx_get_str(entry, "remote");
	const char *approved = jsonx_get_str(entry, "approvedRoot");
	const char *source = jsonx_get_str(d, "source");
	const char *mime = jsonx_get_str(d, "mimeType");
	const char *ext = image_catalog_ext(mime);
	bool current = false;
	char *expected_local = NULL;
	if (recording == NULL || !own_recording(c, recording, &current)) {
		set_status(c, IMAGE_STATUS_UNAUTHORIZED_REFERENCE,
		           "%s was recorded for a recording (%s) guest %s does not own", image_id,
		           recording ? recording : "none", c->name);
		goto cleanup;
	}
	expected_local = ext ? original_path_of(recording, image_id, ext) : NULL;
	if (!str_eq(local, expected_local)) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED,
		           "catalog entry %s names an original outside its recording", image_id);
		goto cleanup;
	}
	bool application = str_eq(source, "application");
	c->out->image = result_image(d, local, NULL);
	if (application) {
		char at[25];
		time_format_iso_millis(clock_now_ms(), at);
		jsonx_add_str(c->out->image, "retrievedAt", at);
	}
	if (c->closed) {
		set_status(c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_CLOSED);
		goto cleanup;
	}
	if (remote && (!path_inside(remote, approved) || !path_inside(approved, c->guest_root))) {
		set_status(c, IMAGE_STATUS_UNSAFE_PATH,
		           "catalog entry %s names a guest path outside its approved root", image_id);
		goto cleanup;
	}
	if (str_eq(source, "display")) {
		if (current && !wait_for_step(c, jsonx_get_str(d, "executionId")))
			goto cleanup;
		deliver_display_image(c, recording, current, entry);
		goto cleanup;
	}
	if (!application) {
		set_status(c, IMAGE_STATUS_INTEGRITY_FAILED, "catalog entry %s has an unknown source",
		           image_id);
		goto cleanup;
	}
	int64_t bytes = 0;
	jsonx_get_int(d, "bytes", &bytes);
	char *what =
	    pathf("the image %s of output %s", jsonx_get_str(entry, "fileName"), jsonx_get_str(d, "name"));
	original_spec spec = {
	    .local = local,
	    .sha256 = jsonx_get_str(d, "sha256"),
	    .bytes = (uint64_t)bytes,
	    .mime = mime,
	    .candidates = NULL,
	    .remote = remote,
	    .no_guest_status = IMAGE_STATUS_STALE_REFERENCE,
	    .no_guest_diag = IMAGE_DIAG_GUEST_GONE,
	    .check_signature = true,
	    .what = what ? what : "the image",
	};
	deliver(c, &spec);
	free(what);
cleanup:
	free(expected_local);
	json_object_put(entry);
}

/* ---- relay_image --------------------------------------------------------------------- */

void image_delivery_retrieve(manager *m, guest *g, const json_object *target, relay_call *call,
                             int64_t started_mono_ms, image_delivery_result *out)
{
	memset(out, 0, sizeof *out);
	dctx c;
	relay_error err;
	memset(&err, 0, sizeof err);
	bool ready = ctx_init(&c, m, g, call, started_mono_ms + IMAGE_DELIVERY_DEADLINE_MS, out, &err);
	const char *source = jsonx_get_str(target, "source");
	if (relay_call_is_cancelled(call) || clock_monotonic_ms() >= c.deadline_mono_ms) {
		set_status(&c, IMAGE_STATUS_TRANSFER_FAILED, IMAGE_DIAG_NOT_STARTED);
		goto done;
	}
	if (!ready) {
		if (err.code == RELAY_E_NOT_FOUND)
			set_status(&c, IMAGE_STATUS_IMAGE_MISSING, "%s", err.message);
		else
			set_status(&c, IMAGE_STATUS_TRANSFER_FAILED, "%s", IMAGE_DIAG_UNEXPECTED);
		goto done;
	}
	if (c.closed) {
		/* images.md §7 step 2; a reference still names its original. */
		if (str_eq(source, "reference")) {
			json_object *entry = reference_entry(&c, jsonx_get_str(target, "imageId"));
			if (entry) {
				json_object *d = jsonx_get_obj(entry, "descriptor");
				c.out->image = result_image(d, jsonx_get_str(entry, "local"), NULL);
				json_object_put(entry);
			} else {
				/* only the closed guest's answer counts */
				json_object_put(c.out->image);
				c.out->image = NULL;
				free(c.out->diagnostic);
				c.out->diagnostic = NULL;
				c.out->status = NULL;
			}
		}
		set_status(&c, IMAGE_STATUS_STALE_REFERENCE, IMAGE_DIAG_CLOSED);
		goto done;
	}
	if (str_eq(source, "display"))
		resolve_display(&c, target);
	else if (str_eq(source, "application"))
		resolve_application(&c, target);
	else if (str_eq(source, "reference"))
		resolve_reference(&c, target);
	else
		set_status(&c, IMAGE_STATUS_IMAGE_MISSING,
		           "target.source must be display, application or reference");
done:
	if (out->status == NULL)
		set_status(&c, IMAGE_STATUS_TRANSFER_FAILED, IMAGE_DIAG_UNEXPECTED);
	if (strcmp(out->status, IMAGE_STATUS_ATTACHED) != 0 && out->preview_base64 == NULL) {
		json_object_put(out->presentation);
		out->presentation = NULL;
	}
	ctx_free(&c);
}

/* ---- relay_script -------------------------------------------------------------------- */

void image_delivery_for_run(manager *m, guest *g, const json_object *request, const json_object *receipt,
                            const char *recording, image_delivery_result *out)
{
	memset(out, 0, sizeof *out);
	dctx c;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (!ctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, out, &err)) {
		set_status(&c, IMAGE_STATUS_TRANSFER_FAILED, "%s", err.message);
		ctx_free(&c);
		return;
	}
	const char *rec = recording ? recording : c.evidence;
	if (!plan_captures(&c, request, "after"))
		goto done;
	if (receipt == NULL) {
		set_status(&c, IMAGE_STATUS_PENDING, NULL);
		goto done;
	}
	json_object *ev = jsonx_get_obj(receipt, "imageEvidence");
	char why[256];
	if (ev == NULL || !image_evidence_valid(ev, jsonx_get_str(receipt, "sessionId"),
	                                        jsonx_get_str(receipt, "executionId"), why, sizeof why)) {
		set_status(&c, IMAGE_STATUS_INTEGRITY_FAILED, "%s",
		           ev ? why : "the run's receipt has no imageEvidence");
		goto done;
	}
	json_object *snap = snapshot_for_phase(ev, "after");
	if (snap == NULL) {
		const char *st = jsonx_get_str(ev, "status");
		const char *kind = jsonx_get_str(jsonx_get_obj(receipt, "outcome"), "kind");
		const char *diag = jsonx_get_str(jsonx_get_obj(receipt, "outcome"), "diagnostic");
		if (str_eq(st, "capture-failed"))
			set_status(&c, IMAGE_STATUS_CAPTURE_FAILED,
			           "the after-snapshot capture failed in the guest%s%s", diag ? ": " : "",
			           diag ? diag : "");
		else if (str_eq(st, "capture-unknown"))
			set_status(&c, IMAGE_STATUS_CAPTURE_UNKNOWN,
			           "the after-snapshot's result cannot be decided%s%s", diag ? ": " : "",
			           diag ? diag : "");
		else if (str_eq(kind, "refused"))
			set_status(&c, IMAGE_STATUS_NOT_REQUESTED,
			           "the run was refused before its script started; no after-image was taken");
		else if (str_eq(st, "not-requested"))
			set_status(&c, IMAGE_STATUS_NOT_REQUESTED, IMAGE_DIAG_SNAPSHOTS_OFF);
		else
			set_status(
			    &c, IMAGE_STATUS_INTEGRITY_FAILED,
			    "the receipt says the run's images are available but lists no after-snapshot");
		goto done;
	}
	json_object *entry = NULL;
	json_object *image = display_identity(&c, rec, snap, true, &entry, &err);
	if (image == NULL) {
		set_status(&c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
		goto done;
	}
	out->image = image;
	/* Attached only when the original is already published and verified
	 * on the host; never waited for. */
	const char *local = jsonx_get_str(entry, "local");
	char *image_dir = local ? fs_dirname(local) : NULL;
	json_object *d = jsonx_get_obj(entry, "descriptor");
	int64_t bytes = 0;
	jsonx_get_int(d, "bytes", &bytes);
	bool present = false;
	if (image_dir && image_catalog_original_check(image_dir, "png", jsonx_get_str(d, "sha256"),
	                                              (uint64_t)bytes, &present, &err) != RELAY_OK) {
		set_status(&c, IMAGE_STATUS_INTEGRITY_FAILED, "%s", err.message);
	} else if (present) {
		original_spec spec = {.local = local,
		                      .sha256 = jsonx_get_str(d, "sha256"),
		                      .bytes = (uint64_t)bytes,
		                      .mime = IMAGE_MIME_PNG,
		                      .what = "the after-snapshot"};
		unsigned char *data = NULL;
		size_t len = 0;
		if (read_verified(&c, local, &spec, &data, &len)) {
			present_and_record(&c, image_dir, data, len, IMAGE_MIME_PNG);
			if (!str_eq(out->status, IMAGE_STATUS_ATTACHED) && out->preview_base64 == NULL) {
				/* It cannot be shown here: the run still names it. */
				out->status = NULL;
				free(out->diagnostic);
				out->diagnostic = NULL;
				json_object_put(out->presentation);
				out->presentation = NULL;
			}
		}
	}
	set_status(&c, IMAGE_STATUS_PENDING, NULL);
	free(image_dir);
	json_object_put(entry);
done:
	ctx_free(&c);
}

/* ---- step downloads ------------------------------------------------------------------ */

/* The delivery receipt of an original a download (or a run's own answer)
 * brought home: {image, at, status: "downloaded"} (images.md §5). */
static relay_status write_downloaded_receipt(const char *image_dir, json_object *image, relay_error *err)
{
	char at[25];
	time_format_iso_millis(clock_now_ms(), at);
	json_object *r = json_object_new_object();
	jsonx_add(r, "image", json_object_get(image));
	jsonx_add_str(r, "at", at);
	jsonx_add_str(r, "status", IMAGE_STATUS_DOWNLOADED);
	relay_status st = image_catalog_receipt_write(image_dir, r, NULL, err);
	json_object_put(r);
	return st;
}

relay_status image_delivery_publish_answer(manager *m, guest *g, const char *recording,
                                           const json_object *receipt, const json_object *part,
                                           const void *data, size_t len, relay_error *err)
{
	image_delivery_result unused;
	memset(&unused, 0, sizeof unused);
	dctx c;
	relay_status st = RELAY_OK;
	json_object *image = NULL, *entry = NULL;
	char *image_dir = NULL, *want_path = NULL;
	image_catalog_staging staging;
	memset(&staging, 0, sizeof staging);
	if (!ctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, &unused, err)) {
		st = err->code ? err->code : RELAY_E_INTERNAL;
		goto cleanup;
	}
	json_object *ev = jsonx_get_obj(receipt, "imageEvidence");
	char why[256];
	if (ev == NULL || !image_evidence_valid(ev, jsonx_get_str(receipt, "sessionId"),
	                                        jsonx_get_str(receipt, "executionId"), why, sizeof why)) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0, "%s",
		                     ev ? why : "the receipt has no imageEvidence");
		goto cleanup;
	}
	json_object *snap = snapshot_for_phase(ev, "after");
	if (snap == NULL) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0, "the receipt lists no after-snapshot");
		goto cleanup;
	}
	image = display_identity(&c, recording ? recording : c.evidence, snap, true, &entry, err);
	if (image == NULL) {
		st = err->code ? err->code : RELAY_E_INTERNAL;
		goto cleanup;
	}
	json_object *d = jsonx_get_obj(entry, "descriptor");
	int64_t bytes = -1;
	jsonx_get_int(d, "bytes", &bytes);
	want_path =
	    pathf("state/snapshots/%s/%s", jsonx_get_str(d, "sessionId"), jsonx_get_str(entry, "fileName"));
	char hex[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(data, len, hex);
	if (want_path == NULL || !str_eq(jsonx_get_str(part, "path"), want_path)) {
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "the image on the answer is not the after-snapshot %s",
		                     want_path ? want_path : "");
		goto cleanup;
	}
	if ((int64_t)len != bytes || !str_eq(hex, jsonx_get_str(d, "sha256"))) {
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "the image on the answer holds %zu bytes with SHA-256 %.12s…, not the "
		                     "receipt's %lld bytes",
		                     len, hex, (long long)bytes);
		goto cleanup;
	}
	image_info info;
	st = container_check_png(data, len, &info, err);
	if (st != RELAY_OK)
		goto cleanup;
	image_dir = fs_dirname(jsonx_get_str(entry, "local"));
	st = image_dir ? image_catalog_staging_open(image_dir, "png", &staging, err)
	               : relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	if (st == RELAY_OK)
		st = fs_write_exclusive(staging.file, data, len, 0600, err);
	if (st == RELAY_OK)
		st = image_catalog_staging_publish(&staging, hex, (uint64_t)len, NULL, err);
	image_catalog_staging_close(&staging);
	if (st == RELAY_OK)
		st = write_downloaded_receipt(image_dir, image, err);
cleanup:
	ctx_free(&c);
	image_delivery_result_clear(&unused);
	json_object_put(image);
	json_object_put(entry);
	free(image_dir);
	free(want_path);
	return st;
}

relay_status image_delivery_publish_step(manager *m, guest *g, const char *recording,
                                         const json_object *receipt, json_object **published_out,
                                         relay_error *err)
{
	if (published_out)
		*published_out = NULL;
	image_delivery_result unused;
	memset(&unused, 0, sizeof unused);
	dctx c;
	relay_status st = RELAY_OK;
	json_object *published = json_object_new_array();
	if (!ctx_init(&c, m, g, NULL, clock_monotonic_ms() + IMAGE_DELIVERY_DEADLINE_MS, &unused, err)) {
		st = err->code ? err->code : RELAY_E_INTERNAL;
		goto cleanup;
	}
	const char *rec = recording ? recording : c.evidence;
	json_object *ev = jsonx_get_obj(receipt, "imageEvidence");
	const char *eid = jsonx_get_str(receipt, "executionId");
	char why[256];
	if (ev == NULL ||
	    !image_evidence_valid(ev, jsonx_get_str(receipt, "sessionId"), eid, why, sizeof why)) {
		st = relay_error_set(err, RELAY_E_PROTOCOL, 0, "%s",
		                     ev ? why : "the receipt has no imageEvidence");
		goto cleanup;
	}
	json_object *snaps = jsonx_get_array(ev, "snapshots");
	size_t n = snaps ? json_object_array_length(snaps) : 0;
	for (size_t i = 0; i < n && st == RELAY_OK; i++) {
		json_object *snap = json_object_array_get_idx(snaps, i);
		json_object *entry = NULL;
		json_object *image = display_identity(&c, rec, snap, true, &entry, err);
		if (image == NULL) {
			st = err->code ? err->code : RELAY_E_INTERNAL;
			break;
		}
		json_object *d = jsonx_get_obj(entry, "descriptor");
		const char *local = jsonx_get_str(entry, "local");
		char *image_dir = fs_dirname(local);
		char *src = pathf("%s/host/steps/%s/state/snapshots/%s/%s", rec, eid,
		                  jsonx_get_str(d, "sessionId"), jsonx_get_str(entry, "fileName"));
		int64_t bytes = 0;
		jsonx_get_int(d, "bytes", &bytes);
		image_catalog_staging staging;
		memset(&staging, 0, sizeof staging);
		if (image_dir == NULL || src == NULL)
			st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		if (st == RELAY_OK)
			st = image_catalog_staging_open(image_dir, "png", &staging, err);
		if (st == RELAY_OK)
			st = fs_copy_file(src, staging.file, 0600, err);
		if (st == RELAY_OK)
			st = image_catalog_staging_publish(&staging, jsonx_get_str(d, "sha256"),
			                                   (uint64_t)bytes, NULL, err);
		image_catalog_staging_close(&staging);
		if (st == RELAY_OK)
			st = write_downloaded_receipt(image_dir, image, err);
		if (st == RELAY_OK) {
			json_object *p = json_object_new_object();
			jsonx_add_str(p, "imageId", jsonx_get_str(d, "imageId"));
			jsonx_add_str(p, "phase", jsonx_get_str(d, "phase"));
			json_object_array_add(published, p);
		}
		free(image_dir);
		free(src);
		json_object_put(image);
		json_object_put(entry);
	}
cleanup:
	ctx_free(&c);
	image_delivery_result_clear(&unused);
	if (st == RELAY_OK && published_out)
		*published_out = json_object_get(published);
	json_object_put(published);
	return st;
}
