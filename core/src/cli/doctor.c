/* mcp-relay doctor: settings valid, plugins loadable, backend reachable and
 * answering as the right service, images available; acquires nothing. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "loader/loader.h"
#include "profile/backends.h"
#include "profile/environment.h"
#include "profile/settings.h"
#include "util/jsonx.h"

static int failures;
static int warnings;

static void line(bool ok, const char *check, const char *detail, const char *fix)
{
	printf("%s %-22s %s\n", ok ? "ok  " : "FAIL", check, detail ? detail : "");
	if (!ok) {
		failures++;
		if (fix)
			printf("     fix: %s\n", fix);
	}
}

/* A missing optional capability: the machine works without it; `detail`
 * says what it costs. Never a failure. */
static void warn_line(const char *check, const char *detail, const char *fix)
{
	printf("WARN %-22s %s\n", check, detail ? detail : "");
	warnings++;
	if (fix)
		printf("     fix: %s\n", fix);
}

static void machine_checks(loaded_plugin *machine)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	bool reachable = true;
	if (machine->machine.doctor) {
		/* The plugin's own checks: reachability, service identity and
		 * what else it needs (machine-service: acquisition capabilities,
		 * catalog, destruction check, machctl). */
		char *checks = NULL;
		if (machine->machine.doctor(machine->state, NULL, 0, &checks, &err) == RELAY_OK) {
			json_object *list = jsonx_parse_str(checks, NULL, 0);
			for (size_t i = 0;
			     json_object_is_type(list, json_type_array) && i < json_object_array_length(list);
			     i++) {
				json_object *c = json_object_array_get_idx(list, i);
				bool ok = false;
				jsonx_get_bool(c, "ok", &ok);
				const char *check = jsonx_get_str(c, "check");
				if (!ok && check &&
				    (strcmp(check, "service reachable") == 0 ||
				     strcmp(check, "service identity") == 0))
					reachable = false;
				/* "level": "warning" marks an optional capability
				 * (relay/machine.h doctor). */
				const char *level = jsonx_get_str(c, "level");
				if (!ok && level && strcmp(level, "warning") == 0)
					warn_line(check ? check : "backend check", jsonx_get_str(c, "detail"),
					          jsonx_get_str(c, "fix"));
				else
					line(ok, check ? check : "backend check", jsonx_get_str(c, "detail"),
					     jsonx_get_str(c, "fix"));
			}
			json_object_put(list);
		} else {
			line(false, "backend checks", err.message,
			     "rebuild the machine plugin; its doctor checks failed to run");
		}
		free(checks);
	} else if (machine->machine.health) {
		char *health = NULL;
		relay_status st = machine->machine.health(machine->state, NULL, 0, &health, &err);
		reachable = st == RELAY_OK;
		line(reachable, "backend", reachable ? "reachable and answering as expected" : err.message,
		     "start the machine service, or point MCP_RELAY_URL / the environment profile at it");
		free(health);
	}
	if (!reachable)
		return;
	char *images = NULL;
	memset(&err, 0, sizeof err);
	relay_status st = machine->machine.images(machine->state, NULL, 0, &images, &err);
	if (st == RELAY_OK) {
		json_object *inventory = jsonx_parse_str(images, NULL, 0);
		json_object *map = jsonx_get_obj(inventory, "images");
		char detail[512] = "";
		size_t used = 0;
		int available = 0;
		if (map) {
			json_object_object_foreach(map, key, entry)
			{
				bool base = false;
				jsonx_get_bool(entry, "base_available", &base);
				available += base;
				int n = snprintf(detail + used, sizeof detail - used, "%s%s%s",
				                 used ? ", " : "", key, base ? "" : " (base unavailable)");
				if (n > 0 && (size_t)n < sizeof detail - used)
					used += (size_t)n;
			}
		}
		line(available > 0, "images", used ? detail : "none offered",
		     "build or pull an image the backend can start");
		json_object_put(inventory);
	} else {
		line(false, "images", err.message, "check that the backend answers its image inventory");
	}
	free(images);
}

/* An empty transport slot: nothing could run a command or move a file in
 * a guest, so no acquired guest could be staged. A machine plugin that is
 * itself a transport fills the slot (profile/backends.c); the check only
 * names the machine plugin when it loaded. */
