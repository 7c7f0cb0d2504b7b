/*
 * md_options.c — machine-docker's options (MCP_RELAY_DOCKER_OPTIONS or the
 * profile), checked at init: an unknown key or a bad value refuses the
 * plugin's start, naming it. The keys are listed in md_plugin.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "md.h"
#include "relay_kit/options.h"

/* ---- options ------------------------------------------------------------------- */

static bool valid_key(const char *k)
{
	if (k == NULL || k[0] == '\0' || strlen(k) > 128)
		return false;
	for (const char *p = k; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      ((*p == '.' || *p == '_' || *p == '-') && p != k)))
			return false;
	return true;
}

static bool valid_ref(const char *r)
{
	if (r == NULL || r[0] == '\0' || strlen(r) > 255)
		return false;
	for (const char *p = r; *p; p++)
		if (*p <= ' ' || *p == '"' || *p == '\\' || *p == '?' || *p == '&' || *p == '#')
			return false;
	return true;
}

static relay_status set_endpoint(md_state *st, const char *url, relay_error *err)
{
	if (strncmp(url, "unix://", 7) == 0) {
		const char *p = url + 7;
		if (p[0] != '/' || strlen(p) >= sizeof st->socket_path)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.endpoint %s must be unix:///absolute/path/to/the.sock", url);
		snprintf(st->socket_path, sizeof st->socket_path, "%s", p);
		snprintf(st->endpoint, sizeof st->endpoint, "%s", url);
		return RELAY_OK;
	}
	if (strncmp(url, "ssh://", 6) == 0) {
		const char *p = url + 6;
		const char *at = strchr(p, '@');
		const char *host = at ? at + 1 : p;
		const char *colon = strrchr(host, ':');
		size_t host_len = colon ? (size_t)(colon - host) : strlen(host);
		int port = colon ? atoi(colon + 1) : 22;
		size_t user_len = at ? (size_t)(at - p) : 0;
		bool ok = host_len > 0 && host_len < sizeof st->ssh.host && user_len < sizeof st->ssh.user &&
		          port > 0 && port < 65536 && strpbrk(url + 6, "/ \t\n") == NULL && host[0] != '-';
		for (size_t i = 0; ok && i < user_len; i++)
			ok = p[i] != '-' || i > 0;
		if (!ok)
			return md_err(
			    st, err, RELAY_E_INVALID_ARGUMENT, 0,
			    "options.endpoint %s must look like ssh://user@host or ssh://user@host:port",
			    url);
		st->ssh.enabled = true;
		snprintf(st->ssh.user, sizeof st->ssh.user, "%.*s", (int)user_len, p);
		if (user_len == 0)
			snprintf(st->ssh.user, sizeof st->ssh.user, "%s", "root");
		snprintf(st->ssh.host, sizeof st->ssh.host, "%.*s", (int)host_len, host);
		st->ssh.port = port;
		snprintf(st->endpoint, sizeof st->endpoint, "%s", url);
		return RELAY_OK;
	}
	if (strncmp(url, "tcp://", 6) == 0) {
		/* tcp://host:port, TLS with client certificates only (checked after
		 * all options are read: options.tls must be there). */
		const char *host = url + 6;
		const char *colon = strrchr(host, ':');
		int port = colon ? atoi(colon + 1) : 0;
		size_t host_len = colon ? (size_t)(colon - host) : 0;
		bool ok = host_len > 0 && host_len < sizeof st->tls.host && port > 0 && port < 65536 &&
		          strpbrk(host, "/ \t\n@?#") == NULL;
		for (const char *c = colon ? colon + 1 : ""; ok && *c; c++)
			ok = *c >= '0' && *c <= '9';
		if (!ok)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.endpoint %s must look like tcp://host:port", url);
		st->tls.enabled = true;
		snprintf(st->tls.host, sizeof st->tls.host, "%.*s", (int)host_len, host);
		st->tls.port = port;
		snprintf(st->endpoint, sizeof st->endpoint, "%s", url);
		return RELAY_OK;
	}
	return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
	              "options.endpoint %s must start with unix://, ssh:// or tcp://", url);
}

/* One member of an object of absolute paths (options.tls, options.ssh). */
typedef struct path_member {
	const char *name;
	char *dst;
	size_t size; /* of dst */
} path_member;

/* Sets members[0..count) from options.<section>, an object of absolute
 * paths; with no_colon_space a path holding ':', a space or a newline is
 * refused. */
