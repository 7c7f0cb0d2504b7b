/*
 * The service-mediated transport of the machine-service plugin
 * (relay/transport.h): exec through POST /machines/<vm>/exec (§3.7), push and
 * pull through POST /machines/<vm>/push and /pull (§3.8). Used for every
 * lease that carries no SSH endpoint (§5).
 *
 * The service moves bytes with `scp -r` and checks nothing, so:
 *   - push of a file prepares its parent folders (0700) first; push of a
 *     tree goes to a fresh sibling name and is then moved into place, so
 *     scp never nests the tree inside an existing folder;
 *   - pull first asks the guest whether the path is a plain file or a tree
 *     without links or special files (scp would follow links), then pulls
 *     into a fresh 0700 folder under <stateDir>/transfer-tmp, checks what
 *     arrived, and moves it to the destination;
 *   - the core verifies every transfer with SHA-256 through the guest
 *     receiver (no guest-side facts are returned here);
 *   - transient failures (no answer, HTTP 5xx, or a refusal naming scp,
 *     ssh, a connection or a timeout) are tried 3 times in all, waiting
 *     attempt x 250 ms; exec is never retried.
 * The service runs one operation per machine at a time, so the transport
 * does not declare RELAY_TRANSPORT_CONCURRENT.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ms_http.h"
#include "ms_plugin.h"
#include "ms_record.h"
#include "ms_util.h"
#include "relay_support/tree.h"

#define EXEC_KNOWN_FLAGS (RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL)
#define XFER_KNOWN_FLAGS RELAY_XFER_TREE
/* The service's own transfer is always hash-checked on our side, so the
 * caller's RELAY_XFER_CALLER_VERIFIES changes nothing here. */
#define XFER_PUSH_FLAGS (RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES)
#define PREP_TIMEOUT_MS 60000u
#define CHECK_MAX_DEPTH 256

typedef struct ms_conn {
	char vm[256];
	char purpose[128];
} ms_conn;

static int64_t monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

relay_status ms_transport_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                               unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	ms_state *s = state;
	(void)call;
	*conn_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(s->host, "open", flags, err);
	ms_lease_ref ref;
	relay_status status = ms_lease_ref_parse(s, lease_json, &ref, err);
	if (status != RELAY_OK)
		return status;
	ms_conn *conn = calloc(1, sizeof *conn);
	if (conn == NULL) {
		ms_lease_ref_free(&ref);
		return s->host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	}
	snprintf(conn->vm, sizeof conn->vm, "%s", ref.vm);
	snprintf(conn->purpose, sizeof conn->purpose, "%s", ref.purpose);
	ms_lease_ref_free(&ref);
	*conn_out = conn;
	return RELAY_OK;
}

void ms_transport_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags)
{
	(void)state;
	(void)flags;
	free(conn);
}

/* ---- exec ------------------------------------------------------------------------- */

/* One POST /machines/<vm>/exec with an argv array. RELAY_OK with the reply
 * (any status) and the elapsed milliseconds, or the transport failure. */
static relay_status post_exec(ms_state *s, const ms_conn *conn, json_object *argv, int64_t timeout_s,
                              relay_call *call, ms_reply *reply, int64_t *elapsed_ms, relay_error *cause)
{
	json_object *body = json_object_new_object();
	json_object_object_add(body, "argv", argv);
	json_object_object_add(body, "timeout", json_object_new_int64(timeout_s));
	char *path = ms_machine_path(s, conn->vm, "exec");
	int64_t started = monotonic_ms();
	relay_status status = ms_http(s, "POST", path, body, (uint32_t)(timeout_s * 1000 + MS_EXEC_MARGIN_MS),
	                              call, reply, cause);
	*elapsed_ms = monotonic_ms() - started;
	free(path);
	json_object_put(body);
	return status;
}

/* The guest argv for a request: cwd and environment through /bin/sh and env. */
static json_object *exec_argv(const relay_exec_request *req)
{
	json_object *argv = json_object_new_array();
	if (req->cwd) {
		json_object_array_add(argv, json_object_new_string("/bin/sh"));
		json_object_array_add(argv, json_object_new_string("-c"));
		json_object_array_add(argv,
		                      json_object_new_string("cd \"$1\" || exit 127; shift; exec \"$@\""));
		json_object_array_add(argv, json_object_new_string("mcp-relay-exec"));
		json_object_array_add(argv, json_object_new_string(req->cwd));
	}
	if (req->envp && req->envp[0]) {
		json_object_array_add(argv, json_object_new_string("env"));
		for (const char *const *e = req->envp; *e; e++)
			json_object_array_add(argv, json_object_new_string(*e));
	}
	for (const char *const *a = req->argv; *a; a++)
		json_object_array_add(argv, json_object_new_string(*a));
	return argv;
}

