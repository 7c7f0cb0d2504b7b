/*
 * ms_record.h — lease records of machine-service (spec/machine-service.md
 * §4) as the core's lease documents (relay/machine.h). The lease
 * operations that use them (ms_lease.c) are declared in ms_plugin.h.
 */
#ifndef MS_RECORD_H
#define MS_RECORD_H

#include <json-c/json.h>

#include "ms_plugin.h"

/* What an operation needs from a lease document the core hands back. */
typedef struct ms_lease_ref {
	char vm[256];
	char purpose[128];
	char lease_id[128]; /* "" when the lease has none */
	json_object *doc;   /* the parsed document (owned) */
} ms_lease_ref;

/* Parses the core's lease document. RELAY_E_INVALID_ARGUMENT when it lacks
 * a valid machine name. Free with ms_lease_ref_free. */
relay_status ms_lease_ref_parse(ms_state *s, const char *lease_json, ms_lease_ref *ref, relay_error *err);
void ms_lease_ref_free(ms_lease_ref *ref);

/* The lease document of a service record (borrowed): vm, purpose, image,
 * lease_id, state, expiresAtMs, console, display, ssh, imageKind, record.
 * A new reference, or NULL with the reason in `why` when the record lacks
 * a name, purpose or image. */
json_object *ms_lease_document(ms_state *s, json_object *record, char *why, size_t why_len);

/* The machine name of a record (nameField, falling back to the other of
 * "vm" / "machine"), borrowed, or NULL. */
const char *ms_record_name(const ms_state *s, const json_object *record);

/* §3.5: the checks of an acquire answer `r`. NULL when sound, else the
 * rule it breaks (a static string). */
const char *ms_record_problem(const ms_state *s, const json_object *r);

#endif
