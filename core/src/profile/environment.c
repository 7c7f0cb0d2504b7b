/* The selected environment profile (profile/environment.h). */
#include "profile/environment.h"

#include <errno.h>
#include <limits.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egress/policy.h"
#include "relay_support/pattern.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define PROFILE_MAX_BYTES 65536
#define SLOT_COUNT_       4

/* The ten keys of schema version 2 (version 1's with vmctlPath renamed;
 * spec/machine-service.md §11: the other names are assumed unchanged, and this
 * table is the one place that knows them). */
static const char *const profile_keys[] = {"schemaVersion", "id",
                                           "vmServiceUrl",  "imageRepository",
                                           "tartHome",      "serviceStateDir",
                                           "imageStateDir", "relayStateDir",
                                           "machctlPath",   "tartPath"};
#define PROFILE_KEY_COUNT (sizeof profile_keys / sizeof profile_keys[0])
static const char *const path_keys[] = {"imageRepository", "tartHome",    "serviceStateDir", "imageStateDir",
                                        "relayStateDir",   "machctlPath", "tartPath"};
#define PATH_KEY_COUNT (sizeof path_keys / sizeof path_keys[0])
static const char *const mutable_roots[] = {"tartHome", "serviceStateDir", "imageStateDir", "relayStateDir"};
static const char *const slots[SLOT_COUNT_] = {"machine", "transport", "capture", "console"};
/* The default roots a selected environment must stay away from (§7.3;
 * the last two are ours). */
static const char *const default_state_names[] = {"vm-service",  "machine-service", "pilot-images",
                                                  "pi-vm-relay", "mcp-vm-relay",    "mcp-relay"};

struct relay_environment {
	char *file;
	json_object *canonical; /* the ten keys, canonical values */
	char fingerprint[65];
	char *plugins[SLOT_COUNT_];
	char *guest_network; /* relayNetwork.guestNetwork, NULL when not named */
	char *egress_allow;  /* relayNetwork.egressAllow, NULL when not named */
};

/* ---- duplicate keys ---------------------------------------------------------- */

/* The end of the JSON string starting at text[i] == '"' (index of the
 * closing quote), or len when unterminated. */
static size_t string_end(const char *text, size_t len, size_t i)
{
	for (size_t j = i + 1; j < len; j++) {
		if (text[j] == '\\')
			j++;
		else if (text[j] == '"')
			return j;
	}
	return len;
}

bool environment_json_has_duplicate_keys(const char *text, size_t len)
{
	/* A stack of the containers being read: for objects, the keys seen. */
	enum { MAX_DEPTH = 64 };
	json_object *seen[MAX_DEPTH];
	bool is_object[MAX_DEPTH];
	bool expect_key[MAX_DEPTH];
	int depth = 0;
	bool duplicate = false;
	for (size_t i = 0; i < len && !duplicate; i++) {
		char c = text[i];
		if (c == '{' || c == '[') {
			if (depth == MAX_DEPTH)
				break;
			is_object[depth] = c == '{';
			expect_key[depth] = c == '{';
			seen[depth] = c == '{' ? json_object_new_object() : NULL;
			depth++;
		} else if (c == '}' || c == ']') {
			if (depth > 0) {
				depth--;
				json_object_put(seen[depth]);
			}
		} else if (c == ',') {
			if (depth > 0 && is_object[depth - 1])
				expect_key[depth - 1] = true;
		} else if (c == '"') {
			size_t end = string_end(text, len, i);
			if (depth > 0 && is_object[depth - 1] && expect_key[depth - 1]) {
				expect_key[depth - 1] = false;
				/* Unescape the key by parsing it as a JSON string. */
				json_object *key = jsonx_parse(text + i, end + 1 - i, NULL, NULL, 0);
				const char *k = json_object_is_type(key, json_type_string)
				                    ? json_object_get_string(key)
				                    : "";
				if (json_object_object_get_ex(seen[depth - 1], k, NULL))
					duplicate = true;
				else
					json_object_object_add(seen[depth - 1], k, NULL);
				json_object_put(key);
			}
			i = end;
		}
	}
	while (depth > 0)
		json_object_put(seen[--depth]);
	return duplicate;
}

