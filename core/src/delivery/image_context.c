/*
 * One image delivery in progress and the small checks of image delivery
 * (image_context.h).
 */
#include "delivery/image_context.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "call/call.h"
#include "delivery/delivery_state.h"
#include "delivery/image_catalog.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* Sets the answer's status and diagnostic, unless one is set already. */
void dctx_status(dctx *c, const char *status, const char *fmt, ...)
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

char *idl_dup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A deep copy of a JSON value through its text (json-c reference counts are
 * not shared across threads). */
json_object *idl_json_copy(const json_object *value)
{
	if (value == NULL)
		return NULL;
	char *text = jsonx_to_string(value, 0);
	json_object *copy = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	return copy;
}

/* The backend binding reduced to the four keys of spec/images.md §2.2, each a
 * string or null. */
static json_object *normalized_backend(const json_object *binding)
{
	static const char *const keys[] = {"machine", "endpoint", "store", "environmentFingerprint"};
	json_object *b = json_object_new_object();
	for (size_t i = 0; b && i < sizeof keys / sizeof keys[0]; i++)
		jsonx_add_str(b, keys[i], jsonx_get_str(binding, keys[i]));
	return b;
}

bool dctx_init(dctx *c, session_manager *m, guest *g, relay_call *call, int64_t deadline_mono_ms,
               image_delivery_result *out, relay_error *err)
{
	memset(c, 0, sizeof *c);
	c->m = m;
	c->g = g;
	c->call = call;
	c->deadline_mono_ms = deadline_mono_ms;
	c->attempts_left = IMAGE_DELIVERY_ATTEMPTS;
	c->out = out;
	session_lock(m);
	c->owner = idl_dup(m->settings->session_id);
	c->session_dir = idl_dup(m->settings->session_dir);
	c->name = idl_dup(g->name);
	c->purpose = idl_dup(g->purpose);
	c->guest_root = idl_dup(g->guest_root);
	c->evidence = idl_dup(g->evidence_path);
	c->recording_session_id = idl_dup(g->recording_session_id);
	c->backend = normalized_backend(g->binding);
	c->previous = idl_json_copy(g->previous_evidence);
	c->extractions = idl_json_copy(g->delivery->extractions);
	c->staged = g->staged;
	c->closed = g->phase == PHASE_CLOSED || g->delivered || g->released || g->closed != NULL;
	session_unlock(m);
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

void dctx_free(dctx *c)
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

int64_t dctx_remaining_ms(const dctx *c)
{
	int64_t left = c->deadline_mono_ms - clock_monotonic_ms();
	return left > 0 ? left : 0;
}

/* True (and the status set) when the call was cancelled or the deadline
 * passed. */
bool dctx_out_of_time(dctx *c, const char *doing)
{
	if (relay_call_is_cancelled(c->call)) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		            "relay_image was cancelled while %s; execution was not replayed", doing);
		return true;
	}
	if (dctx_remaining_ms(c) <= 0) {
		dctx_status(c, IMAGE_STATUS_TRANSFER_FAILED,
		            "the 90-second delivery deadline passed while %s; execution was not replayed",
		            doing);
		return true;
	}
	return false;
}

/* ^[A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}$ */
bool idl_id_ok(const char *s, size_t max_len)
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

bool idl_str_eq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

bool idl_regular_file(const char *path)
{
	struct stat sb;
	return path && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

char *idl_pathf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	return strbuf_detach(&sb, NULL);
}