static relay_status exec_failure(ms_state *s, const ms_conn *conn, const ms_reply *reply, relay_error *err)
{
	const relay_host *host = s->host;
	const char *text = reply->text ? reply->text : "";
	if (reply->status >= 500)
		return host->error_set(err, RELAY_E_INDETERMINATE, 0,
		                       "exec on %s answered HTTP %ld (%s); the command may have run",
		                       conn->vm, reply->status, text);
	if (strncmp(text, "ssh failed", 10) == 0)
		return host->error_set(
		    err, RELAY_E_INDETERMINATE, 0,
		    "exec on %s: ssh failed; the command may have run and may still be running", conn->vm);
	if (strstr(text, "cancelled by release"))
		return host->error_set(err, RELAY_E_INDETERMINATE, 0, "exec on %s: %s", conn->vm, text);
	if (ms_reply_env_refusal(reply))
		return ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, NULL, err);
	if (ms_reply_lease_env_refusal(reply))
		return host->error_set(err, RELAY_E_ENVIRONMENT_MISMATCH, 0, "exec on %s: %s", conn->vm,
		                       text);
	if (strncmp(text, "unknown VM", 10) == 0 || reply->status == 404)
		return host->error_set(err, RELAY_E_NOT_FOUND, 0, "exec on %s: %s", conn->vm, text);
	if (strstr(text, "timeout must") || strstr(text, "need 'argv'"))
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "exec on %s: %s", conn->vm, text);
	return host->error_set(err, RELAY_E_REFUSED, 0, "exec on %s refused: %s", conn->vm, text);
}

relay_status ms_transport_exec(relay_plugin_state *state, relay_transport_conn *conn_ptr,
                               const relay_exec_request *req_in, relay_call *call, unsigned flags,
                               relay_exec_result *res, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	ms_conn *conn = conn_ptr;
	uint32_t res_size = res->struct_size;
	memset(res, 0, res_size < sizeof *res ? res_size : sizeof *res);
	res->struct_size = res_size;
	res->exit_code = -1;
	if (flags & ~EXEC_KNOWN_FLAGS)
		return ms_unknown_flags(host, "exec", flags & ~EXEC_KNOWN_FLAGS, err);
	relay_exec_request req;
	memset(&req, 0, sizeof req);
	memcpy(&req, req_in, req_in->struct_size < sizeof req ? req_in->struct_size : sizeof req);
	if (req.argv == NULL || req.argv[0] == NULL || req.timeout_ms == 0)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "%s: exec needs an argv and a timeout", MS_PLUGIN_NAME);
	/* Whole seconds, rounded up, never above the service's cap (§3.7). */
	int64_t timeout_s = (int64_t)((req.timeout_ms + 999) / 1000);
	if (timeout_s > s->opt.max_exec_timeout_s) {
		host->log(RELAY_LOG_DEBUG, MS_PLUGIN_NAME,
		          "exec timeout %lld s capped at the service's %lld s", (long long)timeout_s,
		          (long long)s->opt.max_exec_timeout_s);
		timeout_s = s->opt.max_exec_timeout_s;
	}
	ms_reply reply;
	relay_error cause;
	memset(&cause, 0, sizeof cause);
	int64_t elapsed_ms = 0;
	relay_status status =
	    post_exec(s, conn, exec_argv(&req), timeout_s, call, &reply, &elapsed_ms, &cause);
	if (status != RELAY_OK) {
		if (status == RELAY_E_CANCELLED)
			return host->error_set(err, RELAY_E_CANCELLED, 0,
			                       "exec on %s was cancelled; the command may "
			                       "still be running",
			                       conn->vm);
		if (ms_never_sent(status, &cause))
			return host->error_set(err, RELAY_E_TRANSIENT, 0,
			                       "exec on %s could not reach the service: %s", conn->vm,
			                       cause.message);
		return host->error_set(err, RELAY_E_INDETERMINATE, 0,
		                       "exec on %s got no answer (%s); the command "
		                       "may have run",
		                       conn->vm, cause.message);
	}
	if (reply.status == 409 && reply.text && strncmp(reply.text, "ssh failed", 10) == 0 &&
	    elapsed_ms >= timeout_s * 1000) {
		/* The service killed its side at our deadline; the guest side
		 * may not have stopped (§3.7). */
		res->timed_out = 1;
		res->termination_confirmed = 0;
		res->out = host->strdup("");
		res->out_len = 0;
		if (!(flags & RELAY_EXEC_MERGE_OUTPUT))
			res->err = host->strdup("");
		ms_reply_free(&reply);
		return RELAY_OK;
	}
	if (reply.status != 200) {
		status = exec_failure(s, conn, &reply, err);
		ms_reply_free(&reply);
		return status;
	}
	double rc = 0;
	const char *output = rsj_get_str(reply.json, "output");
	if (!rsj_get_double(reply.json, "rc", &rc) || output == NULL) {
		ms_reply_free(&reply);
		return host->error_set(err, RELAY_E_INDETERMINATE, 0,
		                       "exec on %s answered without rc and output; the command may have run",
		                       conn->vm);
	}
	size_t len = strlen(output);
	size_t cap = req.max_output_bytes ? req.max_output_bytes : 65536;
	size_t start = 0;
	if (len > cap) {
		res->output_truncated = 1;
		if (flags & RELAY_EXEC_KEEP_TAIL) {
			start = len - cap;
			while (start < len && ((unsigned char)output[start] & 0xc0) == 0x80)
				start++;
		} else {
			while (cap > 0 && ((unsigned char)output[cap] & 0xc0) == 0x80)
				cap--;
			len = cap;
		}
	}
	res->out = host->alloc(len - start + 1);
	if (res->out == NULL) {
		ms_reply_free(&reply);
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	}
	memcpy(res->out, output + start, len - start);
	res->out[len - start] = '\0';
	res->out_len = len - start;
	/* The service concatenates standard output and standard error; it
	 * cannot give them apart, so everything is in `out`. */
	if (!(flags & RELAY_EXEC_MERGE_OUTPUT))
		res->err = host->strdup("");
	res->exit_code = (int)rc;
	/* 255 is an SSH failure or a remote 255, -1 a signal: uncertain. */
	res->termination_confirmed = rc != 255 && rc >= 0;
	ms_reply_free(&reply);
	return RELAY_OK;
}

