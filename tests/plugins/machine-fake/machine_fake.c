/*
 * machine-fake — a test:///-style machine backend (libvirt's fake driver is
 * the model), loaded through the real loader:
 *
 *     MCP_RELAY_BACKEND=<build>/tests/plugins/machine-fake.so
 *
 * It provides the machine kind and the transport kind. A "guest" is a
 * folder on this host (<stateDir>/machines/<vm>/, its home); commands run
 * on the host with host->process_run, push and pull copy locally, and guest
 * paths are host paths (a guest root /var/tmp/<stamp>-mcp-relay-<purpose>
 * is that folder on this host). Leases are files under <stateDir>/leases/,
 * so they survive a restart of the relay.
 *
 * SCRIPTING. The control file (RELAY_FAKE_MACHINE_CONTROL, else the
 * plugin option "control", else <stateDir>/control.json) is read at every
 * operation. It is a JSON object:
 *
 *   {"images": {"<key>": {"kind": "linux", "base_available": true}, ...},
 *    "capacity": {...} | null,
 *    "binding": {"machine", "endpoint", "store", "environmentFingerprint"},
 *    "reclaimExpired": false, "graceMs": 0,
 *    "leaseExtra": {"ssh": {...}, "display": ":5"}  (copied into new leases' documents),
 *    "<op>": [ {"result": "...", "reason": "...", "times": 1,
 *               "delayMs": 0, "effect": bool, "effectBeforeDelay": bool}, ... ]}
 *
 * <op> is acquire, renew, inspect, release, verify, findByPurpose, health or
 * images. Each operation takes the first entry of its list; an entry is used
 * `times` times (default 1; -1 for ever) and then removed, so
 * [{"result": "capacity", "times": 2}] refuses twice for capacity and then
 * succeeds. No entry means success. Results:
 *   acquire  ok | capacity | refuse | image-unavailable | unavailable |
 *            indeterminate (a lease exists afterwards only with "effect")
 *   renew, inspect, findByPurpose, health, images   ok | fail | not-found
 *   release  ok | fail (the machine is destroyed only with "effect")
 *   verify   ok | unverified
 * "delayMs" makes the operation slow (it honours cancellation and then
 * answers RELAY_E_CANCELLED); with "effectBeforeDelay" the effect (lease
 * created, machine destroyed) happens before the delay, so a relay killed
 * during it leaves that effect behind.
 *
 * THE OPERATION LOG (RELAY_FAKE_MACHINE_LOG, else the option "log", else
 * <stateDir>/ops.jsonl) gets one JSON line per call: {"op", "lease" (the vm
 * or null), "purpose", "time" (relay time, ms), "pid", "result", and for
 * acquire and renew "ttl_ms", "deadline_ms", "expires_at_ms"}. Tests read it
 * to assert what the backend saw.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"
#include "relay_support/json_get.h"
#include "relay_support/tree.h"

#define FAKE_VERSION      "0.1.0"
#define GUEST_ROOT_PARENT "/var/tmp"

/* ---- small helpers ------------------------------------------------------------------ */

static char *join2(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", a, b);
	return p;
}

