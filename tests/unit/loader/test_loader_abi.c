/*
 * The loader's ordered checks, each with its exact message, through real
 * shared objects built by tests/abi/ (one broken plugin per rule).
 */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loader/loader.h"

static char abi_dir[PATH_MAX];

static void plugin_path(const char *name, char *out, size_t len)
{
	char joined[PATH_MAX * 2];
	snprintf(joined, sizeof joined, "%s/%s.so", abi_dir, name);
	if (realpath(joined, out) == NULL)
		snprintf(out, len, "%.*s", (int)(len - 1), joined);
}

/* `template` with "{path}" replaced by `path`. */
static void substitute(const char *template, const char *path, char *out, size_t len)
{
	const char *mark = strstr(template, "{path}");
	if (mark == NULL) {
		snprintf(out, len, "%s", template);
		return;
	}
	snprintf(out, len, "%.*s%s%s", (int)(mark - template), template, path, mark + 6);
}

static void expect_failure(const char *name, relay_plugin_kind slot, const char *expected_template)
{
	char path[PATH_MAX], expected[PATH_MAX * 2];
	plugin_path(name, path, sizeof path);
	substitute(expected_template, path, expected, sizeof expected);
	plugin_registry registry = {0};
	loaded_plugin *out = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = loader_load(&registry, path, slot, "{}", &out, &err);
	assert_int_not_equal(st, RELAY_OK);
	assert_null(out);
	assert_string_equal(err.message, expected);
	assert_int_equal(registry.count, 0);
	/* A plugin that failed its checks is unloaded again. */
	assert_null(dlopen(path, RTLD_NOW | RTLD_NOLOAD));
	loader_shutdown(&registry);
}

static void test_not_loadable(void **state)
{
	(void)state;
	char path[PATH_MAX];
	plugin_path("not-loadable", path, sizeof path);
	plugin_registry registry = {0};
	loaded_plugin *out = NULL;
	relay_error err;
	assert_int_equal(loader_load(&registry, path, RELAY_KIND_MACHINE, "{}", &out, &err), RELAY_E_IO);
	char prefix[PATH_MAX + 64];
	snprintf(prefix, sizeof prefix, "cannot load plugin %s: ", path);
	assert_memory_equal(err.message, prefix, strlen(prefix) < sizeof err.message ? strlen(prefix) : 0);
	assert_non_null(strstr(err.message, "invalid ELF header"));
}

static void test_no_entry(void **state)
{
	(void)state;
	expect_failure("abi-no-entry", RELAY_KIND_MACHINE,
	               "plugin {path} exports no relay_plugin_entry_v1: it is not an mcp-relay plugin");
}

static void test_other_major(void **state)
{
	(void)state;
	expect_failure(
	    "abi-other-major", RELAY_KIND_MACHINE,
	    "plugin {path} was built for plugin ABI major 2 (it exports relay_plugin_entry_v2); this relay "
	    "speaks major 1: rebuild it against this relay's headers");
}

static void test_refused_host(void **state)
{
	(void)state;
	/* The message names the host's own ABI version. */
	char want[160];
	snprintf(want, sizeof want,
	         "plugin {path} refused this host (plugin ABI %u.%u): its entry returned no descriptor",
	         RELAY_ABI_VERSION_MAJOR, RELAY_ABI_VERSION_MINOR);
	expect_failure("abi-refuse-host", RELAY_KIND_MACHINE, want);
}

static void test_major_mismatch(void **state)
{
	(void)state;
	expect_failure(
	    "abi-major", RELAY_KIND_MACHINE,
	    "plugin {path} speaks plugin ABI major 2, this relay speaks major 1: rebuild it against this "
	    "relay's headers");
}

static void test_descriptor_too_small(void **state)
{
	(void)state;
	char expected[256];
	snprintf(expected, sizeof expected,
	         "plugin {path} has a descriptor of 16 bytes, smaller than the %zu bytes of plugin ABI 1.0",
	         (size_t)RELAY_PLUGIN_DESCRIPTOR_MIN_SIZE);
	expect_failure("abi-small", RELAY_KIND_MACHINE, expected);
}

static void test_kind_does_not_fit(void **state)
{
	(void)state;
	expect_failure(
	    "abi-kind", RELAY_KIND_MACHINE,
	    "plugin abi-broken ({path}) does not provide the machine kind this profile slot needs (it "
	    "provides: capture)");
	/* The same object fits a capture slot. */
	char path[PATH_MAX];
	plugin_path("abi-kind", path, sizeof path);
	plugin_registry registry = {0};
	loaded_plugin *out = NULL;
	relay_error err;
	assert_int_equal(loader_load(&registry, path, RELAY_KIND_CAPTURE, "{}", &out, &err), RELAY_OK);
	assert_non_null(out->capture.plan);
	assert_null(out->machine.acquire); /* kinds not provided read as NULL */
	loader_shutdown(&registry);
}

