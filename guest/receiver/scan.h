/*
 * receiver/scan.h — inventories of files and trees under the guest root
 * (spec/guest.md §5.2 `scan`): {path, sha256, bytes} facts sorted by byte order.
 */
#ifndef RECEIVER_SCAN_H
#define RECEIVER_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "json.h"
#include "util.h"

#define IMAGE_MAX_BYTES (64ull * 1024 * 1024)

typedef struct fact {
	char *path; /* relative to the scanned path; "" for a single file */
	char sha256[65];
	uint64_t bytes;
	int has_identity; /* --image */
	uint64_t dev, ino;
	int64_t mtime_ns, ctime_ns;
} fact;

typedef struct fact_list {
	fact *items;
	size_t count;
	size_t cap;
} fact_list;

void fact_list_free(fact_list *list);

/* Inventories base_abs/rel ("." for base_abs itself). base_abs must be the
 * root or lie below it. present: a missing path gives no fact instead of an
 * error. image: the path must be one image file (see spec/guest.md §5.2). */
int scan_collect(const char *root, const char *base_abs, const char *rel, int present, int image,
                 fact_list *out, rerr *err);

/* Opens path O_NOFOLLOW, checks it is the regular file described by
 * expected (same dev/ino/size; NULL skips), hashes it and checks that its
 * size did not move. */
int hash_regular_file(const char *path, const struct stat *expected, char hex[65], uint64_t *bytes_out,
                      rerr *err);

/* True when head[0..n) starts with a PNG, JPEG, GIF or WebP signature. */
int image_signature_ok(const unsigned char *head, size_t n);
/* True when head starts with the PNG signature. */
int png_signature_ok(const unsigned char *head, size_t n);

/* The facts as a JSON array (new value). */
jv *facts_to_json(const fact_list *list);

#endif