/* ---- values -------------------------------------------------------------------- */

/* §7.3: resolves existing symbolic links, including ancestors of a path
 * that does not exist yet; trailing slashes are dropped; a dangling link
 * is an error. malloc'd, or NULL with the reason in err. */
static char *canonical_path(const char *path, const char *key, relay_error *err)
{
	char resolved[PATH_MAX];
	if (realpath(path, resolved) != NULL)
		return strdup(resolved);
	if (errno != ENOENT) {
		relay_error_set(err, RELAY_E_INVALID_ARGUMENT, errno, "\"%s\" (%s) cannot be resolved: %s",
		                key, path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (lstat(path, &st) == 0) {
		relay_error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "\"%s\" (%s) is or passes through a dangling symbolic link; fix or remove the link", key,
		    path);
		return NULL;
	}
	char *copy = strdup(path);
	if (copy == NULL)
		return NULL;
	size_t n = strlen(copy);
	while (n > 1 && copy[n - 1] == '/')
		copy[--n] = '\0';
	char *slash = strrchr(copy, '/');
	char *result = NULL;
	if (slash == NULL || slash == copy) {
		result = strdup(copy);
	} else {
		*slash = '\0';
		char *parent = canonical_path(copy, key, err);
		if (parent) {
			result = fs_path_join(parent, slash + 1);
			free(parent);
		}
	}
	free(copy);
	return result;
}

/* §7.3: lowercase http://, a loopback host, an explicit port 1-65535, an
 * optional single trailing slash. Canonical form http://host:port. */
static bool canonical_url(const char *url, char *out, size_t out_len)
{
	static const char *const pattern =
	    "^http://(localhost|127\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}|\\[::1\\]):([0-9]{1,5})/?$";
	regex_t re;
	regmatch_t m[3];
	if (regcomp(&re, pattern, REG_EXTENDED) != 0)
		return false;
	int rc = regexec(&re, url, 3, m, 0);
	regfree(&re);
	if (rc != 0)
		return false;
	char host[64];
	size_t hl = (size_t)(m[1].rm_eo - m[1].rm_so);
	if (hl >= sizeof host)
		return false;
	memcpy(host, url + m[1].rm_so, hl);
	host[hl] = '\0';
	if (strncmp(host, "127.", 4) == 0) {
		int a, b, c;
		if (sscanf(host + 4, "%d.%d.%d", &a, &b, &c) != 3 || a > 255 || b > 255 || c > 255)
			return false;
	}
	long port = strtol(url + m[2].rm_so, NULL, 10);
	if (port < 1 || port > 65535)
		return false;
	return snprintf(out, out_len, "http://%s:%ld", host, port) < (int)out_len;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/* True when one path is the other or lies inside it. */
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

static relay_status fail(relay_error *err, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static relay_status fail(relay_error *err, const char *file, const char *fmt, ...)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "Environment profile %s: ", file);
	va_list ap;
	va_start(ap, fmt);
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s", strbuf_str(&sb));
	strbuf_free(&sb);
	return RELAY_E_INVALID_ARGUMENT;
}

/* schemaVersion as an integer (2.0 reads as 2); false when not a number
 * with an integral value. */
static bool schema_version(json_object *profile, int64_t *out)
{
	json_object *v = NULL;
	if (!json_object_object_get_ex(profile, "schemaVersion", &v))
		return false;
	if (json_object_is_type(v, json_type_int)) {
		*out = json_object_get_int64(v);
		return true;
	}
	if (json_object_is_type(v, json_type_double)) {
		double d = json_object_get_double(v);
		/* In range before the cast: casting 2e51 to int64_t is undefined. */
		if (d >= -9.2e18 && d <= 9.2e18 && d == (double)(int64_t)d) {
			*out = (int64_t)d;
			return true;
		}
	}
	return false;
}

/* The mutable-root rules of §7.3. */
static relay_status check_roots(relay_environment *env, relay_error *err)
{
	const char *repo = jsonx_get_str(env->canonical, "imageRepository");
	const char *home = getenv("HOME");
	const char *xdg = getenv("XDG_STATE_HOME");
	char defaults[1 + 2 * 6][PATH_MAX];
	size_t ndefaults = 0;
	if (home && home[0] == '/') {
		snprintf(defaults[ndefaults++], PATH_MAX, "%s/.tart", home);
		for (size_t i = 0; i < 6; i++)
			snprintf(defaults[ndefaults++], PATH_MAX, "%s/.local/state/%s", home,
			         default_state_names[i]);
	}
	for (size_t i = 0; xdg && xdg[0] == '/' && i < 6; i++)
		snprintf(defaults[ndefaults++], PATH_MAX, "%s/%s", xdg, default_state_names[i]);
	for (size_t i = 0; i < 4; i++) {
		const char *a = jsonx_get_str(env->canonical, mutable_roots[i]);
		struct stat st;
		if (stat(a, &st) == 0 && !S_ISDIR(st.st_mode))
			return fail(err, env->file, "\"%s\" (%s) exists and is not a folder",
			            mutable_roots[i], a);
		if (overlaps(a, repo))
			return fail(err, env->file,
			            "\"%s\" (%s) overlaps imageRepository (%s); give it a folder of its own",
			            mutable_roots[i], a, repo);
		for (size_t j = i + 1; j < 4; j++) {
			const char *b = jsonx_get_str(env->canonical, mutable_roots[j]);
			if (overlaps(a, b))
				return fail(err, env->file,
				            "\"%s\" and \"%s\" must be disjoint folders (%s, %s)",
				            mutable_roots[i], mutable_roots[j], a, b);
		}
		for (size_t d = 0; d < ndefaults; d++) {
			char canon_default[PATH_MAX];
			relay_error ignored;
			char *c = canonical_path(defaults[d], "default root", &ignored);
			snprintf(canon_default, sizeof canon_default, "%s", c ? c : defaults[d]);
			free(c);
			if (overlaps(a, canon_default) || overlaps(a, defaults[d]))
				return fail(err, env->file,
				            "\"%s\" (%s) overlaps the default root %s; a selected "
				            "environment needs folders "
				            "of its own",
				            mutable_roots[i], a, defaults[d]);
		}
	}
	return RELAY_OK;
}

static relay_status read_plugins(relay_environment *env, json_object *plugins, relay_error *err)
{
	if (!json_object_is_type(plugins, json_type_object))
		return fail(err, env->file,
		            "\"relayPlugins\" must be an object naming the plugin of each slot");
	json_object_object_foreach(plugins, slot, value)
	{
		size_t idx = 0;
		while (idx < SLOT_COUNT_ && strcmp(slots[idx], slot) != 0)
			idx++;
		const char *name =
		    json_object_is_type(value, json_type_string) ? json_object_get_string(value) : NULL;
		bool valid_name = name && (rs_matches(name, "^[a-z0-9][a-z0-9-]{0,62}$") ||
		                           (name[0] == '/' && strlen(name) > 3 && !has_control(name) &&
		                            strcmp(name + strlen(name) - 3, ".so") == 0));
		if (idx == SLOT_COUNT_ || !valid_name)
			return fail(
			    err, env->file,
			    "\"relayPlugins\".\"%s\" must be one of the slots machine, transport, capture, "
			    "console, with a plugin name or an absolute .so path",
			    slot);
		env->plugins[idx] = strdup(name);
	}
	return RELAY_OK;
}

/* relayNetwork (relay only, docs/egress.md): {"guestNetwork": nat|internet|
 * allow, "egressAllow": "<rules>"}, the deployment's network for its guests. */
static relay_status read_network(relay_environment *env, json_object *network, relay_error *err)
{
	if (!json_object_is_type(network, json_type_object))
		return fail(err, env->file,
		            "\"relayNetwork\" must be an object {\"guestNetwork\", \"egressAllow\"}");
	json_object_object_foreach(network, key, value)
	{
		const char *text =
		    json_object_is_type(value, json_type_string) ? json_object_get_string(value) : NULL;
		if (strcmp(key, "guestNetwork") == 0 && text &&
		    (strcmp(text, "nat") == 0 || strcmp(text, "internet") == 0 ||
		     strcmp(text, "allow") == 0)) {
			env->guest_network = strdup(text);
			continue;
		}
		if (strcmp(key, "egressAllow") == 0 && text) {
			egress_policy policy;
			char problem[400];
			if (egress_policy_parse(text, false, &policy, problem, sizeof problem) != 0)
				return fail(err, env->file, "\"relayNetwork\".\"egressAllow\" has a bad %s",
				            problem);
			egress_policy_free(&policy);
			env->egress_allow = strdup(text);
			continue;
		}
		return fail(
		    err, env->file,
		    "\"relayNetwork\".\"%s\" is not known: it takes \"guestNetwork\" (nat, internet or "
		    "allow) and \"egressAllow\" (a string of rules)",
		    key);
	}
	return RELAY_OK;
}

const char *environment_guest_network(const relay_environment *env)
{
	return env ? env->guest_network : NULL;
}

const char *environment_egress_allow(const relay_environment *env)
{
	return env ? env->egress_allow : NULL;
}

/* The profile's shape (§7.1): schemaVersion 2, exactly the known keys, each
 * once, the string ones strings. RELAY_OK, or the refusal naming the fix. */
static relay_status check_profile_shape(json_object *profile, const char *data, size_t len, const char *real,
                                        relay_error *err)
{
	/* Version 1 and vmctlPath first, so the fix is the first thing seen. */
	int64_t version = 0;
	bool has_version = schema_version(profile, &version);
	if (has_version && version == 1) {
		return relay_error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "Environment profile %s is schemaVersion 1; machine-service needs schemaVersion "
		    "2. Fix: set \"schemaVersion\": 2 and rename \"vmctlPath\" to \"machctlPath\".",
		    real);
	}
	if (jsonx_has(profile, "vmctlPath")) {
		return relay_error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "Environment profile %s has \"vmctlPath\", which machine-service renamed. Fix: "
		    "rename \"vmctlPath\" to \"machctlPath\" and set \"schemaVersion\": 2.",
		    real);
	}
	if (environment_json_has_duplicate_keys(data, len)) {
		return fail(err, real,
		            "profile must contain exactly the supported schema fields (a key is repeated)");
	}
	json_object_object_foreach(profile, key, ignored_value)
	{
		(void)ignored_value;
		bool known = strcmp(key, "relayPlugins") == 0 || strcmp(key, "relayNetwork") == 0;
		for (size_t i = 0; i < PROFILE_KEY_COUNT && !known; i++)
			known = strcmp(key, profile_keys[i]) == 0;
		if (!known) {
			return fail(err, real,
			            "profile must contain exactly the supported schema fields (unknown key "
			            "\"%s\")",
			            key);
		}
	}
	for (size_t i = 0; i < PROFILE_KEY_COUNT; i++) {
		if (!jsonx_has(profile, profile_keys[i])) {
			return fail(err, real,
			            "profile must contain exactly the supported schema fields (missing "
			            "\"%s\")",
			            profile_keys[i]);
		}
	}
	if (!has_version || version != 2) {
		return fail(err, real, "\"schemaVersion\" must be the integer 2");
	}
	for (size_t i = 1; i < PROFILE_KEY_COUNT; i++) {
		if (jsonx_get_str(profile, profile_keys[i]) == NULL) {
			return fail(err, real, "\"%s\" must be a string", profile_keys[i]);
		}
	}
	return RELAY_OK;
}

