/*
 * lease/reconcile.h — taking back the guests of an earlier process with
 * the same session identity (spec/lifecycle.md §8).
 *
 * At creation the manager scans <session>/guests/: closed records are listed
 * as closed; every other guest is listed in phase reconciling and a
 * reconcile job is queued first in its queue, so calls naming it wait for
 * it. The job waits for the session lock (startup), takes the guest's owner
 * lock, re-reads the record, checks its binding before any backend
 * operation, looks the lease up (by purpose when the acquisition was in
 * flight), reattaches the recording through recording_reattach() and
 * resumes renewal at once. Nothing is replayed and nothing is acquired.
 */
#ifndef RELAY_LEASE_RECONCILE_H
#define RELAY_LEASE_RECONCILE_H

#include "session/manager_internal.h"

/* Migrates the one ownership record of a relay from before several guests
 * (<session>/lease.json) into guests/<task>-<n>/ (§8 step 2). Call with the
 * session lock held and without the manager's lock. */
void lease_reconcile_migrate_legacy(session_manager *m);

/* Adds every guest under guests/ the manager does not know yet, and queues
 * a reconcile job for each one that is not closed. Without the lock. */
void lease_reconcile_scan(session_manager *m);

#endif
