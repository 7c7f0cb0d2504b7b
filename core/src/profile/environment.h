/*
 * profile/environment.h — the selected environment profile
 * (VM_ENVIRONMENT_FILE, machine-service.md §7): schemaVersion 2 with
 * machctlPath, validated before use, authoritative over individual settings.
 */
#ifndef RELAY_PROFILE_ENVIRONMENT_H
#define RELAY_PROFILE_ENVIRONMENT_H

#include <json-c/json.h>

#include "relay/status.h"

typedef struct relay_environment relay_environment;

/* Loads and validates the profile at `path` (relative to the working
 * folder). On failure err->message says what is wrong and how to fix it. */
relay_status environment_load(const char *path, relay_environment **out, relay_error *err);
void environment_free(relay_environment *env);

const char *environment_id(const relay_environment *env);
const char *environment_fingerprint(const relay_environment *env);
const char *environment_file(const relay_environment *env);       /* canonical profile path */
const char *environment_service_url(const relay_environment *env); /* canonical vmServiceUrl */
const char *environment_relay_state_dir(const relay_environment *env);
/* The identity object of §7.4 (a new reference). */
json_object *environment_identity(const relay_environment *env);
/* relayPlugins slot value ("machine", ...), or NULL when not named. */
const char *environment_plugin_for(const relay_environment *env, const char *slot);

#endif
