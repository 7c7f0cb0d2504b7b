/*
 * machine_local_fixture.h — helpers shared by tests/unit/plugins/machine-local/test_machine_local_*.c.
 *
 * They load plugins/machine-local through the real loader (loader_find_plugin
 * + loader_load with a config JSON) into a fresh state folder under /var/tmp,
 * and call its machine and transport ops directly. Guests are real: the
 * tests need root and a kernel that allows namespaces and overlayfs, and
 * skip with a message otherwise (ml_skip_reason()).
 */
#ifndef TEST_MACHINE_LOCAL_FIXTURE_H
#define TEST_MACHINE_LOCAL_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "loader/loader.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

typedef struct ml_env {
	plugin_registry registry;
	loaded_plugin *p;
	char state_dir[256];
	char counter;
} ml_env;

/* Copies of the environments still loaded, so a test that fails half-way
 * (its own ml_env is on a stack that is gone) does not leave guests behind:
 * ml_teardown() releases and unloads them. Test thread only. */
static struct {
	bool used;
	ml_env env;
} ml_live_envs[8];

/* NULL when real guests can be made here, else why not. */
static inline const char *ml_skip_reason(void)
{
	static char why[256];
	/* RELAY_ML_AS_USER=1: try them as an ordinary user (the relay without
	 * root); tests that check root-only facts then fail. */
	if (geteuid() != 0 && !(getenv("RELAY_ML_AS_USER") && strcmp(getenv("RELAY_ML_AS_USER"), "1") == 0))
		return "machine-local tests need root (CI runs them as root)";
	pid_t pid = fork();
	if (pid == 0)
		_exit(unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC |
		              (geteuid() != 0 ? CLONE_NEWUSER : 0)) == 0
		          ? 0
		          : 1);
	int st = 0;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		snprintf(why, sizeof why, "this kernel or container does not allow new namespaces");
		return why;
	}
	FILE *f = fopen("/proc/filesystems", "r");
	bool overlay = false;
	char line[128];
	while (f && fgets(line, sizeof line, f))
		overlay |= strstr(line, "\toverlay") != NULL;
	if (f)
		fclose(f);
	if (!overlay)
		return "overlayfs is not available";
	return NULL;
}