static void empty_transport_line(const relay_backends *backends)
{
	const loaded_plugin *machine = backends->plugins[SLOT_MACHINE];
	if (machine && (machine->descriptor.kinds & RELAY_KIND_TRANSPORT))
		return;
	char detail[256];
	if (machine)
		snprintf(
		    detail, sizeof detail,
		    "empty, and machine plugin %s provides no transport: nothing can run commands or move "
		    "files in its guests",
		    machine->descriptor.name);
	else
		snprintf(detail, sizeof detail, "empty: nothing can run commands or move files in a guest");
	line(false, "transport plugin", detail,
	     "name a transport in the environment profile (relayPlugins.transport, e.g. transfer-ssh), or "
	     "choose a machine plugin that also provides the transport kind");
}

int doctor_main(int argc, char **argv)
{
	(void)argv;
	if (argc != 1) {
		fprintf(stderr, "usage: mcp-relay doctor\n");
		return 2;
	}
	char errbuf[1024];
	relay_settings settings;
	if (settings_load(&settings, errbuf, sizeof errbuf) != 0) {
		line(false,
		     strncmp(errbuf, "VM_ENVIRONMENT_FILE", 19) == 0 ? "environment profile" : "settings",
		     errbuf, settings_problem_fix(errbuf));
		printf("Some checks failed.\n");
		fflush(stdout);
		return 2;
	}
	line(true, "settings", "every MCP_RELAY_* setting is valid", NULL);
	if (settings.environment) {
		char detail[1024];
		snprintf(detail, sizeof detail, "%s (%s), fingerprint %.8s, service %s",
		         environment_id(settings.environment), environment_file(settings.environment),
		         environment_fingerprint(settings.environment),
		         environment_service_url(settings.environment));
		line(true, "environment profile", detail, NULL);
	} else if (getenv("VM_ENVIRONMENT_FILE") == NULL) {
		line(true, "environment profile", "none selected (VM_ENVIRONMENT_FILE unset)", NULL);
	}
	printf("     project %s\n     state   %s\n     backend %s\n", settings.project, settings.session_dir,
	       settings.backend);
	relay_backends backends;
	backends_select(&backends, &settings);
	backends_load(&backends, &settings);
	for (int i = 0; i < SLOT_COUNT; i++) {
		if (backends.names[i] == NULL) {
			if (i == SLOT_TRANSPORT)
				empty_transport_line(&backends);
			continue;
		}
		char check[64], detail[512];
		snprintf(check, sizeof check, "%s plugin", backends_slot_name((backend_slot)i));
		if (backends.plugins[i]) {
			snprintf(detail, sizeof detail, "%s %s loaded", backends.plugins[i]->descriptor.name,
			         backends.plugins[i]->descriptor.version
			             ? backends.plugins[i]->descriptor.version
			             : "");
			line(true, check, detail, NULL);
		} else {
			line(
			    false, check, backends.load_errors[i],
			    backends.load_status[i] == RELAY_E_NOT_FOUND
			        ? "build the plugins (cmake --build build) or add their folder to "
			          "MCP_RELAY_PLUGIN_PATH"
			        : "the plugin is installed but refused to start: fix what the message names");
		}
	}
	char *receivers = loader_receivers_dir();
	char receiver[4096];
	snprintf(receiver, sizeof receiver, "%s/%s/receiver", receivers ? receivers : "",
	         RELAY_HOST_PLATFORM);
	FILE *probe = fopen(receiver, "rb");
	line(probe != NULL, "receiver", probe ? receiver : "no receiver build for this platform",
	     "cmake --build build --target receiver");
	if (probe)
		fclose(probe);
	free(receivers);
	if (backends.plugins[SLOT_MACHINE])
		machine_checks(backends.plugins[SLOT_MACHINE]);
	if (failures)
		printf("Some checks failed.\n");
	else if (warnings)
		printf("Ready, with %d warning%s: guests work; what each warning costs is said above.\n",
		       warnings, warnings == 1 ? "" : "s");
	else
		printf("Ready.\n");
	fflush(stdout);
	_exit(failures ? 1 : 0);
}
