/*
 * relay_extract (spec/tools.md §3.8, spec/evidence.md §8.2): pull declared outputs
 * early, by name: the refusals here, the pulls in
 * extraction_pull_named() (delivery/extraction.h). A failed pull keeps the
 * guest; outputs pulled before it stay on disk and are listed in the error
 * result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "delivery/extraction.h"
#include "session/events.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

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

tool_result *tool_extract(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	tool_result *result = NULL;
	json_object *names = jsonx_get_array(args, "names");
	bool full = false;
	json_object *decl = extraction_declarations(m, g, &full);
	session_lock(m);
	bool delivered = g->delivered, staged = g->staged;
	session_unlock(m);

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
		if (extraction_declaration(decl, name) == NULL) {
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
	relay_outcome o = OUTCOME_INIT;
	if (extraction_pull_named(m, g, names, decl, call, &o) != 0) {
		result = tools_failure(m, g, &o);
		goto cleanup;
	}
	json_object *s = outcome_take_facts(&o);
	outcome_free(&o);
	strbuf headline = STRBUF_INIT;
	json_object *pulled = jsonx_get_array(s, "extractions");
	for (size_t i = 0; pulled && i < json_object_array_length(pulled); i++) {
		json_object *entry = json_object_array_get_idx(pulled, i);
		int64_t files = 0, bytes = 0;
		jsonx_get_int(entry, "files", &files);
		jsonx_get_int(entry, "bytes", &bytes);
		strbuf_printf(&headline, "%s%s (%lld file(s), %lld bytes)", i ? ", " : "",
		              jsonx_get_str(entry, "name"), (long long)files, (long long)bytes);
	}
	result = tool_result_ok(s, "Extracted %zu output(s) from %s: %s", n, g->name, strbuf_str(&headline));
	strbuf_free(&headline);
cleanup:
	json_object_put(decl);
	return result;
}