#define ML_SKIP_UNLESS_READY()                                                                               \
	do {                                                                                                 \
		const char *why_ = ml_skip_reason();                                                         \
		if (why_) {                                                                                  \
			fprintf(stderr, "skipped: %s\n", why_);                                              \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

static inline char *ml_plugin_path(const char *name)
{
	char dir[1024];
	const char *build = getenv("RELAY_BUILD_DIR");
	assert_non_null(build);
	snprintf(dir, sizeof dir, "%s/lib/mcp-relay/plugins", build);
	setenv("MCP_RELAY_PLUGIN_PATH", dir, 1);
	relay_error err;
	memset(&err, 0, sizeof err);
	char *path = loader_find_plugin(name, &err);
	if (path == NULL)
		fail_msg("%s (build the %s target)", err.message, name);
	return path;
}

/* Loads machine-local with `options_json` (an object text, or NULL) into a
 * new state folder, or into `reuse_dir` when given. */
static inline void ml_load_in(ml_env *e, const char *options_json, const char *reuse_dir)
{
	memset(&e->registry, 0, sizeof e->registry);
	e->p = NULL;
	if (reuse_dir) {
		snprintf(e->state_dir, sizeof e->state_dir, "%s", reuse_dir);
	} else {
		snprintf(e->state_dir, sizeof e->state_dir, "/var/tmp/ml-test-XXXXXX");
		assert_non_null(mkdtemp(e->state_dir));
	}
	char *path = ml_plugin_path("machine-local");
	char cfg[4096];
	snprintf(
	    cfg, sizeof cfg,
	    "{\"stateDir\":\"%s\",\"libexecDir\":\"%s/libexec/mcp-relay/receivers\",\"guestNetwork\":\"nat\","
	    "\"options\":%s}",
	    e->state_dir, getenv("RELAY_BUILD_DIR"), options_json ? options_json : "{}");
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status s = loader_load(&e->registry, path, RELAY_KIND_MACHINE, cfg, &e->p, &err);
	free(path);
	if (s != RELAY_OK)
		fail_msg("loading machine-local failed: %s", err.message);
	for (size_t i = 0; i < sizeof ml_live_envs / sizeof ml_live_envs[0]; i++)
		if (!ml_live_envs[i].used) {
			ml_live_envs[i].used = true;
			ml_live_envs[i].env = *e;
			break;
		}
}

static inline void ml_load(ml_env *e, const char *options_json)
{
	ml_load_in(e, options_json, NULL);
}

static inline void ml_unload(ml_env *e, bool remove_state)
{
	for (size_t i = 0; i < sizeof ml_live_envs / sizeof ml_live_envs[0]; i++)
		if (ml_live_envs[i].used && strcmp(ml_live_envs[i].env.state_dir, e->state_dir) == 0)
			ml_live_envs[i].used = false;
	loader_shutdown(&e->registry);
	e->p = NULL;
	if (remove_state) {
		relay_error err;
		fs_remove_tree(e->state_dir, &err);
	}
}

/* Acquires guest `guest`; extra is appended inside the spec object (may be
 * NULL, e.g. "\"vnc\":true"). Returns the lease text (free) or NULL when
 * the status was not RELAY_OK; *status_out and err get the outcome. */
static inline char *ml_acquire_ex(ml_env *e, const char *guest, const char *image, const char *extra,
                                  relay_status *status_out, relay_error *err)
{
	char spec[2048];
	snprintf(spec, sizeof spec,
	         "{\"guest\":\"%s\",\"task\":\"t\",\"purpose\":\"relay-%s-%08x\",\"image\":\"%s\",\"env\":"
	         "\"none\","
	         "\"network\":\"nat\",\"vnc\":false,\"ttlMs\":900000%s%s}",
	         guest, guest, (unsigned)(rand() & 0x7fffffff), image, extra ? "," : "", extra ? extra : "");
	char *lease = NULL;
	memset(err, 0, sizeof *err);
	relay_status s = e->p->machine.acquire(e->p->state, spec, NULL, 0, &lease, err);
	if (status_out)
		*status_out = s;
	if (s != RELAY_OK) {
		free(lease);
		return NULL;
	}
	return lease;
}

static inline char *ml_acquire(ml_env *e, const char *guest, const char *extra)
{
	relay_error err;
	relay_status s;
	char *lease = ml_acquire_ex(e, guest, "local", extra, &s, &err);
	if (lease == NULL)
		fail_msg("acquire of %s failed (%s): %s", guest, relay_status_str(s), err.message);
	return lease;
}

static inline json_object *ml_parse(const char *text)
{
	json_object *o = jsonx_parse_str(text, NULL, 0);
	assert_non_null(o);
	return o;
}

static inline int64_t ml_local_int(const char *lease, const char *key)
{
	json_object *doc = ml_parse(lease);
	int64_t v = 0;
	jsonx_get_int(jsonx_get_obj(doc, "local"), key, &v);
	json_object_put(doc);
	return v;
}

static inline void ml_local_str(const char *lease, const char *key, char *out, size_t size)
{
	json_object *doc = ml_parse(lease);
	const char *v = jsonx_get_str(jsonx_get_obj(doc, "local"), key);
	snprintf(out, size, "%s", v ? v : "");
	json_object_put(doc);
}

static inline relay_transport_conn *ml_open(ml_env *e, const char *lease)
{
	relay_transport_conn *c = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status s = e->p->transport.open(e->p->state, lease, NULL, 0, &c, &err);
	if (s != RELAY_OK)
		fail_msg("transport open failed: %s", err.message);
	return c;
}

/* Runs argv in the guest; returns the exit code, output in *out (free). */
static inline int ml_exec_full(ml_env *e, relay_transport_conn *c, const char *const *argv, unsigned flags,
                               uint64_t timeout_ms, size_t max_out, relay_exec_result *res_out)
{
	relay_exec_request req = {.struct_size = sizeof req,
	                          .argv = argv,
	                          .cwd = NULL,
	                          .envp = NULL,
	                          .timeout_ms = timeout_ms,
	                          .max_output_bytes = max_out};
	relay_exec_result res;
	memset(&res, 0, sizeof res);
	res.struct_size = sizeof res;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status s = e->p->transport.exec(e->p->state, c, &req, NULL, flags, &res, &err);
	if (s != RELAY_OK)
		fail_msg("exec of %s failed: %s", argv[0], err.message);
	*res_out = res;
	return res.exit_code;
}

/* Runs `/bin/sh -c script` with merged output; returns its exit code. */
static inline int ml_sh(ml_env *e, relay_transport_conn *c, const char *script, char **out)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	relay_exec_result res;
	int code = ml_exec_full(e, c, argv, RELAY_EXEC_MERGE_OUTPUT, 60000, 1 << 20, &res);
	if (out)
		*out = res.out;
	else
		free(res.out);
	free(res.err);
	return code;
}

static inline void ml_release(ml_env *e, const char *lease)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status s = e->p->machine.release(e->p->state, lease, "released", NULL, 0, &err);
	if (s != RELAY_OK)
		fail_msg("release failed (%s): %s", relay_status_str(s), err.message);
	char *check = NULL;
	s = e->p->machine.verify_destroyed(e->p->state, lease, NULL, 0, &check, &err);
	if (s != RELAY_OK)
		fail_msg("verify_destroyed failed: %s", err.message);
	assert_string_equal(check, "namespace");
	free(check);
}

/* True when /proc/self/mountinfo mentions `text`. */
static inline bool ml_mountinfo_mentions(const char *text)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[8192];
	bool found = false;
	while (f && fgets(line, sizeof line, f))
		found |= strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* True when pid is a live (not zombie) process. */
static inline bool ml_pid_alive(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

/* cmocka teardown: releases every lease of every environment a failed test
 * left loaded, then unloads it and removes its state folder. */
static inline int ml_teardown(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof ml_live_envs / sizeof ml_live_envs[0]; i++) {
		if (!ml_live_envs[i].used)
			continue;
		ml_env copy = ml_live_envs[i].env;
		ml_env *e = &copy;
		char dir[512];
		snprintf(dir, sizeof dir, "%s/leases", e->state_dir);
		FILE *ls = NULL;
		char cmd[700];
		snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null", dir);
		ls = popen(cmd, "r");
		char vm[256];
		while (ls && fgets(vm, sizeof vm, ls)) {
			vm[strcspn(vm, "\n")] = '\0';
			char doc[400];
			snprintf(doc, sizeof doc, "{\"vm\":\"%s\"}", vm);
			relay_error err;
			e->p->machine.release(e->p->state, doc, "failed", NULL, 0, &err);
		}
		if (ls)
			pclose(ls);
		ml_unload(e, true);
	}
	return 0;
}

#endif
