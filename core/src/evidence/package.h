/*
 * evidence/package.h — writing, verifying and maintaining an evidence
 * package (spec spec/evidence.md §1-§4, §6, §7, §9, §11; docs/evidence-format.md).
 *
 * A package is <project>/relay-evidence/<purpose>/ with state/, host/,
 * extractions/, OPENING.txt, index.html and manifest.json. These functions
 * need no guest and no running manager: the manager calls them at finish,
 * release and recording reset.
 *
 * Units: sizes in bytes, times as Unix milliseconds or ISO 8601 UTC strings
 * with milliseconds. Strings passed in are borrowed; JSON and strings handed
 * out are owned by the caller (json_object_put / free).
 */
#ifndef RELAY_EVIDENCE_PACKAGE_H
#define RELAY_EVIDENCE_PACKAGE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "evidence/fswalk.h"
#include "evidence/merge.h"
#include "evidence/review.h"
#include "evidence/verify.h"
#include "relay/status.h"

/* ---- delivery -------------------------------------------------------------- */

typedef struct evidence_delivery_options {
	const char *project_dir; /* the resolved project folder (ancestor checks); may be NULL */
	evidence_identity identity;
	/* packageId defaults to "pkg-<folder name>", taskId to the folder name,
	 * sessionId to state/session.json. */
	const char *relay_version; /* NULL = RELAY_VERSION */
	int64_t now_ms;            /* createdAt; 0 = the relay clock */
	/* Worker threads for hashing the manifest; 0 = 2. */
	unsigned hash_threads;
} evidence_delivery_options;

typedef struct evidence_delivery_result {
	bool delivered;       /* the package has a manifest written by this or an earlier call */
	bool verified;        /* it passed verification */
	bool reverified_only; /* an existing manifest of the same identity was only re-verified */
	json_object *review;  /* review data after verification (owned; may be NULL on early failure) */
	/* The verdicts of the review, for the finish result (borrowed from review). */
	const char *completeness; /* "complete" | "incomplete" */
	const char *execution;    /* "passed" | "failed" | "uncertain" */
} evidence_delivery_result;

/* Delivers the package at `package_dir` (§9.1 step 7):
 *   1. an existing manifest.json with the same identity is only re-verified;
 *      one with another identity is refused (RELAY_E_REFUSED, "sealed");
 *   2. files under host/steps/<executionId>/ that the package lacks are copied
 *      to their place (an identical copy is fine, a differing one stops the
 *      delivery with RELAY_E_INTEGRITY), then host/steps/ is removed;
 *   3. stale derived files of an earlier failed attempt (OPENING.txt,
 *      index.html without a manifest) are replaced;
 *   4. the review is derived; OPENING.txt, index.html, then manifest.json are
 *      written O_EXCL (0600);
 *   5. the package is verified (§11).
 * On any failure after step 3 only the derived files this call created are
 * removed (never evidence) and the error says what failed
 * ("package verification failed: <file>: <why>" for verification).
 * `result` is filled in every case (free with evidence_delivery_result_free). */
relay_status evidence_package_deliver(const char *package_dir, const evidence_delivery_options *opts,
                                      evidence_delivery_result *result, relay_error *err);
void evidence_delivery_result_free(evidence_delivery_result *result);

/* Removes the derived files of a delivery attempt (OPENING.txt, index.html,
 * manifest.json) — for a cancelled finish. Evidence is never touched. */
relay_status evidence_package_remove_derived(const char *package_dir, relay_error *err);

/* ---- manifest -------------------------------------------------------------- */

/* Builds the manifest object of §3 for the package (every file but
 * manifest.json, hashed with `threads` workers, 0 = 2). Snapshot entries take
 * their fields from the journal; a snapshot original without a
 * snapshot-captured line is RELAY_E_INTEGRITY. */
relay_status evidence_manifest_build(const char *package_dir, const evidence_delivery_options *opts,
                                     json_object **manifest_out, relay_error *err);

/* ---- verification ---------------------------------------------------------- */

/* Full verification (§11 items 1-8): the file checks plus a derivation
 * without a hard error. RELAY_OK when it passes; RELAY_E_INTEGRITY with the
 * first failure in err otherwise (every failure in *errors_out when given,
 * owned by caller: fw_strlist_free). */
relay_status evidence_package_verify(const char *package_dir, const char *project_dir, fw_strlist *errors_out,
                                     relay_error *err);

/* ---- OPENING.txt ----------------------------------------------------------- */

/* Renders OPENING.txt (§4) from review data and identity into `out`. */
void evidence_render_opening(const json_object *review, const evidence_identity *identity,
                             const char *relay_version, strbuf *out);

#endif
