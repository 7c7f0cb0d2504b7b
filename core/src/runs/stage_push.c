/* relay_stage step 10: support files and the workspace pushed and compared
 * with the receiver's scan (spec/guest.md §3.4, §3.5); see stage_internal.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/transport.h"
#include "runs/stage_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define RM_BATCH_BYTES 65536

/* ---- support files and the workspace (spec/guest.md §3.4) ------------------------------ */

/* Removes guest files (absolute paths) with /bin/rm -f, in batches. */
static relay_status remove_guest_files(stage_ctx *s, char **paths, size_t n, relay_error *err)
{
	size_t i = 0;
	while (i < n) {
		size_t start = i, bytes = 0;
		while (i < n && (i == start || bytes + strlen(paths[i]) + 1 <= RM_BATCH_BYTES))
			bytes += strlen(paths[i++]) + 1;
		const char **argv = calloc(i - start + 4, sizeof *argv);
		if (argv == NULL)
			return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		argv[0] = "/bin/rm";
		argv[1] = "-f";
		argv[2] = "--";
		for (size_t k = start; k < i; k++)
			argv[3 + k - start] = paths[k];
		relay_status st = stage_run_short(s, argv, GIO_SHORT_TIMEOUT_MS, NULL, err);
		free(argv);
		if (st != RELAY_OK)
			return st;
	}
	return RELAY_OK;
}

typedef struct open_ctx {
	stage_ctx *s;
	size_t *index; /* member -> source index */
} open_ctx;

static int open_support(void *ctx, size_t i, bool *changed, char *why, size_t why_len)
{
	open_ctx *oc = ctx;
	*changed = false;
	int fd = host_path_open(oc->s->project, &oc->s->in.files[oc->index[i]].src, why, why_len);
	if (fd < 0)
		*changed = true;
	return fd;
}

static int open_workspace(void *ctx, size_t i, bool *changed, char *why, size_t why_len)
{
	open_ctx *oc = ctx;
	stage_ctx *s = oc->s;
	host_tree_file *f = &s->in.tree.files[oc->index[i]];
	/* Each workspace file as a host_path below the project. */
	host_path p;
	memset(&p, 0, sizeof p);
	strbuf sb = STRBUF_INIT;
	if (s->in.workspace.rel[0])
		strbuf_printf(&sb, "%s/%s", s->in.workspace.rel, f->rel);
	else
		strbuf_puts(&sb, f->rel);
	p.rel = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", s->in.workspace.path, f->rel);
	p.path = strbuf_detach(&sb, NULL);
	p.given = p.path;
	p.dev = f->dev;
	p.ino = f->ino;
	*changed = false;
	int fd = p.rel ? host_path_open(s->project, &p, why, why_len) : -1;
	if (fd < 0)
		*changed = true;
	free(p.rel);
	free(p.path);
	return fd;
}

/* Inventories the guest's support/ (gio_scan; `present` as there) into
 * *facts_out: 0, or the stage's failure. */
static int scan_support(stage_ctx *s, bool present, json_object **facts_out)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st =
	    gio_scan(&s->io, s->io.root, "support", present, s->in.total_bytes, facts_out, &err);
	if (st == RELAY_OK && *facts_out == NULL)
		*facts_out = json_object_new_array();
	if (st == RELAY_OK)
		return 0;
	return stage_fail(s, gio_tool_code(st), "the guest's support folder could not be inventoried: %s",
	                  err.message);
}

/* Support files: pre-scan of support/, files already equal are skipped,
 * differing ones removed, the rest pushed in one archive, then support/ is
 * scanned again and every file must match (spec/guest.md §3.4, §3.5). */
