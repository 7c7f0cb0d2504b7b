/*
 * evidence/merge.h — pulled state brought into a package (spec/evidence.md §7),
 * the free-space precheck before a pull (§6), and the records written
 * beside a package (§1: <package>.lifecycle.json,
 * <package>.delivery-error.json). No guest I/O.
 */
#ifndef RELAY_EVIDENCE_MERGE_H
#define RELAY_EVIDENCE_MERGE_H

#include <stdbool.h>
#include <stdint.h>

#include "relay/status.h"

/* ---- merge of pulled state (§7) -------------------------------------------- */

/* Merges an incoming pulled state tree into <package_dir>/state:
 *   - refused: overlapping roots, unsafe paths, links, hard links, special
 *     files, a sealed package (manifest.json present);
 *   - a snapshot whose incoming bytes differ from the same snapshot already in
 *     the package stops the merge before anything is touched;
 *   - the current state/ is set aside as
 *     <attempts_dir>/previous/attempt-NNNN/state (NNNN the next free number);
 *   - the incoming tree takes its place by rename (copy across volumes);
 *   - a snapshot the old state had and the incoming tree lacks is copied back.
 * `incoming_state` is the folder holding the pulled files (it is consumed);
 * `attempts_dir` is <evidence folder>.finalization-attempts (or
 * .reset-attempts). */
relay_status evidence_state_merge(const char *package_dir, const char *incoming_state,
                                  const char *attempts_dir, relay_error *err);

/* ---- space precheck (§6) --------------------------------------------------- */

typedef struct evidence_space {
	uint64_t needed_bytes;
	uint64_t free_bytes;  /* f_bavail * f_frsize of the volume */
	uint64_t short_bytes; /* needed - free when positive, else 0 */
} evidence_space;

/* Sets needed_bytes against the free space of the volume holding `path`.
 * RELAY_E_NO_SPACE on a shortfall with the message
 * "<operation> needs N bytes; F free; S short; <consequence>", e.g.
 * operation "finish", consequence "the guest is kept". */
relay_status evidence_space_check(const char *path, uint64_t needed_bytes, const char *operation,
                                  const char *consequence, evidence_space *out, relay_error *err);

/* ---- sibling records (§1) -------------------------------------------------- */

typedef struct evidence_lifecycle_record {
	const char *purpose;
	const char *vm; /* machine/lease name, may be NULL */
	bool released;
	const char *reason; /* "released" | "finished" | ... */
	bool failed;
	bool delivered;
	int64_t finished_at_ms;
} evidence_lifecycle_record;

/* Writes <package_dir>.lifecycle.json durably (0600). */
relay_status evidence_write_lifecycle(const char *package_dir, const evidence_lifecycle_record *rec,
                                      relay_error *err);
/* Writes <package_dir>.delivery-error.json {error, at} durably (0600). */
relay_status evidence_write_delivery_error(const char *package_dir, const char *error_text, int64_t at_ms,
                                           relay_error *err);

/* Copies src_rel (below src_root) to dst_rel (below dst_root), link-safely,
 * O_EXCL, 0600, folders 0700, synced; on failure nothing is left at
 * dst_rel. */
relay_status evidence_copy_rel(int src_root, const char *src_rel, int dst_root, const char *dst_rel,
                               relay_error *err);

#endif
