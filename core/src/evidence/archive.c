#include "evidence/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "evidence/fswalk.h"
#include "relay_support/ustar.h"
#include "relay_support/utf8_locale.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

enum { BLOCK = 512, COPY_CHUNK = 1 << 20, PAX_MAX_BYTES = 64 * 1024 };

bool evidence_archive_path_ok(const char *path)
{
	if (path == NULL || path[0] == '\0' || path[0] == '/')
		return false;
	const char *seg = path;
	for (const char *p = path;; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '/' || c == '\0') {
			size_t n = (size_t)(p - seg);
			if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
				return false;
			if (c == '\0')
				return true;
			seg = p + 1;
			continue;
		}
		if (c < 0x20 || c == 0x7f || c == '\\')
			return false;
	}
}

/* ---- reading: the raw header pre-scan --------------------------------------
 *
 * libarchive hides what a hostile archive could smuggle: pax keys it merges
 * into the entry, GNU long-name records, bytes after the end marker. This
 * scan walks the 512-byte headers itself and accepts only ustar regular files
 * ('0') and pax 'x' headers carrying `path`, then only zero bytes after the
 * end marker. It records each member's (name, size) so the libarchive pass
 * can be checked to see the same members. */

typedef struct scanned_member {
	char *name;
	uint64_t size;
} scanned_member;

typedef struct scan_result {
	scanned_member *members;
	size_t count, capacity;
} scan_result;

static void scan_result_free(scan_result *r)
{
	for (size_t i = 0; i < r->count; i++)
		free(r->members[i].name);
	free(r->members);
	memset(r, 0, sizeof *r);
}

static relay_status pread_full(int fd, void *buf, size_t len, uint64_t off, relay_error *err)
{
	unsigned char *p = buf;
	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return relay_error_set(err, RELAY_E_IO, errno, "cannot read archive: %s",
			                       strerror(errno));
		}
		if (n == 0)
			return relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                       "archive refused: truncated archive");
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return RELAY_OK;
}

/* Parses pax records "<len> <key>=<value>\n"; only `path` is allowed. */
static relay_status parse_pax(const char *data, size_t len, char **path_out, relay_error *err)
{
	const char *path, *key = NULL;
	size_t path_len, key_len = 0;
	*path_out = NULL;
	int r = rs_tar_pax_path(data, len, &path, &path_len, &key, &key_len);
	if (r == RS_TAR_PAX_KEY)
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                       "archive refused: a pax header sets %.*s (only path is allowed)",
		                       (int)(key_len > 40 ? 40 : key_len), key);
	if (r != RS_TAR_PAX_OK)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: malformed pax header");
	if (path == NULL)
		return RELAY_OK;
	*path_out = strndup(path, path_len);
	if (*path_out == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	return RELAY_OK;
}

/* A zero block at `off`: the end marker needs a second zero block, then
 * only zero bytes up to the end of the file. */
static relay_status scan_end_marker(int fd, uint64_t off, uint64_t file_size, relay_error *err)
{
	if (off + 2 * BLOCK > file_size)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: truncated archive (one end block)");
	unsigned char tail[8192];
	for (uint64_t p = off + BLOCK; p < file_size;) {
		size_t n = (size_t)((file_size - p) < sizeof tail ? (file_size - p) : sizeof tail);
		relay_status status = pread_full(fd, tail, n, p, err);
		if (status != RELAY_OK)
			return status;
		if (!rs_tar_zero(tail, n))
			return relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                       "archive refused: trailing data after the end marker");
		p += n;
	}
	return RELAY_OK;
}

/* A member header at `off`: checksum, ustar magic, and a size that fits in
 * the bytes left. */
