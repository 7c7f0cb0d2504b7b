/*
 * relay_probe with scope "host" (spec/tools.md §3.2; probe.h): host facts, the
 * backend's reachability with its images and capacity, and every guest
 * held, read in parallel with 5 s each; a fact that cannot be read is
 * reported with a diagnostic and the probe itself does not fail. The full
 * result is kept as <session>/probes/<ms>-<uuid>.json, which
 * lease_copy_probes() copies into the evidence of later acquisitions.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "lease/probe.h"
#include "profile/environment.h"
#include "relay_support/which.h"
#include "session/manager_internal.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/process.h"
#include "util/randx.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define PROBE_LIMIT_MS  5000
#define FACT_TIMEOUT_MS 2000

/* ---- running the three reads side by side ------------------------------------------ */

enum { TASK_HOST = 0, TASK_HEALTH, TASK_IMAGES, TASK_COUNT };

/* Shared by the probe and its worker threads. A worker that outlives the
 * 5 s limit finishes on its own; the last one out frees the run. */
typedef struct probe_run {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;
	bool done[TASK_COUNT];
	bool abandoned;
	session_manager *m;
	/* results, under mu */
	json_object *host_facts;
	relay_status health_status;
	char health_message[RELAY_ERROR_MESSAGE_BYTES];
	relay_status images_status;
	char images_message[RELAY_ERROR_MESSAGE_BYTES];
	char *images_text;
} probe_run;

typedef struct probe_task {
	probe_run *run;
	int which;
} probe_task;

static void run_release(probe_run *run)
{
	pthread_mutex_lock(&run->mu);
	bool last = --run->refs == 0;
	pthread_mutex_unlock(&run->mu);
	if (!last)
		return;
	json_object_put(run->host_facts);
	free(run->images_text);
	pthread_mutex_destroy(&run->mu);
	pthread_cond_destroy(&run->cv);
	free(run);
}

static char *which(const char *program)
{
	return rs_which(program, NULL);
}

/* One command as a fact {value, source, diagnostic?}; `parse` turns the
 * trimmed output into the value (NULL: unknown, with the diagnostic). */
typedef json_object *(*fact_parser)(const char *out, char *why, size_t why_len);

static json_object *command_fact(const char *const *argv, const char *source, fact_parser parse)
{
	json_object *fact = json_object_new_object();
	relay_process_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.stdin_fd = -1;
	req.stdout_fd = -1;
	req.timeout_ms = FACT_TIMEOUT_MS;
	req.max_output_bytes = 1 << 20;
	relay_process_result res;
	memset(&res, 0, sizeof res);
	res.struct_size = sizeof res;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = process_run(&req, NULL, NULL, 0, &res, &err);
	char why[RELAY_ERROR_MESSAGE_BYTES + 300] = "";
	json_object *value = NULL;
	if (st == RELAY_E_NOT_FOUND) {
		snprintf(why, sizeof why, "%s: not found", argv[0]);
	} else if (st != RELAY_OK) {
		snprintf(why, sizeof why, "%s: %s", argv[0], err.message);
	} else if (res.timed_out) {
		snprintf(why, sizeof why, "%s: no answer within %d ms", argv[0], FACT_TIMEOUT_MS);
	} else if (res.exit_code != 0) {
		size_t n = res.err_len;
		while (n > 0 && (res.err[n - 1] == '\n' || res.err[n - 1] == '\r'))
			n--;
		snprintf(why, sizeof why, "%s exited %d%s%.200s", argv[0], res.exit_code, n ? ": " : "",
		         n ? res.err : "");
	} else {
		char *out = res.out ? res.out : "";
		size_t n = strlen(out);
		while (n > 0 && strchr(" \t\r\n", out[n - 1]))
			out[--n] = '\0';
		value = parse(out, why, sizeof why);
	}
	jsonx_add(fact, "value", value);
	jsonx_add_str(fact, "source", source);
	if (value == NULL)
		jsonx_add_str(fact, "diagnostic", why[0] ? why : "unknown");
	process_result_release(&res);
	return fact;
}

static json_object *parse_active(const char *out, char *why, size_t len)
{
	if (strcmp(out, "yes") == 0)
		return json_object_new_boolean(1);
	if (strcmp(out, "no") == 0)
		return json_object_new_boolean(0);
	snprintf(why, len, "loginctl answered \"%.100s\"", out);
	return NULL;
}

static json_object *parse_idle(const char *out, char *why, size_t len)
{
	char *end = NULL;
	double ms = strtod(out, &end);
	if (end == out || *end != '\0' || ms < 0) {
		snprintf(why, len, "xprintidle answered \"%.100s\"", out);
		return NULL;
	}
	return json_object_new_double(ms / 1000.0);
}

