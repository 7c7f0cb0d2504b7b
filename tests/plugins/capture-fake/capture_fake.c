/*
 * capture-fake — a capture plugin for tests (relay/capture.h), modelled on
 * plugins/reference/capture_reference.c. Instead of reading a display, the
 * receiver's capture command copies a prepared PNG:
 *
 *     RELAY_FAKE_CAPTURE_DIR=/some/folder   (in the relay's environment)
 *
 * turns snapshots on, and each snapshot copies <folder>/before.png or
 * <folder>/after.png (by the phase in the receiver's output name) to the
 * output path. A file <folder>/fail-before or <folder>/fail-after makes that
 * capture fail (exit 1), which the receiver records as a failed capture.
 * Without the variable, snapshots are off ("RELAY_FAKE_CAPTURE_DIR is not
 * set"). The variable is read at every plan, so a test sets it per relay.
 *
 * It works with a guest whose commands run on this host (reference-machine) or
 * that sees the same folder.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/capture.h"
#include "relay/host.h"
#include "relay/plugin.h"

#define PLUGIN_NAME        "capture-fake"
#define PLUGIN_VERSION     "0.1.0"
#define CAPTURE_TIMEOUT_MS 60000

/* $0 is the folder, $1 the receiver's output path (.partial-<id>-<phase>.png). */
static const char capture_script[] =
    "phase=before; case \"$1\" in *-after.png) phase=after;; esac; "
    "if [ -e \"$0/fail-$phase\" ]; then echo \"capture-fake: scripted $phase failure\" >&2; exit 1; fi; "
    "cp \"$0/$phase.png\" \"$1\" && printf '{\"screenshot_file_path\":\"%s\"}\\n' \"$1\"";

typedef struct fake_capture_state {
	const relay_host *host;
} fake_capture_state;

static relay_status fake_plan(relay_plugin_state *state, const char *context_json, unsigned flags,
                              char **plan_json_out, relay_error *err)
{
	fake_capture_state *self = state;
	const relay_host *host = self->host;
	(void)context_json;
	*plan_json_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown plan flags 0x%x",
		                       PLUGIN_NAME, flags);
	const char *dir = getenv("RELAY_FAKE_CAPTURE_DIR");
	json_object *plan = json_object_new_object();
	if (plan == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", PLUGIN_NAME);
	if (dir == NULL || dir[0] != '/') {
		json_object_object_add(plan, "enabled", json_object_new_boolean(0));
		json_object_object_add(plan, "because",
		                       json_object_new_string("RELAY_FAKE_CAPTURE_DIR is not set"));
		json_object_object_add(plan, "capture", NULL);
	} else {
		json_object *capture = json_object_new_object(), *argv = json_object_new_array();
		json_object_array_add(argv, json_object_new_string("/bin/sh"));
		json_object_array_add(argv, json_object_new_string("-c"));
		json_object_array_add(argv, json_object_new_string(capture_script));
		json_object_array_add(argv, json_object_new_string(dir));     /* $0 */
		json_object_array_add(argv, json_object_new_string("@OUT@")); /* $1 */
		json_object_object_add(capture, "plugin", json_object_new_string(PLUGIN_NAME));
		json_object_object_add(capture, "argv", argv);
		json_object_object_add(capture, "check", json_object_new_string("png-file"));
		json_object_object_add(capture, "timeoutMs", json_object_new_int(CAPTURE_TIMEOUT_MS));
		json_object_object_add(plan, "enabled", json_object_new_boolean(1));
		json_object_object_add(
		    plan, "because",
		    json_object_new_string("RELAY_FAKE_CAPTURE_DIR names prepared snapshots"));
		json_object_object_add(plan, "capture", capture);
	}
	json_object_object_add(plan, "stage", json_object_new_array());
	json_object_object_add(plan, "cuaDriver", NULL);
	*plan_json_out = host->strdup(
	    json_object_to_json_string_ext(plan, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(plan);
	if (*plan_json_out == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", PLUGIN_NAME);
	return RELAY_OK;
}

static const relay_capture_ops fake_capture_ops = {
    .struct_size = sizeof(relay_capture_ops),
    .plan = fake_plan,
};

static relay_status fake_init(const relay_host *host, const char *config_json, unsigned flags,
                              relay_plugin_state **state_out, relay_error *err)
{
	(void)config_json;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown init flags 0x%x",
		                       PLUGIN_NAME, flags);
	fake_capture_state *self = host->alloc(sizeof *self);
	if (self == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", PLUGIN_NAME);
	self->host = host;
	*state_out = self;
	return RELAY_OK;
}

static void fake_fini(relay_plugin_state *state)
{
	fake_capture_state *self = state;
	if (self)
		self->host->free(self);
}

static const relay_plugin_descriptor fake_descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .description = "test capture plugin: copies prepared PNG files as snapshots",
    .kinds = RELAY_KIND_CAPTURE,
    .capabilities = 0,
    .init = fake_init,
    .fini = fake_fini,
    .capture = &fake_capture_ops,
    .capture_ops_size = sizeof fake_capture_ops,
};

RELAY_PLUGIN_DEFINE_ENTRY(fake_descriptor)
