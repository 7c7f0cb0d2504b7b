/*
 * test_kit_pieces.c — the plugin kit (support/kit/relay_kit/) on its own,
 * with a host table of its own and an in-memory console backend: the
 * options' one wording, the console ledger's refusal sentences and limits,
 * the reaper loop, durable writes, a folder's sorted names, random hex, the
 * machine ops' front over a backend of its own and the configuration it
 * reads, a transfer's first checks and facts, and the plugin error.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "relay_kit/clock.h"
#include "relay_kit/console.h"
#include "relay_kit/dir.h"
#include "relay_kit/durable.h"
#include "relay_kit/error.h"
#include "relay_kit/guest_facts.h"
#include "relay_kit/machine.h"
#include "relay_kit/machine_config.h"
#include "relay_kit/options.h"
#include "relay_kit/random.h"
#include "relay_kit/reaper.h"
#include "relay_kit/text.h"
#include "relay_kit/xfer.h"

/* ---- a host table ------------------------------------------------------------------- */

static relay_status kit_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static relay_status kit_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
{
	if (err) {
		err->code = code;
		err->sys_errno = sys_errno;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof err->message, fmt, ap);
		va_end(ap);
	}
	return code;
}

static void kit_log(relay_log_level level, const char *plugin, const char *fmt, ...)
{
	(void)level;
	(void)plugin;
	(void)fmt;
}

static int64_t kit_now_ms(void)
{
	return 1000000;
}

static char *kit_strdup(const char *text)
{
	return strdup(text);
}

static relay_status kit_random(void *out, size_t len, relay_error *err)
{
	(void)err;
	memset(out, 0xab, len);
	return RELAY_OK;
}

static const relay_host host = {
    .log = kit_log,
    .free = free,
    .strdup = kit_strdup,
    .error_set = kit_error_set,
    .now_ms = kit_now_ms,
    .random_bytes = kit_random,
};

/* ---- options ------------------------------------------------------------------------ */

typedef struct demo {
	int64_t count, grace, backstop, reaper;
	bool display;
	char screen[RK_SCREEN_BYTES];
} demo;

static relay_status parse_demo(const char *text, demo *d, relay_error *err)
{
	*d = (demo){.count = 4, .grace = 300000, .backstop = 60000, .reaper = 2000, .display = true};
	snprintf(d->screen, sizeof d->screen, "1280x800x24");
	const rk_option table[] = {
	    {"count", NULL, 1, 8, &d->count},
	    RK_OPTIONS_LEASE_TIMES(&d->grace, &d->backstop, &d->reaper),
	    RK_OPTIONS_DISPLAY(&d->display, d->screen),
	};
	const rk_options spec = {&host, "demo", "DEMO_OPTIONS", table, sizeof table / sizeof table[0], d};
	json_object *o = json_tokener_parse(text);
	relay_status s = rk_options_parse(&spec, o, err);
	json_object_put(o);
	return s;
}