static json_object *parse_json_value(const char *out, char *why, size_t len)
{
	char reason[128] = "";
	bool is_null = false;
	json_object *v = jsonx_parse(out, strlen(out), &is_null, reason, sizeof reason);
	if (v == NULL)
		snprintf(why, len, "the answer is not JSON (%s)", is_null ? "null" : reason);
	return v;
}

static json_object *host_facts(void)
{
	json_object *local = json_object_new_object();
	struct utsname u;
	bool named = uname(&u) == 0;
	char os[80] = "unknown";
	if (named) {
		snprintf(os, sizeof os, "%s", u.sysname);
		for (char *c = os; *c; c++)
			*c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
		if (strcmp(os, "darwin") == 0)
			snprintf(os, sizeof os, "macos");
	}
	jsonx_add_str(local, "os", os);
	jsonx_add_str(local, "architecture", named ? u.machine : "unknown");
#ifdef __APPLE__
	const char *session_argv[] = {
	    "/bin/sh", "-c",
	    "o=$(stat -f %Su /dev/console) && case $o in root|loginwindow) echo no;; "
	    "*) echo yes;; esac",
	    NULL};
	jsonx_add(local, "userSessionActive",
	          command_fact(session_argv, "stat -f %Su /dev/console", parse_active));
	const char *idle_argv[] = {
	    "/bin/sh", "-c", "ioreg -r -c IOHIDSystem | awk '/HIDIdleTime/ {print int($NF/1000000); exit}'",
	    NULL};
	jsonx_add(local, "idleSeconds", command_fact(idle_argv, "ioreg -r -c IOHIDSystem", parse_idle));
#else
	const char *session_argv[] = {"loginctl", "show-session", "self", "-p", "Active", "--value", NULL};
	jsonx_add(local, "userSessionActive",
	          command_fact(session_argv, "loginctl show-session self -p Active --value", parse_active));
	const char *idle_argv[] = {"xprintidle", NULL};
	jsonx_add(local, "idleSeconds", command_fact(idle_argv, "xprintidle", parse_idle));
#endif
	char *cua = which("cua-driver");
	if (cua) {
		const char *perm_argv[] = {cua, "permissions", "status", "--json", NULL};
		jsonx_add(local, "permissions",
		          command_fact(perm_argv, "cua-driver permissions status --json", parse_json_value));
		const char *apps_argv[] = {cua, "call", "list_apps", "--json", "{}", NULL};
		jsonx_add(local, "foreground",
		          command_fact(apps_argv, "cua-driver call list_apps --json {}", parse_json_value));
		free(cua);
	}
	return local;
}

static void *task_main(void *arg)
{
	probe_task *task = arg;
	probe_run *run = task->run;
	int which_task = task->which;
	free(task);
	loaded_plugin *machine = run->m->backends->plugins[SLOT_MACHINE];
	json_object *facts = NULL;
	relay_status st = RELAY_OK;
	relay_error err;
	memset(&err, 0, sizeof err);
	char *text = NULL;
	if (which_task == TASK_HOST) {
		facts = host_facts();
	} else if (which_task == TASK_HEALTH) {
		if (machine && machine->machine.health)
			st = machine->machine.health(machine->state, NULL, 0, &text, &err);
		free(text);
		text = NULL;
	} else {
		st = machine ? machine->machine.images(machine->state, NULL, 0, &text, &err)
		             : RELAY_E_UNAVAILABLE;
	}
	pthread_mutex_lock(&run->mu);
	if (which_task == TASK_HOST) {
		run->host_facts = facts;
	} else if (which_task == TASK_HEALTH) {
		run->health_status = st;
		snprintf(run->health_message, sizeof run->health_message, "%s",
		         err.message[0] ? err.message : relay_status_str(st));
	} else {
		run->images_status = st;
		snprintf(run->images_message, sizeof run->images_message, "%s",
		         err.message[0] ? err.message : relay_status_str(st));
		run->images_text = text;
	}
	run->done[which_task] = true;
	pthread_cond_broadcast(&run->cv);
	pthread_mutex_unlock(&run->mu);
	run_release(run);
	return NULL;
}

/* ---- the result --------------------------------------------------------------------------- */

