/*
 * catalog/search.h — relay_search as a domain operation (catalog.h says
 * what the room does).
 */
#ifndef RELAY_CATALOG_SEARCH_H
#define RELAY_CATALOG_SEARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "catalog/catalog.h"
#include "session/manager_internal.h"
#include "util/outcome.h"

/* What a search found. */
typedef struct catalog_found {
	/* Success: facts = the relay_search result {applications, truncated,
	 * ...}. Failure: invalid-input, backend-unavailable, catalog-invalid. */
	relay_outcome outcome;
	char *shown;          /* the name as searched (trimmed; owned), or NULL */
	size_t applications;  /* applications in the result */
	size_t installations; /* installations in the result */
	bool truncated;       /* some were left out to keep the bounds */
} catalog_found;

/* Steps 3-5 of spec/tools.md §3.1 over a validated view (catalog_validate):
 * `os` (may be NULL) drops the other system's installations, applications
 * are ranked against `needle` (trimmed and lower-cased: catalog_trimmed,
 * catalog_lower_utf8) by name and by the aliases of the images in play,
 * grouped by canonical name, ordered, and bounded. Returns the
 * relay_search result {applications, truncated} (a new reference) with
 * the applications and installations it holds and whether some were left
 * out. Rewrites the view's order and installation lists (one match per
 * view). No session, no I/O. */
json_object *catalog_match(catalog_view *v, const char *needle, const char *os, size_t *n_apps_out,
                           size_t *n_inst_out, bool *truncated_out);

/* Searches the machine plugin's catalog for `name` (spec/tools.md §3.1), `os`
 * (may be NULL) first dropping the other system's installations, and
 * records the search under <session>/search-diagnostics/. 0, or -1 with
 * the failure in out->outcome; free `out` with catalog_found_free in both
 * cases. Waits for the backends; call on a detached thread. */
int catalog_search(session_manager *m, const char *name, const char *os, relay_call *call,
                   catalog_found *out);
void catalog_found_free(catalog_found *found);

#endif
