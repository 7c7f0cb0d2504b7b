/* relay_stage step 2: host inputs and limits, and their hashes (spec/guest.md §3.4
 * step 1): stage_inputs.h on its own, and the stage's use of it
 * (stage_internal.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runs/stage_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

/* ---- step 2: host inputs ---------------------------------------------------------- */

static int path_cmp_slash_first(const void *a, const void *b)
{
	const unsigned char *x = (const unsigned char *)((const support_file *)a)->path;
	const unsigned char *y = (const unsigned char *)((const support_file *)b)->path;
	for (;; x++, y++) {
		unsigned cx = *x == '/' ? 1 : (*x ? *x + 1u : 0), cy = *y == '/' ? 1 : (*y ? *y + 1u : 0);
		if (cx != cy)
			return cx < cy ? -1 : 1;
		if (cx == 0)
			return 0;
	}
}

int stage_inputs_check(const char *project, const char *project_given, json_object *args, stage_inputs *in,
                       relay_outcome *o)
{
	char why[1024];
	const char *workspace = jsonx_get_str(args, "workspace");
	if (workspace) {
		if (host_path_resolve(project, project_given, workspace, HOST_PATH_DIR, &in->workspace, why,
		                      sizeof why) != 0)
			return outcome_fail(o, "path-refused", "workspace refused: %s", why);
		in->has_workspace = true;
		if (host_tree_walk(project, &in->workspace, "the workspace", &in->tree, why, sizeof why) != 0)
			return outcome_fail(o, "path-refused", "workspace refused: %s", why);
	}
	json_object *files = jsonx_get_array(args, "files");
	size_t n = files ? json_object_array_length(files) : 0;
	in->files = calloc(n ? n : 1, sizeof *in->files);
	if (in->files == NULL)
		return outcome_fail(o, "internal", "out of memory checking the support files");
	for (size_t i = 0; i < n; i++) {
		json_object *f = json_object_array_get_idx(files, i);
		support_file *sf = &in->files[i];
		sf->path = jsonx_get_str(f, "path");
		if (host_path_resolve(project, project_given, jsonx_get_str(f, "local"), HOST_PATH_FILE,
		                      &sf->src, why, sizeof why) != 0)
			return outcome_fail(o, "path-refused", "files[%zu].local refused: %s", i, why);
		in->file_count++;
	}
	/* Two entries may not name one destination, nor a file and a folder. */
	support_file *sorted = malloc((n ? n : 1) * sizeof *sorted);
	if (sorted == NULL)
		return outcome_fail(o, "internal", "out of memory checking the support files");
	memcpy(sorted, in->files, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, path_cmp_slash_first);
	for (size_t i = 0; i + 1 < n; i++) {
		size_t len = strlen(sorted[i].path);
		if (strcmp(sorted[i].path, sorted[i + 1].path) == 0 ||
		    (strncmp(sorted[i].path, sorted[i + 1].path, len) == 0 &&
		     sorted[i + 1].path[len] == '/')) {
			outcome_fail(o, "invalid-input",
			             "Invalid relay_stage input: /files names support/%s and support/%s, "
			             "which collide; give each file its own destination",
			             sorted[i].path, sorted[i + 1].path);
			free(sorted);
			return -1;
		}
	}
	free(sorted);
	uint64_t count = in->tree.count + in->file_count;
	uint64_t bytes = in->tree.total_bytes;
	for (size_t i = 0; i < in->file_count; i++)
		bytes += in->files[i].src.bytes;
	in->total_bytes = bytes;
	if (count > STAGE_MAX_FILES || bytes > STAGE_MAX_BYTES)
		return outcome_fail(
		    o, "staging-limit",
		    "the staging request holds %llu files and %llu bytes (workspace %zu files, %llu bytes; "
		    "support files %zu); at most %d files and %llu bytes (512 MiB) are accepted; nothing "
		    "was sent",
		    (unsigned long long)count, (unsigned long long)bytes, in->tree.count,
		    (unsigned long long)in->tree.total_bytes, in->file_count, STAGE_MAX_FILES,
		    (unsigned long long)STAGE_MAX_BYTES);
	return 0;
}

void stage_inputs_free(stage_inputs *in)
{
	host_path_free(&in->workspace);
	host_tree_free(&in->tree);
	for (size_t i = 0; i < in->file_count; i++)
		host_path_free(&in->files[i].src);
	free(in->files);
	memset(in, 0, sizeof *in);
}

int stage_check_inputs(stage_ctx *s)
{
	relay_outcome check = OUTCOME_INIT;
	int rc = 0;
	if (stage_inputs_check(s->project, s->m->settings->project_given, s->args, &s->in, &check) != 0) {
		/* A refused request (colliding destinations) is the caller's
		 * input, not a failure of the guest: answered, not recorded. */
		if (strcmp(check.code, "invalid-input") == 0)
			rc = outcome_fail(s->o, check.code, "%s", check.message);
		else
			rc = stage_fail(s, check.code, "%s", check.message);
	}
	outcome_free(&check);
	return rc;
}

int stage_inputs_hash(const char *project, stage_inputs *in, stage_hash_failure *failure)
{
	memset(failure, 0, sizeof *failure);
	bool changed = false;
	if (in->has_workspace && host_tree_hash(project, &in->workspace, &in->tree, &changed, failure->why,
	                                        sizeof failure->why) != 0) {
		failure->changed = changed;
		failure->is_workspace = true;
		return -1;
	}
	for (size_t i = 0; i < in->file_count; i++) {
		uint64_t b = 0;
		if (host_path_hash(project, &in->files[i].src, in->files[i].sha256, &b, &changed,
		                   failure->why, sizeof failure->why) != 0) {
			failure->changed = changed;
			return -1;
		}
		in->files[i].src.bytes = b;
	}
	return 0;
}

/* The host's SHA-256 of every input (spec/guest.md §3.4 step 1). It runs on a
 * thread of its own while the platform is probed and the receiver staged
 * (nothing of the inputs is sent before stage_hash_join()). */
static void *hash_main(void *arg)
{
	stage_ctx *s = arg;
	s->hash_rc = stage_inputs_hash(s->project, &s->in, &s->hash_failure);
	return NULL;
}

void stage_hash_start(stage_ctx *s)
{
	s->hashing = pthread_create(&s->hash_thread, NULL, hash_main, s) == 0;
	if (!s->hashing)
		hash_main(s);
}

/* Waits for the host hashes; NULL, or the failure. */
int stage_hash_join(stage_ctx *s)
{
	if (s->hashing) {
		pthread_join(s->hash_thread, NULL);
		s->hashing = false;
	}
	if (s->hash_rc == 0)
		return 0;
	s->hash_rc = 0;
	const stage_hash_failure *f = &s->hash_failure;
	return stage_fail(s, f->changed ? "integrity-failed" : "path-refused", "%s%s",
	                  f->changed        ? "staging source changed: "
	                  : f->is_workspace ? "workspace refused: "
	                                    : "support file refused: ",
	                  f->why);
}
