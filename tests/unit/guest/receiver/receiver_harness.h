/*
 * tests/unit/guest/receiver/receiver_harness.h — helpers shared by the receiver tests: they
 * run the real static receiver binary ($RELAY_BUILD_DIR/libexec/mcp-relay/
 * receivers/<platform>/receiver) against temporary guest roots under
 * /var/tmp, and parse its one-line frames with json-c.
 *
 * Header-only; every helper is static and marked unused so each test file
 * takes what it needs.
 */
#ifndef RELAY_TEST_RECEIVER_HARNESS_H
#define RELAY_TEST_RECEIVER_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <json-c/json.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* cmocka needs these first. */
#include <setjmp.h>
// clang-format off
#include <cmocka.h>
// clang-format on

#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

#define RH_UNUSED  __attribute__((unused))
#define RH_SESSION "rec-0123456789abcdef"

extern char **environ;

typedef struct rh_out {
	int status; /* exit status, or 128 + signal */
	char *out;  /* stdout (NUL-terminated) */
	size_t out_len;
	char *err;          /* stderr */
	json_object *frame; /* the parsed stdout (one line), or NULL */
} rh_out;

static RH_UNUSED char *rh_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static RH_UNUSED char *rh_printf(const char *fmt, ...)
{
	va_list ap;
	char *text = NULL;
	va_start(ap, fmt);
	if (vasprintf(&text, fmt, ap) < 0)
		text = NULL;
	va_end(ap);
	assert_non_null(text);
	return text;
}

/* The receiver built for this machine, or NULL when it was not built. */
static RH_UNUSED const char *rh_binary(void)
{
	static char path[PATH_MAX];
	const char *build = getenv("RELAY_BUILD_DIR");
	if (!build)
		return NULL;
	snprintf(path, sizeof(path), "%s/libexec/mcp-relay/receivers/%s/receiver", build,
	         RELAY_HOST_PLATFORM);
	return access(path, X_OK) == 0 ? path : NULL;
}

