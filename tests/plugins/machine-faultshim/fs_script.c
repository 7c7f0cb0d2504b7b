/*
 * machine-faultshim: the script (fs.h). Every function that reads or changes
 * the rules, the script document or the log holds fs_state.lock.
 */
#include "fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The faults by name, in fs_fault order. */
static const char *const fault_names[] = {"fail", "drop", "delay", "hang", "corrupt"};

/* Every operation a rule may name: those faultshim.c matches a call of. */
static const char *const op_names[] = {
    "acquire",
    "renew",
    "inspect",
    "release",
    "verify_destroyed",
    "images",
    "health",
    "catalog",
    "find_by_purpose",
    "doctor",
    "console_capabilities",
    "console_resolve",
    "console_open",
    "console_cancel",
    "open",
    "exec",
    "push",
    "pull",
    "stream_open",
    "stream_write",
    "stream_read",
};

/* Ceilings of a rule's numbers: a script past them is a mistake. */
#define FS_MAX_DELAY_MS 86400000 /* a day: a "hang" may stand for a backend that never answers */
#define FS_MAX_COUNT    1000000

/* ---- the script ----------------------------------------------------------- */

const char *fs_json_str(json_object *obj, const char *key)
{
	json_object *v = NULL;
	return json_object_object_get_ex(obj, key, &v) && json_object_is_type(v, json_type_string)
	           ? json_object_get_string(v)
	           : NULL;
}

static relay_status status_named(const char *name, relay_status *out)
{
	for (int s = 1; s < RELAY_STATUS_COUNT_; s++)
		if (name && strcmp(name, relay_status_str((relay_status)s)) == 0) {
			*out = (relay_status)s;
			return RELAY_OK;
		}
	return RELAY_E_INVALID_ARGUMENT;
}

bool fs_op_known(const char *op)
{
	for (size_t i = 0; op && i < sizeof op_names / sizeof op_names[0]; i++)
		if (strcmp(op, op_names[i]) == 0)
			return true;
	return false;
}

/* The integer member `key` of rule `r` into *out when present: RELAY_OK,
 * or the refusal of a value that is no integer in [lo, hi]. */
static relay_status rule_int(fs_state *st, json_object *r, const char *key, int64_t lo, int64_t hi,
                             int64_t *out, relay_error *err)
{
	json_object *v = NULL;
	if (!json_object_object_get_ex(r, key, &v))
		return RELAY_OK;
	int64_t n = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : lo - 1;
	if (n < lo || n > hi)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: \"%s\" must be an integer from %lld to %lld", FS_NAME, key,
		                           (long long)lo, (long long)hi);
	*out = n;
	return RELAY_OK;
}

/* The status a rule answers when it names none: the stream operations'
 * own failures (relay/transport.h), else RELAY_E_UNAVAILABLE. */
static relay_status default_code(const char *op)
{
	if (strcmp(op, "stream_open") == 0)
		return RELAY_E_TRANSIENT;
	if (strcmp(op, "stream_write") == 0 || strcmp(op, "stream_read") == 0)
		return RELAY_E_INDETERMINATE;
	return RELAY_E_UNAVAILABLE;
}

static relay_status parse_rule(fs_state *st, json_object *r, relay_error *err)
{
	if (st->rule_count == FS_MAX_RULES)
		return st->host->error_set(err, RELAY_E_TOO_LARGE, 0, "%s: at most %d faults", FS_NAME,
		                           FS_MAX_RULES);
	fs_rule *rule = &st->rules[st->rule_count];
	memset(rule, 0, sizeof *rule);
	const char *op = fs_json_str(r, "op"), *fault = fs_json_str(r, "fault"),
	           *match = fs_json_str(r, "match"), *reason = fs_json_str(r, "reason");
	if (op == NULL || fault == NULL)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: a fault needs an \"op\" and a \"fault\"", FS_NAME);
	if (!fs_op_known(op))
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: unknown op %s; name an operation the shim forwards, such "
		                           "as \"acquire\", \"exec\" or \"stream_write\"",
		                           FS_NAME, op);
	if ((match && strlen(match) >= sizeof rule->match) ||
	    (reason && strlen(reason) >= sizeof rule->reason))
		return st->host->error_set(
		    err, RELAY_E_TOO_LARGE, 0, "%s: a fault's \"%s\" is longer than %zu bytes", FS_NAME,
		    match && strlen(match) >= sizeof rule->match ? "match" : "reason",
		    (match && strlen(match) >= sizeof rule->match ? sizeof rule->match
		                                                  : sizeof rule->reason) -
		        1);
	snprintf(rule->op, sizeof rule->op, "%s", op);
	snprintf(rule->match, sizeof rule->match, "%s", match ? match : "");
	snprintf(rule->reason, sizeof rule->reason, "%s", reason ? reason : "");
	int64_t nth = 0, times = -2, delay_ms = 0;
	relay_status s = rule_int(st, r, "nth", 0, FS_MAX_COUNT, &nth, err);
	if (s == RELAY_OK)
		s = rule_int(st, r, "times", -1, FS_MAX_COUNT, &times, err);
	if (s == RELAY_OK)
		s = rule_int(st, r, "delayMs", 0, FS_MAX_DELAY_MS, &delay_ms, err);
	if (s != RELAY_OK)
		return s;
	rule->nth = (unsigned)nth;
	rule->times = times == -2 ? (rule->nth ? 1 : -1) : (int)times;
	rule->delay_ms = (unsigned)delay_ms;
	rule->code = default_code(op);
	size_t f = 0;
	while (f < sizeof fault_names / sizeof fault_names[0] && strcmp(fault, fault_names[f]) != 0)
		f++;
	if (f == sizeof fault_names / sizeof fault_names[0] || (f == FS_CORRUPT && strcmp(op, "pull") != 0))
		return st->host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: unknown fault %s; accepted: fail, drop, delay, hang, corrupt (pull only)", FS_NAME,
		    fault);
	rule->fault = (fs_fault)f;
	const char *code = fs_json_str(r, "code");
	if (code && status_named(code, &rule->code) != RELAY_OK)
		return st->host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: unknown code %s; give a name relay_status_str answers, such as "
		    "\"unavailable\"",
		    FS_NAME, code);
	st->rule_count++;
	return RELAY_OK;
}

