#include "profile/backends.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/environment.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"

static const char *const slot_names[SLOT_COUNT] = {"machine", "transport", "capture", "console"};
static const relay_plugin_kind slot_kinds[SLOT_COUNT] = {RELAY_KIND_MACHINE, RELAY_KIND_TRANSPORT,
                                                         RELAY_KIND_CAPTURE, RELAY_KIND_CONSOLE};

const char *backends_slot_name(backend_slot slot)
{
	return slot < SLOT_COUNT ? slot_names[slot] : "unknown";
}

void backends_select(relay_backends *b, const relay_settings *s)
{
	memset(b, 0, sizeof *b);
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->ready, NULL);
	const char *defaults[SLOT_COUNT];
	if (strcmp(s->backend, "local") == 0) {
		defaults[SLOT_MACHINE] = "machine-local";
		defaults[SLOT_TRANSPORT] = "machine-local";
		defaults[SLOT_CAPTURE] = "capture-x11";
		defaults[SLOT_CONSOLE] = "console-vnc";
	} else if (strcmp(s->backend, "docker") == 0) {
		defaults[SLOT_MACHINE] = "machine-docker";
		defaults[SLOT_TRANSPORT] = "machine-docker";
		defaults[SLOT_CAPTURE] = "capture-x11";
		defaults[SLOT_CONSOLE] = "console-vnc";
	} else if (strcmp(s->backend, "machine-service") == 0) {
		defaults[SLOT_MACHINE] = "machine-service";
		defaults[SLOT_TRANSPORT] = "transfer-ssh";
		defaults[SLOT_CAPTURE] = "capture-cua";
		defaults[SLOT_CONSOLE] = "console-vnc";
	} else {
		/* A plugin path: it fills the slots it provides (known after loading). */
		for (int i = 0; i < SLOT_COUNT; i++)
			defaults[i] = s->backend;
	}
	for (int i = 0; i < SLOT_COUNT; i++) {
		const char *name = defaults[i];
		if (s->environment != NULL) {
			const char *chosen = environment_plugin_for(s->environment, slot_names[i]);
			if (chosen != NULL)
				name = chosen;
		}
		b->names[i] = name ? strdup(name) : NULL;
	}
}

/* What the settings say about the plugins shipped with the relay, by the
 * name the loader finds them under: the variable and setting that carry
 * their options, and whether they work through the machine service at
 * MCP_RELAY_URL. The settings name plugins, so this table is the one place
 * a plugin's name is looked up; every other room asks the slot
 * (backends_options, backends_options_variable, backends_uses_service). */
typedef struct plugin_settings {
	const char *plugin;
	const char *options_variable;
	size_t options_offset; /* offsetof(relay_settings, <json_object *>) */
	bool uses_service;
} plugin_settings;

static const plugin_settings shipped_plugins[] = {
    {"machine-service", "MCP_RELAY_MACHINE_SERVICE_OPTIONS",
     offsetof(relay_settings, machine_service_options), true},
    {"machine-local", "MCP_RELAY_LOCAL_OPTIONS", offsetof(relay_settings, local_options), false},
    {"machine-docker", "MCP_RELAY_DOCKER_OPTIONS", offsetof(relay_settings, docker_options), false},
    {"transfer-ssh", "MCP_RELAY_TRANSFER_SSH_OPTIONS", offsetof(relay_settings, transfer_ssh_options), false},
};

static const plugin_settings *shipped_plugin(const char *plugin_name)
{
	for (size_t i = 0; plugin_name && i < sizeof shipped_plugins / sizeof shipped_plugins[0]; i++)
		if (strcmp(shipped_plugins[i].plugin, plugin_name) == 0)
			return &shipped_plugins[i];
	return NULL;
}

/* The options the settings give `plugin_name` (borrowed), or NULL. */
static json_object *plugin_options(const relay_settings *s, const char *plugin_name)
{
	const plugin_settings *p = shipped_plugin(plugin_name);
	return p ? *(json_object *const *)(const void *)((const char *)s + p->options_offset) : NULL;
}

/* The variable that set `plugin_name`'s options, or NULL when none did. */
static const char *options_variable(const relay_settings *s, const char *plugin_name)
{
	return plugin_options(s, plugin_name) ? shipped_plugin(plugin_name)->options_variable : NULL;
}

/* The name a plugin is loaded under: the file name without ".so" of a
 * path, else the name itself. */
static void plugin_file_name(const char *name_or_path, char *out, size_t len)
{
	const char *base = fs_basename(name_or_path);
	size_t n = strlen(base);
	if (n > 3 && strcmp(base + n - 3, ".so") == 0)
		n -= 3;
	snprintf(out, len, "%.*s", (int)n, base);
}

bool backends_uses_service(const relay_backends *b, backend_slot slot)
{
	if (slot >= SLOT_COUNT || b->names[slot] == NULL)
		return false;
	char name[128];
	plugin_file_name(b->names[slot], name, sizeof name);
	const plugin_settings *p = shipped_plugin(name);
	return p != NULL && p->uses_service;
}

static char *plugin_config(const relay_settings *s, const char *plugin_name, const char *state_dir)
{
	json_object *config = json_object_new_object();
	jsonx_add_str(config, "stateDir", state_dir);
	char *receivers = loader_receivers_dir();
	jsonx_add_str(config, "libexecDir", receivers);
	free(receivers);
	jsonx_add_str(config, "guestNetwork", settings_guest_network_name(s->guest_network));
	jsonx_add_str(config, "serviceUrl", s->service_url);
	jsonx_add_str(config, "sessionId", s->session_id);
	jsonx_add(config, "environment", s->environment ? environment_identity(s->environment) : NULL);
	/* The exported bundle (spec/machine-service.md §7.7) for the subprocesses a
	 * plugin starts (Tart, OpenSSH, machctl); null without a profile. */
	jsonx_add(config, "exportedEnvironment", s->environment ? environment_bundle(s->environment) : NULL);
	json_object *options = plugin_options(s, plugin_name);
	jsonx_add(config, "options", options ? json_object_get(options) : json_object_new_object());
	char *text = jsonx_to_string(config, 0);
	json_object_put(config);
	return text;
}

