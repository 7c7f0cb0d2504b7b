/* plugin-test checks 30-36: push and pull of files and trees, their facts
 * and the path rules (relay/transport.h). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/plugin_test.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

/* The files the checks move: a tree with a nested folder, NUL bytes and a
 * name that sorts before its folder's ("sub.txt" < "sub/..."). */
typedef struct pt_file {
	const char *rel;
	const char *data;
	size_t len;
} pt_file;

static const pt_file tree_files[] = {
    {"a.txt", "the first file\n", 15},
    {"sub.txt", "sorted before sub/\n", 19},
    {"sub/b.bin", "bin\0ary\0", 8},
    {"sub/deeper/c", "c", 1},
};
#define TREE_FILES (sizeof tree_files / sizeof tree_files[0])
static const pt_file one_file = {"", "one file, pushed and pulled\n", 28};

static relay_status write_local(const char *root, const pt_file *f, relay_error *err)
{
	char path[1024];
	snprintf(path, sizeof path, "%s%s%s", root, f->rel[0] ? "/" : "", f->rel);
	char *parent = fs_dirname(path);
	relay_status st = parent ? fs_mkdir_p(parent, 0700, err) : RELAY_E_NO_MEMORY;
	free(parent);
	return st == RELAY_OK ? fs_write_exclusive(path, f->data, f->len, 0600, err) : st;
}

/* NULL when `facts` (JSON text) lists exactly `files`, sorted by path, with
 * their sizes and SHA-256; else what differs. */
static const char *facts_problem(const char *facts, const pt_file *files, size_t count)
{
	json_object *list = facts ? jsonx_parse_str(facts, NULL, 0) : NULL;
	const char *problem = NULL;
	if (!json_object_is_type(list, json_type_array))
		problem = "the facts are not a JSON array";
	else if (json_object_array_length(list) != count)
		problem = "the facts do not list exactly the files transferred";
	for (size_t i = 0; problem == NULL && i < count; i++) {
		json_object *f = json_object_array_get_idx(list, i);
		const char *path = jsonx_get_str(f, "path"), *sha = jsonx_get_str(f, "sha256");
		int64_t bytes = -1;
		char want[SHA256_HEX_LEN + 1];
		sha256_buffer_hex(files[i].data, files[i].len, want);
		if (path == NULL || strcmp(path, files[i].rel) != 0)
			problem = "a fact's path is not the file's path relative to the transferred root, in "
			          "byte order";
		else if (!jsonx_get_int(f, "bytes", &bytes) || bytes != (int64_t)files[i].len)
			problem = "a fact's bytes differ from the file's size";
		else if (sha == NULL || strcmp(sha, want) != 0)
			problem = "a fact's sha256 differs from the file's content";
	}
	json_object_put(list);
	return problem;
}

/* NULL when the host folder (or file) `root` holds exactly `files`. */
static const char *local_problem(const char *root, const pt_file *files, size_t count, bool tree)
{
	for (size_t i = 0; i < count; i++) {
		char path[1024], *data = NULL;
		size_t len = 0;
		relay_error err;
		snprintf(path, sizeof path, "%s%s%s", root, files[i].rel[0] ? "/" : "", files[i].rel);
		bool same = fs_read_file(path, 1 << 20, &data, &len, &err) == RELAY_OK &&
		            len == files[i].len && memcmp(data, files[i].data, len) == 0;
		free(data);
		if (!same)
			return "the host copy differs from what the guest holds";
	}
	if (!tree)
		return NULL;
	/* Nothing more than the files: count regular files below root. */
	size_t found = 0;
	char stack[8][1024];
	int depth = 0;
	snprintf(stack[depth++], sizeof stack[0], "%s", root);
	while (depth > 0) {
		char dir_path[1024];
		snprintf(dir_path, sizeof dir_path, "%s", stack[--depth]);
		DIR *dir = opendir(dir_path);
		struct dirent *e;
		while (dir && (e = readdir(dir)) != NULL) {
			char child[1300];
			struct stat sb;
			snprintf(child, sizeof child, "%s/%s", dir_path, e->d_name);
			if (e->d_name[0] == '.' || lstat(child, &sb) != 0)
				continue;
			if (S_ISREG(sb.st_mode))
				found++;
			else if (S_ISDIR(sb.st_mode) && depth < 8)
				snprintf(stack[depth++], sizeof stack[0], "%.1000s", child);
		}
		if (dir)
			closedir(dir);
	}
	return found == count ? NULL : "the host copy holds files the guest tree does not";
}

