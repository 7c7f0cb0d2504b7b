/*
 * Leases over time, as the tools see them: the binding a lease is recorded
 * with, the guest's registry row, probe records copied into new evidence,
 * waiting in relay time, and the records of cancellations and releases
 * (spec/lifecycle.md §5-§10). Renewal, release, reconciliation and the end of
 * the session have their own files (lifecycle.h lists them).
 */
#include "lease/lifecycle.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease/renewal.h"
#include "profile/environment.h"
#include "session/events.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

json_object *lease_parse_taken(char *text)
{
	json_object *obj = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	return obj;
}

/* ---- binding ------------------------------------------------------------------ */

json_object *lease_binding_json(session_manager *m)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine && machine->machine.binding) {
		char *text = NULL;
		relay_error err;
		memset(&err, 0, sizeof err);
		if (machine->machine.binding(machine->state, 0, &text, &err) == RELAY_OK && text) {
			json_object *binding = jsonx_parse_str(text, NULL, 0);
			free(text);
			if (json_object_is_type(binding, json_type_object))
				return binding;
			json_object_put(binding);
		} else {
			free(text);
		}
	}
	json_object *binding = json_object_new_object();
	jsonx_add_str(binding, "machine", backends_display_name(m->backends, SLOT_MACHINE));
	jsonx_add_null(binding, "endpoint");
	jsonx_add_null(binding, "store");
	jsonx_add_str(binding, "environmentFingerprint",
	              m->settings->environment ? environment_fingerprint(m->settings->environment) : NULL);
	return binding;
}

/* A binding value: the string, or NULL for null or absent. */
static const char *binding_value(const json_object *binding, const char *key)
{
	return jsonx_get_str(binding, key);
}

static bool same_value(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

bool lease_binding_equal(const json_object *a, const json_object *b)
{
	static const char *const keys[] = {"machine", "endpoint", "store", "environmentFingerprint"};
	if (!json_object_is_type(a, json_type_object) || !json_object_is_type(b, json_type_object))
		return false;
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!same_value(binding_value(a, keys[i]), binding_value(b, keys[i])))
			return false;
	return true;
}

/* ---- the registry row ------------------------------------------------------------- */

static const char *const row_keys[REGISTRY_CELLS] = {"machine", "os",      "taskName",
                                                     "agent",   "project", "startDate"};

/* The Machine cell (spec/lifecycle.md §10). Under lock. */
static char *machine_cell(session_manager *m, guest *g)
{
	const relay_settings *s = m->settings;
	const char *plugin = backends_display_name(m->backends, SLOT_MACHINE);
	strbuf sb = STRBUF_INIT;
	if (backends_uses_service(m->backends, SLOT_MACHINE)) {
		if (s->environment)
			strbuf_printf(&sb, "%s (%s; %s)", s->service_url, environment_id(s->environment),
			              g->purpose);
		else
			strbuf_printf(&sb, "127.0.0.1 (%s %s)", plugin ? plugin : "machine", g->purpose);
	} else {
		strbuf_printf(&sb, "localhost (%s %s)", plugin ? plugin : "machine", g->purpose);
	}
	return strbuf_detach(&sb, NULL);
}

/* The six cells of g->lease->registry_row, borrowed from it. Under lock. */
static bool row_from_json(const json_object *cells, registry_row *row)
{
	for (int c = 0; c < REGISTRY_CELLS; c++) {
		row->cells[c] = jsonx_get_str(cells, row_keys[c]);
		if (row->cells[c] == NULL)
			return false;
	}
	return true;
}

int lease_registry_add(session_manager *m, guest *g, relay_outcome *o)
{
	session_lock(m);
	char *machine = machine_cell(m, g);
	char stamp[22];
	time_format_stamp(g->acquired_at_ms, stamp);
	strbuf agent = STRBUF_INIT;
	strbuf_printf(&agent, "mcp-relay %s", m->settings->session_id);
	json_object *cells = json_object_new_object();
	jsonx_add_str(cells, "machine", machine);
	jsonx_add_str(cells, "os", g->image);
	jsonx_add_str(cells, "taskName", g->purpose);
	jsonx_add_str(cells, "agent", strbuf_str(&agent));
	jsonx_add_str(cells, "project", m->settings->project);
	jsonx_add_str(cells, "startDate", stamp);
	free(machine);
	strbuf_free(&agent);
	json_object_put(g->lease->registry_row);
	g->lease->registry_row = cells;
	/* The record names the row before the row exists, so a crash in
	 * between leaves a row we can recognise as ours. */
	guest_save(g);
	registry_row row;
	row_from_json(cells, &row);
	json_object_get(cells);
	session_unlock(m);

	char errbuf[768];
	registry_outcome outcome = registry_add(&m->registry, &row, errbuf, sizeof errbuf);
	json_object_put(cells);
	if (outcome == REGISTRY_CHANGED || outcome == REGISTRY_UNCHANGED)
		return 0;
	/* Nothing of ours is in the file: forget the row. */
	session_lock(m);
	json_object_put(g->lease->registry_row);
	g->lease->registry_row = NULL;
	guest_save(g);
	session_unlock(m);
	if (outcome == REGISTRY_CONFLICT || outcome == REGISTRY_LOCK_TIMEOUT)
		return outcome_fail(o, "registry-conflict", "%s (registry %s); nothing was acquired", errbuf,
		                    m->registry.path);
	return outcome_fail(o, "internal",
	                    "the task registry %s could not be updated: %s; nothing was acquired",
	                    m->registry.path, errbuf);
}

