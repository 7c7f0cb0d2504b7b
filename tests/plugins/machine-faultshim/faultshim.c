/*
 * machine-faultshim — a machine + transport plugin that wraps another one
 * and injects faults by a script (SQLite's test_vfs.c over a real VFS is
 * the model). Every operation is forwarded to the real plugin unchanged;
 * a rule of the script that matches a call changes what the caller sees:
 *
 *   "fail"   the call is not forwarded; it answers `code` (a definite
 *            failure such as RELAY_E_UNAVAILABLE, or RELAY_E_INDETERMINATE
 *            for "the request may not have arrived");
 *   "drop"   the call is forwarded and, when it succeeded, its answer is
 *            lost: out-parameters are freed and it answers
 *            RELAY_E_INDETERMINATE (the backend acted, the caller cannot
 *            know it);
 *   "delay"  the call is forwarded after `delayMs` milliseconds (a call
 *            cancelled meanwhile answers RELAY_E_CANCELLED unforwarded);
 *   "hang"   the call is forwarded at once and its answer held back
 *            `delayMs` milliseconds: the backend acted, so a relay killed
 *            meanwhile leaves the effect behind; a call cancelled meanwhile
 *            answers RELAY_E_CANCELLED (its answer freed);
 *   "corrupt" (pull only) the file is pulled and its last byte changed on
 *            the host while the answer's facts still describe the guest's
 *            file: a transport that does not notice.
 *
 * Options (init configuration "options", or the environment for the
 * relay's MCP_RELAY_BACKEND use):
 *   {"plugin": "<path of the real plugin .so>"      MCP_RELAY_FAULTSHIM_PLUGIN
 *    "options": {...the real plugin's options},     MCP_RELAY_FAULTSHIM_OPTIONS
 *    "faults": [{"op": "acquire"|"release"|..., "match": "<substring of the
 *                call's first text argument: spec, lease or purpose>",
 *                "nth": <1-based among matching calls: the first it applies
 *                        to; 0 or absent: from the first>,
 *                "times": <how many calls it applies to; -1: no end; absent:
 *                          1 with "nth", no end without>,
 *                "fault": "fail"|"drop"|"delay"|"hang"|"corrupt",
 *                "code": "<status name of relay_status_str, e.g.
 *                         \"unavailable\", \"at capacity\">",
 *                "reason": "<the failure's message; default: the shim's>",
 *                "delayMs": <ms>}, ...]}
 *                                                   MCP_RELAY_FAULTSHIM_FAULTS
 * The first rule that applies to a call wins, so a list is a sequence:
 * [{"op":"acquire","fault":"fail","code":"at capacity","times":2}] refuses
 * twice and then forwards.
 *
 * A script that changes while the relay runs (MCP_RELAY_FAULTSHIM_CONTROL,
 * else options "control"): a file holding {"faults": [...]}, read again at
 * every operation when it changed (its counters start again); while it is
 * named, it is the script. Beside "faults" (there or in the options),
 * "leaseExtra" holds members merged into every lease document acquire,
 * renew and inspect answer ({"ssh": {...}} for a lease the core reaches
 * through transfer-ssh, {"display": ":5"} for a capture plugin), and
 * "binding" answers binding in place of the wrapped plugin (another
 * environment's store).
 *
 * The operation log (MCP_RELAY_FAULTSHIM_LOG, else options "log"): {"op":
 * "init"} when a process loads the shim, then two JSON lines per call, one
 * when it begins, {"op", "arg" (its first text argument: spec, lease or
 * purpose; or null), "pid", "timeMs" (host->now_ms), "ttlMs" (renew only),
 * "fault" (the rule's, or null)}, and one when it ends, the same with "op"
 * "<op>:end" and "result" ("ok" or the status name). Tests read it to count
 * what the backend was asked.
 *
 * The transport's traits are the wrapped plugin's when
 * MCP_RELAY_FAULTSHIM_PLUGIN names it as the loader calls the entry, and
 * none when only options.plugin does. The long-lived stream
 * (RELAY_TRANSPORT_STREAM, spec/guest.md §17) is forwarded too, with its
 * own ops: "stream_open" (matched against its argv joined by spaces;
 * "fail" answers `code`, by default RELAY_E_TRANSIENT, nothing started;
 * "drop" starts it, closes it and answers RELAY_E_INDETERMINATE),
 * "stream_write" (matched against the request, its bytes outside printable
 * ASCII as '.'; "fail" hands nothing over and breaks the stream, "drop"
 * hands the request over and then breaks the stream, so the answer is
 * lost) and "stream_read" ("fail" breaks the stream unread, "drop" loses
 * what was read and breaks it; logged only when a rule applies, as the
 * core reads in slices); the default code of both is
 * RELAY_E_INDETERMINATE. A broken stream answers RELAY_E_INDETERMINATE to
 * every write and read, unforwarded, until it is closed. "delay" and
 * "hang" wait before and after forwarding (a stream operation has no call
 * to cancel them).
 * The real plugin's options are options.options, else the JSON of
 * MCP_RELAY_FAULTSHIM_OPTIONS (the relay's use), else {}.
 * The real plugin gets the same configuration with its own "options". An
 * optional operation it lacks answers RELAY_E_UNSUPPORTED (the shim's table
 * is fixed before init), except health, which then answers RELAY_OK with
 * no document (nothing to check, as the NULL slot means); a real plugin
 * without a transport answers RELAY_E_UNSUPPORTED at open. `mcp-relay plugin-test` checks 66 and 67 use
 * purposes with "-retry-" and "-indeterminate-" for their faults
 * (docs/development.md, "The conformance runner").
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"

static relay_status fs_missing(fs_state *st, const char *op, unsigned flags, relay_error *err)
{
	if (flags != 0)
		return st->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown %s flags 0x%x",
		                           FS_NAME, op, flags);
	return st->host->error_set(err, RELAY_E_UNSUPPORTED, 0, "%s: the wrapped plugin has no %s", FS_NAME,
	                           op);
}

/* One forwarded operation with an out-parameter: `call_expr` calls the
 * real plugin and assigns `status`. */
