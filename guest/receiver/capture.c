/*
 * receiver/capture.c — see capture.h.
 */
#include "capture.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture_resident.h"
#include "scan.h"

int capture_spec_parse(const jv *obj, capture_spec *out, rerr *err)
{
	jv *argv;
	const char *plugin, *check;
	int64_t timeout_ms;
	size_t i, outs = 0;
	memset(out, 0, sizeof(*out));
	if (!jv_is(obj, JV_OBJECT)) {
		err_set(err, "capture is not an object");
		return -1;
	}
	for (i = 0; i < obj->count; i++) {
		const char *k = obj->keys[i];
		if (strcmp(k, "plugin") && strcmp(k, "argv") && strcmp(k, "check") &&
		    strcmp(k, "timeoutMs")) {
			err_set(err, "unknown capture field %s", k);
			return -1;
		}
	}
	plugin = jv_get_str(obj, "plugin");
	check = jv_get_str(obj, "check");
	argv = jv_get(obj, "argv");
	if (!plugin || !check || !jv_is(argv, JV_ARRAY) || !jv_get_int(obj, "timeoutMs", &timeout_ms)) {
		err_set(err, "capture needs plugin, argv, check and timeoutMs");
		return -1;
	}
	if (strcmp(check, "cua-driver-json") != 0 && strcmp(check, "png-file") != 0) {
		err_set(err, "unknown capture check '%s'", check);
		return -1;
	}
	if (timeout_ms < 1 || timeout_ms > CAPTURE_TIMEOUT_MAX_MS) {
		err_set(err, "capture timeoutMs must be 1..%d", CAPTURE_TIMEOUT_MAX_MS);
		return -1;
	}
	if (argv->count < 1 || argv->count > CAPTURE_ARGV_MAX) {
		err_set(err, "capture argv needs 1..%d entries", CAPTURE_ARGV_MAX);
		return -1;
	}
	for (i = 0; i < argv->count; i++) {
		jv *a = argv->items[i];
		const char *p;
		if (!jv_is(a, JV_STRING) || memchr(a->str, '\0', a->str_len)) {
			err_set(err, "capture argv entries must be strings without NUL");
			return -1;
		}
		for (p = a->str; (p = strstr(p, "@OUT@")) != NULL; p += 5)
			outs++;
	}
	if (outs != 1 || argv->items[0]->str_len == 0) {
		err_set(err, "capture argv must hold exactly one @OUT@ and a program");
		return -1;
	}
	out->plugin = xstrdup(plugin);
	out->check = xstrdup(check);
	out->timeout_ms = timeout_ms;
	out->argc = argv->count;
	out->argv = xcalloc(argv->count + 1, sizeof(char *));
	for (i = 0; i < argv->count; i++)
		out->argv[i] = xstrdup(argv->items[i]->str);
	return 0;
}

void capture_spec_free(capture_spec *spec)
{
	size_t i;
	for (i = 0; spec->argv && i < spec->argc; i++)
		free(spec->argv[i]);
	free(spec->argv);
	free(spec->plugin);
	free(spec->check);
	memset(spec, 0, sizeof(*spec));
}

static char *replace_out(const char *arg, const char *out_path)
{
	const char *at = strstr(arg, "@OUT@");
	if (!at)
		return xstrdup(arg);
	return xasprintf("%.*s%s%s", (int)(at - arg), arg, out_path, at + 5);
}

static void last_line(const buf *b, char *out, size_t out_len)
{
	size_t end = b->len, start;
	while (end > 0 && (b->data[end - 1] == '\n' || b->data[end - 1] == '\r' || b->data[end - 1] == ' '))
		end--;
	start = end;
	while (start > 0 && b->data[start - 1] != '\n' && end - start < 300)
		start--;
	text_format(out, out_len, "%.*s", (int)(end - start), b->data ? b->data + start : "");
}

