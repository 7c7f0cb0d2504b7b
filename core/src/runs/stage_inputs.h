/*
 * runs/stage_inputs.h — relay_stage's host inputs (spec/tools.md §3.5 step 2,
 * spec/guest.md §3.4 step 1) on their own, without a session or a guest: the
 * workspace and support files of a request resolved under the project
 * folder (host_paths.h), walked, checked against the limits and against
 * each other, and hashed. stage_inputs.c; stage_internal.h embeds the
 * result in a stage's context.
 */
#ifndef RELAY_RUNS_STAGE_INPUTS_H
#define RELAY_RUNS_STAGE_INPUTS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "runs/host_paths.h"
#include "util/outcome.h"

#define STAGE_MAX_FILES 10000
#define STAGE_MAX_BYTES 536870912ull /* 512 MiB */

/* One support file of the request. */
typedef struct support_file {
	host_path src;
	const char *path; /* destination below support/, borrowed from the request */
	char sha256[65];  /* filled by stage_inputs_hash() */
} support_file;

/* The host inputs of one request. Zero it before stage_inputs_check(); free
 * it with stage_inputs_free() after a success or a failure. */
typedef struct stage_inputs {
	bool has_workspace;
	host_path workspace;
	host_tree tree;
	support_file *files;
	size_t file_count;
	uint64_t total_bytes; /* the workspace's bytes and the support files' */
} stage_inputs;

/* Resolves and walks `args`' workspace and files (relay_stage's validated
 * arguments, borrowed for the life of `in`) under `project` (the real
 * project folder P′; `project_given` is P as configured) and checks the
 * limits. 0; or -1 with `o` failed: path-refused (a path outside the
 * project, a link, a special file), invalid-input (two files with one
 * destination, or a file and a folder: a refused request, nothing of the
 * guest's), staging-limit (over STAGE_MAX_FILES files or STAGE_MAX_BYTES),
 * internal. Reads the host only. */
int stage_inputs_check(const char *project, const char *project_given, json_object *args, stage_inputs *in,
                       relay_outcome *o);

/* Why stage_inputs_hash() failed. */
typedef struct stage_hash_failure {
	bool changed;      /* a source changed since it was walked: integrity-failed */
	bool is_workspace; /* the workspace, not a support file */
	char why[1024];
} stage_hash_failure;

/* The SHA-256 of every input (the workspace tree's files, each support
 * file's sha256 and bytes). 0, or -1 with `failure` filled. */
int stage_inputs_hash(const char *project, stage_inputs *in, stage_hash_failure *failure);

void stage_inputs_free(stage_inputs *in);

#endif