static void test_missing_required_op(void **state)
{
	(void)state;
	expect_failure("abi-missing-op", RELAY_KIND_MACHINE,
	               "plugin abi-broken ({path}) lacks the required machine operation release");
}

static void test_init_failed(void **state)
{
	(void)state;
	expect_failure("abi-init", RELAY_KIND_MACHINE,
	               "plugin abi-broken ({path}) failed to initialise: the fake backend is switched off");
}

static void test_duplicate_name_and_no_dlclose(void **state)
{
	(void)state;
	char good[PATH_MAX], dup[PATH_MAX], expected[PATH_MAX * 3];
	plugin_path("abi-good", good, sizeof good);
	plugin_path("abi-duplicate", dup, sizeof dup);
	plugin_registry registry = {0};
	loaded_plugin *first = NULL, *second = NULL, *again = NULL;
	relay_error err;
	assert_int_equal(loader_load(&registry, good, RELAY_KIND_MACHINE, "{}", &first, &err), RELAY_OK);
	assert_string_equal(first->descriptor.name, "abi-good");
	/* The same path for a second slot it provides is the same plugin. */
	assert_int_equal(loader_load(&registry, good, RELAY_KIND_MACHINE, "{}", &again, &err), RELAY_OK);
	assert_ptr_equal(first, again);
	assert_int_not_equal(loader_load(&registry, dup, RELAY_KIND_MACHINE, "{}", &second, &err), RELAY_OK);
	snprintf(expected, sizeof expected,
	         "plugin abi-good (%s) has the same name as the plugin already loaded from %s", dup, good);
	assert_string_equal(err.message, expected);
	assert_int_equal(registry.count, 1);
	loader_shutdown(&registry);
	/* Never dlclose after a successful init. */
	void *still = dlopen(good, RTLD_NOW | RTLD_NOLOAD);
	assert_non_null(still);
	dlclose(still); /* drops only the reference this check took */
}

/* Loads tests/abi/<name>.so for `slot`, which must succeed. */
static loaded_plugin *load_ok(plugin_registry *registry, const char *name, relay_plugin_kind slot)
{
	char path[PATH_MAX];
	plugin_path(name, path, sizeof path);
	loaded_plugin *p = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (loader_load(registry, path, slot, "{}", &p, &err) != RELAY_OK)
		fail_msg("%s: %s", name, err.message);
	return p;
}

/* A transport built against ABI 1.1 (its table ends at pull) loads, and the
 * stream slots of ABI 1.4 read as NULL: the core keeps it off the resident
 * channel (spec/guest.md §17) on the one-shot path. */
static void test_older_transport_loads_without_stream(void **state)
{
	(void)state;
	plugin_registry registry = {0};
	loaded_plugin *p = load_ok(&registry, "abi-old-transport", RELAY_KIND_TRANSPORT);
	assert_non_null(p->transport.exec);
	assert_non_null(p->transport.pull);
	assert_null(p->transport.stream_open);
	assert_null(p->transport.stream_write);
	assert_null(p->transport.stream_read);
	assert_null(p->transport.stream_close);
	assert_int_equal(p->transport.traits & RELAY_TRANSPORT_STREAM, 0);
	assert_int_equal(p->transport.struct_size, RELAY_TRANSPORT_OPS_MIN_SIZE);
	loader_shutdown(&registry);
}

/* Check 8 for the typed console of ABI 1.7: a table too small, a NULL
 * slot, and a table given with the string slot of 1.0-1.6 too. */
static void test_machine_console_table(void **state)
{
	(void)state;
	expect_failure("abi-console-size", RELAY_KIND_MACHINE,
	               "plugin abi-broken ({path}) has a machine console table of 8 bytes, smaller than the "
	               "40 bytes of plugin ABI 1.7");
	expect_failure("abi-console-missing", RELAY_KIND_MACHINE,
	               "plugin abi-broken ({path}) lacks the required machine console operation cancel");
	expect_failure("abi-console-both", RELAY_KIND_MACHINE,
	               "plugin abi-broken ({path}) fills both the machine console slot of ABI 1.0-1.6 and "
	               "console_ops of 1.7: fill only console_ops");
	/* A good typed table is lent as it is, with the plugin's state. */
	plugin_registry registry = {0};
	loaded_plugin *p = load_ok(&registry, "abi-good", RELAY_KIND_MACHINE);
	relay_machine_link link;
	loader_machine_link(p, &link);
	assert_non_null(link.console);
	assert_ptr_equal(link.console->cancel, p->machine.console_ops->cancel);
	assert_ptr_equal(link.console_state, p->state);
	loader_shutdown(&registry);
}

