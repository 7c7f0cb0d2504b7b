/*
 * manager/lifecycle.h — leases over time (lifecycle.md §5-§11): the binding
 * a lease is recorded with, the task registry, lease renewal, waiting in
 * relay time, probe records copied into new evidence, and the end of the
 * session.
 */
#ifndef RELAY_MANAGER_LIFECYCLE_H
#define RELAY_MANAGER_LIFECYCLE_H

#include "manager/manager_internal.h"

/* {machine, endpoint, store, environmentFingerprint} for new leases. */
json_object *lifecycle_binding_json(manager *m);

/* Adds the guest's registry row (lifecycle.md §10); NULL on success, or a
 * registry-conflict result. Call without the lock. */
tool_result *lifecycle_registry_add(manager *m, guest *g);
/* Removes the guest's row if it is ours; logs failures. */
void lifecycle_registry_remove(manager *m, guest *g);

/* Copies the session's probe records into the guest's evidence. */
void lifecycle_copy_probes(manager *m, guest *g);

/* Starts (or resumes) renewal of the guest's lease. */
void lifecycle_renewal_start(manager *m, guest *g);
/* Stops renewal of the guest's lease for good (release begins). */
void lifecycle_renewal_stop(manager *m, guest *g);

/* Waits until relay time reaches deadline_ms. Returns 0 when reached, -1
 * when the call was cancelled or the session began to end. */
int lifecycle_wait_until(manager *m, relay_call *call, int64_t deadline_ms);

/* The release path of relay_release (tools.md §3.10 steps 2-7) for one
 * guest. With `direct` (the end of the session after the grace period):
 * no packaging, one destroy request and one check. Returns the result
 * (success or error). Call from the guest's queue or the shutdown path. */
tool_result *lifecycle_release(manager *m, guest *g, relay_call *call, bool direct);

#endif
