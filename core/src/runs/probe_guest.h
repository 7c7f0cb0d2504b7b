/*
 * runs/probe_guest.h — relay_probe with scope "guest" (spec/tools.md §3.2):
 * platform and receiver build, the runtimes of the four languages, the
 * image's catalog, and the snapshot verdict. Each check runs as
 * `/bin/sh -c '<command>'` with a 10 s limit; nothing is installed or
 * started, capture is never declared working. Writes no guest field (an
 * event `guest-readiness` only). On the guest's queue, without the lock.
 */
#ifndef RELAY_RUNS_PROBE_GUEST_H
#define RELAY_RUNS_PROBE_GUEST_H

#include "session/manager_internal.h"
#include "util/outcome.h"

/* 0 with o->facts the probe's structured content {scope, guest,
 * observedAt, platform, runtimes, catalog, snapshots, captureVerified,
 * staged}; a check that cannot run is a fact, not a failure. */
int probe_guest(session_manager *m, guest *g, relay_call *call, relay_outcome *o);

#endif
