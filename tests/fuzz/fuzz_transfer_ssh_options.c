/*
 * transfer-ssh's options (MCP_RELAY_TRANSFER_SSH_OPTIONS as the core hands
 * them to the plugin, docs/transfer-ssh.md): the input is the "options"
 * value of the init config, parsed by ssh_plugin_create.
 *
 * Invariants: the options are accepted (and the plugin made, its socket
 * folder inside the state folder) or refused with a message naming
 * MCP_RELAY_TRANSFER_SSH_OPTIONS or the config.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader.h"
#include "ssh_conn.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const relay_host *host = loader_host_table();
	char prefix[4400];
	snprintf(prefix, sizeof prefix, "{\"stateDir\":\"%s/ssh\",\"options\":", fuzz_scratch_dir());
	char *config = fuzz_wrap(prefix, data, size, "}");
	ssh_plugin *plugin = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = ssh_plugin_create(host, config, &plugin, &err);
	if (st == RELAY_OK) {
		if (plugin == NULL)
			fuzz_fail("accepted options gave no plugin");
		ssh_plugin_destroy(plugin);
	} else {
		if (plugin != NULL)
			fuzz_fail("refused options gave a plugin");
		if (strstr(err.message, "transfer-ssh") == NULL)
			fuzz_fail("a refusal does not name transfer-ssh: %s", err.message);
	}
	free(config);
	return 0;
}
