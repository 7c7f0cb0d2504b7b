/*
 * md_plugin.c — machine-docker: guests are containers of OCI images on a
 * Docker Engine or Podman's Docker-compatible service, reached through the
 * Engine API over a unix socket. One shared object providing the machine
 * kind and the transport kind. docs/machine-docker.md is the user's page.
 *
 * Options (MCP_RELAY_DOCKER_OPTIONS or the profile; unknown keys refused):
 *   "endpoint":   "unix:///run/podman/podman.sock"; default the Docker
 *                 socket when it exists, else the user's Podman socket;
 *                 or ssh://user@host[:port] (md_ssh.c) with "ssh":
 *                 {"identityFile", "knownHostsFile", "remoteSocket"}
 *   "images":     {"<key>": "<image reference>", ...}  the allow-list
 *   "maxGuests":  1..256, default 8
 *   "graceMs", "backstopMs", "reaperIntervalMs", "pullTimeoutMs"
 *   "runtime":    an OCI runtime the engine knows ("runc", "runsc", "kata")
 *   "guestUser":  {"uid": n, "gid": n} (default 61000:61000) | "root"
 *   "limits":     {"memoryBytes", "pids", "nanoCpus"}
 *   "ulimits":    {"nofile", "nproc"}
 *   "display":    "auto" (Xvfb when the image has it) | "off"
 *   "screen":     "1280x800x24"
 */
#include <curl/curl.h>
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

/* ---- helpers ----------------------------------------------------------------- */

relay_status md_err(md_state *st, relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
{
	char text[RELAY_ERROR_MESSAGE_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return st->host->error_set(err, code, sys_errno, "%s", text);
}

void md_textf(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, size, fmt, ap);
	va_end(ap);
}

char *md_json_out(md_state *st, json_object *obj)
{
	const char *text =
	    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	return text ? st->host->strdup(text) : NULL;
}

const char *md_str(json_object *obj, const char *key)
{
	json_object *v = NULL;
	if (obj == NULL || !json_object_object_get_ex(obj, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

int64_t md_int(json_object *obj, const char *key, int64_t fallback)
{
	json_object *v = NULL;
	if (obj == NULL || !json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, json_type_int))
		return fallback;
	return json_object_get_int64(v);
}

json_object *md_obj(json_object *obj, const char *key)
{
	json_object *v = NULL;
	if (obj == NULL || !json_object_object_get_ex(obj, key, &v))
		return NULL;
	return v;
}

int64_t md_monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void md_sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

void md_random_hex(md_state *st, char *out, size_t digits)
{
	unsigned char raw[64];
	relay_error e;
	size_t n = (digits + 1) / 2;
	if (n > sizeof raw)
		n = sizeof raw;
	if (st->host->random_bytes(raw, n, &e) != RELAY_OK)
		for (size_t i = 0; i < n; i++)
			raw[i] = (unsigned char)(md_monotonic_ms() >> (i % 8)) ^ (unsigned char)rand();
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < digits && i / 2 < n; i++)
		out[i] = hex[(raw[i / 2] >> ((i % 2) ? 0 : 4)) & 15];
	out[digits] = '\0';
}

static int fsync_parent(const char *path)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		return 0;
	*slash = '\0';
	int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	int rc = fsync(fd) == 0 ? 0 : errno;
	close(fd);
	return rc;
}

int md_write_durable(const char *path, const void *data, size_t len)
{
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.tmp-%d-%lld", path, (int)getpid(), (long long)md_monotonic_ms());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno;
	const char *p = data;
	size_t left = len;
	int rc = 0;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = errno ? errno : EIO;
			break;
		}
		p += w;
		left -= (size_t)w;
	}
	if (rc == 0 && fsync(fd) != 0)
		rc = errno;
	if (close(fd) != 0 && rc == 0)
		rc = errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = errno;
	if (rc != 0) {
		unlink(tmp);
		return rc;
	}
	return fsync_parent(path);
}