relay_status environment_load(const char *path, relay_environment **out, relay_error *err)
{
	*out = NULL;
	relay_status status = RELAY_OK;
	json_object *profile = NULL;
	relay_environment *env = NULL;
	char *data = NULL;
	size_t len = 0;
	if (path == NULL || path[strspn(path, " \t\r\n")] == '\0')
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "must not be blank; name a schemaVersion 2 profile or unset it");
	char real[PATH_MAX];
	if (realpath(path, real) == NULL)
		return relay_error_set(
		    err, RELAY_E_NOT_FOUND, errno,
		    "names %s, which cannot be opened (%s); point it at an existing profile", path,
		    strerror(errno));
	env = calloc(1, sizeof *env);
	if (env == NULL || (env->file = strdup(real)) == NULL) {
		free(env);
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	struct stat st;
	if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
		status = fail(err, real, "must be a regular file");
		goto cleanup;
	}
	relay_error read_err;
	if (fs_read_file(real, PROFILE_MAX_BYTES, &data, &len, &read_err) != RELAY_OK) {
		status = fail(err, real, "cannot be read as a file of at most %d bytes (%s)",
		              PROFILE_MAX_BYTES, read_err.message);
		goto cleanup;
	}
	char reason[128];
	profile = jsonx_parse(data, len, NULL, reason, sizeof reason);
	if (profile == NULL || !json_object_is_type(profile, json_type_object)) {
		status = fail(err, real, "must be one JSON object in strict UTF-8 (%s)",
		              profile ? "found another JSON value" : reason);
		goto cleanup;
	}
	status = check_profile_shape(profile, data, len, real, err);
	if (status != RELAY_OK)
		goto cleanup;
	const char *id = jsonx_get_str(profile, "id");
	if (!rs_matches(id, "^[a-z0-9][a-z0-9-]{0,47}$")) {
		status = fail(err, real, "\"id\" must match ^[a-z0-9][a-z0-9-]{0,47}$");
		goto cleanup;
	}
	char origin[128];
	if (!canonical_url(jsonx_get_str(profile, "vmServiceUrl"), origin, sizeof origin)) {
		status =
		    fail(err, real,
		         "\"vmServiceUrl\" must be http://localhost:<port>, http://127.x.x.x:<port> or "
		         "http://[::1]:<port> (port 1-65535) with nothing after the port but an optional /");
		goto cleanup;
	}
	env->canonical = json_object_new_object();
	jsonx_add_int(env->canonical, "schemaVersion", 2);
	jsonx_add_str(env->canonical, "id", id);
	jsonx_add_str(env->canonical, "vmServiceUrl", origin);
	for (size_t i = 0; i < PATH_KEY_COUNT; i++) {
		const char *p = jsonx_get_str(profile, path_keys[i]);
		if (p[0] != '/' || has_control(p)) {
			status = fail(err, real, "\"%s\" must be an absolute path without control characters",
			              path_keys[i]);
			goto cleanup;
		}
		relay_error why;
		memset(&why, 0, sizeof why);
		char *canon = canonical_path(p, path_keys[i], &why);
		if (canon == NULL) {
			status = fail(err, real, "%s", why.message[0] ? why.message : "out of memory");
			goto cleanup;
		}
		jsonx_add_str(env->canonical, path_keys[i], canon);
		free(canon);
	}
	const char *repo = jsonx_get_str(env->canonical, "imageRepository");
	char images[PATH_MAX];
	snprintf(images, sizeof images, "%s/images", repo);
	if (!fs_is_dir(images)) {
		status = fail(err, real, "\"imageRepository\" (%s) must exist and contain images/", repo);
		goto cleanup;
	}
	static const char *const executables[] = {"machctlPath", "tartPath"};
	for (size_t i = 0; i < 2; i++) {
		const char *p = jsonx_get_str(env->canonical, executables[i]);
		if (stat(p, &st) != 0 || !S_ISREG(st.st_mode) || access(p, X_OK) != 0) {
			status = fail(err, real, "\"%s\" (%s) must be an executable regular file",
			              executables[i], p);
			goto cleanup;
		}
	}
	status = check_roots(env, err);
	if (status != RELAY_OK)
		goto cleanup;
	json_object *plugins = NULL;
	if (json_object_object_get_ex(profile, "relayPlugins", &plugins)) {
		status = read_plugins(env, plugins, err);
		if (status != RELAY_OK)
			goto cleanup;
	}
	json_object *network = NULL;
	if (json_object_object_get_ex(profile, "relayNetwork", &network)) {
		status = read_network(env, network, err);
		if (status != RELAY_OK)
			goto cleanup;
	}
	/* §7.4: SHA-256 of the canonical profile, keys sorted, compact, Unicode
	 * unescaped. relayPlugins is not part of it. */
	json_object *sorted = environment_canonical(env);
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
	for (size_t i = 0; i < SLOT_COUNT_; i++)
		free(env->plugins[i]);
	free(env->guest_network);
	free(env->egress_allow);
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