#define RH_REQUIRE_BINARY()                                                                                  \
	do {                                                                                                 \
		if (!rh_binary()) {                                                                          \
			fprintf(stderr, "skipped: the receiver is not built at "                             \
			                "$RELAY_BUILD_DIR/libexec/mcp-relay/receivers/" RELAY_HOST_PLATFORM  \
			                "/receiver (run `make receiver` or `make all`)\n");                  \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

static RH_UNUSED void rh_out_free(rh_out *o)
{
	free(o->out);
	free(o->err);
	if (o->frame)
		json_object_put(o->frame);
	memset(o, 0, sizeof(*o));
}

static RH_UNUSED void rh_drain(int fd, char **buf, size_t *len)
{
	char chunk[8192];
	ssize_t n = read(fd, chunk, sizeof(chunk));
	if (n > 0) {
		*buf = realloc(*buf, *len + (size_t)n + 1);
		assert_non_null(*buf);
		memcpy(*buf + *len, chunk, (size_t)n);
		*len += (size_t)n;
		(*buf)[*len] = '\0';
	}
}

/* Runs the receiver with args (NULL-terminated); env_path, when given,
 * replaces PATH. Fills *o; the frame is parsed from stdout. */
/* Runs the receiver with `args`; with `uid` other than (uid_t)-1 as that
 * user (group = uid, no supplementary groups; the caller must be root). */
static RH_UNUSED void rh_exec_as(rh_out *o, const char *env_path, const char *const *args, uid_t uid)
{
	int out_p[2], err_p[2];
	pid_t pid;
	size_t n = 0, err_len = 0;
	int status;
	const char *argv[64];
	memset(o, 0, sizeof(*o));
	argv[n++] = rh_binary();
	for (; args[n - 1] && n < 63; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	assert_int_equal(pipe(out_p), 0);
	assert_int_equal(pipe(err_p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		dup2(out_p[1], 1);
		dup2(err_p[1], 2);
		close(out_p[0]);
		close(err_p[0]);
		if (env_path)
			setenv("PATH", env_path, 1);
		if (uid != (uid_t)-1 &&
		    (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid(uid) != 0))
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(out_p[1]);
	close(err_p[1]);
	o->out = calloc(1, 1);
	o->err = calloc(1, 1);
	for (;;) {
		struct pollfd pf[2] = {{out_p[0], POLLIN, 0}, {err_p[0], POLLIN, 0}};
		int open_fds = 0;
		if (pf[0].fd >= 0)
			open_fds++;
		if (pf[1].fd >= 0)
			open_fds++;
		if (!open_fds)
			break;
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[0].fd >= 0 && (pf[0].revents & (POLLIN | POLLHUP))) {
			size_t before = o->out_len;
			rh_drain(out_p[0], &o->out, &o->out_len);
			if (o->out_len == before) {
				close(out_p[0]);
				out_p[0] = -1;
			}
		}
		if (pf[1].fd >= 0 && (pf[1].revents & (POLLIN | POLLHUP))) {
			size_t before = err_len;
			rh_drain(err_p[0], &o->err, &err_len);
			if (err_len == before) {
				close(err_p[0]);
				err_p[0] = -1;
			}
		}
		if (out_p[0] < 0 && err_p[0] < 0)
			break;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	o->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	if (o->out_len && o->out[o->out_len - 1] == '\n' && !memchr(o->out, '\n', o->out_len - 1))
		o->frame = jsonx_parse(o->out, o->out_len, NULL, NULL, 0);
}

static RH_UNUSED void rh_exec(rh_out *o, const char *env_path, const char *const *args)
{
	rh_exec_as(o, env_path, args, (uid_t)-1);
}

/* rh_run(&o, "version", NULL) */
#define rh_run(o, ...)                                                                                       \
	do {                                                                                                 \
		const char *rh_args_[] = {__VA_ARGS__};                                                      \
		rh_exec((o), NULL, rh_args_);                                                                \
	} while (0)
#define rh_run_path(o, path, ...)                                                                            \
	do {                                                                                                 \
		const char *rh_args_[] = {__VA_ARGS__};                                                      \
		rh_exec((o), (path), rh_args_);                                                              \
	} while (0)

static RH_UNUSED const char *rh_str(json_object *obj, const char *dotted)
{
	char key[256];
	const char *p = dotted;
	json_object *cur = obj;
	while (cur && *p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		snprintf(key, sizeof(key), "%.*s", (int)n, p);
		if (!json_object_object_get_ex(cur, key, &cur))
			return NULL;
		p = dot ? dot + 1 : p + n;
	}
	return cur && json_object_is_type(cur, json_type_string) ? json_object_get_string(cur) : NULL;
}

static RH_UNUSED json_object *rh_get(json_object *obj, const char *dotted)
{
	char key[256];
	const char *p = dotted;
	json_object *cur = obj;
	while (cur && *p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		snprintf(key, sizeof(key), "%.*s", (int)n, p);
		if (!json_object_object_get_ex(cur, key, &cur))
			return NULL;
		p = dot ? dot + 1 : p + n;
	}
	return cur;
}

static RH_UNUSED int64_t rh_int(json_object *obj, const char *dotted)
{
	json_object *v = rh_get(obj, dotted);
	assert_non_null(v);
	return json_object_get_int64(v);
}

static RH_UNUSED int rh_bool(json_object *obj, const char *dotted)
{
	json_object *v = rh_get(obj, dotted);
	assert_non_null(v);
	assert_true(json_object_is_type(v, json_type_boolean));
	return json_object_get_boolean(v);
}

static RH_UNUSED void rh_write(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	size_t len = strlen(text);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
	chmod(path, mode);
}

static RH_UNUSED char *rh_read(const char *path, size_t *len_out)
{
	char *data = NULL;
	size_t len = 0;
	relay_error err;
	if (fs_read_file(path, 64u * 1024 * 1024, &data, &len, &err) != RELAY_OK)
		return NULL;
	if (len_out)
		*len_out = len;
	return data;
}

static RH_UNUSED json_object *rh_read_json(const char *path)
{
	char *text = rh_read(path, NULL);
	json_object *obj;
	if (!text)
		return NULL;
	obj = jsonx_parse_str(text, NULL, 0);
	free(text);
	return obj;
}

static RH_UNUSED int rh_exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static RH_UNUSED void rh_rm_rf(const char *path)
{
	relay_error err;
	if (fs_remove_tree(path, &err) != RELAY_OK)
		fprintf(stderr, "cleanup of %s failed: %s\n", path, err.message);
}

/* A fresh guest root: prepared and, when init is set, with a recording. */
static RH_UNUSED char *rh_root(int init)
{
	char tmpl[] = "/var/tmp/relay-receiver-test-XXXXXX";
	char *root = mkdtemp(tmpl);
	rh_out o;
	assert_non_null(root);
	root = strdup(root);
	chmod(root, 0700);
	rh_run(&o, "prepare", "--root", root, "workspace", "support", "requests", "streamed", "scripts",
	       "recordings", NULL);
	assert_int_equal(o.status, 0);
	rh_out_free(&o);
	if (init) {
		rh_run(&o, "init", "--root", root, "--session", RH_SESSION, NULL);
		assert_int_equal(o.status, 0);
		rh_out_free(&o);
	}
	return root;
}

/* The pid a script wrote to R/workspace/<name>, or 0. */
static RH_UNUSED pid_t rh_read_pid(const char *root, const char *name)
{
	char *p = rh_printf("%s/workspace/%s", root, name);
	char *text = rh_read(p, NULL);
	pid_t pid = text ? (pid_t)atoi(text) : 0;
	free(text);
	free(p);
	return pid;
}

/* 1 when pid is gone (a zombie of an unrelated parent counts as gone). */
static RH_UNUSED int rh_process_gone(pid_t pid)
{
	char path[64];
	char buf[512];
	FILE *f;
	char *close_paren;
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 1;
	/* A zombie of an unrelated parent counts as gone. */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	close_paren = strrchr(buf, ')');
	return close_paren && close_paren[2] == 'Z';
}

typedef struct rh_req {
	const char *language; /* default shell */
	const char *code;
	int64_t timeout_ms;   /* default 20000 */
	int64_t after_ms;     /* default 0; -1 writes null */
	const char *group_id; /* NULL: standalone */
	const char *phase;
	const char *capture;     /* capture JSON text, or NULL */
	const char *node_path;   /* NULL */
	const char *step_id;     /* default shell-<n> derived from the id */
	const char *session;     /* default RH_SESSION */
	const char *because;     /* default "test run" */
	const char *extra_field; /* "name": value text to add, or NULL */
} rh_req;

/* Writes the script and the request of execution id; returns the request
 * path (malloc'd). */
static RH_UNUSED char *rh_request(const char *root, const char *id, const rh_req *rq)
{
	const char *lang = rq->language ? rq->language : "shell";
	const char *ext = !strcmp(lang, "javascript")   ? "js"
	                  : !strcmp(lang, "typescript") ? "ts"
	                  : !strcmp(lang, "python")     ? "py"
	                                                : "sh";
	char *script = rh_printf("%s/streamed/%s.%s", root, id, ext);
	char *req_path = rh_printf("%s/requests/%s.json", root, id);
	char hex[SHA256_HEX_LEN + 1];
	char *text;
	char *after, *group, *step;
	rh_write(script, rq->code, 0600);
	sha256_buffer_hex(rq->code, strlen(rq->code), hex);
	after = rq->after_ms < 0 ? strdup("null") : rh_printf("%lld", (long long)rq->after_ms);
	if (rq->group_id)
		group = rh_printf("{\"groupId\":\"%s\",\"phase\":\"%s\"}", rq->group_id, rq->phase);
	else
		group = strdup("null");
	step = rq->step_id ? strdup(rq->step_id) : rh_printf("step-%s", id);
	text = rh_printf(
	    "{\"protocol\":1,\"executionId\":\"%s\",\"sessionId\":\"%s\",\"attemptId\":\"att-%s\","
	    "\"guest\":\"test-guest\",\"because\":\"%s\",\"evidenceMode\":\"recorded\","
	    "\"language\":\"%s\",\"script\":{\"path\":\"%s\",\"sha256\":\"%s\",\"bytes\":%zu,"
	    "\"origin\":\"inline\",\"localName\":null},\"runtime\":{\"nodePath\":%s%s%s},"
	    "\"cwd\":\"%s/workspace\",\"timeoutMs\":%lld,\"step\":{\"id\":\"%s\",\"title\":\"test "
	    "%s\",\"expected\":\"Exits with status 0\",\"inputMode\":\"ordinary\"},"
	    "\"snapshots\":{\"afterIntervalMs\":%s,\"group\":%s},\"capture\":%s%s%s}",
	    id, rq->session ? rq->session : RH_SESSION, id, rq->because ? rq->because : "test run", lang,
	    script, hex, strlen(rq->code), rq->node_path ? "\"" : "", rq->node_path ? rq->node_path : "null",
	    rq->node_path ? "\"" : "", root, (long long)(rq->timeout_ms ? rq->timeout_ms : 20000), step, id,
	    after, group, rq->capture ? rq->capture : "null", rq->extra_field ? "," : "",
	    rq->extra_field ? rq->extra_field : "");
	rh_write(req_path, text, 0600);
	free(text);
	free(after);
	free(group);
	free(step);
	free(script);
	return req_path;
}

/* Runs a request (as `uid`, see rh_exec_as); returns the parsed receipt
 * (or NULL when the frame has none); o keeps the frame. */
static RH_UNUSED json_object *rh_run_request_as(rh_out *o, const char *root, const char *req_path,
                                                const char *env_path, uid_t uid)
{
	const char *args[] = {"run", "--root", root, req_path, NULL};
	const char *rel;
	char *path;
	json_object *receipt;
	rh_exec_as(o, env_path, args, uid);
	if (!o->frame)
		fprintf(stderr, "no frame; stdout=%s stderr=%s\n", o->out, o->err);
	assert_non_null(o->frame);
	rel = rh_str(o->frame, "receipt.path");
	if (!rel)
		return NULL;
	path = rh_printf("%s/%s", root, rel);
	receipt = rh_read_json(path);
	free(path);
	assert_non_null(receipt);
	return receipt;
}

/* rh_run_request_as as the caller. */
static RH_UNUSED json_object *rh_run_request(rh_out *o, const char *root, const char *req_path,
                                             const char *env_path)
{
	return rh_run_request_as(o, root, req_path, env_path, (uid_t)-1);
}

/* The journal's lines, parsed. */
static RH_UNUSED json_object *rh_journal(const char *root)
{
	char *path = rh_printf("%s/state/journal/events.jsonl", root);
	char *text = rh_read(path, NULL);
	json_object *arr = json_object_new_array();
	char *line, *save = NULL;
	free(path);
	assert_non_null(text);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_object *ev = jsonx_parse_str(line, NULL, 0);
		assert_non_null(ev);
		json_object_array_add(arr, ev);
	}
	free(text);
	return arr;
}

/* Counts journal lines of a type (for an execution id when given). */
static RH_UNUSED int rh_journal_count(const char *root, const char *type, const char *execution_id)
{
	json_object *arr = rh_journal(root);
	size_t i;
	int count = 0;
	for (i = 0; i < json_object_array_length(arr); i++) {
		json_object *ev = json_object_array_get_idx(arr, i);
		const char *t = rh_str(ev, "type");
		const char *id = rh_str(ev, "executionId");
		if (t && !strcmp(t, type) && (!execution_id || (id && !strcmp(id, execution_id))))
			count++;
	}
	json_object_put(arr);
	return count;
}

/* A directory of helper programs for PATH tricks (fake tsx, captures). */
static RH_UNUSED char *rh_bin_dir(const char *root)
{
	char *dir = rh_printf("%s-bin", root);
	mkdir(dir, 0700);
	return dir;
}

#endif