static json_object *capabilities_block(void)
{
	json_object *image = json_object_new_object();
	jsonx_add_int(image, "version", 1);
	jsonx_add_str(image, "action", "image");
	json_object *sources = json_object_new_array();
	json_object_array_add(sources, json_object_new_string("display"));
	json_object_array_add(sources, json_object_new_string("application"));
	json_object_array_add(sources, json_object_new_string("reference"));
	jsonx_add(image, "sources", sources);
	jsonx_add_int(image, "deadlineMs", 90000);
	jsonx_add_int(image, "transferAttempts", 3);
	jsonx_add_int(image, "recommendedRecoveryCalls", 2);
	json_object *caps = json_object_new_object();
	jsonx_add(caps, "image", image);
	return caps;
}

static const char *service_endpoint(session_manager *m, char *buf, size_t len)
{
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	if (machine == NULL || machine->machine.binding == NULL)
		return NULL;
	char *text = NULL;
	relay_error err;
	const char *endpoint = NULL;
	if (machine->machine.binding(machine->state, 0, &text, &err) == RELAY_OK && text) {
		json_object *b = jsonx_parse_str(text, NULL, 0);
		const char *e = jsonx_get_str(b, "endpoint");
		if (e) {
			snprintf(buf, len, "%s", e);
			endpoint = buf;
		}
		json_object_put(b);
	}
	free(text);
	return endpoint;
}

static void save_probe(session_manager *m, json_object *result)
{
	char *dir = fs_path_join(m->settings->session_dir, "probes");
	relay_error err;
	if (dir == NULL || fs_mkdir_p(dir, 0700, &err) != RELAY_OK) {
		log_warning("cannot keep the probe record under %s", dir ? dir : "the session folder");
		free(dir);
		return;
	}
	char uuid[37], name[96];
	random_uuid(uuid);
	snprintf(name, sizeof name, "%lld-%s.json", (long long)clock_now_ms(), uuid);
	char *path = fs_path_join(dir, name);
	if (path == NULL || fs_write_json_durable(path, result, &err) != RELAY_OK)
		log_warning("cannot write the probe record %s", path ? path : name);
	free(path);
	free(dir);
}

/* What the three reads found within the limit (copied out of the run). */
typedef struct probe_snapshot {
	bool host_done, health_done, images_done;
	json_object *local; /* the host facts, or NULL */
	relay_status health, images;
	char health_msg[RELAY_ERROR_MESSAGE_BYTES], images_msg[RELAY_ERROR_MESSAGE_BYTES];
	char *images_text; /* owned, or NULL */
} probe_snapshot;

/* Starts the three reads, each on a thread of its own, and waits for them
 * for at most PROBE_LIMIT_MS of real time; a read still running then
 * finishes on its own. 0, or -1 when out of memory. */
static int run_reads(session_manager *m, probe_snapshot *snap)
{
	probe_run *run = calloc(1, sizeof *run);
	if (run == NULL)
		return -1;
	pthread_mutex_init(&run->mu, NULL);
	pthread_cond_init(&run->cv, NULL);
	run->m = m;
	run->refs = 1;
	for (int i = 0; i < TASK_COUNT; i++) {
		probe_task *task = malloc(sizeof *task);
		pthread_t thread;
		bool started = false;
		if (task) {
			task->run = run;
			task->which = i;
			pthread_mutex_lock(&run->mu);
			run->refs++;
			pthread_mutex_unlock(&run->mu);
			started = pthread_create(&thread, NULL, task_main, task) == 0;
			if (started) {
				pthread_detach(thread);
			} else {
				free(task);
				pthread_mutex_lock(&run->mu);
				run->refs--;
				pthread_mutex_unlock(&run->mu);
			}
		}
		if (!started) {
			pthread_mutex_lock(&run->mu);
			run->done[i] = true;
			if (i == TASK_HEALTH)
				run->health_status = RELAY_E_INTERNAL;
			if (i == TASK_IMAGES)
				run->images_status = RELAY_E_INTERNAL;
			pthread_mutex_unlock(&run->mu);
		}
	}
	/* Wait for all three, for at most 5 s of real time. */
	int64_t give_up = clock_monotonic_ms() + PROBE_LIMIT_MS;
	pthread_mutex_lock(&run->mu);
	for (;;) {
		bool all = run->done[TASK_HOST] && run->done[TASK_HEALTH] && run->done[TASK_IMAGES];
		int64_t left = give_up - clock_monotonic_ms();
		if (all || left <= 0)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t wait_ms = left < 100 ? left : 100;
		ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
		ts.tv_sec += (time_t)(wait_ms / 1000) + ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&run->cv, &run->mu, &ts);
	}
	run->abandoned = true;
	snap->host_done = run->done[TASK_HOST];
	snap->health_done = run->done[TASK_HEALTH];
	snap->images_done = run->done[TASK_IMAGES];
	snap->local = snap->host_done ? json_object_get(run->host_facts) : NULL;
	snap->health = run->health_status;
	snap->images = run->images_status;
	snprintf(snap->health_msg, sizeof snap->health_msg, "%s", run->health_message);
	snprintf(snap->images_msg, sizeof snap->images_msg, "%s", run->images_message);
	snap->images_text = snap->images_done && run->images_text ? strdup(run->images_text) : NULL;
	pthread_mutex_unlock(&run->mu);
	run_release(run);
	return 0;
}