static relay_status path_members(md_state *st, json_object *v, const char *section,
                                 const path_member *members, size_t count, bool no_colon_space,
                                 relay_error *err)
{
	char known[128] = "", shape[160] = "{";
	for (size_t i = 0; i < count; i++) {
		size_t kl = strlen(known), sl = strlen(shape);
		snprintf(known + kl, sizeof known - kl, "%s%s", i ? ", " : "", members[i].name);
		snprintf(shape + sl, sizeof shape - sl, "%s\"%s\"%s", i ? ", " : "", members[i].name,
		         i + 1 == count ? "}" : "");
	}
	if (!json_object_is_type(v, json_type_object))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.%s must be %s", section, shape);
	json_object_object_foreach(v, key, value)
	{
		const char *text =
		    json_object_is_type(value, json_type_string) ? json_object_get_string(value) : NULL;
		const path_member *m = NULL;
		for (size_t i = 0; i < count && m == NULL; i++)
			if (strcmp(key, members[i].name) == 0)
				m = &members[i];
		if (m == NULL)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.%s.%s is unknown (%s)",
			              section, key, known);
		if (text == NULL || text[0] != '/' || strlen(text) >= m->size ||
		    (no_colon_space && strpbrk(text, ": \n")))
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.%s.%s must be an absolute path%s", section, key,
			              no_colon_space ? " without ':' or spaces" : "");
		snprintf(m->dst, m->size, "%s", text);
	}
	return RELAY_OK;
}

/* options.tls: {"caFile", "certFile", "keyFile"}, absolute paths. */
static relay_status tls_option(md_state *st, json_object *v, relay_error *err)
{
	const path_member members[] = {{"caFile", st->tls.ca, sizeof st->tls.ca},
	                               {"certFile", st->tls.cert, sizeof st->tls.cert},
	                               {"keyFile", st->tls.key, sizeof st->tls.key}};
	return path_members(st, v, "tls", members, 3, false, err);
}

/* A tcp:// endpoint only with TLS client certificates, whose files can be
 * read and whose key no one else can. */
static relay_status tls_check(md_state *st, relay_error *err)
{
	bool any = st->tls.ca[0] || st->tls.cert[0] || st->tls.key[0];
	if (!st->tls.enabled)
		return any ? md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		                    "options.tls is only for a tcp:// endpoint")
		           : RELAY_OK;
	if (!st->tls.ca[0] || !st->tls.cert[0] || !st->tls.key[0])
		return md_err(
		    st, err, RELAY_E_INVALID_ARGUMENT, 0,
		    "options.endpoint %s: a tcp:// endpoint needs TLS client certificates "
		    "(options.tls with caFile, certFile and keyFile): the Engine API without them is "
		    "root on the engine's host for anyone who can reach the port, so the plugin never "
		    "speaks plain tcp://",
		    st->endpoint);
	const char *files[] = {st->tls.ca, st->tls.cert, st->tls.key};
	for (int i = 0; i < 3; i++)
		if (access(files[i], R_OK) != 0)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, errno,
			              "options.tls: %s cannot be read", files[i]);
	struct stat sb;
	if (stat(st->tls.key, &sb) == 0 && (sb.st_mode & 077) != 0)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.tls.keyFile %s can be read by others (mode %03o); chmod 600 it",
		              st->tls.key, (unsigned)(sb.st_mode & 0777));
	return RELAY_OK;
}

static relay_status default_endpoint(md_state *st, relay_error *err)
{
	struct stat sb;
	if (stat("/var/run/docker.sock", &sb) == 0 && S_ISSOCK(sb.st_mode))
		return set_endpoint(st, "unix:///var/run/docker.sock", err);
	char path[300];
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (geteuid() != 0 && xdg && xdg[0] == '/') {
		snprintf(path, sizeof path, "unix://%s/podman/podman.sock", xdg);
		return set_endpoint(st, path, err);
	}
	return set_endpoint(st, "unix:///run/podman/podman.sock", err);
}

/* options.images: image keys to image references. */
static relay_status images_option(md_state *st, json_object *v, relay_error *err)
{
	if (!json_object_is_type(v, json_type_object))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.images must map image keys to image references");
	json_object_object_foreach(v, ik, iv)
	{
		const char *ref =
		    json_object_is_type(iv, json_type_string) ? json_object_get_string(iv) : NULL;
		if (!valid_key(ik))
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.images: %s is not a valid image key (A-Z, "
			              "a-z, 0-9, ., _, -)",
			              ik);
		if (!valid_ref(ref))
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.images.%s must be an image reference such as "
			              "docker.io/library/debian:12",
			              ik);
		if (st->image_count >= MD_MAX_IMAGES)
			return md_err(st, err, RELAY_E_TOO_LARGE, 0, "options.images: at most %d images",
			              MD_MAX_IMAGES);
		st->images[st->image_count].key = strdup(ik);
		st->images[st->image_count].ref = strdup(ref);
		st->image_count++;
	}
	return RELAY_OK;
}

