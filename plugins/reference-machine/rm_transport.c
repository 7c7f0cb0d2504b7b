/*
 * reference-machine: the transport (relay/transport.h). exec() is
 * host->process_run with RELAY_PROCESS_EXEC_RULES, so its environment and
 * output cap are exactly the ABI's; push() and pull() copy with the path
 * rules and return guest-side facts (RELAY_TRANSPORT_GUEST_FACTS).
 */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "rm.h"

#define EXEC_KNOWN_FLAGS (RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL)
#define XFER_KNOWN_FLAGS (RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES)

typedef struct rm_conn {
	char dir[RM_PATH_MAX];           /* <root>/<vm> */
	char home_env[RM_PATH_MAX + 16]; /* "HOME=<dir>/home" */
} rm_conn;

static relay_status rm_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                            unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	rm_state *st = state;
	(void)call;
	*conn_out = NULL;
	if (flags != 0)
		return rm_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown open flags 0x%x", flags);
	rm_conn *conn = st->host->alloc(sizeof *conn);
	if (conn == NULL)
		return rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status status = rm_guest_dir(st, lease_json, conn->dir, sizeof conn->dir, NULL, 0, err);
	struct stat sb;
	if (status == RELAY_OK && (lstat(conn->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
		status = rm_err(st, err, RELAY_E_NOT_FOUND, 0, "no guest folder %s: the guest was released",
		                conn->dir);
	if (status != RELAY_OK) {
		st->host->free(conn);
		return status;
	}
	snprintf(conn->home_env, sizeof conn->home_env, "HOME=%s/home", conn->dir);
	*conn_out = conn;
	return RELAY_OK;
}

static void rm_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags)
{
	rm_state *st = state;
	(void)flags;
	st->host->free(conn);
}

/* The guest user's environment on top of the relay's: HOME, then the
 * caller's entries (which win, RELAY_PROCESS_ENV_ADD). host->alloc'd array
 * of borrowed strings, or NULL. */
static const char **guest_env(const rm_state *st, const rm_conn *conn, const char *const *envp)
{
	size_t n = 0;
	while (envp && envp[n])
		n++;
	const char **env = st->host->alloc((n + 2) * sizeof *env);
	if (env == NULL)
		return NULL;
	size_t k = 0;
	int has_home = 0;
	for (size_t i = 0; i < n; i++) {
		has_home |= strncmp(envp[i], "HOME=", 5) == 0;
		env[k++] = envp[i];
	}
	if (!has_home)
		env[k++] = conn->home_env;
	env[k] = NULL;
	return env;
}

static relay_status rm_exec(relay_plugin_state *state, relay_transport_conn *conn_in,
                            const relay_exec_request *req_in, relay_call *call, unsigned flags,
                            relay_exec_result *res, relay_error *err)
{
	rm_state *st = state;
	rm_conn *conn = conn_in;
	if (flags & ~EXEC_KNOWN_FLAGS)
		return rm_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown exec flags 0x%x",
		              flags & ~EXEC_KNOWN_FLAGS);
	relay_exec_request req;
	RELAY_COPY_IN(req, req_in); /* R4: a 1.0 caller's request reads as zero past its size */
	if (req.argv == NULL || req.argv[0] == NULL || req.timeout_ms == 0)
		return rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "exec needs an argv and a positive timeout_ms");
	RELAY_RESULT_RESET(res); /* R5: within the caller's size only */
	res->exit_code = -1;
	const char **env = guest_env(st, conn, req.envp);
	if (env == NULL)
		return rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	char home[RM_PATH_MAX + 8];
	snprintf(home, sizeof home, "%s/home", conn->dir);
	relay_process_request preq = {
	    .struct_size = sizeof preq,
	    .argv = req.argv,
	    .envp = env,
	    .cwd = req.cwd ? req.cwd : home,
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .timeout_ms = req.timeout_ms,
	    .max_output_bytes = req.max_output_bytes,
	};
	unsigned pflags = RELAY_PROCESS_EXEC_RULES;
	if (flags & RELAY_EXEC_MERGE_OUTPUT)
		pflags |= RELAY_PROCESS_MERGE_OUTPUT;
	if (flags & RELAY_EXEC_KEEP_TAIL)
		pflags |= RELAY_PROCESS_KEEP_TAIL;
	relay_process_result pres = {.struct_size = sizeof pres};
	relay_status status = st->host->process_run(&preq, call, pflags, &pres, err);
	st->host->free(env);
	if (status == RELAY_E_NOT_FOUND) { /* as a guest shell answers */
		pres.exit_code = 127;
		pres.termination_confirmed = 1;
		status = RELAY_OK;
	}
	relay_exec_result full = {
	    .struct_size = sizeof full,
	    .exit_code = pres.exit_code,
	    .signal = pres.signal,
	    .timed_out = pres.timed_out,
	    .output_truncated = pres.output_truncated,
	    .termination_confirmed = pres.termination_confirmed,
	    .out = status == RELAY_OK ? pres.out : NULL,
	    .out_len = pres.out_len,
	    .err = status == RELAY_OK ? pres.err : NULL,
	    .err_len = pres.err_len,
	};
	if (status != RELAY_OK) { /* R3: nothing owned is left behind */
		st->host->free(pres.out);
		st->host->free(pres.err);
		full.out_len = full.err_len = 0;
	}
	relay_exec_result_deliver(st->host, res, &full); /* R5 */
	return status;
}