#define FS_FORWARD(st, opname, arg, ttl, call, out, err, present, call_expr)                                 \
	do {                                                                                                 \
		if (out)                                                                                     \
			*(out) = NULL;                                                                       \
		if (!(present))                                                                              \
			return fs_missing((st), (opname), flags, (err));                                     \
		fs_rule copy_;                                                                               \
		const fs_rule *rule_ = fs_match((st), (opname), (arg), &copy_);                              \
		fs_log((st), (opname), (arg), (ttl), rule_, false, RELAY_OK);                                \
		relay_status status = fs_before((st), rule_, (opname), (call), (err));                       \
		if (status == RELAY_OK) {                                                                    \
			status = (call_expr);                                                                \
			status = fs_after((st), rule_, (opname), status, (out), (call), (err));              \
		}                                                                                            \
		fs_log((st), (opname), (arg), (ttl), rule_, true, status);                                   \
		return status;                                                                               \
	} while (0)

/* ---- machine -------------------------------------------------------------- */

static relay_status fs_acquire(relay_plugin_state *s, const char *spec, relay_call *call, unsigned flags,
                               char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "acquire", spec, -1, call, out, err, 1,
	           st->machine.acquire(st->inner_state, spec, call, flags, out, err));
}

static relay_status fs_renew(relay_plugin_state *s, const char *lease, uint64_t ttl_ms, relay_call *call,
                             unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "renew", lease, (int64_t)ttl_ms, call, out, err, 1,
	           st->machine.renew(st->inner_state, lease, ttl_ms, call, flags, out, err));
}

static relay_status fs_inspect(relay_plugin_state *s, const char *lease, relay_call *call, unsigned flags,
                               char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "inspect", lease, -1, call, out, err, 1,
	           st->machine.inspect(st->inner_state, lease, call, flags, out, err));
}

static relay_status fs_release(relay_plugin_state *s, const char *lease, const char *reason, relay_call *call,
                               unsigned flags, relay_error *err)
{
	fs_state *st = s;
	char **none = NULL;
	FS_FORWARD(st, "release", lease, -1, call, none, err, 1,
	           st->machine.release(st->inner_state, lease, reason, call, flags, err));
}

static relay_status fs_verify_destroyed(relay_plugin_state *s, const char *lease, relay_call *call,
                                        unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "verify_destroyed", lease, -1, call, out, err, 1,
	           st->machine.verify_destroyed(st->inner_state, lease, call, flags, out, err));
}

