/*
 * runs/run_network.h — a run's connections through the guest's egress
 * proxy (docs/egress.md): the proxy is told the run's execution id while it
 * runs, and the run's result carries what it connected to.
 */
#ifndef RELAY_RUNS_RUN_NETWORK_H
#define RELAY_RUNS_RUN_NETWORK_H

#include <json-c/json.h>

#include "session/manager_internal.h"

/* Tells the guest's proxy (if any) that `execution_id` runs (NULL: none). */
void run_network_step(session_manager *m, guest *g, const char *execution_id);

/* The run's "network" facts: {"mode", "allowed", "refused", "refusedDestinations":
 * ["name:port", ...], "lookupsRefused", "proxyStopped": "<detail>"|null,
 * "cut"}, or NULL under nat (a new reference). */
json_object *run_network_facts(session_manager *m, guest *g, const char *execution_id);

#endif