static relay_status scan_header(const unsigned char *hdr, uint64_t off, uint64_t file_size,
                                uint64_t *size_out, relay_error *err)
{
	/* Header checksum: the sum of all bytes with the checksum field as spaces. */
	uint64_t want = 0;
	if (rs_tar_octal(hdr + 148, 8, &want) != 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: damaged header");
	if (!rs_tar_checksum_ok(hdr))
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: bad header checksum");
	if (!rs_tar_is_ustar(hdr))
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                       "archive refused: not a POSIX ustar header (GNU or old tar)");
	uint64_t size = 0;
	if (rs_tar_octal(hdr + 124, 12, &size) != 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: bad size field");
	uint64_t padded = (size + BLOCK - 1) / BLOCK * BLOCK;
	if (size > file_size || off + BLOCK + padded > file_size)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: a member is larger than the bytes left (truncated)");
	*size_out = size;
	return RELAY_OK;
}

/* A pax 'x' header: its data must name a path for the next member. */
static relay_status scan_pax(int fd, uint64_t size, uint64_t data_off, char **pending_path, relay_error *err)
{
	if (*pending_path != NULL || size > PAX_MAX_BYTES)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: bad pax header");
	char *data = malloc(size + 1);
	if (data == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status status = pread_full(fd, data, size, data_off, err);
	if (status == RELAY_OK)
		status = parse_pax(data, size, pending_path, err);
	free(data);
	if (status != RELAY_OK)
		return status;
	if (*pending_path == NULL)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: a pax header without a path");
	return RELAY_OK;
}

/* A regular file '0': record (name, size), the name from the pending pax
 * path (taken over) or from the header's prefix and name fields. */
static relay_status scan_add_member(scan_result *out, const unsigned char *hdr, uint64_t size,
                                    char **pending_path, relay_error *err)
{
	char name[256 + 1 + 100 + 1];
	if (*pending_path == NULL) {
		char prefix[156] = {0}, base[101] = {0};
		memcpy(prefix, hdr + 345, 155);
		memcpy(base, hdr, 100);
		if (prefix[0] != '\0')
			snprintf(name, sizeof name, "%s/%s", prefix, base);
		else
			snprintf(name, sizeof name, "%s", base);
	}
	if (out->count == out->capacity) {
		size_t cap = out->capacity ? out->capacity * 2 : 64;
		scanned_member *m = realloc(out->members, cap * sizeof *m);
		if (m == NULL)
			return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		out->members = m;
		out->capacity = cap;
	}
	scanned_member *m = &out->members[out->count];
	m->name = *pending_path ? *pending_path : strdup(name);
	*pending_path = NULL;
	if (m->name == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	m->size = size;
	out->count++;
	return RELAY_OK;
}

/* Any other member type is refused, named for the reader. */
static relay_status scan_refuse_type(char type, relay_error *err)
{
	const char *what = "an unsupported member type";
	switch (type) {
	case '1': what = "a hard link"; break;
	case '2': what = "a symbolic link"; break;
	case '3':
	case '4': what = "a device"; break;
	case '5': what = "a folder"; break;
	case '6': what = "a FIFO"; break;
	case 'g': what = "a global pax header"; break;
	case 'L':
	case 'K': what = "a GNU long-name record"; break;
	case 'S': what = "a GNU sparse file"; break;
	case '\0': what = "an old-style file entry"; break;
	default: break;
	}
	return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
	                       "archive refused: %s (only regular files are allowed)", what);
}

static relay_status scan_structure(int fd, uint64_t file_size, scan_result *out, relay_error *err)
{
	unsigned char hdr[BLOCK];
	uint64_t off = 0;
	char *pending_path = NULL;
	relay_status status = RELAY_OK;
	for (;;) {
		if (off + BLOCK > file_size) {
			status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                         "archive refused: truncated archive (no end marker)");
			goto cleanup;
		}
		status = pread_full(fd, hdr, BLOCK, off, err);
		if (status != RELAY_OK)
			goto cleanup;
		if (rs_tar_zero(hdr, BLOCK)) {
			if (pending_path != NULL)
				status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                         "archive refused: a pax header without its member");
			else
				status = scan_end_marker(fd, off, file_size, err);
			goto cleanup;
		}
		uint64_t size = 0;
		status = scan_header(hdr, off, file_size, &size, err);
		if (status != RELAY_OK)
			goto cleanup;
		uint64_t data_off = off + BLOCK;
		char type = (char)hdr[156];
		if (type == 'x')
			status = scan_pax(fd, size, data_off, &pending_path, err);
		else if (type == '0')
			status = scan_add_member(out, hdr, size, &pending_path, err);
		else
			status = scan_refuse_type(type, err);
		if (status != RELAY_OK)
			goto cleanup;
		off = data_off + (size + BLOCK - 1) / BLOCK * BLOCK;
	}
cleanup:
	free(pending_path);
	return status;
}