static relay_status fs_images(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "images", NULL, -1, call, out, err, 1,
	           st->machine.images(st->inner_state, call, flags, out, err));
}

/* Without the real plugin's health there is no identity to check: the
 * answer a NULL slot stands for (the core then skips the check). */
static relay_status fs_health(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	fs_state *st = s;
	if (st->machine.health == NULL && flags == 0) {
		if (out)
			*out = NULL;
		return RELAY_OK;
	}
	FS_FORWARD(st, "health", NULL, -1, call, out, err, st->machine.health != NULL,
	           st->machine.health(st->inner_state, call, flags, out, err));
}

static relay_status fs_catalog(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                               relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "catalog", NULL, -1, call, out, err, st->machine.catalog != NULL,
	           st->machine.catalog(st->inner_state, call, flags, out, err));
}

static relay_status fs_find_by_purpose(relay_plugin_state *s, const char *purpose, relay_call *call,
                                       unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "find_by_purpose", purpose, -1, call, out, err, st->machine.find_by_purpose != NULL,
	           st->machine.find_by_purpose(st->inner_state, purpose, call, flags, out, err));
}

static relay_status fs_doctor(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "doctor", NULL, -1, call, out, err, st->machine.doctor != NULL,
	           st->machine.doctor(st->inner_state, call, flags, out, err));
}

/* The wrapped plugin's typed console (ABI 1.7), forwarded like the rest
 * (op names "console_capabilities", "console_resolve", ...). */
static relay_status fs_console_capabilities(relay_plugin_state *s, relay_call *call, unsigned flags,
                                            char **out, relay_error *err)
{
	fs_state *st = s;
	const relay_machine_console_ops *c = st->machine.console_ops;
	FS_FORWARD(st, "console_capabilities", NULL, -1, call, out, err, c != NULL,
	           c->capabilities(st->inner_state, call, flags, out, err));
}

static relay_status fs_console_resolve(relay_plugin_state *s, const char *lease, relay_call *call,
                                       unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	const relay_machine_console_ops *c = st->machine.console_ops;
	FS_FORWARD(st, "console_resolve", lease, -1, call, out, err, c != NULL,
	           c->resolve(st->inner_state, lease, call, flags, out, err));
}

/* open and cancel, forwarded as "console_open" and "console_cancel". */
static relay_status fs_console_attempt(relay_plugin_state *s, bool open, const char *lease,
                                       const char *console_id, const char *attempt_id, relay_call *call,
                                       unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	const relay_machine_console_ops *c = st->machine.console_ops;
	FS_FORWARD(st, open ? "console_open" : "console_cancel", lease, -1, call, out, err, c != NULL,
	           (open ? c->open : c->cancel)(st->inner_state, lease, console_id, attempt_id, call, flags,
	                                        out, err));
}

static relay_status fs_console_open(relay_plugin_state *s, const char *lease, const char *console_id,
                                    const char *attempt_id, relay_call *call, unsigned flags, char **out,
                                    relay_error *err)
{
	return fs_console_attempt(s, true, lease, console_id, attempt_id, call, flags, out, err);
}

static relay_status fs_console_cancel(relay_plugin_state *s, const char *lease, const char *console_id,
                                      const char *attempt_id, relay_call *call, unsigned flags, char **out,
                                      relay_error *err)
{
	return fs_console_attempt(s, false, lease, console_id, attempt_id, call, flags, out, err);
}

static const relay_machine_console_ops fs_console_ops = {
    .struct_size = sizeof(relay_machine_console_ops),
    .capabilities = fs_console_capabilities,
    .resolve = fs_console_resolve,
    .open = fs_console_open,
    .cancel = fs_console_cancel,
};

