/*
 * ssh_facts.h — the {path, bytes, sha256} lists transfer-ssh computes on
 * both sides of a transfer, the parser of the guest's facts block, the
 * comparison and the JSON form of relay/transport.h.
 *
 * The guest's facts block (ssh_scripts.c, relay_facts) is:
 *     \036relay-hashes
 *     <sha256sum / shasum -a 256 lines: "<64 hex>  ./<path>">
 *     \036relay-sizes
 *     <wc -c lines: "<bytes> ./<path>", plus "<n> total" lines, ignored>
 *     \036relay-done
 * or the single line "\036relay-nohash" when the guest has neither tool.
 */
#ifndef TRANSFER_SSH_FACTS_H
#define TRANSFER_SSH_FACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/host.h"

typedef struct ssh_fact {
	char *path; /* relative to the transferred root, "" for a single file; owned */
	uint64_t bytes;
	char sha256[65]; /* lowercase hex */
} ssh_fact;

typedef struct ssh_facts {
	ssh_fact *items; /* owned */
	size_t count;
	size_t capacity;
	bool failed; /* an allocation failed */
} ssh_facts;

#define SSH_FACTS_INIT                                                                                       \
	{                                                                                                    \
		NULL, 0, 0, false                                                                            \
	}

void ssh_facts_free(ssh_facts *facts);
/* Adds a copy of `path`. Returns false (and sets failed) when out of memory. */
bool ssh_facts_add(ssh_facts *facts, const char *path, uint64_t bytes, const char sha256_hex[65]);
/* Sorts by path in byte order. */
void ssh_facts_sort(ssh_facts *facts);

/* Parses a guest facts block out of `text` (other lines before it, such as
 * a login shell's chatter, are skipped). `single`: the block must hold
 * exactly one file, recorded with path "". *no_hash_out is set when the
 * guest reported it has no SHA-256 tool (then `out` stays empty). The
 * result is sorted. RELAY_E_PROTOCOL when the block is malformed. */
relay_status ssh_facts_parse(const relay_host *host, const char *text, size_t len, bool single,
                             ssh_facts *out, bool *no_hash_out, relay_error *err);

/* Compares two sorted lists. RELAY_E_INTEGRITY naming the first path that
 * is missing, extra or different, with `what` saying which transfer. */
relay_status ssh_facts_compare(const relay_host *host, const char *what, const ssh_facts *sent,
                               const ssh_facts *arrived, relay_error *err);

/* The JSON array of relay/transport.h (sorted input), allocated with
 * host->alloc; NULL when out of memory. */
char *ssh_facts_json(const relay_host *host, const ssh_facts *facts);
/* A transfer's answer: *facts_json_out (may be NULL: not wanted) the JSON of
 * `facts`, or left NULL when the guest could not hash (no_hash).
 * RELAY_E_NO_MEMORY when out of memory. */
relay_status ssh_facts_answer(const relay_host *host, const ssh_facts *facts, bool no_hash,
                              char **facts_json_out, relay_error *err);

#endif
