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
			if (pending_path != NULL) {
				status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                         "archive refused: a pax header without its member");
				goto cleanup;
			}
			/* End marker: a second zero block, then only zeros. */
			if (off + 2 * BLOCK > file_size) {
				status =
				    relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                    "archive refused: truncated archive (one end block)");
				goto cleanup;
			}
			unsigned char tail[8192];
			for (uint64_t p = off + BLOCK; p < file_size;) {
				size_t n =
				    (size_t)((file_size - p) < sizeof tail ? (file_size - p) : sizeof tail);
				status = pread_full(fd, tail, n, p, err);
				if (status != RELAY_OK)
					goto cleanup;
				if (!rs_tar_zero(tail, n)) {
					status = relay_error_set(
					    err, RELAY_E_INTEGRITY, 0,
					    "archive refused: trailing data after the end marker");
					goto cleanup;
				}
				p += n;
			}
			break;
		}
		/* Header checksum: the sum of all bytes with the checksum field as spaces. */
		uint64_t want = 0;
		if (rs_tar_octal(hdr + 148, 8, &want) != 0) {
			status =
			    relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: damaged header");
			goto cleanup;
		}
		if (!rs_tar_checksum_ok(hdr)) {
			status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                         "archive refused: bad header checksum");
			goto cleanup;
		}
		if (!rs_tar_is_ustar(hdr)) {
			status =
			    relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                    "archive refused: not a POSIX ustar header (GNU or old tar)");
			goto cleanup;
		}
		uint64_t size = 0;
		if (rs_tar_octal(hdr + 124, 12, &size) != 0) {
			status =
			    relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: bad size field");
			goto cleanup;
		}
		uint64_t data_off = off + BLOCK;
		uint64_t padded = (size + BLOCK - 1) / BLOCK * BLOCK;
		if (size > file_size || data_off + padded > file_size) {
			status = relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "archive refused: a member is larger than the bytes left (truncated)");
			goto cleanup;
		}
		char type = (char)hdr[156];
		if (type == 'x') {
			if (pending_path != NULL || size > PAX_MAX_BYTES) {
				status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                         "archive refused: bad pax header");
				goto cleanup;
			}
			char *data = malloc(size + 1);
			if (data == NULL) {
				status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
				goto cleanup;
			}
			status = pread_full(fd, data, size, data_off, err);
			if (status == RELAY_OK)
				status = parse_pax(data, size, &pending_path, err);
			free(data);
			if (status != RELAY_OK)
				goto cleanup;
			if (pending_path == NULL) {
				status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                         "archive refused: a pax header without a path");
				goto cleanup;
			}
		} else if (type == '0') {
			char name[256 + 1 + 100 + 1];
			if (pending_path == NULL) {
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
				if (m == NULL) {
					status =
					    relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
					goto cleanup;
				}
				out->members = m;
				out->capacity = cap;
			}
			scanned_member *m = &out->members[out->count];
			m->name = pending_path ? pending_path : strdup(name);
			pending_path = NULL;
			if (m->name == NULL) {
				status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
				goto cleanup;
			}
			m->size = size;
			out->count++;
		} else {
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
			status =
			    relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                    "archive refused: %s (only regular files are allowed)", what);
			goto cleanup;
		}
		off = data_off + padded;
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