/* ---- reading: index and expected list ------------------------------------ */

typedef struct fact {
	char *path;
	int64_t bytes;                   /* -1 = not given (expected list only) */
	char sha256[SHA256_HEX_LEN + 1]; /* "" = not given (expected list only) */
} fact;

typedef struct fact_list {
	fact *items;
	size_t count;
} fact_list;

static void fact_list_free(fact_list *l)
{
	for (size_t i = 0; i < l->count; i++)
		free(l->items[i].path);
	free(l->items);
	l->items = NULL;
	l->count = 0;
}

/* Parses a JSON array of {path, bytes, sha256}. `strict` requires both
 * bytes and sha256 (the index); the expected list may leave them out. */
static relay_status parse_facts(const char *text, size_t len, bool strict, const char *what, fact_list *out,
                                relay_error *err)
{
	char why[128] = "";
	json_object *arr = jsonx_parse(text, len, NULL, why, sizeof why);
	relay_status status = RELAY_OK;
	if (arr == NULL || !json_object_is_type(arr, json_type_array)) {
		status = relay_error_set(err, strict ? RELAY_E_INTEGRITY : RELAY_E_INVALID_ARGUMENT, 0,
		                         "%s is not a JSON array of {path, bytes, sha256}%s%s", what,
		                         why[0] ? ": " : "", why);
		goto cleanup;
	}
	size_t n = json_object_array_length(arr);
	out->items = calloc(n ? n : 1, sizeof *out->items);
	if (out->items == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_array_get_idx(arr, i);
		const char *path = jsonx_get_str(o, "path");
		const char *sha = jsonx_get_str(o, "sha256");
		int64_t bytes = -1;
		bool has_bytes = jsonx_get_int(o, "bytes", &bytes);
		if (path == NULL || !evidence_archive_path_ok(path) ||
		    strcmp(path, EVIDENCE_ARCHIVE_INDEX_NAME) == 0 || (has_bytes && bytes < 0) ||
		    (sha != NULL && !sha256_hex_valid(sha)) || (strict && (!has_bytes || sha == NULL))) {
			status =
			    relay_error_set(err, strict ? RELAY_E_UNSAFE_PATH : RELAY_E_INVALID_ARGUMENT, 0,
			                    "%s entry %zu is not a valid {path, bytes, sha256} (path %s)",
			                    what, i, path ? path : "missing");
			goto cleanup;
		}
		for (size_t j = 0; j < out->count; j++)
			if (strcmp(out->items[j].path, path) == 0) {
				status = relay_error_set(
				    err, strict ? RELAY_E_INTEGRITY : RELAY_E_INVALID_ARGUMENT, 0,
				    "%s lists %s twice", what, path);
				goto cleanup;
			}
		fact *f = &out->items[out->count];
		f->path = strdup(path);
		if (f->path == NULL) {
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			goto cleanup;
		}
		f->bytes = has_bytes ? bytes : -1;
		if (sha)
			memcpy(f->sha256, sha, SHA256_HEX_LEN + 1);
		out->count++;
	}
cleanup:
	json_object_put(arr);
	return status;
}

/* The index must be the expected list (in order), or with `present` an
 * in-order subset of it; bytes and sha256 must agree where expected gives them. */