json_object *md_read_json(const char *path, int *errno_out)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno_out)
			*errno_out = errno;
		return NULL;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (1 << 20)) {
		close(fd);
		if (errno_out)
			*errno_out = EINVAL;
		return NULL;
	}
	char *buf = malloc((size_t)sb.st_size + 1);
	ssize_t n = buf ? read(fd, buf, (size_t)sb.st_size) : -1;
	close(fd);
	json_object *obj = NULL;
	if (n >= 0) {
		buf[n] = '\0';
		obj = json_tokener_parse(buf);
	}
	free(buf);
	if (obj == NULL && errno_out)
		*errno_out = EINVAL;
	return obj;
}

unsigned long long md_proc_start(pid_t pid)
{
	char path[64], buf[2048];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (p == NULL || p[1] == '\0' || p[2] == 'Z')
		return 0;
	unsigned long long start = 0;
	int field = 2;
	for (char *t = p + 1; *t; t++) {
		if (*t == ' ') {
			field++;
			if (field == 22) {
				start = strtoull(t + 1, NULL, 10);
				break;
			}
		}
	}
	return start;
}

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
	if (strncmp(url, "tcp://", 6) == 0)
		return md_err(
		    st, err, RELAY_E_UNSUPPORTED, 0,
		    "options.endpoint %s: tcp:// endpoints are not supported by this build (and never "
		    "without TLS client certificates); use a unix:// socket",
		    url);
	return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.endpoint %s must start with unix://",
	              url);
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

static relay_status int_option(md_state *st, json_object *v, const char *name, int64_t lo, int64_t hi,
                               int64_t *out, relay_error *err)
{
	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < lo ||
	    json_object_get_int64(v) > hi)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.%s must be a whole number from %lld to %lld", name, (long long)lo,
		              (long long)hi);
	*out = json_object_get_int64(v);
	return RELAY_OK;
}