/* The host facts, or what stands for them when they were not read in time. */
static json_object *local_block(probe_snapshot *snap)
{
	json_object *local = snap->local;
	snap->local = NULL;
	if (local == NULL) {
		local = json_object_new_object();
		struct utsname u;
		jsonx_add_str(local, "os", "unknown");
		jsonx_add_str(local, "architecture", uname(&u) == 0 ? u.machine : "unknown");
		jsonx_add_null(local, "userSessionActive");
		jsonx_add_null(local, "idleSeconds");
		jsonx_add_str(local, "diagnostic", "host facts were not read within 5 s");
	}
	return local;
}

/* The backend block: which machine plugin, its service endpoint, whether
 * it answered its health check, and its images and capacity. */
static json_object *backend_block(session_manager *m, const probe_snapshot *snap, bool *reachable_out)
{
	json_object *backend = json_object_new_object();
	char endpoint_buf[512];
	jsonx_add_str(backend, "machine", backends_display_name(m->backends, SLOT_MACHINE));
	jsonx_add_str(backend, "service", service_endpoint(m, endpoint_buf, sizeof endpoint_buf));
	loaded_plugin *machine = m->backends->plugins[SLOT_MACHINE];
	bool reachable;
	const char *diagnostic = NULL;
	if (machine == NULL) {
		reachable = false;
		diagnostic = m->backends->load_errors[SLOT_MACHINE] ? m->backends->load_errors[SLOT_MACHINE]
		                                                    : "no machine plugin is loaded";
	} else if (!snap->health_done) {
		reachable = false;
		diagnostic = "the backend did not answer its health check within 5 s";
	} else if (snap->health != RELAY_OK) {
		reachable = false;
		diagnostic = snap->health_msg;
	} else {
		reachable = true;
	}
	jsonx_add_bool(backend, "reachable", reachable);
	if (reachable) {
		json_object *inventory =
		    snap->images_text ? jsonx_parse_str(snap->images_text, NULL, 0) : NULL;
		if (!snap->images_done)
			jsonx_add_str(backend, "diagnostic", "the image inventory was not read within 5 s");
		else if (snap->images != RELAY_OK)
			jsonx_add_str(backend, "diagnostic", snap->images_msg);
		json_object *images = jsonx_get_obj(inventory, "images");
		json_object *capacity = jsonx_get_obj(inventory, "capacity");
		jsonx_add(backend, "images", images ? json_object_get(images) : NULL);
		jsonx_add(backend, "capacity", capacity ? json_object_get(capacity) : NULL);
		json_object_put(inventory);
	} else {
		jsonx_add_str(backend, "diagnostic", diagnostic);
	}
	*reachable_out = reachable;
	return backend;
}

int lease_probe_host(session_manager *m, relay_outcome *o, bool *reachable_out, size_t *held_out)
{
	session_wait_startup(m);
	probe_snapshot snap;
	memset(&snap, 0, sizeof snap);
	if (run_reads(m, &snap) != 0)
		return outcome_fail(o, "internal", "out of memory probing the host");
	json_object *local = local_block(&snap);
	bool reachable = false;
	json_object *backend = backend_block(m, &snap, &reachable);
	free(snap.images_text);
	json_object *result = json_object_new_object();
	jsonx_add_str(result, "scope", "host");
	char observed[21];
	time_format_iso_seconds(clock_now_ms(), observed);
	jsonx_add_str(result, "observedAt", observed);
	jsonx_add(result, "local", local);
	jsonx_add(result, "backend", backend);
	jsonx_add(result, "environment",
	          m->settings->environment ? environment_identity(m->settings->environment) : NULL);
	session_lock(m);
	json_object *guests = json_object_new_array();
	size_t held = 0;
	for (guest *g = m->guests; g; g = g->next) {
		if (g->phase == PHASE_CLOSED)
			continue;
		json_object_array_add(guests, guest_status_json(g));
		held++;
	}
	session_unlock(m);
	jsonx_add(result, "guests", guests);
	jsonx_add_int(result, "maxGuests", m->settings->max_guests);
	jsonx_add(result, "capabilities", capabilities_block());
	save_probe(m, result);
	outcome_free(o);
	o->facts = result;
	*reachable_out = reachable;
	*held_out = held;
	return 0;
}
