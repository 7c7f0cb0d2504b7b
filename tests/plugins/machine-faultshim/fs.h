/*
 * machine-faultshim's script (fs_script.c): the rules, matching a call, the
 * operation log, and what a rule does before and after a call is forwarded
 * (faultshim.c forwards). The script's language is faultshim.c's comment.
 */
#ifndef RELAY_TESTS_FAULTSHIM_FS_H
#define RELAY_TESTS_FAULTSHIM_FS_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay/transport.h"

#define FS_NAME      "machine-faultshim"
#define FS_MAX_RULES 32

typedef enum fs_fault { FS_FAIL, FS_DROP, FS_DELAY, FS_HANG, FS_CORRUPT } fs_fault;

typedef struct fs_rule {
	char op[32];
	char match[256]; /* "" matches every call */
	unsigned nth;    /* the first matching call it applies to; 0 = the first */
	int times;       /* calls it applies to; -1 = no end */
	unsigned seen;   /* matching calls so far; under fs_state.lock */
	int used;        /* calls it applied to; under fs_state.lock */
	fs_fault fault;
	relay_status code;
	char reason[512]; /* "" = the shim's own message */
	unsigned delay_ms;
} fs_rule;

typedef struct fs_state {
	const relay_host *host;
	const relay_plugin_descriptor *inner;
	relay_machine_ops machine;     /* the real plugin's, copied by its size */
	relay_transport_ops transport; /* zero when it has none */
	relay_plugin_state *inner_state;
	pthread_mutex_t lock; /* the rules, their counters and the log: operations run on many threads */
	fs_rule rules[FS_MAX_RULES];
	size_t rule_count;
	char control[1024]; /* the script file read again when it changes, or "" */
	struct timespec control_mtime;
	off_t control_size;
	ino_t control_ino;
	json_object *doc; /* the script: the options, or the control file's last good read */
	char log[1024];   /* the operation log, or "" */
} fs_state;

/* True for an operation a rule may name (one the shim matches calls of). */
bool fs_op_known(const char *op);
/* A string member of `obj`, or NULL. */
const char *fs_json_str(json_object *obj, const char *key);
/* Appends the rules of the array `faults` (NULL: none) to st's. */
relay_status fs_parse_faults(fs_state *st, json_object *faults, relay_error *err);
/* The rule that applies to this call of `op` with text argument `arg`
 * (may be NULL), counting it, copied to *copy; NULL for none. Reads the
 * control file again first when it changed. */
const fs_rule *fs_match(fs_state *st, const char *op, const char *arg, fs_rule *copy);
/* One line of the operation log: when a call begins (so a test sees a
 * call that hangs), and when it ends (`end`: op "<op>:end" with its
 * result); `ttl_ms` < 0: none. */
void fs_log(fs_state *st, const char *op, const char *arg, int64_t ttl_ms, const fs_rule *r, bool end,
            relay_status status);
/* Before forwarding: RELAY_OK to forward, else the injected failure (or
 * RELAY_E_CANCELLED for a call cancelled during its delay). */
relay_status fs_before(fs_state *st, const fs_rule *r, const char *op, relay_call *call, relay_error *err);
/* After forwarding: a "drop" turns a success into RELAY_E_INDETERMINATE
 * and frees *out; a "hang" holds the answer back (and frees it when the
 * call is cancelled meanwhile); a lease document gets leaseExtra. */
relay_status fs_after(fs_state *st, const fs_rule *r, const char *op, relay_status status, char **out,
                      relay_call *call, relay_error *err);
/* A copy of the script's object `key` ("leaseExtra", "binding"), or NULL. */
json_object *fs_script_obj(fs_state *st, const char *key);

#endif