int stage_support(stage_ctx *s, json_object *result_files)
{
	if (s->in.file_count == 0)
		return 0;
	relay_error err;
	memset(&err, 0, sizeof err);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/support", s->io.root);
	char *support = strbuf_detach(&sb, NULL);
	json_object *before = NULL, *after = NULL;
	int r = 0;
	gio_member *members = calloc(s->in.file_count, sizeof *members);
	size_t *index = calloc(s->in.file_count, sizeof *index);
	char **stale = calloc(s->in.file_count, sizeof *stale);
	size_t nm = 0, ns = 0;
	if (members == NULL || index == NULL || stale == NULL) {
		r = stage_fail(s, "internal", "out of memory staging support files");
		goto cleanup;
	}
	relay_status st = RELAY_OK;
	if (s->fresh_root)
		before = json_object_new_array();
	else if ((r = scan_support(s, true, &before)) != 0)
		goto cleanup;
	for (size_t i = 0; i < s->in.file_count; i++) {
		support_file *f = &s->in.files[i];
		json_object *fact = gio_fact_find(before, f->path);
		if (stage_fact_matches(fact, f->src.bytes, f->sha256)) {
			s->pushed_bytes += f->src.bytes;
			continue; /* already there (a retried stage) */
		}
		if (fact) {
			strbuf_printf(&sb, "%s/%s", support, f->path);
			stale[ns++] = strbuf_detach(&sb, NULL);
		}
		members[nm].name = f->path;
		members[nm].bytes = f->src.bytes;
		members[nm].sha256 = f->sha256;
		index[nm++] = i;
	}
	if (ns && (st = remove_guest_files(s, stale, ns, &err)) != RELAY_OK) {
		r = stage_fail(s, "transfer-failed", "stale support files could not be replaced: %s",
		               err.message);
		goto cleanup;
	}
	if (nm) {
		open_ctx oc = {s, index};
		st = gio_push_archive(&s->io, members, nm, open_support, &oc, support, &err);
		r = stage_push_problem(s, st, "support files", &err);
		if (r)
			goto cleanup;
		for (size_t i = 0; i < nm; i++)
			s->pushed_bytes += members[i].bytes;
		stage_progress(s, "support files pushed");
	}
	if ((r = scan_support(s, false, &after)) != 0)
		goto cleanup;
	for (size_t i = 0; i < s->in.file_count; i++) {
		support_file *f = &s->in.files[i];
		json_object *fact = gio_fact_find(after, f->path);
		if (!stage_fact_matches(fact, f->src.bytes, f->sha256)) {
			r = stage_fail(s, "integrity-failed", "staging checksum mismatch: %s", f->src.given);
			goto cleanup;
		}
		char again[65];
		uint64_t again_bytes = 0;
		bool changed = false;
		char why[512];
		if (host_path_hash(s->project, &f->src, again, &again_bytes, &changed, why, sizeof why) !=
		        0 ||
		    strcmp(again, f->sha256) != 0 || again_bytes != f->src.bytes) {
			r = stage_fail(s, "integrity-failed", "staging source changed: %s", f->src.given);
			goto cleanup;
		}
		json_object *o = json_object_new_object();
		jsonx_add_str(o, "local", f->src.path);
		strbuf_printf(&sb, "%s/%s", support, f->path);
		jsonx_add_str(o, "remote", strbuf_str(&sb));
		strbuf_reset(&sb);
		jsonx_add_str(o, "sha256", f->sha256);
		jsonx_add_int(o, "bytes", (int64_t)f->src.bytes);
		json_object_array_add(result_files, o);
	}
cleanup:
	for (size_t i = 0; i < ns; i++)
		free(stale[i]);
	free(stale);
	free(members);
	free(index);
	free(support);
	json_object_put(before);
	json_object_put(after);
	strbuf_free(&sb);
	return r;
}

/* The workspace: pre-scan, stale files removed, the tree pushed (the
 * transport's own tree stream when it reports guest facts, else one archive
 * unpacked by the receiver), then the guest scan must equal the host
 * inventory exactly and a second host inventory must be unchanged. */
/* The second host inventory of the workspace (spec/guest.md §3.4), taken on a
 * thread of its own while the guest scans its copy. */
typedef struct reinventory {
	stage_ctx *s;
	host_tree tree;
	int rc;
	char why[1024];
} reinventory;