/* A machine built against ABI 1.6 with the string console loads, and the
 * typed console lent to console plugins reaches its slot through the
 * adapter with the operation and body a 1.6 console plugin sent. */
static void answer_is(relay_status st, char **out, const char *expected)
{
	assert_int_equal(st, RELAY_OK);
	assert_string_equal(*out, expected);
	free(*out);
	*out = NULL;
}

static void test_older_machine_console_adapted(void **state)
{
	(void)state;
	plugin_registry registry = {0};
	loaded_plugin *p = load_ok(&registry, "abi-old-console", RELAY_KIND_MACHINE);
	relay_error err;
	memset(&err, 0, sizeof err);
	assert_null(p->machine.console_ops); /* past a 1.6 table's size */
	relay_machine_link link;
	loader_machine_link(p, &link);
	assert_ptr_equal(link.console, &p->machine_console);
	assert_ptr_equal(link.console->open, console_adapter_ops.open);
	const relay_machine_console_ops *c = link.console;
	void *cs = link.console_state;
	const char *lease = "{\"vm\":\"v1\",\"lease_id\":\"L1\"}";
	char *out = NULL;
	answer_is(c->capabilities(cs, NULL, 0, &out, &err), &out, "{\"op\":\"capabilities\",\"body\":{}}");
	answer_is(c->resolve(cs, lease, NULL, 0, &out, &err), &out,
	          "{\"op\":\"resolve\",\"body\":{\"lease_id\":\"L1\"}}");
	answer_is(
	    c->open(cs, lease, "c1", "a1", NULL, 0, &out, &err), &out,
	    "{\"op\":\"open\",\"body\":{\"lease_id\":\"L1\",\"console_id\":\"c1\",\"attempt_id\":\"a1\"}}");
	answer_is(
	    c->cancel(cs, lease, "c1", "a1", NULL, 0, &out, &err), &out,
	    "{\"op\":\"cancel\",\"body\":{\"lease_id\":\"L1\",\"console_id\":\"c1\",\"attempt_id\":\"a1\"}}");
	/* R1 in the adapter: the typed slots know no flag. */
	assert_int_equal(c->cancel(cs, lease, "c1", "a1", NULL, 0x2, &out, &err), RELAY_E_UNSUPPORTED_FLAGS);
	assert_string_equal(err.message, "unknown console cancel flags 0x2");
	assert_null(out);
	loader_shutdown(&registry);
}

static void test_find_plugin_search_path(void **state)
{
	(void)state;
	setenv("MCP_RELAY_PLUGIN_PATH", abi_dir, 1);
	relay_error err;
	char *found = loader_find_plugin("abi-good", &err);
	assert_non_null(found);
	assert_non_null(strstr(found, "/abi-good.so"));
	free(found);
	char *missing = loader_find_plugin("no-such-plugin", &err);
	assert_null(missing);
	assert_non_null(strstr(err.message, "no plugin named no-such-plugin"));
	assert_non_null(strstr(err.message, abi_dir));
	unsetenv("MCP_RELAY_PLUGIN_PATH");
}

int main(void)
{
	const char *build = getenv("RELAY_BUILD_DIR");
	snprintf(abi_dir, sizeof abi_dir, "%s/tests/abi", build ? build : ".");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_not_loadable),
	    cmocka_unit_test(test_no_entry),
	    cmocka_unit_test(test_other_major),
	    cmocka_unit_test(test_refused_host),
	    cmocka_unit_test(test_major_mismatch),
	    cmocka_unit_test(test_descriptor_too_small),
	    cmocka_unit_test(test_kind_does_not_fit),
	    cmocka_unit_test(test_missing_required_op),
	    cmocka_unit_test(test_init_failed),
	    cmocka_unit_test(test_duplicate_name_and_no_dlclose),
	    cmocka_unit_test(test_older_transport_loads_without_stream),
	    cmocka_unit_test(test_machine_console_table),
	    cmocka_unit_test(test_older_machine_console_adapted),
	    cmocka_unit_test(test_find_plugin_search_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
