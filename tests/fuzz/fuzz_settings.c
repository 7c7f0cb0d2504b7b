/*
 * Every MCP_RELAY_* setting (profile/settings.c, spec/lifecycle.md §14), the
 * *_OPTIONS objects included: the input is lines NAME=VALUE; names the
 * relay reads are set, every other line is ignored. MCP_RELAY_PROJECT and
 * MCP_RELAY_STATE_DIR always point into the scratch folder (the load
 * creates the state root), and VM_ENVIRONMENT_FILE is left to the
 * environment_profile harness.
 *
 * Invariants: settings_load either succeeds with values inside their
 * ranges or refuses with a message naming the setting.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/settings.h"

#include "fuzz.h"

static const char *const names[] = {
    "MCP_RELAY_SESSION",
    "MCP_RELAY_BACKEND",
    "MCP_RELAY_URL",
    "MCP_RELAY_MACHINE_SERVICE_OPTIONS",
    "MCP_RELAY_LOCAL_OPTIONS",
    "MCP_RELAY_TRANSFER_SSH_OPTIONS",
    "MCP_RELAY_GUEST_NETWORK",
    "MCP_RELAY_ON_EXIT",
    "MCP_RELAY_CAPACITY_WAIT",
    "MCP_RELAY_MAX_GUESTS",
    "MCP_RELAY_SHUTDOWN_GRACE_MS",
    "MCP_RELAY_REGISTRY",
};
#define NAME_COUNT (sizeof names / sizeof names[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char state[4200];
	snprintf(state, sizeof state, "%s/state", fuzz_scratch_dir());
	setenv("MCP_RELAY_PROJECT", fuzz_scratch_dir(), 1);
	setenv("MCP_RELAY_STATE_DIR", state, 1);
	unsetenv("VM_ENVIRONMENT_FILE");
	for (size_t i = 0; i < NAME_COUNT; i++)
		unsetenv(names[i]);

	char *text = malloc(size + 1);
	if (text == NULL)
		fuzz_fail("no memory");
	memcpy(text, data, size);
	text[size] = '\0';
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		char *eq = strchr(line, '=');
		if (eq) {
			*eq = '\0';
			for (size_t i = 0; i < NAME_COUNT; i++)
				if (strcmp(line, names[i]) == 0)
					setenv(names[i], eq + 1, 1);
		}
		line = nl ? nl + 1 : NULL;
	}
	free(text);

	relay_settings s;
	memset(&s, 0, sizeof s);
	char errbuf[1024] = "";
	if (settings_load(&s, errbuf, sizeof errbuf) == 0) {
		if (s.max_guests < 1 || s.max_guests > 64 || s.capacity_wait_s < 0 ||
		    s.capacity_wait_s > 86400 || s.shutdown_grace_ms < 0 || s.shutdown_grace_ms > 3600000 ||
		    s.session_id == NULL || s.backend == NULL || strlen(s.session_key) != 32)
			fuzz_fail("accepted settings out of range (max_guests %d)", s.max_guests);
		settings_free(&s);
	} else {
		if (strncmp(errbuf, "MCP_RELAY_", 10) != 0 && strncmp(errbuf, "VM_", 3) != 0)
			fuzz_fail("a refusal names no setting: %s", errbuf);
	}
	return 0;
}
