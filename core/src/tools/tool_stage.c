/*
 * relay_stage (tools.md §3.5, guest.md §3): host inputs checked and
 * inventoried, a recording reset when asked or pending, the platform
 * probe, the receiver and capture programs pushed and verified by running
 * them, support files and the workspace pushed and compared with the
 * receiver's scan, the capture wait, and the recording session.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runs/capture_plan.h"
#include "session/events.h"
#include "guestio/guest_io.h"
#include "runs/host_paths.h"
#include "delivery/image_delivery.h"
#include "lease/lifecycle.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "runs/receiver_builds.h"
#include "runs/recording_reset.h"
#include "call/call.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define STAGE_MAX_FILES        10000
#define STAGE_MAX_BYTES        536870912ull /* 512 MiB */
#define STAGE_PROBE_TIMEOUT_MS 10000        /* uname -sm, <path> --version */
#define CAPTURE_WAIT_MS        120000
#define CAPTURE_EVERY_MS       5000
#define CAPTURE_EXEC_LIMIT_MS  180000
#define CAPTURE_PROGRESS_MS    5000
#define RM_BATCH_BYTES         65536

/* One support file of the request. */
typedef struct support_file {
	host_path src;
	const char *path; /* destination below support/, borrowed from the call */
	char sha256[65];
} support_file;

typedef struct stage_ctx {
	manager *m;
	guest *g;
	relay_call *call;
	json_object *args;
	const char *project;
	/* host inputs */
	bool has_workspace;
	host_path workspace;
	host_tree tree;
	support_file *files;
	size_t file_count;
	uint64_t total_bytes;
	uint64_t pushed_bytes;
	/* guest */
	guest_io io;
	bool io_open;
	char *uname;
	const char *platform;
	char receiver_sha[65];
	uint64_t receiver_bytes;
	char *receiver_version;
	int64_t mark_ms; /* clock_monotonic_ms() of the last phase_mark() */
	bool fresh_root; /* this stage created R: nothing of an earlier attempt is in it */
	/* the host hashes, computed on hash_thread (hash_start/hash_join) */
	pthread_t hash_thread;
	bool hashing;
	bool hash_failed, hash_changed, hash_is_workspace;
	char hash_why[1024];
} stage_ctx;

/* ---- failures ------------------------------------------------------------------- */

static tool_result *stage_fail(stage_ctx *s, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tool_result *stage_fail(stage_ctx *s, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	guest_set_last_error(s->m, s->g, "relay_stage: %s", strbuf_str(&sb));
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "operation", "relay_stage");
	jsonx_add_str(d, "code", code);
	jsonx_add_str(d, "message", strbuf_str(&sb));
	guest_event(s->m, s->g, "operation-failed", "relay_stage failed; the guest is kept", d);
	json_object *st = json_object_new_object();
	jsonx_add_str(st, "guest", s->g->name);
	jsonx_add_bool(st, "staged", false);
	tool_result *r = guest_error(s->m, s->g, st, code, "%s", strbuf_str(&sb));
	strbuf_free(&sb);
	return r;
}

static tool_result *cancelled_result(stage_ctx *s)
{
	lifecycle_record_cancelled(
	    s->m, s->g, "relay_stage", false,
	    "staging was cancelled; the guest is not staged and a retry overwrites what arrived");
	return stage_fail(s, "transfer-failed", "staging was cancelled; the guest is not staged");
}

/* True when a guest file fact (gio_scan) says `bytes` bytes with SHA-256
 * `sha256`. */
static bool fact_matches(json_object *fact, uint64_t bytes, const char *sha256)
{
	int64_t fact_bytes = -1;
	const char *fact_sha256 = jsonx_get_str(fact, "sha256");
	return fact != NULL && jsonx_get_int(fact, "bytes", &fact_bytes) && (uint64_t)fact_bytes == bytes &&
	       fact_sha256 != NULL && strcmp(fact_sha256, sha256) == 0;
}

/* After a push of `what` ("the workspace"): NULL when it went through and
 * the call goes on; else the cancelled result or the push failure. */
static tool_result *push_problem(stage_ctx *s, relay_status st, const char *what, const relay_error *err)
{
	if (st == RELAY_E_CANCELLED || relay_call_is_cancelled(s->call))
		return cancelled_result(s);
	if (st != RELAY_OK)
		return stage_fail(s, gio_tool_code(st), "%s could not be pushed: %s", what, err->message);
	return NULL;
}

/* Debug timing of the staging phases (MCP_RELAY_DEBUG=1): milliseconds
 * since the previous mark. */
static void phase_mark(stage_ctx *s, const char *phase)
{
	int64_t now = clock_monotonic_ms();
	log_debug("relay_stage %s: %s took %lld ms", s->g->name, phase, (long long)(now - s->mark_ms));
	s->mark_ms = now;
}

static void progress(stage_ctx *s, const char *message)
{
	double total = s->total_bytes ? (double)s->total_bytes : -1;
	relay_call_progress(s->call, (double)s->pushed_bytes + 1, total, message, false);
}

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

static tool_result *check_inputs(stage_ctx *s)
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
			tool_result *r =
			    guest_error(s->m, s->g, NULL, "invalid-input",
			                "Invalid relay_stage input: /files names support/%s and support/%s, "
			                "which collide; give each file its own destination",
			                sorted[i].path, sorted[i + 1].path);
			free(sorted);
			return r;
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
	return NULL;
}

/* The host's SHA-256 of every input (guest.md §3.4 step 1). It runs on a
 * thread of its own while the platform is probed and the receiver staged
 * (nothing of the inputs is sent before hash_join()). */
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

static void hash_start(stage_ctx *s)
{
	s->hashing = pthread_create(&s->hash_thread, NULL, hash_main, s) == 0;
	if (!s->hashing)
		hash_main(s);
}

