/* A leased guest's egress proxy (see lease/egress.h). */
#include "lease/egress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress/supervisor.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/strbuf.h"

bool lease_egress_wanted(const char *network)
{
	return network && (strcmp(network, "allow") == 0 || strcmp(network, "internet") == 0);
}

int lease_egress_check(const loaded_plugin *machine, const char *network, char *msg, size_t len)
{
	if (!lease_egress_wanted(network) || machine->machine.egress_listeners != NULL)
		return 0;
	snprintf(msg, len,
	         "the machine plugin %s cannot give a guest network %s (it has no egress_listeners, ABI "
	         "1.3): use MCP_RELAY_GUEST_NETWORK=nat or a backend that serves the relay's egress proxy "
	         "(docs/egress.md)",
	         machine->descriptor.name, network);
	return -1;
}

void lease_egress_start(session_manager *m, guest *g, loaded_plugin *machine)
{
	session_lock(m);
	bool wanted = lease_egress_wanted(g->network) && g->egress == NULL && g->lease_document != NULL;
	char *lease = wanted ? jsonx_to_string(g->lease_document, 0) : NULL;
	char *mode = wanted ? strdup(g->network) : NULL;
	strbuf log_path = STRBUF_INIT;
	strbuf_printf(&log_path, "%s/network.jsonl", g->dir);
	session_unlock(m);
	if (!wanted || machine->machine.egress_listeners == NULL)
		goto cleanup;
	relay_error err;
	memset(&err, 0, sizeof err);
	int fds[3] = {-1, -1, -1};
	relay_status st = lease == NULL || mode == NULL || !strbuf_ok(&log_path)
	                      ? relay_error_set(&err, RELAY_E_NO_MEMORY, 0, "out of memory")
	                      : machine->machine.egress_listeners(machine->state, lease, 0, fds, &err);
	egress_proxy *proxy = NULL;
	if (st == RELAY_OK)
		st = egress_proxy_start(mode, m->settings->egress_allow, strbuf_str(&log_path), fds, &proxy,
		                        &err);
	if (st != RELAY_OK) {
		log_warning("guest %s: no egress proxy: %s", g->name, err.message);
		guest_set_last_error(m, g,
		                     "the egress proxy could not start: %s; the guest has no way out (every "
		                     "connection fails at once); release it and acquire again",
		                     err.message);
		goto cleanup;
	}
	session_lock(m);
	g->egress = proxy;
	session_unlock(m);
cleanup:
	free(lease);
	free(mode);
	strbuf_free(&log_path);
}