/* The real plugin's binding, or the record the core would make for it. */
static relay_status fs_binding(relay_plugin_state *s, unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	*out = NULL;
	json_object *scripted = flags == 0 ? fs_script_obj(st, "binding") : NULL;
	if (scripted) {
		*out = st->host->strdup(json_object_to_json_string_ext(scripted, JSON_C_TO_STRING_PLAIN));
		json_object_put(scripted);
		return *out ? RELAY_OK
		            : st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory",
		                                  FS_NAME);
	}
	if (st->machine.binding)
		return st->machine.binding(st->inner_state, flags, out, err);
	if (flags != 0)
		return fs_missing(st, "binding", flags, err);
	char text[512];
	snprintf(text, sizeof text,
	         "{\"machine\":\"%s\",\"endpoint\":null,\"store\":null,\"environmentFingerprint\":null}",
	         st->inner->name);
	*out = st->host->strdup(text);
	return *out ? RELAY_OK
	            : st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", FS_NAME);
}

static const relay_machine_ops fs_machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = fs_acquire,
    .renew = fs_renew,
    .inspect = fs_inspect,
    .release = fs_release,
    .verify_destroyed = fs_verify_destroyed,
    .images = fs_images,
    .health = fs_health,
    .catalog = fs_catalog,
    .find_by_purpose = fs_find_by_purpose,
    .binding = fs_binding,
    .doctor = fs_doctor,
    .console_ops = &fs_console_ops,
    /* egress_listeners: NULL, so the relay refuses "allow" and "internet"
     * guests of a wrapped plugin at acquire. */
};

/* ---- transport ------------------------------------------------------------ */

static relay_status fs_open(relay_plugin_state *s, const char *lease, relay_call *call, unsigned flags,
                            relay_transport_conn **conn_out, relay_error *err)
{
	fs_state *st = s;
	*conn_out = NULL;
	if (st->transport.open == NULL)
		return fs_missing(st, "open", flags, err);
	fs_rule copy;
	const fs_rule *rule = fs_match(st, "open", lease, &copy);
	fs_log(st, "open", lease, -1, rule, false, RELAY_OK);
	relay_status status = fs_before(st, rule, "open", call, err);
	if (status == RELAY_OK)
		status = st->transport.open(st->inner_state, lease, call, flags, conn_out, err);
	if (rule && status == RELAY_OK &&
	    (status = fs_after(st, rule, "open", status, NULL, call, err)) != RELAY_OK) {
		st->transport.close(st->inner_state, *conn_out, 0);
		*conn_out = NULL;
	}
	fs_log(st, "open", lease, -1, rule, true, status);
	return status;
}

static void fs_close(relay_plugin_state *s, relay_transport_conn *conn, unsigned flags)
{
	fs_state *st = s;
	if (st->transport.close)
		st->transport.close(st->inner_state, conn, flags);
}

static relay_status fs_exec(relay_plugin_state *s, relay_transport_conn *conn, const relay_exec_request *req,
                            relay_call *call, unsigned flags, relay_exec_result *res, relay_error *err)
{
	fs_state *st = s;
	const char *arg =
	    req && req->argv ? req->argv[req->argv[0] && req->argv[1] && req->argv[2] ? 2 : 0] : NULL;
	fs_rule copy;
	const fs_rule *rule = fs_match(st, "exec", arg, &copy);
	fs_log(st, "exec", arg, -1, rule, false, RELAY_OK);
	relay_status status = fs_before(st, rule, "exec", call, err);
	if (status == RELAY_OK)
		status = st->transport.exec(st->inner_state, conn, req, call, flags, res, err);
	if (rule && status == RELAY_OK &&
	    (status = fs_after(st, rule, "exec", status, NULL, call, err)) != RELAY_OK) {
		st->host->free(res->out);
		st->host->free(res->err);
		res->out = res->err = NULL;
	}
	fs_log(st, "exec", arg, -1, rule, true, status);
	return status;
}

static relay_status fs_push(relay_plugin_state *s, relay_transport_conn *conn, const char *local,
                            const char *remote, relay_call *call, unsigned flags, char **out,
                            relay_error *err)
{
	fs_state *st = s;
	FS_FORWARD(st, "push", remote, -1, call, out, err, 1,
	           st->transport.push(st->inner_state, conn, local, remote, call, flags, out, err));
}

/* The last byte of the regular file `path` changed in place (a tree is
 * left alone). */