static relay_status parse_options(md_state *st, json_object *opts, relay_error *err)
{
	relay_status s = RELAY_OK;
	bool have_endpoint = false;
	const int64_t month = 30LL * 24 * 3600 * 1000;
	if (opts && !json_object_is_type(opts, json_type_object))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "machine-docker options must be a JSON object");
	if (opts == NULL)
		return default_endpoint(st, err);
	json_object_object_foreach(opts, key, v)
	{
		int64_t n = 0;
		if (strcmp(key, "endpoint") == 0) {
			if (!json_object_is_type(v, json_type_string))
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.endpoint must be a URL string");
			s = set_endpoint(st, json_object_get_string(v), err);
			have_endpoint = true;
		} else if (strcmp(key, "images") == 0) {
			if (!json_object_is_type(v, json_type_object))
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.images must map image keys to image references");
			json_object_object_foreach(v, ik, iv)
			{
				const char *ref = json_object_is_type(iv, json_type_string)
				                      ? json_object_get_string(iv)
				                      : NULL;
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
					return md_err(st, err, RELAY_E_TOO_LARGE, 0,
					              "options.images: at most %d images", MD_MAX_IMAGES);
				st->images[st->image_count].key = strdup(ik);
				st->images[st->image_count].ref = strdup(ref);
				st->image_count++;
			}
		} else if (strcmp(key, "maxGuests") == 0) {
			s = int_option(st, v, key, 1, 256, &n, err);
			st->max_guests = (int)n;
		} else if (strcmp(key, "graceMs") == 0) {
			s = int_option(st, v, key, 0, month, &st->grace_ms, err);
		} else if (strcmp(key, "backstopMs") == 0) {
			s = int_option(st, v, key, 0, month, &st->backstop_ms, err);
		} else if (strcmp(key, "reaperIntervalMs") == 0) {
			s = int_option(st, v, key, 100, month, &st->reaper_interval_ms, err);
		} else if (strcmp(key, "pullTimeoutMs") == 0) {
			s = int_option(st, v, key, 1000, 3600000, &st->pull_timeout_ms, err);
		} else if (strcmp(key, "swarm") == 0) {
			if (!json_object_is_type(v, json_type_boolean))
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.swarm must be true (a service per lease when the "
				              "endpoint is a Swarm "
				              "manager) or false");
			st->swarm = json_object_get_boolean(v);
		} else if (strcmp(key, "runtime") == 0) {
			const char *rt =
			    json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
			if (!valid_key(rt) || strlen(rt) >= sizeof st->runtime)
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.runtime must name an OCI runtime of the engine (runc, "
				              "crun, runsc, kata)");
			snprintf(st->runtime, sizeof st->runtime, "%s", rt);
		} else if (strcmp(key, "guestUser") == 0) {
			if (json_object_is_type(v, json_type_string) &&
			    strcmp(json_object_get_string(v), "root") == 0) {
				st->guest_uid = 0;
				st->guest_gid = 0;
			} else if (json_object_is_type(v, json_type_object) && md_int(v, "uid", 0) >= 1 &&
			           md_int(v, "uid", 0) <= 65535 &&
			           md_int(v, "gid", md_int(v, "uid", 0)) >= 1 &&
			           md_int(v, "gid", md_int(v, "uid", 0)) <= 65535) {
				st->guest_uid = (uid_t)md_int(v, "uid", 0);
				st->guest_gid = (gid_t)md_int(v, "gid", md_int(v, "uid", 0));
			} else {
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.guestUser must be {\"uid\": 1..65535, \"gid\": "
				              "1..65535} or \"root\"");
			}
		} else if (strcmp(key, "limits") == 0 || strcmp(key, "ulimits") == 0) {
			bool lim = strcmp(key, "limits") == 0;
			if (!json_object_is_type(v, json_type_object))
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.%s must be an object", key);
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
					return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
					              "options.%s.%s is unknown (%s)", key, lk,
					              lim ? "memoryBytes, pids, nanoCpus" : "nofile, nproc");
				if (!json_object_is_type(lv, json_type_int) || json_object_get_int64(lv) < 0)
					return md_err(
					    st, err, RELAY_E_INVALID_ARGUMENT, 0,
					    "options.%s.%s must be a whole number (0 = the engine's default)",
					    key, lk);
				*dst = json_object_get_int64(lv);
			}
		} else if (strcmp(key, "ssh") == 0) {
			if (!json_object_is_type(v, json_type_object))
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.ssh must be {\"identityFile\", \"knownHostsFile\", "
				              "\"remoteSocket\"}");
			json_object_object_foreach(v, sk, sv)
			{
				const char *text = json_object_is_type(sv, json_type_string)
				                       ? json_object_get_string(sv)
				                       : NULL;
				char *dst = strcmp(sk, "identityFile") == 0     ? st->ssh.identity
				            : strcmp(sk, "knownHostsFile") == 0 ? st->ssh.known_hosts
				            : strcmp(sk, "remoteSocket") == 0   ? st->ssh.remote_socket
				                                                : NULL;
				size_t size = dst == st->ssh.remote_socket ? sizeof st->ssh.remote_socket
				                                           : sizeof st->ssh.identity;
				if (dst == NULL)
					return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
					              "options.ssh.%s is unknown (identityFile, "
					              "knownHostsFile, remoteSocket)",
					              sk);
				if (text == NULL || text[0] != '/' || strlen(text) >= size ||
				    strpbrk(text, ": \n"))
					return md_err(
					    st, err, RELAY_E_INVALID_ARGUMENT, 0,
					    "options.ssh.%s must be an absolute path without ':' or spaces",
					    sk);
				snprintf(dst, size, "%s", text);
			}
		} else if (strcmp(key, "display") == 0) {
			const char *d =
			    json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
			if (strcmp(d, "auto") != 0 && strcmp(d, "off") != 0)
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.display must be auto or off");
			st->display_enabled = strcmp(d, "auto") == 0;
		} else if (strcmp(key, "screen") == 0) {
			const char *sc =
			    json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
			unsigned w = 0, h = 0, d = 0;
			char tail = 0;
			if (sscanf(sc, "%ux%ux%u%c", &w, &h, &d, &tail) != 3 || w < 64 || h < 64 ||
			    w > 8192 || h > 8192 || (d != 16 && d != 24 && d != 32))
				return md_err(
				    st, err, RELAY_E_INVALID_ARGUMENT, 0,
				    "options.screen must look like 1280x800x24 (depth 16, 24 or 32)");
			snprintf(st->screen, sizeof st->screen, "%ux%ux%u", w, h, d);
		} else {
			return md_err(
			    st, err, RELAY_E_INVALID_ARGUMENT, 0,
			    "unknown machine-docker option %s (known: endpoint, images, maxGuests, graceMs, "
			    "backstopMs, reaperIntervalMs, pullTimeoutMs, runtime, guestUser, limits, "
			    "ulimits, "
			    "display, screen)",
			    key);
		}
		if (s != RELAY_OK)
			return s;
	}
	if (!have_endpoint)
		s = default_endpoint(st, err);
	if (s == RELAY_OK && st->ssh.enabled) {
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
	} else if (s == RELAY_OK &&
	           (st->ssh.identity[0] || st->ssh.known_hosts[0] || st->ssh.remote_socket[0])) {
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.ssh is only for an ssh:// endpoint");
	}
	return s;
}

