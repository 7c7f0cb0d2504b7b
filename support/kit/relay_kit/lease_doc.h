/*
 * relay_kit/lease_doc.h — the lease document of relay/machine.h as every
 * machine plugin builds it from its lease record: vm, purpose, image,
 * lease_id, state, expiresAtMs, console, display, ssh (null) and the
 * record itself without the console's private ledger ("consolePrivate"
 * never leaves the plugin). The plugin adds its own member after. And the
 * spec's refusal of a renewal once teardown is committed.
 */
#ifndef RELAY_KIT_LEASE_DOC_H
#define RELAY_KIT_LEASE_DOC_H

#include <json-c/json.h>
#include <stdint.h>

#include "relay/host.h"

/* A deep copy of obj[key], or NULL when absent (or out of memory). */
json_object *rk_json_copy(json_object *obj, const char *key);
/* The document of `record` with `state` as found (NULL: "unknown"). */
json_object *rk_lease_document(json_object *record, const char *state);

/* Renews the record: expiresAtMs = now_ms + ttl_ms, but never past its
 * deadlineMs (when set); renewedAtMs = now_ms. */
void rk_lease_renew_record(json_object *record, int64_t now_ms, uint64_t ttl_ms);
/* RELAY_OK when the record's state is "running"; else RELAY_E_REFUSED
 * "<vm> is <state>; renewal cannot cancel committed teardown". */
relay_status rk_lease_check_renewable(const relay_host *host, json_object *record, relay_error *err);

#endif
