/*
 * machine-fake's transport: a "guest" is this host. exec runs the command
 * with host->process_run (its working folder defaults to the machine's home
 * folder, HOME points there, RELAY_FAKE_VM names the machine); push and
 * pull copy files and trees locally, refusing links and special files, and
 * report guest-side facts (path, bytes, SHA-256).
 *
 * SCRIPTED PULLS. The control file (machine_fake.c) may hold
 *   "pull": [{"result": "...", "times": 1, "match": "<substring>",
 *             "delayMs": 0}, ...]
 * Each pull takes the first entry whose "match" (optional) occurs in the
 * guest path; the entry is used `times` times (-1: for ever), then removed.
 * "delayMs" makes the pull wait that long first (a slow guest link); a
 * cancelled call stops waiting and answers RELAY_E_CANCELLED.
 * Results: ok | transient (RELAY_E_TRANSIENT, "connection reset") |
 * timeout (RELAY_E_TIMEOUT) | refused (RELAY_E_REFUSED, a lasting 4xx) |
 * unsafe-path (RELAY_E_UNSAFE_PATH) | not-found (RELAY_E_NOT_FOUND) |
 * corrupt (the copy arrives with its last byte changed while the facts
 * describe the guest file: a transport that does not notice). The log line
 * of the pull carries the scripted result.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"
#include "relay_support/json_get.h"
#include "relay_support/tree.h"

extern char **environ;

typedef struct fake_conn {
	char *vm;
	char *home;
} fake_conn;

static relay_status fake_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                              unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	fake_state *st = state;
	(void)call;
	*conn_out = NULL;
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                           "machine-fake: unknown open flags 0x%x", flags);
	json_object *lease = json_tokener_parse(lease_json);
	const char *vm = rsj_get_str(lease, "vm");
	json_object *fake = NULL;
	json_object_object_get_ex(lease, "fake", &fake);
	const char *home = rsj_get_str(fake, "home");
	struct stat sb;
	if (vm == NULL || home == NULL || stat(home, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		json_object_put(lease);
		return st->host->error_set(
		    err, home ? RELAY_E_NOT_FOUND : RELAY_E_UNSUPPORTED, 0,
		    "machine-fake: this lease has no fake machine folder on this host");
	}
	fake_conn *conn = calloc(1, sizeof *conn);
	if (conn == NULL) {
		json_object_put(lease);
		return st->host->error_set(err, RELAY_E_NO_MEMORY, 0, "machine-fake: out of memory");
	}
	conn->vm = strdup(vm);
	conn->home = strdup(home);
	json_object_put(lease);
	*conn_out = conn;
	return RELAY_OK;
}

static void fake_close(relay_plugin_state *state, relay_transport_conn *c, unsigned flags)
{
	(void)state;
	(void)flags;
	fake_conn *conn = c;
	if (conn == NULL)
		return;
	free(conn->vm);
	free(conn->home);
	free(conn);
}

/* ---- exec ---------------------------------------------------------------------------------- */

/* environ + HOME + RELAY_FAKE_VM + the request's additions (later wins). */
static char **build_env(const fake_conn *conn, const char *const *extra)
{
	size_t n = 0, m = 0;
	while (environ[n])
		n++;
	while (extra && extra[m])
		m++;
	char **env = calloc(n + m + 3, sizeof *env);
	if (env == NULL)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], "HOME=", 5) == 0 || strncmp(environ[i], "RELAY_FAKE_VM=", 14) == 0)
			continue;
		int overridden = 0;
		const char *eq = strchr(environ[i], '=');
		size_t key_len = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
		for (size_t j = 0; j < m && !overridden; j++)
			overridden = strncmp(extra[j], environ[i], key_len) == 0 && extra[j][key_len] == '=';
		if (!overridden)
			env[k++] = strdup(environ[i]);
	}
	size_t len = strlen(conn->home) + 6;
	env[k] = malloc(len);
	if (env[k])
		snprintf(env[k], len, "HOME=%s", conn->home);
	k++;
	len = strlen(conn->vm) + 16;
	env[k] = malloc(len);
	if (env[k])
		snprintf(env[k], len, "RELAY_FAKE_VM=%s", conn->vm);
	k++;
	for (size_t j = 0; j < m; j++)
		env[k++] = strdup(extra[j]);
	env[k] = NULL;
	return env;
}

