/*
 * Writing evidence archives (evidence/archive.h): the libarchive writer of
 * the core. evidence_archive_write (the host table's archive_write, from a
 * folder) and evidence_archive_write_members (from any byte source, used by
 * the staging pushes) share one writer.
 */
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
#include "relay_support/utf8_locale.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/sha256.h"

enum { COPY_CHUNK = 1 << 20 };

static const evidence_archive_write_options default_options = {
    .what = "evidence archive",
    .changed_reason = "source changed while archiving",
    .sync = true,
};

static relay_status archive_failure(struct archive *a, const evidence_archive_write_options *opts,
                                    relay_error *err, const char *what)
{
	const char *msg = archive_error_string(a);
	int e = archive_errno(a);
	return relay_error_set(err, e == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, e > 0 ? e : 0,
	                       "cannot write %s (%s): %s", opts->what, what,
	                       msg ? msg : "unknown libarchive error");
}

static relay_status write_header(struct archive *a, const evidence_archive_write_options *opts,
                                 const char *name, uint64_t bytes, time_t mtime, relay_error *err)
{
	struct archive_entry *entry = archive_entry_new();
	if (entry == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	/* Names are UTF-8 in the package; tell libarchive so it never adds a
	 * hdrcharset record to the pax header. */
	archive_entry_update_pathname_utf8(entry, name);
	archive_entry_set_filetype(entry, AE_IFREG);
	archive_entry_set_perm(entry, 0600);
	archive_entry_set_uid(entry, 0);
	archive_entry_set_gid(entry, 0);
	archive_entry_set_size(entry, (la_int64_t)bytes);
	archive_entry_set_mtime(entry, mtime, 0);
	relay_status status = RELAY_OK;
	if (archive_write_header(a, entry) != ARCHIVE_OK)
		status = archive_failure(a, opts, err, name);
	archive_entry_free(entry);
	return status;
}

/* Copies one member's bytes from fd into the archive, hashing as it goes:
 * more bytes than announced, fewer, or another SHA-256 is RELAY_E_INTEGRITY. */
static relay_status write_member_data(struct archive *a, const evidence_archive_write_options *opts,
                                      const evidence_archive_member *member, int fd, unsigned char *buf,
                                      relay_error *err)
{
	sha256_ctx *ctx = sha256_new();
	if (ctx == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status status = RELAY_OK;
	uint64_t total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, COPY_CHUNK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			status = relay_error_set(err, RELAY_E_IO, errno, "cannot read %s: %s", member->name,
			                         strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		if (total > member->bytes) {
			status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "%s: %s", opts->changed_reason,
			                         member->name);
			goto cleanup;
		}
		sha256_update(ctx, buf, (size_t)n);
		if (archive_write_data(a, buf, (size_t)n) != n) {
			status = archive_failure(a, opts, err, member->name);
			goto cleanup;
		}
	}
	char hex[SHA256_HEX_LEN + 1];
	sha256_final(ctx, hex);
	ctx = NULL;
	if (total != member->bytes || strcmp(hex, member->sha256) != 0)
		status =
		    relay_error_set(err, RELAY_E_INTEGRITY, 0, "%s: %s", opts->changed_reason, member->name);
cleanup:
	sha256_abort(ctx);
	return status;
}

/* The index member's text: [{path, bytes, sha256}] in archive order. */
static relay_status index_of(const evidence_archive_member *members, size_t count, char **text_out,
                             relay_error *err)
{
	json_object *index = json_object_new_array();
	relay_status status = RELAY_OK;
	*text_out = NULL;
	for (size_t i = 0; index != NULL && i < count; i++) {
		if (!evidence_archive_path_ok(members[i].name) ||
		    strcmp(members[i].name, EVIDENCE_ARCHIVE_INDEX_NAME) == 0) {
			status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "not a safe archive name: %s",
			                         members[i].name);
			goto cleanup;
		}
		json_object *fact = json_object_new_object();
		if (fact == NULL || json_object_array_add(index, fact) != 0 ||
		    !jsonx_add_str(fact, "path", members[i].name) ||
		    !jsonx_add_int(fact, "bytes", (int64_t)members[i].bytes) ||
		    !jsonx_add_str(fact, "sha256", members[i].sha256)) {
			status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
			goto cleanup;
		}
	}
	*text_out = index ? jsonx_to_string(index, 0) : NULL;
	if (*text_out == NULL)
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
cleanup:
	json_object_put(index);
	return status;
}

