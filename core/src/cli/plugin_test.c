/* mcp-relay plugin-test: arguments, loading, the counting host, the order
 * of the checks and their output (cli/plugin_test.h). */
#include "cli/plugin_test.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

/* ---- the counting host ---------------------------------------------------
 * The host callbacks carry no context, so the live blocks are file-scope
 * state: `live` holds every pointer host->alloc/strdup returned and
 * host->free has not yet taken back. Guarded by `live_lock` (plugins may
 * allocate from their own threads). A pointer host->free gets that is not
 * in the set came from the core's own services (process_run buffers,
 * archive facts), which share the allocator: it is freed uncounted. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static void **live;
static size_t live_count, live_cap;
static relay_host counting_host;

static void *pt_alloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (p == NULL)
		return NULL;
	pthread_mutex_lock(&live_lock);
	if (live_count == live_cap) {
		size_t cap = live_cap ? live_cap * 2 : 256;
		void **bigger = realloc(live, cap * sizeof *live);
		if (bigger == NULL) {
			pthread_mutex_unlock(&live_lock);
			free(p);
			return NULL;
		}
		live = bigger;
		live_cap = cap;
	}
	live[live_count++] = p;
	pthread_mutex_unlock(&live_lock);
	return p;
}

static void pt_free(void *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&live_lock);
	for (size_t i = live_count; i-- > 0;) {
		if (live[i] == p) {
			live[i] = live[--live_count];
			break;
		}
	}
	pthread_mutex_unlock(&live_lock);
	free(p);
}

static char *pt_strdup(const char *text)
{
	if (text == NULL)
		return NULL;
	size_t n = strlen(text) + 1;
	char *copy = pt_alloc(n);
	if (copy)
		memcpy(copy, text, n);
	return copy;
}

const relay_host *pt_host(void)
{
	return &counting_host;
}

/* ---- results -------------------------------------------------------------- */

static const struct {
	int n;
	const char *title;
} checks[] = {
    {1, "the loader accepts the plugin"},
    {2, "one size per ops table"},
    {3, "unknown flag bits refused"},
    {4, "failures fill the error record"},
    {5, "out-parameters are NULL after a failure"},
    {6, "every host->alloc block freed"},
    {10, "images answers an inventory"},
    {11, "acquire answers a lease document"},
    {12, "inspect answers the same lease"},
    {13, "renew answers the same lease"},
    {14, "find_by_purpose lists the lease"},
    {15, "release confirms"},
    {16, "verify_destroyed confirms"},
    {17, "the released lease is gone"},
    {18, "a second release is harmless"},
    {20, "open connects to the lease"},
    {21, "exec: exit status and both streams"},
    {22, "exec: envp added to the environment"},
    {23, "exec: max_output_bytes caps and truncates"},
    {24, "exec: one cap for both streams"},
    {25, "exec: timeout kills and says so"},
    {26, "exec: cwd"},
    {27, "exec: struct sizes of other versions"},
    {30, "push of a file, with its facts"},
    {31, "pull of a file, with its facts"},
    {32, "push of a tree, with its facts"},
    {33, "pull of a tree, with its facts"},
    {34, "pull refuses a symbolic link"},
    {35, "pull refuses an existing host path"},
    {36, "push refuses a relative guest path"},
    {40, "plan answers a plan by the rules"},
    {50, "stream: open starts a command"},
    {51, "stream: many requests, in order"},
    {52, "stream: a read with nothing written times out"},
    {53, "stream: close ends the command's input"},
    {54, "stream: a broken stream says so"},
    {45, "console operations answer cleanly"},
    {46, "the machine's typed console answers by its rules"},
    {60, "exec: a cancelled call ends the command"},
    {61, "push: a cancelled call stops it"},
    {62, "pull: a cancelled call stops it"},
    {63, "inspect and renew answer during a long exec"},
    {64, "two execs at once on one connection"},
    {65, "a restarted plugin adopts its lease"},
    {66, "a failed release is retried until it confirms"},
    {67, "an indeterminate acquire is reconciled by purpose"},
    {68, "push: a call cancelled mid-transfer stops it"},
    {69, "pull: a call cancelled mid-transfer stops it"},
};

void pt_fail(pt_run *run, int n, const char *fmt, ...)
{
	run->ran[n] = true;
	if (run->failed[n])
		return;
	run->failed[n] = true;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(run->failure[n], sizeof run->failure[n], fmt, ap);
	va_end(ap);
}

void pt_ran(pt_run *run, int n)
{
	run->ran[n] = true;
}

void pt_skip(pt_run *run, int n, const char *why)
{
	if (run->ran[n])
		return;
	run->skipped[n] = true;
	snprintf(run->skip_why[n], sizeof run->skip_why[n], "%s", why);
}

