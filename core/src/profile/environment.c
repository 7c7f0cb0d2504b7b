#include "profile/environment.h"

#include <errno.h>
#include <limits.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profile/settings.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

#define PROFILE_MAX_BYTES 65536

static const char *const path_keys[] = {"imageRepository", "tartHome",	   "serviceStateDir", "imageStateDir",
					"relayStateDir",   "machctlPath", "tartPath"};
static const char *const mutable_roots[] = {"tartHome", "serviceStateDir", "imageStateDir", "relayStateDir"};
static const char *const slots[] = {"machine", "transport", "capture", "console"};

struct relay_environment {
	char *file;
	json_object *canonical; /* the ten keys, canonical values */
	char fingerprint[65];
	char *plugins[4];
};

static char *canonical_path(const char *path, relay_error *err, const char *key)
{
	/* Resolve the longest existing prefix with realpath, then append the rest. */
	char work[PATH_MAX];
	snprintf(work, sizeof work, "%s", path);
	char tail[PATH_MAX] = "";
	for (;;) {
		char real[PATH_MAX];
		if (realpath(work, real) != NULL) {
			char out[PATH_MAX * 2];
			snprintf(out, sizeof out, "%s%s", strcmp(real, "/") == 0 && tail[0] ? "" : real, tail);
			return strdup(out[0] ? out : "/");
		}
		struct stat st;
		if (lstat(work, &st) == 0) {
			relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s passes through a dangling symbolic link: %s",
					key, work);
			return NULL;
		}
		char *slash = strrchr(work, '/');
		if (slash == NULL || slash == work) {
			char out[PATH_MAX * 2];
			snprintf(out, sizeof out, "%s%s", work, tail);
			return strdup(out);
		}
		char newtail[PATH_MAX];
		snprintf(newtail, sizeof newtail, "%s%s", slash, tail);
		snprintf(tail, sizeof tail, "%s", newtail);
		*slash = '\0';
	}
}