static void free_env(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

static relay_status fake_exec(relay_plugin_state *state, relay_transport_conn *c,
                              const relay_exec_request *req, relay_call *call, unsigned flags,
                              relay_exec_result *res, relay_error *err)
{
	fake_state *st = state;
	fake_conn *conn = c;
	if (flags & ~(RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL))
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                           "machine-fake: unknown exec flags 0x%x", flags);
	if (req == NULL || req->argv == NULL || req->argv[0] == NULL || req->timeout_ms == 0)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "machine-fake: exec needs an argv and a timeout");
	relay_exec_request r;
	memset(&r, 0, sizeof r);
	memcpy(&r, req, req->struct_size < sizeof r ? req->struct_size : sizeof r);
	json_object *extra = json_object_new_object();
	json_object_object_add(extra, "argv0", json_object_new_string(r.argv[0]));
	json_object_object_add(extra, "result", json_object_new_string("started"));
	fake_log(st, "exec", conn->vm, extra);
	char **env = build_env(conn, r.envp);
	if (env == NULL)
		return st->host->error_set(err, RELAY_E_NO_MEMORY, 0, "machine-fake: out of memory");
	relay_process_request preq;
	memset(&preq, 0, sizeof preq);
	preq.struct_size = sizeof preq;
	preq.argv = r.argv;
	preq.envp = (const char *const *)env;
	preq.cwd = r.cwd ? r.cwd : conn->home;
	preq.stdin_fd = -1;
	preq.stdout_fd = -1;
	preq.timeout_ms = r.timeout_ms;
	preq.max_output_bytes = r.max_output_bytes;
	unsigned pflags = RELAY_PROCESS_SHARED_CAP; /* exec caps both streams together (relay/transport.h) */
	if (flags & RELAY_EXEC_MERGE_OUTPUT)
		pflags |= RELAY_PROCESS_MERGE_OUTPUT;
	if (flags & RELAY_EXEC_KEEP_TAIL)
		pflags |= RELAY_PROCESS_KEEP_TAIL;
	relay_process_result pres;
	memset(&pres, 0, sizeof pres);
	pres.struct_size = sizeof pres;
	relay_status rc = st->host->process_run(&preq, call, pflags, &pres, err);
	free_env(env);
	if (rc == RELAY_E_NOT_FOUND) {
		/* A guest shell would answer 127: so does the fake guest. */
		st->host->free(pres.out);
		st->host->free(pres.err);
		memset(&pres, 0, sizeof pres);
		pres.exit_code = 127;
		pres.termination_confirmed = 1;
		pres.err = st->host->strdup("machine-fake: command not found\n");
		pres.err_len = pres.err ? strlen(pres.err) : 0;
		rc = RELAY_OK;
	}
	if (rc != RELAY_OK) {
		st->host->free(pres.out);
		st->host->free(pres.err);
		return rc;
	}
	uint32_t size = res->struct_size;
	relay_exec_result out;
	memset(&out, 0, sizeof out);
	out.struct_size = size;
	out.exit_code = pres.exit_code;
	out.signal = pres.signal;
	out.timed_out = pres.timed_out;
	out.output_truncated = pres.output_truncated;
	out.termination_confirmed = pres.termination_confirmed;
	out.out = pres.out;
	out.out_len = pres.out_len;
	out.err = pres.err;
	out.err_len = pres.err_len;
	memcpy(res, &out, size < sizeof out ? size : sizeof out);
	return RELAY_OK;
}

/* ---- facts --------------------------------------------------------------------------------- */

typedef struct fact_list {
	json_object *array;
	const relay_host *host;
	const char *root;
	relay_status status;
	relay_error *err;
} fact_list;

static int fact_cmp(const void *a, const void *b)
{
	json_object *const *fa = a, *const *fb = b;
	return strcmp(rsj_get_str(*fa, "path"), rsj_get_str(*fb, "path"));
}

