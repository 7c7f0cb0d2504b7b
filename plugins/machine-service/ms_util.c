/* Small helpers of the machine-service plugin (ms_util.h). */
#include "ms_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay_support/tree.h"
#include "relay_support/utf8.h"

extern char **environ;

/* ---- buffer ------------------------------------------------------------ */

static bool buf_reserve(ms_buf *b, size_t extra)
{
	if (b->failed)
		return false;
	if (b->len + extra + 1 <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1)
		cap *= 2;
	char *data = realloc(b->data, cap);
	if (data == NULL) {
		b->failed = true;
		return false;
	}
	b->data = data;
	b->cap = cap;
	return true;
}

void ms_buf_append(ms_buf *b, const char *data, size_t len)
{
	if (!buf_reserve(b, len))
		return;
	memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void ms_buf_puts(ms_buf *b, const char *text)
{
	ms_buf_append(b, text, strlen(text));
}

void ms_buf_printf(ms_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char small[512];
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof small) {
		ms_buf_append(b, small, (size_t)n);
		return;
	}
	if (!buf_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

const char *ms_buf_str(const ms_buf *b)
{
	return b->data && !b->failed ? b->data : "";
}

void ms_buf_free(ms_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->failed = false;
}

/* ---- JSON ---------------------------------------------------------------- */

json_object *ms_json_parse(const char *text, size_t len, char *why, size_t why_len)
{
	if (why && why_len)
		why[0] = '\0';
	if (text == NULL) {
		if (why)
			snprintf(why, why_len, "no body");
		return NULL;
	}
	/* A reply's strings reach the core in lease documents, which it reads
	 * as strict UTF-8: bytes that are not UTF-8 become U+FFFD here, or the
	 * core could not read the lease of a machine that was leased. */
	size_t repaired_len = 0;
	char *repaired = rs_utf8_valid(text, len) ? NULL : rs_utf8_repair(text, len, 0, &repaired_len);
	if (repaired != NULL) {
		json_object *obj = ms_json_parse(repaired, repaired_len, why, why_len);
		free(repaired);
		return obj;
	}
	json_tokener *tok = json_tokener_new();
	if (tok == NULL)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	if (jerr != json_tokener_success) {
		if (why)
			snprintf(why, why_len, "%s", json_tokener_error_desc(jerr));
		json_object_put(obj);
		obj = NULL;
	} else {
		while (used < len &&
		       (text[used] == ' ' || text[used] == '\n' || text[used] == '\r' || text[used] == '\t'))
			used++;
		if (used != len) {
			if (why)
				snprintf(why, why_len, "text follows the JSON value");
			json_object_put(obj);
			obj = NULL;
		}
	}
	json_tokener_free(tok);
	return obj;
}

char *ms_json_text(const json_object *obj)
{
	const char *text = json_object_to_json_string_ext(
	    (json_object *)obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return text ? strdup(text) : NULL;
}

char *ms_json_owned(const relay_host *host, const json_object *obj)
{
	const char *text = json_object_to_json_string_ext(
	    (json_object *)obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return text ? host->strdup(text) : NULL;
}

bool ms_json_is_null(const json_object *obj, const char *key)
{
	json_object *v = NULL;
	return obj != NULL && json_object_object_get_ex(obj, key, &v) && v == NULL;
}

json_object *ms_json_number(double value)
{
	char text[64];
	snprintf(text, sizeof text, "%.6g", value);
	return json_object_new_double_s(value, text);
}

bool ms_valid_machine_name(const char *text)
{
	if (text == NULL || text[0] == '\0')
		return false;
	for (const char *c = text; *c; c++) {
		bool alnum = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
		if (c == text ? !alnum : !(alnum || *c == '.' || *c == '_' || *c == '-'))
			return false;
	}
	return true;
}

char *ms_cut_utf8(const char *text, size_t max)
{
	size_t len = rs_utf8_cut(text, strlen(text), max);
	char *copy = malloc(len + 1);
	if (copy) {
		memcpy(copy, text, len);
		copy[len] = '\0';
	}
	return copy;
}

/* ---- child environments ------------------------------------------------------ */

static size_t key_len(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq ? (size_t)(eq - kv) : strlen(kv);
}

char **ms_env_build(const char *const *overrides)
{
	size_t n_env = 0, n_over = 0;
	while (environ && environ[n_env])
		n_env++;
	while (overrides && overrides[n_over])
		n_over++;
	char **env = calloc(n_env + n_over + 1, sizeof *env);
	if (env == NULL)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < n_env; i++) {
		bool replaced = false;
		for (size_t j = 0; j < n_over && !replaced; j++)
			replaced = key_len(environ[i]) == key_len(overrides[j]) &&
			           strncmp(environ[i], overrides[j], key_len(overrides[j])) == 0;
		if (replaced)
			continue;
		if ((env[n++] = strdup(environ[i])) == NULL)
			goto fail;
	}
	for (size_t j = 0; j < n_over; j++)
		if ((env[n++] = strdup(overrides[j])) == NULL)
			goto fail;
	return env;
fail:
	ms_env_free(env);
	return NULL;
}

void ms_env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

relay_status ms_run(const relay_host *host, const char *const *argv, const char *const *overrides,
                    uint64_t timeout_ms, size_t max_output_bytes, relay_call *call, relay_process_result *res,
                    relay_error *err)
{
	char **envp = ms_env_build(overrides);
	relay_process_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.envp = (const char *const *)envp;
	req.stdin_fd = -1;
	req.stdout_fd = -1;
	req.timeout_ms = timeout_ms;
	req.max_output_bytes = max_output_bytes;
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	memset(err, 0, sizeof *err);
	relay_status status = host->process_run(&req, call, 0, res, err);
	ms_env_free(envp);
	return status;
}

/* ---- local folders ------------------------------------------------------------- */

char *ms_fresh_dir(const relay_host *host, const char *parent, const char *prefix)
{
	if (rs_mkdir_p(parent, 0700, 0, NULL) != 0)
		return NULL;
	for (int tries = 0; tries < 8; tries++) {
		unsigned char raw[8];
		relay_error err;
		if (host->random_bytes(raw, sizeof raw, &err) != RELAY_OK) {
			errno = EIO;
			return NULL;
		}
		char path[PATH_MAX];
		int n = snprintf(path, sizeof path, "%s/%s-", parent, prefix);
		for (size_t i = 0; i < sizeof raw && n > 0 && (size_t)n + 3 < sizeof path; i++)
			n += snprintf(path + n, sizeof path - (size_t)n, "%02x", raw[i]);
		if (mkdir(path, 0700) == 0)
			return strdup(path);
		if (errno != EEXIST)
			return NULL;
	}
	errno = EEXIST;
	return NULL;
}

/*
 * Calls visit(child path, entry name, ctx) for each entry of the folder
 * `dir` but "." and "..", until one answers nonzero: 0 or that answer; -1
 * with `why` when `dir` cannot be listed or a child's path is too long.
 * With `why` NULL such a child is passed over (a walk that cannot fail).
 */
typedef int (*child_visit)(const char *child, const char *name, void *ctx);
static int each_child(const char *dir, char *why, size_t why_len, child_visit visit, void *ctx)
{
	DIR *d = opendir(dir);
	if (d == NULL) {
		if (why)
			snprintf(why, why_len, "%s cannot be listed: %s", dir, strerror(errno));
		return -1;
	}
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char child[PATH_MAX];
		if (snprintf(child, sizeof child, "%s/%s", dir, de->d_name) >= (int)sizeof child) {
			if (why == NULL)
				continue;
			snprintf(why, why_len, "a path below %s is too long", dir);
			rc = -1;
			break;
		}
		rc = visit(child, de->d_name, ctx);
	}
	closedir(d);
	return rc;
}

typedef struct walk_ctx {
	const char *src; /* copy_tree: the folder the children come from */
	const char *dst; /* and the one they go to */
	int depth;       /* of the children */
	int max_depth;
	char *why;
	size_t why_len;
} walk_ctx;

static int check_at(const char *path, int depth, int max_depth, char *why, size_t why_len);

static int check_child(const char *child, const char *name, void *ctx)
{
	(void)name;
	walk_ctx *w = ctx;
	return check_at(child, w->depth, w->max_depth, w->why, w->why_len);
}

static int check_at(const char *path, int depth, int max_depth, char *why, size_t why_len)
{
	struct stat st;
	if (lstat(path, &st) != 0) {
		snprintf(why, why_len, "%s cannot be read: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISREG(st.st_mode))
		return 0;
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, why_len, "%s is %s, not a regular file or folder", path,
		         S_ISLNK(st.st_mode) ? "a symbolic link" : "a special file");
		return -1;
	}
	if (depth >= max_depth) {
		snprintf(why, why_len, "%s is nested deeper than %d folders", path, max_depth);
		return -1;
	}
	walk_ctx w = {.depth = depth + 1, .max_depth = max_depth, .why = why, .why_len = why_len};
	return each_child(path, why, why_len, check_child, &w);
}

int ms_check_tree(const char *path, int max_depth, char *why, size_t why_len)
{
	return check_at(path, 0, max_depth, why, why_len);
}

static int copy_file_excl(const char *src, const char *dst, char *why, size_t why_len)
{
	int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0) {
		snprintf(why, why_len, "cannot open %s: %s", src, strerror(errno));
		return -1;
	}
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0) {
		int e = errno;
		snprintf(why, why_len, "cannot create %s: %s", dst, strerror(e));
		close(in);
		errno = e;
		return -1;
	}
	char buf[65536];
	int rc = 0;
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(why, why_len, "cannot read %s: %s", src, strerror(errno));
			rc = -1;
			break;
		}
		if (n == 0)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				snprintf(why, why_len, "cannot write %s: %s", dst, strerror(errno));
				rc = -1;
				break;
			}
			off += w;
		}
		if (rc != 0)
			break;
	}
	if (rc == 0 && fsync(out) != 0) {
		snprintf(why, why_len, "cannot flush %s: %s", dst, strerror(errno));
		rc = -1;
	}
	close(in);
	if (close(out) != 0 && rc == 0) {
		snprintf(why, why_len, "cannot write %s: %s", dst, strerror(errno));
		rc = -1;
	}
	return rc;
}