relay_status fs_parse_faults(fs_state *st, json_object *faults, relay_error *err)
{
	if (faults == NULL)
		return RELAY_OK;
	if (!json_object_is_type(faults, json_type_array))
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: \"faults\" must be an array", FS_NAME);
	for (size_t i = 0; i < json_object_array_length(faults); i++) {
		relay_status s = parse_rule(st, json_object_array_get_idx(faults, i), err);
		if (s != RELAY_OK)
			return s;
	}
	return RELAY_OK;
}

/* Reads the control file again when it changed since the last read (under
 * st->lock). A file that is missing or not a script keeps the rules there
 * were, with a warning: a test writing it replaces it whole (rename). */
static void fs_reload(fs_state *st)
{
	struct stat sb;
	if (st->control[0] == '\0' || stat(st->control, &sb) != 0)
		return;
	if (sb.st_mtim.tv_sec == st->control_mtime.tv_sec &&
	    sb.st_mtim.tv_nsec == st->control_mtime.tv_nsec && sb.st_size == st->control_size &&
	    sb.st_ino == st->control_ino)
		return;
	json_object *doc = json_object_from_file(st->control), *faults = NULL;
	fs_state fresh;
	memset(&fresh, 0, sizeof fresh);
	fresh.host = st->host;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (!json_object_object_get_ex(doc, "faults", &faults) ||
	    fs_parse_faults(&fresh, faults, &err) != RELAY_OK) {
		st->host->log(RELAY_LOG_WARNING, FS_NAME,
		              "the fault script %s is not {\"faults\": [...]}: %s", st->control,
		              err.message[0] ? err.message : "no faults array");
	} else {
		memcpy(st->rules, fresh.rules, sizeof st->rules);
		st->rule_count = fresh.rule_count;
		json_object_put(st->doc);
		st->doc = json_object_get(doc);
	}
	st->control_mtime = sb.st_mtim;
	st->control_size = sb.st_size;
	st->control_ino = sb.st_ino;
	json_object_put(doc);
}

/* The rule that applies to this call of `op` with text argument `arg`
 * (may be NULL), counting it; NULL for none. The rule is copied to *copy
 * (a reload may replace the table while the call runs). */
const fs_rule *fs_match(fs_state *st, const char *op, const char *arg, fs_rule *copy)
{
	const fs_rule *hit = NULL;
	pthread_mutex_lock(&st->lock);
	fs_reload(st);
	for (size_t i = 0; i < st->rule_count; i++) {
		fs_rule *r = &st->rules[i];
		if (strcmp(r->op, op) != 0 || (r->match[0] && (arg == NULL || strstr(arg, r->match) == NULL)))
			continue;
		r->seen++;
		if (hit == NULL && r->seen >= (r->nth ? r->nth : 1) && (r->times < 0 || r->used < r->times)) {
			r->used++;
			*copy = *r;
			hit = copy;
		}
	}
	pthread_mutex_unlock(&st->lock);
	return hit;
}

/* One line of the operation log: when a call begins (so a test sees a
 * call that hangs), and when it ends (`end`: op "<op>:end" with its result). */
