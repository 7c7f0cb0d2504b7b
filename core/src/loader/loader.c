#include "loader/loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/fsutil.h"
#include "util/log.h"

const char *loader_kind_name(relay_plugin_kind kind)
{
	switch (kind) {
	case RELAY_KIND_MACHINE: return "machine";
	case RELAY_KIND_TRANSPORT: return "transport";
	case RELAY_KIND_CAPTURE: return "capture";
	case RELAY_KIND_CONSOLE: return "console";
	}
	return "unknown";
}

static void kinds_text(uint32_t kinds, char *out, size_t out_len)
{
	static const relay_plugin_kind all[] = {RELAY_KIND_MACHINE, RELAY_KIND_TRANSPORT, RELAY_KIND_CAPTURE,
	                                        RELAY_KIND_CONSOLE};
	out[0] = '\0';
	size_t used = 0;
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		if (!(kinds & all[i]))
			continue;
		int n =
		    snprintf(out + used, out_len - used, "%s%s", used ? ", " : "", loader_kind_name(all[i]));
		if (n < 0 || (size_t)n >= out_len - used)
			break;
		used += (size_t)n;
	}
	if (used == 0)
		snprintf(out, out_len, "none");
}

/* Copies min(src_size, dst_size) bytes of an ops table into a zeroed copy. */
static void copy_sized(void *dst, size_t dst_size, const void *src, size_t src_size)
{
	memset(dst, 0, dst_size);
	if (src != NULL)
		memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
}

/* Check 8: the ops table of each kind provided is present, large enough, and
 * has every required operation. Returns the message of the first miss. */
static relay_status check_required_ops(const loaded_plugin *p, const relay_plugin_descriptor *d,
                                       relay_error *err)
{
	const char *name = d->name;
	struct table {
		relay_plugin_kind kind;
		const void *ops;
		uint32_t size;
		size_t min_size;
	} tables[] = {
	    {RELAY_KIND_MACHINE, d->machine, d->machine_ops_size, RELAY_MACHINE_OPS_MIN_SIZE},
	    {RELAY_KIND_TRANSPORT, d->transport, d->transport_ops_size, RELAY_TRANSPORT_OPS_MIN_SIZE},
	    {RELAY_KIND_CAPTURE, d->capture, d->capture_ops_size, RELAY_CAPTURE_OPS_MIN_SIZE},
	    {RELAY_KIND_CONSOLE, d->console, d->console_ops_size, RELAY_CONSOLE_OPS_MIN_SIZE},
	};
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		if (!(d->kinds & tables[i].kind))
			continue;
		const char *kind = loader_kind_name(tables[i].kind);
		if (tables[i].ops == NULL)
			return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
			                       "plugin %s (%s) lacks the required %s operation table", name,
			                       p->path, kind);
		if (tables[i].size < tables[i].min_size)
			return relay_error_set(
			    err, RELAY_E_INVALID_ARGUMENT, 0,
			    "plugin %s (%s) lacks the required %s operation table: it is %u bytes, "
			    "ABI 1.0 needs at least %zu",
			    name, p->path, kind, tables[i].size, tables[i].min_size);
	}
	struct required {
		relay_plugin_kind kind;
		const char *op;
		const void *fn;
	} required[] = {
	    {RELAY_KIND_MACHINE, "acquire", (const void *)p->machine.acquire},
	    {RELAY_KIND_MACHINE, "renew", (const void *)p->machine.renew},
	    {RELAY_KIND_MACHINE, "inspect", (const void *)p->machine.inspect},
	    {RELAY_KIND_MACHINE, "release", (const void *)p->machine.release},
	    {RELAY_KIND_MACHINE, "verify_destroyed", (const void *)p->machine.verify_destroyed},
	    {RELAY_KIND_MACHINE, "images", (const void *)p->machine.images},
	    {RELAY_KIND_TRANSPORT, "open", (const void *)p->transport.open},
	    {RELAY_KIND_TRANSPORT, "close", (const void *)p->transport.close},
	    {RELAY_KIND_TRANSPORT, "exec", (const void *)p->transport.exec},
	    {RELAY_KIND_TRANSPORT, "push", (const void *)p->transport.push},
	    {RELAY_KIND_TRANSPORT, "pull", (const void *)p->transport.pull},
	    {RELAY_KIND_CAPTURE, "plan", (const void *)p->capture.plan},
	    {RELAY_KIND_CONSOLE, "capabilities", (const void *)p->console.capabilities},
	    {RELAY_KIND_CONSOLE, "resolve", (const void *)p->console.resolve},
	    {RELAY_KIND_CONSOLE, "open", (const void *)p->console.open},
	    {RELAY_KIND_CONSOLE, "cancel", (const void *)p->console.cancel},
	};
	for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
		if (!(d->kinds & required[i].kind) || required[i].fn != NULL)
			continue;
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "plugin %s (%s) lacks the required %s operation %s", name, p->path,
		                       loader_kind_name(required[i].kind), required[i].op);
	}
	return RELAY_OK;
}

