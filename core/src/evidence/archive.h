/*
 * evidence/archive.h — the evidence archive (docs/evidence-format.md,
 * spec spec/evidence.md §5.3-§5.4).
 *
 * Format: an uncompressed POSIX tar. The first member is `.relay-index.json`,
 * a JSON array [{path, bytes, sha256}] in archive order; then one regular
 * file member per index entry, in that order: typeflag '0', mode 0600, owner
 * 0/0, no user or group names, mtime from the file (whole seconds). Names
 * that fit ustar's prefix/name split are written in ustar form, longer ones
 * get a pax extended header carrying only `path`. The archive ends with two
 * zero blocks and no further padding.
 *
 * Only evidence/archive*.c call libarchive in the core: archive_write.c
 * writes, archive.c extracts.
 *
 * evidence_archive_write and evidence_archive_extract have exactly the
 * signatures of relay_host.archive_write / relay_host.archive_extract
 * (relay/host.h), so the host table points at them directly. Strings they
 * return are malloc'd: host->free (which is free()) releases them.
 *
 * Extraction treats the archive as HOSTILE (it comes from a guest). The whole
 * archive is refused, and every file this call created is removed, on:
 *   - a first member other than `.relay-index.json`, an index that is not
 *     valid JSON of {path, bytes, sha256}, a path twice in it;
 *   - with an expected list: an index entry not in it, or differing from it
 *     in bytes or sha256, or (without RELAY_ARCHIVE_PRESENT) an expected path
 *     missing from the index; the index must follow the expected list's order
 *     (an in-order subset with RELAY_ARCHIVE_PRESENT);
 *   - an absolute name, an empty, `.` or `..` segment, a backslash or a
 *     control character;
 *   - any member type but a regular file ('0'): links (symbolic or hard),
 *     folders, devices, FIFOs, sockets, sparse files, GNU extensions;
 *   - a pax header setting anything but `path`; a global pax header;
 *   - a member not next in the index, a name twice;
 *   - a size different from the index, larger than the bytes left in the
 *     archive, or (option) over a per-file cap for snapshot originals;
 *   - a SHA-256 different from the index;
 *   - a truncated archive, a bad header checksum, trailing non-zero data.
 * Files are created with openat(O_CREAT|O_EXCL|O_NOFOLLOW, 0600) relative to
 * an O_DIRECTORY|O_NOFOLLOW descriptor of each folder (created 0700), so no
 * name and no pre-existing link can place bytes outside the destination.
 */
#ifndef RELAY_EVIDENCE_ARCHIVE_H
#define RELAY_EVIDENCE_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/host.h"
#include "relay/status.h"

/* Name of the first member. */
#define EVIDENCE_ARCHIVE_INDEX_NAME ".relay-index.json"
/* Largest index member accepted on extraction (bytes). */
#define EVIDENCE_ARCHIVE_MAX_INDEX_BYTES (16u << 20)
/* Largest snapshot original (spec/images.md §4): 64 MiB. */
#define EVIDENCE_SNAPSHOT_MAX_BYTES (64ull << 20)

/* relay_host.archive_write. Writes `archive_path` (created O_CREAT|O_EXCL|
 * O_NOFOLLOW, 0600) from the regular files `rel_paths` (NULL-terminated,
 * borrowed, relative, no empty/./.. segment) under `base_dir` (borrowed).
 * Each file is hashed first (for the index) and again while it is copied into
 * the archive; a file that changes in between is RELAY_E_INTEGRITY. A symbolic
 * link anywhere below base_dir or a special file is RELAY_E_UNSAFE_PATH. With
 * RELAY_ARCHIVE_PRESENT a missing path is skipped and left out of the index.
 * A partial archive is removed on failure. *index_json_out (may be NULL)
 * receives the compact index array; owned by caller (free / host->free). */
relay_status evidence_archive_write(const char *archive_path, const char *base_dir,
                                    const char *const *rel_paths, unsigned flags, char **index_json_out,
                                    relay_error *err);

