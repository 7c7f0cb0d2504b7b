#include "ssh_facts.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "relay_kit/xfer.h"

void ssh_facts_free(ssh_facts *facts)
{
	for (size_t i = 0; i < facts->count; i++)
		free(facts->items[i].path);
	free(facts->items);
	*facts = (ssh_facts)SSH_FACTS_INIT;
}

bool ssh_facts_add(ssh_facts *facts, const char *path, uint64_t bytes, const char sha256_hex[65])
{
	if (facts->failed)
		return false;
	if (facts->count == facts->capacity) {
		size_t cap = facts->capacity ? facts->capacity * 2 : 64;
		ssh_fact *grown = realloc(facts->items, cap * sizeof *grown);
		if (grown == NULL) {
			facts->failed = true;
			return false;
		}
		facts->items = grown;
		facts->capacity = cap;
	}
	char *copy = strdup(path);
	if (copy == NULL) {
		facts->failed = true;
		return false;
	}
	ssh_fact *f = &facts->items[facts->count++];
	f->path = copy;
	f->bytes = bytes;
	memcpy(f->sha256, sha256_hex, 64);
	f->sha256[64] = '\0';
	return true;
}

static int fact_cmp(const void *a, const void *b)
{
	return strcmp(((const ssh_fact *)a)->path, ((const ssh_fact *)b)->path);
}

void ssh_facts_sort(ssh_facts *facts)
{
	if (facts->count > 1)
		qsort(facts->items, facts->count, sizeof facts->items[0], fact_cmp);
}

/* Finds "\n<marker>\n" (or the marker at the very start); returns the
 * offset just after it, or (size_t)-1. */
static size_t find_marker(const char *text, size_t len, size_t from, const char *marker)
{
	size_t mlen = strlen(marker);
	for (size_t i = from; i + mlen + 1 <= len; i++) {
		if ((i == 0 || text[i - 1] == '\n') && memcmp(text + i, marker, mlen) == 0 &&
		    text[i + mlen] == '\n')
			return i + mlen + 1;
	}
	return (size_t)-1;
}