/* RELAY_E_CANCELLED once the call was cancelled (notifications/cancelled):
 * push and pull ask before they move bytes, after the walk and after the
 * copy (`mcp-relay plugin-test` checks 61 and 62); rm_copy asks per file
 * and per MiB while it moves them (checks 68 and 69). exec leaves it to
 * host->process_run, which kills the command's group. */
static relay_status check_cancelled(const rm_state *st, relay_call *call, const char *op, relay_error *err)
{
	if (call != NULL && st->host->call_cancelled(call))
		return rm_err(st, err, RELAY_E_CANCELLED, 0, "%s was cancelled", op);
	return RELAY_OK;
}

/* Copies `list` from `from` to `to` and, unless the caller verifies, the
 * facts of what `facts_root` holds afterwards. */
static relay_status copy_with_facts(const rm_state *st, const char *from, const char *to, rm_list *list,
                                    int exclusive, const char *facts_root, relay_call *call,
                                    char **facts_json_out, relay_error *err)
{
	relay_status status = rm_copy(st, from, to, list, exclusive, call, err);
	if (status == RELAY_OK) /* before the hash of what was copied */
		status = check_cancelled(st, call, "push", err);
	if (status == RELAY_OK && facts_json_out) {
		if ((status = rm_hash(st, facts_root, list, err)) == RELAY_OK &&
		    (*facts_json_out = rm_facts_json(st, list)) == NULL)
			status = rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	return status;
}

static relay_status rm_push(relay_plugin_state *state, relay_transport_conn *conn, const char *local_path,
                            const char *remote_path, relay_call *call, unsigned flags, char **facts_json_out,
                            relay_error *err)
{
	rm_state *st = state;
	(void)conn;
	if (facts_json_out)
		*facts_json_out = NULL;
	if (flags & ~XFER_KNOWN_FLAGS)
		return rm_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown push flags 0x%x",
		              flags & ~XFER_KNOWN_FLAGS);
	relay_status status = rm_check_path(st, remote_path, "guest path", err);
	if (status == RELAY_OK)
		status = check_cancelled(st, call, "push", err);
	if (status != RELAY_OK)
		return status;
	const int tree = (flags & RELAY_XFER_TREE) != 0;
	rm_list list = {0};
	char parent[RM_PATH_MAX];
	snprintf(parent, sizeof parent, "%s", remote_path);
	if ((status = rm_walk(st, local_path, tree, &list, err)) == RELAY_OK)
		status = check_cancelled(st, call, "push", err);
	if (status == RELAY_OK)
		status = rm_mkdir_p(st, tree ? remote_path : dirname(parent), err);
	if (status == RELAY_OK)
		status = copy_with_facts(st, local_path, remote_path, &list, 0, remote_path, call,
		                         (flags & RELAY_XFER_CALLER_VERIFIES) ? NULL : facts_json_out, err);
	rm_list_free(st, &list);
	return status;
}