static relay_status check_index_against_expected(const fact_list *index, const fact_list *expected,
                                                 bool present, relay_error *err)
{
	size_t e = 0;
	for (size_t i = 0; i < index->count; i++) {
		const fact *f = &index->items[i];
		size_t found = e;
		while (found < expected->count && strcmp(expected->items[found].path, f->path) != 0) {
			if (!present)
				break;
			found++;
		}
		if (found >= expected->count || strcmp(expected->items[found].path, f->path) != 0)
			return relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "archive refused: its index lists %s, which was not requested at this "
			    "position (the guest answered a different question)",
			    f->path);
		const fact *x = &expected->items[found];
		if ((x->bytes >= 0 && x->bytes != f->bytes) ||
		    (x->sha256[0] && strcmp(x->sha256, f->sha256) != 0))
			return relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "archive refused: %s has another size or SHA-256 than expected", f->path);
		e = found + 1;
	}
	if (!present && index->count != expected->count)
		return relay_error_set(
		    err, RELAY_E_INTEGRITY, 0, "archive refused: %s was requested but is not in it",
		    expected->items[index->count < expected->count ? index->count : 0].path);
	return RELAY_OK;
}

/* ---- reading: extraction -------------------------------------------------- */

static relay_status read_failure(struct archive *a, relay_error *err, const char *what)
{
	const char *msg = archive_error_string(a);
	return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: %s: %s", what,
	                       msg ? msg : "damaged or truncated archive");
}

static bool has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

relay_status evidence_archive_extract(const char *archive_path, const char *dest_dir,
                                      const char *expected_json, unsigned flags, char **facts_json_out,
                                      relay_error *err)
{
	return evidence_archive_extract_ex(archive_path, dest_dir, expected_json, flags, NULL, facts_json_out,
	                                   err);
}

/* One extraction: what it was asked, what it holds open, what it has
 * created so far (removed again on failure) and the facts it reports. */
typedef struct extraction {
	const char *dest_dir;
	const char *expected_json;
	unsigned flags;
	evidence_extract_options opts;
	const char *snap_prefix;
	int arc_fd, dest_fd, out_fd;
	struct archive *a;
	scan_result scan;
	fact_list index, expected;
	fw_strlist created_files, created_dirs;
	char *index_text;
	unsigned char *buf;
	sha256_ctx *ctx;
	json_object *facts;
	size_t member; /* members seen, the index included */
} extraction;

/* The expected list, the archive (a regular file, pre-scanned unless told
 * not to), the destination folder, and libarchive opened on the archive. */
static relay_status extract_open(extraction *x, const char *archive_path, relay_error *err)
{
	relay_status status;
	if (x->expected_json != NULL) {
		status = parse_facts(x->expected_json, strlen(x->expected_json), false, "expected list",
		                     &x->expected, err);
		if (status != RELAY_OK)
			return status;
	}
	x->arc_fd = open(archive_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (x->arc_fd < 0)
		return relay_error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                       "cannot open archive %s: %s", archive_path, strerror(errno));
	struct stat ast;
	if (fstat(x->arc_fd, &ast) != 0 || !S_ISREG(ast.st_mode))
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "archive %s is not a regular file",
		                       archive_path);
	x->dest_fd = fw_open_root(x->dest_dir);
	if (x->dest_fd < 0)
		return relay_error_set(
		    err, errno == ELOOP || errno == ENOTDIR ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		    "cannot open destination folder %s: %s", x->dest_dir, strerror(errno));
	if (!x->opts.skip_structure_scan) {
		status = scan_structure(x->arc_fd, (uint64_t)ast.st_size, &x->scan, err);
		if (status != RELAY_OK)
			return status;
	}
	x->buf = malloc(COPY_CHUNK);
	x->facts = json_object_new_array();
	x->a = archive_read_new();
	if (x->buf == NULL || x->facts == NULL || x->a == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	/* Uncompressed tar only: no filter other than none is enabled. */
	archive_read_support_format_tar(x->a);
	if (archive_read_open_fd(x->a, x->arc_fd, 64 * 1024) != ARCHIVE_OK)
		return read_failure(x->a, err, "cannot open");
	return RELAY_OK;
}