static void corrupt_last_byte(fs_state *st, const char *path)
{
	FILE *f = fopen(path, "r+b");
	int c = f && fseek(f, -1, SEEK_END) == 0 ? fgetc(f) : EOF;
	if (c != EOF && fseek(f, -1, SEEK_END) == 0 && fputc(c ^ 0x5a, f) != EOF)
		st->host->log(RELAY_LOG_WARNING, FS_NAME, "fault script: the pull of %s arrives corrupted",
		              path);
	if (f)
		fclose(f);
}

static relay_status fs_pull(relay_plugin_state *s, relay_transport_conn *conn, const char *remote,
                            const char *local, relay_call *call, unsigned flags, char **out, relay_error *err)
{
	fs_state *st = s;
	if (out)
		*out = NULL;
	fs_rule copy;
	const fs_rule *rule = fs_match(st, "pull", remote, &copy);
	fs_log(st, "pull", remote, -1, rule, false, RELAY_OK);
	relay_status status = fs_before(st, rule, "pull", call, err);
	if (status == RELAY_OK)
		status = st->transport.pull(st->inner_state, conn, remote, local, call, flags, out, err);
	if (status == RELAY_OK && rule && rule->fault == FS_CORRUPT)
		corrupt_last_byte(st, local);
	else
		status = fs_after(st, rule, "pull", status, out, call, err);
	fs_log(st, "pull", remote, -1, rule, true, status);
	return status;
}

/* ---- the stream (ABI 1.4) ------------------------------------------------- */

/* A stream of the wrapped plugin, and whether the script broke it: a
 * broken stream answers RELAY_E_INDETERMINATE to every write and read,
 * unforwarded, until it is closed (relay/transport.h: it may only be
 * closed). */
typedef struct fs_stream {
	relay_transport_stream *inner;
	bool broken;
} fs_stream;

/* `len` bytes as the text a rule matches and the log shows: at most
 * sizeof out - 1 of them, every byte outside printable ASCII a '.'. */
static const char *stream_text(const void *data, size_t len, char *out, size_t out_len)
{
	const unsigned char *b = data;
	size_t n = len < out_len - 1 ? len : out_len - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '.';
	out[n] = '\0';
	return out;
}

static relay_status fs_broken(fs_state *st, const char *op, relay_error *err)
{
	return st->host->error_set(err, RELAY_E_INDETERMINATE, 0,
	                           "%s: %s on a stream the fault script broke; only close it", FS_NAME, op);
}

static relay_status fs_stream_open(relay_plugin_state *s, relay_transport_conn *conn,
                                   const relay_exec_request *req, relay_call *call, unsigned flags,
                                   relay_transport_stream **stream_out, relay_error *err)
{
	fs_state *st = s;
	*stream_out = NULL;
	if (st->transport.stream_open == NULL)
		return fs_missing(st, "stream_open", flags, err);
	char arg[1024] = "";
	for (size_t i = 0, used = 0; req && req->argv && req->argv[i] && used < sizeof arg - 1; i++)
		used += (size_t)snprintf(arg + used, sizeof arg - used, "%s%s", i ? " " : "", req->argv[i]);
	fs_stream *fs = st->host->alloc(sizeof *fs);
	if (fs == NULL)
		return st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", FS_NAME);
	fs->inner = NULL;
	fs->broken = false;
	fs_rule copy;
	const fs_rule *rule = fs_match(st, "stream_open", arg, &copy);
	fs_log(st, "stream_open", arg, -1, rule, false, RELAY_OK);
	relay_status status = fs_before(st, rule, "stream_open", call, err);
	if (status == RELAY_OK)
		status = st->transport.stream_open(st->inner_state, conn, req, call, flags, &fs->inner, err);
	/* A drop: the command started, the caller never hears of it. */
	if (status == RELAY_OK && rule &&
	    (status = fs_after(st, rule, "stream_open", status, NULL, call, err)) != RELAY_OK) {
		st->transport.stream_close(st->inner_state, fs->inner, 0);
		fs->inner = NULL;
	}
	fs_log(st, "stream_open", arg, -1, rule, true, status);
	if (status != RELAY_OK) {
		st->host->free(fs);
		return status;
	}
	*stream_out = fs;
	return RELAY_OK;
}

/* "fail": not forwarded, the stream broken; "drop": forwarded, then the
 * stream broken (what the command answers is lost); "delay" and "hang":
 * the wait before or after forwarding. */
