/* The capture plugin's plan for a guest; see capture_plan.h. */
#include "runs/capture_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evidence/archive.h"
#include "util/jsonx.h"
#include "util/log.h"

json_object *capture_catalog_applications(session_manager *m, guest *g, relay_call *call, char *diag,
                                          size_t diag_len)
{
	if (diag && diag_len)
		diag[0] = '\0';
	json_object *apps = json_object_new_array();
	session_wait_startup(m);
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine == NULL || machine->machine.catalog == NULL) {
		if (diag)
			snprintf(diag, diag_len, "the machine backend offers no application catalog");
		return apps;
	}
	session_lock(m);
	char *image = g->image ? strdup(g->image) : NULL;
	session_unlock(m);
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.catalog(machine->state, call, 0, &text, &err);
	json_object *catalog = st == RELAY_OK && text ? jsonx_parse_str(text, NULL, 0) : NULL;
	free(text);
	if (catalog == NULL) {
		if (diag)
			snprintf(diag, diag_len, "the application catalog could not be read: %s",
			         st != RELAY_OK ? (err.message[0] ? err.message : relay_status_str(st))
			                        : "it is not JSON");
		free(image);
		return apps;
	}
	json_object *images = jsonx_get_array(catalog, "images");
	size_t n = images ? json_object_array_length(images) : 0;
	for (size_t i = 0; i < n && image; i++) {
		json_object *entry = json_object_array_get_idx(images, i);
		const char *key = jsonx_get_str(entry, "image");
		if (key == NULL || strcmp(key, image) != 0)
			continue;
		json_object *list = jsonx_get_array(entry, "applications");
		size_t count = list ? json_object_array_length(list) : 0;
		for (size_t k = 0; k < count; k++) {
			json_object *app = json_object_array_get_idx(list, k);
			const char *id = jsonx_get_str(app, "id");
			if (id == NULL)
				continue;
			json_object *copy = json_object_new_object();
			jsonx_add_str(copy, "id", id);
			jsonx_add_str(copy, "name", jsonx_get_str(app, "name"));
			jsonx_add_str(copy, "version", jsonx_get_str(app, "version"));
			json_object_array_add(apps, copy);
		}
		break;
	}
	json_object_put(catalog);
	free(image);
	return apps;
}

const char *capture_plugin_name(session_manager *m)
{
	session_wait_startup(m);
	loaded_plugin *capture = m->backends->plugins[SLOT_CAPTURE];
	return capture ? capture->descriptor.name : NULL;
}

static json_object *disabled_plan(const char *because)
{
	json_object *plan = json_object_new_object();
	jsonx_add_bool(plan, "enabled", false);
	jsonx_add_str(plan, "because", because);
	jsonx_add_null(plan, "capture");
	jsonx_add(plan, "stage", json_object_new_array());
	jsonx_add_null(plan, "cuaDriver");
	return plan;
}

/* NULL when the plan keeps the ABI's rules, else the rule broken. */
static const char *plan_problem(json_object *plan)
{
	bool enabled = false;
	if (!json_object_is_type(plan, json_type_object) || !jsonx_get_bool(plan, "enabled", &enabled))
		return "the plan is not an object with a boolean \"enabled\"";
	json_object *capture = jsonx_get_obj(plan, "capture");
	if (enabled != (capture != NULL))
		return "\"capture\" must be an object exactly when snapshots are enabled";
	if (capture) {
		json_object *argv = jsonx_get_array(capture, "argv");
		size_t n = argv ? json_object_array_length(argv) : 0;
		int outs = 0;
		if (n == 0 || n > 256)
			return "capture.argv must hold 1 to 256 strings";
		for (size_t i = 0; i < n; i++) {
			json_object *a = json_object_array_get_idx(argv, i);
			if (!json_object_is_type(a, json_type_string))
				return "capture.argv must hold only strings";
			if (strcmp(json_object_get_string(a), "@OUT@") == 0 ||
			    strstr(json_object_get_string(a), "@OUT@") != NULL)
				outs++;
		}
		if (outs != 1)
			return "capture.argv must contain exactly one @OUT@";
		const char *check = jsonx_get_str(capture, "check");
		if (check == NULL ||
		    (strcmp(check, "png-file") != 0 && strcmp(check, "cua-driver-json") != 0))
			return "capture.check must be png-file or cua-driver-json";
		int64_t timeout = 0;
		if (!jsonx_get_int(capture, "timeoutMs", &timeout) || timeout < 1 || timeout > 60000)
			return "capture.timeoutMs must be an integer from 1 to 60000";
	}
	json_object *stage = jsonx_get_array(plan, "stage");
	size_t n = stage ? json_object_array_length(stage) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(stage, i);
		const char *local = jsonx_get_str(s, "local"), *remote = jsonx_get_str(s, "remote");
		if (local == NULL || local[0] != '/')
			return "stage[].local must be an absolute host file";
		if (remote == NULL || !evidence_archive_path_ok(remote))
			return "stage[].remote must be a safe path relative to the guest root";
	}
	return NULL;
}

json_object *capture_plan_for(session_manager *m, guest *g, json_object *applications, const char *platform,
                              const char *cua_driver)
{
	session_wait_startup(m);
	loaded_plugin *capture = m->backends->plugins[SLOT_CAPTURE];
	if (capture == NULL || capture->capture.plan == NULL) {
		char because[512];
		const char *why = m->backends->load_errors[SLOT_CAPTURE];
		snprintf(because, sizeof because, "no capture plugin is loaded%s%s%s", why ? " (" : "",
		         why ? why : "", why ? ")" : "");
		return disabled_plan(because);
	}
	json_object *context = json_object_new_object();
	session_lock(m);
	jsonx_add(context, "lease", g->lease_document ? json_object_get(g->lease_document) : NULL);
	jsonx_add_str(context, "guestRoot", g->guest_root);
	session_unlock(m);
	jsonx_add(context, "applications",
	          applications ? json_object_get(applications) : json_object_new_array());
	jsonx_add_str(context, "platform", platform);
	jsonx_add_str(context, "cuaDriver", cua_driver);
	char *context_text = jsonx_to_string(context, 0);
	json_object_put(context);
	char *plan_text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = context_text
	                      ? capture->capture.plan(capture->state, context_text, 0, &plan_text, &err)
	                      : RELAY_E_NO_MEMORY;
	free(context_text);
	json_object *plan = st == RELAY_OK && plan_text ? jsonx_parse_str(plan_text, NULL, 0) : NULL;
	free(plan_text);
	char because[RELAY_ERROR_MESSAGE_BYTES + 256];
	if (st != RELAY_OK) {
		snprintf(because, sizeof because, "the capture plugin %s could not plan snapshots: %s",
		         capture->descriptor.name, err.message[0] ? err.message : relay_status_str(st));
		json_object_put(plan);
		return disabled_plan(because);
	}
	const char *problem = plan_problem(plan);
	if (problem) {
		snprintf(because, sizeof because, "the capture plugin %s answered an unusable plan: %s",
		         capture->descriptor.name, problem);
		log_warning("%s", because);
		json_object_put(plan);
		return disabled_plan(because);
	}
	if (!jsonx_has(plan, "stage"))
		jsonx_add(plan, "stage", json_object_new_array());
	if (jsonx_get_str(plan, "because") == NULL)
		jsonx_add_str(plan, "because", "the capture plugin gave no reason");
	return plan;
}