/* ---- init ----------------------------------------------------------------------- */

static void free_state(md_state *st)
{
	if (st == NULL)
		return;
	for (size_t i = 0; i < st->image_count; i++) {
		free(st->images[i].key);
		free(st->images[i].ref);
	}
	free(st->state_dir);
	free(st->leases_dir);
	free(st->libexec_dir);
	free(st->session_id);
	free(st->default_network);
	inventory_free(st);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->ssh_lock);
	pthread_cond_destroy(&st->cond);
	free(st);
}

static void read_line(const char *path, char *out, size_t size)
{
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, out, size - 1);
	close(fd);
	out[n > 0 ? n : 0] = '\0';
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
}

static relay_status md_init(const relay_host *host, const char *config_json, unsigned flags,
                            relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	md_state *st = calloc(1, sizeof *st);
	if (st == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	st->host = host;
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->ssh_lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	relay_status s = RELAY_OK;
	json_object *cfg = NULL;
	if (flags) {
		s = md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
		goto fail;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		s = md_err(st, err, RELAY_E_INTERNAL, 0, "libcurl cannot be initialised");
		goto fail;
	}
	cfg = json_tokener_parse(config_json ? config_json : "{}");
	const char *state_dir = md_str(cfg, "stateDir");
	if (cfg == NULL || state_dir == NULL || state_dir[0] != '/' || strlen(state_dir) > 1000) {
		s = md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		           "machine-docker needs an absolute \"stateDir\"");
		goto fail;
	}
	st->state_dir = strdup(state_dir);
	const char *libexec = md_str(cfg, "libexecDir");
	st->libexec_dir = libexec ? strdup(libexec) : NULL;
	const char *session = md_str(cfg, "sessionId");
	st->session_id = session ? strdup(session) : NULL;
	const char *net = md_str(cfg, "guestNetwork");
	st->default_network = strdup(net && strcmp(net, "internet") == 0 ? "internet" : "nat");
	st->max_guests = 8;
	st->grace_ms = 300000;
	st->backstop_ms = 60000;
	st->reaper_interval_ms = 5000;
	st->pull_timeout_ms = 1800000;
	st->guest_uid = 61000;
	st->guest_gid = 61000;
	st->limit_pids = 1024;
	st->limit_memory_bytes = 2LL << 30;
	st->limit_nano_cpus = 2000000000LL;
	/* An engine running as this user cannot raise limits above the
	 * relay's own; Docker's and Podman's defaults are higher than many
	 * hosts allow, so the guests get explicit ones. */
	struct rlimit rl;
	st->ulimit_nofile =
	    getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max < 65536 ? (int64_t)rl.rlim_max : 65536;
	st->ulimit_nproc =
	    getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_max < 65536 ? (int64_t)rl.rlim_max / 2 : 32768;
	st->display_enabled = true;
	st->swarm = true;
	snprintf(st->screen, sizeof st->screen, "1280x800x24");
	s = parse_options(st, md_obj(cfg, "options"), err);
	if (s != RELAY_OK)
		goto fail;
	size_t len = strlen(st->state_dir) + 8;
	st->leases_dir = malloc(len);
	if (st->leases_dir == NULL || st->state_dir == NULL || st->default_network == NULL) {
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto fail;
	}
	snprintf(st->leases_dir, len, "%s/leases", st->state_dir);
	if (mkdir(st->leases_dir, 0700) != 0 && errno != EEXIST) {
		s = md_err(st, err, RELAY_E_IO, errno, "cannot create the lease store %s", st->leases_dir);
		goto fail;
	}
	struct utsname un;
	uname(&un);
	snprintf(st->arch, sizeof st->arch, "%.15s",
	         strcmp(un.machine, "aarch64") == 0
	             ? "arm64"
	             : (strcmp(un.machine, "x86_64") == 0 ? "x86_64" : un.machine));
	read_line("/proc/sys/kernel/random/boot_id", st->boot_id, sizeof st->boot_id);
	st->self_pid = getpid();
	st->self_start = md_proc_start(st->self_pid);
	snprintf(st->owner, sizeof st->owner, "%s:%d:%llu", st->boot_id, (int)st->self_pid, st->self_start);
	if (st->ssh.enabled) {
		/* The forwarded socket lives in the state folder. */
		if (snprintf(st->socket_path, sizeof st->socket_path, "%s/ssh.sock", st->state_dir) >= 100) {
			s = md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			           "the state folder %s is too long for a unix socket path; use a shorter "
			           "MCP_RELAY_STATE_DIR with an ssh:// endpoint",
			           st->state_dir);
			goto fail;
		}
		s = md_ssh_ensure(st, err);
		if (s != RELAY_OK)
			goto fail;
	}
	int rc = md_reaper_start(st);
	if (rc != 0) {
		s = md_err(st, err, RELAY_E_IO, rc, "cannot start the reaper thread");
		goto fail;
	}
	json_object_put(cfg);
	*state_out = st;
	return RELAY_OK;
