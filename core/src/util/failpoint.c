/*
 * util/failpoint.c — the failpoints of util/failpoint.h: the catalogue, the
 * parse of MCP_RELAY_FAILPOINTS and the check. Compiled to nothing unless
 * RELAY_FAILPOINTS is defined.
 */
#include "util/failpoint.h"

#ifdef RELAY_FAILPOINTS

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"

typedef enum fp_action { FP_OFF = 0, FP_CRASH, FP_ERROR } fp_action;

typedef struct fp_point {
	const char *name;
	bool can_error; /* the point is written RELAY_FAILPOINT_ERROR */
} fp_point;

/* Every point of the core, in the order of a guest's life. Keep in step
 * with docs/reliability.md §2 (which says where each one is). */
static const fp_point catalogue[] = {
    {"acquire.after-intent", false},      {"acquire.before-request", false},
    {"acquire.after-request", false},     {"acquire.after-adopt", false},
    {"stage.before-receiver", false},     {"stage.before-push", true},
    {"stage.after-push", false},          {"stage.before-init", false},
    {"stage.after-init", false},          {"run.before-dispatch", false},
    {"run.resident.before-send", false},  {"run.resident.after-send", false},
    {"run.resident.after-answer", false}, {"run.before-receipt", false},
    {"run.after-receipt", false},         {"image.before-pull", false},
    {"image.after-publish", false},       {"extract.before-pull", true},
    {"extract.after-pull", false},        {"finish.before-manifest", true},
    {"finish.after-manifest", false},     {"finish.after-seal", false},
    {"release.before-destroy", false},    {"release.after-destroy", false},
    {"release.after-verify", false},      {"download.before-place", false},
};
#define FP_COUNT (sizeof catalogue / sizeof catalogue[0])

/* The parsed setting: written once under pthread_once, read-only after. */
static fp_action actions[FP_COUNT];
static pthread_once_t parsed = PTHREAD_ONCE_INIT;

static void die(const char *what, const char *entry, int len)
{
	fprintf(stderr,
	        "mcp-relay: MCP_RELAY_FAILPOINTS: %s: %.*s (the names are in docs/reliability.md §2; "
	        "actions are crash, error and off)\n",
	        what, len, entry);
	_exit(2);
}

static void parse_entry(const char *entry, int len)
{
	const char *eq = memchr(entry, '=', (size_t)len);
	if (eq == NULL)
		die("an entry is not name=action", entry, len);
	size_t name_len = (size_t)(eq - entry);
	const char *action = eq + 1;
	size_t action_len = (size_t)(entry + len - action);
	if (name_len > 9 && strncmp(entry, "receiver.", 9) == 0)
		return; /* the guest receiver's own points */
	size_t i = 0;
	while (i < FP_COUNT &&
	       !(strlen(catalogue[i].name) == name_len && strncmp(catalogue[i].name, entry, name_len) == 0))
		i++;
	if (i == FP_COUNT)
		die("unknown failpoint", entry, len);
	if (action_len == 5 && strncmp(action, "crash", 5) == 0)
		actions[i] = FP_CRASH;
	else if (action_len == 5 && strncmp(action, "error", 5) == 0 && catalogue[i].can_error)
		actions[i] = FP_ERROR;
	else if (action_len == 5 && strncmp(action, "error", 5) == 0)
		die("this failpoint can only crash", entry, len);
	else if (action_len == 3 && strncmp(action, "off", 3) == 0)
		actions[i] = FP_OFF;
	else
		die("unknown action", entry, len);
}

static void parse_setting(void)
{
	const char *text = getenv("MCP_RELAY_FAILPOINTS");
	while (text && *text) {
		const char *end = strchr(text, ',');
		int len = (int)(end ? (size_t)(end - text) : strlen(text));
		if (len > 0)
			parse_entry(text, len);
		text = end ? end + 1 : NULL;
	}
}

relay_status relay_failpoint_check(const char *name, relay_error *err)
{
	pthread_once(&parsed, parse_setting);
	size_t i = 0;
	while (i < FP_COUNT && strcmp(catalogue[i].name, name) != 0)
		i++;
	if (i == FP_COUNT) {
		fprintf(stderr, "mcp-relay: failpoint %s is not in the catalogue (util/failpoint.c)\n", name);
		abort();
	}
	if (actions[i] == FP_CRASH) {
		static const char prefix[] = "mcp-relay: failpoint ";
		static const char suffix[] = ": crash\n";
		ssize_t ignored = write(2, prefix, sizeof prefix - 1);
		ignored = write(2, name, strlen(name));
		ignored = write(2, suffix, sizeof suffix - 1);
		(void)ignored;
		_exit(RELAY_FAILPOINT_EXIT_CODE);
	}
	if (actions[i] == FP_ERROR)
		return relay_error_set(err, RELAY_E_IO, 0, "failpoint %s: injected error", name);
	return RELAY_OK;
}

#else

/* ISO C wants a translation unit to declare something. */
typedef int relay_failpoint_compiled_out;

#endif
