/*
 * machine_service_fixture.h — what the machine-service plugin tests share
 * (tests/unit/plugins/machine-service/test_machine_service_*.c): the real plugin loaded through the
 * real loader, pointed at the real machine-service-standin
 * (tests/fixtures/machine-service-standin), and helpers to read the
 * stand-in's request log, inject faults and build lease documents.
 *
 * Header-only (static functions): each test is its own executable.
 * Needs the machine-service plugin and the stand-in built (a full build).
 */
#ifndef MACHINE_SERVICE_FIXTURE_H
#define MACHINE_SERVICE_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../../fixtures/machine-service-standin/standin_client.h"
#include "loader/loader.h"
#include "util/fsutil.h"
#include "util/http.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

typedef struct ms_fixture {
	standin_proc standin;
	plugin_registry registry;
	loaded_plugin *plugin;
	char state_dir[PATH_MAX];
} ms_fixture;

static inline const char *ms_plugin_path(void)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/lib/mcp-relay/plugins/machine-service.so", getenv("RELAY_BUILD_DIR"));
	return path;
}

/* Skips the test (with the reason) when the plugin or the stand-in was
 * not built. */
static inline void ms_require_builds(void)
{
	if (access(ms_plugin_path(), R_OK) != 0) {
		fprintf(stderr, "skipped: %s is not built (build the machine-service target)\n",
		        ms_plugin_path());
		skip();
	}
	if (access(standin_binary_path(), X_OK) != 0) {
		fprintf(stderr, "skipped: %s is not built (build machine-service-standin)\n",
		        standin_binary_path());
		skip();
	}
}

/* Starts the stand-in with extra arguments (NULL-terminated, may be NULL). */
static inline void ms_start_standin(ms_fixture *f, const char *const *extra)
{
	static bool http_ready;
	if (!http_ready) {
		http_global_init();
		http_ready = true;
	}
	if (!standin_start(&f->standin, extra)) {
		fprintf(stderr, "machine-service-standin did not start (exit %d)\n", f->standin.exit_status);
		fail();
	}
}

/* Loads the plugin for the machine slot with a configuration built from
 * the parts (each a JSON text or NULL). Returns the status; on success
 * f->plugin is set. */
static inline relay_status ms_load_with(ms_fixture *f, const char *url, const char *options_json,
                                        const char *environment_json, const char *bundle_json,
                                        relay_error *err)
{
	if (f->state_dir[0] == '\0') {
		snprintf(f->state_dir, sizeof f->state_dir, "/tmp/ms-plugin-state-XXXXXX");
		if (mkdtemp(f->state_dir) == NULL)
			fail();
	}
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "{\"stateDir\":\"%s\",\"libexecDir\":\"/nonexistent\",\"guestNetwork\":\"nat\",",
	              f->state_dir);
	if (url)
		strbuf_printf(&sb, "\"serviceUrl\":\"%s\",", url);
	else
		strbuf_puts(&sb, "\"serviceUrl\":null,");
	strbuf_printf(&sb, "\"environment\":%s,\"exportedEnvironment\":%s,\"options\":%s}",
	              environment_json ? environment_json : "null", bundle_json ? bundle_json : "null",
	              options_json ? options_json : "{}");
	memset(err, 0, sizeof *err);
	relay_status st =
	    loader_load(&f->registry, ms_plugin_path(), RELAY_KIND_MACHINE, strbuf_str(&sb), &f->plugin, err);
	strbuf_free(&sb);
	return st;
}

/* Loads against the running stand-in with the given options. */
static inline void ms_load(ms_fixture *f, const char *options_json)
{
	relay_error err;
	relay_status st = ms_load_with(f, f->standin.url, options_json, NULL, NULL, &err);
	if (st != RELAY_OK) {
		fprintf(stderr, "loading machine-service failed: %s\n", err.message);
		fail();
	}
}

static inline void ms_teardown(ms_fixture *f)
{
	loader_shutdown(&f->registry);
	memset(&f->registry, 0, sizeof f->registry);
	f->plugin = NULL;
	standin_cleanup(&f->standin);
	if (f->state_dir[0]) {
		relay_error err;
		fs_remove_tree(f->state_dir, &err);
		f->state_dir[0] = '\0';
	}
}

/* The stand-in's request log entries whose path equals `path` (or all when
 * NULL), as a new array. */
static inline json_object *ms_requests(ms_fixture *f, const char *method, const char *path)
{
	standin_reply r;
	standin_get(&f->standin, "/_standin/requests", &r);
	json_object *all = jsonx_get_array(r.json, "requests");
	json_object *out = json_object_new_array();
	for (size_t i = 0; all && i < json_object_array_length(all); i++) {
		json_object *e = json_object_array_get_idx(all, i);
		if (path && strcmp(jsonx_get_str(e, "path"), path) != 0)
			continue;
		if (method && strcmp(jsonx_get_str(e, "method"), method) != 0)
			continue;
		json_object_array_add(out, json_object_get(e));
	}
	standin_reply_free(&r);
	return out;
}

static inline size_t ms_count_requests(ms_fixture *f, const char *method, const char *path)
{
	json_object *list = ms_requests(f, method, path);
	size_t n = json_object_array_length(list);
	json_object_put(list);
	return n;
}

/* Injects a fault (the JSON body of POST /_standin/faults). */
static inline void ms_fault(ms_fixture *f, const char *fault_json)
{
	standin_reply r;
	long status = standin_post(&f->standin, "/_standin/faults", fault_json, &r);
	if (status != 200)
		fprintf(stderr, "fault refused: %s\n", r.raw ? r.raw : "");
	assert_int_equal(status, 200);
	standin_reply_free(&r);
}

/* An acquisition spec as the core sends it. */
static inline char *ms_spec(const char *purpose, const char *image, const char *network, bool vnc)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(
	    &sb,
	    "{\"guest\":\"t-1\",\"task\":\"t\",\"purpose\":\"%s\",\"image\":\"%s\",\"env\":\"none\","
	    "\"network\":\"%s\",\"vnc\":%s,\"ttlMs\":900000,\"deadlineMs\":%lld}",
	    purpose, image, network, vnc ? "true" : "false", (long long)(time(NULL) + 14400) * 1000);
	return strbuf_detach(&sb, NULL);
}

/* Acquires through the plugin; returns the status and the lease document
 * text (owned, free()) in *lease_out. */
static inline relay_status ms_acquire_lease(ms_fixture *f, const char *purpose, const char *image, bool vnc,
                                            char **lease_out, relay_error *err)
{
	char *spec = ms_spec(purpose, image, "nat", vnc);
	memset(err, 0, sizeof *err);
	*lease_out = NULL;
	relay_status st = f->plugin->machine.acquire(f->plugin->state, spec, NULL, 0, lease_out, err);
	free(spec);
	return st;
}

static inline json_object *ms_parse(const char *text)
{
	json_object *obj = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	assert_non_null(obj);
	return obj;
}

/* Writes an executable shell script (a fake tart or machctl). */
static inline void ms_write_script(const char *path, const char *body)
{
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fprintf(fp, "#!/bin/sh\n%s\n", body);
	fclose(fp);
	assert_int_equal(chmod(path, 0755), 0);
}

#endif