/* What libarchive made of one header: a named regular file without hidden
 * metadata, with a size, read the same as the pre-scan read it. */
static relay_status extract_check_entry(const extraction *x, struct archive_entry *entry,
                                        const char **name_out, uint64_t *size_out, relay_error *err)
{
	const char *name = archive_entry_pathname_utf8(entry);
	if (name == NULL)
		name = archive_entry_pathname(entry);
	if (name == NULL)
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "archive refused: a member has no name");
	/* Type: regular files only; links, folders, devices, FIFOs, sockets,
	 * sparse files are refused. */
	if (archive_entry_filetype(entry) != AE_IFREG || archive_entry_hardlink(entry) != NULL ||
	    archive_entry_symlink(entry) != NULL || archive_entry_sparse_count(entry) > 0) {
		const char *what =
		    archive_entry_hardlink(entry)               ? "a hard link"
		    : archive_entry_filetype(entry) == AE_IFLNK ? "a symbolic link"
		    : archive_entry_filetype(entry) == AE_IFDIR ? "a folder"
		    : archive_entry_filetype(entry) == AE_IFIFO ? "a FIFO"
		    : archive_entry_filetype(entry) == AE_IFCHR || archive_entry_filetype(entry) == AE_IFBLK
		        ? "a device"
		    : archive_entry_filetype(entry) == AE_IFSOCK ? "a socket"
		                                                 : "a non-regular member";
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                       "archive refused: %s is %s (only regular files are allowed)",
		                       evidence_archive_path_ok(name) ? name : "a member", what);
	}
	if (archive_entry_xattr_count(entry) > 0 ||
	    archive_entry_acl_count(entry, ARCHIVE_ENTRY_ACL_TYPE_ACCESS) > 0)
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                       "archive refused: a member carries hidden metadata");
	if (!archive_entry_size_is_set(entry) || archive_entry_size(entry) < 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: a member has no size");
	uint64_t size = (uint64_t)archive_entry_size(entry);
	if (!x->opts.skip_structure_scan &&
	    (x->member >= x->scan.count || strcmp(x->scan.members[x->member].name, name) != 0 ||
	     x->scan.members[x->member].size != size))
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: its headers do not read the same in two parsers");
	*name_out = name;
	*size_out = size;
	return RELAY_OK;
}

/* The first member: the index, read whole, parsed strictly and checked
 * against the expected list when one was given. */
static relay_status extract_index(extraction *x, const char *name, uint64_t size, relay_error *err)
{
	if (strcmp(name, EVIDENCE_ARCHIVE_INDEX_NAME) != 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: its first member is not %s",
		                       EVIDENCE_ARCHIVE_INDEX_NAME);
	if (size > EVIDENCE_ARCHIVE_MAX_INDEX_BYTES)
		return relay_error_set(err, RELAY_E_TOO_LARGE, 0, "archive refused: index too large");
	x->index_text = malloc(size + 1);
	if (x->index_text == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	size_t got = 0;
	while (got < size) {
		la_ssize_t n = archive_read_data(x->a, x->index_text + got, size - got);
		if (n < 0)
			return read_failure(x->a, err, "index");
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got != size)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: truncated index");
	x->index_text[size] = '\0';
	relay_status status = parse_facts(x->index_text, size, true, "archive index", &x->index, err);
	if (status != RELAY_OK)
		return status;
	if (x->expected_json != NULL)
		return check_index_against_expected(&x->index, &x->expected,
		                                    (x->flags & RELAY_ARCHIVE_PRESENT) != 0, err);
	return RELAY_OK;
}

/* A file member: a safe name, the next one its index lists, with the
 * index's size and within the limits. Returns its index entry. */
static relay_status extract_check_member(const extraction *x, const char *name, uint64_t size,
                                         const fact **f_out, relay_error *err)
{
	if (!evidence_archive_path_ok(name))
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                       "archive refused: a member name is absolute, has an empty, . or .. "
		                       "segment, a backslash or a control character");
	size_t k = x->member - 1;
	if (k >= x->index.count || strcmp(x->index.items[k].path, name) != 0) {
		bool dup = false;
		for (size_t j = 0; j < k && j < x->index.count; j++)
			if (strcmp(x->index.items[j].path, name) == 0)
				dup = true;
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       dup ? "archive refused: %s appears twice"
		                           : "archive refused: %s is not the next member of its index",
		                       name);
	}
	const fact *f = &x->index.items[k];
	if ((int64_t)size != f->bytes)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: %s has %llu bytes, its index says %lld", name,
		                       (unsigned long long)size, (long long)f->bytes);
	if ((x->opts.max_entry_bytes && size > x->opts.max_entry_bytes) ||
	    (x->opts.snapshot_max_bytes && has_prefix(name, x->snap_prefix) &&
	     size > x->opts.snapshot_max_bytes))
		return relay_error_set(err, RELAY_E_TOO_LARGE, 0,
		                       "archive refused: %s is larger than allowed (%llu bytes)", name,
		                       (unsigned long long)size);
	*f_out = f;
	return RELAY_OK;
}

