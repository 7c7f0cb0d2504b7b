/*
 * relay_extract (tools.md §3.8, evidence.md §8.2): pull declared outputs
 * early, by name, each through the verified pull of extraction.h. A failed
 * pull keeps the guest; outputs pulled before it stay on disk and are
 * listed in the error result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session/events.h"
#include "delivery/extraction.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "call/call.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* The declaration named `name`, or NULL. Borrowed from `decl`. */
static json_object *declaration(json_object *decl, const char *name)
{
	size_t n = decl ? json_object_array_length(decl) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *d = json_object_array_get_idx(decl, i);
		const char *dn = jsonx_get_str(d, "name");
		if (dn && strcmp(dn, name) == 0)
			return d;
	}
	return NULL;
}

static char *declared_names(json_object *decl)
{
	strbuf sb = STRBUF_INIT;
	size_t n = decl ? json_object_array_length(decl) : 0;
	for (size_t i = 0; i < n; i++) {
		if (i)
			strbuf_puts(&sb, ", ");
		strbuf_puts(&sb, jsonx_get_str(json_object_array_get_idx(decl, i), "name"));
	}
	if (n == 0)
		strbuf_puts(&sb, "none");
	return strbuf_detach(&sb, NULL);
}

tool_result *tool_extract(manager *m, guest *g, json_object *args, relay_call *call)
{
	tool_result *result = NULL;
	json_object *names = jsonx_get_array(args, "names");
	bool full = false;
	json_object *decl = extraction_declarations(m, g, &full);
	json_object *pulled = json_object_new_array();
	strbuf headline = STRBUF_INIT;
	manager_lock(m);
	bool delivered = g->delivered, staged = g->staged;
	manager_unlock(m);

	/* 1. Refusals, before anything reaches the guest. */
	if (delivered) {
		result = guest_error(
		    m, g, NULL, "sealed",
		    "evidence already sealed; no further extraction may change it (guest %s)", g->name);
		goto cleanup;
	}
	size_t n = names ? json_object_array_length(names) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = json_object_get_string(json_object_array_get_idx(names, i));
		if (declaration(decl, name) == NULL) {
			char *known = declared_names(decl);
			result = guest_error(
			    m, g, NULL, "undeclared-output",
			    "%s is not an output declared at relay_acquire; declared outputs: %s. "
			    "Nothing was pulled",
			    name, known);
			free(known);
			goto cleanup;
		}
	}
	if (!staged) {
		result =
		    guest_error(m, g, NULL, "not-staged",
		                "guest %s is not staged: the staged receiver does the guest-side hashing; "
		                "call relay_stage first",
		                g->name);
		goto cleanup;
	}

	/* 2. Each output, in the order given. */
	guest_io io;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (gio_begin(&io, m, g, call, &err) != RELAY_OK) {
		result = guest_error(m, g, NULL, "transfer-failed", "cannot reach guest %s: %s", g->name,
		                     err.message);
		goto cleanup;
	}
	io.receiver_ready = true;
	for (size_t i = 0; i < n; i++) {
		const char *name = json_object_get_string(json_object_array_get_idx(names, i));
		const char *path = jsonx_get_str(declaration(decl, name), "path");
		relay_call_progress(call, (double)i, (double)n, name, true);
		json_object *entry = NULL;
		memset(&err, 0, sizeof err);
		extraction_failure f = extraction_pull(&io, name, path, false, "extract", &entry, &err);
		if (f != EXTRACTION_OK) {
			gio_write_transfers(&io, "extract");
			gio_end(&io);
			guest_set_last_error(m, g, "relay_extract of %s failed: %s", name, err.message);
			json_object *details = json_object_new_object();
			jsonx_add_str(details, "operation", "relay_extract");
			jsonx_add_str(details, "name", name);
			jsonx_add_str(details, "error", err.message);
			guest_event(m, g, "operation-failed", "relay_extract failed; the guest is kept",
			            details);
			json_object *s = json_object_new_object();
			jsonx_add_str(s, "guest", g->name);
			jsonx_add(s, "extractions", json_object_get(pulled));
			if (f == EXTRACTION_MISSING)
				result = guest_error(
				    m, g, s, "output-missing",
				    "no file or directory at %s for output %s in guest %s; nothing "
				    "was pulled for it",
				    path, name, g->name);
			else
				result = guest_error(m, g, s, extraction_failure_code(f),
				                     "extraction of %s failed: %s; the guest is kept", name,
				                     err.message);
			goto cleanup;
		}
		int64_t files = 0, bytes = 0;
		jsonx_get_int(entry, "files", &files);
		jsonx_get_int(entry, "bytes", &bytes);
		strbuf_printf(&headline, "%s%s (%lld file(s), %lld bytes)", i ? ", " : "", name,
		              (long long)files, (long long)bytes);
		json_object_array_add(pulled, entry);
	}
	relay_call_progress(call, (double)n, (double)n, "done", true);
	gio_write_transfers(&io, "extract");
	gio_end(&io);

	json_object *s = json_object_new_object();
	jsonx_add_str(s, "guest", g->name);
	jsonx_add(s, "extractions", json_object_get(pulled));
	result = tool_result_ok(s, "Extracted %zu output(s) from %s: %s", n, g->name, strbuf_str(&headline));
cleanup:
	json_object_put(decl);
	json_object_put(pulled);
	strbuf_free(&headline);
	return result;
}