char *fake_owned_json(fake_state *st, json_object *obj)
{
	return st->host->strdup(
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

static int64_t get_int(json_object *obj, const char *key, int64_t fallback)
{
	int64_t value;
	return rsj_get_int(obj, key, &value) ? value : fallback;
}

static int get_bool(json_object *obj, const char *key, int fallback)
{
	bool value;
	return rsj_get_bool(obj, key, &value) ? value : fallback;
}

static json_object *read_json_file(const char *path)
{
	json_object *obj = json_object_from_file(path);
	return obj;
}

/* Writes JSON to path atomically (temporary file + rename). */
static int write_json_file(const char *path, json_object *obj)
{
	size_t n = strlen(path) + 32;
	char *tmp = malloc(n);
	if (tmp == NULL)
		return -1;
	snprintf(tmp, n, "%s.tmp-%ld", path, (long)getpid());
	const char *text =
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int rc = -1;
	if (fd >= 0) {
		size_t len = strlen(text);
		ssize_t w = write(fd, text, len);
		if (w == (ssize_t)len && fsync(fd) == 0)
			rc = 0;
		close(fd);
	}
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -1;
	if (rc != 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

static void remove_tree(const char *path)
{
	(void)rs_remove_tree(path, NULL); /* best effort: a fake lease's folder */
}

static void random_hex(fake_state *st, char *out, size_t digits)
{
	unsigned char bytes[32];
	relay_error err;
	if (st->host->random_bytes(bytes, (digits + 1) / 2, &err) != RELAY_OK)
		memset(bytes, 0x5a, sizeof bytes);
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < digits; i++)
		out[i] = hex[(bytes[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
	out[digits] = '\0';
}

/* ---- the log ------------------------------------------------------------------------ */

void fake_log(fake_state *st, const char *op, const char *vm, json_object *extra)
{
	json_object *line = json_object_new_object();
	json_object_object_add(line, "op", json_object_new_string(op));
	json_object_object_add(line, "lease", vm ? json_object_new_string(vm) : NULL);
	json_object_object_add(line, "time", json_object_new_int64(st->host->now_ms()));
	json_object_object_add(line, "pid", json_object_new_int64((int64_t)getpid()));
	if (extra) {
		json_object_object_foreach(extra, key, value)
		    json_object_object_add(line, key, json_object_get(value));
		json_object_put(extra);
	}
	const char *text =
	    json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	size_t len = strlen(text);
	char *buf = malloc(len + 2);
	if (buf) {
		memcpy(buf, text, len);
		buf[len] = '\n';
		int fd = open(st->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			ssize_t ignored = write(fd, buf, len + 1); /* one write: lines never interleave */
			(void)ignored;
			close(fd);
		}
		free(buf);
	}
	json_object_put(line);
}

int fake_delay(fake_state *st, relay_call *call, int64_t delay_ms)
{
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if (st->host->call_cancelled(call))
			return 1;
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t elapsed =
		    (int64_t)(now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (elapsed >= delay_ms)
			return 0;
		struct timespec step = {0, 20 * 1000000L};
		nanosleep(&step, NULL);
	}
}

/* ---- the control file ------------------------------------------------------------------- */

/* Takes the cross-process lock of the control file and lease files. */
static int lock_files(fake_state *st)
{
	pthread_mutex_lock(&st->lock);
	size_t n = strlen(st->state_dir) + 16;
	char *path = malloc(n);
	int fd = -1;
	if (path) {
		snprintf(path, n, "%s/fake.lock", st->state_dir);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		free(path);
	}
	if (fd >= 0)
		flock(fd, LOCK_EX);
	return fd;
}

static void unlock_files(fake_state *st, int fd)
{
	if (fd >= 0)
		close(fd);
	pthread_mutex_unlock(&st->lock);
}

/* The whole control document (a new reference, never NULL). */
static json_object *read_control(fake_state *st)
{
	json_object *control = read_json_file(st->control_path);
	if (!json_object_is_type(control, json_type_object)) {
		json_object_put(control);
		control = json_object_new_object();
	}
	return control;
}

/* Takes the next scripted behaviour of `op` (a new reference), or NULL for
 * plain success. Consumes it in the control file. */
static json_object *take_behaviour(fake_state *st, const char *op)
{
	int fd = lock_files(st);
	json_object *control = read_control(st);
	json_object *list = NULL, *entry = NULL;
	if (json_object_object_get_ex(control, op, &list) && json_object_is_type(list, json_type_array) &&
	    json_object_array_length(list) > 0) {
		json_object *first = json_object_array_get_idx(list, 0);
		entry = json_object_get(first);
		int64_t times = get_int(first, "times", 1);
		if (times != -1) {
			if (times <= 1)
				json_object_array_del_idx(list, 0, 1);
			else
				json_object_object_add(first, "times", json_object_new_int64(times - 1));
			write_json_file(st->control_path, control);
		}
	}
	json_object_put(control);
	unlock_files(st, fd);
	return entry;
}

static const char *result_of(json_object *behaviour)
{
	const char *r = rsj_get_str(behaviour, "result");
	return r ? r : "ok";
}

static const char *reason_of(json_object *behaviour, const char *fallback)
{
	const char *r = rsj_get_str(behaviour, "reason");
	return r ? r : fallback;
}

/* ---- leases ------------------------------------------------------------------------------ */

static char *lease_path(fake_state *st, const char *vm)
{
	size_t n = strlen(st->state_dir) + strlen(vm) + 32;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/leases/%s.json", st->state_dir, vm);
	return p;
}

static char *home_path(fake_state *st, const char *vm)
{
	size_t n = strlen(st->state_dir) + strlen(vm) + 32;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/machines/%s", st->state_dir, vm);
	return p;
}

/* The stored record of a lease, or NULL when the backend does not know it. */
static json_object *load_lease(fake_state *st, const char *vm)
{
	if (vm == NULL || strchr(vm, '/') || vm[0] == '.')
		return NULL;
	char *path = lease_path(st, vm);
	json_object *record = path && access(path, F_OK) == 0 ? read_json_file(path) : NULL;
	free(path);
	return record;
}

static int save_lease(fake_state *st, json_object *record)
{
	char *path = lease_path(st, rsj_get_str(record, "vm"));
	int rc = path ? write_json_file(path, record) : -1;
	free(path);
	return rc;
}

/* The lease document (relay/machine.h) of a stored record. */
static json_object *lease_document(json_object *record)
{
	json_object *doc = json_object_new_object();
	static const char *const copied[] = {"vm", "purpose", "image", "lease_id", "state"};
	for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
		const char *v = rsj_get_str(record, copied[i]);
		json_object_object_add(doc, copied[i], v ? json_object_new_string(v) : NULL);
	}
	json_object_object_add(doc, "expiresAtMs", json_object_new_int64(get_int(record, "expiresAtMs", 0)));
	json_object *console = NULL;
	json_object_object_get_ex(record, "console", &console);
	json_object_object_add(doc, "console", console ? json_object_get(console) : NULL);
	/* "display" and "ssh" come from the control document's "leaseExtra"
	 * recorded at acquire (the runs tests reach a fake guest through
	 * transfer-ssh this way); null otherwise. */
	json_object *lease_extra = NULL, *value = NULL;
	json_object_object_get_ex(record, "leaseExtra", &lease_extra);
	json_object_object_add(doc, "display",
	                       lease_extra && json_object_object_get_ex(lease_extra, "display", &value)
	                           ? json_object_get(value)
	                           : NULL);
	value = NULL;
	json_object_object_add(doc, "ssh",
	                       lease_extra && json_object_object_get_ex(lease_extra, "ssh", &value)
	                           ? json_object_get(value)
	                           : NULL);
	json_object_object_add(doc, "record", json_object_get(record));
	json_object *fake = json_object_new_object();
	const char *home = rsj_get_str(record, "home");
	json_object_object_add(fake, "home", home ? json_object_new_string(home) : NULL);
	json_object_object_add(doc, "fake", fake);
	return doc;
}

/* The vm named by a lease document (borrowed from `doc`). */
static const char *vm_of(json_object *doc)
{
	return rsj_get_str(doc, "vm");
}

/* Removes every trace of a machine: its lease, its home, its guest roots. */
static void destroy_machine(fake_state *st, const char *vm, const char *purpose)
{
	char *path = lease_path(st, vm);
	if (path)
		unlink(path);
	free(path);
	char *home = home_path(st, vm);
	if (home)
		remove_tree(home);
	free(home);
	if (purpose == NULL)
		return;
	DIR *dir = opendir(GUEST_ROOT_PARENT);
	if (dir == NULL)
		return;
	char suffix[256];
	snprintf(suffix, sizeof suffix, "-mcp-relay-%s", purpose);
	size_t sl = strlen(suffix);
	struct dirent *e;
	while ((e = readdir(dir)) != NULL) {
		size_t n = strlen(e->d_name);
		if (n > sl && strcmp(e->d_name + n - sl, suffix) == 0) {
			char *root = join2(GUEST_ROOT_PARENT, e->d_name);
			if (root)
				remove_tree(root);
			free(root);
		}
	}
	closedir(dir);
}

static int machine_gone(fake_state *st, const char *vm, const char *purpose)
{
	json_object *record = load_lease(st, vm);
	int gone = record == NULL;
	json_object_put(record);
	char *home = home_path(st, vm);
	struct stat sb;
	if (home && lstat(home, &sb) == 0)
		gone = 0;
	free(home);
	if (gone && purpose) {
		DIR *dir = opendir(GUEST_ROOT_PARENT);
		char suffix[256];
		snprintf(suffix, sizeof suffix, "-mcp-relay-%s", purpose);
		size_t sl = strlen(suffix);
		struct dirent *e;
		while (dir && (e = readdir(dir)) != NULL) {
			size_t n = strlen(e->d_name);
			if (n > sl && strcmp(e->d_name + n - sl, suffix) == 0)
				gone = 0;
		}
		if (dir)
			closedir(dir);
	}
	return gone;
}

/* With "reclaimExpired", leases past their expiry plus "graceMs" are
 * reclaimed, as a real backend's reaper would. Called under lock_files. */
static void reclaim_expired(fake_state *st)
{
	json_object *control = read_control(st);
	int reclaim = get_bool(control, "reclaimExpired", 0);
	int64_t grace = get_int(control, "graceMs", 0);
	json_object_put(control);
	if (!reclaim)
		return;
	char *dir_path = join2(st->state_dir, "leases");
	DIR *dir = dir_path ? opendir(dir_path) : NULL;
	struct dirent *e;
	int64_t now = st->host->now_ms();
	while (dir && (e = readdir(dir)) != NULL) {
		size_t n = strlen(e->d_name);
		if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
			continue;
		char vm[256];
		snprintf(vm, sizeof vm, "%.*s", (int)(n - 5), e->d_name);
		json_object *record = load_lease(st, vm);
		int64_t expires = get_int(record, "expiresAtMs", 0);
		if (record && expires > 0 && now > expires + grace) {
			char purpose[256];
			snprintf(purpose, sizeof purpose, "%s",
			         rsj_get_str(record, "purpose") ? rsj_get_str(record, "purpose") : "");
			destroy_machine(st, vm, purpose[0] ? purpose : NULL);
			json_object *extra = json_object_new_object();
			json_object_object_add(extra, "purpose", json_object_new_string(purpose));
			json_object_object_add(extra, "expires_at_ms", json_object_new_int64(expires));
			json_object_object_add(extra, "result", json_object_new_string("reclaimed"));
			fake_log(st, "expire", vm, extra);
		}
		json_object_put(record);
	}
	if (dir)
		closedir(dir);
	free(dir_path);
}

/* ---- the machine operations ------------------------------------------------------------- */

static relay_status check_flags(fake_state *st, unsigned flags, relay_error *err)
{
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                           "machine-fake: unknown flags 0x%x", flags);
	return RELAY_OK;
}

static json_object *log_extra(const char *purpose, const char *result)
{
	json_object *extra = json_object_new_object();
	json_object_object_add(extra, "purpose", purpose ? json_object_new_string(purpose) : NULL);
	json_object_object_add(extra, "result", json_object_new_string(result));
	return extra;
}

/* Creates and stores a lease for a spec. Returns the stored record. */
static json_object *create_lease(fake_state *st, json_object *spec)
{
	const char *purpose = rsj_get_str(spec, "purpose");
	char suffix[7], lease_id[33];
	random_hex(st, suffix, 6);
	random_hex(st, lease_id, 32);
	char vm[200]; /* a longer purpose is cut to fit */
	snprintf(vm, sizeof vm, "fake-%.180s-%s", purpose ? purpose : "", suffix);
	int64_t now = st->host->now_ms();
	int64_t ttl = get_int(spec, "ttlMs", 15 * 60 * 1000);
	char *home = home_path(st, vm);
	json_object *record = json_object_new_object();
	json_object_object_add(record, "vm", json_object_new_string(vm));
	json_object_object_add(record, "purpose", json_object_new_string(purpose));
	json_object_object_add(
	    record, "image",
	    json_object_new_string(rsj_get_str(spec, "image") ? rsj_get_str(spec, "image") : ""));
	json_object_object_add(record, "lease_id", json_object_new_string(lease_id));
	json_object_object_add(record, "state", json_object_new_string("running"));
	json_object_object_add(record, "createdAtMs", json_object_new_int64(now));
	json_object_object_add(record, "expiresAtMs", json_object_new_int64(now + ttl));
	json_object_object_add(record, "deadlineMs", json_object_new_int64(get_int(spec, "deadlineMs", 0)));
	json_object_object_add(
	    record, "network",
	    json_object_new_string(rsj_get_str(spec, "network") ? rsj_get_str(spec, "network") : "nat"));
	json_object_object_add(
	    record, "env",
	    json_object_new_string(rsj_get_str(spec, "env") ? rsj_get_str(spec, "env") : "none"));
	json_object_object_add(record, "home", home ? json_object_new_string(home) : NULL);
	json_object *control = read_control(st), *lease_extra = NULL;
	if (json_object_object_get_ex(control, "leaseExtra", &lease_extra) &&
	    json_object_is_type(lease_extra, json_type_object))
		json_object_object_add(record, "leaseExtra", json_object_get(lease_extra));
	json_object_put(control);
	if (get_bool(spec, "vnc", 0)) {
		json_object *console = json_object_new_object();
		char console_id[17];
		random_hex(st, console_id, 16);
		json_object_object_add(console, "console_id", json_object_new_string(console_id));
		json_object_object_add(console, "status", json_object_new_string("ready"));
		json_object_object_add(record, "console", console);
	}
	if (home) {
		char *machines = join2(st->state_dir, "machines");
		if (machines)
			mkdir(machines, 0700);
		free(machines);
		mkdir(home, 0700);
	}
	free(home);
	save_lease(st, record);
	return record;
}

static relay_status fake_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call,
                                 unsigned flags, char **lease_json_out, relay_error *err)
{
	fake_state *st = state;
	*lease_json_out = NULL;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	json_object *spec = json_tokener_parse(spec_json);
	const char *purpose = rsj_get_str(spec, "purpose");
	if (purpose == NULL) {
		json_object_put(spec);
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "machine-fake: the spec has no purpose");
	}
	json_object *b = take_behaviour(st, "acquire");
	const char *result = result_of(b);
	int64_t delay = get_int(b, "delayMs", 0);
	int effect = get_bool(b, "effect", strcmp(result, "ok") == 0);
	int before = get_bool(b, "effectBeforeDelay", 0);
	relay_status rc = RELAY_OK;
	json_object *record = NULL;
	json_object *extra = log_extra(purpose, result);
	int64_t ttl = get_int(spec, "ttlMs", 0);
	json_object_object_add(extra, "ttl_ms", json_object_new_int64(ttl));
	json_object_object_add(extra, "deadline_ms", json_object_new_int64(get_int(spec, "deadlineMs", 0)));
	json_object_object_add(extra, "delay_ms", json_object_new_int64(delay));
	fake_log(st, "acquire", NULL, extra);

	int fd = -1;
	if (effect && before) {
		fd = lock_files(st);
		record = create_lease(st, spec);
		unlock_files(st, fd);
	}
	if (delay > 0 && fake_delay(st, call, delay)) {
		fake_log(st, "acquire-cancelled", record ? rsj_get_str(record, "vm") : NULL,
		         log_extra(purpose, "cancelled"));
		rc = st->host->error_set(err, RELAY_E_CANCELLED, 0,
		                         "machine-fake: the acquisition was cancelled");
		goto done;
	}
	if (strcmp(result, "capacity") == 0) {
		rc = st->host->error_set(err, RELAY_E_CAPACITY, 0, "%s",
		                         reason_of(b, "limit reached (fake capacity)"));
	} else if (strcmp(result, "refuse") == 0) {
		rc = st->host->error_set(err, RELAY_E_REFUSED, 0, "%s",
		                         reason_of(b, "machine-fake refused the lease"));
	} else if (strcmp(result, "image-unavailable") == 0) {
		rc = st->host->error_set(err, RELAY_E_IMAGE_UNAVAILABLE, 0, "%s",
		                         reason_of(b, "machine-fake: the image cannot be started now"));
	} else if (strcmp(result, "unavailable") == 0) {
		rc = st->host->error_set(err, RELAY_E_UNAVAILABLE, 0, "%s",
		                         reason_of(b, "machine-fake is unavailable"));
	} else if (strcmp(result, "indeterminate") == 0) {
		if (effect && record == NULL) {
			fd = lock_files(st);
			record = create_lease(st, spec);
			unlock_files(st, fd);
		}
		rc = st->host->error_set(
		    err, RELAY_E_INDETERMINATE, 0, "%s",
		    reason_of(b, "machine-fake: the answer to the lease request was lost"));
	} else {
		if (record == NULL) {
			fd = lock_files(st);
			reclaim_expired(st);
			record = create_lease(st, spec);
			unlock_files(st, fd);
		}
		json_object *doc = lease_document(record);
		*lease_json_out = fake_owned_json(st, doc);
		json_object_put(doc);
		fake_log(st, "acquired", rsj_get_str(record, "vm"), log_extra(purpose, "ok"));
	}
done:
	json_object_put(record);
	json_object_put(b);
	json_object_put(spec);
	return rc;
}

/* Operations on an existing lease: renew (ttl_ms > 0) and inspect. */
static relay_status lease_op(fake_state *st, const char *op, const char *lease_json, int64_t ttl_ms,
                             relay_call *call, char **lease_json_out, relay_error *err)
{
	if (lease_json_out)
		*lease_json_out = NULL;
	json_object *given = json_tokener_parse(lease_json);
	const char *vm = vm_of(given);
	json_object *b = take_behaviour(st, op);
	const char *result = result_of(b);
	int64_t delay = get_int(b, "delayMs", 0);
	relay_status rc = RELAY_OK;
	int fd = lock_files(st);
	reclaim_expired(st);
	json_object *record = load_lease(st, vm);
	int64_t now = st->host->now_ms();
	json_object *extra = log_extra(rsj_get_str(record, "purpose") ? rsj_get_str(record, "purpose")
	                                                              : rsj_get_str(given, "purpose"),
	                               record ? result : (strcmp(result, "ok") == 0 ? "not-found" : result));
	if (ttl_ms > 0) {
		json_object_object_add(extra, "ttl_ms", json_object_new_int64(ttl_ms));
		json_object_object_add(extra, "deadline_ms",
		                       json_object_new_int64(get_int(record, "deadlineMs", 0)));
		json_object_object_add(extra, "expires_at_ms", json_object_new_int64(now + ttl_ms));
	}
	fake_log(st, op, vm, extra);
	if (strcmp(result, "fail") == 0) {
		rc = st->host->error_set(err, RELAY_E_UNAVAILABLE, 0, "%s",
		                         reason_of(b, "machine-fake: the backend did not answer"));
	} else if (strcmp(result, "not-found") == 0 || record == NULL) {
		rc = st->host->error_set(err, RELAY_E_NOT_FOUND, 0, "machine-fake: unknown VM: %s",
		                         vm ? vm : "(none)");
	} else {
		if (ttl_ms > 0) {
			json_object_object_add(record, "expiresAtMs", json_object_new_int64(now + ttl_ms));
			json_object_object_add(record, "lastRenewedAtMs", json_object_new_int64(now));
			save_lease(st, record);
		}
		if (lease_json_out) {
			json_object *doc = lease_document(record);
			*lease_json_out = fake_owned_json(st, doc);
			json_object_put(doc);
		}
	}
	unlock_files(st, fd);
	if (rc == RELAY_OK && delay > 0 && fake_delay(st, call, delay)) {
		if (lease_json_out) {
			st->host->free(*lease_json_out);
			*lease_json_out = NULL;
		}
		rc = st->host->error_set(err, RELAY_E_CANCELLED, 0, "machine-fake: %s was cancelled", op);
	}
	json_object_put(record);
	json_object_put(b);
	json_object_put(given);
	return rc;
}

static relay_status fake_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
                               relay_call *call, unsigned flags, char **lease_json_out, relay_error *err)
{
	fake_state *st = state;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	if (ttl_ms == 0)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "machine-fake: renew needs a ttl");
	return lease_op(st, "renew", lease_json, (int64_t)ttl_ms, call, lease_json_out, err);
}