static bool overlaps(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t n = la < lb ? la : lb;
	if (strncmp(a, b, n) != 0)
		return false;
	if (la == lb)
		return true;
	const char *longer = la > lb ? a : b;
	return longer[n] == '/' || n == 1;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

relay_status environment_load(const char *path, relay_environment **out, relay_error *err)
{
	*out = NULL;
	relay_status status = RELAY_OK;
	json_object *profile = NULL;
	relay_environment *env = NULL;
	char *data = NULL;
	if (path[0] == '\0' || strspn(path, " \t") == strlen(path))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "must not be blank");
	char real[PATH_MAX];
	if (realpath(path, real) == NULL)
		return relay_error_set(err, RELAY_E_NOT_FOUND, errno, "names %s, which cannot be read: %s", path,
				       strerror(errno));
	size_t len = 0;
	status = fs_read_file(real, PROFILE_MAX_BYTES, &data, &len, err);
	if (status != RELAY_OK) {
		relay_error_set(err, status, 0, "names %s, which is not a readable profile of at most %d bytes", real,
				PROFILE_MAX_BYTES);
		goto cleanup;
	}
	char reason[128];
	profile = jsonx_parse(data, len, NULL, reason, sizeof reason);
	if (profile == NULL || !json_object_is_type(profile, json_type_object)) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s is not one JSON object (%s)", real,
					 profile ? "not an object" : reason);
		goto cleanup;
	}
	/* Version 1 and vmctlPath first, so the fix is the first thing seen. */
	int64_t version = 0;
	bool has_version = jsonx_get_int(profile, "schemaVersion", &version);
	if (has_version && version == 1) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
					 "Environment profile %s is schemaVersion 1; machine-service needs schemaVersion "
					 "2. Fix: set \"schemaVersion\": 2 and rename \"vmctlPath\" to \"machctlPath\".",
					 real);
		goto cleanup;
	}
	if (jsonx_has(profile, "vmctlPath")) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
					 "Environment profile %s has \"vmctlPath\", which machine-service renamed. Fix: "
					 "rename \"vmctlPath\" to \"machctlPath\" and set \"schemaVersion\": 2.",
					 real);
		goto cleanup;
	}
	static const char *const keys[] = {"schemaVersion", "id",	     "vmServiceUrl",  "imageRepository",
					   "tartHome",	    "serviceStateDir", "imageStateDir", "relayStateDir",
					   "machctlPath",   "tartPath"};
	json_object_object_foreach(profile, key, ignored_value)
	{
		(void)ignored_value;
		bool found = strcmp(key, "relayPlugins") == 0;
		for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !found; i++)
			found = strcmp(key, keys[i]) == 0;
		if (!found) {
			status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
						 "%s: profile must contain exactly the supported schema fields (unknown "
						 "key %s)",
						 real, key);
			goto cleanup;
		}
	}
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		if (!jsonx_has(profile, keys[i])) {
			status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
						 "%s: profile must contain exactly the supported schema fields (missing "
						 "%s)",
						 real, keys[i]);
			goto cleanup;
		}
	}
	if (!has_version || version != 2) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s: schemaVersion must be 2", real);
		goto cleanup;
	}
	const char *id = jsonx_get_str(profile, "id");
	regex_t re;
	regcomp(&re, "^[a-z0-9][a-z0-9-]{0,47}$", REG_EXTENDED | REG_NOSUB);
	bool id_ok = id && regexec(&re, id, 0, NULL, 0) == 0;
	regfree(&re);
	if (!id_ok) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s: id must match ^[a-z0-9][a-z0-9-]{0,47}$",
					 real);
		goto cleanup;
	}
	const char *url = jsonx_get_str(profile, "vmServiceUrl");
	char origin[512];
	const char *why = NULL;
	if (url == NULL || !settings_valid_loopback_origin(url, origin, sizeof origin, &why) ||
	    strchr(origin + 7, ':') == NULL || strchr(origin + 7, ':') < strchr(origin + 7, ']')) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
					 "%s: vmServiceUrl %s", real, why ? why : "must be http://<loopback host>:<port>");
		goto cleanup;
	}
	env = calloc(1, sizeof *env);
	if (env == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	env->file = strdup(real);
	env->canonical = json_object_new_object();
	jsonx_add_int(env->canonical, "schemaVersion", 2);
	jsonx_add_str(env->canonical, "id", id);
	jsonx_add_str(env->canonical, "vmServiceUrl", origin);
	for (size_t i = 0; i < sizeof path_keys / sizeof path_keys[0]; i++) {
		const char *p = jsonx_get_str(profile, path_keys[i]);
		if (p == NULL || p[0] != '/' || has_control(p)) {
			status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
						 "%s: %s must be an absolute path without control characters", real,
						 path_keys[i]);
			goto cleanup;
		}
		char *canon = canonical_path(p, err, path_keys[i]);
		if (canon == NULL) {
			status = RELAY_E_INVALID_ARGUMENT;
			goto cleanup;
		}
		jsonx_add_str(env->canonical, path_keys[i], canon);
		free(canon);
	}
	const char *repo = jsonx_get_str(env->canonical, "imageRepository");
	char images[PATH_MAX];
	snprintf(images, sizeof images, "%s/images", repo);
	if (!fs_is_dir(images)) {
		status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
					 "%s: imageRepository %s must exist and contain images/", real, repo);
		goto cleanup;
	}
	static const char *const executables[] = {"machctlPath", "tartPath"};
	for (size_t i = 0; i < 2; i++) {
		const char *p = jsonx_get_str(env->canonical, executables[i]);
		struct stat st;
		if (stat(p, &st) != 0 || !S_ISREG(st.st_mode) || access(p, X_OK) != 0) {
			status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
						 "%s: %s %s must be an executable regular file", real, executables[i], p);
			goto cleanup;
		}
	}
	/* Mutable roots: folders if they exist, pairwise disjoint, away from the
	 * image repository and the default roots. */
	const char *home = getenv("HOME");
	const char *xdg = getenv("XDG_STATE_HOME");
	char defaults[16][PATH_MAX];
	size_t ndefaults = 0;
	static const char *const state_names[] = {"vm-service", "machine-service", "pilot-images",
						  "pi-vm-relay", "mcp-vm-relay", "mcp-relay"};
	if (home && home[0] == '/') {
		snprintf(defaults[ndefaults++], PATH_MAX, "%s/.tart", home);
		for (size_t i = 0; i < 6; i++)
			snprintf(defaults[ndefaults++], PATH_MAX, "%s/.local/state/%s", home, state_names[i]);
	}
	for (size_t i = 0; xdg && xdg[0] == '/' && i < 6 && ndefaults < 16; i++)
		snprintf(defaults[ndefaults++], PATH_MAX, "%s/%s", xdg, state_names[i]);
	for (size_t i = 0; i < 4; i++) {
		const char *a = jsonx_get_str(env->canonical, mutable_roots[i]);
		struct stat st;
		if (stat(a, &st) == 0 && !S_ISDIR(st.st_mode)) {
			status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s: %s %s must be a folder", real,
						 mutable_roots[i], a);
			goto cleanup;
		}
		if (overlaps(a, repo)) {
			status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
						 "%s: %s overlaps imageRepository", real, mutable_roots[i]);
			goto cleanup;
		}
		for (size_t j = i + 1; j < 4; j++) {
			if (overlaps(a, jsonx_get_str(env->canonical, mutable_roots[j]))) {
				status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
							 "%s: %s and %s must be disjoint folders", real,
							 mutable_roots[i], mutable_roots[j]);
				goto cleanup;
			}
		}
		for (size_t d = 0; d < ndefaults; d++) {
			if (overlaps(a, defaults[d])) {
				status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
							 "%s: %s overlaps the default root %s; an environment needs its "
							 "own folders",
							 real, mutable_roots[i], defaults[d]);
				goto cleanup;
			}
		}
	}
	json_object *plugins = NULL;
	if (json_object_object_get_ex(profile, "relayPlugins", &plugins)) {
		if (!json_object_is_type(plugins, json_type_object)) {
			status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s: relayPlugins must be an object",
						 real);
			goto cleanup;
		}
		json_object_object_foreach(plugins, slot, plugin_name)
		{
			size_t idx = 0;
			while (idx < 4 && strcmp(slots[idx], slot) != 0)
				idx++;
			if (idx == 4 || !json_object_is_type(plugin_name, json_type_string) ||
			    json_object_get_string_len(plugin_name) == 0) {
				status = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
							 "%s: relayPlugins.%s is not a slot (machine, transport, capture, "
							 "console) with a plugin name or absolute .so path",
							 real, slot);
				goto cleanup;
			}
			env->plugins[idx] = strdup(json_object_get_string(plugin_name));
		}
	}
	/* Fingerprint: SHA-256 of the canonical profile, keys sorted, compact. */
	json_object *sorted = json_object_new_object();
	const char *order[] = {"id",		"imageRepository", "imageStateDir", "machctlPath", "relayStateDir",
			       "schemaVersion", "serviceStateDir", "tartHome",	    "tartPath",	   "vmServiceUrl"};
	for (size_t i = 0; i < 10; i++) {
		json_object *field = NULL;
		json_object_object_get_ex(env->canonical, order[i], &field);
		json_object_object_add(sorted, order[i], json_object_get(field));
	}
	char *compact = jsonx_to_string(sorted, 0);
	json_object_put(sorted);
	if (compact == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	sha256_buffer_hex(compact, strlen(compact), env->fingerprint);
	free(compact);
	*out = env;
	env = NULL;
cleanup:
	environment_free(env);
	json_object_put(profile);
	free(data);
	return status;
}