/* ---- helpers of push and pull -------------------------------------------------------- */

/* §3.8: guest paths go through scp and a remote shell, so only plain
 * absolute paths are accepted. */
static bool plain_guest_path(const char *path)
{
	if (path == NULL || path[0] != '/' || strlen(path) > 4000)
		return false;
	for (const char *c = path; *c; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		          strchr("/._-+@=:,%~", *c) != NULL;
		if (!ok)
			return false;
	}
	return true;
}

/* Runs a small /bin/sh script in the guest with positional arguments;
 * RELAY_OK with its rc and output (malloc'd, may be NULL). */
static relay_status guest_script(ms_state *s, const ms_conn *conn, const char *script,
                                 const char *const *args, relay_call *call, int *rc_out, char **output_out,
                                 relay_error *err)
{
	json_object *argv = json_object_new_array();
	json_object_array_add(argv, json_object_new_string("/bin/sh"));
	json_object_array_add(argv, json_object_new_string("-c"));
	json_object_array_add(argv, json_object_new_string(script));
	json_object_array_add(argv, json_object_new_string("mcp-relay-transfer"));
	for (size_t i = 0; args[i]; i++)
		json_object_array_add(argv, json_object_new_string(args[i]));
	ms_reply reply;
	relay_error cause;
	memset(&cause, 0, sizeof cause);
	int64_t elapsed = 0;
	*output_out = NULL;
	relay_status status =
	    post_exec(s, conn, argv, PREP_TIMEOUT_MS / 1000, call, &reply, &elapsed, &cause);
	if (status != RELAY_OK)
		return s->host->error_set(err, status == RELAY_E_CANCELLED ? status : RELAY_E_TRANSIENT, 0,
		                          "a transfer check on %s got no answer: %s", conn->vm,
		                          cause.message);
	double rc = 0;
	const char *output = rsj_get_str(reply.json, "output");
	if (reply.status != 200 || !rsj_get_double(reply.json, "rc", &rc)) {
		status =
		    reply.status >= 500 || (reply.text && strncmp(reply.text, "ssh failed", 10) == 0)
		        ? s->host->error_set(err, RELAY_E_TRANSIENT, 0, "a transfer check on %s failed: %s",
		                             conn->vm, reply.text ? reply.text : "no answer")
		        : exec_failure(s, conn, &reply, err);
		ms_reply_free(&reply);
		return status;
	}
	*rc_out = (int)rc;
	*output_out = strdup(output ? output : "");
	ms_reply_free(&reply);
	return RELAY_OK;
}

