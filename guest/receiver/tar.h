/*
 * receiver/tar.h — the evidence archive format (spec/evidence.md §5.3): an
 * uncompressed POSIX tar whose first member `.relay-index.json` lists
 * [{path, bytes, sha256}] in archive order, then one regular file per index
 * entry (mode 0600, owner 0/0, no names, ustar names or a pax `path`
 * header for long ones), ended by two zero blocks.
 *
 * The writer backs `receiver archive`; the reader backs `receiver unpack`
 * and applies the host's refusals for untrusted archives (spec/evidence.md §5.4).
 */
#ifndef RECEIVER_TAR_H
#define RECEIVER_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define TAR_INDEX_NAME      ".relay-index.json"
#define ARCHIVE_PATHS_BYTES 65536u /* path bytes, one extra per path, per command */

typedef struct archive_result {
	char sha256[65];
	uint64_t bytes;
	size_t entries;
} archive_result;

/* Writes out_abs (R/.archive-<random>.tar) holding base_abs/rels[i].
 * *usage_out is set when the failure is a usage error (exit 2). */
int tar_write_archive(const char *root, const char *base_abs, char *const *rels, size_t count, int present,
                      const char *out_abs, archive_result *res, int *usage_out, rerr *err);

typedef struct unpack_result {
	size_t unpacked;
	uint64_t bytes;
} unpack_result;

/* Unpacks archive_abs into base_abs, refusing the whole archive on any
 * breach; nothing is placed unless every member was accepted. */
int tar_unpack(const char *root, const char *base_abs, const char *archive_abs, unpack_result *res,
               int *usage_out, rerr *err);

#endif
