/*
 * evidence/journal.h — reading a package's files as hostile input: whole
 * files below a folder's descriptor without following links, their
 * SHA-256, JSON a guest wrote (repaired to UTF-8 when it is not), and the
 * journal state/journal/events.jsonl. Used by the file checks (verify.h)
 * and the review derivation (review.h), which both sit above it.
 */
#ifndef RELAY_EVIDENCE_JOURNAL_H
#define RELAY_EVIDENCE_JOURNAL_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/status.h"

/* Reads a whole file below root_fd (link-safe) into a NUL-terminated
 * buffer (*out malloc'd, *len_out its length without the NUL) of at most
 * `max` bytes. `err` may be NULL. */
relay_status evidence_read_rel(int root_fd, const char *rel, size_t max, char **out, size_t *len_out,
                               relay_error *err);

/* The SHA-256 (hex) and size of a file below root_fd (link-safe). */
relay_status evidence_hash_rel(int root_fd, const char *rel, char hex[65], uint64_t *bytes, relay_error *err);

/* JSON a guest wrote (a journal line, a record, a receipt). One with bytes
 * that are not UTF-8 (an earlier receiver copied a capture program's
 * stderr raw) is read with U+FFFD in their place, so the package is still
 * reviewed and delivered rather than lost; the file, which the manifest
 * hashes, keeps its original bytes. NULL when it is not JSON either way. */
json_object *evidence_parse_guest_json(const char *text, size_t len, char *why, size_t why_len);

/* Reads and parses state/journal/events.jsonl of the package (borrowed path)
 * into a JSON array of line objects (owned by caller). A line that is not a
 * JSON object, or an unterminated last line, leaves *lines_out NULL and gives
 * RELAY_E_INTEGRITY with the line number in err.
 * A missing journal is RELAY_E_NOT_FOUND. */
relay_status evidence_journal_load(const char *package_dir, json_object **lines_out, relay_error *err);

#endif