static relay_status add_fact(fact_list *facts, const char *abs_path, const char *rel)
{
	char hex[65];
	uint64_t bytes = 0;
	relay_status rc = facts->host->sha256_file(abs_path, 0, hex, &bytes, facts->err);
	if (rc != RELAY_OK)
		return rc;
	json_object *fact = json_object_new_object();
	json_object_object_add(fact, "path", json_object_new_string(rel));
	json_object_object_add(fact, "bytes", json_object_new_int64((int64_t)bytes));
	json_object_object_add(fact, "sha256", json_object_new_string(hex));
	json_object_array_add(facts->array, fact);
	return RELAY_OK;
}

/* Walks a tree (no links followed; links and special files refused) and
 * adds a fact for every regular file. */
static relay_status walk_facts(fact_list *facts, const char *dir, const char *rel)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return facts->host->error_set(facts->err, RELAY_E_IO, errno, "machine-fake: cannot read %s",
		                              dir);
	struct dirent *e;
	relay_status rc = RELAY_OK;
	while (rc == RELAY_OK && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		size_t n = strlen(dir) + strlen(e->d_name) + 2, rn = strlen(rel) + strlen(e->d_name) + 2;
		char *child = malloc(n), *child_rel = malloc(rn);
		if (child == NULL || child_rel == NULL) {
			free(child);
			free(child_rel);
			rc = facts->host->error_set(facts->err, RELAY_E_NO_MEMORY, 0,
			                            "machine-fake: out of memory");
			break;
		}
		snprintf(child, n, "%s/%s", dir, e->d_name);
		if (rel[0])
			snprintf(child_rel, rn, "%s/%s", rel, e->d_name);
		else
			snprintf(child_rel, rn, "%s", e->d_name);
		struct stat sb;
		if (lstat(child, &sb) != 0)
			rc = facts->host->error_set(facts->err, RELAY_E_IO, errno,
			                            "machine-fake: cannot stat %s", child);
		else if (S_ISDIR(sb.st_mode))
			rc = walk_facts(facts, child, child_rel);
		else if (S_ISREG(sb.st_mode))
			rc = add_fact(facts, child, child_rel);
		else
			rc = facts->host->error_set(facts->err, RELAY_E_UNSAFE_PATH, 0,
			                            "machine-fake: %s is a link or special file", child);
		free(child);
		free(child_rel);
	}
	closedir(d);
	return rc;
}

/* Facts of a file ("" path) or a tree, sorted by path. */
static relay_status collect_facts(fake_state *st, const char *path, int tree, json_object **out,
                                  relay_error *err)
{
	fact_list facts = {json_object_new_array(), st->host, path, RELAY_OK, err};
	relay_status rc = tree ? walk_facts(&facts, path, "") : add_fact(&facts, path, "");
	if (rc != RELAY_OK) {
		json_object_put(facts.array);
		return rc;
	}
	json_object_array_sort(facts.array, fact_cmp);
	*out = facts.array;
	return RELAY_OK;
}

/* ---- copying --------------------------------------------------------------------------------- */

static relay_status mkdirs(fake_state *st, const char *path, relay_error *err)
{
	rs_error why;
	if (rs_mkdir_p(path, 0700, 0, &why) == 0)
		return RELAY_OK;
	return st->host->error_set(err, why.errnum == ENOMEM ? RELAY_E_NO_MEMORY : RELAY_E_IO, why.errnum,
	                           "machine-fake: %s", why.message);
}

/* Copies one regular file; `exclusive` refuses an existing destination. */
static relay_status copy_file(fake_state *st, const char *src, const char *dst, int exclusive,
                              relay_error *err)
{
	int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat sb;
	if (in < 0 || fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		int e = errno;
		if (in >= 0)
			close(in);
		return st->host->error_set(err, in < 0 && e == ELOOP ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, e,
		                           "machine-fake: %s is not a readable regular file", src);
	}
	int oflags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
	int out = open(dst, oflags, 0600);
	if (out < 0) {
		int e = errno;
		close(in);
		return st->host->error_set(err, RELAY_E_IO, e, "machine-fake: cannot create %s", dst);
	}
	char buf[65536];
	relay_status rc = RELAY_OK;
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = st->host->error_set(err, RELAY_E_IO, errno, "machine-fake: cannot read %s", src);
			break;
		}
		if (n == 0)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				rc = st->host->error_set(err, RELAY_E_IO, errno,
				                         "machine-fake: cannot write %s", dst);
				break;
			}
			off += w;
		}
		if (rc != RELAY_OK)
			break;
	}
	close(in);
	if (close(out) != 0 && rc == RELAY_OK)
		rc = st->host->error_set(err, RELAY_E_IO, errno, "machine-fake: cannot write %s", dst);
	return rc;
}

