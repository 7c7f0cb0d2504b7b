/*
 * receiver/run_steps.c — runtimes (spec/guest.md §12.1), snapshots and dispatch (§12.2) (run_internal.h).
 */
#include "run_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* ---- runtimes (spec/guest.md §12.1) ------------------------------------------ */

static int parse_node_version(const char *text, int *major, int *minor)
{
	const char *p = text;
	char *end;
	long a, b;
	while (*p == ' ' || *p == '\n')
		p++;
	if (*p == 'v')
		p++;
	a = strtol(p, &end, 10);
	if (end == p || *end != '.')
		return -1;
	p = end + 1;
	b = strtol(p, &end, 10);
	if (end == p)
		return -1;
	*major = (int)a;
	*minor = (int)b;
	return 0;
}

static char *trim_dup(const buf *b)
{
	size_t s = 0, e = b->len;
	while (s < e && (b->data[s] == ' ' || b->data[s] == '\n' || b->data[s] == '\r'))
		s++;
	while (e > s && (b->data[e - 1] == ' ' || b->data[e - 1] == '\n' || b->data[e - 1] == '\r'))
		e--;
	return xstrndup(b->data ? b->data + s : "", e - s);
}

/* Returns NULL and sets ctx->argv, or the refusal diagnostic. */
const char *run_resolve_runtime(run_ctx *ctx, rerr *err, int *internal)
{
	const char *node_name = run_str_or_null(jv_get(ctx->req, "runtime"), "nodePath");
	const char *script = ctx->script_path;
	char *prog = NULL;
	*internal = 0;
	if (!node_name)
		node_name = "node";
	if (strcmp(ctx->language, "shell") == 0) {
		prog = find_program("/bin/sh");
		if (!prog)
			return "no shell runtime in the guest: tried /bin/sh";
		ctx->argv = run_argv_make(prog, script, NULL);
	} else if (strcmp(ctx->language, "python") == 0) {
		prog = find_program("python3");
		if (!prog)
			return "no python runtime in the guest: tried python3";
		ctx->argv = run_argv_make(prog, script, NULL);
	} else if (strcmp(ctx->language, "javascript") == 0) {
		prog = find_program(node_name);
		if (!prog) {
			text_format(ctx->diag, sizeof(ctx->diag),
			            "no javascript runtime in the guest: tried %s", node_name);
			return ctx->diag;
		}
		ctx->argv = run_argv_make(prog, script, NULL);
	} else {
		char *tsx = find_program("tsx");
		spawn_request req;
		spawn_result res;
		spawn_hooks hooks;
		char *version;
		char *argv[3];
		int major = 0, minor = 0;
		if (tsx) {
			ctx->argv = run_argv_make(tsx, script, NULL);
			free(tsx);
			return NULL;
		}
		prog = find_program(node_name);
		if (!prog) {
			text_format(ctx->diag, sizeof(ctx->diag),
			            "no typescript runtime in the guest: tried tsx, %s", node_name);
			return ctx->diag;
		}
		argv[0] = prog;
		argv[1] = "--version";
		argv[2] = NULL;
		memset(&req, 0, sizeof(req));
		req.path = prog;
		req.argv = argv;
		req.timeout_ms = NODE_VERSION_TIMEOUT_MS;
		req.output_budget = OUTPUT_BUDGET_BYTES;
		run_make_hooks(ctx, &hooks, 0);
		ctx->phase_name = "runtime-probe";
		if (proc_run(&req, &hooks, &res, err) != 0) {
			free(prog);
			*internal = 1;
			return "runtime probe failed";
		}
		version = trim_dup(&res.out);
		if (res.spawn_failed || res.timed_out || res.signal_no || res.exit_code != 0 ||
		    parse_node_version(version, &major, &minor) != 0) {
			text_format(
			    ctx->diag, sizeof(ctx->diag),
			    "no typescript runtime in the guest: tsx not found and %s --version failed",
			    node_name);
			free(version);
			free(prog);
			spawn_result_free(&res);
			return ctx->diag;
		}
		spawn_result_free(&res);
		if (major < 22 || (major == 22 && minor < 6)) {
			text_format(ctx->diag, sizeof(ctx->diag),
			            "no typescript runtime in the guest: tsx not found and Node.js %s lacks "
			            "type stripping "
			            "(22.6 or later)",
			            version);
			free(version);
			free(prog);
			return ctx->diag;
		}
		free(version);
		if (major < 23 || (major == 23 && minor < 6))
			ctx->argv = run_argv_make(prog, "--experimental-strip-types", script);
		else
			ctx->argv = run_argv_make(prog, script, NULL);
	}
	free(prog);
	return NULL;
}