static relay_status fs_stream_write(relay_plugin_state *s, relay_transport_stream *stream, const void *data,
                                    size_t len, uint64_t timeout_ms, unsigned flags, relay_error *err)
{
	fs_state *st = s;
	fs_stream *fs = stream;
	char arg[1024];
	stream_text(data, len, arg, sizeof arg);
	if (fs->broken)
		return fs_broken(st, "stream_write", err);
	fs_rule copy;
	const fs_rule *rule = fs_match(st, "stream_write", arg, &copy);
	fs_log(st, "stream_write", arg, -1, rule, false, RELAY_OK);
	relay_status status = fs_before(st, rule, "stream_write", NULL, err);
	if (status == RELAY_OK)
		status =
		    st->transport.stream_write(st->inner_state, fs->inner, data, len, timeout_ms, flags, err);
	if (status == RELAY_OK && rule && rule->fault == FS_HANG)
		(void)fs_after(st, rule, "stream_write", status, NULL, NULL, err);
	if (rule && (rule->fault == FS_FAIL || rule->fault == FS_DROP)) {
		fs->broken = true;
		st->host->log(RELAY_LOG_WARNING, FS_NAME, "fault script: the stream is broken after %s",
		              rule->fault == FS_FAIL ? "a write it refused" : "a request it forwarded");
	}
	fs_log(st, "stream_write", arg, -1, rule, true, status);
	return status;
}

/* Logged only when a rule applies: the core reads in slices of 100 ms
 * while it waits for an answer. "fail": not forwarded, the stream broken;
 * "drop": forwarded, what it read lost, the stream broken. */
static relay_status fs_stream_read(relay_plugin_state *s, relay_transport_stream *stream, void *buf,
                                   size_t cap, uint64_t timeout_ms, unsigned flags, size_t *got_out,
                                   relay_error *err)
{
	fs_state *st = s;
	fs_stream *fs = stream;
	*got_out = 0;
	if (fs->broken)
		return fs_broken(st, "stream_read", err);
	fs_rule copy;
	const fs_rule *rule = fs_match(st, "stream_read", NULL, &copy);
	if (rule)
		fs_log(st, "stream_read", NULL, -1, rule, false, RELAY_OK);
	relay_status status = fs_before(st, rule, "stream_read", NULL, err);
	if (status == RELAY_OK)
		status = st->transport.stream_read(st->inner_state, fs->inner, buf, cap, timeout_ms, flags,
		                                   got_out, err);
	if (rule && rule->fault == FS_DROP && status == RELAY_OK) {
		*got_out = 0;
		status = st->host->error_set(err, RELAY_E_INDETERMINATE, 0,
		                             "%s: what the stream read was lost (fault script)", FS_NAME);
	} else if (rule && rule->fault == FS_HANG && status == RELAY_OK) {
		(void)fs_after(st, rule, "stream_read", status, NULL, NULL, err);
	}
	if (rule && (rule->fault == FS_FAIL || rule->fault == FS_DROP))
		fs->broken = true;
	if (rule)
		fs_log(st, "stream_read", NULL, -1, rule, true, status);
	return status;
}

static void fs_stream_close(relay_plugin_state *s, relay_transport_stream *stream, unsigned flags)
{
	fs_state *st = s;
	fs_stream *fs = stream;
	if (fs == NULL)
		return;
	fs_log(st, "stream_close", NULL, -1, NULL, false, RELAY_OK);
	if (fs->inner)
		st->transport.stream_close(st->inner_state, fs->inner, flags);
	fs_log(st, "stream_close", NULL, -1, NULL, true, RELAY_OK);
	st->host->free(fs);
}

/* The traits the shim forwards as they are. */
#define FS_FORWARDED_TRAITS                                                                                  \
	(RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_GUEST_FACTS | RELAY_TRANSPORT_STDIO_BYTES |            \
	 RELAY_TRANSPORT_MERGED_OUTPUT | RELAY_TRANSPORT_STREAM | RELAY_TRANSPORT_EXEC_UNCANCELLABLE)