static relay_status fake_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                 unsigned flags, char **lease_json_out, relay_error *err)
{
	fake_state *st = state;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	return lease_op(st, "inspect", lease_json, 0, call, lease_json_out, err);
}

static relay_status fake_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                                 relay_call *call, unsigned flags, relay_error *err)
{
	fake_state *st = state;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	json_object *given = json_tokener_parse(lease_json);
	const char *vm = vm_of(given);
	const char *purpose = rsj_get_str(given, "purpose");
	json_object *b = take_behaviour(st, "release");
	const char *result = result_of(b);
	int64_t delay = get_int(b, "delayMs", 0);
	int effect = get_bool(b, "effect", strcmp(result, "ok") == 0);
	int before = get_bool(b, "effectBeforeDelay", 0);
	json_object *extra = log_extra(purpose, result);
	json_object_object_add(extra, "reason", json_object_new_string(reason ? reason : ""));
	json_object_object_add(extra, "delay_ms", json_object_new_int64(delay));
	fake_log(st, "release", vm, extra);
	relay_status rc = RELAY_OK;
	int fd;
	if (vm == NULL) {
		rc = st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "machine-fake: the lease names no vm");
		goto done;
	}
	if (effect && before) {
		fd = lock_files(st);
		destroy_machine(st, vm, purpose);
		unlock_files(st, fd);
	} else if (!before && delay > 0) {
		/* Mark it releasing while the slow release runs. */
		fd = lock_files(st);
		json_object *record = load_lease(st, vm);
		if (record) {
			json_object_object_add(record, "state", json_object_new_string("releasing"));
			save_lease(st, record);
			json_object_put(record);
		}
		unlock_files(st, fd);
	}
	if (delay > 0 && fake_delay(st, call, delay)) {
		fake_log(st, "release-cancelled", vm, log_extra(purpose, "cancelled"));
		rc =
		    st->host->error_set(err, RELAY_E_CANCELLED, 0, "machine-fake: the release was cancelled");
		goto done;
	}
	if (strcmp(result, "fail") == 0) {
		if (effect && !before) {
			fd = lock_files(st);
			destroy_machine(st, vm, purpose);
			unlock_files(st, fd);
		}
		rc = st->host->error_set(err, RELAY_E_UNAVAILABLE, 0, "%s",
		                         reason_of(b, "machine-fake: the release failed"));
		goto done;
	}
	fd = lock_files(st);
	json_object *record = load_lease(st, vm);
	int known = record != NULL;
	json_object_put(record);
	if (effect && !before)
		destroy_machine(st, vm, purpose);
	unlock_files(st, fd);
	if (!known && !(effect && before))
		rc = st->host->error_set(err, RELAY_E_NOT_FOUND, 0, "machine-fake: unknown VM: %s", vm);