/* Waits for the host hashes; NULL, or the failure. */
static tool_result *hash_join(stage_ctx *s)
{
	if (s->hashing) {
		pthread_join(s->hash_thread, NULL);
		s->hashing = false;
	}
	if (!s->hash_failed)
		return NULL;
	s->hash_failed = false;
	return stage_fail(s, s->hash_changed ? "integrity-failed" : "path-refused", "%s%s",
	                  s->hash_changed        ? "staging source changed: "
	                  : s->hash_is_workspace ? "workspace refused: "
	                                         : "support file refused: ",
	                  s->hash_why);
}

/* ---- guest commands --------------------------------------------------------------- */

/* Runs a short command; RELAY_OK only when it exited 0. *out_text gets stdout. */
static relay_status run_short(stage_ctx *s, const char *const *argv, uint64_t timeout_ms, char **out_text,
                              relay_error *err)
{
	relay_exec_result res;
	if (out_text)
		*out_text = NULL;
	relay_status st = gio_exec(&s->io, argv, NULL, timeout_ms, 1 << 16, 0, &res, err);
	if (st == RELAY_OK && (res.timed_out || res.exit_code != 0)) {
		char tail[300] = "";
		if (res.err && res.err_len)
			snprintf(tail, sizeof tail, "%.*s", (int)(res.err_len > 280 ? 280 : res.err_len),
			         res.err + (res.err_len > 280 ? res.err_len - 280 : 0));
		for (char *p = tail; *p; p++)
			if (*p == '\n' || *p == '\r')
				*p = ' ';
		st = relay_error_set(err, RELAY_E_REFUSED, 0, "%s %s (exit %d)%s%s", argv[0],
		                     res.timed_out ? "timed out" : "failed", res.exit_code,
		                     tail[0] ? ": " : "", tail);
	}
	if (st == RELAY_OK && out_text) {
		*out_text = res.out ? res.out : strdup("");
		res.out = NULL;
	}
	gio_exec_result_free(&res);
	return st;
}

static relay_status probe_platform(stage_ctx *s, relay_error *err)
{
	const char *argv[] = {"uname", "-sm", NULL};
	char *out = NULL;
	relay_status st = run_short(s, argv, STAGE_PROBE_TIMEOUT_MS, &out, err);
	if (st != RELAY_OK)
		return st;
	size_t len = strlen(out);
	while (len && (out[len - 1] == '\n' || out[len - 1] == '\r' || out[len - 1] == ' '))
		out[--len] = '\0';
	s->uname = out;
	s->platform = receiver_platform_key(out);
	return RELAY_OK;
}

/* `R/receiver hash <remote>` must print `sha` and `bytes`. */
/* The one guest command after a program's push: make it 0700 and have the
 * receiver hash it; for the receiver itself also its version frame and the
 * guest's own sha256sum or shasum. One round trip instead of four. */
static const char program_check_script[] =
    "chmod 0700 \"$2\" || exit 90\n"
    "\"$1\" hash \"$2\" || exit 91\n"
    "[ \"$3\" = receiver ] || exit 0\n"
    "\"$1\" version || exit 92\n"
    "if command -v sha256sum >/dev/null 2>&1; then sha256sum -- \"$2\"; "
    "elif command -v shasum >/dev/null 2>&1; then shasum -a 256 -- \"$2\"; "
    "else echo relay-no-sha256; fi\n";

/* Pushes a program to R/<rel> and checks it by running the receiver
 * (guest.md §3.4 "The receiver itself"): `receiver hash` must print the
 * host's SHA-256 and size. With `is_receiver`, *version_out (new reference)
 * receives the `receiver version` frame and *sum_out (malloc'd) the guest's
 * sha256sum line or "relay-no-sha256". */
static relay_status push_program(stage_ctx *s, const char *local, const char *rel, const char *what,
                                 bool is_receiver, char sha[65], uint64_t *bytes, json_object **version_out,
                                 char **sum_out, relay_error *err)
{
	if (version_out)
		*version_out = NULL;
	if (sum_out)
		*sum_out = NULL;
	relay_status st = sha256_file_hex(local, sha, bytes, err);
	if (st != RELAY_OK)
		return st;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", s->io.root, rel);
	char *remote = strbuf_detach(&sb, NULL);
	relay_exec_result res;
	memset(&res, 0, sizeof res);
	st = gio_push(&s->io, local, remote, 0, what, NULL, err);
	if (st == RELAY_OK) {
		char again[65];
		uint64_t again_bytes = 0;
		if (sha256_file_hex(local, again, &again_bytes, err) != RELAY_OK || strcmp(again, sha) != 0 ||
		    again_bytes != *bytes)
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging source changed: %s", local);
	}
	if (st == RELAY_OK) {
		const char *argv[] = {"/bin/sh",
		                      "-c",
		                      program_check_script,
		                      "relay-stage",
		                      s->io.receiver,
		                      remote,
		                      is_receiver ? "receiver" : "program",
		                      NULL};
		st = gio_exec(&s->io, argv, NULL, gio_scan_timeout_ms(*bytes), 1 << 16, 0, &res, err);
	}
	if (st == RELAY_OK && (res.timed_out || res.exit_code != 0)) {
		char tail[300] = "";
		if (res.err && res.err_len) {
			size_t from = res.err_len > 280 ? res.err_len - 280 : 0;
			snprintf(tail, sizeof tail, "%.*s", (int)(res.err_len - from), res.err + from);
			for (char *p = tail; *p; p++)
				if (*p == '\n' || *p == '\r')
					*p = ' ';
		}
		const char *step = res.exit_code == 90   ? "chmod 0700"
		                   : res.exit_code == 92 ? "receiver version"
		                   : res.exit_code == 91 ? "receiver hash"
		                                         : "the program check";
		/* A program that does not run as built is an integrity failure. */
		st = relay_error_set(err, res.exit_code == 90 ? RELAY_E_IO : RELAY_E_INTEGRITY, 0,
		                     "%s of %s %s (exit %d)%s%s", step, remote,
		                     res.timed_out ? "timed out" : "failed", res.exit_code,
		                     tail[0] ? ": " : "", tail);
	}
	if (st == RELAY_OK) {
		/* stdout: the hash frame, then (receiver) the version frame and the sum line. */
		json_object *frames[2] = {NULL, NULL};
		size_t nframes = 0;
		const char *p = res.out ? res.out : "", *end = p + res.out_len;
		const char *last_line = NULL;
		size_t last_len = 0;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
			if (len && p[0] == '{' && nframes < 2)
				frames[nframes++] = jsonx_parse(p, len, NULL, NULL, 0);
			else if (len) {
				last_line = p;
				last_len = len;
			}
			p += len + 1;
		}
		int64_t b = -1;
		const char *h = jsonx_get_str(frames[0], "sha256");
		if (!jsonx_get_int(frames[0], "bytes", &b) || (uint64_t)b != *bytes || h == NULL ||
		    strcmp(h, sha) != 0)
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging checksum mismatch: %s",
			                     remote);
		if (st == RELAY_OK && version_out)
			*version_out = json_object_get(frames[1]);
		if (st == RELAY_OK && sum_out && last_line)
			*sum_out = strndup(last_line, last_len);
		json_object_put(frames[0]);
		json_object_put(frames[1]);
	}
	if (st == RELAY_OK)
		gio_note_transfer(&s->io, "push", what, local, remote, *bytes, sha, 1, "transport");
	gio_exec_result_free(&res);
	free(remote);
	return st;
}