/* pax_restricted: ustar headers, plus a pax 'x' header only for what ustar
 * cannot hold (here: long names). 512-byte blocks and no padding of the
 * last block, so the archive ends right after the two zero blocks. */
static relay_status open_writer(int out_fd, const evidence_archive_write_options *opts,
                                struct archive **a_out, relay_error *err)
{
	struct archive *a = archive_write_new();
	*a_out = a;
	if (a == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(a, 10240) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open_fd(a, out_fd) != ARCHIVE_OK)
		return archive_failure(a, opts, err, "setup");
	return RELAY_OK;
}

/* Writes the index and every member into the open writer. */
static relay_status write_all_members(struct archive *a, const evidence_archive_write_options *opts,
                                      const evidence_archive_member *members, size_t count,
                                      const char *index_text, evidence_archive_open_fn open_fn,
                                      void *open_ctx, relay_error *err)
{
	unsigned char *buf = malloc(COPY_CHUNK);
	if (buf == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	size_t index_len = strlen(index_text);
	relay_status status = write_header(a, opts, EVIDENCE_ARCHIVE_INDEX_NAME, index_len, time(NULL), err);
	if (status != RELAY_OK)
		goto cleanup;
	if (archive_write_data(a, index_text, index_len) != (la_ssize_t)index_len) {
		status = archive_failure(a, opts, err, EVIDENCE_ARCHIVE_INDEX_NAME);
		goto cleanup;
	}
	for (size_t i = 0; i < count; i++) {
		int fd = open_fn(open_ctx, i, err);
		if (fd < 0) {
			status = err ? err->code : RELAY_E_IO;
			goto cleanup;
		}
		time_t mtime = members[i].mtime_s >= 0 ? (time_t)members[i].mtime_s : time(NULL);
		status = write_header(a, opts, members[i].name, members[i].bytes, mtime, err);
		if (status == RELAY_OK)
			status = write_member_data(a, opts, &members[i], fd, buf, err);
		close(fd);
		if (status != RELAY_OK)
			goto cleanup;
	}
	if (archive_write_close(a) != ARCHIVE_OK)
		status = archive_failure(a, opts, err, "close");
cleanup:
	free(buf);
	return status;
}

relay_status evidence_archive_write_members(const char *archive_path, const evidence_archive_member *members,
                                            size_t count, evidence_archive_open_fn open_fn, void *open_ctx,
                                            const evidence_archive_write_options *opts,
                                            uint64_t *archive_bytes_out, char **index_json_out,
                                            relay_error *err)
{
	relay_status status;
	struct archive *a = NULL;
	char *index_text = NULL;
	int out_fd = -1;
	bool created = false;
	rs_utf8_locale_scope utf8; /* member names are UTF-8 whatever the relay's locale */
	rs_utf8_locale_enter(&utf8);
	if (index_json_out)
		*index_json_out = NULL;
	if (opts == NULL)
		opts = &default_options;
	status = index_of(members, count, &index_text, err);
	if (status != RELAY_OK)
		goto cleanup;
	out_fd = open(archive_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out_fd < 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot create %s %s: %s", opts->what,
		                         archive_path, strerror(errno));
		goto cleanup;
	}
	created = true;
	status = open_writer(out_fd, opts, &a, err);
	if (status == RELAY_OK)
		status = write_all_members(a, opts, members, count, index_text, open_fn, open_ctx, err);
	if (status != RELAY_OK)
		goto cleanup;
	if (opts->sync && fsync(out_fd) != 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s %s: %s", opts->what,
		                         archive_path, strerror(errno));
		goto cleanup;
	}
	struct stat st;
	if (archive_bytes_out && fstat(out_fd, &st) == 0)
		*archive_bytes_out = (uint64_t)st.st_size;
	if (index_json_out) {
		*index_json_out = index_text;
		index_text = NULL;
	}
cleanup:
	if (a != NULL)
		archive_write_free(a);
	if (out_fd >= 0)
		close(out_fd);
	if (status != RELAY_OK && created)
		unlink(archive_path);
	free(index_text);
	rs_utf8_locale_leave(&utf8);
	return status;
}

/* ---- from a folder (relay_host.archive_write) ------------------------------ */

typedef struct folder_item {
	char sha256[SHA256_HEX_LEN + 1];
	dev_t dev;
	ino_t ino;
} folder_item;

typedef struct folder_source {
	int base_fd;
	const evidence_archive_member *members;
	const folder_item *items;
} folder_source;

