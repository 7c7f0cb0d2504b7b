/*
 * transfer-ssh — the transport plugin that reaches guests through the
 * OpenSSH client (docs/transfer-ssh.md).
 *
 *   open   builds the connection from the lease's "ssh" object and starts a
 *          multiplexing master (ControlMaster, ControlPersist) whose socket
 *          lives under the plugin's state folder;
 *   exec   ssh_exec.c: guest process group, timeout kill and confirmation;
 *   push   ssh_push.c: tar stream in, guest-side sha256 facts, commit;
 *   pull   ssh_pull.c: guest-side refusals and facts, tar stream out;
 *   close  stops the master.
 *
 *   stream ssh_stream.c: one session running a long-lived command (the
 *          resident receiver, spec/guest.md §17);
 *
 * Traits: RELAY_TRANSPORT_CONCURRENT (every operation is its own ssh
 * session over the shared master; the connection is immutable after open)
 * and RELAY_TRANSPORT_GUEST_FACTS.
 */
#include "relay/plugin.h"
#include "relay/transport.h"
#include "ssh_conn.h"
#include "ssh_exec.h"
#include "ssh_pull.h"
#include "ssh_push.h"
#include "ssh_session.h"
#include "ssh_stream.h"

static relay_status ts_init(const relay_host *host, const char *config_json, unsigned flags,
                            relay_plugin_state **state_out, relay_error *err)
{
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
	ssh_plugin *plugin = NULL;
	relay_status status = ssh_plugin_create(host, config_json, &plugin, err);
	if (status == RELAY_OK)
		*state_out = plugin;
	return status;
}

static void ts_fini(relay_plugin_state *state)
{
	ssh_plugin_destroy(state);
}

static relay_status ts_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                            unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	ssh_plugin *plugin = state;
	if (flags != 0)
		return plugin->host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown open flags 0x%x",
		                               flags);
	ssh_conn *conn = NULL;
	relay_status status = ssh_conn_from_lease(plugin, lease_json, &conn, err);
	if (status != RELAY_OK)
		return status;
	status = ssh_master_start(conn, call, err);
	if (status != RELAY_OK) {
		ssh_master_stop(conn);
		ssh_conn_free(conn);
		return status;
	}
	ssh_spares_fill(conn);
	*conn_out = conn;
	return RELAY_OK;
}

static void ts_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags)
{
	(void)state;
	(void)flags;
	if (conn == NULL)
		return;
	ssh_spares_stop(((ssh_conn *)conn)->spares);
	ssh_master_stop(conn);
	ssh_conn_free(conn);
}

static relay_status ts_exec(relay_plugin_state *state, relay_transport_conn *conn,
                            const relay_exec_request *req, relay_call *call, unsigned flags,
                            relay_exec_result *res, relay_error *err)
{
	/* ssh_exec fills a whole result; the caller's may be smaller
	 * (relay/plugin.h R5): copy out within its size, free what did not fit. */
	ssh_plugin *plugin = state;
	relay_exec_result full = {.struct_size = sizeof full};
	relay_status status = ssh_exec(conn, req, call, flags, &full, err);
	relay_exec_result_deliver(plugin->host, res, &full);
	return status;
}

static relay_status ts_push(relay_plugin_state *state, relay_transport_conn *conn, const char *local_path,
                            const char *remote_path, relay_call *call, unsigned flags, char **facts_json_out,
                            relay_error *err)
{
	(void)state;
	return ssh_push(conn, local_path, remote_path, call, flags, facts_json_out, err);
}

static relay_status ts_pull(relay_plugin_state *state, relay_transport_conn *conn, const char *remote_path,
                            const char *local_path, relay_call *call, unsigned flags, char **facts_json_out,
                            relay_error *err)
{
	(void)state;
	return ssh_pull(conn, remote_path, local_path, call, flags, facts_json_out, err);
}

static relay_status ts_stream_open(relay_plugin_state *state, relay_transport_conn *conn,
                                   const relay_exec_request *req, relay_call *call, unsigned flags,
                                   relay_transport_stream **out, relay_error *err)
{
	(void)state;
	(void)call;
	return ssh_stream_open(conn, req, flags, out, err);
}

static relay_status ts_stream_write(relay_plugin_state *state, relay_transport_stream *stream,
                                    const void *data, size_t len, uint64_t timeout_ms, unsigned flags,
                                    relay_error *err)
{
	return ssh_stream_write(state, stream, data, len, timeout_ms, flags, err);
}

static relay_status ts_stream_read(relay_plugin_state *state, relay_transport_stream *stream, void *buf,
                                   size_t cap, uint64_t timeout_ms, unsigned flags, size_t *got_out,
                                   relay_error *err)
{
	return ssh_stream_read(state, stream, buf, cap, timeout_ms, flags, got_out, err);
}

static void ts_stream_close(relay_plugin_state *state, relay_transport_stream *stream, unsigned flags)
{
	(void)state;
	(void)flags;
	ssh_stream_close(stream);
}

static const relay_transport_ops transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_GUEST_FACTS | RELAY_TRANSPORT_STDIO_BYTES |
              RELAY_TRANSPORT_STREAM,
    .open = ts_open,
    .close = ts_close,
    .exec = ts_exec,
    .push = ts_push,
    .pull = ts_pull,
    .stream_open = ts_stream_open,
    .stream_write = ts_stream_write,
    .stream_read = ts_stream_read,
    .stream_close = ts_stream_close,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = SSH_PLUGIN_NAME,
    .version = "0.1.0",
    .description = "OpenSSH transport: multiplexed exec with guest process groups, tar-stream transfers "
                   "with SHA-256 facts",
    .kinds = RELAY_KIND_TRANSPORT,
    .capabilities = 0,
    .init = ts_init,
    .fini = ts_fini,
    .transport = &transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