static void *reinventory_main(void *arg)
{
	reinventory *ri = arg;
	bool changed = false;
	ri->rc = host_tree_walk(ri->s->project, &ri->s->in.workspace, "the workspace", &ri->tree, ri->why,
	                        sizeof ri->why);
	if (ri->rc == 0)
		ri->rc = host_tree_hash(ri->s->project, &ri->s->in.workspace, &ri->tree, &changed, ri->why,
		                        sizeof ri->why);
	return NULL;
}

/* The workspace's files that differ pushed to `dest`: the transport's own
 * tree stream when it reports guest facts (it replaces the archive push,
 * never the scan comparison; *facts_out: what it says arrived, or NULL),
 * else one archive unpacked by the receiver. */
static int workspace_push(stage_ctx *s, const char *dest, gio_member *members, size_t nm, size_t *index,
                          json_object **facts_out)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st;
	if (s->io.traits & RELAY_TRANSPORT_GUEST_FACTS) {
		st = gio_push(&s->io, s->in.workspace.path, dest,
		              RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES, "the workspace", facts_out, &err);
		if (st == RELAY_OK)
			gio_note_transfer(&s->io, "push", "workspace", s->in.workspace.path, dest,
			                  s->in.tree.total_bytes, NULL, 1, "tree");
	} else {
		open_ctx oc = {s, index};
		st = gio_push_archive(&s->io, members, nm, open_workspace, &oc, dest, &err);
	}
	return stage_push_problem(s, st, "the workspace", &err);
}

/* The transport's facts of the tree push against the host inventory that
 * was sent, once the scan and the second inventory agree (so a source that
 * changed is the integrity failure they name): a transport whose facts
 * contradict the copy is not trusted (transfer-failed). */
static int workspace_compare_facts(stage_ctx *s, json_object *facts)
{
	if (facts == NULL)
		return 0;
	json_object *sent = json_object_new_array();
	for (size_t j = 0; j < s->in.tree.count; j++)
		json_object_array_add(sent, gio_fact_new(s->in.tree.files[j].rel, s->in.tree.files[j].bytes,
		                                         s->in.tree.files[j].sha256));
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = gio_facts_compare(facts, sent, "the workspace", &err);
	json_object_put(sent);
	if (st != RELAY_OK)
		return stage_fail(s, gio_tool_code(st), "the workspace push cannot be trusted: %s",
		                  err.message);
	return 0;
}

