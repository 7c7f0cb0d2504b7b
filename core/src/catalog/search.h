/*
 * catalog/search.h — relay_search as a domain operation (catalog.h says
 * what the room does).
 */
#ifndef RELAY_CATALOG_SEARCH_H
#define RELAY_CATALOG_SEARCH_H

#include <stdbool.h>
#include <stddef.h>

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

/* Searches the machine plugin's catalog for `name` (tools.md §3.1), `os`
 * (may be NULL) first dropping the other system's installations, and
 * records the search under <session>/search-diagnostics/. 0, or -1 with
 * the failure in out->outcome; free `out` with catalog_found_free in both
 * cases. Waits for the backends; call on a detached thread. */
int catalog_search(manager *m, const char *name, const char *os, relay_call *call, catalog_found *out);
void catalog_found_free(catalog_found *found);

#endif