static bool is_hex64(const char *p)
{
	for (int i = 0; i < 64; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return false;
	return true;
}

/* "./a/b" -> "a/b" in place; false when the name does not start with "./". */
static bool strip_dot_slash(char *name, char **rel_out)
{
	if (strncmp(name, "./", 2) != 0)
		return false;
	*rel_out = name + 2;
	return true;
}

/* sha256sum escapes names holding '\\' or '\n' with a leading backslash
 * on the line; the guest refuses such names, but undo it if it happens. */
static void unescape_name(char *name)
{
	char *w = name;
	for (char *r = name; *r; r++) {
		if (*r == '\\' && r[1] == 'n') {
			*w++ = '\n';
			r++;
		} else if (*r == '\\' && r[1] == '\\') {
			*w++ = '\\';
			r++;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* The line of buf that starts at *at (before `end`), cut at its '\n' and
 * NUL-terminated; *at moves past it, *len_out (may be NULL) its length. */
static char *take_line(char *buf, size_t *at, size_t end, size_t *len_out)
{
	char *line = buf + *at;
	char *nl = memchr(line, '\n', end - *at);
	size_t len = nl ? (size_t)(nl - line) : end - *at;
	line[len] = '\0';
	*at += len + 1;
	if (len_out)
		*len_out = len;
	return line;
}

typedef struct sized {
	char *path;
	uint64_t bytes;
} sized;

static int sized_cmp(const void *a, const void *b)
{
	return strcmp(((const sized *)a)->path, ((const sized *)b)->path);
}

relay_status ssh_facts_parse(const relay_host *host, const char *text, size_t len, bool single,
                             ssh_facts *out, bool *no_hash_out, relay_error *err)
{
	relay_status status = RELAY_OK;
	char *copy = NULL;
	ssh_facts hashes = SSH_FACTS_INIT;
	sized *sizes = NULL;
	size_t nsizes = 0, capsizes = 0;
	*no_hash_out = false;

	if (find_marker(text, len, 0, "\036relay-nohash") != (size_t)-1) {
		*no_hash_out = true;
		goto cleanup;
	}
	size_t h = find_marker(text, len, 0, "\036relay-hashes");
	size_t s = h == (size_t)-1 ? h : find_marker(text, len, h, "\036relay-sizes");
	size_t d = s == (size_t)-1 ? s : find_marker(text, len, s, "\036relay-done");
	if (d == (size_t)-1) {
		status = host->error_set(
		    err, RELAY_E_PROTOCOL, 0,
		    "the guest's file facts were incomplete (the hashing in the guest stopped "
		    "early)");
		goto cleanup;
	}
	copy = malloc(len + 1);
	if (copy == NULL) {
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory reading the guest's facts");
		goto cleanup;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	size_t sizes_marker = s - strlen("\036relay-sizes") - 1;
	size_t done_marker = d - strlen("\036relay-done") - 1;

	/* Hash lines between the hashes and sizes markers. */
	for (size_t i = h; i < sizes_marker;) {
		size_t line_len = 0;
		char *line = take_line(copy, &i, sizes_marker, &line_len);
		if (line_len == 0)
			continue;
		bool escaped = line[0] == '\\';
		char *p = line + (escaped ? 1 : 0);
		char *rel = NULL;
		if (strlen(p) < 67 || !is_hex64(p) || p[64] != ' ' || (p[65] != ' ' && p[65] != '*') ||
		    !strip_dot_slash(p + 66, &rel)) {
			status = host->error_set(
			    err, RELAY_E_PROTOCOL, 0,
			    "the guest's sha256 tool printed a line this transport cannot read");
			goto cleanup;
		}
		if (escaped)
			unescape_name(rel);
		char hex[65];
		memcpy(hex, p, 64);
		hex[64] = '\0';
		if (!ssh_facts_add(&hashes, rel, 0, hex)) {
			status = host->error_set(err, RELAY_E_NO_MEMORY, 0,
			                         "out of memory reading the guest's facts");
			goto cleanup;
		}
	}
	/* Size lines between the sizes and done markers. */
	for (size_t i = s; i < done_marker;) {
		char *p = take_line(copy, &i, done_marker, NULL);
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			continue;
		uint64_t bytes = 0;
		while (*p >= '0' && *p <= '9') {
			bytes = bytes * 10 + (uint64_t)(*p - '0');
			p++;
		}
		if (*p != ' ' && *p != '\t')
			continue;
		while (*p == ' ' || *p == '\t')
			p++;
		char *rel = NULL;
		if (!strip_dot_slash(p, &rel))
			continue; /* the "total" lines of wc */
		if (nsizes == capsizes) {
			size_t cap = capsizes ? capsizes * 2 : 64;
			sized *grown = realloc(sizes, cap * sizeof *grown);
			if (grown == NULL) {
				status = host->error_set(err, RELAY_E_NO_MEMORY, 0,
				                         "out of memory reading the guest's facts");
				goto cleanup;
			}
			sizes = grown;
			capsizes = cap;
		}
		sizes[nsizes++] = (sized){rel, bytes};
	}
	ssh_facts_sort(&hashes);
	if (nsizes > 1)
		qsort(sizes, nsizes, sizeof sizes[0], sized_cmp);
	if (nsizes != hashes.count) {
		status = host->error_set(
		    err, RELAY_E_PROTOCOL, 0,
		    "the guest listed %zu hashes but %zu sizes; the files changed while the guest "
		    "measured them",
		    hashes.count, nsizes);
		goto cleanup;
	}
	if (single && hashes.count != 1) {
		status = host->error_set(err, RELAY_E_PROTOCOL, 0,
		                         "the guest reported %zu files where exactly one was expected",
		                         hashes.count);
		goto cleanup;
	}
	for (size_t i = 0; i < hashes.count; i++) {
		if (strcmp(hashes.items[i].path, sizes[i].path) != 0 ||
		    (i > 0 && strcmp(hashes.items[i - 1].path, hashes.items[i].path) == 0)) {
			status = host->error_set(
			    err, RELAY_E_PROTOCOL, 0,
			    "the guest's hash and size lists disagree; the files changed while "
			    "the guest measured them");
			goto cleanup;
		}
		if (!ssh_facts_add(out, single ? "" : hashes.items[i].path, sizes[i].bytes,
		                   hashes.items[i].sha256)) {
			status = host->error_set(err, RELAY_E_NO_MEMORY, 0,
			                         "out of memory reading the guest's facts");
			goto cleanup;
		}
	}
cleanup:
	ssh_facts_free(&hashes);
	free(sizes);
	free(copy);
	return status;
}

/* Copies a path for a message, replacing control bytes. */
static void safe_path(const char *path, char *out, size_t out_len)
{
	size_t j = 0;
	for (size_t i = 0; path[i] && j + 1 < out_len; i++) {
		unsigned char ch = (unsigned char)path[i];
		out[j++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
	}
	out[j] = '\0';
	if (j == 0 && out_len > 12)
		strcpy(out, "(the file)");
}

relay_status ssh_facts_compare(const relay_host *host, const char *what, const ssh_facts *sent,
                               const ssh_facts *arrived, relay_error *err)
{
	size_t i = 0, j = 0;
	char name[120];
	while (i < sent->count || j < arrived->count) {
		int c = i == sent->count      ? 1
		        : j == arrived->count ? -1
		                              : strcmp(sent->items[i].path, arrived->items[j].path);
		if (c < 0) {
			safe_path(sent->items[i].path, name, sizeof name);
			return host->error_set(err, RELAY_E_INTEGRITY, 0,
			                       "%s: %s is missing on the receiving side", what, name);
		}
		if (c > 0) {
			safe_path(arrived->items[j].path, name, sizeof name);
			return host->error_set(err, RELAY_E_INTEGRITY, 0, "%s: %s arrived but was never sent",
			                       what, name);
		}
		const ssh_fact *a = &sent->items[i], *b = &arrived->items[j];
		if (a->bytes != b->bytes || strcmp(a->sha256, b->sha256) != 0) {
			safe_path(a->path, name, sizeof name);
			return host->error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "%s: %s differs (sent %llu bytes sha256 %.12s..., arrived %llu bytes "
			    "sha256 %.12s...)",
			    what, name, (unsigned long long)a->bytes, a->sha256, (unsigned long long)b->bytes,
			    b->sha256);
		}
		i++;
		j++;
	}
	return RELAY_OK;
}

char *ssh_facts_json(const relay_host *host, const ssh_facts *facts)
{
	char *result = NULL;
	json_object *array = json_object_new_array();
	if (array == NULL)
		return NULL;
	for (size_t i = 0; i < facts->count; i++)
		if (rk_xfer_fact_add(array, facts->items[i].path, facts->items[i].bytes,
		                     facts->items[i].sha256) != 0)
			goto cleanup;
	result = host->strdup(
	    json_object_to_json_string_ext(array, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
cleanup:
	json_object_put(array);
	return result;
}

relay_status ssh_facts_answer(const relay_host *host, const ssh_facts *facts, bool no_hash,
                              char **facts_json_out, relay_error *err)
{
	if (facts_json_out == NULL || no_hash)
		return RELAY_OK;
	*facts_json_out = ssh_facts_json(host, facts);
	return *facts_json_out ? RELAY_OK : host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}
