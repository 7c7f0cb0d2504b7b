/*
 * Readiness checks of the machine-service plugin for `mcp-relay doctor`
 * (relay/machine.h `doctor`): reachability, service identity, acquisition
 * capabilities, the application catalog, the destruction check and, when
 * the profile names machctl, whether machctl reads the same environment.
 * Every check only reads; nothing is acquired or changed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_http.h"
#include "ms_plugin.h"
#include "ms_util.h"

static void add_check(json_object *list, const char *check, bool ok, const char *detail, const char *fix)
{
	json_object *c = json_object_new_object();
	json_object_object_add(c, "check", json_object_new_string(check));
	json_object_object_add(c, "ok", json_object_new_boolean(ok));
	json_object_object_add(c, "detail", json_object_new_string(detail ? detail : ""));
	json_object_object_add(c, "fix", fix && !ok ? json_object_new_string(fix) : NULL);
	json_object_array_add(list, c);
}

static void check_capabilities(ms_state *s, relay_call *call, json_object *list)
{
	char *caps_text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status status = ms_console_ops.capabilities(s, call, 0, &caps_text, &err);
	char detail[300];
	if (status == RELAY_E_UNSUPPORTED) {
		add_check(
		    list, "acquisition capabilities", true,
		    "not offered by this service: VNC consoles are unavailable (upgrade the machine service "
		    "for VNC)",
		    NULL);
	} else if (status != RELAY_OK) {
		add_check(list, "acquisition capabilities", false, err.message,
		          "upgrade machine-service to one that serves GET /acquisition-capabilities with "
		          "schemaVersion 1");
	} else {
		json_object *caps = ms_json_parse(caps_text, strlen(caps_text), NULL, 0);
		json_object *backends =
		    rsj_get_obj(rsj_get_obj(rsj_get_obj(caps, "options"), "vnc"), "backends");
		bool linux_ok = false, macos_ok = false;
		rsj_get_bool(rsj_get_obj(backends, "linux"), "available", &linux_ok);
		rsj_get_bool(rsj_get_obj(backends, "macos"), "available", &macos_ok);
		snprintf(detail, sizeof detail, "schemaVersion 1; VNC linux %s, macos %s",
		         linux_ok ? "available" : "unavailable", macos_ok ? "available" : "unavailable");
		add_check(list, "acquisition capabilities", true, detail, NULL);
		json_object_put(caps);
	}
	s->host->free(caps_text);
}

static void check_catalog(ms_state *s, relay_call *call, json_object *list)
{
	char *text = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status status = ms_catalog(s, call, 0, &text, &err);
	if (status != RELAY_OK) {
		add_check(list, "application catalog", false, err.message,
		          "check each image's applications.json in the image repository and restart "
		          "machine-service "
		          "(relay_search and the snapshot rule need the catalog)");
		return;
	}
	json_object *catalog = ms_json_parse(text, strlen(text), NULL, 0);
	json_object *images = NULL;
	json_object_object_get_ex(catalog, "images", &images);
	size_t n_images = json_object_is_type(images, json_type_array) ? json_object_array_length(images) : 0;
	size_t n_apps = 0;
	for (size_t i = 0; i < n_images; i++) {
		json_object *apps = NULL;
		json_object_object_get_ex(json_object_array_get_idx(images, i), "applications", &apps);
		n_apps += json_object_is_type(apps, json_type_array) ? json_object_array_length(apps) : 0;
	}
	char detail[160];
	snprintf(detail, sizeof detail, "%zu image(s), %zu installation(s) listed", n_images, n_apps);
	add_check(list, "application catalog", true, detail, NULL);
	json_object_put(catalog);
	s->host->free(text);
}

static void check_destruction(ms_state *s, json_object *list)
{
	char detail[600];
	if (s->opt.destruction_check == MS_CHECK_SERVICE) {
		snprintf(detail, sizeof detail, "service: a release counts once GET %s/<vm> answers 404%s",
		         s->opt.route_prefix,
		         s->opt.destruction_check_given ? " (destructionCheck \"service\")"
		                                        : " (no Tart binary found)");
		add_check(list, "destruction check", true, detail, NULL);
		return;
	}
	if (s->tart_path == NULL) {
		add_check(list, "destruction check", false,
		          "destructionCheck is \"tart\" but no Tart binary was found",
		          "set the profile's tartPath or TART to the Tart binary, or set destructionCheck "
		          "\"service\" "
		          "in MCP_RELAY_MACHINE_SERVICE_OPTIONS");
		return;
	}
	snprintf(detail, sizeof detail, "tart: %s list --format json with TART_HOME=%s", s->tart_path,
	         s->tart_home ? s->tart_home : "");
	add_check(list, "destruction check", true, detail, NULL);
}

/* §7.7: `machctl environment --json` must read the same identity. */
static void check_machctl(ms_state *s, relay_call *call, json_object *list)
{
	if (s->machctl_path == NULL)
		return;
	const char *argv[] = {s->machctl_path, "environment", "--json", NULL};
	relay_process_result res;
	relay_error err;
	relay_status status = ms_run(s->host, argv, (const char *const *)s->bundle, MS_TART_TIMEOUT_MS,
	                             1 << 20, call, &res, &err);
	char detail[RELAY_ERROR_MESSAGE_BYTES + 512];
	json_object *answer = NULL;
	if (status != RELAY_OK || res.exit_code != 0) {
		snprintf(detail, sizeof detail, "%s environment --json did not run cleanly (%s)",
		         s->machctl_path, status != RELAY_OK ? err.message : "nonzero exit");
		add_check(list, "machctl", false, detail,
		          "check the profile's machctlPath; machctl must be installed with machine-service");
		goto cleanup;
	}
	answer = ms_json_parse(res.out, res.out_len, NULL, 0);
	json_object *identity = rsj_get_obj(answer, "identity");
	bool same = identity != NULL;
	static const char *const keys[] = {"id",       "fingerprint",     "vmServiceUrl",  "imageRepository",
	                                   "tartHome", "serviceStateDir", "imageStateDir", "relayStateDir"};
	for (size_t i = 0; same && i < sizeof keys / sizeof keys[0]; i++) {
		const char *a = rsj_get_str(s->identity, keys[i]);
		const char *b = rsj_get_str(identity, keys[i]);
		same = a && b && strcmp(a, b) == 0;
	}
	if (same) {
		add_check(list, "machctl", true,
		          "machctl environment --json reads the same environment identity", NULL);
	} else {
		const char *fp = rsj_get_str(identity, "fingerprint");
		snprintf(detail, sizeof detail,
		         "machctl reads %s (fingerprint %.8s), the relay %s (fingerprint %.8s)",
		         identity ? (rsj_get_str(identity, "id") ? rsj_get_str(identity, "id") : "?")
		                  : "no environment",
		         fp ? fp : "none", rsj_get_str(s->identity, "id"), s->fingerprint);
		add_check(list, "machctl", false, detail,
		          "point VM_ENVIRONMENT_FILE of machine-service, machctl and the relay at profiles "
		          "with the "
		          "same ten values");
	}
cleanup:
	json_object_put(answer);
	s->host->free(res.out);
	s->host->free(res.err);
}

