/*
 * relay_search (spec/tools.md §3.1, spec/machine-service.md §8): find an application
 * by name in the images' installed-software catalog. The relay does the
 * matching; the backend only lists. Touches no guest, needs no lease. The
 * catalog's validation and lower-casing are catalog.c.
 *
 *   1. the needle: `name` trimmed and lower-cased (Unicode simple case
 *      mapping through the C.UTF-8 locale; ASCII when it is missing);
 *   2. the catalog from the machine plugin, validated as a whole
 *      (catalog-invalid on any broken rule or contradicting facts);
 *   3. `os` drops the other system's installations first; entries with one
 *      id merge across images; aliases count only from images in play;
 *   4. rank 0 exact, 1 prefix, 2 substring; grouped by canonical name;
 *      ordered by rank, lower-cased name (code points), name, id;
 *   5. installations added one at a time within 100 installations and
 *      50,000 bytes / 1,900 lines of two-space-indented JSON;
 *   6. every search leaves a record under search-diagnostics/.
 */
#include "catalog/search.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define RESULT_MAX_INSTALLATIONS 100
#define RESULT_MAX_BYTES         50000
#define RESULT_MAX_LINES         1900
#define DIAG_MAX_RECORDS         256
#define DIAG_MAX_AGE_MS          (30LL * 24 * 3600 * 1000)
#define DIAG_MAX_BYTES           16384

/* ---- matching, ordering, bounds ---------------------------------------------------------- */

static int rank_of(const char *candidate_lower, const char *needle)
{
	if (strcmp(candidate_lower, needle) == 0)
		return 0;
	if (strncmp(candidate_lower, needle, strlen(needle)) == 0)
		return 1;
	if (strstr(candidate_lower, needle))
		return 2;
	return -1;
}