void fs_log(fs_state *st, const char *op, const char *arg, int64_t ttl_ms, const fs_rule *r, bool end,
            relay_status status)
{
	if (st->log[0] == '\0')
		return;
	json_object *line = json_object_new_object();
	char name[48];
	snprintf(name, sizeof name, "%s%s", op, end ? ":end" : "");
	json_object_object_add(line, "op", json_object_new_string(name));
	json_object_object_add(line, "arg", arg ? json_object_new_string(arg) : NULL);
	json_object_object_add(line, "pid", json_object_new_int64((int64_t)getpid()));
	json_object_object_add(line, "timeMs", json_object_new_int64(st->host->now_ms()));
	if (ttl_ms >= 0)
		json_object_object_add(line, "ttlMs", json_object_new_int64(ttl_ms));
	json_object_object_add(line, "fault", r ? json_object_new_string(fault_names[r->fault]) : NULL);
	if (end)
		json_object_object_add(
		    line, "result",
		    json_object_new_string(status == RELAY_OK ? "ok" : relay_status_str(status)));
	pthread_mutex_lock(&st->lock);
	FILE *f = fopen(st->log, "a");
	if (f) {
		fprintf(f, "%s\n", json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN));
		fclose(f);
	}
	pthread_mutex_unlock(&st->lock);
	json_object_put(line);
}

static void sleep_ms(unsigned ms)
{
	struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&left, &left) != 0 && errno == EINTR) {
	}
}

/* Waits `ms` milliseconds in slices, watching the call (NULL: a stream
 * operation, which has none): true when it was cancelled first. */
static bool fs_wait(fs_state *st, unsigned ms, relay_call *call)
{
	for (unsigned left = ms; left > 0;) {
		if (call && st->host->call_cancelled(call))
			return true;
		unsigned slice = left < 50 ? left : 50;
		sleep_ms(slice);
		left -= slice;
	}
	return false;
}

/* Before forwarding: RELAY_OK to forward, else the injected failure (or
 * RELAY_E_CANCELLED for a call cancelled during its delay). */
relay_status fs_before(fs_state *st, const fs_rule *r, const char *op, relay_call *call, relay_error *err)
{
	if (r == NULL)
		return RELAY_OK;
	if (r->fault == FS_DELAY && fs_wait(st, r->delay_ms, call))
		return st->host->error_set(err, RELAY_E_CANCELLED, 0,
		                           "%s: %s was cancelled during its scripted delay", FS_NAME, op);
	if (r->fault != FS_FAIL)
		return RELAY_OK;
	st->host->log(RELAY_LOG_WARNING, FS_NAME, "fault script: %s fails with %s", op,
	              relay_status_str(r->code));
	if (r->reason[0])
		return st->host->error_set(err, r->code, 0, "%s", r->reason);
	return st->host->error_set(err, r->code, 0, "%s: %s failed by the fault script (%s)", FS_NAME, op,
	                           relay_status_str(r->code));
}

/* A copy of the script's object `key` ("leaseExtra", "binding"), or NULL;
 * taken under the lock, as a reload may replace the script. */
json_object *fs_script_obj(fs_state *st, const char *key)
{
	json_object *v = NULL, *copy = NULL;
	pthread_mutex_lock(&st->lock);
	fs_reload(st);
	if (json_object_object_get_ex(st->doc, key, &v) && json_object_is_type(v, json_type_object))
		json_object_deep_copy(v, &copy, NULL);
	pthread_mutex_unlock(&st->lock);
	return copy;
}

/* The lease document *out with leaseExtra's members merged in. */
static void fs_merge_extra(fs_state *st, char **out)
{
	json_object *extra = fs_script_obj(st, "leaseExtra");
	json_object *doc = extra && *out ? json_tokener_parse(*out) : NULL;
	if (json_object_is_type(doc, json_type_object)) {
		json_object_object_foreach(extra, key, value)
		{
			json_object_object_add(doc, key, json_object_get(value));
		}
		char *merged = st->host->strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
		if (merged) {
			st->host->free(*out);
			*out = merged;
		}
	}
	json_object_put(doc);
	json_object_put(extra);
}

/* After forwarding: a "drop" turns a success into RELAY_E_INDETERMINATE
 * and frees what the call answered; a "hang" holds the answer back (and
 * frees it when the call is cancelled meanwhile); a lease document gets
 * leaseExtra. */
relay_status fs_after(fs_state *st, const fs_rule *r, const char *op, relay_status status, char **out,
                      relay_call *call, relay_error *err)
{
	if (status != RELAY_OK)
		return status;
	bool lost = false;
	if (r && r->fault == FS_DROP) {
		st->host->log(RELAY_LOG_WARNING, FS_NAME, "fault script: the answer of %s is dropped", op);
		status = st->host->error_set(
		    err, RELAY_E_INDETERMINATE, 0,
		    "%s: the answer of %s was lost after it succeeded (fault script)", FS_NAME, op);
		lost = true;
	} else if (r && r->fault == FS_HANG && fs_wait(st, r->delay_ms, call)) {
		status = st->host->error_set(err, RELAY_E_CANCELLED, 0,
		                             "%s: %s was cancelled while its answer was held back (it took "
		                             "effect)",
		                             FS_NAME, op);
		lost = true;
	}
	if (lost && out) {
		st->host->free(*out);
		*out = NULL;
	} else if (out &&
	           (strcmp(op, "acquire") == 0 || strcmp(op, "renew") == 0 || strcmp(op, "inspect") == 0)) {
		fs_merge_extra(st, out);
	}
	return status;
}