static relay_status copy_tree(fake_state *st, const char *src, const char *dst, int exclusive,
                              relay_error *err)
{
	DIR *d = opendir(src);
	if (d == NULL)
		return st->host->error_set(err, RELAY_E_IO, errno, "machine-fake: cannot read %s", src);
	struct dirent *e;
	relay_status rc = RELAY_OK;
	while (rc == RELAY_OK && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		size_t sn = strlen(src) + strlen(e->d_name) + 2, dn = strlen(dst) + strlen(e->d_name) + 2;
		char *s = malloc(sn), *t = malloc(dn);
		if (s == NULL || t == NULL) {
			free(s);
			free(t);
			rc = st->host->error_set(err, RELAY_E_NO_MEMORY, 0, "machine-fake: out of memory");
			break;
		}
		snprintf(s, sn, "%s/%s", src, e->d_name);
		snprintf(t, dn, "%s/%s", dst, e->d_name);
		struct stat sb;
		if (lstat(s, &sb) != 0) {
			rc = st->host->error_set(err, RELAY_E_IO, errno, "machine-fake: cannot stat %s", s);
		} else if (S_ISDIR(sb.st_mode)) {
			if (mkdir(t, 0700) != 0 && (exclusive || errno != EEXIST))
				rc = st->host->error_set(err, RELAY_E_IO, errno,
				                         "machine-fake: cannot create %s", t);
			else
				rc = copy_tree(st, s, t, exclusive, err);
		} else if (S_ISREG(sb.st_mode)) {
			rc = copy_file(st, s, t, exclusive, err);
		} else {
			rc = st->host->error_set(err, RELAY_E_UNSAFE_PATH, 0,
			                         "machine-fake: %s is a link or special file", s);
		}
		free(s);
		free(t);
	}
	closedir(d);
	return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static relay_status fake_push(relay_plugin_state *state, relay_transport_conn *c, const char *local_path,
                              const char *remote_path, relay_call *call, unsigned flags,
                              char **facts_json_out, relay_error *err)
{
	fake_state *st = state;
	fake_conn *conn = c;
	if (facts_json_out)
		*facts_json_out = NULL;
	/* Like a transport built before RELAY_XFER_CALLER_VERIFIES, the fake
	 * refuses it (and logs the refusal), so the tests see the core fall
	 * back to a push without it. */
	if (flags & ~RELAY_XFER_TREE) {
		json_object *refused = json_object_new_object();
		json_object_object_add(refused, "path",
		                       json_object_new_string(remote_path ? remote_path : ""));
		json_object_object_add(refused, "result", json_object_new_string("unsupported-flags"));
		json_object_object_add(refused, "flags", json_object_new_int64(flags));
		fake_log(st, "push", conn->vm, refused);
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                           "machine-fake: unknown push flags 0x%x", flags);
	}
	if (remote_path == NULL || remote_path[0] != '/')
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "machine-fake: guest paths are absolute");
	if (st->host->call_cancelled(call)) /* plugin-test check 61 */
		return st->host->error_set(err, RELAY_E_CANCELLED, 0, "machine-fake: push cancelled");
	int tree = (flags & RELAY_XFER_TREE) != 0;
	json_object *extra = json_object_new_object();
	json_object_object_add(extra, "path", json_object_new_string(remote_path));
	json_object_object_add(extra, "result", json_object_new_string("ok"));
	fake_log(st, "push", conn->vm, extra);
	relay_status rc;
	if (tree) {
		rc = mkdirs(st, remote_path, err);
		if (rc == RELAY_OK)
			rc = copy_tree(st, local_path, remote_path, 0, err);
	} else {
		char *parent = strdup(remote_path);
		char *slash = parent ? strrchr(parent, '/') : NULL;
		if (slash && slash != parent)
			*slash = '\0';
		rc = parent ? mkdirs(st, parent, err)
		            : st->host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		free(parent);
		if (rc == RELAY_OK)
			rc = copy_file(st, local_path, remote_path, 0, err);
	}
	if (rc != RELAY_OK)
		return rc;
	if (facts_json_out) {
		json_object *facts = NULL;
		rc = collect_facts(st, remote_path, tree, &facts, err);
		if (rc != RELAY_OK)
			return rc;
		*facts_json_out = fake_owned_json(st, facts);
		json_object_put(facts);
	}
	return RELAY_OK;
}

