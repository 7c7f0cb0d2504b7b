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

static relay_status refuse_lease(relay_plugin_state *s, const char *lease, relay_call *c, unsigned f, char **out,
                                 relay_error *err)
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

static relay_status refuse_release(relay_plugin_state *s, const char *lease, const char *reason, relay_call *c,
                                   unsigned f, relay_error *err)
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

static relay_machine_ops ops; /* filled by the entry, sized as 1.6 was */

static relay_plugin_descriptor descriptor;

RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version);
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)
{
	(void)host_abi_version;
	/* A 1.6 header's relay_machine_ops ended at egress_listeners. */
	const uint32_t v16_size = (uint32_t)offsetof(relay_machine_ops, console_ops);
	ops.struct_size = v16_size;
	ops.acquire = refuse_lease;
	ops.renew = refuse_renew;
	ops.inspect = refuse_lease;
	ops.release = refuse_release;
	ops.verify_destroyed = refuse_lease;
	ops.images = no_images;
	ops.console = old_console;
	ops.console_ops = (const relay_machine_console_ops *)&descriptor; /* past its size: never read */
	descriptor.abi_version = RELAY_ABI_MAKE(1, 6);
	descriptor.struct_size = sizeof descriptor;
	descriptor.name = "abi-old-console";
	descriptor.version = "1.6.0";
	descriptor.description = "a machine built against plugin ABI 1.6, with the string console";
	descriptor.kinds = RELAY_KIND_MACHINE;
	descriptor.init = old_init;
	descriptor.machine = &ops;
	descriptor.machine_ops_size = v16_size;
	return &descriptor;
}