relay_status evidence_archive_extract_ex(const char *archive_path, const char *dest_dir,
                                         const char *expected_json, unsigned flags,
                                         const evidence_extract_options *opts_in, char **facts_json_out,
                                         relay_error *err)
{
	evidence_extract_options opts = {0, EVIDENCE_SNAPSHOT_MAX_BYTES, NULL, false};
	if (opts_in != NULL)
		opts = *opts_in;
	const char *snap_prefix = opts.snapshot_prefix ? opts.snapshot_prefix : "state/snapshots/";
	relay_status status = RELAY_OK;
	int arc_fd = -1, dest_fd = -1, out_fd = -1;
	struct archive *a = NULL;
	scan_result scan = {0};
	fact_list index = {0}, expected = {0};
	fw_strlist created_files = {0}, created_dirs = {0};
	char *index_text = NULL;
	unsigned char *buf = NULL;
	sha256_ctx *ctx = NULL;
	json_object *facts = NULL;

	if (facts_json_out)
		*facts_json_out = NULL;
	if (archive_path == NULL || dest_dir == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "archive_extract needs an archive path and a destination folder");
	if (flags & ~RELAY_ARCHIVE_PRESENT)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                       "archive_extract: unknown flags 0x%x", flags & ~RELAY_ARCHIVE_PRESENT);
	if (expected_json != NULL) {
		status =
		    parse_facts(expected_json, strlen(expected_json), false, "expected list", &expected, err);
		if (status != RELAY_OK)
			goto cleanup;
	}
	arc_fd = open(archive_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (arc_fd < 0) {
		status = relay_error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                         "cannot open archive %s: %s", archive_path, strerror(errno));
		goto cleanup;
	}
	struct stat ast;
	if (fstat(arc_fd, &ast) != 0 || !S_ISREG(ast.st_mode)) {
		status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "archive %s is not a regular file",
		                         archive_path);
		goto cleanup;
	}
	dest_fd = fw_open_root(dest_dir);
	if (dest_fd < 0) {
		status = relay_error_set(
		    err, errno == ELOOP || errno == ENOTDIR ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, errno,
		    "cannot open destination folder %s: %s", dest_dir, strerror(errno));
		goto cleanup;
	}
	if (!opts.skip_structure_scan) {
		status = scan_structure(arc_fd, (uint64_t)ast.st_size, &scan, err);
		if (status != RELAY_OK)
			goto cleanup;
	}

	buf = malloc(COPY_CHUNK);
	facts = json_object_new_array();
	a = archive_read_new();
	if (buf == NULL || facts == NULL || a == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	/* Uncompressed tar only: no filter other than none is enabled. */
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, arc_fd, 64 * 1024) != ARCHIVE_OK) {
		status = read_failure(a, err, "cannot open");
		goto cleanup;
	}
	size_t member = 0; /* members seen, the index included */
	for (;;) {
		struct archive_entry *entry = NULL;
		int r = archive_read_next_header(a, &entry);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK) {
			status = read_failure(a, err, "damaged header");
			goto cleanup;
		}
		const char *name = archive_entry_pathname_utf8(entry);
		if (name == NULL)
			name = archive_entry_pathname(entry);
		if (name == NULL) {
			status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                         "archive refused: a member has no name");
			goto cleanup;
		}
		/* Type: regular files only; links, folders, devices, FIFOs, sockets,
		 * sparse files are refused. */
		if (archive_entry_filetype(entry) != AE_IFREG || archive_entry_hardlink(entry) != NULL ||
		    archive_entry_symlink(entry) != NULL || archive_entry_sparse_count(entry) > 0) {
			const char *what = archive_entry_hardlink(entry)               ? "a hard link"
			                   : archive_entry_filetype(entry) == AE_IFLNK ? "a symbolic link"
			                   : archive_entry_filetype(entry) == AE_IFDIR ? "a folder"
			                   : archive_entry_filetype(entry) == AE_IFIFO ? "a FIFO"
			                   : archive_entry_filetype(entry) == AE_IFCHR ||
			                           archive_entry_filetype(entry) == AE_IFBLK
			                       ? "a device"
			                   : archive_entry_filetype(entry) == AE_IFSOCK
			                       ? "a socket"
			                       : "a non-regular member";
			status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                         "archive refused: %s is %s (only regular files are allowed)",
			                         evidence_archive_path_ok(name) ? name : "a member", what);
			goto cleanup;
		}
		if (archive_entry_xattr_count(entry) > 0 ||
		    archive_entry_acl_count(entry, ARCHIVE_ENTRY_ACL_TYPE_ACCESS) > 0) {
			status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                         "archive refused: a member carries hidden metadata");
			goto cleanup;
		}
		if (!archive_entry_size_is_set(entry) || archive_entry_size(entry) < 0) {
			status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                         "archive refused: a member has no size");
			goto cleanup;
		}
		uint64_t size = (uint64_t)archive_entry_size(entry);
		if (!opts.skip_structure_scan &&
		    (member >= scan.count || strcmp(scan.members[member].name, name) != 0 ||
		     scan.members[member].size != size)) {
			status = relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "archive refused: its headers do not read the same in two parsers");
			goto cleanup;
		}
		if (member == 0) {
			if (strcmp(name, EVIDENCE_ARCHIVE_INDEX_NAME) != 0) {
				status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                         "archive refused: its first member is not %s",
				                         EVIDENCE_ARCHIVE_INDEX_NAME);
				goto cleanup;
			}
			if (size > EVIDENCE_ARCHIVE_MAX_INDEX_BYTES) {
				status = relay_error_set(err, RELAY_E_TOO_LARGE, 0,
				                         "archive refused: index too large");
				goto cleanup;
			}
			index_text = malloc(size + 1);
			if (index_text == NULL) {
				status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
				goto cleanup;
			}
			size_t got = 0;
			while (got < size) {
				la_ssize_t n = archive_read_data(a, index_text + got, size - got);
				if (n < 0) {
					status = read_failure(a, err, "index");
					goto cleanup;
				}
				if (n == 0)
					break;
				got += (size_t)n;
			}
			if (got != size) {
				status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                         "archive refused: truncated index");
				goto cleanup;
			}
			index_text[size] = '\0';
			status = parse_facts(index_text, size, true, "archive index", &index, err);
			if (status != RELAY_OK)
				goto cleanup;
			if (expected_json != NULL) {
				status = check_index_against_expected(
				    &index, &expected, (flags & RELAY_ARCHIVE_PRESENT) != 0, err);
				if (status != RELAY_OK)
					goto cleanup;
			}
			member++;
			continue;
		}
		if (!evidence_archive_path_ok(name)) {
			status = relay_error_set(
			    err, RELAY_E_UNSAFE_PATH, 0,
			    "archive refused: a member name is absolute, has an empty, . or .. "
			    "segment, a backslash or a control character");
			goto cleanup;
		}
		size_t k = member - 1;
		if (k >= index.count || strcmp(index.items[k].path, name) != 0) {
			bool dup = false;
			for (size_t j = 0; j < k && j < index.count; j++)
				if (strcmp(index.items[j].path, name) == 0)
					dup = true;
			status =
			    relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                    dup ? "archive refused: %s appears twice"
			                        : "archive refused: %s is not the next member of its index",
			                    name);
			goto cleanup;
		}
		const fact *f = &index.items[k];
		if ((int64_t)size != f->bytes) {
			status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                         "archive refused: %s has %llu bytes, its index says %lld",
			                         name, (unsigned long long)size, (long long)f->bytes);
			goto cleanup;
		}
		if ((opts.max_entry_bytes && size > opts.max_entry_bytes) ||
		    (opts.snapshot_max_bytes && has_prefix(name, snap_prefix) &&
		     size > opts.snapshot_max_bytes)) {
			status = relay_error_set(err, RELAY_E_TOO_LARGE, 0,
			                         "archive refused: %s is larger than allowed (%llu bytes)",
			                         name, (unsigned long long)size);
			goto cleanup;
		}
		out_fd = fw_create_file_at(dest_fd, name, 0600, &created_dirs, err);
		if (out_fd < 0) {
			status = err ? err->code : RELAY_E_IO;
			goto cleanup;
		}
		if (!fw_strlist_push(&created_files, name)) {
			close(out_fd);
			out_fd = -1;
			fw_unlink_at(dest_fd, name, NULL);
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			goto cleanup;
		}
		ctx = sha256_new();
		if (ctx == NULL) {
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			goto cleanup;
		}
		uint64_t got = 0;
		for (;;) {
			la_ssize_t n = archive_read_data(a, buf, COPY_CHUNK);
			if (n < 0) {
				status = read_failure(a, err, name);
				goto cleanup;
			}
			if (n == 0)
				break;
			got += (uint64_t)n;
			if (got > size) {
				status =
				    relay_error_set(err, RELAY_E_INTEGRITY, 0,
				                    "archive refused: %s is larger than its header", name);
				goto cleanup;
			}
			sha256_update(ctx, buf, (size_t)n);
			status = fs_write_all(out_fd, buf, (size_t)n, name, err);
			if (status != RELAY_OK)
				goto cleanup;
		}
		char hex[SHA256_HEX_LEN + 1];
		sha256_final(ctx, hex);
		ctx = NULL;
		if (got != size) {
			status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                         "archive refused: %s is truncated", name);
			goto cleanup;
		}
		if (strcmp(hex, f->sha256) != 0) {
			status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                         "archive refused: the SHA-256 of %s differs from its index",
			                         name);
			goto cleanup;
		}
		if (fsync(out_fd) != 0) {
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", name,
			                         strerror(errno));
			goto cleanup;
		}
		close(out_fd);
		out_fd = -1;
		json_object *fo = json_object_new_object();
		if (fo == NULL || json_object_array_add(facts, fo) != 0 || !jsonx_add_str(fo, "path", name) ||
		    !jsonx_add_int(fo, "bytes", (int64_t)size) || !jsonx_add_str(fo, "sha256", hex)) {
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			goto cleanup;
		}
		member++;
	}
	if (member == 0) {
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "archive refused: it is empty (no %s)",
		                         EVIDENCE_ARCHIVE_INDEX_NAME);
		goto cleanup;
	}
	if (member - 1 != index.count) {
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                         "archive refused: it ends before %s (truncated)",
		                         index.items[member - 1].path);
		goto cleanup;
	}
	if (!opts.skip_structure_scan && member != scan.count) {
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                         "archive refused: its headers do not read the same in two parsers");
		goto cleanup;
	}
	if (fsync(dest_fd) != 0 && errno != EINVAL) {
		status =
		    relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", dest_dir, strerror(errno));
		goto cleanup;
	}
	if (facts_json_out) {
		*facts_json_out = jsonx_to_string(facts, 0);
		if (*facts_json_out == NULL)
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
cleanup:
	sha256_abort(ctx);
	if (out_fd >= 0)
		close(out_fd);
	if (status != RELAY_OK && dest_fd >= 0) {
		for (size_t i = created_files.count; i > 0; i--)
			fw_unlink_at(dest_fd, created_files.items[i - 1], NULL);
		for (size_t i = created_dirs.count; i > 0; i--)
			fw_rmdir_at(dest_fd, created_dirs.items[i - 1]);
	}
	if (a != NULL)
		archive_read_free(a);
	if (dest_fd >= 0)
		close(dest_fd);
	if (arc_fd >= 0)
		close(arc_fd);
	fw_strlist_free(&created_files);
	fw_strlist_free(&created_dirs);
	scan_result_free(&scan);
	fact_list_free(&index);
	fact_list_free(&expected);
	json_object_put(facts);
	free(index_text);
	free(buf);
	return status;
}