typedef struct xfer {
	pt_run *run;
	bool facts; /* RELAY_TRANSPORT_GUEST_FACTS */
} xfer;

static relay_status push(const xfer *x, const char *local, const char *remote, unsigned flags, char **facts,
                         relay_error *err)
{
	memset(err, 0, sizeof *err);
	*facts = NULL;
	return x->run->plugin->transport.push(x->run->plugin->state, x->run->conn, local, remote, NULL, flags,
	                                      facts, err);
}

static relay_status pull(const xfer *x, const char *remote, const char *local, unsigned flags, char **facts,
                         relay_error *err)
{
	memset(err, 0, sizeof *err);
	*facts = NULL;
	return x->run->plugin->transport.pull(x->run->plugin->state, x->run->conn, remote, local, NULL, flags,
	                                      facts, err);
}

/* Checks 30-33: one push and one pull of `files` (a tree when `tree`). */
static void round_trip(const xfer *x, int check, const pt_file *files, size_t count, bool tree)
{
	pt_run *run = x->run;
	const char *what = tree ? "a tree" : "a file";
	char local[700], remote[700], back[700];
	snprintf(local, sizeof local, "%s/%s", run->scratch, tree ? "tree" : "file.txt");
	snprintf(remote, sizeof remote, "%s/pt/%s", run->guest_root, tree ? "tree" : "deep/file.txt");
	snprintf(back, sizeof back, "%s/%s", run->scratch, tree ? "tree-back" : "file-back.txt");
	relay_error err;
	relay_status st = RELAY_OK;
	for (size_t i = 0; i < count && st == RELAY_OK; i++)
		st = write_local(local, &files[i], &err);
	if (st != RELAY_OK) {
		pt_fail(run, check, "the runner could not write its host files: %s", err.message);
		return;
	}
	unsigned flags = tree ? RELAY_XFER_TREE : 0;
	char *facts = NULL;
	const char *problem = NULL;
	st = push(x, local, remote, flags, &facts, &err);
	if (st == RELAY_OK && x->facts)
		problem = facts_problem(facts, files, count);
	if (st != RELAY_OK)
		pt_fail(run, check, "push of %s to %s answered %s: %s", what, remote, pt_status(st),
		        err.message);
	else if (problem)
		pt_fail(run, check, "push of %s: %s (relay/transport.h FACTS)", what, problem);
	else
		pt_ran(run, check);
	pt_host()->free(facts);
	if (st != RELAY_OK)
		return;
	st = pull(x, remote, back, flags, &facts, &err);
	problem = st == RELAY_OK ? local_problem(back, files, count, tree) : NULL;
	if (problem == NULL && st == RELAY_OK && x->facts)
		problem = facts_problem(facts, files, count);
	if (st != RELAY_OK)
		pt_fail(run, check + 1, "pull of %s from %s answered %s: %s", what, remote, pt_status(st),
		        err.message);
	else if (problem)
		pt_fail(run, check + 1, "pull of %s: %s (relay/transport.h FACTS)", what, problem);
	else
		pt_ran(run, check + 1);
	pt_host()->free(facts);
}