/* spec/guest.md §3.5: which failures of a transfer are worth another try. */
static bool transient_reply(const ms_reply *reply)
{
	if (reply->status >= 500)
		return true;
	const char *t = reply->text ? reply->text : "";
	if (strstr(t, "cancelled by release"))
		return false;
	return strstr(t, "scp") || strstr(t, "ssh") || strstr(t, "connection") || strstr(t, "timed out");
}

/* One push or pull route, tried up to 3 times on transient failures. */
static relay_status transfer(ms_state *s, const ms_conn *conn, const char *route, const char *local,
                             const char *remote, const char *cleanup_path, relay_call *call, relay_error *err)
{
	const relay_host *host = s->host;
	char *path = ms_machine_path(s, conn->vm, route);
	json_object *body = json_object_new_object();
	json_object_object_add(body, "local_path", json_object_new_string(local));
	json_object_object_add(body, "remote_path", json_object_new_string(remote));
	relay_status status = RELAY_E_TRANSIENT;
	char last[RELAY_ERROR_MESSAGE_BYTES] = "";
	for (int attempt = 1; attempt <= MS_TRANSFER_ATTEMPTS; attempt++) {
		if (attempt > 1) {
			host->log(RELAY_LOG_WARNING, MS_PLUGIN_NAME,
			          "transfer-retry: %s of %s on %s, attempt %d (%s)", route, remote, conn->vm,
			          attempt, last);
			sleep_ms((int64_t)(attempt - 1) * 250);
			if (host->call_cancelled(call)) {
				status =
				    host->error_set(err, RELAY_E_CANCELLED, 0, "the %s was cancelled", route);
				break;
			}
			if (cleanup_path)
				(void)rs_remove_tree(cleanup_path, NULL); /* best effort */
		}
		ms_reply reply;
		relay_error cause;
		memset(&cause, 0, sizeof cause);
		status = ms_http(s, "POST", path, body, MS_DEFAULT_TIMEOUT_MS, call, &reply, &cause);
		if (status == RELAY_E_CANCELLED) {
			host->error_set(err, status, 0, "the %s of %s was cancelled", route, remote);
			break;
		}
		if (status != RELAY_OK) {
			snprintf(last, sizeof last, "%s", cause.message);
			status = RELAY_E_TRANSIENT;
			continue;
		}
		if (reply.status == 200) {
			ms_reply_free(&reply);
			status = RELAY_OK;
			break;
		}
		bool again = transient_reply(&reply);
		snprintf(last, sizeof last, "HTTP %ld: %s", reply.status, reply.text ? reply.text : "");
		if (!again) {
			if (ms_reply_env_refusal(&reply))
				status = ms_env_refused(s, MS_LOOKUP_TIMEOUT_MS, call, err);
			else if (ms_reply_lease_env_refusal(&reply))
				status = host->error_set(err, RELAY_E_ENVIRONMENT_MISMATCH, 0, "%s of %s: %s",
				                         route, remote, reply.text);
			else if (reply.text && strncmp(reply.text, "unknown VM", 10) == 0)
				status = host->error_set(err, RELAY_E_NOT_FOUND, 0, "%s of %s: %s", route,
				                         remote, reply.text);
			else
				status = host->error_set(err, RELAY_E_REFUSED, 0, "%s of %s refused: %s",
				                         route, remote, reply.text ? reply.text : "");
			ms_reply_free(&reply);
			break;
		}
		ms_reply_free(&reply);
		status = RELAY_E_TRANSIENT;
	}
	if (status == RELAY_E_TRANSIENT)
		host->error_set(err, RELAY_E_TRANSIENT, 0, "%s of %s failed after %d attempts: %s", route,
		                remote, MS_TRANSFER_ATTEMPTS, last);
	json_object_put(body);
	free(path);
	return status;
}

/* ---- push ----------------------------------------------------------------------------- */

/* Prepares a file destination: parents made (0700); a folder in the way is
 * reported as "folder". */
static const char *const PREP_FILE_SCRIPT =
    "umask 077; d=$(dirname -- \"$1\"); mkdir -p -- \"$d\" || exit 1; "
    "if [ -d \"$1\" ] && [ ! -L \"$1\" ]; then echo folder; fi";