static const relay_transport_ops fs_transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    /* No traits when the wrapped plugin is named only at init (options.plugin):
     * the core serialises operations and verifies transfers through the
     * receiver. Named by MCP_RELAY_FAULTSHIM_PLUGIN, its traits are read when
     * the loader calls the entry (fs_entry_setup, below). */
    .traits = 0,
    .open = fs_open,
    .close = fs_close,
    .exec = fs_exec,
    .push = fs_push,
    .pull = fs_pull,
    /* Called only with RELAY_TRANSPORT_STREAM among the traits, which the
     * shim has when the wrapped plugin has it (fs_entry_setup). */
    .stream_open = fs_stream_open,
    .stream_write = fs_stream_write,
    .stream_read = fs_stream_read,
    .stream_close = fs_stream_close,
};

/* What the loader was given (fs_entry_setup, at the end). */
static relay_transport_ops fs_transport_live;

/* ---- init and fini --------------------------------------------------------- */

/* dlopen()s the real plugin (never closed, as the loader does) and checks
 * what the shim relies on. */
static relay_status load_inner(fs_state *st, const char *path, relay_error *err)
{
	void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (handle == NULL)
		return st->host->error_set(err, RELAY_E_NOT_FOUND, 0, "%s: cannot load %s: %s", FS_NAME, path,
		                           dlerror());
	relay_plugin_entry_fn entry = (relay_plugin_entry_fn)dlsym(handle, RELAY_PLUGIN_ENTRY_SYMBOL);
	const relay_plugin_descriptor *d = entry ? entry(st->host->abi_version) : NULL;
	if (d == NULL || !(d->kinds & RELAY_KIND_MACHINE) || d->machine == NULL ||
	    d->machine_ops_size < RELAY_MACHINE_OPS_MIN_SIZE)
		return st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                           "%s: %s is not a machine plugin of ABI major %u", FS_NAME, path,
		                           RELAY_ABI_VERSION_MAJOR);
	st->inner = d;
	relay_sized_copy(&st->machine, sizeof st->machine, d->machine, d->machine_ops_size);
	if ((d->kinds & RELAY_KIND_TRANSPORT) && d->transport != NULL &&
	    d->transport_ops_size >= RELAY_TRANSPORT_OPS_MIN_SIZE)
		relay_sized_copy(&st->transport, sizeof st->transport, d->transport, d->transport_ops_size);
	uint32_t declared = fs_transport_live.traits & ~st->transport.traits;
	if (declared != 0)
		return st->host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: the shim declared the traits 0x%x of MCP_RELAY_FAULTSHIM_PLUGIN "
		    "at load, which %s lacks: wrap the plugin that variable names",
		    FS_NAME, declared, path);
	return RELAY_OK;
}

/* The configuration for the real plugin: ours with its own "options"
 * (options.options, else MCP_RELAY_FAULTSHIM_OPTIONS, else {}). */
static char *inner_config(fs_state *st, json_object *config, json_object *options)
{
	json_object *copy = NULL;
	json_object_deep_copy(config, &copy, NULL);
	json_object *inner_options = NULL;
	const char *env = getenv("MCP_RELAY_FAULTSHIM_OPTIONS");
	if (json_object_object_get_ex(options, "options", &inner_options))
		json_object_object_add(copy, "options", json_object_get(inner_options));
	else if (env && (inner_options = json_tokener_parse(env)) != NULL)
		json_object_object_add(copy, "options", inner_options);
	else
		json_object_object_add(copy, "options", json_object_new_object());
	char *text = st->host->strdup(json_object_to_json_string_ext(copy, JSON_C_TO_STRING_PLAIN));
	json_object_put(copy);
	return text;
}

/* An option of ours, else the environment's `name` (the relay's MCP_RELAY_BACKEND use). */
static const char *option_or_env(json_object *options, const char *key, const char *name)
{
	const char *v = fs_json_str(options, key);
	return v ? v : getenv(name);
}