static int copy_tree(const char *src, const char *dst, int depth, char *why, size_t why_len);

static int copy_child(const char *child, const char *name, void *ctx)
{
	walk_ctx *w = ctx;
	char t[PATH_MAX];
	if (snprintf(t, sizeof t, "%s/%s", w->dst, name) >= (int)sizeof t) {
		snprintf(w->why, w->why_len, "a path below %s is too long", w->src);
		return -1;
	}
	return copy_tree(child, t, w->depth, w->why, w->why_len);
}

static int copy_tree(const char *src, const char *dst, int depth, char *why, size_t why_len)
{
	struct stat st;
	if (lstat(src, &st) != 0) {
		snprintf(why, why_len, "%s cannot be read: %s", src, strerror(errno));
		return -1;
	}
	if (S_ISREG(st.st_mode))
		return copy_file_excl(src, dst, why, why_len);
	if (!S_ISDIR(st.st_mode) || depth > 256) {
		snprintf(why, why_len, "%s is not a regular file or folder", src);
		return -1;
	}
	if (mkdir(dst, 0700) != 0) {
		snprintf(why, why_len, "cannot create %s: %s", dst, strerror(errno));
		return -1;
	}
	walk_ctx w = {.src = src, .dst = dst, .depth = depth + 1, .why = why, .why_len = why_len};
	return each_child(src, why, why_len, copy_child, &w);
}