/* Prepares a tree destination: parents made; the staging name is free. */
static const char *const PREP_TREE_SCRIPT =
    "umask 077; d=$(dirname -- \"$1\"); mkdir -p -- \"$d\" || exit 1; "
    "rm -rf -- \"$2\"; if [ -e \"$1\" ] && { [ -L \"$1\" ] || [ ! -d \"$1\" ]; }; "
    "then echo not-folder; fi";
/* Moves a pushed tree from its staging name into place. */
static const char *const FINISH_TREE_SCRIPT =
    "umask 077; if [ -d \"$1\" ]; then cp -R -- \"$2\"/. \"$1\"/ && rm -rf -- \"$2\" || exit 1; "
    "else mv -- \"$2\" \"$1\" || exit 1; fi; chmod 0700 -- \"$1\"";

relay_status ms_transport_push(relay_plugin_state *state, relay_transport_conn *conn_ptr,
                               const char *local_path, const char *remote_path, relay_call *call,
                               unsigned flags, char **facts_json_out, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	ms_conn *conn = conn_ptr;
	if (facts_json_out)
		*facts_json_out = NULL;
	if (flags & ~XFER_PUSH_FLAGS)
		return ms_unknown_flags(host, "push", flags & ~XFER_PUSH_FLAGS, err);
	bool tree = flags & RELAY_XFER_TREE;
	struct stat st;
	if (local_path == NULL || lstat(local_path, &st) != 0)
		return host->error_set(err, RELAY_E_NOT_FOUND, errno, "push: no such local path: %s",
		                       local_path ? local_path : "(none)");
	if (tree ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
		return host->error_set(
		    err, S_ISLNK(st.st_mode) ? RELAY_E_UNSAFE_PATH : RELAY_E_INVALID_ARGUMENT, 0,
		    "push: %s is not a %s", local_path, tree ? "folder" : "regular file");
	char why[300];
	if (tree && ms_check_tree(local_path, CHECK_MAX_DEPTH, why, sizeof why) != 0)
		return host->error_set(err, RELAY_E_UNSAFE_PATH, 0, "push: %s", why);
	if (!plain_guest_path(remote_path) || strcmp(remote_path, "/") == 0)
		return host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "push: the guest path %s must be absolute and plain (letters, digits and "
		    "/._-+@=:,%%~ only)",
		    remote_path ? remote_path : "(none)");
	char staging[4200] = "";
	if (tree) {
		unsigned char raw[6];
		relay_error rerr;
		if (host->random_bytes(raw, sizeof raw, &rerr) != RELAY_OK)
			return host->error_set(err, RELAY_E_IO, 0, "push: no random name could be made");
		snprintf(staging, sizeof staging, "%s.relay-push-%02x%02x%02x%02x%02x%02x", remote_path,
		         raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]);
	}
	int rc = 0;
	char *output = NULL;
	const char *args[] = {remote_path, staging, NULL};
	relay_status status =
	    guest_script(s, conn, tree ? PREP_TREE_SCRIPT : PREP_FILE_SCRIPT, args, call, &rc, &output, err);
	if (status == RELAY_OK && rc != 0)
		status = host->error_set(err, RELAY_E_TRANSIENT, 0,
		                         "push: the guest could not prepare %s (exit %d)", remote_path, rc);
	if (status == RELAY_OK && output && (strstr(output, "folder") || strstr(output, "not-folder")))
		status =
		    host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                    "push: %s exists in the guest as a %s; it cannot take a %s", remote_path,
		                    tree ? "file or link" : "folder", tree ? "tree" : "file");
	free(output);
	output = NULL;
	if (status != RELAY_OK)
		return status;
	status = transfer(s, conn, "push", local_path, tree ? staging : remote_path, NULL, call, err);
	if (status == RELAY_OK && tree) {
		status = guest_script(s, conn, FINISH_TREE_SCRIPT, args, call, &rc, &output, err);
		if (status == RELAY_OK && rc != 0)
			status = host->error_set(
			    err, RELAY_E_TRANSIENT, 0,
			    "push: the guest could not move the pushed tree into %s (exit %d)", remote_path,
			    rc);
		free(output);
		output = NULL;
	}
	if (status != RELAY_OK && tree) {
		const char *rm[] = {staging, NULL};
		int ignored_rc = 0;
		relay_error ignored;
		if (guest_script(s, conn, "rm -rf -- \"$1\"", rm, NULL, &ignored_rc, &output, &ignored) ==
		    RELAY_OK)
			free(output);
	}
	return status;
}