/* options.guestUser: "root" or {uid, gid}. */
static relay_status guest_user_option(md_state *st, json_object *v, relay_error *err)
{
	if (json_object_is_type(v, json_type_string) && strcmp(json_object_get_string(v), "root") == 0) {
		st->guest_uid = 0;
		st->guest_gid = 0;
	} else if (json_object_is_type(v, json_type_object) && md_int(v, "uid", 0) >= 1 &&
	           md_int(v, "uid", 0) <= 65535 && md_int(v, "gid", md_int(v, "uid", 0)) >= 1 &&
	           md_int(v, "gid", md_int(v, "uid", 0)) <= 65535) {
		st->guest_uid = (uid_t)md_int(v, "uid", 0);
		st->guest_gid = (gid_t)md_int(v, "gid", md_int(v, "uid", 0));
	} else {
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.guestUser must be {\"uid\": 1..65535, \"gid\": "
		              "1..65535} or \"root\"");
	}
	return RELAY_OK;
}

/* options.limits and options.ulimits (key names which). */
static relay_status limits_option(md_state *st, const char *key, json_object *v, relay_error *err)
{
	bool lim = strcmp(key, "limits") == 0;
	if (!json_object_is_type(v, json_type_object))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.%s must be an object", key);
	json_object_object_foreach(v, lk, lv)
	{
		int64_t *dst = NULL;
		if (lim && strcmp(lk, "memoryBytes") == 0)
			dst = &st->limit_memory_bytes;
		else if (lim && strcmp(lk, "pids") == 0)
			dst = &st->limit_pids;
		else if (lim && strcmp(lk, "nanoCpus") == 0)
			dst = &st->limit_nano_cpus;
		else if (!lim && strcmp(lk, "nofile") == 0)
			dst = &st->ulimit_nofile;
		else if (!lim && strcmp(lk, "nproc") == 0)
			dst = &st->ulimit_nproc;
		if (dst == NULL)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.%s.%s is unknown (%s)",
			              key, lk, lim ? "memoryBytes, pids, nanoCpus" : "nofile, nproc");
		if (!json_object_is_type(lv, json_type_int) || json_object_get_int64(lv) < 0)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.%s.%s must be a whole number (0 = the engine's default)", key,
			              lk);
		*dst = json_object_get_int64(lv);
	}
	return RELAY_OK;
}

/* options.ssh: the files of an ssh:// endpoint. */
static relay_status ssh_option(md_state *st, json_object *v, relay_error *err)
{
	const path_member members[] = {{"identityFile", st->ssh.identity, sizeof st->ssh.identity},
	                               {"knownHostsFile", st->ssh.known_hosts, sizeof st->ssh.known_hosts},
	                               {"remoteSocket", st->ssh.remote_socket, sizeof st->ssh.remote_socket}};
	return path_members(st, v, "ssh", members, 3, true, err);
}

/* The ssh:// endpoint has its files, and only it has options.ssh. */
static relay_status ssh_check(md_state *st, relay_error *err)
{
	if (st->ssh.enabled) {
		if (st->ssh.identity[0] == '\0' || st->ssh.known_hosts[0] == '\0')
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "an ssh:// endpoint needs options.ssh.identityFile and "
			              "options.ssh.knownHostsFile "
			              "(host keys are checked strictly, never learned)");
		if (access(st->ssh.known_hosts, R_OK) != 0 || access(st->ssh.identity, R_OK) != 0)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, errno,
			              "options.ssh: %s or %s cannot be read", st->ssh.known_hosts,
			              st->ssh.identity);
		if (st->ssh.remote_socket[0] == '\0')
			snprintf(st->ssh.remote_socket, sizeof st->ssh.remote_socket,
			         "/run/podman/podman.sock");
	} else if (st->ssh.identity[0] || st->ssh.known_hosts[0] || st->ssh.remote_socket[0]) {
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.ssh is only for an ssh:// endpoint");
	}
	return RELAY_OK;
}

/* ---- the table of md_parse_options (relay_kit/options.h) ---------------------------------- */

static relay_status opt_endpoint(const rk_options *spec, const rk_option *opt, json_object *v,
                                 relay_error *err)
{
	(void)opt;
	md_state *st = spec->ctx;
	if (!json_object_is_type(v, json_type_string))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.endpoint must be a URL string");
	return set_endpoint(st, json_object_get_string(v), err);
}

static relay_status opt_images(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	return images_option(spec->ctx, v, err);
}

static relay_status opt_swarm(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	md_state *st = spec->ctx;
	if (!json_object_is_type(v, json_type_boolean))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.swarm must be true (a service per lease when the endpoint is a Swarm "
		              "manager) or false");
	st->swarm = json_object_get_boolean(v);
	return RELAY_OK;
}

