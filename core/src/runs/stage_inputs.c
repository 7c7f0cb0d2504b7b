/* relay_stage step 2: host inputs and limits, and their hashes (guest.md §3.4
 * step 1); see stage_internal.h. */
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

int stage_check_inputs(stage_ctx *s)
{
	char why[1024];
	const char *workspace = jsonx_get_str(s->args, "workspace");
	if (workspace) {
		if (host_path_resolve(s->project, s->m->settings->project_given, workspace, HOST_PATH_DIR,
		                      &s->workspace, why, sizeof why) != 0)
			return stage_fail(s, "path-refused", "workspace refused: %s", why);
		s->has_workspace = true;
		if (host_tree_walk(s->project, &s->workspace, "the workspace", &s->tree, why, sizeof why) !=
		    0)
			return stage_fail(s, "path-refused", "workspace refused: %s", why);
	}
	json_object *files = jsonx_get_array(s->args, "files");
	size_t n = files ? json_object_array_length(files) : 0;
	s->files = calloc(n ? n : 1, sizeof *s->files);
	if (s->files == NULL)
		return stage_fail(s, "internal", "out of memory checking the support files");
	for (size_t i = 0; i < n; i++) {
		json_object *f = json_object_array_get_idx(files, i);
		support_file *sf = &s->files[i];
		sf->path = jsonx_get_str(f, "path");
		if (host_path_resolve(s->project, s->m->settings->project_given, jsonx_get_str(f, "local"),
		                      HOST_PATH_FILE, &sf->src, why, sizeof why) != 0)
			return stage_fail(s, "path-refused", "files[%zu].local refused: %s", i, why);
		s->file_count++;
	}
	/* Two entries may not name one destination, nor a file and a folder. */
	support_file *sorted = malloc((n ? n : 1) * sizeof *sorted);
	if (sorted == NULL)
		return stage_fail(s, "internal", "out of memory checking the support files");
	memcpy(sorted, s->files, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, path_cmp_slash_first);
	for (size_t i = 0; i + 1 < n; i++) {
		size_t len = strlen(sorted[i].path);
		if (strcmp(sorted[i].path, sorted[i + 1].path) == 0 ||
		    (strncmp(sorted[i].path, sorted[i + 1].path, len) == 0 &&
		     sorted[i + 1].path[len] == '/')) {
			outcome_fail(s->o, "invalid-input",
			             "Invalid relay_stage input: /files names support/%s and support/%s, "
			             "which collide; give each file its own destination",
			             sorted[i].path, sorted[i + 1].path);
			free(sorted);
			return -1;
		}
	}
	free(sorted);
	uint64_t count = s->tree.count + s->file_count;
	uint64_t bytes = s->tree.total_bytes;
	for (size_t i = 0; i < s->file_count; i++)
		bytes += s->files[i].src.bytes;
	s->total_bytes = bytes;
	if (count > STAGE_MAX_FILES || bytes > STAGE_MAX_BYTES)
		return stage_fail(
		    s, "staging-limit",
		    "the staging request holds %llu files and %llu bytes (workspace %zu files, %llu bytes; "
		    "support files %zu); at most %d files and %llu bytes (512 MiB) are accepted; nothing "
		    "was sent",
		    (unsigned long long)count, (unsigned long long)bytes, s->tree.count,
		    (unsigned long long)s->tree.total_bytes, s->file_count, STAGE_MAX_FILES,
		    (unsigned long long)STAGE_MAX_BYTES);
	return 0;
}

/* The host's SHA-256 of every input (guest.md §3.4 step 1). It runs on a
 * thread of its own while the platform is probed and the receiver staged
 * (nothing of the inputs is sent before stage_hash_join()). */
static void *hash_main(void *arg)
{
	stage_ctx *s = arg;
	bool changed = false;
	s->hash_failed = false;
	if (s->has_workspace && host_tree_hash(s->project, &s->workspace, &s->tree, &changed, s->hash_why,
	                                       sizeof s->hash_why) != 0) {
		s->hash_failed = true;
		s->hash_changed = changed;
		s->hash_is_workspace = true;
		return NULL;
	}
	for (size_t i = 0; i < s->file_count; i++) {
		uint64_t b = 0;
		if (host_path_hash(s->project, &s->files[i].src, s->files[i].sha256, &b, &changed,
		                   s->hash_why, sizeof s->hash_why) != 0) {
			s->hash_failed = true;
			s->hash_changed = changed;
			return NULL;
		}
		s->files[i].src.bytes = b;
	}
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
	if (!s->hash_failed)
		return 0;
	s->hash_failed = false;
	return stage_fail(s, s->hash_changed ? "integrity-failed" : "path-refused", "%s%s",
	                  s->hash_changed        ? "staging source changed: "
	                  : s->hash_is_workspace ? "workspace refused: "
	                                         : "support file refused: ",
	                  s->hash_why);
}