/* Check 8, the machine's console (ABI 1.7): the typed table, when given,
 * is large enough, has its four slots, and is not given together with the
 * string slot of 1.0-1.6 (which of the two would answer is then unclear,
 * so neither does). Fills p->machine_console: the copy, or the adapter
 * over the string slot. */
static relay_status check_machine_console(loaded_plugin *p, const char *name, relay_error *err)
{
	const relay_machine_console_ops *typed = p->machine.console_ops;
	if (typed != NULL && p->machine.console != NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "plugin %s (%s) fills both the machine console slot of ABI 1.0-1.6 "
		                       "and console_ops of 1.7: fill only console_ops",
		                       name, p->path);
	if (typed == NULL) {
		if (p->machine.console != NULL) {
			p->console_adapter.console = p->machine.console;
			p->machine_console = console_adapter_ops;
		}
		return RELAY_OK;
	}
	if (typed->struct_size < RELAY_MACHINE_CONSOLE_OPS_MIN_SIZE)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "plugin %s (%s) has a machine console table of %u bytes, smaller than "
		                       "the %zu bytes of plugin ABI 1.7",
		                       name, p->path, typed->struct_size,
		                       (size_t)RELAY_MACHINE_CONSOLE_OPS_MIN_SIZE);
	copy_sized(&p->machine_console, sizeof p->machine_console, typed, typed->struct_size);
	const struct {
		const char *op;
		const void *fn;
	} slots[] = {
	    {"capabilities", (const void *)p->machine_console.capabilities},
	    {"resolve", (const void *)p->machine_console.resolve},
	    {"open", (const void *)p->machine_console.open},
	    {"cancel", (const void *)p->machine_console.cancel},
	};
	for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
		if (slots[i].fn == NULL)
			return relay_error_set(
			    err, RELAY_E_INVALID_ARGUMENT, 0,
			    "plugin %s (%s) lacks the required machine console operation %s", name, p->path,
			    slots[i].op);
	return RELAY_OK;
}

void loader_machine_link(loaded_plugin *p, relay_machine_link *out)
{
	memset(out, 0, sizeof *out);
	out->struct_size = sizeof *out;
	out->name = p->descriptor.name;
	out->ops = &p->machine;
	out->state = p->state;
	if (p->machine_console.struct_size == 0)
		return;
	out->console = &p->machine_console;
	/* The state as it is now (plugin-test's restart gives the plugin a new one). */
	p->console_adapter.state = p->state;
	out->console_state =
	    p->console_adapter.console ? (relay_plugin_state *)&p->console_adapter : p->state;
}

static bool valid_plugin_name(const char *name)
{
	if (name == NULL || *name == '\0' || strlen(name) > 63)
		return false;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
			return false;
	return true;
}

static relay_status find_loaded(plugin_registry *registry, const char *path, relay_plugin_kind slot,
                                loaded_plugin **out, relay_error *err)
{
	for (size_t i = 0; i < registry->count; i++) {
		loaded_plugin *p = registry->plugins[i];
		if (strcmp(p->path, path) != 0)
			continue;
		if (!(p->descriptor.kinds & slot)) {
			char kinds[96];
			kinds_text(p->descriptor.kinds, kinds, sizeof kinds);
			return relay_error_set(
			    err, RELAY_E_INVALID_ARGUMENT, 0,
			    "plugin %s (%s) does not provide the %s kind this profile slot needs "
			    "(it provides: %s)",
			    p->descriptor.name, path, loader_kind_name(slot), kinds);
		}
		*out = p;
		return RELAY_OK;
	}
	return RELAY_E_NOT_FOUND;
}