static relay_status opt_runtime(const rk_options *spec, const rk_option *opt, json_object *v,
                                relay_error *err)
{
	(void)opt;
	md_state *st = spec->ctx;
	const char *rt = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
	if (!valid_key(rt) || strlen(rt) >= sizeof st->runtime)
		return md_err(
		    st, err, RELAY_E_INVALID_ARGUMENT, 0,
		    "options.runtime must name an OCI runtime of the engine (runc, crun, runsc, kata)");
	memcpy(st->runtime, rt, strlen(rt) + 1); /* its length was checked above */
	return RELAY_OK;
}

static relay_status opt_guest_user(const rk_options *spec, const rk_option *opt, json_object *v,
                                   relay_error *err)
{
	(void)opt;
	return guest_user_option(spec->ctx, v, err);
}

static relay_status opt_limits(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	return limits_option(spec->ctx, opt->key, v, err);
}

static relay_status opt_ssh(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	return ssh_option(spec->ctx, v, err);
}

static relay_status opt_tls(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	return tls_option(spec->ctx, v, err);
}

static relay_status opt_nodes(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	return md_nodes_set_option(spec->ctx, opt->key, v, err);
}

relay_status md_parse_options(md_state *st, json_object *opts, relay_error *err)
{
	int64_t max_guests = st->max_guests;
	const rk_option table[] = {
	    {"endpoint", opt_endpoint, 0, 0, NULL},
	    {"images", opt_images, 0, 0, NULL},
	    {"maxGuests", NULL, 1, 256, &max_guests},
	    RK_OPTIONS_LEASE_TIMES(&st->grace_ms, &st->backstop_ms, &st->reaper_interval_ms),
	    {"pullTimeoutMs", NULL, 1000, 3600000, &st->pull_timeout_ms},
	    {"runtime", opt_runtime, 0, 0, NULL},
	    {"swarm", opt_swarm, 0, 0, NULL},
	    {"guestUser", opt_guest_user, 0, 0, NULL},
	    {"limits", opt_limits, 0, 0, NULL},
	    {"ulimits", opt_limits, 0, 0, NULL},
	    {"ssh", opt_ssh, 0, 0, NULL},
	    {"tls", opt_tls, 0, 0, NULL},
	    RK_OPTIONS_DISPLAY(&st->display_enabled, st->screen),
	    {"nodes", opt_nodes, 0, 0, NULL},
	    {"managers", opt_nodes, 0, 0, NULL},
	    {"discovery", opt_nodes, 0, 0, NULL},
	    {"placement", opt_nodes, 0, 0, NULL},
	};
	const rk_options spec = {st->host, MD_PLUGIN_NAME, NULL, table, sizeof table / sizeof table[0], st};
	relay_status s = rk_options_parse(&spec, opts, err);
	st->max_guests = (int)max_guests;
	json_object *endpoint = NULL;
	if (s == RELAY_OK && !json_object_object_get_ex(opts, "endpoint", &endpoint))
		s = default_endpoint(st, err);
	if (s == RELAY_OK)
		s = ssh_check(st, err);
	if (s == RELAY_OK)
		s = tls_check(st, err);
	return s;
}

relay_status md_parse_endpoint(md_state *st, json_object *spec, const char *where, relay_error *err)
{
	relay_status s = RELAY_OK;
	bool have_endpoint = false;
	if (!json_object_is_type(spec, json_type_object))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "%s must be {\"endpoint\": ..., \"ssh\": {...}, \"tls\": {...}}", where);
	json_object_object_foreach(spec, key, v)
	{
		if (strcmp(key, "endpoint") == 0 && json_object_is_type(v, json_type_string)) {
			s = set_endpoint(st, json_object_get_string(v), err);
			have_endpoint = true;
		} else if (strcmp(key, "ssh") == 0) {
			s = ssh_option(st, v, err);
		} else if (strcmp(key, "tls") == 0) {
			s = tls_option(st, v, err);
		} else {
			s = md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			           "%s is unknown or not a string (endpoint, ssh, tls)", key);
		}
		if (s != RELAY_OK)
			break;
	}
	if (s == RELAY_OK && !have_endpoint)
		s = md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "it needs an \"endpoint\"");
	if (s == RELAY_OK)
		s = ssh_check(st, err);
	if (s == RELAY_OK)
		s = tls_check(st, err);
	if (s != RELAY_OK) {
		char text[RELAY_ERROR_MESSAGE_BYTES];
		snprintf(text, sizeof text, "%s", err->message);
		s = md_err(st, err, s, 0, "%s: %s", where, text);
	}
	return s;
}