/* Steps 6-7: the guest root and the receiver, verified by running it. */
static tool_result *stage_receiver(stage_ctx *s)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	/* A fresh root (the first mkdir succeeds) holds nothing to compare
	 * with, so the pre-scans of support/ and workspace/ are skipped. */
	const char *mk_fresh[] = {"/bin/mkdir", "-m", "0700", s->io.root, NULL};
	const char *mk[] = {"/bin/mkdir", "-p", "-m", "0700", s->io.root, NULL};
	relay_status st = run_short(s, mk_fresh, GIO_SHORT_TIMEOUT_MS, NULL, &err);
	s->fresh_root = st == RELAY_OK;
	if (st != RELAY_OK)
		st = run_short(s, mk, GIO_SHORT_TIMEOUT_MS, NULL, &err);
	if (st != RELAY_OK)
		return stage_fail(s, "transfer-failed", "cannot create the guest root %s: %s", s->io.root,
		                  err.message);
	char *local = receiver_build_path(s->platform);
	if (local == NULL) {
		char *msg = receiver_unsupported_message(s->uname);
		tool_result *r = stage_fail(s, "unsupported-platform", "%s", msg ? msg : "no receiver build");
		free(msg);
		return r;
	}
	json_object *frame = NULL;
	char *sum = NULL;
	st = push_program(s, local, "receiver", "the receiver", true, s->receiver_sha, &s->receiver_bytes,
	                  &frame, &sum, &err);
	free(local);
	if (st != RELAY_OK) {
		json_object_put(frame);
		free(sum);
		return stage_fail(s, gio_tool_code(st), "the receiver could not be staged: %s", err.message);
	}
	s->io.receiver_ready = true;
	int64_t protocol = 0;
	const char *name = jsonx_get_str(frame, "receiver");
	const char *version = jsonx_get_str(frame, "version");
	const char *platform = jsonx_get_str(frame, "platform");
	if (!jsonx_get_int(frame, "protocol", &protocol) || protocol != 1 || name == NULL ||
	    strcmp(name, "mcp-relay-receiver") != 0 || version == NULL ||
	    strcmp(version, RELAY_VERSION) != 0 || platform == NULL || strcmp(platform, s->platform) != 0)
		st = relay_error_set(&err, RELAY_E_INTEGRITY, 0,
		                     "the staged receiver reports %s %s, protocol %lld, for %s; expected "
		                     "mcp-relay-receiver %s, protocol 1, for %s",
		                     name ? name : "?", version ? version : "?", (long long)protocol,
		                     platform ? platform : "?", RELAY_VERSION, s->platform);
	if (st == RELAY_OK)
		s->receiver_version = strdup(version);
	json_object_put(frame);
	if (st != RELAY_OK) {
		free(sum);
		return stage_fail(s, "integrity-failed", "the staged receiver does not run as built: %s",
		                  err.message);
	}
	/* The guest's own sha256sum or shasum agrees too, when it has one. */
	bool disagrees = sum && strncmp(sum, "relay-no-sha256", 15) != 0 &&
	                 (strlen(sum) < 64 || strncmp(sum, s->receiver_sha, 64) != 0);
	free(sum);
	if (disagrees)
		return stage_fail(s, "integrity-failed",
		                  "staging checksum mismatch: the guest's sha256sum disagrees "
		                  "about the receiver");
	progress(s, "receiver staged");
	return NULL;
}

/* ---- support files and the workspace (guest.md §3.4) ------------------------------ */

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
		relay_status st = run_short(s, argv, GIO_SHORT_TIMEOUT_MS, NULL, err);
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
	int fd = host_path_open(oc->s->project, &oc->s->files[oc->index[i]].src, why, why_len);
	if (fd < 0)
		*changed = true;
	return fd;
}

