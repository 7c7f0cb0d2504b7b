/*
 * capture-x11 — the capture plugin for X displays (relay/capture.h,
 * spec/guest.md §11.2). It plans, the guest receiver runs:
 *
 *   <guestRoot>/bin/relay-x11shot --display <DISPLAY> --out @OUT@
 *
 * check "png-file", timeoutMs 60000, and stages the relay-x11shot build of
 * the guest's platform from <libexecDir>/<platform>/relay-x11shot to
 * bin/relay-x11shot under the guest root.
 *
 * Inventory rule (spec/guest.md §11.2): snapshots are on when the lease reports
 * a display (machine-local records the Xvfb display it started), or the
 * image's catalog lists dpkg:xvfb or dpkg:xserver-xorg-core (then the
 * display is :0). No X authority cookie is used: machine-local's displays
 * live in the guest's private /tmp and network namespace.
 *
 * Config: {"libexecDir": "<folder with <platform>/relay-x11shot>", ...}.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "relay/capture.h"
#include "relay/host.h"
#include "relay/plugin.h"
#include "relay_support/json_get.h"

#define PLUGIN_NAME        "capture-x11"
#define CAPTURE_TIMEOUT_MS 60000

typedef struct x11_state {
	const relay_host *host;
	char *libexec_dir; /* may be NULL */
} x11_state;

static relay_status x11_init(const relay_host *host, const char *config_json, unsigned flags,
                             relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
	json_object *cfg = json_tokener_parse(config_json ? config_json : "{}");
	if (cfg == NULL || !json_object_is_type(cfg, json_type_object)) {
		if (cfg)
			json_object_put(cfg);
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "capture-x11's configuration is not a JSON object");
	}
	x11_state *st = calloc(1, sizeof *st);
	if (st == NULL) {
		json_object_put(cfg);
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	st->host = host;
	const char *dir = rsj_get_str(cfg, "libexecDir");
	st->libexec_dir = dir ? strdup(dir) : NULL;
	json_object_put(cfg);
	*state_out = st;
	return RELAY_OK;
}

static void x11_fini(relay_plugin_state *state)
{
	x11_state *st = state;
	if (st == NULL)
		return;
	free(st->libexec_dir);
	free(st);
}

/* The catalog id that turns snapshots on, or NULL. Ids may carry an
 * architecture suffix (dpkg:xvfb:amd64). */
static const char *listed_x_server(json_object *apps)
{
	static const char *const wanted[] = {"dpkg:xvfb", "dpkg:xserver-xorg-core"};
	if (apps == NULL || !json_object_is_type(apps, json_type_array))
		return NULL;
	for (size_t w = 0; w < sizeof wanted / sizeof wanted[0]; w++) {
		size_t wl = strlen(wanted[w]);
		for (size_t i = 0; i < json_object_array_length(apps); i++) {
			const char *id = rsj_get_str(json_object_array_get_idx(apps, i), "id");
			if (id && strncmp(id, wanted[w], wl) == 0 && (id[wl] == '\0' || id[wl] == ':'))
				return wanted[w];
		}
	}
	return NULL;
}

static bool valid_display(const char *d)
{
	/* [host]:N[.S], no spaces or quotes */
	if (d == NULL || strlen(d) > 128 || strchr(d, ':') == NULL)
		return false;
	for (const char *p = d; *p; p++)
		if (*p <= ' ' || *p == '"' || *p == '\\' || *p == '\'')
			return false;
	return true;
}