static relay_status fs_setup(fs_state *st, const char *config_json, relay_error *err)
{
	json_object *config = json_tokener_parse(config_json), *options = NULL, *faults = NULL;
	json_object_object_get_ex(config, "options", &options);
	const char *path = option_or_env(options, "plugin", "MCP_RELAY_FAULTSHIM_PLUGIN");
	json_object *env_faults = NULL;
	if (!json_object_object_get_ex(options, "faults", &faults) && getenv("MCP_RELAY_FAULTSHIM_FAULTS"))
		faults = env_faults = json_tokener_parse(getenv("MCP_RELAY_FAULTSHIM_FAULTS"));
	const char *control = option_or_env(options, "control", "MCP_RELAY_FAULTSHIM_CONTROL");
	const char *log = option_or_env(options, "log", "MCP_RELAY_FAULTSHIM_LOG");
	snprintf(st->control, sizeof st->control, "%s", control ? control : "");
	snprintf(st->log, sizeof st->log, "%s", log ? log : "");
	st->doc = json_object_get(options);
	relay_status status = RELAY_OK;
	char *inner = NULL;
	if (config == NULL || path == NULL)
		status = st->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                             "%s: name the plugin to wrap with options.plugin or "
		                             "MCP_RELAY_FAULTSHIM_PLUGIN",
		                             FS_NAME);
	if (status == RELAY_OK)
		status = fs_parse_faults(st, faults, err);
	if (status == RELAY_OK)
		status = load_inner(st, path, err);
	if (status == RELAY_OK && (inner = inner_config(st, config, options)) == NULL)
		status = st->host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", FS_NAME);
	if (status == RELAY_OK)
		status = st->inner->init(st->host, inner, 0, &st->inner_state, err);
	st->host->free(inner);
	json_object_put(env_faults);
	json_object_put(config);
	return status;
}

static relay_status fs_init(const relay_host *host, const char *config_json, unsigned flags,
                            relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown init flags 0x%x",
		                       FS_NAME, flags);
	fs_state *st = host->alloc(sizeof *st);
	if (st == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", FS_NAME);
	memset(st, 0, sizeof *st);
	st->host = host;
	pthread_mutex_init(&st->lock, NULL);
	relay_status status = fs_setup(st, config_json, err);
	if (status != RELAY_OK) {
		json_object_put(st->doc);
		pthread_mutex_destroy(&st->lock);
		host->free(st);
		return status;
	}
	fs_log(st, "init", NULL, -1, NULL, false, RELAY_OK);
	*state_out = st;
	return RELAY_OK;
}

static void fs_fini(relay_plugin_state *state)
{
	fs_state *st = state;
	if (st == NULL)
		return;
	if (st->inner->fini)
		st->inner->fini(st->inner_state);
	json_object_put(st->doc);
	pthread_mutex_destroy(&st->lock);
	st->host->free(st);
}

static const relay_plugin_descriptor fs_descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = FS_NAME,
    .version = "0.1.0",
    .description = "test shim: wraps a machine plugin and injects faults by a script",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .init = fs_init,
    .fini = fs_fini,
    .machine = &fs_machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &fs_transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

/* The descriptor the loader gets: fs_descriptor with the traits of the
 * plugin MCP_RELAY_FAULTSHIM_PLUGIN names (masked to FS_FORWARDED_TRAITS),
 * since the loader copies the transport table before init. Written once
 * under fs_entry_once, only read after: the one mutable global. */
static relay_plugin_descriptor fs_descriptor_live;
static pthread_once_t fs_entry_once = PTHREAD_ONCE_INIT;

static void fs_entry_setup(void)
{
	fs_transport_live = fs_transport_ops;
	fs_descriptor_live = fs_descriptor;
	fs_descriptor_live.transport = &fs_transport_live;
	const char *path = getenv("MCP_RELAY_FAULTSHIM_PLUGIN");
	void *handle = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL; /* never closed */
	relay_plugin_entry_fn entry =
	    handle ? (relay_plugin_entry_fn)dlsym(handle, RELAY_PLUGIN_ENTRY_SYMBOL) : NULL;
	const relay_plugin_descriptor *d = entry ? entry(RELAY_ABI_VERSION) : NULL;
	if (d && (d->kinds & RELAY_KIND_TRANSPORT) && d->transport &&
	    d->transport_ops_size >= RELAY_TRANSPORT_OPS_MIN_SIZE)
		fs_transport_live.traits = d->transport->traits & FS_FORWARDED_TRAITS;
}

RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version);
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)
{
	if (RELAY_ABI_MAJOR(host_abi_version) != RELAY_ABI_VERSION_MAJOR)
		return NULL;
	pthread_once(&fs_entry_once, fs_entry_setup);
	return &fs_descriptor_live;
}
