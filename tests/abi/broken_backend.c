/*
 * The reference machine + transport (plugins/reference-machine/) with one
 * rule broken per build: each build defines one BREAK_* macro, and
 * tests/integration/test_plugin_test.py asserts that `mcp-relay plugin-test`
 * fails exactly the check of that rule, with its message
 * (docs/writing-a-plugin.md lists them).
 *
 * The reference's own sources are compiled in unchanged; its exported entry
 * is renamed here so that this file's descriptor is the plugin's.
 */
#define relay_plugin_entry_v1 reference_machine_entry_replaced
#include "../../plugins/reference-machine/rm_machine.c"
#undef relay_plugin_entry_v1

#include <stdlib.h>

/* ---- the broken operations ------------------------------------------------ */

#ifdef BREAK_FLAGS /* check 3: exec ignores a bit it does not know */
static relay_status broken_exec(relay_plugin_state *s, relay_transport_conn *c, const relay_exec_request *req,
                                relay_call *call, unsigned flags, relay_exec_result *res, relay_error *err)
{
	return rm_transport_ops.exec(s, c, req, call,
	                             flags & (RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL), res, err);
}
#endif

#ifdef BREAK_ERROR /* check 4: inspect refuses without filling the error record */
static relay_status broken_inspect(relay_plugin_state *s, const char *lease, relay_call *call, unsigned flags,
                                   char **out, relay_error *err)
{
	if (flags != 0)
		return RELAY_E_UNSUPPORTED_FLAGS;
	return rm_machine_ops.inspect(s, lease, call, flags, out, err);
}
#endif

#ifdef BREAK_OUT_PARAM /* check 5: images leaves a value behind when it fails */
static relay_status broken_images(relay_plugin_state *s, relay_call *call, unsigned flags, char **out,
                                  relay_error *err)
{
	relay_status status = rm_machine_ops.images(s, call, flags, out, err);
	if (status != RELAY_OK)
		*out = ((rm_state *)s)->host->strdup("{}");
	return status;
}
#endif

#ifdef BREAK_LEAK /* check 6: init takes a block fini never gives back */
static relay_status broken_init(const relay_host *host, const char *config, unsigned flags,
                                relay_plugin_state **state_out, relay_error *err)
{
	relay_status status = rm_init(host, config, flags, state_out, err);
	if (status == RELAY_OK)
		(void)host->alloc(64);
	return status;
}
#endif

#ifdef BREAK_RELEASE /* check 16: release answers RELAY_OK and destroys nothing */
static relay_status broken_release(relay_plugin_state *s, const char *lease, const char *reason,
                                   relay_call *call, unsigned flags, relay_error *err)
{
	(void)lease, (void)reason, (void)call;
	if (flags != 0)
		return rm_err(s, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown release flags 0x%x", flags);
	return RELAY_OK;
}
#endif

#ifdef BREAK_EXEC_RULES /* checks 22 and 24: process_run's own rules, not exec's */
static relay_status broken_exec(relay_plugin_state *s, relay_transport_conn *c, const relay_exec_request *req,
                                relay_call *call, unsigned flags, relay_exec_result *res, relay_error *err)
{
	rm_state *st = s;
	(void)c;
	relay_process_request preq = {.struct_size = sizeof preq,
	                              .argv = req->argv,
	                              .envp = req->envp, /* replaces the whole environment */
	                              .cwd = req->cwd,
	                              .stdin_fd = -1,
	                              .stdout_fd = -1,
	                              .timeout_ms = req->timeout_ms,
	                              .max_output_bytes = req->max_output_bytes}; /* per stream */
	relay_process_result pres = {.struct_size = sizeof pres};
	relay_status status = st->host->process_run(&preq, call, flags, &pres, err);
	relay_exec_result full = {.struct_size = sizeof full,
	                          .exit_code = pres.exit_code,
	                          .timed_out = pres.timed_out,
	                          .output_truncated = pres.output_truncated,
	                          .termination_confirmed = pres.termination_confirmed,
	                          .out = pres.out,
	                          .out_len = pres.out_len,
	                          .err = pres.err,
	                          .err_len = pres.err_len};
	relay_exec_result_deliver(st->host, res, &full);
	return status;
}
#endif

#ifdef BREAK_RESULT_SIZE /* check 27: the whole result written whatever the caller's size */
static relay_status broken_exec(relay_plugin_state *s, relay_transport_conn *c, const relay_exec_request *req,
                                relay_call *call, unsigned flags, relay_exec_result *res, relay_error *err)
{
	relay_exec_result full = {.struct_size = sizeof full};
	relay_status status = rm_transport_ops.exec(s, c, req, call, flags, &full, err);
	memcpy(res, &full, sizeof full);
	return status;
}
#endif

#ifdef BREAK_FACTS /* check 32: tree facts name guest paths, not paths relative to the root */
static relay_status broken_push(relay_plugin_state *s, relay_transport_conn *c, const char *local,
                                const char *remote, relay_call *call, unsigned flags, char **facts,
                                relay_error *err)
{
	relay_status status = rm_transport_ops.push(s, c, local, remote, call, flags, facts, err);
	rm_state *st = s;
	if (status != RELAY_OK || facts == NULL || *facts == NULL || !(flags & RELAY_XFER_TREE))
		return status;
	json_object *list = json_tokener_parse(*facts);
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *f = json_object_array_get_idx(list, i), *path = NULL;
		char full[RM_PATH_MAX * 2];
		json_object_object_get_ex(f, "path", &path);
		snprintf(full, sizeof full, "%s/%s", remote, json_object_get_string(path));
		json_object_object_add(f, "path", json_object_new_string(full));
	}
	st->host->free(*facts);
	*facts = rm_owned_json(st, list);
	json_object_put(list);
	return status;
}
#endif

