/*
 * old_console.c — a machine plugin as ABI 1.6 built it: its machine table
 * ends at egress_listeners (no console_ops) and its console is the string
 * slot `console`. tests/unit/loader/test_loader_abi.c loads it through the
 * real loader: it loads, and the typed console the core lends to console
 * plugins (loader_machine_link) is the loader's adapter, whose calls reach
 * this slot with the operation and body a 1.6 console plugin sent. The
 * slot answers {"op": <op>, "body": <body>} so the test sees both.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"

static const relay_host *g_host;

static relay_status old_init(const relay_host *host, const char *config, unsigned flags,
                             relay_plugin_state **out, relay_error *err)
{
	(void)config, (void)flags, (void)err;
	g_host = host;
	*out = NULL;
	return RELAY_OK;
}

static relay_status refuse_lease(relay_plugin_state *s, const char *lease, relay_call *c, unsigned f,
                                 char **out, relay_error *err)
{
	(void)s, (void)lease, (void)c, (void)f;
	*out = NULL;
	return relay_error_put(err, RELAY_E_UNSUPPORTED, 0, "an ABI 1.6 stand-in leases nothing");
}

static relay_status refuse_renew(relay_plugin_state *s, const char *lease, uint64_t ttl, relay_call *c,
                                 unsigned f, char **out, relay_error *err)
{
	(void)ttl;
	return refuse_lease(s, lease, c, f, out, err);
}

static relay_status refuse_release(relay_plugin_state *s, const char *lease, const char *reason,
                                   relay_call *c, unsigned f, relay_error *err)
{
	(void)s, (void)lease, (void)reason, (void)c, (void)f;
	return relay_error_put(err, RELAY_E_UNSUPPORTED, 0, "an ABI 1.6 stand-in leases nothing");
}

static relay_status no_images(relay_plugin_state *s, relay_call *c, unsigned f, char **out, relay_error *err)
{
	return refuse_lease(s, NULL, c, f, out, err);
}

/* The 1.0-1.6 console: echoes what it was asked. */
static relay_status old_console(relay_plugin_state *s, const char *lease, const char *op, const char *request,
                                relay_call *c, unsigned f, char **out, relay_error *err)
{
	(void)s, (void)lease, (void)c;
	*out = NULL;
	if (f != 0)
		return relay_error_put(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown console flags");
	char text[1024];
	snprintf(text, sizeof text, "{\"op\":\"%s\",\"body\":%s}", op, request ? request : "null");
	*out = g_host->strdup(text);
	return RELAY_OK;
}

/* A 1.6 header's relay_machine_ops ended at egress_listeners. */
#define V16_MACHINE_OPS_SIZE ((uint32_t)offsetof(relay_machine_ops, console_ops))

static const relay_machine_ops ops = {
    .struct_size = V16_MACHINE_OPS_SIZE,
    .acquire = refuse_lease,
    .renew = refuse_renew,
    .inspect = refuse_lease,
    .release = refuse_release,
    .verify_destroyed = refuse_lease,
    .images = no_images,
    .console = old_console,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_MAKE(1, 6),
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = "abi-old-console",
    .version = "1.6.0",
    .description = "a machine built against plugin ABI 1.6, with the string console",
    .kinds = RELAY_KIND_MACHINE,
    .init = old_init,
    .machine = &ops,
    .machine_ops_size = V16_MACHINE_OPS_SIZE,
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