static void test_options_one_wording(void **state)
{
	(void)state;
	demo d;
	relay_error err;
	memset(&err, 0, sizeof err);
	assert_int_equal(
	    parse_demo("{\"count\": 8, \"display\": \"off\", \"screen\": \"800x600x16\"}", &d, &err),
	    RELAY_OK);
	assert_int_equal(d.count, 8);
	assert_false(d.display);
	assert_string_equal(d.screen, "800x600x16");
	assert_int_equal(parse_demo("{\"colour\": 1}", &d, &err), RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "unknown demo option colour; accepted: count, graceMs, backstopMs, "
	                                 "reaperIntervalMs, display, screen; fix it in DEMO_OPTIONS");
	assert_int_equal(parse_demo("{\"count\": 9}", &d, &err), RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(
	    err.message,
	    "demo: options.count must be a whole number from 1 to 8 (default 4); fix it in DEMO_OPTIONS");
	assert_int_equal(parse_demo("{\"reaperIntervalMs\": 99}", &d, &err), RELAY_E_INVALID_ARGUMENT);
	assert_non_null(strstr(err.message, "options.reaperIntervalMs must be a whole number from 100 to"));
	assert_int_equal(parse_demo("{\"display\": \"on\"}", &d, &err), RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "demo: options.display must be auto or off; fix it in DEMO_OPTIONS");
	assert_int_equal(parse_demo("{\"screen\": \"1x1x24\"}", &d, &err), RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(parse_demo("[1]", &d, &err), RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "demo options must be a JSON object; fix it in DEMO_OPTIONS");
}

/* ---- the console ledger over an in-memory record --------------------------------------- */

typedef struct memory_backend {
	json_object *record; /* NULL: not held */
	int writes, opens, stops;
	bool runs;
} memory_backend;

static json_object *mem_lock_read(void *ctx, const char *vm, int *lock_out, int *errno_out)
{
	memory_backend *m = ctx;
	*lock_out = 3;
	if (m->record == NULL || strcmp(vm, "vm-1") != 0) {
		*errno_out = ENOENT;
		return NULL;
	}
	return json_object_get(m->record);
}

static void mem_unlock(void *ctx, int lock)
{
	(void)ctx;
	assert_int_equal(lock, 3);
}

static int mem_write(void *ctx, json_object *record)
{
	((memory_backend *)ctx)->writes++;
	(void)record;
	return 0;
}

#define MEM_INIT_PID 4242

static int mem_guest_state(void *ctx, json_object *record, const char *op, relay_call *call,
                           pid_t *init_pid_out, relay_error *err)
{
	(void)record, (void)op, (void)call, (void)err;
	*init_pid_out = MEM_INIT_PID;
	return ((memory_backend *)ctx)->runs ? 1 : 0;
}

static relay_status mem_open(void *ctx, json_object *record, const char *attempt_id, json_object *attempt,
                             pid_t init_pid, relay_call *call, relay_error *err)
{
	(void)record, (void)attempt_id, (void)call, (void)err;
	assert_int_equal(init_pid, MEM_INIT_PID); /* the guest_state's pid reaches open */
	((memory_backend *)ctx)->opens++;
	rk_console_set(attempt, "launched", NULL);
	return RELAY_OK;
}

static void mem_stop(void *ctx, json_object *record, json_object *attempt, bool guest_runs)
{
	(void)record, (void)guest_runs;
	((memory_backend *)ctx)->stops++;
	json_object_object_add(attempt, "viewer_cleanup", json_object_new_string("local-children-stopped"));
}

static json_object *mem_caps(void *ctx, relay_call *call)
{
	(void)ctx, (void)call;
	return rk_console_capabilities("memory", NULL, "not-offered");
}

static const rk_console_backend memory_console = {
    .source = "memory",
    .lock_read = mem_lock_read,
    .unlock = mem_unlock,
    .write = mem_write,
    .guest_state = mem_guest_state,
    .open = mem_open,
    .stop = mem_stop,
    .capabilities = mem_caps,
};

/* The typed console over the ledger, its state the test's rk_console. */
static relay_status mem_route(relay_plugin_state *state, const rk_console_request *q, relay_call *call,
                              char **out, relay_error *err)
{
	return rk_console_ledger(state, q, call, out, err);
}

RK_CONSOLE_DEFINE_OPS(memory_console_ops, mem_route);

/* op ("open", "cancel", "resolve") on vm-1 with the given lease id and
 * attempt through the typed slots; the answer parsed (NULL after a
 * refusal, err set). */
static json_object *console(rk_console *c, const char *op, const char *lease_id, const char *attempt,
                            relay_error *err)
{
	memory_backend *m = c->ctx;
	const char *cid = json_object_get_string(
	    json_object_object_get(json_object_object_get(m->record, "console"), "console_id"));
	char lease[256];
	snprintf(lease, sizeof lease, "{\"vm\": \"vm-1\", \"lease_id\": \"%s\"}", lease_id);
	char *out = NULL;
	const relay_machine_console_ops *t = &memory_console_ops;
	relay_status s =
	    strcmp(op, "open") == 0     ? t->open(c, lease, cid ? cid : "", attempt, NULL, 0, &out, err)
	    : strcmp(op, "cancel") == 0 ? t->cancel(c, lease, cid ? cid : "", attempt, NULL, 0, &out, err)
	                                : t->resolve(c, lease, NULL, 0, &out, err);
	json_object *answer = s == RELAY_OK ? json_tokener_parse(out) : NULL;
	assert_true(s == RELAY_OK || out == NULL);
	free(out);
	return answer;
}

static const char *text_at(json_object *o, const char *a, const char *b)
{
	json_object *v = json_object_object_get(o, a);
	return json_object_get_string(b ? json_object_object_get(v, b) : v);
}

static void test_console_ledger(void **state)
{
	(void)state;
	memory_backend m = {.record = json_tokener_parse("{\"vm\": \"vm-1\", \"lease_id\": \"L1\"}"),
	                    .runs = true};
	rk_console c = {&memory_console, &host, &m};
	rk_console_prepare(&c, m.record);
	assert_string_equal(text_at(m.record, "console", "status"), "ready");
	assert_string_equal(text_at(m.record, "console", "source"), "memory");
	relay_error err;
	memset(&err, 0, sizeof err);
	char *caps = NULL;
	assert_int_equal(memory_console_ops.capabilities(&c, NULL, 0, &caps, &err), RELAY_OK);
	assert_non_null(strstr(caps, "\"service\":\"memory\""));
	free(caps);

	json_object *a = console(&c, "open", "L1", "a1", &err);
	assert_non_null(a);
	assert_string_equal(text_at(a, "attempt", "status"), "launched");
	assert_string_equal(text_at(a, "viewer_connected", NULL), "unverified");
	json_object_put(a);
	assert_null(console(&c, "open", "L1", "a2", &err));
	assert_string_equal(err.message, "Another console attempt is active; cancel it first");
	assert_null(console(&c, "open", "L2", "a2", &err));
	assert_string_equal(err.message, "Console lease identity mismatch");
	assert_null(console(&c, "open", "L1", "bad id!", &err));
	assert_string_equal(err.message, "Invalid console request identity or fields");
	a = console(&c, "cancel", "L1", "a1", &err);
	assert_string_equal(text_at(a, "attempt", "status"), "cancelled");
	json_object_put(a);
	assert_int_equal(m.stops, 1);
	/* the spec's bound on attempts: 64, then refused */
	for (int i = 2; i <= RK_CONSOLE_MAX_ATTEMPTS; i++) {
		char id[16];
		snprintf(id, sizeof id, "a%d", i);
		json_object_put(console(&c, "cancel", "L1", id, &err)); /* an attempt never opened */
	}
	assert_null(console(&c, "open", "L1", "a99", &err));
	assert_string_equal(err.message, "Console attempt limit reached");
	/* a guest that no longer runs: revoked */
	m.runs = false;
	a = console(&c, "resolve", "L1", "a1", &err);
	assert_string_equal(text_at(a, "status", NULL), "revoked");
	assert_string_equal(text_at(a, "reason", NULL), "released");
	json_object_put(a);
	/* a lease not held */
	json_object_put(m.record);
	m.record = NULL;
	char *out = NULL;
	assert_int_equal(memory_console_ops.resolve(&c, "{\"vm\": \"vm-1\"}", NULL, 0, &out, &err),
	                 RELAY_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "Console unavailable after restart or for this lease"));
	/* R1: an unknown flag bit is refused before anything else */
	assert_int_equal(memory_console_ops.open(&c, "{\"vm\": \"vm-1\"}", "c", "a1", NULL, 0x8, &out, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	assert_string_equal(err.message, "unknown console open flags 0x8");
	assert_null(out);
	assert_int_equal(m.opens, 1);
}

/* ---- the reaper, durable writes, folders, random hex ------------------------------------ */

static void count_scan(void *arg)
{
	(*(int *)arg)++;
}

static void test_reaper_loop(void **state)
{
	(void)state;
	rk_reaper never = {0};
	rk_reaper_stop(&never); /* never started: nothing to do */
	int scans = 0;
	rk_reaper r;
	assert_int_equal(rk_reaper_start(&r, 10, count_scan, &scans), 0);
	for (int64_t until = rk_monotonic_ms() + 5000; scans < 3 && rk_monotonic_ms() < until;)
		rk_sleep_ms(5);
	rk_reaper_stop(&r);
	int after = scans;
	assert_true(after >= 3);
	rk_sleep_ms(50);
	assert_int_equal(scans, after); /* stopped for good */
}

static void test_durable_write_and_sorted_names(void **state)
{
	(void)state;
	char dir[] = "/tmp/test-plugin-kit-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof path, "%s/file", dir);
	assert_int_equal(rk_write_durable(path, "one", 3, 0600, RK_DURABLE_SYNC), 0);
	assert_int_equal(rk_write_durable(path, "second", 6, 0600, 0), 0);
	assert_int_equal(rk_write_durable(path, "x", 1, 0600, 0x80), EINVAL);
	char buf[16] = "";
	int fd = open(path, O_RDONLY);
	assert_int_equal(read(fd, buf, sizeof buf), 6);
	close(fd);
	assert_memory_equal(buf, "second", 6);
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	snprintf(path, sizeof path, "%s/b", dir);
	assert_int_equal(rk_write_durable(path, "", 0, 0600, 0), 0);
	snprintf(path, sizeof path, "%s/a", dir);
	assert_int_equal(rk_write_durable(path, "", 0, 0600, 0), 0);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	size_t count = 0;
	char **names = rk_dir_names_sorted(dfd, &count);
	close(dfd);
	assert_int_equal(count, 3); /* no temporary file is left */
	assert_string_equal(names[0], "a");
	assert_string_equal(names[1], "b");
	assert_string_equal(names[2], "file");
	for (size_t i = 0; i < count; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		unlink(path);
	}
	rk_dir_names_free(names, count);
	rmdir(dir);
	assert_null(rk_dir_names_sorted(-1, &count));
	assert_int_equal(errno, EBADF);
}

static void test_random_hex(void **state)
{
	(void)state;
	char hex[33], pw[9];
	rk_random_hex(&host, hex, 32);
	assert_string_equal(hex, "abababababababababababababababab");
	rk_random_hex(NULL, hex, 7); /* the kernel's source */
	assert_int_equal(strlen(hex), 7);
	assert_int_equal(strspn(hex, "0123456789abcdef"), 7);
	rk_random_password(&host, pw, 8);
	assert_int_equal(strlen(pw), 8);
}

/* ---- the machine ops' front ------------------------------------------------------------ */

typedef struct demo_machine {
	rk_machine kit; /* first, as the front needs */
	int calls;      /* backend calls */
	bool healthy;
} demo_machine;

static relay_status demo_acquire(relay_plugin_state *state, json_object *spec, relay_call *call,
                                 json_object **doc_out, relay_error *err)
{
	(void)call;
	(void)err;
	((demo_machine *)state)->calls++;
	*doc_out = json_object_new_object();
	json_object_object_add(*doc_out, "vm", json_object_get(json_object_object_get(spec, "name")));
	return RELAY_OK;
}

static relay_status demo_inspect(relay_plugin_state *state, json_object *doc, relay_call *call,
                                 json_object **doc_out, relay_error *err)
{
	(void)call;
	((demo_machine *)state)->calls++;
	if (doc == NULL)
		return rk_err(&host, err, RELAY_E_INVALID_ARGUMENT, 0, 0, "inspect needs a lease document");
	*doc_out = json_object_get(doc);
	return RELAY_OK;
}

static relay_status demo_verify(relay_plugin_state *state, json_object *doc, relay_call *call,
                                relay_error *err)
{
	(void)doc;
	(void)call;
	(void)err;
	((demo_machine *)state)->calls++;
	return RELAY_OK;
}

static relay_status demo_health(relay_plugin_state *state, relay_call *call, json_object *answer,
                                relay_error *err)
{
	(void)call;
	demo_machine *m = state;
	m->calls++;
	if (!m->healthy)
		return rk_err(&host, err, RELAY_E_UNAVAILABLE, ENOENT, RK_ERR_NAME_ERRNO,
		              "the store is gone");
	if (answer)
		json_object_object_add(answer, "extra", json_object_new_int(1));
	return RELAY_OK;
}

static const rk_machine_backend demo_backend = {
    .name = "demo",
    .destroyed_check = "demo-check",
    .acquire = demo_acquire,
    .inspect = demo_inspect,
    .verify_destroyed = demo_verify,
    .health = demo_health,
};

static void test_machine_front(void **state)
{
	(void)state;
	demo_machine m = {.kit = {.host = &host, .backend = &demo_backend, .store = "/s"}, .healthy = true};
	relay_error err;
	char *out = (char *)"untouched";
	/* Unknown flags: refused by name before the backend, out cleared. */
	assert_int_equal(rk_machine_inspect(&m, "{}", NULL, 0x4, &out, &err), RELAY_E_UNSUPPORTED_FLAGS);
	assert_string_equal(err.message, "unknown inspect flags 0x4");
	assert_null(out);
	assert_int_equal(m.calls, 0);
	/* A spec that is not an object never reaches the backend. */
	assert_int_equal(rk_machine_acquire(&m, "[1]", NULL, 0, &out, &err), RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "the acquire spec is not a JSON object");
	assert_int_equal(m.calls, 0);
	assert_int_equal(rk_machine_acquire(&m, "{\"name\": \"g1\"}", NULL, 0, &out, &err), RELAY_OK);
	assert_string_equal(out, "{\"vm\":\"g1\"}");
	free(out);
	/* A document that is not an object reaches the backend as NULL. */
	assert_int_equal(rk_machine_inspect(&m, "\"text\"", NULL, 0, &out, &err), RELAY_E_INVALID_ARGUMENT);
	assert_null(out);
	/* Not wanted: the backend's answer is freed (ASan sees a leak otherwise). */
	assert_int_equal(rk_machine_inspect(&m, "{\"vm\": \"g1\"}", NULL, 0, NULL, &err), RELAY_OK);
	char *check = NULL;
	assert_int_equal(rk_machine_verify_destroyed(&m, "{}", NULL, 0, &check, &err), RELAY_OK);
	assert_string_equal(check, "demo-check");
	free(check);
	/* Health: the front's half, then the backend's; NULL out runs only the check. */
	assert_int_equal(rk_machine_health(&m, NULL, 0, &out, &err), RELAY_OK);
	assert_string_equal(out, "{\"ok\":true,\"service\":\"demo\",\"extra\":1}");
	free(out);
	int before = m.calls;
	assert_int_equal(rk_machine_health(&m, NULL, 0, NULL, &err), RELAY_OK);
	assert_int_equal(m.calls, before + 1);
	m.healthy = false;
	assert_int_equal(rk_machine_health(&m, NULL, 0, &out, &err), RELAY_E_UNAVAILABLE);
	assert_string_equal(err.message, "the store is gone (No such file or directory)");
	assert_null(out);
	/* Binding is the front's own. */
	assert_int_equal(rk_machine_binding(&m, 0, &out, &err), RELAY_OK);
	assert_string_equal(
	    out, "{\"machine\":\"demo\",\"endpoint\":null,\"store\":\"/s\",\"environmentFingerprint\":null}");
	free(out);
	assert_int_equal(rk_machine_find_by_purpose(&m, NULL, NULL, 0, &out, &err), RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "find_by_purpose needs a purpose");
	/* The error names the system error once, and only when asked. */
	rk_err(&host, &err, RELAY_E_IO, ENOENT, RK_ERR_NAME_ERRNO, "gone: %s", strerror(ENOENT));
	assert_string_equal(err.message, "gone: No such file or directory");
	rk_err(&host, &err, RELAY_E_IO, ENOENT, 0, "gone");
	assert_string_equal(err.message, "gone");
	assert_int_equal(rk_err(&host, NULL, RELAY_E_IO, 0, 0, "no record"), RELAY_E_IO);
	json_object *o = rk_json_object("{\"a\": 1}");
	assert_non_null(o);
	json_object_put(o);
	assert_null(rk_json_object("[]"));
	assert_null(rk_json_object(NULL));
}

/* The dpkg status walk of both machine backends' catalogs: installed
 * stanzas only, Multi-Arch: same named with the arch, continuation lines
 * and CRLF endings passed over, a last stanza without a blank line kept. */
static void add_seen(void *ctx, const char *id, const char *name, const char *version)
{
	char *seen = ctx;
	size_t used = strlen(seen);
	snprintf(seen + used, 1024 - used, "%s|%s|%s;", id, name, version ? version : "-");
}

static void test_dpkg_installed_each(void **unused)
{
	(void)unused;
	const char *status = "Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2\n"
	                     "Description: the shell\n  Package: not-a-field\n\n"
	                     "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
	                     "Package: never\nStatus: purge ok not-installed\n\n"
	                     "Package: half\nStatus: install ok half-installed\n\n"
	                     "Package: libc6\r\nStatus: install ok installed\r\nArchitecture: amd64\r\n"
	                     "Multi-Arch: same  \r\nVersion: 2.36-9\r\n\r\n"
	                     "Package: noversion\nStatus: install ok installed";
	char seen[1024] = "";
	rk_dpkg_installed_each(status, add_seen, seen);
	assert_string_equal(seen, "dpkg:bash|bash|5.2.15-2;dpkg:libc6:amd64|libc6|2.36-9;"
	                          "dpkg:noversion|noversion|-;");
	seen[0] = '\0';
	rk_dpkg_installed_each("", add_seen, seen);
	rk_dpkg_installed_each(NULL, add_seen, seen);
	rk_dpkg_installed_each("no status file\n\n\n", add_seen, seen);
	assert_string_equal(seen, "");
	assert_int_equal(RK_EGRESS_PROXY_ENV_COUNT, 8);
	assert_string_equal(rk_egress_proxy_env[0], "HTTP_PROXY=http://127.0.0.1:3128");
}

/* ---- the machine configuration, a transfer's checks and facts ------------------------ */

static relay_status read_config(rk_machine *kit, const char *text, const rk_machine_config_rules *rules,
                                relay_error *err)
{
	json_object *cfg = text ? json_tokener_parse(text) : NULL;
	relay_status s = rk_machine_config_read(kit, cfg, rules, err);
	json_object_put(cfg);
	return s;
}

static void test_machine_config(void **unused)
{
	(void)unused;
	char dir[] = "/tmp/test-plugin-kit-XXXXXX";
	assert_non_null(mkdtemp(dir));
	const rk_machine_config_rules rules = {.state_dir_max_bytes = 64, .state_dir_refused = ",:\n"};
	rk_machine kit = {.host = &host, .backend = &demo_backend};
	relay_error err = {0};
	assert_int_equal(read_config(&kit, NULL, &rules, &err), RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "the demo configuration is not a JSON object");
	assert_int_equal(read_config(&kit, "[]", &rules, &err), RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(read_config(&kit, "{\"stateDir\": \"relative\"}", &rules, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message,
	                    "demo needs an absolute \"stateDir\" of at most 64 bytes without ',' or ':'");
	assert_int_equal(read_config(&kit, "{\"stateDir\": \"/a:b\"}", &rules, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	const rk_machine_config_rules long_ok = {.state_dir_max_bytes = 1000};
	assert_int_equal(read_config(&kit, "{\"stateDir\": \"relative\"}", &long_ok, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "demo needs an absolute \"stateDir\" of at most 1000 bytes");
	assert_null(kit.state_dir);

	char text[256];
	snprintf(text, sizeof text, "{\"stateDir\": \"%s/state\", \"guestNetwork\": \"internet\"}", dir);
	assert_int_equal(read_config(&kit, text, &rules, &err), RELAY_OK);
	char want[128];
	snprintf(want, sizeof want, "%s/state/leases", dir);
	assert_string_equal(kit.leases_dir, want); /* made, with the state folder above it */
	struct stat sb;
	assert_int_equal(stat(want, &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(sb.st_mode & 0777, 0700);
	assert_ptr_equal(kit.store, kit.state_dir);
	assert_null(kit.libexec_dir);
	assert_string_equal(kit.default_network, "internet");
	rk_machine_config_free(&kit);
	assert_null(kit.state_dir);
	assert_null(kit.store);

	snprintf(text, sizeof text,
	         "{\"stateDir\": \"%s/state\", \"libexecDir\": \"/lx\", \"guestNetwork\": \"open\"}", dir);
	assert_int_equal(read_config(&kit, text, &rules, &err), RELAY_OK);
	assert_string_equal(kit.libexec_dir, "/lx");
	assert_string_equal(kit.default_network, "nat"); /* anything else is nat */
	rk_machine_config_free(&kit);

	snprintf(text, sizeof text, "%s/file", dir);
	assert_int_equal(rk_write_durable(text, "", 0, 0600, 0), 0);
	snprintf(text, sizeof text, "{\"stateDir\": \"%s/file\"}", dir);
	assert_int_equal(read_config(&kit, text, &rules, &err), RELAY_E_IO);
	assert_non_null(strstr(err.message, "cannot create the lease store"));
	rk_machine_config_free(&kit);

	snprintf(text, sizeof text, "%s/file", dir);
	unlink(text);
	snprintf(text, sizeof text, "%s/state/leases", dir);
	rmdir(text);
	snprintf(text, sizeof text, "%s/state", dir);
	rmdir(text);
	rmdir(dir);
}

static void test_xfer_begin_and_facts(void **unused)
{
	(void)unused;
	relay_error err = {0};
	char *facts = (char *)"stale";
	assert_int_equal(rk_xfer_begin(&host, "pull", 0x4u, 0x1u, "/h", "/g", &facts, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	assert_null(facts);
	assert_string_equal(err.message, "unknown pull flags 0x4");
	assert_int_equal(rk_xfer_begin(&host, "push", 0x1u, 0x1u, "", "/g", NULL, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_string_equal(err.message, "push needs a host path and a guest path");
	assert_int_equal(rk_xfer_begin(&host, "push", 0, 0x1u, "/h", NULL, NULL, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(rk_xfer_begin(&host, "push", 0x1u, 0x1u, "/h", "/g", &facts, &err), RELAY_OK);

	json_object *arr = json_object_new_array();
	const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	assert_int_equal(rk_xfer_fact_add(arr, "", 5, sha), 0);
	assert_int_equal(rk_xfer_fact_add(arr, "a/b", 1ull << 33, sha), 0);
	assert_string_equal(
	    json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PLAIN),
	    "[{\"path\":\"\",\"bytes\":5,\"sha256\":\"0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef\"},{\"path\":\"a\\/b\",\"bytes\":8589934592,"
	    "\"sha256\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}]");
	json_object_put(arr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_options_one_wording),
	    cmocka_unit_test(test_console_ledger),
	    cmocka_unit_test(test_reaper_loop),
	    cmocka_unit_test(test_durable_write_and_sorted_names),
	    cmocka_unit_test(test_random_hex),
	    cmocka_unit_test(test_machine_front),
	    cmocka_unit_test(test_dpkg_installed_each),
	    cmocka_unit_test(test_machine_config),
	    cmocka_unit_test(test_xfer_begin_and_facts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
