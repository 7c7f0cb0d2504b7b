/*
 * capture-reference — the plugin to copy when you write your own.
 *
 * It is a complete, working capture plugin: it tells the guest receiver to
 * take each snapshot with ImageMagick's `import` on the guest's X display.
 * Read it top to bottom; docs/writing-a-plugin.md walks through it. Every
 * plugin has the same four parts:
 *
 *   1. its operations, each following the ABI's rules (check `flags`, fill
 *      `err`, return owned memory allocated with host->alloc);
 *   2. static const ops tables for the kinds it provides, with designated
 *      initialisers (a slot left NULL means "unsupported");
 *   3. init()/fini() for its state;
 *   4. the one exported entry, relay_plugin_entry_v1, returning a static
 *      descriptor.
 *
 * Build: relay_add_plugin(capture-reference SOURCES capture_reference.c
 *        LIBS PkgConfig::JSONC) in CMake, or by hand:
 *   cc -shared -fPIC -fvisibility=hidden $(pkg-config --cflags mcp-relay-plugin json-c) \
 *      capture_reference.c $(pkg-config --libs json-c) -o capture-reference.so
 * Use: put it in a profile slot (relayPlugins.capture) or MCP_RELAY_PLUGIN_PATH.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/capture.h"
#include "relay/host.h"
#include "relay/plugin.h"

#define PLUGIN_NAME        "capture-reference"
#define PLUGIN_VERSION     "0.1.0"
#define CAPTURE_TIMEOUT_MS 60000 /* the receiver's largest accepted limit (spec/guest.md §11) */

/* Flags this plugin understands for plan(). None yet: any bit is refused,
 * so a newer core that passes a flag we do not know gets a clear error
 * instead of silently different behaviour. */
#define PLAN_KNOWN_FLAGS 0u

/* --- state -------------------------------------------------------------- */

/* Per-plugin state, created by init() and handed back to every operation.
 * The host table lives in it because plugins reach the core only through it
 * (the core exports no symbols to plugins). */
typedef struct reference_state {
	const relay_host *host; /* borrowed; valid until fini() returns */
} reference_state;

/* --- helpers ------------------------------------------------------------ */

/* Returns an owned copy (host->alloc) of a json-c serialisation, because
 * memory crossing the ABI is always released by the receiver with
 * host->free, never with a different allocator. */
static char *owned_json(const relay_host *host, json_object *obj)
{
	const char *text =
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return host->strdup(text);
}

/* True when the image's catalog lists the application id. */
static int lists_application(json_object *applications, const char *id)
{
	size_t n =
	    json_object_is_type(applications, json_type_array) ? json_object_array_length(applications) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *app = json_object_array_get_idx(applications, i), *app_id = NULL;
		if (json_object_object_get_ex(app, "id", &app_id) &&
		    json_object_is_type(app_id, json_type_string) &&
		    strcmp(json_object_get_string(app_id), id) == 0)
			return 1;
	}
	return 0;
}

/* --- 1. the operation ----------------------------------------------------- */

/*
 * plan(): decides whether runs on this guest take snapshots and, if so, the
 * command the receiver runs. relay/capture.h documents the context and the
 * plan; this implementation:
 *   - turns snapshots on when the image lists dpkg:imagemagick AND the lease
 *     names an X display (the lease document's "display");
 *   - asks for `import -window root png:<out>` through /bin/sh, printing the
 *     {"screenshot_file_path": ...} line the receiver's "png-file" check
 *     expects (the receiver replaces the single @OUT@ with the output path).
 */
