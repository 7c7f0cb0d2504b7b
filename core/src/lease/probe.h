/*
 * lease/probe.h — relay_probe with scope "host" (spec/tools.md §3.2): what an
 * acquisition would meet. Writes no field of struct guest.
 */
#ifndef RELAY_LEASE_PROBE_H
#define RELAY_LEASE_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "session/manager_internal.h"

/* Reads the host facts, the machine backend's health and its image
 * inventory side by side (5 s at most), lists the guests held, and keeps
 * the result as a probe record under <session>/probes/. A fact that
 * cannot be read is reported with a diagnostic; the probe does not fail
 * for it. 0 with the relay_probe result in o->facts (scope, observedAt,
 * local, backend, environment, guests, maxGuests, capabilities),
 * *reachable_out and *held_out (open guests); -1 only when out of memory.
 * Waits for the backends; call on a detached thread or a guest's queue. */
int lease_probe_host(session_manager *m, relay_outcome *o, bool *reachable_out, size_t *held_out);

#endif