static int open_workspace(void *ctx, size_t i, bool *changed, char *why, size_t why_len)
{
	open_ctx *oc = ctx;
	stage_ctx *s = oc->s;
	host_tree_file *f = &s->tree.files[oc->index[i]];
	/* Each workspace file as a host_path below the project. */
	host_path p;
	memset(&p, 0, sizeof p);
	strbuf sb = STRBUF_INIT;
	if (s->workspace.rel[0])
		strbuf_printf(&sb, "%s/%s", s->workspace.rel, f->rel);
	else
		strbuf_puts(&sb, f->rel);
	p.rel = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", s->workspace.path, f->rel);
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

/* Support files: pre-scan of support/, files already equal are skipped,
 * differing ones removed, the rest pushed in one archive, then support/ is
 * scanned again and every file must match (guest.md §3.4, §3.5). */
static tool_result *stage_support(stage_ctx *s, json_object *result_files)
{
	if (s->file_count == 0)
		return NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/support", s->io.root);
	char *support = strbuf_detach(&sb, NULL);
	json_object *before = NULL, *after = NULL;
	tool_result *r = NULL;
	gio_member *members = calloc(s->file_count, sizeof *members);
	size_t *index = calloc(s->file_count, sizeof *index);
	char **stale = calloc(s->file_count, sizeof *stale);
	size_t nm = 0, ns = 0;
	if (members == NULL || index == NULL || stale == NULL) {
		r = stage_fail(s, "internal", "out of memory staging support files");
		goto cleanup;
	}
	relay_status st = s->fresh_root
	                      ? RELAY_OK
	                      : gio_scan(&s->io, s->io.root, "support", true, s->total_bytes, &before, &err);
	if (st == RELAY_OK && before == NULL)
		before = json_object_new_array();
	if (st != RELAY_OK) {
		r = stage_fail(s, gio_tool_code(st),
		               "the guest's support folder could not be inventoried: %s", err.message);
		goto cleanup;
	}
	for (size_t i = 0; i < s->file_count; i++) {
		support_file *f = &s->files[i];
		json_object *fact = gio_fact_find(before, f->path);
		if (fact_matches(fact, f->src.bytes, f->sha256)) {
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
		r = push_problem(s, st, "support files", &err);
		if (r)
			goto cleanup;
		for (size_t i = 0; i < nm; i++)
			s->pushed_bytes += members[i].bytes;
		progress(s, "support files pushed");
	}
	st = gio_scan(&s->io, s->io.root, "support", false, s->total_bytes, &after, &err);
	if (st != RELAY_OK) {
		r = stage_fail(s, gio_tool_code(st),
		               "the guest's support folder could not be inventoried: %s", err.message);
		goto cleanup;
	}
	for (size_t i = 0; i < s->file_count; i++) {
		support_file *f = &s->files[i];
		json_object *fact = gio_fact_find(after, f->path);
		if (!fact_matches(fact, f->src.bytes, f->sha256)) {
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
/* The second host inventory of the workspace (guest.md §3.4), taken on a
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
	ri->rc = host_tree_walk(ri->s->project, &ri->s->workspace, "the workspace", &ri->tree, ri->why,
	                        sizeof ri->why);
	if (ri->rc == 0)
		ri->rc = host_tree_hash(ri->s->project, &ri->s->workspace, &ri->tree, &changed, ri->why,
		                        sizeof ri->why);
	return NULL;
}

static tool_result *stage_workspace(stage_ctx *s)
{
	if (!s->has_workspace)
		return NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/workspace", s->io.root);
	char *dest = strbuf_detach(&sb, NULL);
	json_object *before = NULL, *after = NULL;
	tool_result *r = NULL;
	reinventory ri;
	memset(&ri, 0, sizeof ri);
	ri.s = s;
	pthread_t ri_thread;
	bool ri_started = false;
	size_t n = s->tree.count;
	gio_member *members = calloc(n ? n : 1, sizeof *members);
	size_t *index = calloc(n ? n : 1, sizeof *index);
	fw_strlist stale = {0};
	size_t nm = 0;
	if (members == NULL || index == NULL) {
		r = stage_fail(s, "internal", "out of memory staging the workspace");
		goto cleanup;
	}
	phase_mark(s, "support files");
	relay_status st = s->fresh_root ? RELAY_OK
	                                : gio_scan(&s->io, s->io.root, "workspace", true, s->tree.total_bytes,
	                                           &before, &err);
	if (st == RELAY_OK && before == NULL)
		before = json_object_new_array();
	phase_mark(s, "workspace pre-scan");
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
		int c = i >= n ? 1 : gp == NULL ? -1 : strcmp(s->tree.files[i].rel, gp);
		if (c > 0) { /* only in the guest: an extra file from an earlier attempt */
			strbuf_printf(&sb, "%s/%s", dest, gp);
			fw_strlist_push(&stale, strbuf_str(&sb));
			strbuf_reset(&sb);
			k++;
			continue;
		}
		host_tree_file *f = &s->tree.files[i];
		if (c == 0) {
			k++;
			if (fact_matches(fact, f->bytes, f->sha256)) {
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
		const char *method = "archive";
		if (s->io.traits & RELAY_TRANSPORT_GUEST_FACTS) {
			/* The transport streams trees natively; it replaces the
			 * archive push, never the scan comparison. */
			method = "tree";
			st = gio_push(&s->io, s->workspace.path, dest,
			              RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES, "the workspace", NULL,
			              &err);
			if (st == RELAY_OK)
				gio_note_transfer(&s->io, "push", "workspace", s->workspace.path, dest,
				                  s->tree.total_bytes, NULL, 1, method);
		} else {
			open_ctx oc = {s, index};
			st = gio_push_archive(&s->io, members, nm, open_workspace, &oc, dest, &err);
		}
		r = push_problem(s, st, "the workspace", &err);
		if (r)
			goto cleanup;
	}
	s->pushed_bytes += s->tree.total_bytes;
	phase_mark(s, "workspace push");
	progress(s, "workspace pushed");
	ri_started = pthread_create(&ri_thread, NULL, reinventory_main, &ri) == 0;
	if (!ri_started)
		reinventory_main(&ri);
	st = gio_scan(&s->io, s->io.root, "workspace", false, s->tree.total_bytes, &after, &err);
	if (st != RELAY_OK) {
		r = stage_fail(s, gio_tool_code(st), "the guest workspace could not be inventoried: %s",
		               err.message);
		goto cleanup;
	}
	size_t na = json_object_array_length(after);
	for (size_t j = 0; j < n || j < na; j++) {
		json_object *fact = j < na ? json_object_array_get_idx(after, j) : NULL;
		host_tree_file *f = j < n ? &s->tree.files[j] : NULL;
		if (fact == NULL || f == NULL || strcmp(jsonx_get_str(fact, "path"), f->rel) != 0 ||
		    !fact_matches(fact, f->bytes, f->sha256)) {
			r = stage_fail(s, "integrity-failed", "staging checksum mismatch: %s/%s",
			               s->workspace.path, f ? f->rel : jsonx_get_str(fact, "path"));
			goto cleanup;
		}
	}
	/* The second host inventory must be unchanged. */
	phase_mark(s, "workspace scan and comparison");
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
		               "staging source changed: %s now holds %zu files, not %zu", s->workspace.path,
		               ri.tree.count, n);
		goto cleanup;
	}
	for (size_t j = 0; j < n; j++) {
		if (strcmp(ri.tree.files[j].rel, s->tree.files[j].rel) != 0 ||
		    strcmp(ri.tree.files[j].sha256, s->tree.files[j].sha256) != 0 ||
		    ri.tree.files[j].bytes != s->tree.files[j].bytes) {
			r = stage_fail(s, "integrity-failed", "staging source changed: %s/%s",
			               s->workspace.path, s->tree.files[j].rel);
			goto cleanup;
		}
	}
	phase_mark(s, "second host inventory");
cleanup:
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

/* ---- capture (guest.md §11.3) ------------------------------------------------------- */

static tool_result *stage_capture_programs(stage_ctx *s, json_object *plan)
{
	json_object *stage = jsonx_get_array(plan, "stage");
	size_t n = stage ? json_object_array_length(stage) : 0;
	if (n == 0)
		return NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	/* Parent folders first, with the receiver's path check. */
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(stage, i);
		const char *local = jsonx_get_str(e, "local"), *remote = jsonx_get_str(e, "remote");
		char *parent = fs_dirname(remote);
		if (parent && strcmp(parent, ".") != 0) {
			const char *args[] = {"prepare", "--root", s->io.root, parent, NULL};
			json_object *frame = NULL;
			relay_status st = gio_receiver(&s->io, args, GIO_SHORT_TIMEOUT_MS, &frame, &err);
			json_object_put(frame);
			if (st != RELAY_OK) {
				tool_result *r =
				    stage_fail(s, "transfer-failed", "cannot prepare %s for %s: %s", parent,
				               remote, err.message);
				free(parent);
				return r;
			}
		}
		free(parent);
		char sha[65];
		uint64_t bytes = 0;
		relay_status st =
		    push_program(s, local, remote, remote, false, sha, &bytes, NULL, NULL, &err);
		if (st != RELAY_OK)
			return stage_fail(s, gio_tool_code(st),
			                  "the capture program %s could not be staged: %s", remote,
			                  err.message);
	}
	return NULL;
}

/* Runs `receiver capture-test`; NULL on success with *after_ms_out. */
static tool_result *capture_wait(stage_ctx *s, json_object *plan, int64_t *after_ms_out)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	char *capture = jsonx_to_string(jsonx_get_obj(plan, "capture"), 0);
	char wait[24], every[24];
	snprintf(wait, sizeof wait, "%d", CAPTURE_WAIT_MS);
	snprintf(every, sizeof every, "%d", CAPTURE_EVERY_MS);
	const char *argv[] = {s->io.receiver, "capture-test", "--root",     s->io.root, "--capture", capture,
	                      "--wait-ms",    wait,           "--every-ms", every,      NULL};
	gio_supervision sv;
	memset(&sv, 0, sizeof sv);
	sv.tick_ms = CAPTURE_PROGRESS_MS;
	sv.tick_what = "capture test";
	sv.limit_ms = CAPTURE_WAIT_MS;
	relay_exec_result res;
	relay_status st =
	    gio_exec_supervised(&s->io, &sv, argv, NULL, CAPTURE_EXEC_LIMIT_MS, 1 << 20, 0, &res, &err);
	free(capture);
	tool_result *r = NULL;
	json_object *frame = st == RELAY_OK ? gio_parse_frame(res.out, res.out_len) : NULL;
	bool ok = false;
	if (sv.cancelled) {
		r = cancelled_result(s);
	} else if (st != RELAY_OK) {
		r = stage_fail(s, "transfer-failed", "the capture wait could not run: %s", err.message);
	} else if (res.exit_code != 0 || frame == NULL) {
		r = stage_fail(s, "capture-unavailable", "the capture wait failed (receiver exit %d): %s",
		               res.exit_code,
		               jsonx_get_str(frame, "error") ? jsonx_get_str(frame, "error") : "no frame");
	} else if (!jsonx_get_bool(frame, "ok", &ok) || !ok) {
		const char *diag = jsonx_get_str(frame, "diagnostic");
		r = stage_fail(
		    s, "capture-unavailable",
		    "the image lists capture software but no test screenshot arrived within 120 s; the "
		    "capture command's last diagnostic: %s",
		    diag ? diag : "none");
	} else {
		*after_ms_out = 0;
		jsonx_get_int(frame, "afterMs", after_ms_out);
	}
	json_object_put(frame);
	gio_exec_result_free(&res);
	return r;
}

/* ---- the result --------------------------------------------------------------------- */

static tool_result *stage_result(stage_ctx *s, json_object *files, json_object *updated, json_object *reset)
{
	manager *m = s->m;
	guest *g = s->g;
	const char *plugin_name = capture_plugin_name(m);
	json_object *r = json_object_new_object();
	manager_lock(m);
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_bool(r, "staged", g->staged);
	json_object *rec = json_object_new_object();
	jsonx_add_str(rec, "platform", g->platform);
	jsonx_add_str(rec, "version", s->receiver_version ? s->receiver_version : RELAY_VERSION);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/receiver", g->guest_root);
	jsonx_add_str(rec, "remote", strbuf_str(&sb));
	strbuf_reset(&sb);
	if (s->receiver_sha[0]) {
		jsonx_add_str(rec, "sha256", s->receiver_sha);
		jsonx_add_int(rec, "bytes", (int64_t)s->receiver_bytes);
	} else {
		jsonx_add_null(rec, "sha256");
		jsonx_add_null(rec, "bytes");
	}
	jsonx_add(r, "receiver", rec);
	strbuf_printf(&sb, "%s/workspace", g->guest_root);
	jsonx_add_str(r, "workspace", strbuf_str(&sb));
	strbuf_free(&sb);
	if (s->has_workspace) {
		json_object *wf = json_object_new_object();
		jsonx_add_int(wf, "count", (int64_t)s->tree.count);
		jsonx_add_int(wf, "bytes", (int64_t)s->tree.total_bytes);
		jsonx_add(r, "workspaceFiles", wf);
	} else {
		jsonx_add_null(r, "workspaceFiles");
	}
	jsonx_add(r, "files", files);
	jsonx_add(r, "updated", updated);
	jsonx_add_str(r, "nodePath", g->node_path ? g->node_path : "node");
	jsonx_add_str(r, "cuaDriver", g->snapshots == 1 ? g->cua_driver : NULL);
	jsonx_add_str(r, "recordingSessionId", g->recording_session_id);
	jsonx_add(r, "reset", reset);
	jsonx_add_str(r, "evidencePath", g->evidence_path);
	jsonx_add(r, "extractions", json_object_get(g->extractions));
	json_object *caps = json_object_new_object();
	jsonx_add(caps, "image", image_delivery_capability_json());
	json_object *snap = json_object_new_object();
	bool on = g->snapshots == 1;
	jsonx_add_bool(snap, "enabled", on);
	json_object *cap = jsonx_get_obj(g->capture_plan, "capture");
	jsonx_add_str(snap, "capture",
	              cap && jsonx_get_str(cap, "plugin") ? jsonx_get_str(cap, "plugin") : plugin_name);
	const char *because = jsonx_get_str(g->capture_plan, "because");
	jsonx_add_str(snap, "because", because ? because : "no capture plan");
	jsonx_add(caps, "snapshots", snap);
	jsonx_add(r, "capabilities", caps);
	char *platform = g->platform ? strdup(g->platform) : strdup("unknown");
	manager_unlock(m);
	size_t nfiles = json_object_array_length(files);
	size_t nupdated = json_object_array_length(updated);
	strbuf head = STRBUF_INIT;
	strbuf_printf(&head, "Staged guest %s (%s): %zu support file(s), ", g->name, platform, nfiles);
	if (s->has_workspace)
		strbuf_printf(&head, "workspace %zu file(s)", s->tree.count);
	else
		strbuf_puts(&head, "no workspace");
	if (on)
		strbuf_puts(&head, "; snapshots on");
	else
		strbuf_printf(&head, "; snapshots off (%s)", because ? because : "no capture plan");
	for (size_t i = 0; i < nupdated; i++)
		strbuf_printf(&head, "%s%s", i ? ", " : "; updated ",
		              jsonx_get_str(json_object_array_get_idx(updated, i), "field"));
	free(platform);
	tool_result *res = tool_result_ok(r, "%s", strbuf_str(&head));
	strbuf_free(&head);
	return res;
}

/* ---- already staged: corrected executable paths only (guest.md §3.6) ---------------- */

static json_object *check_executable(stage_ctx *s, const char *field, const char *path)
{
	json_object *u = json_object_new_object();
	jsonx_add_str(u, "field", field);
	jsonx_add_str(u, "value", path);
	const char *argv[] = {path, "--version", NULL};
	relay_exec_result res;
	relay_error err;
	json_object *check = json_object_new_object();
	jsonx_add_str(check, "command", "--version");
	relay_status st = gio_exec(&s->io, argv, NULL, STAGE_PROBE_TIMEOUT_MS, 1 << 16, 0, &res, &err);
	if (st == RELAY_OK && !res.timed_out && res.exit_code == 0) {
		jsonx_add_bool(check, "ready", true);
		size_t len = res.out_len;
		while (len && (res.out[len - 1] == '\n' || res.out[len - 1] == '\r'))
			len--;
		size_t clean = 0;
		char *text = utf8_sanitize(res.out ? res.out : "", len > 200 ? 200 : len, &clean);
		jsonx_add_strn(check, "version", text ? text : "", text ? clean : 0);
		free(text);
	} else {
		jsonx_add_bool(check, "ready", false);
		char diag[RELAY_ERROR_MESSAGE_BYTES];
		if (st != RELAY_OK)
			snprintf(diag, sizeof diag, "%s", err.message);
		else
			snprintf(diag, sizeof diag, "%s --version %s (exit %d)", path,
			         res.timed_out ? "timed out" : "failed", res.exit_code);
		jsonx_add_str(check, "diagnostic", diag);
	}
	gio_exec_result_free(&res);
	jsonx_add(u, "check", check);
	return u;
}

static tool_result *correct_paths(stage_ctx *s, json_object *reset)
{
	const char *node = jsonx_get_str(s->args, "nodePath");
	const char *cua = jsonx_get_str(s->args, "cuaDriver");
	json_object *updated = json_object_new_array();
	if (node)
		json_object_array_add(updated, check_executable(s, "nodePath", node));
	if (cua)
		json_object_array_add(updated, check_executable(s, "cuaDriver", cua));
	/* Reattach the recording session: `receiver init` with the same id
	 * answers created: false and refuses another session's state. */
	manager_lock(s->m);
	char *session = s->g->recording_session_id ? strdup(s->g->recording_session_id) : NULL;
	manager_unlock(s->m);
	relay_error err;
	memset(&err, 0, sizeof err);
	const char *args[] = {"init", "--root", s->io.root, "--session", session, NULL};
	json_object *frame = NULL;
	s->io.receiver_ready = true;
	relay_status st =
	    session ? gio_receiver(&s->io, args, GIO_SHORT_TIMEOUT_MS, &frame, &err) : RELAY_E_INTERNAL;
	json_object_put(frame);
	free(session);
	if (st != RELAY_OK) {
		json_object_put(updated);
		json_object_put(reset);
		return stage_fail(
		    s, "integrity-failed",
		    "the recording session could not be reattached: %s; repair with a diagnostic shell "
		    "script or reset the recording (resetRecording: true)",
		    session ? err.message : "the guest has no recording session");
	}
	json_object *plan = NULL;
	if (cua) {
		json_object *apps = capture_catalog_applications(s->m, s->g, s->call, NULL, 0);
		plan = capture_plan_for(s->m, s->g, apps, s->platform, cua);
		json_object_put(apps);
	}
	manager_lock(s->m);
	if (node) {
		free(s->g->node_path);
		s->g->node_path = strdup(node);
	}
	if (cua) {
		free(s->g->cua_driver);
		s->g->cua_driver = strdup(cua);
		/* The snapshot verdict of the stage stands; only the command
		 * follows the corrected driver path. */
		if (plan && s->g->capture_plan && jsonx_get_obj(plan, "capture") && s->g->snapshots == 1) {
			jsonx_add(s->g->capture_plan, "capture",
			          json_object_get(jsonx_get_obj(plan, "capture")));
			jsonx_add_str(s->g->capture_plan, "cuaDriver", cua);
		}
	}
	guest_save(s->g);
	manager_unlock(s->m);
	json_object_put(plan);
	if (node || cua) {
		json_object *d = json_object_new_object();
		jsonx_add(d, "updated", json_object_get(updated));
		guest_event(s->m, s->g, "stage", "relay_stage corrected executable paths", d);
	}
	return stage_result(s, json_object_new_array(), updated, reset);
}

/* ---- relay_stage ------------------------------------------------------------------ */

static void stage_ctx_free(stage_ctx *s)
{
	if (s->hashing)
		pthread_join(s->hash_thread, NULL);
	if (s->io_open) {
		gio_write_transfers(&s->io, "relay_stage");
		gio_end(&s->io);
	}
	host_path_free(&s->workspace);
	host_tree_free(&s->tree);
	for (size_t i = 0; i < s->file_count; i++)
		host_path_free(&s->files[i].src);
	free(s->files);
	free(s->uname);
	free(s->receiver_version);
}

tool_result *tool_stage(manager *m, guest *g, json_object *args, relay_call *call)
{
	stage_ctx s;
	memset(&s, 0, sizeof s);
	s.m = m;
	s.g = g;
	s.call = call;
	s.args = args;
	s.project = m->settings->project;
	s.mark_ms = clock_monotonic_ms();
	tool_result *r = NULL;
	json_object *reset = NULL, *plan = NULL, *apps = NULL, *files = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	bool want_reset = false;
	jsonx_get_bool(args, "resetRecording", &want_reset);
	bool gives_content = jsonx_has(args, "workspace") || jsonx_has(args, "files");

	/* Step 1: sealed. */
	manager_lock(m);
	bool sealed = g->delivered, leased = g->lease != NULL && g->guest_root != NULL;
	bool pending = g->pending_reset != NULL, staged = g->staged;
	manager_unlock(m);
	if (sealed) {
		r = guest_error(
		    m, g, NULL, "sealed",
		    "The evidence of %s is already delivered; only relay_release (or a relay_finish retry) "
		    "is possible",
		    g->name);
		goto cleanup;
	}
	if (!leased) {
		r = guest_error(m, g, NULL, "not-staged", "Guest %s holds no lease to stage", g->name);
		goto cleanup;
	}
	if (want_reset && !staged && !pending) {
		r = guest_error(
		    m, g, NULL, "not-staged",
		    "a recording reset needs a staged recording; %s has none (use relay_stage without "
		    "resetRecording)",
		    g->name);
		goto cleanup;
	}
	/* Step 2: host inputs and limits, before anything is sent. */
	r = check_inputs(&s);
	if (r)
		goto cleanup;
	phase_mark(&s, "host inputs (walk)");
	hash_start(&s);
	/* Step 3: a requested or pending recording reset. */
	if (relay_call_is_cancelled(call)) {
		r = cancelled_result(&s);
		goto cleanup;
	}
	if (gio_begin(&s.io, m, g, call, &err) != RELAY_OK) {
		r = stage_fail(&s, "transfer-failed", "the guest's transport is not available: %s",
		               err.message);
		goto cleanup;
	}
	s.io_open = true;
	if (want_reset || pending) {
		s.io.receiver_ready = true;
		r = recording_reset(m, g, &s.io, &reset);
		if (r)
			goto cleanup;
		staged = false;
	}
	/* Step 4: already staged. */
	if (staged && gives_content) {
		r = stage_fail(
		    &s, "already-staged",
		    "runtime already staged; resubmit only corrected nodePath or cuaDriver, and repair with "
		    "a diagnostic shell script");
		goto cleanup;
	}
	/* Step 5: the platform. */
	relay_status st = probe_platform(&s, &err);
	if (st != RELAY_OK) {
		r = stage_fail(&s, "transfer-failed",
		               "the guest's platform could not be read (uname -sm): %s", err.message);
		goto cleanup;
	}
	char *build = receiver_build_path(s.platform);
	if (build == NULL) {
		char *msg = receiver_unsupported_message(s.uname);
		r = stage_fail(&s, "unsupported-platform", "%s",
		               msg ? msg : "no receiver build for this platform");
		free(msg);
		goto cleanup;
	}
	free(build);
	/* Step 6: corrected paths only. */
	if (staged) {
		r = correct_paths(&s, reset);
		reset = NULL;
		goto cleanup;
	}
	/* Step 7 on: a fresh stage. */
	phase_mark(&s, "platform probe");
	RELAY_FAILPOINT("stage.before-receiver");
	r = stage_receiver(&s);
	if (r)
		goto cleanup;
	phase_mark(&s, "receiver");
	const char *cua_given = jsonx_get_str(args, "cuaDriver");
	manager_lock(m);
	char *cua_stored = g->cua_driver ? strdup(g->cua_driver) : NULL;
	manager_unlock(m);
	apps = capture_catalog_applications(m, g, call, NULL, 0);
	plan = capture_plan_for(m, g, apps, s.platform, cua_given ? cua_given : cua_stored);
	free(cua_stored);
	r = stage_capture_programs(&s, plan);
	if (r)
		goto cleanup;
	/* Step 9: the guest root's folders, with the receiver's path check. */
	{
		fw_strlist dirs = {0};
		static const char *const base[] = {"workspace", "support", "requests",
		                                   "streamed",  "scripts", "recordings"};
		for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
			fw_strlist_push(&dirs, base[i]);
		for (size_t i = 0; i < s.file_count; i++) {
			char *parent = fs_dirname(s.files[i].path);
			if (parent && strcmp(parent, ".") != 0) {
				strbuf sb = STRBUF_INIT;
				strbuf_printf(&sb, "support/%s", parent);
				bool dup = false;
				for (size_t k = 0; k < dirs.count && !dup; k++)
					dup = strcmp(dirs.items[k], strbuf_str(&sb)) == 0;
				if (!dup)
					fw_strlist_push(&dirs, strbuf_str(&sb));
				strbuf_free(&sb);
			}
			free(parent);
		}
		size_t done = 0;
		while (done < dirs.count && r == NULL) {
			size_t chunk = dirs.count - done > 512 ? 512 : dirs.count - done;
			const char **pargs = calloc(chunk + 4, sizeof *pargs);
			if (pargs == NULL) {
				r = stage_fail(&s, "internal", "out of memory preparing the guest root");
				break;
			}
			pargs[0] = "prepare";
			pargs[1] = "--root";
			pargs[2] = s.io.root;
			for (size_t k = 0; k < chunk; k++)
				pargs[3 + k] = dirs.items[done + k];
			json_object *frame = NULL;
			st = gio_receiver(&s.io, pargs, GIO_SHORT_TIMEOUT_MS, &frame, &err);
			json_object_put(frame);
			free(pargs);
			if (st != RELAY_OK)
				r = stage_fail(&s, "transfer-failed",
				               "the guest root's folders could not be prepared: %s",
				               err.message);
			done += chunk;
		}
		fw_strlist_free(&dirs);
		if (r)
			goto cleanup;
	}
	/* Step 10: support files and the workspace. */
	r = hash_join(&s);
	if (r == NULL && RELAY_FAILPOINT_ERROR("stage.before-push", &err) != RELAY_OK)
		r = stage_fail(&s, "transfer-failed", "%s", err.message);
	if (r)
		goto cleanup;
	phase_mark(&s, "host hashes (waited for)");
	files = json_object_new_array();
	r = stage_support(&s, files);
	if (r)
		goto cleanup;
	r = stage_workspace(&s);
	if (r)
		goto cleanup;
	RELAY_FAILPOINT("stage.after-push");
	if (relay_call_is_cancelled(call)) {
		r = cancelled_result(&s);
		goto cleanup;
	}
	/* Step 11: the capture wait. */
	bool enabled = false;
	jsonx_get_bool(plan, "enabled", &enabled);
	if (enabled) {
		int64_t after_ms = 0;
		r = capture_wait(&s, plan, &after_ms);
		if (r)
			goto cleanup;
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "%s; a test screenshot arrived after %lld s",
		              jsonx_get_str(plan, "because"), (long long)((after_ms + 999) / 1000));
		jsonx_add_str(plan, "because", strbuf_str(&sb));
		strbuf_free(&sb);
	}
	/* Step 12: the recording session. */
	RELAY_FAILPOINT("stage.before-init");
	char hex[17], session[24];
	random_hex(hex, 16);
	snprintf(session, sizeof session, "rec-%s", hex);
	/* The session is kept before the receiver's init, so a stage cut short after it (a crash,
	 * failpoint stage.after-init) is retried with the session the guest's state/ holds. */
	manager_lock(m);
	if (g->recording_session_id && strlen(g->recording_session_id) < sizeof session)
		snprintf(session, sizeof session, "%s", g->recording_session_id);
	else {
		free(g->recording_session_id);
		g->recording_session_id = strdup(session);
		guest_save(g);
	}
	manager_unlock(m);
	const char *iargs[] = {"init", "--root", s.io.root, "--session", session, NULL};
	json_object *frame = NULL;
	st = gio_receiver(&s.io, iargs, GIO_SHORT_TIMEOUT_MS, &frame, &err);
	json_object_put(frame);
	if (st != RELAY_OK) {
		r = stage_fail(
		    &s, "transfer-failed",
		    "the recording could not start: %s; if the guest's state/ belongs to an earlier "
		    "recording, reset it (resetRecording: true) or inspect it with a diagnostic shell script",
		    err.message);
		goto cleanup;
	}
	RELAY_FAILPOINT("stage.after-init");
	const char *node_given = jsonx_get_str(args, "nodePath");
	const char *plan_cua = jsonx_get_str(plan, "cuaDriver");
	manager_lock(m);
	g->staged = true;
	g->phase = PHASE_STAGED;
	free(g->platform);
	g->platform = strdup(s.platform);
	if (node_given) {
		free(g->node_path);
		g->node_path = strdup(node_given);
	}
	if (cua_given || plan_cua) {
		free(g->cua_driver);
		g->cua_driver = strdup(cua_given ? cua_given : plan_cua);
	}
	g->snapshots = enabled ? 1 : 0;
	json_object_put(g->capture_plan);
	g->capture_plan = json_object_get(plan);
	free(g->recording_session_id);
	g->recording_session_id = strdup(session);
	guest_save(g);
	manager_unlock(m);
	json_object *d = json_object_new_object();
	jsonx_add_str(d, "platform", s.platform);
	jsonx_add_str(d, "recordingSessionId", session);
	jsonx_add_int(d, "supportFiles", (int64_t)s.file_count);
	jsonx_add_int(d, "workspaceFiles", (int64_t)s.tree.count);
	jsonx_add_int(d, "bytes", (int64_t)s.total_bytes);
	jsonx_add_bool(d, "snapshots", enabled);
	guest_event(m, g, "stage", "relay_stage", d);
	relay_call_progress(call, (double)s.total_bytes + 2, s.total_bytes ? (double)s.total_bytes + 2 : -1,
	                    "staged", true);
	r = stage_result(&s, files, json_object_new_array(), reset);
	files = NULL;
	reset = NULL;
cleanup:
	json_object_put(reset);
	json_object_put(plan);
	json_object_put(apps);
	json_object_put(files);
	stage_ctx_free(&s);
	return r;
}
