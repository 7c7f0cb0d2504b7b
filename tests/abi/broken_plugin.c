/*
 * One source, many deliberately broken plugins: each build defines one
 * BREAK_* macro and breaks exactly one loader rule (relay/plugin.h lists
 * them in order). tests/unit/loader/test_loader_abi.c asserts each exact message.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "relay/capture.h"
#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"

#ifndef PLUGIN_NAME
#define PLUGIN_NAME "abi-broken"
#endif

static relay_status stub_acquire(relay_plugin_state *s, const char *spec, relay_call *c, unsigned f,
                                 char **out, relay_error *e)
{
	(void)s, (void)spec, (void)c, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}
static relay_status stub_lease_op(relay_plugin_state *s, const char *lease, relay_call *c, unsigned f,
                                  char **out, relay_error *e)
{
	(void)s, (void)lease, (void)c, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}
static relay_status stub_renew(relay_plugin_state *s, const char *lease, uint64_t ttl, relay_call *c,
                               unsigned f, char **out, relay_error *e)
{
	(void)s, (void)lease, (void)ttl, (void)c, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}
__attribute__((unused)) static relay_status stub_release(relay_plugin_state *s, const char *lease,
                                                         const char *reason, relay_call *c, unsigned f,
                                                         relay_error *e)
{
	(void)s, (void)lease, (void)reason, (void)c, (void)f, (void)e;
	return RELAY_E_UNSUPPORTED;
}
static relay_status stub_images(relay_plugin_state *s, relay_call *c, unsigned f, char **out, relay_error *e)
{
	(void)s, (void)c, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}
static relay_status stub_plan(relay_plugin_state *s, const char *ctx, unsigned f, char **out, relay_error *e)
{
	(void)s, (void)ctx, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}

static relay_status stub_caps(relay_plugin_state *s, relay_call *c, unsigned f, char **out, relay_error *e)
{
	(void)s, (void)c, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}
static relay_status stub_attempt(relay_plugin_state *s, const char *lease, const char *console_id,
                                 const char *attempt_id, relay_call *c, unsigned f, char **out,
                                 relay_error *e)
{
	(void)s, (void)lease, (void)console_id, (void)attempt_id, (void)c, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}
__attribute__((unused)) static relay_status stub_string_console(relay_plugin_state *s, const char *lease,
                                                                const char *op, const char *request,
                                                                relay_call *c, unsigned f, char **out,
                                                                relay_error *e)
{
	(void)s, (void)lease, (void)op, (void)request, (void)c, (void)f, (void)out, (void)e;
	return RELAY_E_UNSUPPORTED;
}

/* The typed console (ABI 1.7), broken by BREAK_CONSOLE_SIZE (a table of 8
 * bytes), BREAK_CONSOLE_MISSING (no cancel) or BREAK_CONSOLE_BOTH (the
 * string slot of 1.0-1.6 filled too). */
#ifndef BREAK_CONSOLE_SIZE
#define BREAK_CONSOLE_SIZE 0
#endif
#ifndef BREAK_CONSOLE_MISSING
#define BREAK_CONSOLE_MISSING 0
#endif
static const relay_machine_console_ops console_ops = {
    .struct_size = BREAK_CONSOLE_SIZE ? 8 : sizeof(relay_machine_console_ops),
    .capabilities = stub_caps,
    .resolve = stub_lease_op,
    .open = stub_attempt,
    .cancel = BREAK_CONSOLE_MISSING ? NULL : stub_attempt,
};

static relay_status plugin_init(const relay_host *host, const char *config, unsigned flags,
                                relay_plugin_state **state_out, relay_error *err)
{
	(void)config;
	(void)flags;
	*state_out = NULL;
#ifdef BREAK_INIT
	return host->error_set(err, RELAY_E_UNAVAILABLE, 0, "the fake backend is switched off");
#else
	(void)host;
	(void)err;
	return RELAY_OK;
#endif
}

static const relay_machine_ops machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = stub_acquire,
    .renew = stub_renew,
    .inspect = stub_lease_op,
#ifndef BREAK_MISSING_OP
    .release = stub_release,
#endif
    .verify_destroyed = stub_lease_op,
    .images = stub_images,
#ifdef BREAK_CONSOLE_BOTH
    .console = stub_string_console,
#endif
    .console_ops = &console_ops,
};

static const relay_capture_ops capture_ops = {
    .struct_size = sizeof(relay_capture_ops),
    .plan = stub_plan,
};

static const relay_plugin_descriptor descriptor = {
#ifdef BREAK_MAJOR
    .abi_version = RELAY_ABI_MAKE(2, 0),
#else
    .abi_version = RELAY_ABI_VERSION,
#endif
#ifdef BREAK_SIZE
    .struct_size = 16,
#else
    .struct_size = sizeof(relay_plugin_descriptor),
#endif
    .name = PLUGIN_NAME,
    .version = "0.0.1",
    .description = "a deliberately broken plugin for the loader tests",
#ifdef BREAK_KIND
    .kinds = RELAY_KIND_CAPTURE,
#else
    .kinds = RELAY_KIND_MACHINE,
#endif
    .init = plugin_init,
    .machine = &machine_ops,
    .machine_ops_size = sizeof machine_ops,
    .capture = &capture_ops,
    .capture_ops_size = sizeof capture_ops,
};

#if defined(BREAK_NO_ENTRY)
/* Exports nothing the loader looks for. */
RELAY_PLUGIN_EXPORT int not_a_relay_entry(void);
RELAY_PLUGIN_EXPORT int not_a_relay_entry(void)
{
	return descriptor.struct_size > 0;
}
#elif defined(BREAK_OTHER_MAJOR)
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v2(uint32_t host_abi_version);
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v2(uint32_t host_abi_version)
{
	(void)host_abi_version;
	return &descriptor;
}
#else
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version);
RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)
{
#ifdef BREAK_REFUSE_HOST
	if (RELAY_ABI_MINOR(host_abi_version) < 99)
		return NULL;
#endif
	(void)host_abi_version;
	return &descriptor;
}
#endif
