/*
 * evidence/verify.h — the file checks of a package (spec spec/evidence.md §11
 * items 1-7): folders, file kinds, strict paths, the manifest's shape and
 * every file's hash and size, with the parallel hashing the manifest uses
 * and the snapshot lines of the journal both the manifest and the checks
 * read. Below the review derivation (review.h), which runs these checks,
 * and below delivery (package.h), which writes what they check.
 */
#ifndef RELAY_EVIDENCE_VERIFY_H
#define RELAY_EVIDENCE_VERIFY_H

#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "evidence/fswalk.h"
#include "relay/status.h"

#define EVIDENCE_MANIFEST_VERSION 1

/* One file's hash and size. */
typedef struct evidence_file_hash {
	const char *path; /* relative to the root; borrowed */
	uint64_t bytes;
	char sha256[65];
	relay_status status; /* RELAY_OK, or why it could not be hashed */
	char error[256];
} evidence_file_hash;

/* Hashes `count` files under root_dir with `threads` worker threads (0 = 2),
 * each opened link-safely, read in large blocks with OpenSSL's SHA-256.
 * Per-file failures are reported in items[i].status; the return value is
 * RELAY_OK unless the pool itself failed. */
relay_status evidence_hash_files(const char *root_dir, evidence_file_hash *items, size_t count,
                                 unsigned threads, relay_error *err);

/* §11 items 1-7: folders, file kinds, strict paths, the manifest's shape,
 * every listed file's size and SHA-256, nothing unmanifested, attachments and
 * snapshots equal to the files present and agreeing with the journal. Each
 * failure is appended to `errors` as "package verification failed: <file>:
 * <why>". *manifest_out (may be NULL) receives the parsed manifest when it
 * parses. Returns RELAY_OK when the checks ran (read `errors`), another status
 * when they could not (out of memory). */
relay_status evidence_package_verify_files(const char *package_dir, const char *project_dir,
                                           fw_strlist *errors, json_object **manifest_out, relay_error *err);

/* A hard failure of verification as verification and review word it:
 * "package verification failed: " and the formatted rest (malloc'd), NULL
 * when out of memory. */
char *evidence_verify_failure(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* True when `rel` obeys §11 item 3: no backslash, control character, ':',
 * '#' or '?', no empty, "." or ".." segment, not absolute. Also the early
 * check of §8.2 for guest file names. */
bool evidence_package_path_ok(const char *rel);

/* Map fileName -> snapshot-captured line of the journal (references
 * taken), plus the action-start plans for groupId (a new object). */
json_object *evidence_snapshot_lines(json_object *journal, const char *session_id);

/* The manifest entry's extra snapshot fields, from its snapshot-captured
 * line. */
void evidence_snapshot_fields(json_object *entry, json_object *line);

/* True for a path under state/snapshots/. */
bool evidence_is_snapshot_path(const char *path);

#endif