void pt_sleep_ms(uint64_t ms)
{
	struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&left, &left) != 0 && errno == EINTR) {
	}
}

const char *pt_status(relay_status status)
{
	static const char *const names[] = {"RELAY_OK",
	                                    "RELAY_E_INVALID_ARGUMENT",
	                                    "RELAY_E_UNSUPPORTED_FLAGS",
	                                    "RELAY_E_UNSUPPORTED",
	                                    "RELAY_E_NO_MEMORY",
	                                    "RELAY_E_IO",
	                                    "RELAY_E_TIMEOUT",
	                                    "RELAY_E_CANCELLED",
	                                    "RELAY_E_REFUSED",
	                                    "RELAY_E_CAPACITY",
	                                    "RELAY_E_INDETERMINATE",
	                                    "RELAY_E_UNAVAILABLE",
	                                    "RELAY_E_NOT_FOUND",
	                                    "RELAY_E_INTEGRITY",
	                                    "RELAY_E_UNSAFE_PATH",
	                                    "RELAY_E_TRANSIENT",
	                                    "RELAY_E_IMAGE_UNAVAILABLE",
	                                    "RELAY_E_ENVIRONMENT_MISMATCH",
	                                    "RELAY_E_TOO_LARGE",
	                                    "RELAY_E_PROTOCOL",
	                                    "RELAY_E_UNVERIFIED",
	                                    "RELAY_E_INTERNAL",
	                                    "RELAY_E_NO_SPACE"};
	if ((unsigned)status < sizeof names / sizeof names[0])
		return names[status];
	return "an unknown status";
}

/* Prints every check that ran or was skipped; returns the failures. */
static int report(const pt_run *run)
{
	int failures = 0, passed = 0, skipped = 0;
	for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
		int n = checks[i].n;
		if (run->failed[n]) {
			printf("check %2d FAIL %s\n     %s\n", n, checks[i].title, run->failure[n]);
			failures++;
		} else if (run->ran[n]) {
			printf("check %2d ok   %s\n", n, checks[i].title);
			passed++;
		} else if (run->skipped[n]) {
			printf("check %2d skip %s: %s\n", n, checks[i].title, run->skip_why[n]);
			skipped++;
		}
	}
	printf("%d passed, %d failed, %d skipped.\n", passed, failures, skipped);
	fflush(stdout);
	return failures;
}

/* ---- arguments and loading ----------------------------------------------- */

typedef struct pt_args {
	const char *kind, *path, *options, *lease_file, *image, *service_url;
} pt_args;

static int usage(void)
{
	fprintf(stderr,
	        "usage: mcp-relay plugin-test --kind machine|transport|capture|console [--options JSON]\n"
	        "                             [--lease FILE] [--image KEY] [--service-url URL] PLUGIN.so\n");
	return 2;
}

static int parse_args(int argc, char **argv, pt_args *a)
{
	memset(a, 0, sizeof *a);
	for (int i = 1; i < argc; i++) {
		const char **slot = NULL;
		if (strcmp(argv[i], "--kind") == 0)
			slot = &a->kind;
		else if (strcmp(argv[i], "--options") == 0)
			slot = &a->options;
		else if (strcmp(argv[i], "--lease") == 0)
			slot = &a->lease_file;
		else if (strcmp(argv[i], "--image") == 0)
			slot = &a->image;
		else if (strcmp(argv[i], "--service-url") == 0)
			slot = &a->service_url;
		if (slot != NULL) {
			if (++i >= argc)
				return -1;
			*slot = argv[i];
		} else if (argv[i][0] != '-' && a->path == NULL) {
			a->path = argv[i];
		} else {
			return -1;
		}
	}
	return a->kind && a->path ? 0 : -1;
}

static relay_plugin_kind kind_of(const char *name)
{
	static const relay_plugin_kind kinds[] = {RELAY_KIND_MACHINE, RELAY_KIND_TRANSPORT,
	                                          RELAY_KIND_CAPTURE, RELAY_KIND_CONSOLE};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (strcmp(name, loader_kind_name(kinds[i])) == 0)
			return kinds[i];
	return 0;
}