int stage_workspace(stage_ctx *s)
{
	if (!s->in.has_workspace)
		return 0;
	relay_error err;
	memset(&err, 0, sizeof err);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/workspace", s->io.root);
	char *dest = strbuf_detach(&sb, NULL);
	json_object *before = NULL, *after = NULL, *tree_facts = NULL;
	int r = 0;
	reinventory ri;
	memset(&ri, 0, sizeof ri);
	ri.s = s;
	pthread_t ri_thread;
	bool ri_started = false;
	size_t n = s->in.tree.count;
	gio_member *members = calloc(n ? n : 1, sizeof *members);
	size_t *index = calloc(n ? n : 1, sizeof *index);
	fw_strlist stale = {0};
	size_t nm = 0;
	if (members == NULL || index == NULL) {
		r = stage_fail(s, "internal", "out of memory staging the workspace");
		goto cleanup;
	}
	stage_phase_mark(s, "support files");
	relay_status st = s->fresh_root ? RELAY_OK
	                                : gio_scan(&s->io, s->io.root, "workspace", true,
	                                           s->in.tree.total_bytes, &before, &err);
	if (st == RELAY_OK && before == NULL)
		before = json_object_new_array();
	stage_phase_mark(s, "workspace pre-scan");
	if (st != RELAY_OK) {
		r = stage_fail(s, gio_tool_code(st), "the guest workspace could not be inventoried: %s",
		               err.message);
		goto cleanup;
	}
	/* Both lists are sorted by path in byte order: one merge pass. */
	size_t nb = json_object_array_length(before), i = 0, k = 0;
	while (i < n || k < nb) {
		json_object *fact = k < nb ? json_object_array_get_idx(before, k) : NULL;
		const char *gp = fact ? jsonx_get_str(fact, "path") : NULL;
		int c = i >= n ? 1 : gp == NULL ? -1 : strcmp(s->in.tree.files[i].rel, gp);
		if (c > 0) { /* only in the guest: an extra file from an earlier attempt */
			strbuf_printf(&sb, "%s/%s", dest, gp);
			fw_strlist_push(&stale, strbuf_str(&sb));
			strbuf_reset(&sb);
			k++;
			continue;
		}
		host_tree_file *f = &s->in.tree.files[i];
		if (c == 0) {
			k++;
			if (stage_fact_matches(fact, f->bytes, f->sha256)) {
				i++;
				continue;
			}
			strbuf_printf(&sb, "%s/%s", dest, f->rel);
			fw_strlist_push(&stale, strbuf_str(&sb));
			strbuf_reset(&sb);
		}
		members[nm].name = f->rel;
		members[nm].bytes = f->bytes;
		members[nm].sha256 = f->sha256;
		index[nm++] = i;
		i++;
	}
	if (stale.count && (st = remove_guest_files(s, stale.items, stale.count, &err)) != RELAY_OK) {
		r = stage_fail(s, "transfer-failed", "stale workspace files could not be removed: %s",
		               err.message);
		goto cleanup;
	}
	if (nm > 0) {
		r = workspace_push(s, dest, members, nm, index, &tree_facts);
		if (r)
			goto cleanup;
	}
	s->pushed_bytes += s->in.tree.total_bytes;
	stage_phase_mark(s, "workspace push");
	stage_progress(s, "workspace pushed");
	ri_started = pthread_create(&ri_thread, NULL, reinventory_main, &ri) == 0;
	if (!ri_started)
		reinventory_main(&ri);
	st = gio_scan(&s->io, s->io.root, "workspace", false, s->in.tree.total_bytes, &after, &err);
	if (st != RELAY_OK) {
		r = stage_fail(s, gio_tool_code(st), "the guest workspace could not be inventoried: %s",
		               err.message);
		goto cleanup;
	}
	size_t na = json_object_array_length(after);
	for (size_t j = 0; j < n || j < na; j++) {
		json_object *fact = j < na ? json_object_array_get_idx(after, j) : NULL;
		host_tree_file *f = j < n ? &s->in.tree.files[j] : NULL;
		if (fact == NULL || f == NULL || strcmp(jsonx_get_str(fact, "path"), f->rel) != 0 ||
		    !stage_fact_matches(fact, f->bytes, f->sha256)) {
			r = stage_fail(s, "integrity-failed", "staging checksum mismatch: %s/%s",
			               s->in.workspace.path, f ? f->rel : jsonx_get_str(fact, "path"));
			goto cleanup;
		}
	}
	/* The second host inventory must be unchanged. */
	stage_phase_mark(s, "workspace scan and comparison");
	if (ri_started) {
		pthread_join(ri_thread, NULL);
		ri_started = false;
	}
	if (ri.rc != 0) {
		r = stage_fail(s, "integrity-failed", "staging source changed: %s", ri.why);
		goto cleanup;
	}
	if (ri.tree.count != n) {
		r = stage_fail(s, "integrity-failed",
		               "staging source changed: %s now holds %zu files, not %zu",
		               s->in.workspace.path, ri.tree.count, n);
		goto cleanup;
	}
	for (size_t j = 0; j < n; j++) {
		if (strcmp(ri.tree.files[j].rel, s->in.tree.files[j].rel) != 0 ||
		    strcmp(ri.tree.files[j].sha256, s->in.tree.files[j].sha256) != 0 ||
		    ri.tree.files[j].bytes != s->in.tree.files[j].bytes) {
			r = stage_fail(s, "integrity-failed", "staging source changed: %s/%s",
			               s->in.workspace.path, s->in.tree.files[j].rel);
			goto cleanup;
		}
	}
	stage_phase_mark(s, "second host inventory");
	r = workspace_compare_facts(s, tree_facts);
cleanup:
	json_object_put(tree_facts);
	if (ri_started)
		pthread_join(ri_thread, NULL);
	host_tree_free(&ri.tree);
	fw_strlist_free(&stale);
	free(members);
	free(index);
	free(dest);
	json_object_put(before);
	json_object_put(after);
	strbuf_free(&sb);
	return r;
}
