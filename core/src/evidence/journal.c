/*
 * Reading a package's files as hostile input (journal.h).
 */
#include "evidence/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evidence/fswalk.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

enum { MAX_JOURNAL_BYTES = 1 << 30 };

/* Reads a whole file below root_fd (link-safe) into a NUL-terminated buffer. */
relay_status evidence_read_rel(int root_fd, const char *rel, size_t max, char **out, size_t *len_out,
                               relay_error *err)
{
	*out = NULL;
	int fd = fw_open_file_read_at(root_fd, rel, err);
	if (fd < 0)
		return err ? err->code : RELAY_E_IO;
	relay_status status = fs_read_fd(fd, rel, max, out, len_out, err);
	close(fd);
	return status;
}

relay_status evidence_hash_rel(int root_fd, const char *rel, char hex[65], uint64_t *bytes, relay_error *err)
{
	int fd = fw_open_file_read_at(root_fd, rel, err);
	if (fd < 0)
		return err ? err->code : RELAY_E_IO;
	relay_status status = sha256_fd_hex(fd, hex, bytes, err);
	close(fd);
	return status;
}

/* ---- journal ----------------------------------------------------------------- */

/* JSON a guest wrote (a journal line, a record, a receipt). One with bytes
 * that are not UTF-8 (an earlier receiver copied a capture program's
 * stderr raw) is read with U+FFFD in their place, so the package is still
 * reviewed and delivered rather than lost; the file, which the manifest
 * hashes, keeps its original bytes. NULL when it is not JSON either way. */
json_object *evidence_parse_guest_json(const char *text, size_t len, char *why, size_t why_len)
{
	json_object *obj = jsonx_parse(text, len, NULL, why, why_len);
	if (obj != NULL || utf8_valid(text, len))
		return obj;
	size_t repaired_len = 0;
	char *repaired = utf8_sanitize(text, len, &repaired_len);
	if (repaired != NULL)
		obj = jsonx_parse(repaired, repaired_len, NULL, why, why_len);
	free(repaired);
	return obj;
}

relay_status evidence_journal_load(const char *package_dir, json_object **lines_out, relay_error *err)
{
	*lines_out = NULL;
	int root = fw_open_root(package_dir);
	if (root < 0)
		return relay_error_set(err, RELAY_E_IO, errno, "cannot open package %s: %s", package_dir,
		                       strerror(errno));
	char *text = NULL;
	size_t len = 0;
	relay_status status =
	    evidence_read_rel(root, "state/journal/events.jsonl", MAX_JOURNAL_BYTES, &text, &len, err);
	close(root);
	if (status != RELAY_OK)
		return status;
	json_object *arr = json_object_new_array();
	if (arr == NULL) {
		free(text);
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	size_t line_no = 0, pos = 0;
	while (pos < len) {
		line_no++;
		char *nl = memchr(text + pos, '\n', len - pos);
		if (nl == NULL) {
			status = relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "state/journal/events.jsonl: line %zu is unterminated (damaged tail)", line_no);
			goto fail;
		}
		size_t n = (size_t)(nl - (text + pos));
		char why[128] = "";
		json_object *line = evidence_parse_guest_json(text + pos, n, why, sizeof why);
		if (line == NULL || !json_object_is_type(line, json_type_object)) {
			json_object_put(line);
			status =
			    relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                    "state/journal/events.jsonl: line %zu is not a JSON object%s%s",
			                    line_no, why[0] ? ": " : "", why);
			goto fail;
		}
		json_object_array_add(arr, line);
		pos += n + 1;
	}
	free(text);
	*lines_out = arr;
	return RELAY_OK;
fail:
	free(text);
	json_object_put(arr);
	return status;
}