/* The init configuration (relay/plugin.h) with a state folder of ours. */
static char *config_json(const pt_args *a, const char *state_dir, char *why, size_t why_len)
{
	json_object *options =
	    a->options ? jsonx_parse_str(a->options, why, why_len) : json_object_new_object();
	if (options == NULL || !json_object_is_type(options, json_type_object)) {
		if (options != NULL)
			snprintf(why, why_len, "--options must be a JSON object");
		json_object_put(options);
		return NULL;
	}
	json_object *config = json_object_new_object();
	jsonx_add_str(config, "stateDir", state_dir);
	char *receivers = loader_receivers_dir();
	jsonx_add_str(config, "libexecDir", receivers);
	free(receivers);
	jsonx_add_str(config, "guestNetwork", "nat");
	jsonx_add_str(config, "serviceUrl", a->service_url);
	jsonx_add_str(config, "sessionId", "plugin-test");
	jsonx_add_null(config, "environment");
	jsonx_add_null(config, "exportedEnvironment");
	jsonx_add(config, "options", options);
	char *text = jsonx_to_string(config, 0);
	json_object_put(config);
	return text;
}

/* The checks of `run->kind`, in order. */
static void run_checks(pt_run *run)
{
	pt_check_tables(run);
	bool machine = run->plugin->descriptor.kinds & RELAY_KIND_MACHINE;
	if (run->kind == RELAY_KIND_MACHINE ||
	    (run->kind == RELAY_KIND_TRANSPORT && !run->lease_json && machine))
		pt_machine_acquire(run);
	if (machine) /* as the flags of every machine op are, whichever kind is tested */
		pt_check_machine_console(run);
	pt_check_flags(run);
	if (run->kind == RELAY_KIND_MACHINE) {
		pt_machine_lifecycle(run);
		pt_machine_recover(run);
	}
	if (run->kind == RELAY_KIND_TRANSPORT) {
		if (pt_transport_open(run)) {
			pt_transport_exec(run);
			pt_transport_xfer(run);
			pt_transport_stream(run);
			pt_transport_hard(run);
			pt_transport_cancel_mid(run);
		}
		pt_transport_close(run);
	}
	if (run->kind == RELAY_KIND_CAPTURE)
		pt_check_capture(run);
	if (run->kind == RELAY_KIND_CONSOLE)
		pt_check_console(run);
	if (run->lease_acquired)
		pt_machine_release(run);
}

static int run_plugin(const pt_args *a, pt_run *run, const char *state_dir)
{
	char why[512] = "";
	char *config = config_json(a, state_dir, why, sizeof why);
	if (config == NULL) {
		fprintf(stderr, "mcp-relay plugin-test: %s\n", why);
		return 2;
	}
	if (a->lease_file) {
		relay_error err;
		size_t len = 0;
		if (fs_read_file(a->lease_file, 1 << 20, &run->lease_json, &len, &err) != RELAY_OK) {
			fprintf(stderr, "mcp-relay plugin-test: %s\n", err.message);
			free(config);
			return 2;
		}
	}
	run->config = config;
	plugin_registry registry;
	memset(&registry, 0, sizeof registry);
	registry.host = &counting_host;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (loader_load(&registry, a->path, run->kind, config, &run->plugin, &err) != RELAY_OK) {
		pt_fail(run, 1, "the loader refused the plugin: %s", err.message);
	} else {
		pt_ran(run, 1);
		run_checks(run);
	}
	loader_shutdown(&registry);
	pthread_mutex_lock(&live_lock);
	size_t leaked = live_count;
	pthread_mutex_unlock(&live_lock);
	if (run->plugin && leaked)
		pt_fail(run, 6,
		        "%zu blocks allocated with host->alloc were not freed with host->free by the end of "
		        "fini() "
		        "(relay/plugin.h R7)",
		        leaked);
	else if (run->plugin)
		pt_ran(run, 6);
	free(config);
	return report(run) ? 1 : 0;
}

int plugin_test_main(int argc, char **argv)
{
	pt_args a;
	if (parse_args(argc, argv, &a) != 0)
		return usage();
	relay_plugin_kind kind = kind_of(a.kind);
	if (kind == 0) {
		fprintf(stderr,
		        "mcp-relay plugin-test: unknown --kind %s (machine, transport, capture, console)\n",
		        a.kind);
		return 2;
	}
	counting_host = *loader_host_table();
	counting_host.alloc = pt_alloc;
	counting_host.free = pt_free;
	counting_host.strdup = pt_strdup;
	char state_dir[] = "/tmp/mcp-relay-plugin-test-XXXXXX";
	if (mkdtemp(state_dir) == NULL) {
		perror("mcp-relay plugin-test: mkdtemp");
		return 2;
	}
	pt_run *run = calloc(1, sizeof *run);
	if (run == NULL)
		return 2;
	run->kind = kind;
	run->image = a.image;
	snprintf(run->scratch, sizeof run->scratch, "%s/scratch", state_dir);
	int rc = run_plugin(&a, run, state_dir);
	relay_error err;
	fs_remove_tree(state_dir, &err);
	free(run->lease_json);
	free(run);
	fflush(NULL);
	/* Plugins may still run threads; never dlclose (relay/plugin.h). */
	_exit(rc);
}