/* Check 2: the entry symbol, or the reason it is missing (a plugin built for
 * another ABI major exports relay_plugin_entry_v<major>). */
static relay_status find_entry(void *handle, const char *resolved, relay_plugin_entry_fn *entry_out,
                               relay_error *err)
{
	*entry_out = (relay_plugin_entry_fn)dlsym(handle, RELAY_PLUGIN_ENTRY_SYMBOL);
	if (*entry_out != NULL)
		return RELAY_OK;
	for (unsigned major = 0; major <= 16; major++) {
		if (major == RELAY_ABI_VERSION_MAJOR)
			continue;
		char symbol[64];
		snprintf(symbol, sizeof symbol, "relay_plugin_entry_v%u", major);
		if (dlsym(handle, symbol) != NULL)
			return relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
			                       "plugin %s was built for plugin ABI major %u (it exports %s); "
			                       "this relay speaks major %u: rebuild it against this relay's "
			                       "headers",
			                       resolved, major, symbol, RELAY_ABI_VERSION_MAJOR);
	}
	return relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
	                       "plugin %s exports no %s: it is not an mcp-relay plugin", resolved,
	                       RELAY_PLUGIN_ENTRY_SYMBOL);
}

relay_status loader_load(plugin_registry *registry, const char *path, relay_plugin_kind slot,
                         const char *config_json, loaded_plugin **out, relay_error *err)
{
	*out = NULL;
	char resolved[PATH_MAX];
	if (realpath(path, resolved) == NULL)
		snprintf(resolved, sizeof resolved, "%s", path);
	relay_status status = find_loaded(registry, resolved, slot, out, err);
	if (status != RELAY_E_NOT_FOUND)
		return status;
	if (registry->count >= LOADER_MAX_PLUGINS)
		return relay_error_set(err, RELAY_E_TOO_LARGE, 0,
		                       "cannot load plugin %s: more than %d plugins", resolved,
		                       LOADER_MAX_PLUGINS);

	loaded_plugin *p = calloc(1, sizeof *p);
	if (p == NULL || (p->path = strdup(resolved)) == NULL) {
		free(p);
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory loading %s", resolved);
	}

	/* 1. loadable */
	dlerror();
	p->handle = dlopen(resolved, RTLD_NOW | RTLD_LOCAL);
	if (p->handle == NULL) {
		const char *why = dlerror();
		status = relay_error_set(err, RELAY_E_IO, 0, "cannot load plugin %s: %s", resolved,
		                         why ? why : "unknown dlopen error");
		goto fail;
	}

	/* 2. entry found, or built for another major */
	relay_plugin_entry_fn entry = NULL;
	status = find_entry(p->handle, resolved, &entry, err);
	if (status != RELAY_OK)
		goto fail;

	/* 3. the entry accepts this host */
	const relay_plugin_descriptor *d = entry(RELAY_ABI_VERSION);
	if (d == NULL) {
		status =
		    relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
		                    "plugin %s refused this host (plugin ABI %u.%u): its entry returned no "
		                    "descriptor",
		                    resolved, RELAY_ABI_VERSION_MAJOR, RELAY_ABI_VERSION_MINOR);
		goto fail;
	}

	/* 4. major matches */
	if (RELAY_ABI_MAJOR(d->abi_version) != RELAY_ABI_VERSION_MAJOR) {
		status = relay_error_set(
		    err, RELAY_E_UNSUPPORTED, 0,
		    "plugin %s speaks plugin ABI major %u, this relay speaks major %u: rebuild "
		    "it against this relay's headers",
		    resolved, RELAY_ABI_MAJOR(d->abi_version), RELAY_ABI_VERSION_MAJOR);
		goto fail;
	}

	/* 5. descriptor size */
	if (d->struct_size < RELAY_PLUGIN_DESCRIPTOR_MIN_SIZE) {
		status =
		    relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
		                    "plugin %s has a descriptor of %u bytes, smaller than the %zu bytes of "
		                    "plugin ABI 1.0",
		                    resolved, d->struct_size, (size_t)RELAY_PLUGIN_DESCRIPTOR_MIN_SIZE);
		goto fail;
	}
	copy_sized(&p->descriptor, sizeof p->descriptor, d, d->struct_size);
	const relay_plugin_descriptor *desc = &p->descriptor;
	const char *name = valid_plugin_name(desc->name) ? desc->name : NULL;
	if (name == NULL) {
		status = relay_error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "plugin %s has an invalid name: it must be 1 to 63 of a-z, 0-9 and '-'", resolved);
		goto fail;
	}

	/* 6. kind fits the profile slot */
	if (!(desc->kinds & slot)) {
		char kinds[96];
		kinds_text(desc->kinds, kinds, sizeof kinds);
		status =
		    relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                    "plugin %s (%s) does not provide the %s kind this profile slot needs (it "
		                    "provides: %s)",
		                    name, resolved, loader_kind_name(slot), kinds);
		goto fail;
	}

	/* 7. name unique */
	for (size_t i = 0; i < registry->count; i++) {
		if (strcmp(registry->plugins[i]->descriptor.name, name) == 0) {
			status = relay_error_set(
			    err, RELAY_E_INVALID_ARGUMENT, 0,
			    "plugin %s (%s) has the same name as the plugin already loaded from "
			    "%s",
			    name, resolved, registry->plugins[i]->path);
			goto fail;
		}
	}

	/* 8. required ops present */
	if (desc->kinds & RELAY_KIND_MACHINE)
		copy_sized(&p->machine, sizeof p->machine, desc->machine, desc->machine_ops_size);
	if (desc->kinds & RELAY_KIND_TRANSPORT)
		copy_sized(&p->transport, sizeof p->transport, desc->transport, desc->transport_ops_size);
	if (desc->kinds & RELAY_KIND_CAPTURE)
		copy_sized(&p->capture, sizeof p->capture, desc->capture, desc->capture_ops_size);
	if (desc->kinds & RELAY_KIND_CONSOLE)
		copy_sized(&p->console, sizeof p->console, desc->console, desc->console_ops_size);
	status = check_required_ops(p, desc, err);
	if (status == RELAY_OK && (desc->kinds & RELAY_KIND_MACHINE))
		status = check_machine_console(p, name, err);
	if (status != RELAY_OK)
		goto fail;

	/* 9. init succeeded */
	if (desc->init != NULL) {
		relay_error init_err;
		relay_error_clear(&init_err);
		relay_status rc = desc->init(registry->host ? registry->host : loader_host_table(),
		                             config_json ? config_json : "{}", 0, &p->state, &init_err);
		if (rc != RELAY_OK) {
			status = relay_error_set(
			    err, rc, init_err.sys_errno, "plugin %s (%s) failed to initialise: %s", name,
			    resolved, init_err.message[0] ? init_err.message : relay_status_str(rc));
			goto fail;
		}
	}
	p->initialised = true;
	registry->plugins[registry->count++] = p;
	*out = p;
	log_debug("loaded plugin %s %s from %s", name, desc->version ? desc->version : "?", resolved);
	return RELAY_OK;