done:
	json_object_put(b);
	json_object_put(given);
	return rc;
}

static relay_status fake_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                          unsigned flags, char **check_name_out, relay_error *err)
{
	fake_state *st = state;
	(void)call;
	if (check_name_out)
		*check_name_out = NULL;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	json_object *given = json_tokener_parse(lease_json);
	const char *vm = vm_of(given);
	const char *purpose = rsj_get_str(given, "purpose");
	json_object *b = take_behaviour(st, "verify");
	const char *result = result_of(b);
	int fd = lock_files(st);
	int gone = vm ? machine_gone(st, vm, purpose) : 0;
	unlock_files(st, fd);
	relay_status rc = RELAY_OK;
	if (strcmp(result, "unverified") == 0 || !gone)
		rc = st->host->error_set(err, RELAY_E_UNVERIFIED, 0, "%s",
		                         strcmp(result, "unverified") == 0
		                             ? reason_of(b, "machine-fake: destruction unverified")
		                             : "machine-fake: the machine's folder or lease still exists");
	fake_log(st, "verify", vm, log_extra(purpose, rc == RELAY_OK ? "ok" : "unverified"));
	if (check_name_out)
		*check_name_out = st->host->strdup("machine-fake-folders");
	json_object_put(b);
	json_object_put(given);
	return rc;
}