static int better(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

/* A group of applications sharing one canonical name. */
typedef struct group {
	application **apps;
	size_t n;
	int rank;
	const char *name;
	const char *lower_name;
	const char *first_id;
} group;

static int compare_groups(const void *pa, const void *pb)
{
	const group *a = pa, *b = pb;
	if (a->rank != b->rank)
		return a->rank - b->rank;
	int c = strcmp(a->lower_name, b->lower_name);
	if (c)
		return c;
	c = strcmp(a->name, b->name);
	if (c)
		return c;
	return strcmp(a->first_id, b->first_id);
}

static int compare_installations(const void *pa, const void *pb)
{
	const installation *a = pa, *b = pb;
	int c = strcmp(a->image, b->image);
	return c ? c : strcmp(a->id, b->id);
}

/* True when the pretty JSON of `result` is within the text bounds. */
static bool within_bounds(json_object *result)
{
	char *text = jsonx_to_string(result, JSONX_PRETTY);
	if (text == NULL)
		return false;
	size_t lines = 1;
	for (const char *c = text; *c; c++)
		lines += *c == '\n';
	bool ok = strlen(text) <= RESULT_MAX_BYTES && lines <= RESULT_MAX_LINES;
	free(text);
	return ok;
}

json_object *catalog_match(catalog_view *v, const char *needle, const char *os, size_t *n_apps_out,
                           size_t *n_inst_out, bool *truncated_out)
{
	/* Rank each application over its name and the aliases of images in play. */
	for (size_t i = 0; i < v->n_apps; i++) {
		application *app = &v->apps[i];
		size_t keep = 0;
		for (size_t k = 0; k < app->n_inst; k++)
			if (os == NULL || strcmp(app->inst[k].os, os) == 0)
				app->inst[keep++] = app->inst[k];
		app->n_inst = keep;
		app->rank = -1;
		if (keep == 0)
			continue;
		app->rank = rank_of(app->lower_name, needle);
		for (size_t k = 0; k < keep; k++) {
			json_object *aliases = app->inst[k].aliases;
			for (size_t a = 0; a < json_object_array_length(aliases); a++) {
				char *lower = catalog_lower_utf8(
				    json_object_get_string(json_object_array_get_idx(aliases, a)));
				if (lower)
					app->rank = better(app->rank, rank_of(lower, needle));
				free(lower);
			}
		}
		qsort(app->inst, app->n_inst, sizeof *app->inst, compare_installations);
	}
	/* Group matches by canonical name. */
	group *groups = calloc(v->n_apps ? v->n_apps : 1, sizeof *groups);
	size_t n_groups = 0;
	for (size_t i = 0; groups && i < v->n_apps; i++) {
		application *app = &v->apps[i];
		if (app->rank < 0)
			continue;
		group *gr = NULL;
		for (size_t j = 0; j < n_groups && !gr; j++)
			if (strcmp(groups[j].name, app->name) == 0)
				gr = &groups[j];
		if (gr == NULL) {
			gr = &groups[n_groups++];
			gr->apps = calloc(v->n_apps, sizeof *gr->apps);
			gr->rank = app->rank;
			gr->name = app->name;
			gr->lower_name = app->lower_name;
			gr->first_id = app->id;
		}
		if (gr->apps)
			gr->apps[gr->n++] = app;
		gr->rank = app->rank < gr->rank ? app->rank : gr->rank;
		if (strcmp(app->id, gr->first_id) < 0)
			gr->first_id = app->id;
	}
	if (groups)
		qsort(groups, n_groups, sizeof *groups, compare_groups);

	json_object *result = json_object_new_object();
	json_object *list = json_object_new_array();
	jsonx_add(result, "applications", list);
	jsonx_add_bool(result, "truncated", true); /* measured as the longer form */
	size_t count = 0;
	bool truncated = false;
	for (size_t i = 0; i < n_groups && !truncated; i++) {
		group *gr = &groups[i];
		size_t total = 0;
		for (size_t j = 0; j < gr->n; j++)
			total += gr->apps[j]->n_inst;
		installation *all = calloc(total ? total : 1, sizeof *all);
		size_t n_all = 0;
		for (size_t j = 0; all && j < gr->n; j++)
			for (size_t k = 0; k < gr->apps[j]->n_inst; k++)
				all[n_all++] = gr->apps[j]->inst[k];
		qsort(all, n_all, sizeof *all, compare_installations);
		json_object *entry = json_object_new_object();
		jsonx_add_str(entry, "name", gr->name);
		json_object *insts = json_object_new_array();
		jsonx_add(entry, "installations", insts);
		json_object_array_add(list, entry);
		for (size_t k = 0; k < n_all; k++) {
			json_object *inst = json_object_new_object();
			jsonx_add_str(inst, "image", all[k].image);
			jsonx_add_str(inst, "version", all[k].version);
			jsonx_add_str(inst, "os", all[k].os);
			jsonx_add_str(inst, "architecture", all[k].architecture);
			json_object_array_add(insts, inst);
			if (count + 1 > RESULT_MAX_INSTALLATIONS || !within_bounds(result)) {
				json_object_array_del_idx(insts, json_object_array_length(insts) - 1, 1);
				truncated = true;
				break;
			}
			count++;
		}
		if (json_object_array_length(insts) == 0)
			json_object_array_del_idx(list, json_object_array_length(list) - 1, 1);
		free(all);
	}
	for (size_t i = 0; i < n_groups; i++)
		free(groups[i].apps);
	free(groups);
	jsonx_add_bool(result, "truncated", truncated);
	*n_apps_out = json_object_array_length(list);
	*n_inst_out = count;
	*truncated_out = truncated;
	return result;
}

/* ---- search diagnostics (spec/lifecycle.md §9) ---------------------------------------------------- */

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Keeps at most 256 records and none older than 30 days. */
static void prune_diagnostics(const char *dir, int64_t now_ms)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **grown = realloc(names, cap * sizeof *grown);
			if (grown == NULL)
				break;
			names = grown;
		}
		names[n] = strdup(de->d_name);
		if (names[n])
			n++;
	}
	closedir(d);
	if (names)
		qsort(names, n, sizeof *names, compare_names);
	for (size_t i = 0; i < n; i++) {
		long long stamp = strtoll(names[i], NULL, 10);
		bool too_many = n - i > DIAG_MAX_RECORDS;
		bool too_old = stamp > 0 && now_ms - stamp > DIAG_MAX_AGE_MS;
		if (too_many || too_old) {
			char *path = fs_path_join(dir, names[i]);
			if (path)
				unlink(path);
			free(path);
		}
		free(names[i]);
	}
	free(names);
}