fail:
	/* Not initialised: unloading is safe. */
	if (p->handle)
		dlclose(p->handle);
	free(p->path);
	free(p);
	return status;
}

void loader_shutdown(plugin_registry *registry)
{
	for (size_t i = registry->count; i-- > 0;) {
		loaded_plugin *p = registry->plugins[i];
		if (p->initialised && p->descriptor.fini)
			p->descriptor.fini(p->state);
		/* The handle stays open: threads the plugin started may still run its code. */
		free(p->path);
		free(p);
		registry->plugins[i] = NULL;
	}
	registry->count = 0;
}

char *loader_exe_dir(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return strdup(".");
	exe[n] = '\0';
	return fs_dirname(exe);
}

/* The installed folder `rel` (relative to the install prefix, or absolute)
 * for an executable in `exe_dir` = <prefix>/RELAY_BIN_INSTALL_DIR, so an
 * installed tree works wherever it is moved. Writes it to out; false when it
 * does not fit or exe_dir is not deep enough. */
static bool installed_dir(const char *exe_dir, const char *rel, char *out, size_t out_len)
{
	if (rel[0] == '/') {
		int n = snprintf(out, out_len, "%s", rel);
		return n > 0 && (size_t)n < out_len;
	}
	char prefix[PATH_MAX];
	int n = snprintf(prefix, sizeof prefix, "%s", exe_dir);
	if (n <= 0 || (size_t)n >= sizeof prefix)
		return false;
	/* One level up per component of the bin folder ("bin" -> 1). */
	for (const char *c = RELAY_BIN_INSTALL_DIR; *c;) {
		while (*c == '/')
			c++;
		if (*c == '\0')
			break;
		char *slash = strrchr(prefix, '/');
		if (slash == NULL)
			return false;
		*(slash == prefix ? slash + 1 : slash) = '\0';
		while (*c && *c != '/')
			c++;
	}
	n = snprintf(out, out_len, "%s%s%s", prefix, strcmp(prefix, "/") == 0 ? "" : "/", rel);
	return n > 0 && (size_t)n < out_len;
}

