/*
 * catalog/catalog.h — the catalog room: relay_search (spec/tools.md §3.1,
 * spec/machine-service.md §8). The machine plugin lists the images' installed
 * software; the relay validates, merges, matches and ranks it, and keeps a
 * search record under search-diagnostics/. Touches no guest (writes no
 * field of struct guest) and needs no lease.
 *
 * catalog.c: lower-casing and the validated catalog view; search.c: the
 * search itself (search.h).
 */
#ifndef RELAY_CATALOG_CATALOG_H
#define RELAY_CATALOG_CATALOG_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct installation {
	const char *image; /* borrowed from the catalog */
	const char *os;
	const char *architecture;
	const char *version; /* NULL for null */
	const char *id;
	json_object *aliases; /* borrowed array */
} installation;

typedef struct application {
	const char *id;
	const char *name;
	char *lower_name;
	installation *inst;
	size_t n_inst, cap_inst;
	int rank; /* -1: no match */
} application;

/* The merged view of a valid catalog: strings borrowed from the catalog
 * JSON, which must outlive it. */
typedef struct catalog_view {
	application *apps;
	size_t n_apps, cap_apps;
	size_t n_images;
	size_t n_installations;
} catalog_view;

/* Simple case mapping of UTF-8 text (Unicode simple mapping through the
 * C.UTF-8 locale; ASCII when it is missing). malloc'd; NULL when out of
 * memory. */
char *catalog_lower_utf8(const char *text);
/* `text` without leading and trailing white space (malloc'd). */
char *catalog_trimmed(const char *text);

/* spec/tools.md §3.1 step 3: validates the catalog as a whole and builds the
 * merged view into `v` (borrowing from `catalog`). NULL on success, or the
 * broken rule (written into why). */
const char *catalog_validate(json_object *catalog, catalog_view *v, char *why, size_t len);
void catalog_view_free(catalog_view *v);

#endif