int lease_registry_remove(session_manager *m, guest *g)
{
	session_lock(m);
	json_object *cells = g->lease->registry_row ? json_object_get(g->lease->registry_row) : NULL;
	session_unlock(m);
	if (cells == NULL)
		return 0;
	registry_row row;
	int rc = 0;
	char errbuf[768];
	if (!row_from_json(cells, &row)) {
		log_error("the registry row recorded for %s is incomplete; it was not removed from %s",
		          g->name, m->registry.path);
		rc = -1;
	} else {
		registry_outcome outcome = registry_remove(&m->registry, &row, errbuf, sizeof errbuf);
		if (outcome != REGISTRY_CHANGED && outcome != REGISTRY_UNCHANGED) {
			log_error("cannot remove the registry row of %s: %s", g->name, errbuf);
			rc = -1;
		}
	}
	json_object_put(cells);
	if (rc == 0) {
		session_lock(m);
		json_object_put(g->lease->registry_row);
		g->lease->registry_row = NULL;
		guest_save(g);
		session_unlock(m);
	}
	return rc;
}

/* ---- probes ------------------------------------------------------------------------ */

void lease_copy_probes(session_manager *m, guest *g)
{
	char *probes = fs_path_join(m->settings->session_dir, "probes");
	session_lock(m);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	DIR *dir = probes ? opendir(probes) : NULL;
	if (dir == NULL || evidence == NULL)
		goto cleanup;
	char *host = fs_path_join(evidence, "host/probes");
	relay_error err;
	if (host == NULL || fs_mkdir_p(host, 0700, &err) != RELAY_OK) {
		log_error("cannot copy the probe records of %s into its evidence", g->name);
		free(host);
		goto cleanup;
	}
	struct dirent *entry;
	while ((entry = readdir(dir)) != NULL) {
		size_t n = strlen(entry->d_name);
		if (entry->d_name[0] == '.' || n < 6 || strcmp(entry->d_name + n - 5, ".json") != 0)
			continue;
		char *src = fs_path_join(probes, entry->d_name);
		char *dst = fs_path_join(host, entry->d_name);
		if (src && dst && fs_copy_file(src, dst, 0600, &err) != RELAY_OK)
			log_error("cannot copy the probe record %s into the evidence of %s: %s",
			          entry->d_name, g->name, err.message);
		free(src);
		free(dst);
	}
	free(host);
cleanup:
	if (dir)
		closedir(dir);
	free(probes);
	free(evidence);
}

/* ---- renewal, as the tools see it ------------------------------------------------------ */

void lease_renewal_begin(session_manager *m, guest *g)
{
	lease_renewal_start(m, g, false);
}

void lease_renewal_end(session_manager *m, guest *g)
{
	lease_renewal_stop(m, g);
}

int lease_wait_until(session_manager *m, relay_call *call, int64_t deadline_ms)
{
	session_lock(m);
	for (;;) {
		if (m->ending || relay_call_is_cancelled(call)) {
			session_unlock(m);
			return -1;
		}
		if (clock_wait_until_ms(&m->changed, &m->lock, deadline_ms, 500))
			break;
	}
	session_unlock(m);
	return 0;
}

/* ---- records ---------------------------------------------------------------------------- */

void lease_write_record(session_manager *m, guest *g, const char *reason, bool failed)
{
	session_lock(m);
	json_object *record = json_object_new_object();
	jsonx_add_str(record, "purpose", g->purpose);
	jsonx_add_str(record, "vm", g->lease_document ? jsonx_get_str(g->lease_document, "vm") : NULL);
	jsonx_add_bool(record, "released", true);
	jsonx_add_str(record, "reason", reason);
	jsonx_add_bool(record, "failed", failed);
	jsonx_add_bool(record, "delivered", g->delivered);
	char at[21];
	time_format_iso_seconds(clock_now_ms(), at);
	jsonx_add_str(record, "finishedAt", at);
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	if (evidence) {
		strbuf path = STRBUF_INIT;
		strbuf_printf(&path, "%s.lifecycle.json", evidence);
		relay_error err;
		if (fs_write_json_durable(strbuf_str(&path), record, &err) != RELAY_OK)
			log_error("cannot write %s: %s", strbuf_str(&path), err.message);
		strbuf_free(&path);
	}
	free(evidence);
	json_object_put(record);
}

void lease_close_absent(session_manager *m, guest *g, const char *why)
{
	lease_renewal_stop(m, g);
	lease_registry_remove(m, g);
	lease_write_record(m, g, why, false);
	guest_event(m, g, "release", why, NULL);
	guest_close(m, g, "absent");
	log_info("guest %s is gone at the backend (%s); closed", g->name, why);
}