/* ---- pull ----------------------------------------------------------------------------- */

/* Tells what the guest path is: file, dir, link, special <path>, missing. */
static const char *const KIND_SCRIPT =
    "if [ -L \"$1\" ]; then echo link; elif [ -f \"$1\" ]; then echo file; "
    "elif [ -d \"$1\" ]; then b=$(find \"$1\" ! -type f ! -type d 2>/dev/null | head -n 1); "
    "if [ -n \"$b\" ]; then echo \"special $b\"; else echo dir; fi; "
    "elif [ -e \"$1\" ]; then echo special; else echo missing; fi";

relay_status ms_transport_pull(relay_plugin_state *state, relay_transport_conn *conn_ptr,
                               const char *remote_path, const char *local_path, relay_call *call,
                               unsigned flags, char **facts_json_out, relay_error *err)
{
	ms_state *s = state;
	const relay_host *host = s->host;
	ms_conn *conn = conn_ptr;
	if (facts_json_out)
		*facts_json_out = NULL;
	if (flags & ~XFER_KNOWN_FLAGS)
		return ms_unknown_flags(host, "pull", flags & ~XFER_KNOWN_FLAGS, err);
	bool tree = flags & RELAY_XFER_TREE;
	struct stat st;
	if (local_path == NULL || local_path[0] != '/')
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "pull: the local path must be absolute");
	if (lstat(local_path, &st) == 0)
		return host->error_set(err, RELAY_E_IO, EEXIST, "pull: %s already exists", local_path);
	if (!plain_guest_path(remote_path))
		return host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "pull: the guest path %s must be absolute and plain (letters, digits and "
		    "/._-+@=:,%%~ only)",
		    remote_path ? remote_path : "(none)");
	int rc = 0;
	char *kind = NULL;
	const char *args[] = {remote_path, NULL};
	relay_status status = guest_script(s, conn, KIND_SCRIPT, args, call, &rc, &kind, err);
	if (status != RELAY_OK)
		return status;
	size_t kl = strlen(kind);
	while (kl > 0 && (kind[kl - 1] == '\n' || kind[kl - 1] == '\r'))
		kind[--kl] = '\0';
	if (strcmp(kind, "missing") == 0)
		status = host->error_set(err, RELAY_E_NOT_FOUND, 0, "pull: %s does not exist in the guest",
		                         remote_path);
	else if (strcmp(kind, "link") == 0 || strncmp(kind, "special", 7) == 0)
		status = host->error_set(err, RELAY_E_UNSAFE_PATH, 0,
		                         "pull: %s %s; links and special files are refused", remote_path,
		                         strcmp(kind, "link") == 0 ? "is a symbolic link"
		                                                   : "is or holds a special file or link");
	else if (strcmp(kind, tree ? "dir" : "file") != 0)
		status = host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0, "pull: %s is a %s in the guest, not a %s", remote_path,
		    strcmp(kind, "dir") == 0 ? "folder" : "file", tree ? "folder" : "file");
	free(kind);
	if (status != RELAY_OK)
		return status;

	char *staging = ms_fresh_dir(host, s->transfer_tmp, "pull");
	if (staging == NULL)
		return host->error_set(err, RELAY_E_IO, errno,
		                       "pull: cannot create a staging folder under %s: %s", s->transfer_tmp,
		                       strerror(errno));
	char target[4200];
	snprintf(target, sizeof target, "%s/data", staging);
	status = transfer(s, conn, "pull", target, remote_path, target, call, err);
	char why[300];
	if (status == RELAY_OK && ms_check_tree(target, CHECK_MAX_DEPTH, why, sizeof why) != 0)
		status =
		    host->error_set(err, RELAY_E_UNSAFE_PATH, 0, "pull: what arrived is unsafe: %s", why);
	if (status == RELAY_OK && lstat(target, &st) == 0 &&
	    (tree ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
		status = host->error_set(err, RELAY_E_INTEGRITY, 0,
		                         "pull: %s changed kind during the transfer", remote_path);
	if (status == RELAY_OK && ms_move_tree(target, local_path, why, sizeof why) != 0)
		status = host->error_set(err, RELAY_E_IO, errno, "pull: %s", why);
	(void)rs_remove_tree(staging, NULL); /* best effort */
	free(staging);
	return status;
}