static void record_search(session_manager *m, const char *needle, const char *os, json_object *result,
                          const char *failure, const char *code, const catalog_view *v)
{
	int64_t now = clock_now_ms();
	char *dir = fs_path_join(m->settings->session_dir, "search-diagnostics");
	relay_error err;
	if (dir == NULL || fs_mkdir_p(dir, 0700, &err) != RELAY_OK) {
		log_warning("cannot keep a search record under %s", dir ? dir : "the session folder");
		free(dir);
		return;
	}
	json_object *rec = json_object_new_object();
	jsonx_add_int(rec, "schemaVersion", 1);
	char at[25];
	time_format_iso_millis(now, at);
	jsonx_add_str(rec, "at", at);
	json_object *query = json_object_new_object();
	jsonx_add_str(query, "name", needle);
	jsonx_add_str(query, "os", os);
	jsonx_add(rec, "query", query);
	if (failure) {
		jsonx_add_str(rec, "outcome", "failed");
		jsonx_add_str(rec, "failure", "application discovery failed");
		jsonx_add_str(rec, "code", code);
		char *cut = strndup(failure, 1024);
		jsonx_add_str(rec, "reason", cut);
		free(cut);
	} else {
		jsonx_add_str(rec, "outcome", "ok");
		json_object *counts = json_object_new_object();
		json_object *apps = jsonx_get_array(result, "applications");
		size_t inst = 0;
		for (size_t i = 0; apps && i < json_object_array_length(apps); i++)
			inst += json_object_array_length(
			    jsonx_get_array(json_object_array_get_idx(apps, i), "installations"));
		bool truncated = false;
		jsonx_get_bool(result, "truncated", &truncated);
		jsonx_add_int(counts, "applications", apps ? (int64_t)json_object_array_length(apps) : 0);
		jsonx_add_int(counts, "installations", (int64_t)inst);
		jsonx_add_bool(counts, "truncated", truncated);
		jsonx_add_int(counts, "catalogImages", v ? (int64_t)v->n_images : 0);
		jsonx_add_int(counts, "catalogInstallations", v ? (int64_t)v->n_installations : 0);
		jsonx_add(rec, "counts", counts);
		char *text = jsonx_to_string(result, JSONX_PRETTY);
		char hex[65] = "";
		if (text)
			sha256_buffer_hex(text, strlen(text), hex);
		jsonx_add_str(rec, "resultSha256", hex);
		jsonx_add_int(rec, "resultBytes", text ? (int64_t)strlen(text) : 0);
		free(text);
	}
	char *check = jsonx_to_string(rec, JSONX_PRETTY);
	if (check && strlen(check) > DIAG_MAX_BYTES) {
		/* Never reached with the bounds above; kept as a guard. */
		jsonx_add_str(query, "name", "(too long to record)");
	}
	free(check);
	char uuid[37], name[96];
	random_uuid(uuid);
	snprintf(name, sizeof name, "%013lld-%s.json", (long long)now, uuid);
	char *path = fs_path_join(dir, name);
	if (path == NULL || fs_write_json_durable(path, rec, &err) != RELAY_OK)
		log_warning("cannot write the search record %s", path ? path : name);
	free(path);
	json_object_put(rec);
	prune_diagnostics(dir, now);
	free(dir);
}

/* ---- the search ---------------------------------------------------------------------------- */

int catalog_search(session_manager *m, const char *name, const char *os, relay_call *call, catalog_found *out)
{
	memset(out, 0, sizeof *out);
	relay_outcome *o = &out->outcome;
	char *shown = catalog_trimmed(name ? name : "");
	char *needle = shown ? catalog_lower_utf8(shown) : NULL;
	out->shown = shown;
	int rc = -1;
	json_object *catalog = NULL;
	catalog_view view;
	memset(&view, 0, sizeof view);
	if (needle == NULL || needle[0] == '\0') {
		outcome_fail(o, "invalid-input",
		             "Invalid relay_search input: /name search name must not be blank");
		goto done;
	}
	session_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine == NULL || machine->machine.catalog == NULL) {
		const char *why = machine == NULL ? (m->backends->load_errors[SLOT_MACHINE]
		                                         ? m->backends->load_errors[SLOT_MACHINE]
		                                         : "no machine plugin is loaded")
		                                  : "the machine backend offers no application catalog";
		outcome_fail(o, "backend-unavailable", "catalog unavailable: %s", why);
		record_search(m, needle, os, NULL, why, "backend-unavailable", NULL);
		goto done;
	}
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.catalog(machine->state, call, 0, &text, &err);
	if (st != RELAY_OK) {
		free(text);
		const char *why = err.message[0] ? err.message : relay_status_str(st);
		outcome_fail(
		    o, "backend-unavailable", "%s%s",
		    strncmp(why, "catalog unavailable", 19) == 0 ? "" : "catalog unavailable: ", why);
		record_search(m, needle, os, NULL, why, "backend-unavailable", NULL);
		goto done;
	}
	char reason[128] = "";
	catalog = text ? jsonx_parse_str(text, reason, sizeof reason) : NULL;
	free(text);
	char why[512];
	const char *problem = catalog
	                          ? catalog_validate(catalog, &view, why, sizeof why)
	                          : (snprintf(why, sizeof why, "the catalog is not JSON (%s)", reason), why);
	if (problem) {
		outcome_fail(o, "catalog-invalid", "The application catalog is invalid: %s", problem);
		record_search(m, needle, os, NULL, problem, "catalog-invalid", NULL);
		goto done;
	}
	json_object *result =
	    catalog_match(&view, needle, os, &out->applications, &out->installations, &out->truncated);
	record_search(m, needle, os, result, NULL, NULL, &view);
	outcome_free(o);
	o->facts = result;
	rc = 0;
done:
	catalog_view_free(&view);
	json_object_put(catalog);
	free(needle);
	return rc;
}

void catalog_found_free(catalog_found *found)
{
	outcome_free(&found->outcome);
	free(found->shown);
	found->shown = NULL;
}