const char *environment_value(const relay_environment *env, const char *key)
{
	return jsonx_get_str(env->canonical, key);
}

json_object *environment_canonical(const relay_environment *env)
{
	static const char *const sorted_keys[] = {"id",
	                                          "imageRepository",
	                                          "imageStateDir",
	                                          "machctlPath",
	                                          "relayStateDir",
	                                          "schemaVersion",
	                                          "serviceStateDir",
	                                          "tartHome",
	                                          "tartPath",
	                                          "vmServiceUrl"};
	json_object *sorted = json_object_new_object();
	for (size_t i = 0; i < PROFILE_KEY_COUNT; i++) {
		json_object *field = NULL;
		json_object_object_get_ex(env->canonical, sorted_keys[i], &field);
		json_object_object_add(sorted, sorted_keys[i], json_object_get(field));
	}
	return sorted;
}

json_object *environment_identity(const relay_environment *env)
{
	json_object *identity = json_object_new_object();
	jsonx_add_str(identity, "id", environment_id(env));
	jsonx_add_str(identity, "fingerprint", env->fingerprint);
	static const char *const keys[] = {"vmServiceUrl",    "imageRepository", "tartHome",
	                                   "serviceStateDir", "imageStateDir",   "relayStateDir"};
	for (size_t i = 0; i < 6; i++)
		jsonx_add_str(identity, keys[i], jsonx_get_str(env->canonical, keys[i]));
	return identity;
}