/* One member of evidence_archive_write_members: its archive name (a strict
 * relative path, not EVIDENCE_ARCHIVE_INDEX_NAME), its size and SHA-256 as
 * the index will state them, and its mtime in whole seconds (< 0: now).
 * Strings borrowed. */
typedef struct evidence_archive_member {
	const char *name;
	uint64_t bytes;
	const char *sha256;
	int64_t mtime_s;
} evidence_archive_member;

/* Opens member `index` for reading from its start: a descriptor the writer
 * closes, or -1 with err set (RELAY_E_INTEGRITY when the source is no longer
 * what was hashed). */
typedef int (*evidence_archive_open_fn)(void *ctx, size_t index, relay_error *err);

/* How evidence_archive_write_members words and finishes its work. */
typedef struct evidence_archive_write_options {
	const char *what;           /* the archive in messages: "cannot write <what> (<member>): ..." */
	const char *changed_reason; /* a member that changed: "<changed_reason>: <name>" */
	bool sync;                  /* fsync the archive before returning */
} evidence_archive_write_options;

/* The core's one tar writer. Writes `archive_path` (created O_CREAT|O_EXCL|
 * O_NOFOLLOW, 0600) in the format above: the index of `members`, then each
 * member's bytes read from open_fn, hashed while they are copied; more or
 * fewer bytes than announced or another SHA-256 is RELAY_E_INTEGRITY. opts
 * NULL: "evidence archive", "source changed while archiving", synced. A
 * partial archive is removed on failure. *archive_bytes_out (may be NULL):
 * the archive's size; *index_json_out (may be NULL): the compact index,
 * owned by the caller (NULL after a failure). */
relay_status evidence_archive_write_members(const char *archive_path, const evidence_archive_member *members,
                                            size_t count, evidence_archive_open_fn open_fn, void *open_ctx,
                                            const evidence_archive_write_options *opts,
                                            uint64_t *archive_bytes_out, char **index_json_out,
                                            relay_error *err);

/* relay_host.archive_extract, with the defaults of the host table: snapshot
 * originals (paths under "state/snapshots/") are capped at 64 MiB.
 * `archive_path`, `dest_dir` (an existing folder, not a symbolic link) and
 * `expected_json` (JSON array of {path, bytes?, sha256?}, or NULL) are
 * borrowed. flags: RELAY_ARCHIVE_PRESENT (the index may be an in-order subset
 * of expected_json). *facts_json_out (may be NULL) receives the compact JSON
 * array of {path, bytes, sha256} written, in archive order; owned by caller. */
relay_status evidence_archive_extract(const char *archive_path, const char *dest_dir,
                                      const char *expected_json, unsigned flags, char **facts_json_out,
                                      relay_error *err);

/* Options of evidence_archive_extract_ex; zero-initialise, then set. */
typedef struct evidence_extract_options {
	/* Largest single member in bytes; 0 = no cap beyond the archive's size. */
	uint64_t max_entry_bytes;
	/* Cap for members whose path starts with snapshot_prefix; 0 = none. */
	uint64_t snapshot_max_bytes;
	const char *snapshot_prefix; /* borrowed; NULL = "state/snapshots/" */
	/* Test hook: skip the raw header pre-scan so the libarchive-level checks
	 * can be exercised on their own. Never set in production. */
	bool skip_structure_scan;
} evidence_extract_options;

/* evidence_archive_extract with explicit options (opts may be NULL = the
 * host table's defaults). */
relay_status evidence_archive_extract_ex(const char *archive_path, const char *dest_dir,
                                         const char *expected_json, unsigned flags,
                                         const evidence_extract_options *opts, char **facts_json_out,
                                         relay_error *err);

/* True when `path` is a strict relative archive path: non-empty, not
 * absolute, no empty, "." or ".." segment, no backslash, no control
 * character (bytes < 0x20 and 0x7f). */
bool evidence_archive_path_ok(const char *path);

#endif
