/*
 * receiver/failpoint.c — the receiver's failpoints (failpoint.h): the
 * catalogue, the parse of MCP_RELAY_FAILPOINTS, the check. Nothing unless
 * RELAY_FAILPOINTS is defined.
 */
#include "failpoint.h"

#ifdef RELAY_FAILPOINTS

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fp_point {
	const char *name;
	int can_error;
} fp_point;

/* Keep in step with docs/reliability.md §2. */
static const fp_point catalogue[] = {
    {"receiver.init.before-write", 1},    {"receiver.run.before-started", 1},
    {"receiver.run.after-started", 0},    {"receiver.run.before-receipt", 1},
    {"receiver.run.after-receipt", 0},    {"receiver.serve.after-read", 0},
    {"receiver.rewrite.before-write", 1},
};
#define FP_COUNT (sizeof catalogue / sizeof catalogue[0])

static void die(const char *what, const char *entry, size_t len)
{
	fprintf(stderr, "receiver: MCP_RELAY_FAILPOINTS: %s: %.*s (see docs/reliability.md)\n", what,
	        (int)len, entry);
	_exit(EXIT_USAGE);
}

/* The action set for catalogue entry `want` (0 off, 1 crash, 2 error);
 * every receiver entry of the setting is checked on the way. */
static int action_of(size_t want)
{
	const char *text = getenv("MCP_RELAY_FAILPOINTS");
	int found = 0;
	while (text && *text) {
		const char *end = strchr(text, ',');
		size_t len = end ? (size_t)(end - text) : strlen(text);
		const char *eq = memchr(text, '=', len);
		if (len > 9 && strncmp(text, "receiver.", 9) == 0) {
			size_t name_len = eq ? (size_t)(eq - text) : len;
			size_t alen = eq ? len - name_len - 1 : 0;
			size_t i = 0;
			int action;
			while (i < FP_COUNT && !(strlen(catalogue[i].name) == name_len &&
			                         strncmp(catalogue[i].name, text, name_len) == 0))
				i++;
			if (eq == NULL || i == FP_COUNT)
				die("unknown receiver failpoint", text, len);
			if (alen == 5 && strncmp(eq + 1, "crash", 5) == 0)
				action = 1;
			else if (alen == 5 && strncmp(eq + 1, "error", 5) == 0 && catalogue[i].can_error)
				action = 2;
			else if (alen == 3 && strncmp(eq + 1, "off", 3) == 0)
				action = 0;
			else
				die("unknown action, or error at a crash-only point", text, len);
			if (i == want)
				found = action;
		}
		text = end ? end + 1 : NULL;
	}
	return found;
}

int receiver_failpoint_check(const char *name, rerr *err)
{
	size_t i = 0;
	int action;
	while (i < FP_COUNT && strcmp(catalogue[i].name, name) != 0)
		i++;
	if (i == FP_COUNT) {
		fprintf(stderr, "receiver: failpoint %s is not in the catalogue\n", name);
		abort();
	}
	action = action_of(i);
	if (action == 1) {
		fprintf(stderr, "receiver: failpoint %s: crash\n", name);
		_exit(RECEIVER_FAILPOINT_EXIT_CODE);
	}
	if (action == 2) {
		err_set(err, "failpoint %s: injected error", name);
		return -1;
	}
	return 0;
}

#else

/* ISO C wants a translation unit to declare something. */
typedef int receiver_failpoint_compiled_out;

#endif
