/*
 * old_transport.c — a transport plugin as ABI 1.1 built it: its ops table
 * ends at pull (no stream slots) and its descriptor says 1.1, while it
 * states the traits of its time. tests/unit/loader/test_loader_abi.c loads it
 * through the real loader: it loads, and the four stream slots read as
 * NULL (relay/transport.h, ABI 1.4), so the core keeps it on the one-shot
 * path.
 */
#include <stddef.h>
#include <string.h>

#include "relay/plugin.h"
#include "relay/transport.h"

/* The table exactly as a 1.1 header declared it. */
typedef struct v11_transport_ops {
	uint32_t struct_size;
	uint32_t traits;
	relay_status (*open)(relay_plugin_state *, const char *, relay_call *, unsigned,
	                     relay_transport_conn **, relay_error *);
	void (*close)(relay_plugin_state *, relay_transport_conn *, unsigned);
	relay_status (*exec)(relay_plugin_state *, relay_transport_conn *, const relay_exec_request *,
	                     relay_call *, unsigned, relay_exec_result *, relay_error *);
	relay_status (*push)(relay_plugin_state *, relay_transport_conn *, const char *, const char *,
	                     relay_call *, unsigned, char **, relay_error *);
	relay_status (*pull)(relay_plugin_state *, relay_transport_conn *, const char *, const char *,
	                     relay_call *, unsigned, char **, relay_error *);
} v11_transport_ops;

static relay_status old_init(const relay_host *host, const char *config, unsigned flags,
                             relay_plugin_state **out, relay_error *err)
{
	(void)host, (void)config, (void)flags, (void)err;
	*out = NULL;
	return RELAY_OK;
}

static relay_status old_open(relay_plugin_state *s, const char *lease, relay_call *c, unsigned f,
                             relay_transport_conn **out, relay_error *err)
{
	(void)s, (void)lease, (void)c, (void)f;
	*out = NULL;
	return relay_error_put(err, RELAY_E_UNSUPPORTED, 0, "an ABI 1.1 stand-in reaches no guest");
}

static void old_close(relay_plugin_state *s, relay_transport_conn *conn, unsigned f)
{
	(void)s, (void)conn, (void)f;
}

static relay_status old_exec(relay_plugin_state *s, relay_transport_conn *conn, const relay_exec_request *req,
                             relay_call *c, unsigned f, relay_exec_result *res, relay_error *err)
{
	(void)s, (void)conn, (void)req, (void)c, (void)f, (void)res;
	return relay_error_put(err, RELAY_E_UNSUPPORTED, 0, "no guest");
}

static relay_status old_xfer(relay_plugin_state *s, relay_transport_conn *conn, const char *a, const char *b,
                             relay_call *c, unsigned f, char **facts, relay_error *err)
{
	(void)s, (void)conn, (void)a, (void)b, (void)c, (void)f;
	*facts = NULL;
	return relay_error_put(err, RELAY_E_UNSUPPORTED, 0, "no guest");
}

static const v11_transport_ops ops = {
    .struct_size = sizeof(v11_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_STDIO_BYTES,
    .open = old_open,
    .close = old_close,
    .exec = old_exec,
    .push = old_xfer,
    .pull = old_xfer,
};

static relay_plugin_descriptor descriptor;

RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version);
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)
{
	(void)host_abi_version;
	descriptor.abi_version = RELAY_ABI_MAKE(1, 1);
	descriptor.struct_size = sizeof descriptor;
	descriptor.name = "abi-old-transport";
	descriptor.version = "1.1.0";
	descriptor.description = "a transport built against plugin ABI 1.1";
	descriptor.kinds = RELAY_KIND_TRANSPORT;
	descriptor.init = old_init;
	descriptor.transport = (const relay_transport_ops *)(const void *)&ops;
	descriptor.transport_ops_size = sizeof ops;
	return &descriptor;
}