static char *existing_file(const char *dir, const char *name)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof path, "%s/%s.so", dir, name);
	struct stat st;
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		return strdup(path);
	return NULL;
}

char *loader_find_plugin(const char *name, relay_error *err)
{
	if (strchr(name, '/') != NULL)
		return strdup(name);
	char searched[1024] = "";
	size_t used = 0;
	char *found = NULL;
	const char *extra = getenv("MCP_RELAY_PLUGIN_PATH");
	if (extra && *extra) {
		char *copy = strdup(extra);
		char *save = NULL;
		for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir && !found;
		     dir = strtok_r(NULL, ":", &save)) {
			found = existing_file(dir, name);
			int n =
			    snprintf(searched + used, sizeof searched - used, "%s%s", used ? ", " : "", dir);
			if (n > 0 && (size_t)n < sizeof searched - used)
				used += (size_t)n;
		}
		free(copy);
	}
	char *exe_dir = loader_exe_dir();
	char dir[PATH_MAX];
	/* The build layout only where it exists, so an installed tree names
	 * just its real plugin folder. */
	snprintf(dir, sizeof dir, "%s/lib/mcp-relay/plugins", exe_dir ? exe_dir : ".");
	if (!found && exe_dir && fs_is_dir(dir)) {
		found = existing_file(dir, name);
		int n = snprintf(searched + used, sizeof searched - used, "%s%s", used ? ", " : "", dir);
		if (n > 0 && (size_t)n < sizeof searched - used)
			used += (size_t)n;
	}
	if (!found && exe_dir && installed_dir(exe_dir, RELAY_PLUGIN_INSTALL_DIR, dir, sizeof dir)) {
		found = existing_file(dir, name);
		int n = snprintf(searched + used, sizeof searched - used, "%s%s", used ? ", " : "", dir);
		if (n > 0 && (size_t)n < sizeof searched - used)
			used += (size_t)n;
	}
	free(exe_dir);
	if (!found)
		relay_error_set(
		    err, RELAY_E_NOT_FOUND, 0,
		    "no plugin named %s (looked for %s.so in: %s); build it, or add its folder to "
		    "MCP_RELAY_PLUGIN_PATH",
		    name, name, searched);
	return found;
}

char *loader_receivers_dir(void)
{
	const char *override = getenv("MCP_RELAY_RECEIVER_DIR");
	if (override && *override)
		return strdup(override);
	char *exe_dir = loader_exe_dir();
	if (exe_dir == NULL)
		return NULL;
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/libexec/mcp-relay/receivers", exe_dir);
	if (!fs_is_dir(dir) && !installed_dir(exe_dir, RELAY_RECEIVER_INSTALL_DIR, dir, sizeof dir))
		snprintf(dir, sizeof dir, "%s/../%s", exe_dir, RELAY_RECEIVER_INSTALL_DIR);
	free(exe_dir);
	return strdup(dir);
}
