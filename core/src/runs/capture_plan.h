/*
 * runs/capture_plan.h — what the capture plugin decides for a guest
 * (relay/capture.h, spec/guest.md §10.3, §11): the image's catalog applications
 * from the machine plugin, the plan context, and a checked plan.
 *
 * Used by relay_stage (the plan stored on the guest) and relay_probe with
 * scope "guest" (the verdict before staging). Call without the manager's
 * lock; the functions take it themselves to read the guest.
 */
#ifndef RELAY_RUNS_CAPTURE_PLAN_H
#define RELAY_RUNS_CAPTURE_PLAN_H

#include <json-c/json.h>
#include <stdbool.h>

#include "session/manager_internal.h"

/* Largest number of catalog applications a guest probe lists (spec/tools.md §5.4). */
#define CAPTURE_PROBE_MAX_APPLICATIONS 200

/* The image's catalog applications as [{id, name, version}] (new
 * reference, never NULL unless out of memory): the machine plugin's
 * catalog entry for the guest's image, or [] when the plugin has no
 * catalog, does not list the image, or fails. `diag` (may be NULL) receives
 * why the list is empty when the catalog could not be read. */
json_object *capture_catalog_applications(session_manager *m, guest *g, relay_call *call, char *diag,
                                          size_t diag_len);

/* The capture plugin's name, or NULL when no capture plugin is loaded. */
const char *capture_plugin_name(session_manager *m);

/* Asks the capture plugin for a plan (relay/capture.h) with the context
 * {lease, applications, platform, guestRoot, cuaDriver}. `applications`
 * (borrowed), `platform` and `cua_driver` may be NULL. Returns a checked
 * plan (new reference) {enabled, because, capture, stage, cuaDriver}; with
 * no capture plugin, or a plugin failure, a disabled plan saying why.
 * Never NULL unless out of memory. A plan breaking the ABI's rules (capture
 * not null exactly when enabled; argv with exactly one "@OUT@"; stage
 * entries with an absolute local file and a safe relative remote) is
 * turned into a disabled plan naming the rule. */
json_object *capture_plan_for(session_manager *m, guest *g, json_object *applications, const char *platform,
                              const char *cua_driver);

#endif
