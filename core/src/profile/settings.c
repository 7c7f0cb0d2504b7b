#include "profile/settings.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egress/policy.h"
#include "profile/environment.h"
#include "registry/registry.h"
#include "relay_support/pattern.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"

static int fail(char *errbuf, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* The variable `name` as a JSON object into *out (NULL when unset; owned by
 * the settings). Anything else fails naming the variable, `what` it must be,
 * and why the value is not that. */
static int object_setting(const char *name, const char *what, json_object **out, char *errbuf, size_t errlen)
{
	const char *v = getenv(name);
	*out = NULL;
	if (v == NULL)
		return 0;
	char reason[128] = "";
	json_object *value = jsonx_parse_str(v, reason, sizeof reason);
	if (value != NULL && json_object_is_type(value, json_type_object)) {
		*out = value;
		return 0;
	}
	if (value != NULL) {
		const char *type = json_type_to_name(json_object_get_type(value));
		json_object_put(value);
		return fail(errbuf, errlen, "%s must be %s (it is a JSON %s)", name, what, type);
	}
	return fail(errbuf, errlen, "%s must be %s (not JSON: %s)", name, what,
	            reason[0] ? reason : "unreadable");
}

const char *settings_guest_network_name(guest_network network)
{
	return network == GUEST_NETWORK_INTERNET ? "internet"
	       : network == GUEST_NETWORK_ALLOW  ? "allow"
	                                         : "nat";
}

const char *settings_on_exit_name(on_exit_mode mode)
{
	return mode == ON_EXIT_RELEASE ? "release" : "pause";
}

/* Plain decimal digits only: no sign, spaces or exponent (leading zeros are
 * digits too). */
static bool parse_decimal(const char *text, int64_t min, int64_t max, int64_t *out)
{
	if (text == NULL || *text == '\0')
		return false;
	int64_t value = 0;
	for (const char *c = text; *c; c++) {
		if (*c < '0' || *c > '9')
			return false;
		if (value > (INT64_MAX - (*c - '0')) / 10)
			return false;
		value = value * 10 + (*c - '0');
	}
	if (value < min || value > max)
		return false;
	*out = value;
	return true;
}

/* A dotted IPv4 address in 127.0.0.0/8: four decimal octets of at most 255. */
static bool is_loopback_ipv4(const char *host)
{
	if (strncmp(host, "127.", 4) != 0)
		return false;
	const char *c = host;
	for (int part = 0; part < 4; part++) {
		size_t digits = strspn(c, "0123456789");
		if (digits == 0 || digits > 3)
			return false;
		int value = 0;
		for (size_t i = 0; i < digits; i++)
			value = value * 10 + (c[i] - '0');
		if (value > 255)
			return false;
		c += digits;
		if (part < 3) {
			if (*c != '.')
				return false;
			c++;
		}
	}
	return *c == '\0';
}

bool settings_valid_loopback_origin(const char *url, char *canonical_out, size_t out_len,
                                    const char **why_out)
{
	const char *why = NULL;
	const char *rest;
	char host[256];
	size_t host_len;
	const char *port_text = NULL;
	if (strncasecmp(url, "http://", 7) != 0) {
		why = "must be an http:// origin";
		goto done;
	}
	rest = url + 7;
	if (strpbrk(rest, "@?#") != NULL) {
		why = "must not carry user information, a query or a fragment";
		goto done;
	}
	if (*rest == '[') {
		const char *close = strchr(rest, ']');
		if (close == NULL) {
			why = "has an unterminated IPv6 address";
			goto done;
		}
		host_len = (size_t)(close - rest + 1);
		rest = close + 1;
	} else {
		host_len = strcspn(rest, ":/");
		rest += host_len;
	}
	if (host_len == 0 || host_len >= sizeof host) {
		why = "has no host";
		goto done;
	}
	memcpy(host, url + 7, host_len);
	host[host_len] = '\0';
	if (*rest == ':') {
		port_text = rest + 1;
		size_t digits = strspn(port_text, "0123456789");
		rest = port_text + digits;
		int64_t port = 0;
		char buf[8];
		if (digits == 0 || digits > 5) {
			why = "has an invalid port";
			goto done;
		}
		memcpy(buf, port_text, digits);
		buf[digits] = '\0';
		if (!parse_decimal(buf, 1, 65535, &port)) {
			why = "has an invalid port";
			goto done;
		}
	}
	if (*rest != '\0' && strcmp(rest, "/") != 0) {
		why = "must not have a path";
		goto done;
	}
	for (char *h = host; *h; h++)
		if (*h >= 'A' && *h <= 'Z')
			*h = (char)(*h - 'A' + 'a');
	if (strcmp(host, "localhost") != 0 && strcmp(host, "[::1]") != 0 && !is_loopback_ipv4(host)) {
		why = "must name a loopback host (localhost, 127.x.x.x or [::1])";
		goto done;
	}
	if (canonical_out) {
		size_t keep = strlen(url);
		if (keep > 7 && url[keep - 1] == '/')
			keep--;
		if (keep >= out_len) {
			why = "is too long";
			goto done;
		}
		memcpy(canonical_out, url, keep);
		canonical_out[keep] = '\0';
		/* Scheme and host are case-insensitive: write them in lower case. */
		for (size_t i = 0; i < 7 + host_len && i < keep; i++)
			if (canonical_out[i] >= 'A' && canonical_out[i] <= 'Z')
				canonical_out[i] = (char)(canonical_out[i] - 'A' + 'a');
	}
done:
	if (why_out)
		*why_out = why;
	return why == NULL;
}

/* MCP_RELAY_MACHINE_SERVICE_OPTIONS (spec/machine-service.md §11). */
static int check_service_options(json_object *opts, char *errbuf, size_t errlen)
{
	static const char *const string_keys[] = {"routePrefix", "listKey",     "nameField",
	                                          "serviceName", "acquirePath", "fingerprintHeader",
	                                          "sshField"};
	json_object_object_foreach(opts, key, value)
	{
		bool known = false;
		for (size_t i = 0; i < sizeof string_keys / sizeof string_keys[0]; i++) {
			if (strcmp(key, string_keys[i]) != 0)
				continue;
			known = true;
			if (!json_object_is_type(value, json_type_string) ||
			    json_object_get_string_len(value) == 0)
				return fail(
				    errbuf, errlen,
				    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad %s: it must be a non-empty "
				    "string",
				    key);
			const char *s = json_object_get_string(value);
			if ((strcmp(key, "routePrefix") == 0 || strcmp(key, "acquirePath") == 0) &&
			    !rs_matches(s, "^/[A-Za-z0-9._/-]*$"))
				return fail(
				    errbuf, errlen,
				    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad %s: it must be a path "
				    "starting with /",
				    key);
			if (strcmp(key, "fingerprintHeader") == 0 && !rs_matches(s, "^[A-Za-z0-9-]+$"))
				return fail(
				    errbuf, errlen,
				    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad fingerprintHeader: it must "
				    "be an HTTP header name");
			if (strcmp(key, "nameField") == 0 && strcmp(s, "vm") != 0 &&
			    strcmp(s, "machine") != 0)
				return fail(
				    errbuf, errlen,
				    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad nameField: accepted values "
				    "are vm and machine");
		}
		if (strcmp(key, "maxExecTimeoutS") == 0) {
			known = true;
			if (!json_object_is_type(value, json_type_int) || json_object_get_int64(value) < 1)
				return fail(
				    errbuf, errlen,
				    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad maxExecTimeoutS: it must "
				    "be a positive integer of seconds");
		}
		if (strcmp(key, "destructionCheck") == 0) {
			known = true;
			const char *s =
			    json_object_is_type(value, json_type_string) ? json_object_get_string(value) : "";
			if (strcmp(s, "tart") != 0 && strcmp(s, "service") != 0)
				return fail(
				    errbuf, errlen,
				    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has a bad destructionCheck: accepted "
				    "values are tart and service");
		}
		if (!known)
			return fail(
			    errbuf, errlen,
			    "MCP_RELAY_MACHINE_SERVICE_OPTIONS has the unknown key %s; accepted keys are "
			    "routePrefix, listKey, nameField, serviceName, acquirePath, fingerprintHeader, "
			    "maxExecTimeoutS, destructionCheck and sshField",
			    key);
	}
	return 0;
}

static bool usable_path_value(const char *value)
{
	return value != NULL && *value != '\0' && strstr(value, "${") == NULL;
}

static int resolve_project(relay_settings *s, char *errbuf, size_t errlen)
{
	char cwd[PATH_MAX];
	if (getcwd(cwd, sizeof cwd) == NULL)
		return fail(errbuf, errlen,
		            "MCP_RELAY_PROJECT cannot be resolved: the working folder is unknown");
	/* MCP_RELAY_PROJECT; else CLAUDE_PROJECT_DIR, which Claude Code sets in
	 * the environment of the servers it starts; else the working folder. A
	 * value with an unexpanded placeholder counts as unset. */
	const char *value = getenv("MCP_RELAY_PROJECT");
	if (!usable_path_value(value))
		value = getenv("CLAUDE_PROJECT_DIR");
	if (!usable_path_value(value))
		value = cwd;
	char *given = value[0] == '/' ? strdup(value) : fs_path_join(cwd, value);
	char real[PATH_MAX];
	if (given == NULL)
		return fail(errbuf, errlen, "MCP_RELAY_PROJECT cannot be resolved: out of memory");
	if (realpath(given, real) == NULL || !fs_is_dir(real)) {
		fail(errbuf, errlen, "MCP_RELAY_PROJECT must name an existing folder: %s", given);
		free(given);
		return -1;
	}
	s->project_given = given;
	s->project = strdup(real);
	return 0;
}

static int resolve_state_root(relay_settings *s, char *errbuf, size_t errlen)
{
	const char *value = getenv("MCP_RELAY_STATE_DIR");
	const char *name = "MCP_RELAY_STATE_DIR";
	char path[PATH_MAX];
	if (s->environment != NULL) {
		snprintf(path, sizeof path, "%s", environment_relay_state_dir(s->environment));
		name = "VM_ENVIRONMENT_FILE relayStateDir";
	} else if (value != NULL) {
		if (value[0] != '/')
			return fail(errbuf, errlen, "MCP_RELAY_STATE_DIR must be an absolute path: %s",
			            value);
		snprintf(path, sizeof path, "%s", value);
	} else {
		const char *xdg = getenv("XDG_STATE_HOME");
		const char *home = getenv("HOME");
		if (xdg && xdg[0] == '/')
			snprintf(path, sizeof path, "%s/mcp-relay", xdg);
		else if (home && home[0] == '/')
			snprintf(path, sizeof path, "%s/.local/state/mcp-relay", home);
		else
			return fail(
			    errbuf, errlen,
			    "MCP_RELAY_STATE_DIR is unset and neither XDG_STATE_HOME nor HOME is an absolute "
			    "path; set MCP_RELAY_STATE_DIR");
	}
	relay_error err;
	if (fs_mkdir_p(path, 0700, &err) != RELAY_OK)
		return fail(errbuf, errlen, "%s cannot be created: %s", name, err.message);
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return fail(errbuf, errlen, "%s must be a folder: %s", name, path);
	if (st.st_uid != geteuid())
		return fail(errbuf, errlen, "%s must be owned by this user: %s", name, path);
	if (st.st_mode & 022)
		return fail(errbuf, errlen, "%s must not be writable by group or others (chmod 700 %s)", name,
		            path);
	char real[PATH_MAX];
	s->state_root = strdup(realpath(path, real) ? real : path);
	s->session_dir = fs_path_join(s->state_root, s->session_key);
	return 0;
}

/* The session key of identity `id` (spec/lifecycle.md §2): the first 32 hex
 * digits of its SHA-256. */
static void session_key_of(const char *id, char key[33])
{
	char digest[SHA256_HEX_LEN + 1];
	sha256_buffer_hex(id, strlen(id), digest);
	memcpy(key, digest, 32);
	key[32] = '\0';
}

int settings_use_fresh_identity(relay_settings *s, long holder)
{
	int rc = -1;
	char uuid[37];
	random_uuid(uuid);
	char note[512];
	snprintf(note, sizeof note,
	         "another live mcp-relay process, pid %ld, holds this project's session %s; this "
	         "process took the fresh identity %s, so it does not see that process's guests (set "
	         "MCP_RELAY_SESSION to choose an identity)",
	         holder, s->session_id, uuid);
	char key[33];
	session_key_of(uuid, key);
	char *id = strdup(uuid);
	char *text = strdup(note);
	char *dir = fs_path_join(s->state_root, key);
	char *old_id = s->session_id, *old_note = s->session_note, *old_dir = s->session_dir;
	if (id == NULL || text == NULL || dir == NULL)
		goto cleanup;
	/* Swapped in: the old values are freed below. */
	s->session_id = id;
	s->session_note = text;
	s->session_dir = dir;
	memcpy(s->session_key, key, sizeof key);
	s->session_source = SESSION_FRESH;
	s->session_id_stable = false;
	id = old_id;
	text = old_note;
	dir = old_dir;
	rc = 0;
cleanup:
	free(id);
	free(text);
	free(dir);
	return rc;
}

const char *settings_session_source_name(session_source source)
{
	switch (source) {
	case SESSION_FROM_SETTING: return "setting";
	case SESSION_FROM_PROJECT: return "project";
	case SESSION_FRESH: return "fresh";
	}
	return "setting";
}

const char *settings_problem_fix(const char *problem)
{
	if (strncmp(problem, "VM_ENVIRONMENT_FILE", 19) == 0) {
		if (strstr(problem, "schemaVersion 1") || strstr(problem, "vmctlPath"))
			return "update the profile to schemaVersion 2 with machctlPath (see "
			       "docs/environment-profiles.md)";
		if (strstr(problem, "must not be blank"))
			return "unset VM_ENVIRONMENT_FILE, or set it to the path of a schemaVersion 2 "
			       "profile";
		return "correct the profile as the message says (docs/environment-profiles.md); an invalid "
		       "selection never falls back to the unselected settings";
	}
	return "correct the variable named above in the environment the server is started with (the "
	       "\"env\" of its entry in the host's MCP configuration), or remove it for its default; "
	       "then restart the server";
}

void settings_problem_text(const char *problem, char *out, size_t out_len)
{
	size_t name_len = strcspn(problem, " ");
	snprintf(out, out_len,
	         "The relay cannot work until a setting is fixed: %.*s is invalid. %s. Fix: %s "
	         "(`mcp-relay doctor` checks every setting). Until then every tool call fails with "
	         "this message and nothing is acquired.",
	         (int)name_len, problem, problem, settings_problem_fix(problem));
}

/* MCP_RELAY_RECORD, MCP_RELAY_RECORD_FPS, and the console's
 * MCP_RELAY_CONSOLE_CONTROL (read by the console plugins themselves; checked
 * here so that a bad value stops the server, spec/lifecycle.md §14). */
static int record_settings(relay_settings *s, char *errbuf, size_t errlen)
{
	const char *v = getenv("MCP_RELAY_RECORD");
	s->record_video_fps = 0;
	if (v != NULL && strcmp(v, "off") != 0 && strcmp(v, "video") != 0)
		return fail(errbuf, errlen, "MCP_RELAY_RECORD must be off or video (got %s)", v);
	if (v != NULL && strcmp(v, "video") == 0) {
		int64_t fps = 8;
		const char *f = getenv("MCP_RELAY_RECORD_FPS");
		if (f != NULL && !parse_decimal(f, 1, 30, &fps))
			return fail(
			    errbuf, errlen,
			    "MCP_RELAY_RECORD_FPS must be whole frames per second from 1 to 30 (got %s)", f);
		s->record_video_fps = (int)fps;
	}
	v = getenv("MCP_RELAY_CONSOLE_CONTROL");
	if (v != NULL && strcmp(v, "allow") != 0 && strcmp(v, "deny") != 0)
		return fail(errbuf, errlen, "MCP_RELAY_CONSOLE_CONTROL must be allow or deny (got %s)", v);
	return 0;
}

/* MCP_RELAY_SESSION, or the project's own identity (spec/lifecycle.md §2). */
static int load_session_identity(relay_settings *s, char *errbuf, size_t errlen)
{
	const char *v;
	v = getenv("MCP_RELAY_SESSION");
	if (v != NULL) {
		if (!rs_matches(v, "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"))
			return fail(
			    errbuf, errlen,
			    "MCP_RELAY_SESSION must be 1 to 128 characters of A-Z, a-z, 0-9 and ._:@- "
			    "starting with a letter or digit");
		s->session_id = strdup(v);
		s->session_id_stable = true;
	} else {
		/* The project's own identity (spec/lifecycle.md §2): a restarted server
		 * and a client that starts one server per call take back the
		 * project's guests; two projects never share one. */
		char digest[SHA256_HEX_LEN + 1];
		char id[8 + 32 + 1];
		sha256_buffer_hex(s->project, strlen(s->project), digest);
		snprintf(id, sizeof id, "project-%.32s", digest);
		s->session_id = strdup(id);
		s->session_id_stable = true;
		s->session_source = SESSION_FROM_PROJECT;
	}
	if (s->session_id == NULL)
		return fail(errbuf, errlen, "settings could not be read: out of memory");
	session_key_of(s->session_id, s->session_key);

	return 0;
}

/* The environment profile, the backend, the service URL and the plugins'
 * option objects. */
static int load_backend(relay_settings *s, char *errbuf, size_t errlen)
{
	const char *v;
	v = getenv("VM_ENVIRONMENT_FILE");
	if (v != NULL) {
		relay_error err;
		if (environment_load(v, &s->environment, &err) != RELAY_OK)
			return fail(errbuf, errlen, "VM_ENVIRONMENT_FILE %s", err.message);
	}

	v = getenv("MCP_RELAY_BACKEND");
	if (s->environment != NULL) {
		if (v != NULL)
			log_info(
			    "MCP_RELAY_BACKEND is ignored: the selected environment chooses the plugins");
		s->backend = strdup("machine-service");
	} else if (v == NULL) {
#ifdef __linux__
		s->backend = strdup("local");
#else
		s->backend = strdup("machine-service");
#endif
	} else if (strcmp(v, "local") == 0) {
#ifndef __linux__
		return fail(errbuf, errlen, "MCP_RELAY_BACKEND local needs Linux; use machine-service");
#endif
		s->backend = strdup(v);
	} else if (strcmp(v, "machine-service") == 0 || strcmp(v, "docker") == 0) {
		s->backend = strdup(v);
	} else if (v[0] == '/') {
		struct stat st;
		if (stat(v, &st) != 0 || !S_ISREG(st.st_mode))
			return fail(errbuf, errlen, "MCP_RELAY_BACKEND names %s, which is not a regular file",
			            v);
		s->backend = strdup(v);
	} else {
		return fail(errbuf, errlen,
		            "MCP_RELAY_BACKEND must be local, machine-service, docker, or an absolute path "
		            "to a plugin .so (got %s)",
		            v);
	}

	v = getenv("MCP_RELAY_URL");
	char origin[512];
	const char *why = NULL;
	if (v != NULL && !settings_valid_loopback_origin(v, origin, sizeof origin, &why))
		return fail(errbuf, errlen, "MCP_RELAY_URL %s (got %s)", why, v);
	if (s->environment != NULL)
		s->service_url = strdup(environment_service_url(s->environment));
	else
		s->service_url = strdup(v ? origin : "http://localhost:6240");

	if (object_setting("MCP_RELAY_MACHINE_SERVICE_OPTIONS", "a JSON object", &s->machine_service_options,
	                   errbuf, errlen) != 0)
		return -1;
	if (s->machine_service_options != NULL &&
	    check_service_options(s->machine_service_options, errbuf, errlen) != 0)
		return -1;

	/* machine-local's options (docs/machine-local.md): an object here; the
	 * plugin refuses unknown keys and bad values by name when it starts. */
	if (object_setting("MCP_RELAY_LOCAL_OPTIONS",
	                   "a JSON object of machine-local options (docs/machine-local.md)",
	                   &s->local_options, errbuf, errlen) != 0)
		return -1;
	/* machine-docker's options (docs/machine-docker.md), checked by the plugin. */
	if (object_setting("MCP_RELAY_DOCKER_OPTIONS",
	                   "a JSON object of machine-docker options (docs/machine-docker.md)",
	                   &s->docker_options, errbuf, errlen) != 0)
		return -1;
	/* transfer-ssh's options (docs/transfer-ssh.md), likewise checked by the
	 * plugin when it starts. */
	if (object_setting("MCP_RELAY_TRANSFER_SSH_OPTIONS",
	                   "a JSON object of transfer-ssh options (docs/transfer-ssh.md)",
	                   &s->transfer_ssh_options, errbuf, errlen) != 0)
		return -1;

	return 0;
}

/* MCP_RELAY_EGRESS_ALLOW (docs/egress.md): every rule checked, a bad one
 * named. Rules without `allow` are kept (a profile may set both) but unused. */
static int load_egress_allow(relay_settings *s, const char *text, char *errbuf, size_t errlen)
{
	egress_policy policy;
	char problem[400];
	if (egress_policy_parse(text, false, &policy, problem, sizeof problem) != 0)
		return fail(errbuf, errlen, "MCP_RELAY_EGRESS_ALLOW has a bad %s", problem);
	egress_policy_free(&policy);
	free(s->egress_allow);
	s->egress_allow = strdup(text ? text : "");
	if (s->egress_allow == NULL)
		return fail(errbuf, errlen, "MCP_RELAY_EGRESS_ALLOW cannot be kept: out of memory");
	return 0;
}

/* The guests' network, the exit mode, the waits and limits, the registry. */
static int load_limits(relay_settings *s, char *errbuf, size_t errlen)
{
	const char *v;
	/* A selected profile's relayNetwork is the deployment's: it wins. */
	const char *profile_network = environment_guest_network(s->environment);
	const char *profile_allow = environment_egress_allow(s->environment);
	v = profile_network ? profile_network : getenv("MCP_RELAY_GUEST_NETWORK");
	if (v == NULL || strcmp(v, "nat") == 0)
		s->guest_network = GUEST_NETWORK_NAT;
	else if (strcmp(v, "internet") == 0)
		s->guest_network = GUEST_NETWORK_INTERNET;
	else if (strcmp(v, "allow") == 0)
		s->guest_network = GUEST_NETWORK_ALLOW;
	else
		return fail(errbuf, errlen, "MCP_RELAY_GUEST_NETWORK must be nat, internet or allow (got %s)",
		            v);
	if (load_egress_allow(s, profile_allow ? profile_allow : getenv("MCP_RELAY_EGRESS_ALLOW"), errbuf,
	                      errlen) != 0)
		return -1;

	v = getenv("MCP_RELAY_ON_EXIT");
	if (v == NULL || strcmp(v, "pause") == 0)
		s->on_exit = ON_EXIT_PAUSE;
	else if (strcmp(v, "release") == 0)
		s->on_exit = ON_EXIT_RELEASE;
	else
		return fail(errbuf, errlen, "MCP_RELAY_ON_EXIT must be pause or release (got %s)", v);

	if (record_settings(s, errbuf, errlen) != 0)
		return -1;

	s->capacity_wait_s = 1800;
	v = getenv("MCP_RELAY_CAPACITY_WAIT");
	if (v != NULL && !parse_decimal(v, 0, 86400, &s->capacity_wait_s))
		return fail(errbuf, errlen,
		            "MCP_RELAY_CAPACITY_WAIT must be whole seconds from 0 to 86400 (got %s)", v);

	int64_t max_guests = 4;
	v = getenv("MCP_RELAY_MAX_GUESTS");
	if (v != NULL && !parse_decimal(v, 1, 64, &max_guests))
		return fail(errbuf, errlen,
		            "MCP_RELAY_MAX_GUESTS must be a whole number from 1 to 64 (got %s)", v);
	s->max_guests = (int)max_guests;

	s->shutdown_grace_ms = 120000;
	v = getenv("MCP_RELAY_SHUTDOWN_GRACE_MS");
	if (v != NULL && !parse_decimal(v, 0, 3600000, &s->shutdown_grace_ms))
		return fail(
		    errbuf, errlen,
		    "MCP_RELAY_SHUTDOWN_GRACE_MS must be whole milliseconds from 0 to 3600000 (got %s)", v);

	v = getenv("MCP_RELAY_REGISTRY");
	if (s->environment == NULL && v != NULL) {
		struct stat st;
		if (v[0] != '/')
			return fail(errbuf, errlen, "MCP_RELAY_REGISTRY must be an absolute path (got %s)",
			            v);
		if (stat(v, &st) != 0 || !S_ISREG(st.st_mode))
			return fail(errbuf, errlen,
			            "MCP_RELAY_REGISTRY must name an existing regular file (got %s)", v);
		char table_why[768]; /* the VM-table check of spec/lifecycle.md §10 (registry/registry.h) */
		if (registry_check_file(v, table_why, sizeof table_why) != 0)
			return fail(errbuf, errlen, "MCP_RELAY_REGISTRY %s (got %s)", table_why, v);
		s->registry_path = strdup(v);
	}

	return 0;
}

static int load_all(relay_settings *s, char *errbuf, size_t errlen)
{

	/* The old names (MCP_VM_RELAY_*) are no longer read: one notice each. */
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "MCP_VM_RELAY_", 13) != 0)
			continue;
		size_t name_len = strcspn(*e, "=");
		log_warning("%.*s is no longer read; it was renamed MCP_RELAY_%.*s", (int)name_len, *e,
		            (int)(name_len - 13), *e + 13);
	}

	if (resolve_project(s, errbuf, errlen) != 0)
		return -1;

	if (load_session_identity(s, errbuf, errlen) != 0 || load_backend(s, errbuf, errlen) != 0 ||
	    load_limits(s, errbuf, errlen) != 0)
		return -1;
	if (resolve_state_root(s, errbuf, errlen) != 0)
		return -1;
	if (s->environment != NULL) {
		s->registry_path = fs_path_join(s->state_root, "registry.md");
	}
	if (s->project == NULL || s->session_id == NULL || s->backend == NULL || s->service_url == NULL ||
	    s->state_root == NULL || s->session_dir == NULL)
		return fail(errbuf, errlen, "settings could not be read: out of memory");
	return 0;
}

int settings_load(relay_settings *s, char *errbuf, size_t errlen)
{
	memset(s, 0, sizeof *s);
	if (load_all(s, errbuf, errlen) == 0)
		return 0;
	settings_free(s);
	return -1;
}

void settings_free(relay_settings *s)
{
	free(s->project);
	free(s->egress_allow);
	free(s->project_given);
	free(s->session_id);
	free(s->backend);
	free(s->service_url);
	json_object_put(s->machine_service_options);
	json_object_put(s->local_options);
	json_object_put(s->docker_options);
	json_object_put(s->transfer_ssh_options);
	free(s->state_root);
	free(s->session_dir);
	free(s->registry_path);
	free(s->session_note);
	environment_free(s->environment);
	memset(s, 0, sizeof *s);
}
