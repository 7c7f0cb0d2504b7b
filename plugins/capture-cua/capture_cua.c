/*
 * capture-cua — the capture plugin for guests with cua-driver
 * (spec: spec/guest.md §11.1; docs/capture.md).
 *
 * plan() turns snapshots on when the image's catalog lists
 * bundle:com.trycua.driver or dpkg:cua-driver, and then plans the command
 * the guest receiver runs for one snapshot:
 *
 *     <cuaDriver> call get_desktop_state --json {"screenshot_out_file":"@OUT@"}
 *
 * (five argv entries; the receiver replaces @OUT@ with the absolute output
 * path), checked as "cua-driver-json", limited to 60 s. <cuaDriver> is the
 * corrected path given at staging, else the macOS application path on
 * darwin guests and "cua-driver" (looked up on PATH) elsewhere. Before
 * staging the platform is unknown; the catalog entry then decides: a
 * bundle: id is a macOS application, a dpkg: id a Linux package.
 *
 * The plan also carries "env": {"RELAY_CUA_DRIVER": <cuaDriver>}, the
 * variable the receiver gives every script (spec/guest.md §12.2). The plugin
 * stages nothing: cua-driver is part of the image.
 */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "relay/capture.h"
#include "relay/plugin.h"
#include "relay_support/json_get.h"

#define CUA_PLUGIN_NAME  "capture-cua"
#define CUA_TIMEOUT_MS   60000
#define CUA_MACOS_DRIVER "/Applications/CuaDriver.app/Contents/MacOS/cua-driver"
#define CUA_OTHER_DRIVER "cua-driver"
#define CUA_ID_BUNDLE    "bundle:com.trycua.driver"
#define CUA_ID_DPKG      "dpkg:cua-driver"

typedef struct cua_state {
	const relay_host *host;
} cua_state;

/* The host table is kept for error messages and allocation. Written once
 * in init() before any operation runs, read-only afterwards. */
static cua_state cua_plugin_state;

static relay_status cua_init(const relay_host *host, const char *config_json, unsigned flags,
                             relay_plugin_state **state_out, relay_error *err)
{
	(void)config_json; /* no options */
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
	cua_plugin_state.host = host;
	*state_out = &cua_plugin_state;
	return RELAY_OK;
}

/* The catalog id that turns snapshots on, or NULL. */
static const char *driver_id(json_object *applications)
{
	size_t n = applications ? json_object_array_length(applications) : 0;
	for (size_t i = 0; i < n; i++) {
		const char *id = rsj_get_str(json_object_array_get_idx(applications, i), "id");
		if (id && (strcmp(id, CUA_ID_BUNDLE) == 0 || strcmp(id, CUA_ID_DPKG) == 0))
			return id;
	}
	return NULL;
}

/* A corrected path the receiver can run without a shell. */
static bool usable_driver_path(const char *path)
{
	if (path[0] == '\0' || strlen(path) > 4096)
		return false;
	for (const char *p = path; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch < 0x20 || ch == 0x7f)
			return false;
	}
	return true;
}