relay_status ms_doctor(relay_plugin_state *state, relay_call *call, unsigned flags, char **checks_json_out,
                       relay_error *err)
{
	ms_state *s = state;
	*checks_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(s->host, "doctor", flags, err);
	json_object *list = json_object_new_array();
	char detail[600];
	snprintf(detail, sizeof detail,
	         "%s (routes %s, acquire %s, list key %s, name field %s, service name %s)", s->origin,
	         s->opt.route_prefix, s->opt.acquire_path, s->opt.list_key, s->opt.name_field,
	         s->opt.service_name);
	add_check(list, "service origin", true, detail, NULL);

	ms_reply reply;
	relay_error cause;
	memset(&cause, 0, sizeof cause);
	relay_status status = ms_http(s, "GET", "/health", NULL, 5000, call, &reply, &cause);
	if (status != RELAY_OK) {
		relay_error why;
		ms_unavailable(s, status, &cause, "GET /health", &why);
		add_check(
		    list, "service reachable", false, why.message,
		    "start machine-service, or point MCP_RELAY_URL (or the profile's vmServiceUrl) at it");
	} else {
		snprintf(detail, sizeof detail, "GET /health at %s answered HTTP %ld", s->origin,
		         reply.status);
		add_check(list, "service reachable", true, detail, NULL);
		ms_reply_free(&reply);
		relay_error why;
		memset(&why, 0, sizeof why);
		if (ms_check_health(s, MS_LOOKUP_TIMEOUT_MS, call, NULL, &why) == RELAY_OK) {
			if (s->identity)
				snprintf(detail, sizeof detail,
				         "answers %s for environment %s (fingerprint %.8s)",
				         s->opt.service_name, rsj_get_str(s->identity, "id"), s->fingerprint);
			else
				snprintf(detail, sizeof detail, "answers %s, no environment selected",
				         s->opt.service_name);
			add_check(list, "service identity", true, detail, NULL);
			check_capabilities(s, call, list);
			check_catalog(s, call, list);
		} else {
			add_check(
			    list, "service identity", false, why.message,
			    strstr(why.message, "environment")
			        ? "select the environment the service runs (VM_ENVIRONMENT_FILE) or point "
			          "the "
			          "relay at the right service"
			        : "run machine-service (not vm-service or another program) at this origin; "
			          "release every lease, then upgrade the service");
		}
	}
	check_destruction(s, list);
	check_machctl(s, call, list);
	*checks_json_out = ms_json_owned(s->host, list);
	json_object_put(list);
	return *checks_json_out ? RELAY_OK : s->host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
}