/* Hashes one file for the index; *missing when it is absent and `present`
 * allows that. */
static relay_status hash_file(int base_fd, const char *path, bool present, evidence_archive_member *member,
                              folder_item *item, bool *missing, relay_error *err)
{
	*missing = false;
	int fd = fw_open_file_read_at(base_fd, path, err);
	if (fd < 0) {
		if (err != NULL && err->code == RELAY_E_NOT_FOUND && present) {
			*missing = true;
			return RELAY_OK;
		}
		return err ? err->code : RELAY_E_IO;
	}
	struct stat st;
	relay_status status = RELAY_OK;
	if (fstat(fd, &st) != 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot stat %s", path);
		goto cleanup;
	}
	status = sha256_fd_hex(fd, item->sha256, &member->bytes, err);
	if (status != RELAY_OK)
		goto cleanup;
	if (member->bytes != (uint64_t)st.st_size) {
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "source changed while hashing: %s", path);
		goto cleanup;
	}
	member->name = path;
	member->sha256 = item->sha256;
	member->mtime_s = (int64_t)st.st_mtim.tv_sec;
	item->dev = st.st_dev;
	item->ino = st.st_ino;
cleanup:
	close(fd);
	return status;
}

/* evidence_archive_open_fn over the hashed files: the same file, still the
 * size it had. */
static int open_folder_member(void *ctx, size_t index, relay_error *err)
{
	const folder_source *src = ctx;
	const evidence_archive_member *member = &src->members[index];
	int fd = fw_open_file_read_at(src->base_fd, member->name, err);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_dev != src->items[index].dev || st.st_ino != src->items[index].ino ||
	    (uint64_t)st.st_size != member->bytes) {
		relay_error_set(err, RELAY_E_INTEGRITY, 0, "source changed while archiving: %s",
		                member->name);
		close(fd);
		return -1;
	}
	return fd;
}

/* The paths are strict, not the index's name, and each listed once. */
static relay_status check_paths(const char *const *rel_paths, size_t count, relay_error *err)
{
	for (size_t i = 0; i < count; i++) {
		if (!evidence_archive_path_ok(rel_paths[i]) ||
		    strcmp(rel_paths[i], EVIDENCE_ARCHIVE_INDEX_NAME) == 0)
			return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                       "archive_write: path not allowed in an evidence archive: %s",
			                       rel_paths[i]);
		for (size_t j = 0; j < i; j++)
			if (strcmp(rel_paths[i], rel_paths[j]) == 0)
				return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
				                       "archive_write: %s is listed twice", rel_paths[i]);
	}
	return RELAY_OK;
}

relay_status evidence_archive_write(const char *archive_path, const char *base_dir,
                                    const char *const *rel_paths, unsigned flags, char **index_json_out,
                                    relay_error *err)
{
	relay_status status = RELAY_OK;
	int base_fd = -1;
	size_t count = 0, kept = 0;
	evidence_archive_member *members = NULL;
	folder_item *items = NULL;

	if (index_json_out)
		*index_json_out = NULL;
	if (archive_path == NULL || base_dir == NULL || rel_paths == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "archive_write needs an archive path, a base folder and a path list");
	if (flags & ~RELAY_ARCHIVE_PRESENT)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "archive_write: unknown flags 0x%x",
		                       flags & ~RELAY_ARCHIVE_PRESENT);
	while (rel_paths[count] != NULL)
		count++;
	status = check_paths(rel_paths, count, err);
	if (status != RELAY_OK)
		return status;

	base_fd = open(base_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (base_fd < 0) {
		status = relay_error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                         "cannot open base folder %s: %s", base_dir, strerror(errno));
		goto cleanup;
	}
	members = calloc(count ? count : 1, sizeof *members);
	items = calloc(count ? count : 1, sizeof *items);
	if (members == NULL || items == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	for (size_t i = 0; i < count; i++) {
		bool missing = false;
		status = hash_file(base_fd, rel_paths[i], (flags & RELAY_ARCHIVE_PRESENT) != 0,
		                   &members[kept], &items[kept], &missing, err);
		if (status != RELAY_OK)
			goto cleanup;
		if (!missing)
			kept++;
	}
	folder_source src = {.base_fd = base_fd, .members = members, .items = items};
	status = evidence_archive_write_members(archive_path, members, kept, open_folder_member, &src, NULL,
	                                        NULL, index_json_out, err);
cleanup:
	if (base_fd >= 0)
		close(base_fd);
	free(members);
	free(items);
	return status;
}