static void fix_modes(const char *path, int depth);

static int fix_child(const char *child, const char *name, void *ctx)
{
	(void)name;
	fix_modes(child, ((walk_ctx *)ctx)->depth);
	return 0;
}

/* Sets 0600 on files and 0700 on folders of a tree we own. */
static void fix_modes(const char *path, int depth)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return;
	if (S_ISREG(st.st_mode)) {
		chmod(path, 0600);
		return;
	}
	if (!S_ISDIR(st.st_mode) || depth > 256)
		return;
	chmod(path, 0700);
	walk_ctx w = {.depth = depth + 1};
	(void)each_child(path, NULL, 0, fix_child, &w);
}

int ms_move_tree(const char *src, const char *dst, char *why, size_t why_len)
{
	struct stat st;
	if (lstat(dst, &st) == 0) {
		snprintf(why, why_len, "%s already exists", dst);
		errno = EEXIST;
		return -1;
	}
	fix_modes(src, 0);
	if (rename(src, dst) == 0)
		return 0;
	if (errno != EXDEV) {
		int e = errno;
		snprintf(why, why_len, "cannot move the pulled copy to %s: %s", dst, strerror(e));
		errno = e;
		return -1;
	}
	if (copy_tree(src, dst, 0, why, why_len) != 0) {
		int e = errno;
		(void)rs_remove_tree(dst, NULL);
		errno = e;
		return -1;
	}
	(void)rs_remove_tree(src, NULL);
	return 0;
}

char *ms_dirname(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (slash == NULL)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	size_t n = (size_t)(slash - path);
	char *out = malloc(n + 1);
	if (out) {
		memcpy(out, path, n);
		out[n] = '\0';
	}
	return out;
}