/* The copy at `local` equals the guest facts `want` (same order). */
static relay_status check_copy(const rm_state *st, const char *local, int tree, const rm_list *want,
                               relay_error *err)
{
	rm_list got = {0};
	relay_status status = rm_walk(st, local, tree, &got, err);
	if (status == RELAY_OK)
		status = rm_hash(st, local, &got, err);
	for (size_t i = 0; status == RELAY_OK && i < want->count; i++)
		if (got.count != want->count || strcmp(got.files[i].rel, want->files[i].rel) != 0 ||
		    got.files[i].bytes != want->files[i].bytes ||
		    strcmp(got.files[i].sha256, want->files[i].sha256) != 0)
			status = rm_err(st, err, RELAY_E_INTEGRITY, 0,
			                "the copy of %s at %s differs from the guest's",
			                want->files[i].rel[0] ? want->files[i].rel : "the file", local);
	rm_list_free(st, &got);
	return status;
}

static relay_status rm_pull(relay_plugin_state *state, relay_transport_conn *conn, const char *remote_path,
                            const char *local_path, relay_call *call, unsigned flags, char **facts_json_out,
                            relay_error *err)
{
	rm_state *st = state;
	(void)conn;
	if (facts_json_out)
		*facts_json_out = NULL;
	if (flags & ~RELAY_XFER_TREE)
		return rm_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown pull flags 0x%x",
		              flags & ~RELAY_XFER_TREE);
	relay_status status = rm_check_path(st, remote_path, "guest path", err);
	if (status == RELAY_OK)
		status = check_cancelled(st, call, "pull", err);
	if (status != RELAY_OK)
		return status;
	struct stat sb;
	if (local_path == NULL || lstat(local_path, &sb) == 0 || errno != ENOENT)
		return rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the host path %s must not exist",
		              local_path ? local_path : "(null)");
	const int tree = (flags & RELAY_XFER_TREE) != 0;
	rm_list list = {0};
	/* The guest side first: what it holds, hashed before sending. */
	if ((status = rm_walk(st, remote_path, tree, &list, err)) == RELAY_OK)
		status = rm_hash(st, remote_path, &list, err);
	if (status == RELAY_OK)
		status = check_cancelled(st, call, "pull", err);
	if (status == RELAY_OK && tree && mkdir(local_path, 0700) != 0)
		status =
		    rm_err(st, err, RELAY_E_IO, errno, "cannot create %s: %s", local_path, strerror(errno));
	int created = status == RELAY_OK;
	if (status == RELAY_OK)
		status = rm_copy(st, remote_path, local_path, &list, 1, call, err);
	if (status == RELAY_OK) /* before the check of the copy */
		status = check_cancelled(st, call, "pull", err);
	if (status == RELAY_OK)
		status = check_copy(st, local_path, tree, &list, err);
	if (status == RELAY_OK && facts_json_out && (*facts_json_out = rm_facts_json(st, &list)) == NULL)
		status = rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	if (status != RELAY_OK && created) /* nothing is left at local_path */
		st->host->remove_tree(local_path, 0, NULL);
	rm_list_free(st, &list);
	return status;
}

const relay_transport_ops rm_transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_GUEST_FACTS,
    .open = rm_open,
    .close = rm_close,
    .exec = rm_exec,
    .push = rm_push,
    .pull = rm_pull,
};