json_object *environment_bundle(const relay_environment *env)
{
	json_object *b = json_object_new_object();
	const char *url = environment_service_url(env);
	jsonx_add_str(b, "VM_ENVIRONMENT_FILE", env->file);
	jsonx_add_str(b, "VM_ENVIRONMENT_FINGERPRINT", env->fingerprint);
	jsonx_add_str(b, "PILOT_REPO", environment_value(env, "imageRepository"));
	jsonx_add_str(b, "TART_HOME", environment_value(env, "tartHome"));
	jsonx_add_str(b, "MACHINE_SERVICE_STATE", environment_value(env, "serviceStateDir"));
	jsonx_add_str(b, "PILOT_IMAGES_STATE_DIR", environment_value(env, "imageStateDir"));
	jsonx_add_str(b, "VM_RELAY_STATE_DIR", environment_value(env, "relayStateDir"));
	jsonx_add_str(b, "VM_RELAY_URL", url);
	/* The URL is canonical http://host:port; the host loses its brackets. */
	const char *host = url + strlen("http://");
	const char *colon = host[0] == '[' ? strchr(host, ']') + 1 : strchr(host, ':');
	char host_text[64];
	if (host[0] == '[')
		snprintf(host_text, sizeof host_text, "%.*s", (int)(colon - host - 2), host + 1);
	else
		snprintf(host_text, sizeof host_text, "%.*s", (int)(colon - host), host);
	jsonx_add_str(b, "MACHINE_SERVICE_HOST", host_text);
	jsonx_add_str(b, "MACHINE_SERVICE_PORT", colon + 1);
	jsonx_add_str(b, "MACHCTL", environment_value(env, "machctlPath"));
	jsonx_add_str(b, "TART", environment_value(env, "tartPath"));
	return b;
}

const char *environment_plugin_for(const relay_environment *env, const char *slot)
{
	for (size_t i = 0; i < SLOT_COUNT_; i++)
		if (strcmp(slots[i], slot) == 0)
			return env->plugins[i];
	return NULL;
}