void backends_load(relay_backends *b, const relay_settings *s)
{
	bool custom = s->backend[0] == '/';
	for (int i = 0; i < SLOT_COUNT; i++) {
		if (b->names[i] == NULL)
			continue;
		relay_error err;
		memset(&err, 0, sizeof err);
		char *path = loader_find_plugin(b->names[i], &err);
		if (path == NULL) {
			b->load_status[i] = err.code;
			b->load_errors[i] = strdup(err.message);
			log_error("%s slot: %s", slot_names[i], err.message);
			continue;
		}
		/* A custom .so fills only the slots it provides; others stay empty. */
		if (custom && i != SLOT_MACHINE) {
			loaded_plugin *machine = b->plugins[SLOT_MACHINE];
			if (machine == NULL || !(machine->descriptor.kinds & slot_kinds[i])) {
				free(path);
				free(b->names[i]);
				b->names[i] = NULL;
				continue;
			}
		}
		const char *base = fs_basename(path);
		char name[128];
		snprintf(name, sizeof name, "%.*s", (int)(strlen(base) > 3 ? strlen(base) - 3 : strlen(base)),
		         base);
		char *plugins_dir = fs_path_join(s->state_root, "plugins");
		char *state_dir = plugins_dir ? fs_path_join(plugins_dir, name) : NULL;
		free(plugins_dir);
		if (state_dir == NULL || fs_mkdir_p(state_dir, 0700, &err) != RELAY_OK) {
			b->load_status[i] = state_dir ? err.code : RELAY_E_NO_MEMORY;
			b->load_errors[i] = strdup(state_dir ? err.message : "out of memory");
			log_error("%s slot: %s", slot_names[i], b->load_errors[i]);
			free(state_dir);
			free(path);
			continue;
		}
		char *config = plugin_config(s, name, state_dir);
		loaded_plugin *plugin = NULL;
		if (loader_load(&b->registry, path, slot_kinds[i], config, &plugin, &err) == RELAY_OK) {
			b->plugins[i] = plugin;
		} else {
			b->load_status[i] = err.code != RELAY_OK ? err.code : RELAY_E_INTERNAL;
			/* A plugin refusing its options names the variable they
			 * came from and the fix (spec/lifecycle.md §14). */
			const char *variable = options_variable(s, name);
			char message[sizeof err.message + 256];
			if (variable && b->load_status[i] == RELAY_E_INVALID_ARGUMENT)
				snprintf(
				    message, sizeof message,
				    "%s (the options come from %s: correct or remove what it names there, "
				    "then restart the server)",
				    err.message, variable);
			else
				snprintf(message, sizeof message, "%s", err.message);
			b->load_errors[i] = strdup(message);
			log_error("%s slot: %s", slot_names[i], message);
		}
		free(config);
		free(state_dir);
		free(path);
	}
	if (b->plugins[SLOT_MACHINE])
		loader_machine_link(b->plugins[SLOT_MACHINE], &b->machine_link);
	pthread_mutex_lock(&b->lock);
	b->loaded = true;
	pthread_cond_broadcast(&b->ready);
	pthread_mutex_unlock(&b->lock);
}

void backends_ensure_loaded(relay_backends *b, const relay_settings *s)
{
	pthread_mutex_lock(&b->lock);
	if (b->loaded || b->loading) {
		while (!b->loaded)
			pthread_cond_wait(&b->ready, &b->lock);
		pthread_mutex_unlock(&b->lock);
		return;
	}
	b->loading = true;
	pthread_mutex_unlock(&b->lock);
	backends_load(b, s);
}

void backends_wait(relay_backends *b)
{
	pthread_mutex_lock(&b->lock);
	while (!b->loaded)
		pthread_cond_wait(&b->ready, &b->lock);
	pthread_mutex_unlock(&b->lock);
}

loaded_plugin *backends_transport_for(relay_backends *b, const char *lease_json)
{
	loaded_plugin *machine = b->plugins[SLOT_MACHINE];
	loaded_plugin *slot = b->plugins[SLOT_TRANSPORT];
	bool machine_transport = machine && (machine->descriptor.kinds & RELAY_KIND_TRANSPORT);
	bool has_ssh = false;
	json_object *lease = lease_json ? jsonx_parse_str(lease_json, NULL, 0) : NULL;
	if (lease && jsonx_get_obj(lease, "ssh") != NULL)
		has_ssh = true;
	json_object_put(lease);
	if (slot && slot != machine && has_ssh)
		return slot;
	if (slot == NULL && has_ssh && b->load_errors[SLOT_TRANSPORT] != NULL &&
	    b->load_status[SLOT_TRANSPORT] != RELAY_E_NOT_FOUND)
		return NULL;
	if (machine_transport)
		return machine;
	return slot;
}

const char *backends_display_name(const relay_backends *b, backend_slot slot)
{
	if (b->plugins[slot])
		return b->plugins[slot]->descriptor.name;
	return b->names[slot];
}

void backends_free(relay_backends *b)
{
	loader_shutdown(&b->registry);
	for (int i = 0; i < SLOT_COUNT; i++) {
		free(b->names[i]);
		free(b->load_errors[i]);
	}
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->ready);
}