fail:
	json_object_put(cfg);
	free_state(st);
	return s;
}

static void md_fini(relay_plugin_state *state)
{
	md_state *st = state;
	if (st == NULL)
		return;
	/* Guests outlive the relay until released or reaped (the pause rule). */
	md_reaper_stop(st);
	md_ssh_stop(st);
	free_state(st);
}

/* ---- machine ops ------------------------------------------------------------------ */

static relay_status text_out(md_state *st, json_object *obj, char **out, relay_error *err)
{
	*out = md_json_out(st, obj);
	json_object_put(obj);
	return *out ? RELAY_OK : md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static json_object *parse_doc(const char *text)
{
	json_object *o = text ? json_tokener_parse(text) : NULL;
	if (o && !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	return o;
}

static relay_status m_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call,
                              unsigned flags, char **out, relay_error *err)
{
	md_state *st = state;
	*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown acquire flags 0x%x", flags);
	json_object *spec = parse_doc(spec_json);
	if (spec == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the acquire spec is not a JSON object");
	json_object *doc = NULL;
	relay_status s = lease_acquire(st, spec, call, &doc, err);
	json_object_put(spec);
	return s == RELAY_OK ? text_out(st, doc, out, err) : s;
}

static relay_status m_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
                            relay_call *call, unsigned flags, char **out, relay_error *err)
{
	(void)call;
	md_state *st = state;
	if (out)
		*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown renew flags 0x%x", flags);
	json_object *doc = parse_doc(lease_json), *fresh = NULL;
	relay_status s = lease_renew(st, doc, ttl_ms, out ? &fresh : NULL, err);
	json_object_put(doc);
	return s == RELAY_OK && out ? text_out(st, fresh, out, err) : s;
}

static relay_status m_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call,
                              unsigned flags, char **out, relay_error *err)
{
	md_state *st = state;
	if (out)
		*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown inspect flags 0x%x", flags);
	json_object *doc = parse_doc(lease_json), *fresh = NULL;
	relay_status s = lease_inspect(st, doc, call, &fresh, err);
	json_object_put(doc);
	if (s != RELAY_OK)
		return s;
	if (out)
		return text_out(st, fresh, out, err);
	json_object_put(fresh);
	return RELAY_OK;
}