static relay_status simple_behaviour(fake_state *st, const char *op, relay_call *call, relay_error *err)
{
	json_object *b = take_behaviour(st, op);
	const char *result = result_of(b);
	int64_t delay = get_int(b, "delayMs", 0);
	relay_status rc = RELAY_OK;
	if (delay > 0 && fake_delay(st, call, delay))
		rc = st->host->error_set(err, RELAY_E_CANCELLED, 0, "machine-fake: %s was cancelled", op);
	else if (strcmp(result, "fail") == 0)
		rc = st->host->error_set(err, RELAY_E_UNAVAILABLE, 0, "%s",
		                         reason_of(b, "machine-fake did not answer"));
	else if (strcmp(result, "environment-mismatch") == 0)
		rc = st->host->error_set(err, RELAY_E_ENVIRONMENT_MISMATCH, 0, "%s",
		                         reason_of(b, "machine-fake belongs to another environment"));
	json_object_put(b);
	return rc;
}

static relay_status fake_images(relay_plugin_state *state, relay_call *call, unsigned flags,
                                char **images_json_out, relay_error *err)
{
	fake_state *st = state;
	*images_json_out = NULL;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	relay_status rc = simple_behaviour(st, "images", call, err);
	fake_log(st, "images", NULL, log_extra(NULL, rc == RELAY_OK ? "ok" : "fail"));
	if (rc != RELAY_OK)
		return rc;
	json_object *control = read_control(st);
	json_object *images = NULL, *capacity = NULL;
	json_object_object_get_ex(control, "images", &images);
	json_object_object_get_ex(control, "capacity", &capacity);
	json_object *out = json_object_new_object();
	if (json_object_is_type(images, json_type_object)) {
		json_object_object_add(out, "images", json_object_get(images));
	} else {
		json_object *defaults = json_object_new_object();
		static const char *const keys[] = {"ubuntu2404", "debian12"};
		for (size_t i = 0; i < 2; i++) {
			json_object *entry = json_object_new_object();
			json_object_object_add(entry, "kind", json_object_new_string("linux"));
			json_object_object_add(entry, "base_available", json_object_new_boolean(1));
			json_object_object_add(defaults, keys[i], entry);
		}
		json_object_object_add(out, "images", defaults);
	}
	json_object_object_add(out, "capacity", capacity ? json_object_get(capacity) : NULL);
	*images_json_out = fake_owned_json(st, out);
	json_object_put(out);
	json_object_put(control);
	return RELAY_OK;
}