static relay_status reference_plan(relay_plugin_state *state, const char *context_json, unsigned flags,
                                   char **plan_json_out, relay_error *err)
{
	reference_state *self = state;
	const relay_host *host = self->host;
	relay_status status = RELAY_OK;
	json_object *context = NULL, *plan = NULL;

	*plan_json_out = NULL;
	if (flags & ~PLAN_KNOWN_FLAGS)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown plan flags 0x%x",
		                       PLUGIN_NAME, flags & ~PLAN_KNOWN_FLAGS);
	context = json_tokener_parse(context_json);
	if (context == NULL || !json_object_is_type(context, json_type_object)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "%s: the plan context is not a JSON object", PLUGIN_NAME);
		goto cleanup;
	}

	json_object *lease = NULL, *display = NULL, *applications = NULL;
	json_object_object_get_ex(context, "lease", &lease);
	json_object_object_get_ex(lease, "display", &display);
	json_object_object_get_ex(context, "applications", &applications);
	const char *display_name =
	    json_object_is_type(display, json_type_string) ? json_object_get_string(display) : NULL;
	int has_import = lists_application(applications, "dpkg:imagemagick");

	plan = json_object_new_object();
	if (plan == NULL) {
		status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", PLUGIN_NAME);
		goto cleanup;
	}
	if (!has_import || display_name == NULL) {
		/* Snapshots off: say why in one phrase; "capture" must be null. */
		json_object_object_add(plan, "enabled", json_object_new_boolean(0));
		json_object_object_add(plan, "because",
		                       json_object_new_string(!has_import
		                                                  ? "the image does not list dpkg:imagemagick"
		                                                  : "the lease names no X display"));
		json_object_object_add(plan, "capture", NULL);
	} else {
		json_object *capture = json_object_new_object(), *argv = json_object_new_array();
		char script[256];
		snprintf(script, sizeof script,
		         "DISPLAY=%s import -window root \"png:$1\" && printf "
		         "'{\"screenshot_file_path\":\"%%s\"}\\n' \"$1\"",
		         display_name);
		json_object_array_add(argv, json_object_new_string("/bin/sh"));
		json_object_array_add(argv, json_object_new_string("-c"));
		json_object_array_add(argv, json_object_new_string(script));
		json_object_array_add(argv, json_object_new_string(PLUGIN_NAME)); /* $0 */
		json_object_array_add(argv, json_object_new_string("@OUT@"));     /* $1 */
		json_object_object_add(capture, "plugin", json_object_new_string(PLUGIN_NAME));
		json_object_object_add(capture, "argv", argv);
		json_object_object_add(capture, "check", json_object_new_string("png-file"));
		json_object_object_add(capture, "timeoutMs", json_object_new_int(CAPTURE_TIMEOUT_MS));
		json_object_object_add(plan, "enabled", json_object_new_boolean(1));
		json_object_object_add(
		    plan, "because",
		    json_object_new_string("the image lists dpkg:imagemagick and the lease has a display"));
		json_object_object_add(plan, "capture", capture);
	}
	json_object_object_add(plan, "stage", json_object_new_array()); /* nothing to push into the guest */
	json_object_object_add(plan, "cuaDriver", NULL);

	*plan_json_out = owned_json(host, plan);
	if (*plan_json_out == NULL)
		status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", PLUGIN_NAME);
cleanup:
	json_object_put(plan);
	json_object_put(context);
	return status;
}

/* --- 2. the ops table ------------------------------------------------------- */

static const relay_capture_ops reference_capture_ops = {
    .struct_size = sizeof(relay_capture_ops),
    .plan = reference_plan,
};

/* --- 3. init and fini ---------------------------------------------------- */

static relay_status reference_init(const relay_host *host, const char *config_json, unsigned flags,
                                   relay_plugin_state **state_out, relay_error *err)
{
	(void)config_json; /* {"stateDir", "libexecDir", "options", ...}: unused here */
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown init flags 0x%x",
		                       PLUGIN_NAME, flags);
	reference_state *self = host->alloc(sizeof *self);
	if (self == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", PLUGIN_NAME);
	self->host = host;
	*state_out = self;
	return RELAY_OK;
}

static void reference_fini(relay_plugin_state *state)
{
	reference_state *self = state;
	if (self)
		self->host->free(self);
}

/* --- 4. the descriptor and the entry ----------------------------------------- */

static const relay_plugin_descriptor reference_descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = PLUGIN_NAME,
    .version = PLUGIN_VERSION,
    .description = "reference capture plugin: ImageMagick import on the guest's X display",
    .kinds = RELAY_KIND_CAPTURE,
    .capabilities = 0,
    .init = reference_init,
    .fini = reference_fini,
    .capture = &reference_capture_ops,
    .capture_ops_size = sizeof reference_capture_ops,
};

/* The only exported symbol (everything else is hidden by
 * -fvisibility=hidden). Refuse a host whose major differs; accept any minor,
 * because this plugin uses nothing added after 1.0. */
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version);
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)
{
	if (RELAY_ABI_MAJOR(host_abi_version) != RELAY_ABI_VERSION_MAJOR)
		return NULL;
	return &reference_descriptor;
}