/* Check 34: links in the guest are refused and leave nothing behind. */
static void refuse_links(const xfer *x)
{
	pt_run *run = x->run;
	char script[2048];
	snprintf(script, sizeof script,
	         "mkdir -p '%s/pt/links' && ln -s /etc/hostname '%s/pt/link' && ln -s /etc '%s/pt/links/etc'",
	         run->guest_root, run->guest_root, run->guest_root);
	relay_exec_result res;
	relay_error err;
	relay_status st = pt_sh(run, script, 0, &res, &err);
	int exit_code = res.exit_code;
	pt_host()->free(res.out);
	pt_host()->free(res.err);
	if (st != RELAY_OK || exit_code != 0) {
		pt_skip(run, 34, "the guest could not make symbolic links with ln -s");
		return;
	}
	const char *names[] = {"link", "links"};
	for (int i = 0; i < 2; i++) {
		char remote[700], local[700];
		snprintf(remote, sizeof remote, "%s/pt/%s", run->guest_root, names[i]);
		snprintf(local, sizeof local, "%s/%s-back", run->scratch, names[i]);
		char *facts = NULL;
		st = pull(x, remote, local, i ? RELAY_XFER_TREE : 0, &facts, &err);
		pt_host()->free(facts);
		if (st != RELAY_E_UNSAFE_PATH)
			pt_fail(run, 34,
			        "pull of %s holding a symbolic link answered %s: refuse links with "
			        "RELAY_E_UNSAFE_PATH (relay/transport.h)",
			        i ? "a tree" : "a path", pt_status(st));
		else if (fs_exists_nofollow(local))
			pt_fail(
			    run, 34,
			    "a refused pull left %s on the host: on failure nothing is left at local_path",
			    local);
	}
	pt_ran(run, 34);
}

/* Checks 35 and 36. */
static void refuse_paths(const xfer *x)
{
	pt_run *run = x->run;
	pt_file keep = {"", "keep me\n", 8};
	char local[700], remote[700];
	snprintf(local, sizeof local, "%s/existing", run->scratch);
	snprintf(remote, sizeof remote, "%s/pt/deep/file.txt", run->guest_root);
	relay_error err;
	char *facts = NULL;
	if (write_local(local, &keep, &err) != RELAY_OK) {
		pt_fail(run, 35, "the runner could not write its host files: %s", err.message);
		return;
	}
	relay_status st = pull(x, remote, local, 0, &facts, &err);
	pt_host()->free(facts);
	if (st == RELAY_OK || local_problem(local, &keep, 1, false) != NULL)
		pt_fail(
		    run, 35,
		    "pull onto the existing host file %s answered %s and %s it: local_path must not exist",
		    local, pt_status(st), local_problem(local, &keep, 1, false) ? "changed" : "kept");
	else
		pt_ran(run, 35);
	snprintf(local, sizeof local, "%s/file.txt", run->scratch);
	st = push(x, local, "relay-plugin-test-relative/x", 0, &facts, &err);
	pt_host()->free(facts);
	if (st != RELAY_E_INVALID_ARGUMENT && st != RELAY_E_UNSAFE_PATH)
		pt_fail(
		    run, 36,
		    "push to the relative guest path relay-plugin-test-relative/x answered %s: guest paths "
		    "are absolute (relay/transport.h PATHS)",
		    pt_status(st));
	else
		pt_ran(run, 36);
}

void pt_transport_xfer(pt_run *run)
{
	relay_error err;
	if (fs_mkdir_p(run->scratch, 0700, &err) != RELAY_OK) {
		pt_fail(run, 30, "the runner could not make %s: %s", run->scratch, err.message);
		return;
	}
	xfer x = {run, (run->plugin->transport.traits & RELAY_TRANSPORT_GUEST_FACTS) != 0};
	char local[700], remote[700], *facts = NULL;
	snprintf(local, sizeof local, "%s/flags.txt", run->scratch);
	snprintf(remote, sizeof remote, "%s/pt/flags.txt", run->guest_root);
	pt_file f = {"", "flags\n", 6};
	write_local(local, &f, &err);
	relay_status st = push(&x, local, remote, PT_UNKNOWN_FLAG, &facts, &err);
	pt_refusal(run, "transport", "push", st, &err, &facts);
	snprintf(local, sizeof local, "%s/flags-back.txt", run->scratch);
	st = pull(&x, remote, local, PT_UNKNOWN_FLAG, &facts, &err);
	pt_refusal(run, "transport", "pull", st, &err, &facts);
	round_trip(&x, 30, &one_file, 1, false);
	round_trip(&x, 32, tree_files, TREE_FILES, true);
	refuse_links(&x);
	refuse_paths(&x);
}