static relay_status fake_health(relay_plugin_state *state, relay_call *call, unsigned flags,
                                char **health_json_out, relay_error *err)
{
	fake_state *st = state;
	if (health_json_out)
		*health_json_out = NULL;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	relay_status rc = simple_behaviour(st, "health", call, err);
	fake_log(st, "health", NULL, log_extra(NULL, rc == RELAY_OK ? "ok" : "fail"));
	if (rc == RELAY_OK && health_json_out)
		*health_json_out = st->host->strdup("{\"service\":\"machine-fake\"}");
	return rc;
}

static relay_status fake_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                         unsigned flags, char **leases_json_out, relay_error *err)
{
	fake_state *st = state;
	*leases_json_out = NULL;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	relay_status rc = simple_behaviour(st, "findByPurpose", call, err);
	if (rc != RELAY_OK) {
		fake_log(st, "findByPurpose", NULL, log_extra(purpose, "fail"));
		return rc;
	}
	json_object *found = json_object_new_array();
	int fd = lock_files(st);
	reclaim_expired(st);
	char *dir_path = join2(st->state_dir, "leases");
	DIR *dir = dir_path ? opendir(dir_path) : NULL;
	struct dirent *e;
	while (dir && (e = readdir(dir)) != NULL) {
		size_t n = strlen(e->d_name);
		if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
			continue;
		char vm[256];
		snprintf(vm, sizeof vm, "%.*s", (int)(n - 5), e->d_name);
		json_object *record = load_lease(st, vm);
		const char *p = rsj_get_str(record, "purpose");
		if (p && purpose && strcmp(p, purpose) == 0)
			json_object_array_add(found, lease_document(record));
		json_object_put(record);
	}
	if (dir)
		closedir(dir);
	free(dir_path);
	unlock_files(st, fd);
	json_object *extra = log_extra(purpose, "ok");
	json_object_object_add(extra, "found",
	                       json_object_new_int64((int64_t)json_object_array_length(found)));
	fake_log(st, "findByPurpose", NULL, extra);
	*leases_json_out = fake_owned_json(st, found);
	json_object_put(found);
	return RELAY_OK;
}

