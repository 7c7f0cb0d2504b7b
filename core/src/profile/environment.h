/*
 * profile/environment.h — the selected environment profile
 * (VM_ENVIRONMENT_FILE, spec/machine-service.md §7): schemaVersion 2 with
 * machctlPath, validated before use, authoritative over individual
 * settings; its fingerprint, identity and the exported bundle that
 * subprocesses receive.
 *
 * Loading refuses, with the fix in the message: a blank selection, an
 * unreadable or oversized file, invalid UTF-8, anything but one JSON object,
 * duplicate keys (json-c keeps the last one silently, so they are found by
 * scanning the text), a version-1 profile or one naming vmctlPath (checked
 * first), unknown or missing keys, and every value rule of §7.3. An invalid
 * selection never falls back to the unselected defaults: the caller stops.
 */
#ifndef RELAY_PROFILE_ENVIRONMENT_H
#define RELAY_PROFILE_ENVIRONMENT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "relay/status.h"

typedef struct relay_environment relay_environment;

/* Loads and validates the profile at `path` (relative to the working
 * folder). On failure err->message says what is wrong and how to fix it. */
relay_status environment_load(const char *path, relay_environment **out, relay_error *err);
void environment_free(relay_environment *env);

const char *environment_id(const relay_environment *env);
const char *environment_fingerprint(const relay_environment *env);
const char *environment_file(const relay_environment *env);        /* canonical profile path */
const char *environment_service_url(const relay_environment *env); /* canonical vmServiceUrl */
const char *environment_relay_state_dir(const relay_environment *env);
/* A canonical value of the ten keys ("tartPath", "machctlPath", ...), or
 * NULL for an unknown key. */
const char *environment_value(const relay_environment *env, const char *key);
/* The identity object of §7.4 (a new reference). */
json_object *environment_identity(const relay_environment *env);
/* The canonical profile: the ten keys with canonical values (a new
 * reference). Its compact serialisation, keys sorted, is what the
 * fingerprint hashes. */
json_object *environment_canonical(const relay_environment *env);
/* The exported bundle of §7.7 as {"VM_ENVIRONMENT_FILE": ..., ...} (a new
 * reference): the variables subprocesses (Tart, OpenSSH, machctl) get. */
json_object *environment_bundle(const relay_environment *env);
/* relayNetwork's guestNetwork and egressAllow (validated), or NULL when
 * the profile does not name them (docs/egress.md). */
const char *environment_guest_network(const relay_environment *env);
const char *environment_egress_allow(const relay_environment *env);
/* relayPlugins slot value ("machine", ...), or NULL when not named. */
const char *environment_plugin_for(const relay_environment *env, const char *slot);

/* True when the JSON text holds an object with a repeated key (at any
 * depth; keys compared after unescaping). The text must be valid JSON. */
bool environment_json_has_duplicate_keys(const char *text, size_t len);

#endif