static relay_status x11_plan(relay_plugin_state *state, const char *context_json, unsigned flags,
                             char **plan_json_out, relay_error *err)
{
	x11_state *st = state;
	*plan_json_out = NULL;
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown plan flags 0x%x",
		                           flags);
	json_object *ctx = context_json ? json_tokener_parse(context_json) : NULL;
	if (ctx == NULL || !json_object_is_type(ctx, json_type_object)) {
		if (ctx)
			json_object_put(ctx);
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "the capture context is not a JSON object");
	}
	relay_status status = RELAY_OK;
	json_object *plan = json_object_new_object();
	json_object *lease = NULL, *apps = NULL;
	json_object_object_get_ex(ctx, "lease", &lease);
	json_object_object_get_ex(ctx, "applications", &apps);
	const char *guest_root = rsj_get_str(ctx, "guestRoot");
	const char *platform = rsj_get_str(ctx, "platform");
	const char *display = rsj_get_str(lease, "display");
	char because[512];
	bool enabled = false;
	if (guest_root == NULL || guest_root[0] != '/' || strlen(guest_root) > 1024) {
		status = st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                             "the capture context needs an absolute \"guestRoot\"");
		goto done;
	}
	const char *listed = listed_x_server(apps);
	json_object *display_field = NULL;
	bool display_none = json_object_object_get_ex(lease, "display", &display_field) &&
	                    json_object_is_type(display_field, json_type_boolean) &&
	                    !json_object_get_boolean(display_field);
	if (display_none) {
		/* The backend knows the guest has no X server: none is guessed
		 * from the image's packages (a stage would wait for it in vain). */
		snprintf(because, sizeof because,
		         "the lease says the guest has no X display (its backend started none: the "
		         "display is off, or the image has no X server the backend can start)");
	} else if (display && valid_display(display)) {
		enabled = true;
		snprintf(because, sizeof because, "the lease has the X display %s", display);
	} else if (listed) {
		enabled = true;
		display = ":0";
		snprintf(because, sizeof because, "the image lists %s", listed);
	} else {
		snprintf(because, sizeof because,
		         "the lease has no X display and the image lists neither dpkg:xvfb nor "
		         "dpkg:xserver-xorg-core");
	}
	json_object *stage = json_object_new_array();
	if (enabled && platform) {
		char local[4096];
		struct stat sb;
		if (st->libexec_dir == NULL) {
			enabled = false;
			snprintf(because, sizeof because,
			         "the relay's libexecDir is not configured, so relay-x11shot cannot be "
			         "staged");
		} else if (snprintf(local, sizeof local, "%s/%s/relay-x11shot", st->libexec_dir, platform) >=
		               (int)sizeof local ||
		           stat(local, &sb) != 0 || !S_ISREG(sb.st_mode)) {
			enabled = false;
			snprintf(because, sizeof because,
			         "no relay-x11shot build for %.64s in %.300s; build it with cmake --build "
			         "<build-dir> "
			         "--target relay-x11shot",
			         platform, st->libexec_dir);
		} else {
			json_object *entry = json_object_new_object();
			json_object_object_add(entry, "local", json_object_new_string(local));
			json_object_object_add(entry, "remote", json_object_new_string("bin/relay-x11shot"));
			json_object_array_add(stage, entry);
		}
	}
	json_object_object_add(plan, "enabled", json_object_new_boolean(enabled));
	json_object_object_add(plan, "because", json_object_new_string(because));
	if (enabled) {
		char program[1100];
		snprintf(program, sizeof program, "%s%sbin/relay-x11shot", guest_root,
		         guest_root[strlen(guest_root) - 1] == '/' ? "" : "/");
		json_object *argv = json_object_new_array();
		json_object_array_add(argv, json_object_new_string(program));
		json_object_array_add(argv, json_object_new_string("--display"));
		json_object_array_add(argv, json_object_new_string(display));
		json_object_array_add(argv, json_object_new_string("--out"));
		json_object_array_add(argv, json_object_new_string("@OUT@"));
		json_object *capture = json_object_new_object();
		json_object_object_add(capture, "plugin", json_object_new_string(PLUGIN_NAME));
		json_object_object_add(capture, "argv", argv);
		json_object_object_add(capture, "check", json_object_new_string("png-file"));
		json_object_object_add(capture, "timeoutMs", json_object_new_int(CAPTURE_TIMEOUT_MS));
		json_object_object_add(plan, "capture", capture);
	} else {
		json_object_object_add(plan, "capture", NULL);
		json_object_put(stage);
		stage = json_object_new_array();
	}
	json_object_object_add(plan, "stage", stage);
	json_object_object_add(plan, "cuaDriver", NULL);
	const char *text =
	    json_object_to_json_string_ext(plan, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	*plan_json_out = text ? st->host->strdup(text) : NULL;
	if (*plan_json_out == NULL)
		status = st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
done:
	json_object_put(plan);
	json_object_put(ctx);
	return status;
}

static const relay_capture_ops capture_ops = {
    .struct_size = sizeof(relay_capture_ops),
    .plan = x11_plan,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = PLUGIN_NAME,
    .version = "0.1.0",
    .description = "X display snapshots with relay-x11shot",
    .kinds = RELAY_KIND_CAPTURE,
    .capabilities = 0,
    .init = x11_init,
    .fini = x11_fini,
    .capture = &capture_ops,
    .capture_ops_size = sizeof(relay_capture_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