static relay_status m_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                              relay_call *call, unsigned flags, relay_error *err)
{
	(void)reason;
	md_state *st = state;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown release flags 0x%x", flags);
	json_object *doc = parse_doc(lease_json);
	relay_status s = lease_release(st, doc, call, err);
	json_object_put(doc);
	return s;
}

static relay_status m_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                       unsigned flags, char **check_name_out, relay_error *err)
{
	md_state *st = state;
	if (check_name_out)
		*check_name_out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown verify flags 0x%x", flags);
	json_object *doc = parse_doc(lease_json);
	relay_status s = lease_verify_gone(st, doc, call, err);
	json_object_put(doc);
	if (s == RELAY_OK && check_name_out)
		*check_name_out = st->host->strdup("engine");
	return s;
}

static relay_status m_images(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	md_state *st = state;
	*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown images flags 0x%x", flags);
	return text_out(st, inventory_images(st, call), out, err);
}

static relay_status m_health(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	md_state *st = state;
	if (out)
		*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown health flags 0x%x", flags);
	md_reply r;
	relay_status s = md_api(st, "GET", MD_API_PREFIX "/version", NULL, -1, -1, 10000, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_CANCELLED ? s
		                              : md_err(st, err, RELAY_E_UNAVAILABLE, 0, "%s", err->message);
	bool ok = r.status == 200 && r.json && md_str(r.json, "ApiVersion");
	json_object *o = json_object_new_object();
	json_object_object_add(o, "ok", json_object_new_boolean(ok));
	json_object_object_add(o, "service", json_object_new_string(MD_PLUGIN_NAME));
	json_object_object_add(o, "endpoint", json_object_new_string(st->endpoint));
	json_object_object_add(o, "engineVersion",
	                       md_str(r.json, "Version") ? json_object_new_string(md_str(r.json, "Version"))
	                                                 : NULL);
	json_object_object_add(
	    o, "apiVersion",
	    md_str(r.json, "ApiVersion") ? json_object_new_string(md_str(r.json, "ApiVersion")) : NULL);
	long code = r.status;
	md_reply_free(&r);
	if (!ok) {
		json_object_put(o);
		return md_err(
		    st, err, RELAY_E_UNAVAILABLE, 0,
		    "%s answered /version with HTTP %ld and no ApiVersion: it is not a Docker Engine API",
		    st->endpoint, code);
	}
	if (out == NULL) {
		json_object_put(o);
		return RELAY_OK;
	}
	return text_out(st, o, out, err);
}

static relay_status m_catalog(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	md_state *st = state;
	*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown catalog flags 0x%x", flags);
	json_object *cat = NULL;
	relay_status s = inventory_catalog(st, call, &cat, err);
	return s == RELAY_OK ? text_out(st, cat, out, err) : s;
}

static relay_status m_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                      unsigned flags, char **out, relay_error *err)
{
	md_state *st = state;
	*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown find flags 0x%x", flags);
	if (purpose == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "find_by_purpose needs a purpose");
	json_object *arr = NULL;
	relay_status s = lease_find(st, purpose, call, &arr, err);
	return s == RELAY_OK ? text_out(st, arr, out, err) : s;
}