/* ---- snapshots ---------------------------------------------------------- */

static void note_capture_failure(run_ctx *ctx, const char *phase, const capture_outcome *co)
{
	jv *f = jv_object();
	if (co->unknown)
		ctx->captures_unknown++;
	else
		ctx->captures_failed++;
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set_str(f, "actionId", ctx->action_id);
	jv_set_str(f, "phase", phase);
	jv_set_str(f, "diagnostic", co->diagnostic);
	run_journal_note(ctx, "evidence-failure", f);
}

static int sync_capture_file(const char *path, capture_outcome *co)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fsx_fsync(fd) != 0) {
		text_format(co->diagnostic, sizeof(co->diagnostic), "cannot sync the capture %s: %s", path,
		            strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Takes one retained snapshot; 0 on success, 1 when it failed (diag in co),
 * -1 on an internal failure. */
int run_take_snapshot(run_ctx *ctx, const char *phase, capture_outcome *co, rerr *err)
{
	char *dir_rel = xasprintf("state/snapshots/%s", ctx->session_id);
	char *dir_abs = path_join(ctx->root, dir_rel);
	char *file_name = xasprintf("%s-%s.png", ctx->execution_id, phase);
	char *partial = xasprintf("%s/.partial-%s-%s.png", dir_abs, ctx->execution_id, phase);
	char *final_path = path_join(dir_abs, file_name);
	spawn_hooks hooks;
	int rc = -1;
	if (dir_ensure(ctx->root, dir_rel, err) != 0)
		goto cleanup;
	run_make_hooks(ctx, &hooks, 0);
	ctx->phase_name = strcmp(phase, "before") == 0 ? "capture-before" : "capture-after";
	capture_take(&ctx->capture, partial, CAPTURE_TIMEOUT_MAX_MS, &hooks, ctx->spared, ctx->spared_count,
	             co);
	/* The file's own data is made durable here, with the directory's (the
	 * capture program need not sync it): under deferred syncs both ride the
	 * next commit point. */
	if (co->ok && sync_capture_file(partial, co) != 0) {
		unlink(partial);
		co->ok = 0;
	}
	if (co->ok && rename(partial, final_path) != 0) {
		text_format(co->diagnostic, sizeof(co->diagnostic),
		            "cannot rename the capture into place: %s", strerror(errno));
		unlink(partial);
		co->ok = 0;
	}
	if (co->ok && fsync_dir(dir_abs, err) != 0)
		goto cleanup;
	if (!co->ok) {
		note_capture_failure(ctx, phase, co);
		rc = 1;
		goto cleanup;
	}
	{
		jv *d = jv_object();
		jv *a = jv_object();
		jv *f = jv_object();
		char *rel_path = xasprintf("%s/%s", dir_rel, file_name);
		int after = strcmp(phase, "after") == 0;
		jv_set_str(d, "sessionId", ctx->session_id);
		jv_set_str(d, "attemptId", ctx->attempt_id);
		jv_set_str(d, "executionId", ctx->execution_id);
		jv_set_str(d, "actionId", ctx->action_id);
		jv_set_str(d, "stepId", ctx->step_id);
		jv_set_str(d, "phase", phase);
		jv_set_str(d, "capturedAt", co->captured_at);
		jv_set_str(d, "sha256", co->sha256);
		jv_set_int(d, "bytes", (int64_t)co->bytes);
		jv_set_str(d, "mimeType", "image/png");
		if (after)
			jv_set_int(d, "declaredAfterIntervalMs", ctx->after_ms);
		jv_set_str(d, "fileName", file_name);
		if (ctx->group_id)
			jv_set_str(d, "groupId", ctx->group_id);
		jv_push(ctx->descriptors, d);
		jv_set_str(a, "phase", phase);
		jv_set_str(a, "path", rel_path);
		jv_set_str(a, "sha256", co->sha256);
		jv_set_int(a, "bytes", (int64_t)co->bytes);
		jv_push(ctx->action_snaps, a);
		jv_push(ctx->file_names, jv_str(file_name));
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set_str(f, "actionId", ctx->action_id);
		jv_set_str(f, "phase", phase);
		jv_set_str(f, "fileName", file_name);
		jv_set_str(f, "sha256", co->sha256);
		jv_set_int(f, "bytes", (int64_t)co->bytes);
		jv_set_str(f, "capturedAt", co->captured_at);
		jv_set_str(f, "mimeType", "image/png");
		if (ctx->group_id)
			jv_set_str(f, "groupId", ctx->group_id);
		if (after)
			jv_set_int(f, "declaredAfterIntervalMs", ctx->after_ms);
		free(rel_path);
		if (journal_append(&ctx->jr, "snapshot-captured", f, err) != 0)
			goto cleanup;
	}
	rc = 0;
cleanup:
	free(dir_rel);
	free(dir_abs);
	free(file_name);
	free(partial);
	free(final_path);
	return rc;
}

/* The capture gate probe of member and last events: 0 ok, 1 failed. */
int run_capture_gate(run_ctx *ctx, capture_outcome *co, rerr *err)
{
	char rnd[17];
	char *probe;
	spawn_hooks hooks;
	jv *f;
	if (random_hex(rnd, 8, err) != 0)
		return -1;
	probe = xasprintf("%s/.capture-probe-%s.png", ctx->root, rnd);
	run_make_hooks(ctx, &hooks, 0);
	ctx->phase_name = "capture-gate";
	capture_take(&ctx->capture, probe, CAPTURE_TIMEOUT_MAX_MS, &hooks, ctx->spared, ctx->spared_count,
	             co);
	unlink(probe);
	free(probe);
	if (co->unknown)
		ctx->captures_unknown++;
	f = jv_object();
	jv_set_str(f, "executionId", ctx->execution_id);
	jv_set_str(f, "actionId", ctx->action_id);
	jv_set_bool(f, "ok", co->ok);
	if (!co->ok)
		jv_set_str(f, "diagnostic", co->diagnostic);
	if (journal_append(&ctx->jr, "capture-status", f, err) != 0)
		return -1;
	return co->ok ? 0 : 1;
}

/* ---- dispatch (spec/guest.md §12.2) ------------------------------------------ */

static char **script_environment(run_ctx *ctx)
{
	static const char *const ours[] = {"RELAY_RUNTIME_ROOT=", "RELAY_WORKSPACE=", "RELAY_SUPPORT=",
	                                   "RELAY_EXECUTION_ID=", "RELAY_STEP_ID=",   "RELAY_CUA_DRIVER="};
	size_t n = 0, i, k, out = 0;
	char **env;
	while (environ && environ[n])
		n++;
	env = xcalloc(n + 8, sizeof(char *));
	for (i = 0; i < n; i++) {
		int skip = 0;
		for (k = 0; k < sizeof(ours) / sizeof(ours[0]); k++)
			if (strncmp(environ[i], ours[k], strlen(ours[k])) == 0)
				skip = 1;
		if (!skip)
			env[out++] = xstrdup(environ[i]);
	}
	env[out++] = xasprintf("RELAY_RUNTIME_ROOT=%s", ctx->root);
	env[out++] = xasprintf("RELAY_WORKSPACE=%s/workspace", ctx->root);
	env[out++] = xasprintf("RELAY_SUPPORT=%s/support", ctx->root);
	env[out++] = xasprintf("RELAY_EXECUTION_ID=%s", ctx->execution_id);
	env[out++] = xasprintf("RELAY_STEP_ID=%s", ctx->step_id);
	if (ctx->capture_on && strcmp(ctx->capture.plugin, "capture-cua") == 0)
		env[out++] = xasprintf("RELAY_CUA_DRIVER=%s", ctx->capture.argv[0]);
	env[out] = NULL;
	return env;
}

/* spec/guest.md §16.1: the script exited and left processes running. The
 * receiver stops adopting orphans (what is adopted already is spared by the
 * captures' cleanup), and a drainer takes the pipes survivors still hold. */
static void keep_survivors(run_ctx *ctx)
{
	rerr derr;
	proc_stop_subreaping();
	ctx->spared = proc_children(&ctx->spared_count);
	if (survivors_start_drain(ctx->root, ctx->execution_id, ctx->proc.out_left_fd, ctx->proc.err_left_fd,
	                          &ctx->drainer_pid, &derr) != 0)
		fprintf(stderr, "receiver: %s; what the step left running may block on its output\n",
		        derr.msg);
	ctx->proc.out_left_fd = -1;
	ctx->proc.err_left_fd = -1;
	if (ctx->drainer_pid > 0) {
		ctx->spared = xrealloc(ctx->spared, (ctx->spared_count + 1) * sizeof(pid_t));
		ctx->spared[ctx->spared_count++] = ctx->drainer_pid;
	}
}

/* Records what the script left running after a normal exit: the object of
 * `leftRunning`, journaled as the annotation background-processes when any. */
void run_note_left_running(run_ctx *ctx)
{
	const spawn_result *p = &ctx->proc;
	if (!ctx->have_proc || !p->exited || p->timed_out || p->output_truncated || p->cancelled ||
	    p->spawn_failed)
		return;
	/* Nothing was left behind (proc_run knows without walking /proc): an
	 * empty list. */
	if (!p->left_running) {
		ctx->left_running = jv_object();
		jv_set_int(ctx->left_running, "count", 0);
		jv_set(ctx->left_running, "processes", jv_array());
		return;
	}
	{
		/* neither the drainer nor the screen recording is the step's */
		pid_t excluded[2] = {ctx->drainer_pid, record_pid(ctx)};
		ctx->left_running = survivors_list(p->pgid, excluded, 2);
	}
	if (jv_get(ctx->left_running, "count")->number_int > 0) {
		jv *f = jv_object();
		jv_set_str(f, "name", "background-processes");
		jv_set_str(f, "executionId", ctx->execution_id);
		jv_set(f, "details", jv_copy(ctx->left_running));
		run_journal_note(ctx, "annotation", f);
	}
}

int run_dispatch(run_ctx *ctx, rerr *err)
{
	spawn_request req;
	spawn_hooks hooks;
	char **env = script_environment(ctx);
	int rc;
	memset(&req, 0, sizeof(req));
	req.path = ctx->argv[0];
	req.argv = ctx->argv;
	req.envp = env;
	req.cwd = ctx->cwd;
	req.timeout_ms = ctx->timeout_ms;
	req.output_budget = OUTPUT_BUDGET_BYTES;
	req.leave_survivors = 1;
	req.spared = ctx->spared; /* the screen recording, when one runs (record.h) */
	req.spared_count = ctx->spared_count;
	run_make_hooks(ctx, &hooks, 1);
	ctx->phase_name = "script";
	timestamp_now(ctx->dispatch_at);
	ctx->dispatched = 1;
	rc = proc_run(&req, &hooks, &ctx->proc, err);
	if (rc == 0) {
		ctx->have_proc = 1;
		if (ctx->proc.left_running)
			keep_survivors(ctx);
	}
	run_free_argv(env);
	return rc;
}