/* Copy the member's data into the open out_fd, hashing it; no more than
 * `size` bytes. `*got` is what came, `hex` its SHA-256. */
static relay_status extract_copy(extraction *x, const char *name, uint64_t size, uint64_t *got,
                                 char hex[SHA256_HEX_LEN + 1], relay_error *err)
{
	x->ctx = sha256_new();
	if (x->ctx == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	*got = 0;
	for (;;) {
		la_ssize_t n = archive_read_data(x->a, x->buf, COPY_CHUNK);
		if (n < 0)
			return read_failure(x->a, err, name);
		if (n == 0)
			break;
		*got += (uint64_t)n;
		if (*got > size)
			return relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                       "archive refused: %s is larger than its header", name);
		sha256_update(x->ctx, x->buf, (size_t)n);
		relay_status status = fs_write_all(x->out_fd, x->buf, (size_t)n, name, err);
		if (status != RELAY_OK)
			return status;
	}
	sha256_final(x->ctx, hex);
	x->ctx = NULL;
	return RELAY_OK;
}

/* A file member: checked, created under the destination (remembered for
 * the rollback), copied, verified against its index, synced, and added to
 * the facts. */
static relay_status extract_member(extraction *x, const char *name, uint64_t size, relay_error *err)
{
	const fact *f = NULL;
	relay_status status = extract_check_member(x, name, size, &f, err);
	if (status != RELAY_OK)
		return status;
	x->out_fd = fw_create_file_at(x->dest_fd, name, 0600, &x->created_dirs, err);
	if (x->out_fd < 0)
		return err ? err->code : RELAY_E_IO;
	if (!fw_strlist_push(&x->created_files, name)) {
		close(x->out_fd);
		x->out_fd = -1;
		fw_unlink_at(x->dest_fd, name, NULL);
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	uint64_t got = 0;
	char hex[SHA256_HEX_LEN + 1];
	status = extract_copy(x, name, size, &got, hex, err);
	if (status != RELAY_OK)
		return status;
	if (got != size)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: %s is truncated", name);
	if (strcmp(hex, f->sha256) != 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: the SHA-256 of %s differs from its index", name);
	if (fs_fsync_fd(x->out_fd) != 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", name, strerror(errno));
	close(x->out_fd);
	x->out_fd = -1;
	json_object *fo = json_object_new_object();
	if (fo == NULL || json_object_array_add(x->facts, fo) != 0 || !jsonx_add_str(fo, "path", name) ||
	    !jsonx_add_int(fo, "bytes", (int64_t)size) || !jsonx_add_str(fo, "sha256", hex))
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	return RELAY_OK;
}

/* Every member in order: the index first, then the files it lists. */
static relay_status extract_members(extraction *x, relay_error *err)
{
	for (;;) {
		struct archive_entry *entry = NULL;
		int r = archive_read_next_header(x->a, &entry);
		if (r == ARCHIVE_EOF)
			return RELAY_OK;
		if (r != ARCHIVE_OK)
			return read_failure(x->a, err, "damaged header");
		const char *name = NULL;
		uint64_t size = 0;
		relay_status status = extract_check_entry(x, entry, &name, &size, err);
		if (status == RELAY_OK)
			status = x->member == 0 ? extract_index(x, name, size, err)
			                        : extract_member(x, name, size, err);
		if (status != RELAY_OK)
			return status;
		x->member++;
	}
}

/* After the last member: nothing the index lists is missing, both parsers
 * saw as many members, and the destination folder is synced. */
static relay_status extract_finish(const extraction *x, char **facts_json_out, relay_error *err)
{
	if (x->member == 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: it is empty (no %s)",
		                       EVIDENCE_ARCHIVE_INDEX_NAME);
	if (x->member - 1 != x->index.count)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: it ends before %s (truncated)",
		                       x->index.items[x->member - 1].path);
	if (!x->opts.skip_structure_scan && x->member != x->scan.count)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "archive refused: its headers do not read the same in two parsers");
	if (fs_fsync_fd(x->dest_fd) != 0 && errno != EINVAL)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", x->dest_dir,
		                       strerror(errno));
	if (facts_json_out) {
		*facts_json_out = jsonx_to_string(x->facts, 0);
		if (*facts_json_out == NULL)
			return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	return RELAY_OK;
}

/* Closes and frees everything; after a failure removes what was created. */
static void extract_release(extraction *x, relay_status status)
{
	sha256_abort(x->ctx);
	if (x->out_fd >= 0)
		close(x->out_fd);
	if (status != RELAY_OK && x->dest_fd >= 0) {
		for (size_t i = x->created_files.count; i > 0; i--)
			fw_unlink_at(x->dest_fd, x->created_files.items[i - 1], NULL);
		for (size_t i = x->created_dirs.count; i > 0; i--)
			fw_rmdir_at(x->dest_fd, x->created_dirs.items[i - 1]);
	}
	if (x->a != NULL)
		archive_read_free(x->a);
	if (x->dest_fd >= 0)
		close(x->dest_fd);
	if (x->arc_fd >= 0)
		close(x->arc_fd);
	fw_strlist_free(&x->created_files);
	fw_strlist_free(&x->created_dirs);
	scan_result_free(&x->scan);
	fact_list_free(&x->index);
	fact_list_free(&x->expected);
	json_object_put(x->facts);
	free(x->index_text);
	free(x->buf);
}

relay_status evidence_archive_extract_ex(const char *archive_path, const char *dest_dir,
                                         const char *expected_json, unsigned flags,
                                         const evidence_extract_options *opts_in, char **facts_json_out,
                                         relay_error *err)
{
	if (facts_json_out)
		*facts_json_out = NULL;
	if (archive_path == NULL || dest_dir == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "archive_extract needs an archive path and a destination folder");
	if (flags & ~RELAY_ARCHIVE_PRESENT)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                       "archive_extract: unknown flags 0x%x", flags & ~RELAY_ARCHIVE_PRESENT);
	extraction x = {
	    .dest_dir = dest_dir,
	    .expected_json = expected_json,
	    .flags = flags,
	    .opts = {0, EVIDENCE_SNAPSHOT_MAX_BYTES, NULL, false},
	    .arc_fd = -1,
	    .dest_fd = -1,
	    .out_fd = -1,
	};
	if (opts_in != NULL)
		x.opts = *opts_in;
	x.snap_prefix = x.opts.snapshot_prefix ? x.opts.snapshot_prefix : "state/snapshots/";
	rs_utf8_locale_scope utf8; /* member names are UTF-8 whatever the relay's locale */
	rs_utf8_locale_enter(&utf8);
	relay_status status = extract_open(&x, archive_path, err);
	if (status == RELAY_OK)
		status = extract_members(&x, err);
	if (status == RELAY_OK)
		status = extract_finish(&x, facts_json_out, err);
	extract_release(&x, status);
	rs_utf8_locale_leave(&utf8);
	return status;
}