static relay_status fake_binding(relay_plugin_state *state, unsigned flags, char **binding_json_out,
                                 relay_error *err)
{
	fake_state *st = state;
	*binding_json_out = NULL;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	json_object *control = read_control(st);
	json_object *binding = NULL;
	if (json_object_object_get_ex(control, "binding", &binding) &&
	    json_object_is_type(binding, json_type_object)) {
		*binding_json_out = fake_owned_json(st, binding);
	} else {
		json_object *b = json_object_new_object();
		json_object_object_add(b, "machine", json_object_new_string(FAKE_PLUGIN_NAME));
		json_object_object_add(b, "endpoint", NULL);
		json_object_object_add(b, "store", json_object_new_string(st->store));
		json_object_object_add(b, "environmentFingerprint", NULL);
		*binding_json_out = fake_owned_json(st, b);
		json_object_put(b);
	}
	json_object_put(control);
	return RELAY_OK;
}

static relay_status fake_doctor(relay_plugin_state *state, relay_call *call, unsigned flags,
                                char **checks_json_out, relay_error *err)
{
	fake_state *st = state;
	(void)call;
	*checks_json_out = NULL;
	if (check_flags(st, flags, err) != RELAY_OK)
		return RELAY_E_UNSUPPORTED_FLAGS;
	*checks_json_out = st->host->strdup("[{\"check\":\"machine-fake\",\"ok\":true,\"detail\":\"the fake "
	                                    "backend for tests\",\"fix\":null}]");
	return RELAY_OK;
}

