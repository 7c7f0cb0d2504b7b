/*
 * Evidence packages (evidence/package.c, evidence/review.c): the journal,
 * the records and receipts, the manifest and the review of a package a
 * person opens later. The input is a package written as records
 *
 *     ==> <relative path>\n<contents up to the next "\n==> " or the end>
 *
 * written under <scratch>/project/relay-evidence/p/ (paths with an empty,
 * "." or ".." segment are skipped: the harness must not write elsewhere).
 * Then the review is derived with verification (as `mcp-relay review`
 * does) and the package is verified on its own.
 *
 * Invariants: the derivation gives review data whatever the package holds
 * (a hard error is a finding, never a failure to answer); its verdict
 * agrees with evidence_package_verify; every verification error names a
 * file ("package verification failed: <file>: <why>"). (The review keeps
 * the package's bytes as they are; the MCP stream repairs what is not
 * UTF-8 where it is written, mcp/server.c.)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "evidence/package.h"
#include "evidence/review.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

#include "fuzz.h"

#define MARK "==> "

static bool safe_rel(const char *rel)
{
	if (rel[0] == '\0' || rel[0] == '/' || strlen(rel) > 200)
		return false;
	const char *seg = rel;
	for (;;) {
		const char *slash = strchr(seg, '/');
		size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
		if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
		if (!slash)
			return true;
		seg = slash + 1;
	}
}

/* mkdir -p of the parents of <base>/<rel>; false when one is not a folder. */
static bool make_parents(const char *base, const char *rel)
{
	char path[4400];
	int n = snprintf(path, sizeof path, "%s/%s", base, rel);
	if (n < 0 || (size_t)n >= sizeof path)
		return false;
	for (char *p = path + strlen(base) + 1; (p = strchr(p, '/')) != NULL; p++) {
		*p = '\0';
		int rc = mkdir(path, 0700);
		*p = '/';
		if (rc != 0 && errno != EEXIST)
			return false;
	}
	return true;
}

static void write_package(const char *pkg, const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = (const char *)data + size;
	if ((size_t)(end - p) < strlen(MARK) || memcmp(p, MARK, strlen(MARK)) != 0)
		return;
	while (p < end) {
		p += strlen(MARK);
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			return;
		char rel[256];
		size_t rel_len = (size_t)(nl - p);
		const char *body = nl + 1;
		const char *next = body;
		const char *stop = end;
		while (next < end) {
			const char *hit = memchr(next, '\n', (size_t)(end - next));
			if (hit == NULL)
				break;
			if ((size_t)(end - hit - 1) >= strlen(MARK) &&
			    memcmp(hit + 1, MARK, strlen(MARK)) == 0) {
				stop = hit;
				break;
			}
			next = hit + 1;
		}
		if (rel_len < sizeof rel && memchr(p, '\0', rel_len) == NULL) {
			memcpy(rel, p, rel_len);
			rel[rel_len] = '\0';
			if (safe_rel(rel) && make_parents(pkg, rel)) {
				char path[4400];
				int n = snprintf(path, sizeof path, "%s/%s", pkg, rel);
				/* A record "x/" or one naming an existing folder is skipped by the failed
				 * open; a path too long for the buffer is skipped too. */
				if (n > 0 && (size_t)n < sizeof path)
					fuzz_write_file(path, body, (size_t)(stop - body));
			}
		}
		p = stop < end ? stop + 1 : end;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char project[4200], pkg[4300];
	snprintf(project, sizeof project, "%s/project", fuzz_scratch_dir());
	snprintf(pkg, sizeof pkg, "%s/relay-evidence/p", project);
	fuzz_remove_tree(project);
	if (mkdir(project, 0700) != 0 || !make_parents(project, "relay-evidence/p/x"))
		fuzz_fail("cannot create %s: %s", pkg, strerror(errno));
	write_package(pkg, data, size);

	evidence_identity identity = {.package_id = "pkg-p", .task_id = "p", .guest = "g-1"};
	evidence_review_options opts = {
	    .verify = true, .project_dir = project, .now_ms = 1790000000000, .identity = &identity};
	json_object *review = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = evidence_review_derive(pkg, &opts, &review, &err);
	if (st != RELAY_OK && st != RELAY_E_NO_MEMORY)
		fuzz_fail("the review could not be derived (status %d): %s", (int)st, err.message);
	if (st != RELAY_OK)
		return 0;
	strbuf sb = STRBUF_INIT;
	jsonx_write(&sb, review, 0);
	if (!strbuf_ok(&sb) || sb.len == 0)
		fuzz_fail("the review data does not serialise");
	strbuf_free(&sb);

	fw_strlist errors;
	memset(&errors, 0, sizeof errors);
	relay_error verr;
	memset(&verr, 0, sizeof verr);
	relay_status vst = evidence_package_verify(pkg, project, &errors, &verr);
	for (size_t i = 0; i < errors.count; i++)
		if (strncmp(errors.items[i], "package verification failed: ", 29) != 0)
			fuzz_fail("a verification error names no file: %s", errors.items[i]);
	if (vst == RELAY_OK && !evidence_review_verified(review))
		fuzz_fail("the package verifies but its review says it does not");
	fw_strlist_free(&errors);
	json_object_put(review);

	/* The journal on its own: a failure names its line. */
	json_object *lines = NULL;
	memset(&err, 0, sizeof err);
	st = evidence_journal_load(pkg, &lines, &err);
	if (st == RELAY_OK && !json_object_is_type(lines, json_type_array))
		fuzz_fail("a loaded journal is not an array");
	json_object_put(lines);
	return 0;
}