/* Takes the first scripted "pull" entry whose "match" occurs in `path`
 * (a new reference), or NULL for a plain pull. Same locks as
 * machine_fake.c's control file: the state mutex, then <stateDir>/fake.lock. */
static json_object *take_pull_behaviour(fake_state *st, const char *path)
{
	pthread_mutex_lock(&st->lock);
	size_t n = strlen(st->state_dir) + 16;
	char *lock_path = malloc(n);
	int fd = -1;
	if (lock_path) {
		snprintf(lock_path, n, "%s/fake.lock", st->state_dir);
		fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		free(lock_path);
	}
	if (fd >= 0)
		flock(fd, LOCK_EX);
	json_object *entry = NULL;
	json_object *control = json_object_from_file(st->control_path);
	json_object *list = NULL;
	if (json_object_is_type(control, json_type_object) &&
	    json_object_object_get_ex(control, "pull", &list) && json_object_is_type(list, json_type_array)) {
		size_t count = json_object_array_length(list);
		for (size_t i = 0; i < count && entry == NULL; i++) {
			json_object *item = json_object_array_get_idx(list, i);
			const char *match = rsj_get_str(item, "match");
			if (match && (path == NULL || strstr(path, match) == NULL))
				continue;
			entry = json_object_get(item);
			json_object *times_obj = NULL;
			int64_t times = json_object_object_get_ex(item, "times", &times_obj)
			                    ? json_object_get_int64(times_obj)
			                    : 1;
			if (times == -1)
				break;
			if (times <= 1)
				json_object_array_del_idx(list, i, 1);
			else
				json_object_object_add(item, "times", json_object_new_int64(times - 1));
			size_t tn = strlen(st->control_path) + 32;
			char *tmp = malloc(tn);
			if (tmp) {
				snprintf(tmp, tn, "%s.tmp-%ld", st->control_path, (long)getpid());
				if (json_object_to_file_ext(tmp, control, JSON_C_TO_STRING_PRETTY) == 0)
					rename(tmp, st->control_path);
				else
					unlink(tmp);
				free(tmp);
			}
		}
	}
	json_object_put(control);
	if (fd >= 0)
		close(fd);
	pthread_mutex_unlock(&st->lock);
	return entry;
}

/* Changes the last byte of a pulled file (the scripted "corrupt" pull). */
static void corrupt_last_byte(const char *path)
{
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	struct stat sb;
	if (fd < 0)
		return;
	if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
		unsigned char c = 0;
		if (pread(fd, &c, 1, sb.st_size - 1) == 1) {
			c ^= 0x5a;
			if (pwrite(fd, &c, 1, sb.st_size - 1) != 1)
				c = 0;
		}
	}
	close(fd);
}