static relay_status m_binding(relay_plugin_state *state, unsigned flags, char **out, relay_error *err)
{
	md_state *st = state;
	*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown binding flags 0x%x", flags);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "machine", json_object_new_string(MD_PLUGIN_NAME));
	json_object_object_add(o, "endpoint", json_object_new_string(st->endpoint));
	json_object_object_add(o, "store", json_object_new_string(st->state_dir));
	json_object_object_add(o, "environmentFingerprint", NULL);
	return text_out(st, o, out, err);
}

static relay_status m_doctor(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	md_state *st = state;
	*out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown doctor flags 0x%x", flags);
	return text_out(st, inventory_doctor(st, call), out, err);
}

/* ---- transport ops ------------------------------------------------------------------- */

static relay_status t_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                           unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	(void)call;
	md_state *st = state;
	*conn_out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown open flags 0x%x", flags);
	json_object *doc = parse_doc(lease_json);
	json_object *d = md_obj(doc, "docker");
	const char *container = md_str(d, "container");
	const char *user = md_str(d, "user");
	relay_status s = RELAY_OK;
	md_conn *c = NULL;
	if (container == NULL || user == NULL || strlen(container) >= sizeof c->container ||
	    strlen(user) >= sizeof c->user) {
		s = md_err(st, err, RELAY_E_UNSUPPORTED, 0,
		           "machine-docker's transport only reaches machine-docker leases");
		goto done;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL) {
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	snprintf(c->container, sizeof c->container, "%s", container);
	snprintf(c->user, sizeof c->user, "%s", user);
	*conn_out = c;
done:
	json_object_put(doc);
	return s;
}

static void t_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags)
{
	(void)state;
	(void)flags;
	free(conn);
}

static relay_status t_exec(relay_plugin_state *state, relay_transport_conn *conn,
                           const relay_exec_request *req, relay_call *call, unsigned flags,
                           relay_exec_result *res, relay_error *err)
{
	/* exec_run fills a whole result; the caller's may be smaller
	 * (relay/plugin.h R5): copy out within its size, free what did not fit. */
	md_state *st = state;
	relay_exec_result full = {.struct_size = sizeof full};
	relay_status status = exec_run(st, conn, req, call, flags, &full, err);
	relay_exec_result_deliver(st->host, res, &full);
	return status;
}

static relay_status t_push(relay_plugin_state *state, relay_transport_conn *conn, const char *local_path,
                           const char *remote_path, relay_call *call, unsigned flags, char **facts_out,
                           relay_error *err)
{
	return xfer_push(state, conn, local_path, remote_path, call, flags, facts_out, err);
}

static relay_status t_pull(relay_plugin_state *state, relay_transport_conn *conn, const char *remote_path,
                           const char *local_path, relay_call *call, unsigned flags, char **facts_out,
                           relay_error *err)
{
	return xfer_pull(state, conn, remote_path, local_path, call, flags, facts_out, err);
}

/* ---- descriptor ----------------------------------------------------------------------- */

static const relay_machine_ops machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = m_acquire,
    .renew = m_renew,
    .inspect = m_inspect,
    .release = m_release,
    .verify_destroyed = m_verify_destroyed,
    .images = m_images,
    .health = m_health,
    .catalog = m_catalog,
    .find_by_purpose = m_find_by_purpose,
    .binding = m_binding,
    .doctor = m_doctor,
};

static const relay_transport_ops transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_STDIO_BYTES,
    .open = t_open,
    .close = t_close,
    .exec = t_exec,
    .push = t_push,
    .pull = t_pull,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = MD_PLUGIN_NAME,
    .version = MD_PLUGIN_VERSION,
    .description =
        "containers of OCI images on Docker or Podman through the Engine API (they share the host kernel)",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .init = md_init,
    .fini = md_fini,
    .machine = &machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