static const relay_machine_ops fake_machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = fake_acquire,
    .renew = fake_renew,
    .inspect = fake_inspect,
    .release = fake_release,
    .verify_destroyed = fake_verify_destroyed,
    .images = fake_images,
    .health = fake_health,
    .find_by_purpose = fake_find_by_purpose,
    .binding = fake_binding,
    .doctor = fake_doctor,
};

/* ---- init and the entry ------------------------------------------------------------------- */

static relay_status fake_init(const relay_host *host, const char *config_json, unsigned flags,
                              relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0,
		                       "machine-fake: unknown init flags 0x%x", flags);
	json_object *config = json_tokener_parse(config_json);
	const char *state_dir = rsj_get_str(config, "stateDir");
	if (state_dir == NULL) {
		json_object_put(config);
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "machine-fake: the configuration has no stateDir");
	}
	fake_state *st = calloc(1, sizeof *st);
	if (st == NULL) {
		json_object_put(config);
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "machine-fake: out of memory");
	}
	st->host = host;
	pthread_mutex_init(&st->lock, NULL);
	st->state_dir = strdup(state_dir);
	json_object *options = NULL;
	json_object_object_get_ex(config, "options", &options);
	const char *control = getenv("RELAY_FAKE_MACHINE_CONTROL");
	if (control == NULL || *control == '\0')
		control = rsj_get_str(options, "control");
	st->control_path = control ? strdup(control) : join2(st->state_dir, "control.json");
	const char *log = getenv("RELAY_FAKE_MACHINE_LOG");
	if (log == NULL || *log == '\0')
		log = rsj_get_str(options, "log");
	st->log_path = log ? strdup(log) : join2(st->state_dir, "ops.jsonl");
	const char *store = getenv("RELAY_FAKE_MACHINE_STORE");
	st->store = strdup(store && *store ? store : st->state_dir);
	json_object_put(config);
	char *leases = join2(st->state_dir, "leases");
	if (st->control_path == NULL || st->log_path == NULL || st->store == NULL || leases == NULL ||
	    (mkdir(leases, 0700) != 0 && errno != EEXIST)) {
		free(leases);
		free(st->state_dir);
		free(st->control_path);
		free(st->log_path);
		free(st->store);
		free(st);
		return host->error_set(err, RELAY_E_IO, errno,
		                       "machine-fake: cannot prepare its state folder %s", state_dir);
	}
	free(leases);
	fake_log(st, "init", NULL, NULL);
	*state_out = st;
	return RELAY_OK;
}

static void fake_fini(relay_plugin_state *state)
{
	fake_state *st = state;
	if (st == NULL)
		return;
	free(st->state_dir);
	free(st->control_path);
	free(st->log_path);
	free(st->store);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

static const relay_plugin_descriptor fake_descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = FAKE_PLUGIN_NAME,
    .version = FAKE_VERSION,
    .description = "fake machines for tests: folders on this host, scriptable through a control file",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .capabilities = 0,
    .init = fake_init,
    .fini = fake_fini,
    .machine = &fake_machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &fake_transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(fake_descriptor)
