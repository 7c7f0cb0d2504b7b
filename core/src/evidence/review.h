/*
 * evidence/review.h — the review derivation (spec spec/evidence.md §12,
 * docs/evidence-format.md "Review"), which the index.html viewer (§10),
 * OPENING.txt and the `mcp-relay review` command (cli/review.c) show.
 *
 * The derivation reads only the package: the journal, the records, the four
 * kinds of receipts, host/requests/, host/diagnostics/ and the files under
 * state/snapshots/. Nothing is cached in the package, so an old package is
 * always reviewed with today's rules. The same derivation gives the finish
 * result's verdicts (snapshots, execution, findings) and the viewer.
 *
 * All JSON values returned are json-c objects owned by the caller
 * (json_object_put).
 */
#ifndef RELAY_EVIDENCE_REVIEW_H
#define RELAY_EVIDENCE_REVIEW_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "evidence/journal.h"
#include "relay/status.h"
#include "util/strbuf.h"

#define EVIDENCE_REVIEW_VERSION 1

/* Identity used when the package has no manifest yet (at delivery the
 * viewer and OPENING.txt are written before manifest.json). Every string is
 * borrowed and may be NULL; a manifest, when present, wins. */
typedef struct evidence_identity {
	const char *package_id;   /* "pkg-<folder name>" */
	const char *task_id;      /* the purpose */
	const char *session_id;   /* else read from state/session.json or the journal */
	const char *guest;        /* guest name in its session */
	const char *image;        /* image name the guest was acquired from */
	const char *acquired_at;  /* timestamp of the acquire */
	const char *delivered_at; /* timestamp of delivery */
} evidence_identity;

typedef struct evidence_review_options {
	/* Run package verification (§11 items 1-7) before deriving. `mcp-relay
	 * review` does; delivery derives first (for the viewer) and verifies
	 * after the manifest is written. */
	bool verify;
	/* The project folder: ancestors from it down to the package must be real
	 * folders (§11 item 1). NULL: only the package root itself is checked. */
	const char *project_dir;
	/* derivedAt in Unix ms; 0 = the relay clock. */
	int64_t now_ms;
	/* Identity for a package without a manifest (may be NULL). */
	const evidence_identity *identity;
} evidence_review_options;

/* Derives the review data of the package at `package_dir` (borrowed) into
 * *review_out (owned by caller). A package that fails verification or whose
 * derivation meets a hard error (§12.3) still gives RELAY_OK and review data
 * with verification.ok false and the errors ("package verification failed:
 * <file>: <why>"), plus whatever could be derived. Other statuses: the
 * folder cannot be read (RELAY_E_NOT_FOUND / RELAY_E_IO), no memory. */
relay_status evidence_review_derive(const char *package_dir, const evidence_review_options *opts,
                                    json_object **review_out, relay_error *err);

/* verification.ok of review data (false when absent). */
bool evidence_review_verified(const json_object *review);

/* evidence_journal_load() is in journal.h; the `mcp-relay review` command
 * is cli/review.c. */

#endif
