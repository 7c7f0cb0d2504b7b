/*
 * delivery/network_evidence.h — network.json at the package root
 * (docs/evidence-format.md, docs/egress.md): the guest's egress policy and
 * every connection its egress proxy saw, merged from <guest dir>/network.jsonl.
 */
#ifndef RELAY_DELIVERY_NETWORK_EVIDENCE_H
#define RELAY_DELIVERY_NETWORK_EVIDENCE_H

#include "session/manager_internal.h"

/* Writes <evidence>/network.json for a guest under allow or internet (a
 * guest under nat has none). Before the manifest, so it is listed there. */
relay_status network_evidence_write(session_manager *m, guest *g, const char *evidence, relay_error *err);

#endif