/* Checks the PNG at out_path: regular, 1 byte to 64 MiB, PNG signature. */
static int check_png(const char *out_path, capture_outcome *res)
{
	struct stat st;
	unsigned char head[8];
	int fd;
	ssize_t n;
	rerr err;
	if (lstat(out_path, &st) != 0) {
		text_format(res->diagnostic, sizeof(res->diagnostic), "capture wrote no file at %s",
		            out_path);
		return -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < 1 || (uint64_t)st.st_size > IMAGE_MAX_BYTES) {
		text_format(res->diagnostic, sizeof(res->diagnostic),
		            "capture file is not a regular file of 1 byte to 64 MiB (%lld bytes)",
		            (long long)st.st_size);
		return -1;
	}
	fd = open(out_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	n = fd >= 0 ? read(fd, head, sizeof(head)) : -1;
	if (fd >= 0)
		close(fd);
	if (n != 8 || !png_signature_ok(head, 8)) {
		text_format(res->diagnostic, sizeof(res->diagnostic),
		            "capture file does not start with the PNG signature");
		return -1;
	}
	if (hash_regular_file(out_path, &st, res->sha256, &res->bytes, &err) != 0) {
		text_format(res->diagnostic, sizeof(res->diagnostic), "%s", err.msg);
		return -1;
	}
	return 0;
}

static int check_reported_path(const char *text, size_t len, const char *out_path, capture_outcome *res)
{
	rerr err;
	jv *answer = jv_parse(text ? text : "", len, &err);
	const char *reported = jv_get_str(answer, "screenshot_file_path");
	int rc = 0;
	if (!jv_is(answer, JV_OBJECT)) {
		text_format(res->diagnostic, sizeof(res->diagnostic),
		            "capture output is not a JSON object: %s", err.msg);
		rc = -1;
	} else if (!reported || strcmp(reported, out_path) != 0) {
		text_format(res->diagnostic, sizeof(res->diagnostic),
		            "capture output does not report screenshot_file_path %s", out_path);
		rc = -1;
	}
	jv_free(answer);
	return rc;
}

int capture_check_answer(const char *text, size_t len, const char *out_path, capture_outcome *res)
{
	if (check_reported_path(text, len, out_path, res) != 0 || check_png(out_path, res) != 0)
		return -1;
	res->ok = 1;
	return 0;
}

void capture_take(const capture_spec *spec, const char *out_path, int64_t limit_ms, const spawn_hooks *hooks,
                  const pid_t *spared, size_t spared_count, capture_outcome *res)
{
	char **argv = NULL;
	char *program = NULL;
	spawn_request req;
	spawn_result run;
	rerr err;
	size_t i;
	const char *p;
	int ran = 0;
	memset(res, 0, sizeof(*res));
	memset(&run, 0, sizeof(run));
	for (p = out_path; *p; p++) {
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20 || *p == 0x7f) {
			text_format(res->diagnostic, sizeof(res->diagnostic),
			            "capture output path holds a quote, backslash or control character");
			goto cleanup;
		}
	}
	{
		struct stat st;
		if (lstat(out_path, &st) == 0 && unlink(out_path) != 0) {
			text_format(res->diagnostic, sizeof(res->diagnostic), "cannot remove a stale %s: %s",
			            out_path, strerror(errno));
			goto cleanup;
		}
	}
	if (capture_resident_take(spec, out_path, spec->timeout_ms < limit_ms ? spec->timeout_ms : limit_ms,
	                          res) == 0)
		goto cleanup; /* checked as below; a failure removes the file */
	argv = xcalloc(spec->argc + 1, sizeof(char *));
	for (i = 0; i < spec->argc; i++)
		argv[i] = replace_out(spec->argv[i], out_path);
	program = find_program(argv[0]);
	if (!program) {
		text_format(res->diagnostic, sizeof(res->diagnostic), "capture program not found: %s",
		            argv[0]);
		goto cleanup;
	}
	memset(&req, 0, sizeof(req));
	req.path = program;
	req.argv = argv;
	req.envp = NULL;
	req.cwd = NULL;
	req.timeout_ms = spec->timeout_ms < limit_ms ? spec->timeout_ms : limit_ms;
	if (req.timeout_ms < 1)
		req.timeout_ms = 1;
	req.output_budget = OUTPUT_BUDGET_BYTES;
	req.spared = spared;
	req.spared_count = spared_count;
	if (proc_run(&req, hooks, &run, &err) != 0) {
		text_format(res->diagnostic, sizeof(res->diagnostic), "capture could not run: %s", err.msg);
		goto cleanup;
	}
	ran = 1;
	timestamp_now(res->captured_at);
	if (!run.termination_confirmed) {
		res->unknown = 1;
		text_format(res->diagnostic, sizeof(res->diagnostic),
		            "capture process group %d could not be confirmed stopped", (int)run.pgid);
		goto cleanup;
	}
	if (run.spawn_failed) {
		text_format(res->diagnostic, sizeof(res->diagnostic), "capture %s", run.spawn_error);
		goto cleanup;
	}
	if (run.timed_out) {
		text_format(res->diagnostic, sizeof(res->diagnostic), "capture timed out after %lld ms",
		            (long long)req.timeout_ms);
		goto cleanup;
	}
	if (run.output_truncated) {
		text_format(res->diagnostic, sizeof(res->diagnostic), "capture output exceeded %u bytes",
		            OUTPUT_BUDGET_BYTES);
		goto cleanup;
	}
	if (run.signal_no || run.exit_code != 0) {
		char tail[320], scratch[16];
		last_line(&run.err, tail, sizeof(tail));
		if (run.signal_no)
			text_format(res->diagnostic, sizeof(res->diagnostic), "capture killed by %s: %s",
			            signal_name(run.signal_no, scratch), tail);
		else
			text_format(res->diagnostic, sizeof(res->diagnostic),
			            "capture exited with code %d: %s", run.exit_code, tail);
		goto cleanup;
	}
	capture_check_answer(run.out.data, run.out.len, out_path, res);
cleanup:
	if (!res->ok) {
		struct stat st;
		if (lstat(out_path, &st) == 0 && unlink(out_path) != 0)
			fprintf(stderr, "receiver: cannot remove the failed capture %s: %s\n", out_path,
			        strerror(errno));
	}
	if (!ran)
		timestamp_now(res->captured_at);
	if (ran)
		spawn_result_free(&run);
	for (i = 0; argv && i < spec->argc; i++)
		free(argv[i]);
	free(argv);
	free(program);
}