#ifdef BREAK_CANCEL /* checks 60-62: the call is never asked whether it was cancelled */
static relay_status broken_exec(relay_plugin_state *s, relay_transport_conn *c, const relay_exec_request *req,
                                relay_call *call, unsigned flags, relay_exec_result *res, relay_error *err)
{
	(void)call;
	return rm_transport_ops.exec(s, c, req, NULL, flags, res, err);
}

static relay_status broken_push(relay_plugin_state *s, relay_transport_conn *c, const char *local,
                                const char *remote, relay_call *call, unsigned flags, char **facts,
                                relay_error *err)
{
	(void)call;
	return rm_transport_ops.push(s, c, local, remote, NULL, flags, facts, err);
}

static relay_status broken_pull(relay_plugin_state *s, relay_transport_conn *c, const char *remote,
                                const char *local, relay_call *call, unsigned flags, char **facts,
                                relay_error *err)
{
	(void)call;
	return rm_transport_ops.pull(s, c, remote, local, NULL, flags, facts, err);
}
#endif

#ifdef BREAK_LINKS /* check 34: pull follows a symbolic link to its target */
static relay_status broken_pull(relay_plugin_state *s, relay_transport_conn *c, const char *remote,
                                const char *local, relay_call *call, unsigned flags, char **facts,
                                relay_error *err)
{
	char target[RM_PATH_MAX];
	if (!(flags & RELAY_XFER_TREE) && realpath(remote, target) != NULL)
		remote = target;
	return rm_transport_ops.pull(s, c, remote, local, call, flags, facts, err);
}
#endif

#ifdef BREAK_CONSOLE /* check 46: a typed console whose open takes any attempt id */
static relay_status console_answer(relay_plugin_state *s, unsigned flags, char **out, relay_error *err)
{
	*out = NULL;
	if (flags != 0)
		return relay_error_put(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown console flags");
	*out = ((rm_state *)s)->host->strdup("{\"schemaVersion\":1}");
	return RELAY_OK;
}

static relay_status broken_console_caps(relay_plugin_state *s, relay_call *c, unsigned flags, char **out,
                                        relay_error *err)
{
	(void)c;
	return console_answer(s, flags, out, err);
}

static relay_status broken_console_resolve(relay_plugin_state *s, const char *lease, relay_call *c,
                                           unsigned flags, char **out, relay_error *err)
{
	(void)lease, (void)c;
	return console_answer(s, flags, out, err);
}

static relay_status broken_console_attempt(relay_plugin_state *s, const char *lease, const char *console_id,
                                           const char *attempt_id, relay_call *c, unsigned flags, char **out,
                                           relay_error *err)
{
	(void)lease, (void)console_id, (void)attempt_id, (void)c;
	return console_answer(s, flags, out, err);
}

static const relay_machine_console_ops broken_console_ops = {
    .struct_size = sizeof(relay_machine_console_ops),
    .capabilities = broken_console_caps,
    .resolve = broken_console_resolve,
    .open = broken_console_attempt,
    .cancel = broken_console_attempt,
};

#endif

/* ---- the tables with the broken slot -------------------------------------- */

static relay_machine_ops broken_machine_ops(void)
{
	relay_machine_ops ops = rm_machine_ops;
#ifdef BREAK_ERROR
	ops.inspect = broken_inspect;
#endif
#ifdef BREAK_OUT_PARAM
	ops.images = broken_images;
#endif
#ifdef BREAK_RELEASE
	ops.release = broken_release;
#endif
#ifdef BREAK_CONSOLE
	ops.console_ops = &broken_console_ops;
#endif
	return ops;
}

static relay_transport_ops broken_transport_ops(void)
{
	relay_transport_ops ops = rm_transport_ops;
#if defined(BREAK_FLAGS) || defined(BREAK_EXEC_RULES) || defined(BREAK_RESULT_SIZE) || defined(BREAK_CANCEL)
	ops.exec = broken_exec;
#endif
#if defined(BREAK_FACTS) || defined(BREAK_CANCEL)
	ops.push = broken_push;
#endif
#if defined(BREAK_LINKS) || defined(BREAK_CANCEL)
	ops.pull = broken_pull;
#endif
#ifdef BREAK_TABLE_SIZE /* check 2: the table's own size disagrees with the descriptor's */
	ops.struct_size += 8;
#endif
	return ops;
}

/* Filled once by the entry (the loader calls it once, before any thread). */
static relay_machine_ops machine_table;
static relay_transport_ops transport_table;
static relay_plugin_descriptor broken_descriptor;

RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version);
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)
{
	if (reference_machine_entry_replaced(host_abi_version) == NULL)
		return NULL;
	machine_table = broken_machine_ops();
	transport_table = broken_transport_ops();
	broken_descriptor = rm_descriptor;
	broken_descriptor.name = "broken-backend";
	broken_descriptor.machine = &machine_table;
	broken_descriptor.transport = &transport_table;
#ifdef BREAK_LEAK
	broken_descriptor.init = broken_init;
#endif
	return &broken_descriptor;
}
