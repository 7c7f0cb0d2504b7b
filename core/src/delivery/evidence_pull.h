/*
 * delivery/evidence_pull.h — verified pulls of guest evidence on top of
 * guest_io.h: files brought home as evidence archives written by
 * `receiver archive` and read on the host as hostile input, single files
 * re-hashed against the guest's scan, and the checks shared by the state
 * pull and extractions (spec/evidence.md §5.3-§5.4, §5.6 items 7-9, §8.2).
 *
 * Everything pulled is hostile input: an archive's size and SHA-256 must
 * equal the receiver's frame, it is read by evidence_archive_extract (every
 * refusal of §5.4; nothing is written outside the destination, and a
 * refused archive leaves nothing behind), and single files are re-hashed on
 * the host against the guest's facts.
 *
 * Failures fill `err`. epull_transient() says whether a failure is worth
 * another attempt (spec/images.md §6.2): a transport failure or timeout, not a
 * refused archive, a checksum, an unsafe path or a lack of space.
 *
 * Call without the manager's lock, on the thread that began the guest_io.
 * Strings are borrowed; JSON handed out is owned by the caller.
 */
#ifndef RELAY_DELIVERY_EVIDENCE_PULL_H
#define RELAY_DELIVERY_EVIDENCE_PULL_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "evidence/archive.h"
#include "guestio/guest_io.h"

/* Path bytes (one extra per path) of one `receiver archive` command. */
#define EPULL_ARCHIVE_ARG_BYTES (64u * 1024u)

/* True for failures worth another attempt. */
bool epull_transient(relay_status status, const char *message);

/* True when the failure is the guest lacking room for an archive
 * ("Not enough guest space for a N-byte archive"). */
bool epull_guest_space(const relay_error *err);

/* Pulls the files `expected` ([{path, bytes?, sha256?}], paths relative to
 * the guest folder `base`, in order) as evidence archives: one
 * `receiver archive` per chunk of at most EPULL_ARCHIVE_ARG_BYTES of path
 * bytes, each archive pulled into the guest_io's scratch folder, checked
 * against its frame, extracted into `dest_dir` (an existing host folder)
 * with the chunk's expected list, then removed on both sides. With
 * `present` missing files are skipped. On failure every file this call
 * placed in dest_dir is removed. *facts_out (may be NULL) receives the
 * concatenated facts [{path, bytes, sha256}] of what was placed. */
relay_status epull_archive(guest_io *io, const char *base, const json_object *expected, bool present,
                           const char *dest_dir, json_object **facts_out, relay_error *err);

/* epull_archive with the archive reader's options (evidence/archive.h);
 * NULL: the defaults (originals under "state/snapshots/" capped at 64 MiB). */
relay_status epull_archive_ex(guest_io *io, const char *base, const json_object *expected, bool present,
                              const evidence_extract_options *opts, const char *dest_dir,
                              json_object **facts_out, relay_error *err);

/* Pulls the single guest file `remote` to `local` (must not exist), then
 * hashes the host copy: its size and SHA-256 must equal `bytes`/`sha256`,
 * else the copy is removed and RELAY_E_INTEGRITY is returned. */
relay_status epull_file(guest_io *io, const char *remote, const char *local, const char *sha256,
                        uint64_t bytes, relay_error *err);

/* Pulls the file facts `files` ([{path, bytes, sha256}]) one at a time with
 * epull_file, each from <remote_base>/<path> to <local_base>/<path>, making
 * the host folders on the way (0700); stops at the first failure. The
 * fallback when an evidence archive could not be made or read. */
relay_status epull_files(guest_io *io, const json_object *files, const char *remote_base,
                         const char *local_base, relay_error *err);

/* Checks a scan's facts for the package path rules (spec/evidence.md §8.2, §11
 * item 3) with `prefix` ("state/", "" ...) prepended, and that the paths are
 * sorted and unique. RELAY_E_INTEGRITY naming the first offending path
 * ("file name not allowed in an evidence package: <p>"). A single fact
 * with path "" is allowed when `allow_single`. */
relay_status epull_check_facts(const json_object *facts, const char *prefix, bool allow_single,
                               relay_error *err);

/* Sum of the facts' bytes. */
uint64_t epull_facts_bytes(const json_object *facts);

/* True when two fact arrays name the same paths with the same sizes and
 * hashes, in the same order. */
bool epull_facts_equal(const json_object *a, const json_object *b);

#endif