static relay_status fake_pull(relay_plugin_state *state, relay_transport_conn *c, const char *remote_path,
                              const char *local_path, relay_call *call, unsigned flags, char **facts_json_out,
                              relay_error *err)
{
	fake_state *st = state;
	fake_conn *conn = c;
	if (facts_json_out)
		*facts_json_out = NULL;
	if (flags & ~RELAY_XFER_TREE)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                           "machine-fake: unknown pull flags 0x%x", flags);
	if (st->host->call_cancelled(call)) /* plugin-test check 62 */
		return st->host->error_set(err, RELAY_E_CANCELLED, 0, "machine-fake: pull cancelled");
	int tree = (flags & RELAY_XFER_TREE) != 0;
	json_object *behaviour = take_pull_behaviour(st, remote_path);
	json_object *delay_obj = NULL;
	if (behaviour && json_object_object_get_ex(behaviour, "delayMs", &delay_obj) &&
	    fake_delay(st, call, json_object_get_int64(delay_obj))) {
		json_object_put(behaviour);
		return st->host->error_set(err, RELAY_E_CANCELLED, 0,
		                           "machine-fake: pulling %s was cancelled", remote_path);
	}
	const char *scripted = rsj_get_str(behaviour, "result") ? rsj_get_str(behaviour, "result") : "ok";
	json_object *extra = json_object_new_object();
	json_object_object_add(extra, "path", json_object_new_string(remote_path ? remote_path : ""));
	json_object_object_add(extra, "result", json_object_new_string(scripted));
	fake_log(st, "pull", conn->vm, extra);
	int corrupt = strcmp(scripted, "corrupt") == 0;
	relay_status failure = RELAY_OK;
	if (strcmp(scripted, "transient") == 0)
		failure = st->host->error_set(err, RELAY_E_TRANSIENT, ECONNRESET,
		                              "machine-fake: connection reset while pulling %s (scripted)",
		                              remote_path);
	else if (strcmp(scripted, "timeout") == 0)
		failure = st->host->error_set(err, RELAY_E_TIMEOUT, 0,
		                              "machine-fake: pulling %s timed out (scripted)", remote_path);
	else if (strcmp(scripted, "refused") == 0)
		failure = st->host->error_set(
		    err, RELAY_E_REFUSED, 0,
		    "machine-fake: the guest refused to send %s (HTTP 403, scripted)", remote_path);
	else if (strcmp(scripted, "unsafe-path") == 0)
		failure = st->host->error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                              "machine-fake: %s resolves through a symbolic link (scripted)",
		                              remote_path);
	else if (strcmp(scripted, "not-found") == 0)
		failure = st->host->error_set(err, RELAY_E_NOT_FOUND, ENOENT,
		                              "machine-fake: %s does not exist in the guest (scripted)",
		                              remote_path);
	json_object_put(behaviour);
	if (failure != RELAY_OK)
		return failure;
	struct stat sb;
	if (remote_path == NULL || lstat(remote_path, &sb) != 0)
		return st->host->error_set(err, RELAY_E_NOT_FOUND, errno,
		                           "machine-fake: %s does not exist in the guest",
		                           remote_path ? remote_path : "(null)");
	if (tree ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode))
		return st->host->error_set(
		    err, S_ISLNK(sb.st_mode) ? RELAY_E_UNSAFE_PATH : RELAY_E_INVALID_ARGUMENT, 0,
		    "machine-fake: %s is not a %s", remote_path, tree ? "folder" : "regular file");
	struct stat existing;
	if (lstat(local_path, &existing) == 0)
		return st->host->error_set(err, RELAY_E_IO, EEXIST, "machine-fake: %s already exists",
		                           local_path);
	json_object *source = NULL;
	relay_status rc = collect_facts(st, remote_path, tree, &source, err);
	if (rc != RELAY_OK)
		return rc;
	if (tree) {
		if (mkdir(local_path, 0700) != 0)
			rc = st->host->error_set(err, RELAY_E_IO, errno, "machine-fake: cannot create %s",
			                         local_path);
		else
			rc = copy_tree(st, remote_path, local_path, 1, err);
	} else {
		rc = copy_file(st, remote_path, local_path, 1, err);
	}
	json_object *local = NULL;
	if (rc == RELAY_OK)
		rc = collect_facts(st, local_path, tree, &local, err);
	if (rc == RELAY_OK && strcmp(json_object_to_json_string_ext(source, JSON_C_TO_STRING_PLAIN),
	                             json_object_to_json_string_ext(local, JSON_C_TO_STRING_PLAIN)) != 0)
		rc = st->host->error_set(err, RELAY_E_INTEGRITY, 0,
		                         "machine-fake: %s changed while it was pulled", remote_path);
	if (rc != RELAY_OK) {
		nftw(local_path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	} else {
		if (corrupt && !tree)
			corrupt_last_byte(local_path);
		if (facts_json_out)
			*facts_json_out = fake_owned_json(st, source);
	}
	json_object_put(source);
	json_object_put(local);
	return rc;
}

const relay_transport_ops fake_transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_GUEST_FACTS,
    .open = fake_open,
    .close = fake_close,
    .exec = fake_exec,
    .push = fake_push,
    .pull = fake_pull,
};
