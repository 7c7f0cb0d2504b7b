/*
 * delivery/extraction.h — the verified pull of a declared output
 * (spec/evidence.md §8.2, spec/tools.md §3.8), shared by relay_extract, relay_finish
 * and the packaging step of relay_release.
 *
 * One pull:
 *   1. `receiver scan` of R/workspace/<path> (R/workspace for the full
 *      workspace): symbolic links anywhere in the tree or above it up to the
 *      workspace, and special files, stop it; a name that breaks the package
 *      path rules is refused early ("file name not allowed in an evidence
 *      package");
 *   2. the free-space check of the evidence volume (space-shortfall);
 *   3. a fresh destination <evidence>/extractions/<name>/<uuid>/ (0700);
 *   4. a file lands as <uuid>/<file name>; a directory's files the host
 *      already holds with the same SHA-256 and size (an earlier extraction
 *      of the same output) are copied and re-hashed, the rest come in one
 *      evidence archive, or one by one when the archive fails
 *      (`archive-fallback`);
 *   5. the host files must equal the guest's inventory one for one, and a
 *      second scan must equal the first ("source changed during
 *      extraction");
 *   6. host/extractions/<uuid>.json {extractions: [entry]} and an `extract`
 *      event.
 * Any failure removes the destination folder of that pull.
 *
 * Call on the guest's queue, without the manager's lock.
 */
#ifndef RELAY_DELIVERY_EXTRACTION_H
#define RELAY_DELIVERY_EXTRACTION_H

#include <json-c/json.h>
#include <stdbool.h>

#include "guestio/guest_io.h"
#include "util/outcome.h"

/* How a failed pull is classified for the tool answer. */
typedef enum extraction_failure {
	EXTRACTION_OK = 0,
	EXTRACTION_MISSING,   /* nothing at the path (or a parent is missing): output-missing / incomplete */
	EXTRACTION_SPACE,     /* space-shortfall */
	EXTRACTION_INTEGRITY, /* integrity-failed: checksum, inventory, changed source, unsafe tree */
	EXTRACTION_TRANSFER,  /* transfer-failed: a transport or receiver failure */
	EXTRACTION_CANCELLED, /* the call was cancelled */
} extraction_failure;

/* The tool error code of a failure ("output-missing", ...). */
const char *extraction_failure_code(extraction_failure failure);

/* Pulls one declared output `name` at workspace-relative `path` (NULL or ""
 * with `full_workspace`: the whole workspace, name "full-workspace") into
 * the guest's current evidence folder. `operation` names the caller in the
 * space message ("extract", "finish", "release"). On success *entry_out is
 * {name, path, kind, destination, files, bytes, facts: [{path, sha256,
 * bytes}]} (facts relative to the destination). On failure returns the
 * class and fills `err` with what went wrong. */
extraction_failure extraction_pull(guest_io *io, const char *name, const char *path, bool full_workspace,
                                   const char *operation, json_object **entry_out, relay_error *err);

/* The declared outputs of the guest ([{name, path}], a new reference) and
 * whether the full workspace is declared. */
json_object *extraction_declarations(session_manager *m, guest *g, bool *full_workspace_out);

/* The declaration named `name` in `decl` (as extraction_declarations()
 * returns it), borrowed, or NULL. */
json_object *extraction_declaration(const json_object *decl, const char *name);

/* relay_extract (spec/tools.md §3.8): pulls the declared outputs `names` (an
 * array of names, each declared in `decl`: the handler refused the others)
 * in the order given through one transport session, with progress on
 * `call`. 0 with the outcome's facts {guest, extractions: [entry, ...]};
 * -1 with the code ("output-missing", "transfer-failed", ...), the sentence
 * and the facts {guest, extractions} of the outputs pulled before the
 * failure (they stay on disk); a failed pull also sets lastError and
 * records an operation-failed event. The guest is kept in every case. */
int extraction_pull_named(session_manager *m, guest *g, const json_object *names, const json_object *decl,
                          relay_call *call, relay_outcome *o);

/* Pulls every declaration for finish (`strict_other` true) or release
 * (false), in declaration order, then the full workspace when declared:
 *   - an output whose path (or a parent) does not exist becomes an
 *     `extraction-incomplete` event and an entry {name, path, error} of
 *     *incomplete_out;
 *   - with strict_other, any other failure stops and is returned (the
 *     full-workspace pull is always strict at finish); without it, the
 *     failure is recorded as `extraction-incomplete` (or
 *     `workspace-incomplete`) and in *incomplete_out, and the pulls go on.
 * *done_out receives [{name, destination, files, bytes}] of what was
 * pulled. Both arrays are new references, filled in every case. */
extraction_failure extraction_pull_all(guest_io *io, bool strict_other, const char *operation,
                                       json_object **done_out, json_object **incomplete_out,
                                       relay_error *err);

#endif