void environment_free(relay_environment *env)
{
	if (env == NULL)
		return;
	free(env->file);
	json_object_put(env->canonical);
	for (size_t i = 0; i < 4; i++)
		free(env->plugins[i]);
	free(env);
}

const char *environment_id(const relay_environment *env)
{
	return jsonx_get_str(env->canonical, "id");
}

const char *environment_fingerprint(const relay_environment *env)
{
	return env->fingerprint;
}

const char *environment_file(const relay_environment *env)
{
	return env->file;
}

const char *environment_service_url(const relay_environment *env)
{
	return jsonx_get_str(env->canonical, "vmServiceUrl");
}

const char *environment_relay_state_dir(const relay_environment *env)
{
	return jsonx_get_str(env->canonical, "relayStateDir");
}

json_object *environment_identity(const relay_environment *env)
{
	json_object *identity = json_object_new_object();
	jsonx_add_str(identity, "id", environment_id(env));
	jsonx_add_str(identity, "fingerprint", env->fingerprint);
	static const char *const keys[] = {"vmServiceUrl",    "imageRepository", "tartHome",
					   "serviceStateDir", "imageStateDir",	 "relayStateDir"};
	for (size_t i = 0; i < 6; i++)
		jsonx_add_str(identity, keys[i], jsonx_get_str(env->canonical, keys[i]));
	return identity;
}

const char *environment_plugin_for(const relay_environment *env, const char *slot)
{
	for (size_t i = 0; i < 4; i++)
		if (strcmp(slots[i], slot) == 0)
			return env->plugins[i];
	return NULL;
}