static relay_status cua_plan(relay_plugin_state *state, const char *context_json, unsigned flags,
                             char **plan_json_out, relay_error *err)
{
	const relay_host *host = ((cua_state *)state)->host;
	relay_status status = RELAY_OK;
	json_object *context = NULL, *plan = NULL;
	*plan_json_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown plan flags 0x%x", flags);

	context = json_tokener_parse(context_json ? context_json : "");
	if (context == NULL || !json_object_is_type(context, json_type_object)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "capture-cua: the plan context is not a JSON object");
		goto cleanup;
	}
	json_object *applications = NULL;
	if (json_object_object_get_ex(context, "applications", &applications) &&
	    !json_object_is_type(applications, json_type_null) &&
	    !json_object_is_type(applications, json_type_array)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "capture-cua: the plan context's \"applications\" is not an array");
		goto cleanup;
	}
	if (applications && !json_object_is_type(applications, json_type_array))
		applications = NULL;
	const char *platform = rsj_get_str(context, "platform");
	const char *corrected = rsj_get_str(context, "cuaDriver");
	if (corrected && !usable_driver_path(corrected)) {
		status =
		    host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                    "capture-cua: the corrected cuaDriver path is empty or holds control "
		                    "characters; give the driver's path in the guest");
		goto cleanup;
	}

	const char *id = driver_id(applications);
	plan = json_object_new_object();
	if (plan == NULL)
		goto oom;
	json_object *stage = json_object_new_array();
	json_object *env = json_object_new_object();
	if (stage == NULL || env == NULL) {
		json_object_put(stage);
		json_object_put(env);
		goto oom;
	}
	json_object_object_add(plan, "stage", stage);
	json_object_object_add(plan, "env", env);
	if (id == NULL) {
		json_object_object_add(plan, "enabled", json_object_new_boolean(0));
		json_object_object_add(
		    plan, "because",
		    json_object_new_string("the image lists neither " CUA_ID_BUNDLE " nor " CUA_ID_DPKG));
		json_object_object_add(plan, "capture", NULL);
		json_object_object_add(plan, "cuaDriver", NULL);
	} else {
		const char *driver;
		if (corrected)
			driver = corrected;
		else if (platform)
			driver = strncmp(platform, "darwin-", 7) == 0 ? CUA_MACOS_DRIVER : CUA_OTHER_DRIVER;
		else
			driver = strcmp(id, CUA_ID_BUNDLE) == 0 ? CUA_MACOS_DRIVER : CUA_OTHER_DRIVER;
		char because[96];
		snprintf(because, sizeof because, "the image lists %s", id);
		json_object *capture = json_object_new_object();
		json_object *argv = json_object_new_array();
		if (capture == NULL || argv == NULL) {
			json_object_put(capture);
			json_object_put(argv);
			goto oom;
		}
		json_object_array_add(argv, json_object_new_string(driver));
		json_object_array_add(argv, json_object_new_string("call"));
		json_object_array_add(argv, json_object_new_string("get_desktop_state"));
		json_object_array_add(argv, json_object_new_string("--json"));
		json_object_array_add(argv, json_object_new_string("{\"screenshot_out_file\":\"@OUT@\"}"));
		json_object_object_add(capture, "plugin", json_object_new_string(CUA_PLUGIN_NAME));
		json_object_object_add(capture, "argv", argv);
		json_object_object_add(capture, "check", json_object_new_string("cua-driver-json"));
		json_object_object_add(capture, "timeoutMs", json_object_new_int(CUA_TIMEOUT_MS));
		json_object_object_add(plan, "enabled", json_object_new_boolean(1));
		json_object_object_add(plan, "because", json_object_new_string(because));
		json_object_object_add(plan, "capture", capture);
		json_object_object_add(plan, "cuaDriver", json_object_new_string(driver));
		json_object_object_add(env, "RELAY_CUA_DRIVER", json_object_new_string(driver));
	}
	const char *text =
	    json_object_to_json_string_ext(plan, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	*plan_json_out = text ? host->strdup(text) : NULL;
	if (*plan_json_out == NULL)
		goto oom;
	goto cleanup;
oom:
	status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "capture-cua: out of memory writing the plan");
cleanup:
	json_object_put(context);
	json_object_put(plan);
	return status;
}

static const relay_capture_ops capture_ops = {
    .struct_size = sizeof(relay_capture_ops),
    .plan = cua_plan,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = CUA_PLUGIN_NAME,
    .version = "0.1.0",
    .description = "snapshots through cua-driver's get_desktop_state (images listing cua-driver)",
    .kinds = RELAY_KIND_CAPTURE,
    .capabilities = 0,
    .init = cua_init,
    .fini = NULL,
    .capture = &capture_ops,
    .capture_ops_size = sizeof(relay_capture_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
