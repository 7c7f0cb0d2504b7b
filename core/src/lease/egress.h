/*
 * lease/egress.h — a leased guest's egress (docs/egress.md): under
 * `allow` or `internet` the machine plugin's sockets in the guest's network
 * namespace (relay/machine.h egress_listeners) are served by an egress
 * proxy of the relay (egress/supervisor.h) from the moment the lease
 * arrives. Writes g->egress; guest_close stops it.
 */
#ifndef RELAY_LEASE_EGRESS_H
#define RELAY_LEASE_EGRESS_H

#include "session/manager_internal.h"

/* True when the guest's network needs the egress proxy. */
bool lease_egress_wanted(const char *network);

/* Refuses a machine plugin that cannot give egress (before any request):
 * 0, or -1 with the reason in msg. */
int lease_egress_check(const loaded_plugin *machine, const char *network, char *msg, size_t len);

/* Starts the guest's proxy; a failure is the guest's lastError (the guest
 * then has no way out at all: nothing listens on its 127.0.0.1:3128). Call
 * without the lock. */
void lease_egress_start(session_manager *m, guest *g, loaded_plugin *machine);

#endif
