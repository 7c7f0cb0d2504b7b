/*
 * plugin.c — machine-local: the embedded default machine backend. One
 * shared object providing the machine kind (lease, renew, inspect, release
 * Linux namespace sandboxes) and the transport kind (exec, push, pull in
 * them). docs/machine-local.md describes what a local guest is, its
 * isolation, options, lease records and reaping.
 *
 * Options (config "options", every key optional; unknown keys are refused):
 *   "images":           {"<key>": "/absolute/base/tree", ...}  extra images;
 *                       "local" (the host root, read-only) always exists
 *   "maxGuests":        1..64, default 8
 *   "graceMs":          grace after the TTL before reaping, default 300000
 *   "backstopMs":       extra time before a guest with no relay kills
 *                       itself, default 60000
 *   "reaperIntervalMs": default 2000
 *   "networkHelper":    "auto" | "slirp4netns" | "pasta" | "none"
 *   "display":          "auto" (Xvfb when installed) | "off"
 *   "screen":           "1280x800x24"
 *   "guestUser":        {"name": "relay", "uid": 61000, "gid": 61000, "count": 64} | "root"
 *                       (each guest gets its own uid/gid from uid/gid .. + count - 1)
 *   "limits":           {"memoryBytes": n, "pids": n, "cpuPercent": n}  cgroup limits
 *   "bounds":           {"processes": n, "dataBytes": n, "fileBytes": n}  rlimits of
 *                       every guest command (RLIMIT_NPROC, RLIMIT_DATA, RLIMIT_FSIZE)
 *   "mask":             ["/absolute/path", ...] hidden inside guests
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "local.h"

/* The guest init program, embedded at build time (init_blob.c). */
extern const unsigned char machine_local_init_start[];
extern const unsigned char machine_local_init_end[];

/* ---- options ---------------------------------------------------------------- */

static bool valid_image_key(const char *key)
{
	return lu_valid_token(key, 128);
}

static relay_status parse_user(local_state *st, json_object *v, relay_error *err)
{
	if (json_object_is_type(v, json_type_string)) {
		if (strcmp(json_object_get_string(v), "root") != 0)
			return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.guestUser must be \"root\" or {\"name\", \"uid\", \"gid\"}");
		snprintf(st->user.name, sizeof st->user.name, "root");
		st->user.uid = 0;
		st->user.gid = 0;
		snprintf(st->user.home, sizeof st->user.home, "/root");
		return RELAY_OK;
	}
	if (!json_object_is_type(v, json_type_object))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.guestUser must be \"root\" or {\"name\", \"uid\", \"gid\"}");
	const char *name = lu_get_string(v, "name");
	int64_t uid = lu_get_int(v, "uid", -1);
	int64_t gid = lu_get_int(v, "gid", uid);
	json_object *count_obj = NULL;
	int64_t count = 64;
	if (json_object_object_get_ex(v, "count", &count_obj)) {
		count = json_object_is_type(count_obj, json_type_int) ? json_object_get_int64(count_obj) : -1;
		if (count < 1 || count > 4096)
			return lu_err(
			    st, err, RELAY_E_INVALID_ARGUMENT, 0,
			    "options.guestUser.count must be a whole number from 1 to 4096 (one uid "
			    "per guest)");
	}
	bool name_ok = name && name[0] && strlen(name) < 32 && islower((unsigned char)name[0]);
	for (const char *p = name; name_ok && *p; p++)
		name_ok = islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-' || *p == '_';
	if (!name_ok || uid < 1 || uid > 65535 || gid < 1 || gid > 65535)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.guestUser needs a lowercase name and uid/gid between 1 and 65535");
	if (uid + count - 1 > 65535 || gid + count - 1 > 65535)
		return lu_err(
		    st, err, RELAY_E_INVALID_ARGUMENT, 0,
		    "options.guestUser: uid/gid + count - 1 must stay within 65535 (the ids a guest's "
		    "user namespace maps)");
	st->user_count = (unsigned)count;
	snprintf(st->user.name, sizeof st->user.name, "%s", name);
	st->user.uid = (uid_t)uid;
	st->user.gid = (gid_t)gid;
	snprintf(st->user.home, sizeof st->user.home, "/home/%s", name);
	return RELAY_OK;
}

/* options.bounds: the rlimits of every guest command; 0 = none. */
static relay_status parse_bounds(local_state *st, json_object *v, relay_error *err)
{
	if (!json_object_is_type(v, json_type_object))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.bounds must be {\"processes\", \"dataBytes\", \"fileBytes\"}");
	json_object_object_foreach(v, bk, bv)
	{
		int64_t n = json_object_get_int64(bv);
		int64_t *slot = strcmp(bk, "processes") == 0   ? &st->bound_processes
		                : strcmp(bk, "dataBytes") == 0 ? &st->bound_data_bytes
		                : strcmp(bk, "fileBytes") == 0 ? &st->bound_file_bytes
		                                               : NULL;
		if (slot == NULL)
			return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.bounds.%s is unknown (processes, dataBytes, fileBytes)", bk);
		/* Below these a guest cannot start its shell, receiver or display. */
		int64_t least = slot == &st->bound_processes    ? 16
		                : slot == &st->bound_data_bytes ? (16LL << 20)
		                                                : (1LL << 20);
		if (!json_object_is_type(bv, json_type_int) || n < 0 || (n > 0 && n < least))
			return lu_err(
			    st, err, RELAY_E_INVALID_ARGUMENT, 0,
			    "options.bounds.%s must be a whole number: 0 (no bound) or at least %lld", bk,
			    (long long)least);
		*slot = n;
	}
	return RELAY_OK;
}

static bool valid_tree_path(const char *path)
{
	/* overlayfs option syntax: no ',' ':' or '\\' in a lower path */
	return path && path[0] == '/' && strpbrk(path, ",:\\\n") == NULL && strlen(path) < 1024;
}

static relay_status parse_options(local_state *st, json_object *opts, relay_error *err)
{
	if (opts == NULL)
		return RELAY_OK;
	if (!json_object_is_type(opts, json_type_object))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "machine-local options must be a JSON object");
	json_object_object_foreach(opts, key, v)
	{
		if (strcmp(key, "images") == 0) {
			if (!json_object_is_type(v, json_type_object))
				return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.images must map image keys to absolute tree folders");
			json_object_object_foreach(v, ik, iv)
			{
				const char *tree = json_object_is_type(iv, json_type_string)
				                       ? json_object_get_string(iv)
				                       : NULL;
				if (!valid_image_key(ik) || strcmp(ik, "local") == 0)
					return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
					              "options.images: %s is not a valid image key (A-Z, "
					              "a-z, 0-9, ., _, -; "
					              "\"local\" is reserved for the host root)",
					              ik);
				if (!valid_tree_path(tree))
					return lu_err(
					    st, err, RELAY_E_INVALID_ARGUMENT, 0,
					    "options.images.%s must be an absolute folder without ',' or ':'",
					    ik);
				if (st->image_count >= LOCAL_MAX_IMAGES)
					return lu_err(st, err, RELAY_E_TOO_LARGE, 0,
					              "options.images: at most %d images",
					              LOCAL_MAX_IMAGES - 1);
				st->images[st->image_count].key = strdup(ik);
				st->images[st->image_count].tree = strdup(tree);
				st->image_count++;
			}
		} else if (strcmp(key, "maxGuests") == 0) {
			int64_t n = json_object_get_int64(v);
			if (!json_object_is_type(v, json_type_int) || n < 1 || n > 64)
				return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.maxGuests must be 1 to 64");
			st->max_guests = (int)n;
		} else if (strcmp(key, "graceMs") == 0 || strcmp(key, "backstopMs") == 0 ||
		           strcmp(key, "reaperIntervalMs") == 0) {
			int64_t n = json_object_get_int64(v);
			if (!json_object_is_type(v, json_type_int) || n < 0 || n > 30LL * 24 * 3600 * 1000 ||
			    (strcmp(key, "reaperIntervalMs") == 0 && n < 100))
				return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.%s must be a whole number of milliseconds "
				              "(reaperIntervalMs >= 100)",
				              key);
			if (strcmp(key, "graceMs") == 0)
				st->grace_ms = n;
			else if (strcmp(key, "backstopMs") == 0)
				st->backstop_ms = n;
			else
				st->reaper_interval_ms = n;
		} else if (strcmp(key, "networkHelper") == 0) {
			const char *h = json_object_get_string(v);
			if (!json_object_is_type(v, json_type_string) ||
			    (strcmp(h, "auto") && strcmp(h, "slirp4netns") && strcmp(h, "pasta") &&
			     strcmp(h, "none")))
				return lu_err(
				    st, err, RELAY_E_INVALID_ARGUMENT, 0,
				    "options.networkHelper must be auto, slirp4netns, pasta or none");
			snprintf(st->helper_choice, sizeof st->helper_choice, "%s", h);
		} else if (strcmp(key, "display") == 0) {
			const char *d = json_object_get_string(v);
			if (!json_object_is_type(v, json_type_string) ||
			    (strcmp(d, "auto") && strcmp(d, "off")))
				return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.display must be auto or off");
			st->display_enabled = strcmp(d, "auto") == 0;
		} else if (strcmp(key, "screen") == 0) {
			const char *s = json_object_get_string(v);
			unsigned w = 0, h = 0, d = 0;
			char tail = 0;
			if (!json_object_is_type(v, json_type_string) ||
			    sscanf(s, "%ux%ux%u%c", &w, &h, &d, &tail) != 3 || w < 64 || h < 64 || w > 8192 ||
			    h > 8192 || (d != 24 && d != 32 && d != 16))
				return lu_err(
				    st, err, RELAY_E_INVALID_ARGUMENT, 0,
				    "options.screen must look like 1280x800x24 (depth 16, 24 or 32)");
			snprintf(st->screen, sizeof st->screen, "%ux%ux%u", w, h, d);
		} else if (strcmp(key, "guestUser") == 0) {
			relay_status s = parse_user(st, v, err);
			if (s != RELAY_OK)
				return s;
		} else if (strcmp(key, "limits") == 0) {
			if (!json_object_is_type(v, json_type_object))
				return lu_err(
				    st, err, RELAY_E_INVALID_ARGUMENT, 0,
				    "options.limits must be {\"memoryBytes\", \"pids\", \"cpuPercent\"}");
			json_object_object_foreach(v, lk, lv)
			{
				int64_t n = json_object_get_int64(lv);
				if (!json_object_is_type(lv, json_type_int) || n < 0)
					return lu_err(
					    st, err, RELAY_E_INVALID_ARGUMENT, 0,
					    "options.limits.%s must be a whole number (0 = no limit)", lk);
				if (strcmp(lk, "memoryBytes") == 0)
					st->limit_memory_bytes = n;
				else if (strcmp(lk, "pids") == 0)
					st->limit_pids = n;
				else if (strcmp(lk, "cpuPercent") == 0 && n <= 100000)
					st->limit_cpu_percent = (int)n;
				else
					return lu_err(
					    st, err, RELAY_E_INVALID_ARGUMENT, 0,
					    "options.limits.%s is unknown (memoryBytes, pids, cpuPercent)",
					    lk);
			}
		} else if (strcmp(key, "bounds") == 0) {
			relay_status s = parse_bounds(st, v, err);
			if (s != RELAY_OK)
				return s;
		} else if (strcmp(key, "mask") == 0) {
			if (!json_object_is_type(v, json_type_array))
				return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.mask must be an array of absolute paths");
			for (size_t i = 0; i < json_object_array_length(v); i++) {
				const char *p = json_object_get_string(json_object_array_get_idx(v, i));
				if (p == NULL || p[0] != '/' || strstr(p, "..") ||
				    st->mask_count >= LOCAL_MAX_MASKS)
					return lu_err(
					    st, err, RELAY_E_INVALID_ARGUMENT, 0,
					    "options.mask: at most %d absolute paths without \"..\"",
					    LOCAL_MAX_MASKS);
				st->masks[st->mask_count++] = strdup(p);
			}
		} else {
			return lu_err(
			    st, err, RELAY_E_INVALID_ARGUMENT, 0,
			    "unknown machine-local option %s (known: images, maxGuests, graceMs, backstopMs, "
			    "reaperIntervalMs, networkHelper, display, screen, guestUser, limits, bounds, "
			    "mask)",
			    key);
		}
	}
	return RELAY_OK;
}

/* ---- facts of the host -------------------------------------------------------- */

static void detect_helper(local_state *st)
{
	st->slirp_path = lu_find_program("slirp4netns");
	st->pasta_path = lu_find_program("pasta");
	const char *c = st->helper_choice;
	if (st->rootless || strcmp(c, "none") == 0)
		return;
	if ((strcmp(c, "auto") == 0 || strcmp(c, "slirp4netns") == 0) && st->slirp_path) {
		st->helper_path = st->slirp_path;
		snprintf(st->helper_name, sizeof st->helper_name, "slirp4netns");
	} else if ((strcmp(c, "auto") == 0 || strcmp(c, "pasta") == 0) && st->pasta_path) {
		st->helper_path = st->pasta_path;
		snprintf(st->helper_name, sizeof st->helper_name, "pasta");
	}
}

static relay_status make_init_memfd(local_state *st, relay_error *err)
{
	size_t len = (size_t)(machine_local_init_end - machine_local_init_start);
	int fd = memfd_create("machine-local-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return lu_err(st, err, RELAY_E_IO, errno, "cannot create the memfd for the guest init");
	const unsigned char *p = machine_local_init_start;
	size_t left = len;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			close(fd);
			return lu_err(st, err, RELAY_E_IO, e, "cannot write the guest init into its memfd");
		}
		p += w;
		left -= (size_t)w;
	}
	fchmod(fd, 0500);
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	/* Keep it far from 0..4, which the launcher's spawn rewires. */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 64);
	if (high < 0) {
		int e = errno;
		close(fd);
		return lu_err(st, err, RELAY_E_IO, e, "cannot move the guest init's memfd");
	}
	close(fd);
	fd = high;
	st->init_memfd = fd;
	return RELAY_OK;
}

static void free_state(local_state *st)
{
	if (st == NULL)
		return;
	for (size_t i = 0; i < st->image_count; i++) {
		free(st->images[i].key);
		free(st->images[i].tree);
	}
	for (size_t i = 0; i < st->mask_count; i++)
		free(st->masks[i]);
	for (size_t i = 0; i < st->reserved_count; i++)
		free(st->reserved[i]);
	free(st->state_dir);
	free(st->leases_dir);
	free(st->libexec_dir);
	free(st->default_network);
	free(st->slirp_path);
	free(st->pasta_path);
	free(st->cgroup_base);
	free(st->cgroup_v1_pids);
	free(st->cgroup_v1_memory);
	if (st->init_memfd >= 0)
		close(st->init_memfd);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cond);
	free(st);
}

static relay_status local_init(const relay_host *host, const char *config_json, unsigned flags,
                               relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	local_state *st = calloc(1, sizeof *st);
	if (st == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	st->host = host;
	st->init_memfd = -1;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	relay_status status = RELAY_OK;
	json_object *cfg = NULL;
	if (flags != 0) {
		status = lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
		goto fail;
	}
	cfg = json_tokener_parse(config_json ? config_json : "{}");
	if (cfg == NULL || !json_object_is_type(cfg, json_type_object)) {
		status = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		                "the plugin configuration is not a JSON object");
		goto fail;
	}
	const char *state_dir = lu_get_string(cfg, "stateDir");
	if (state_dir == NULL || state_dir[0] != '/' || strpbrk(state_dir, ",:\n") ||
	    strlen(state_dir) > 512) {
		status = lu_err(
		    st, err, RELAY_E_INVALID_ARGUMENT, 0,
		    "machine-local needs an absolute \"stateDir\" of at most 512 bytes without ',' or ':'");
		goto fail;
	}
	st->state_dir = strdup(state_dir);
	const char *libexec = lu_get_string(cfg, "libexecDir");
	st->libexec_dir = libexec ? strdup(libexec) : NULL;
	const char *net = lu_get_string(cfg, "guestNetwork");
	st->default_network = strdup(net && strcmp(net, "internet") == 0 ? "internet" : "nat");
	/* defaults */
	st->max_guests = 8;
	st->grace_ms = 300000;
	st->backstop_ms = 60000;
	st->reaper_interval_ms = 2000;
	snprintf(st->helper_choice, sizeof st->helper_choice, "auto");
	st->display_enabled = true;
	snprintf(st->screen, sizeof st->screen, "1280x800x24");
	snprintf(st->user.name, sizeof st->user.name, "relay");
	st->user.uid = 61000;
	st->user.gid = 61000;
	snprintf(st->user.home, sizeof st->user.home, "/home/relay");
	st->user_count = 64;
	st->limit_pids = 4096;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	int64_t half = pages > 0 && page > 0 ? (int64_t)pages * page / 2 : 0;
	st->limit_memory_bytes = half > 0 && half < (4LL << 30) ? half : (4LL << 30);
	st->bound_processes = 4096;
	st->bound_data_bytes = st->limit_memory_bytes;
	st->bound_file_bytes = 16LL << 30;
	st->images[0].key = strdup("local");
	st->images[0].tree = strdup("/");
	st->image_count = 1;
	status = parse_options(st, lu_get_object(cfg, "options"), err);
	if (status != RELAY_OK)
		goto fail;
	st->rootless = geteuid() != 0;
	if (st->rootless) {
		snprintf(st->user.name, sizeof st->user.name, "root");
		st->user.uid = 0;
		st->user.gid = 0;
		snprintf(st->user.home, sizeof st->user.home, "/root");
	}
	size_t len = strlen(st->state_dir) + 8;
	st->leases_dir = malloc(len);
	if (st->leases_dir == NULL || st->state_dir == NULL || st->default_network == NULL) {
		status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto fail;
	}
	snprintf(st->leases_dir, len, "%s/leases", st->state_dir);
	int e = lu_mkdir_p(st->leases_dir, 0700);
	if (e != 0) {
		status = lu_err(st, err, RELAY_E_IO, e, "cannot create the lease store %s", st->leases_dir);
		goto fail;
	}
	struct utsname un;
	uname(&un);
	if (strcmp(un.machine, "aarch64") == 0 || strcmp(un.machine, "arm64") == 0) {
		snprintf(st->arch, sizeof st->arch, "arm64");
		snprintf(st->platform, sizeof st->platform, "linux-aarch64");
	} else {
		lu_textf(st->arch, sizeof st->arch, "%s", un.machine);
		lu_textf(st->platform, sizeof st->platform, "linux-%s", un.machine);
	}
	lu_read_line("/proc/sys/kernel/random/boot_id", st->boot_id, sizeof st->boot_id);
	st->self_pid = getpid();
	st->self_start = lu_proc_start(st->self_pid);
	detect_helper(st);
	cgroup_detect(st);
	status = make_init_memfd(st, err);
	if (status != RELAY_OK)
		goto fail;
	reaper_scan(st, true);
	int rc = reaper_start(st);
	if (rc != 0) {
		status = lu_err(st, err, RELAY_E_IO, rc, "cannot start the reaper thread");
		goto fail;
	}
	json_object_put(cfg);
	*state_out = st;
	return RELAY_OK;
fail:
	if (cfg)
		json_object_put(cfg);
	free_state(st);
	return status;
}

static void local_fini(relay_plugin_state *state)
{
	local_state *st = state;
	if (st == NULL)
		return;
	/* Guests are left running: they outlive the relay until released or
	 * reaped (the pause rule). */
	reaper_stop(st);
	free_state(st);
}

/* ---- machine ops ---------------------------------------------------------------- */

static relay_status text_out(local_state *st, json_object *obj, char **out, relay_error *err)
{
	*out = lu_json_out(st, obj);
	json_object_put(obj);
	return *out ? RELAY_OK : lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static relay_status m_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call,
                              unsigned flags, char **lease_json_out, relay_error *err)
{
	local_state *st = state;
	*lease_json_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown acquire flags 0x%x", flags);
	json_object *spec = spec_json ? json_tokener_parse(spec_json) : NULL;
	if (spec == NULL || !json_object_is_type(spec, json_type_object)) {
		if (spec)
			json_object_put(spec);
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the acquire spec is not a JSON object");
	}
	json_object *record = NULL;
	relay_status s = sandbox_acquire(st, spec, call, &record, err);
	json_object_put(spec);
	if (s != RELAY_OK)
		return s;
	json_object *doc = lease_document(st, record);
	json_object_put(record);
	return text_out(st, doc, lease_json_out, err);
}

static const char *doc_vm(json_object *doc)
{
	return lu_get_string(doc, "vm");
}

static relay_status m_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
                            relay_call *call, unsigned flags, char **lease_json_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (lease_json_out)
		*lease_json_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown renew flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = doc_vm(doc);
	relay_status s = RELAY_OK;
	json_object *rec = NULL;
	int lock = -1;
	if (vm == NULL || ttl_ms == 0) {
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		           "renew needs a lease document and a positive ttl");
		goto done;
	}
	lock = lease_lock(st, vm, true);
	int e = 0;
	rec = lock >= 0 ? lease_read(st, vm, &e) : NULL;
	if (rec == NULL) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local no longer holds lease %s", vm);
		goto done;
	}
	const char *state_text = lu_get_string(rec, "state");
	if (state_text == NULL || strcmp(state_text, "running") != 0) {
		s = lu_err(st, err, RELAY_E_REFUSED, 0, "%s is %s; renewal cannot cancel committed teardown",
		           vm, state_text ? state_text : "in an unknown state");
		goto done;
	}
	int pidfd = sandbox_init_pidfd(rec);
	if (pidfd < 0) {
		s = lu_err(st, err, RELAY_E_REFUSED, 0,
		           "%s is not running (its guest init is gone); release it and acquire a new lease",
		           vm);
		goto done;
	}
	close(pidfd);
	int64_t now = st->host->now_ms();
	int64_t expires =
	    now + (int64_t)(ttl_ms > (uint64_t)INT64_MAX / 2 ? (uint64_t)INT64_MAX / 2 : ttl_ms);
	int64_t deadline = lu_get_int(rec, "deadlineMs", 0);
	if (deadline > 0 && expires > deadline)
		expires = deadline;
	json_object_object_add(rec, "expiresAtMs", json_object_new_int64(expires));
	json_object_object_add(rec, "renewedAtMs", json_object_new_int64(now));
	lease_set_owner(st, rec); /* a restarted relay takes the lease back here */
	e = lease_write(st, rec, true);
	if (e == 0)
		e = lease_write_expires(st, rec);
	if (e != 0) {
		s = lu_err(st, err, RELAY_E_IO, e, "cannot write the renewed lease %s", vm);
		goto done;
	}
	if (lease_json_out)
		s = text_out(st, lease_document(st, rec), lease_json_out, err);
done:
	if (lock >= 0)
		lease_unlock(lock);
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call,
                              unsigned flags, char **lease_json_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (lease_json_out)
		*lease_json_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown inspect flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = doc_vm(doc);
	relay_status s = RELAY_OK;
	int e = 0;
	json_object *rec = vm ? lease_read(st, vm, &e) : NULL;
	if (vm == NULL)
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "inspect needs a lease document");
	else if (rec == NULL)
		s = lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local no longer holds lease %s", vm);
	else if (lease_json_out)
		s = text_out(st, lease_document(st, rec), lease_json_out, err);
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                              relay_call *call, unsigned flags, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown release flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = doc_vm(doc);
	relay_status s = RELAY_OK;
	json_object *rec = NULL;
	int lock = -1;
	if (vm == NULL || !lu_valid_token(vm, 200)) {
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "release needs a lease document");
		goto done;
	}
	lock = lease_lock(st, vm, true);
	rec = lock >= 0 ? lease_read(st, vm, NULL) : NULL;
	if (rec == NULL) {
		/* Not in the store (or its folder is gone). Make sure nothing the
		 * document describes survives, then say we no longer know it. */
		json_object *described = lu_get_object(doc, "record");
		char detail[256];
		if (described && sandbox_verify_gone(st, described, detail, sizeof detail) != RELAY_OK) {
			s = sandbox_destroy(st, described, reason ? reason : "released", err);
			goto done;
		}
		s = lu_err(st, err, RELAY_E_NOT_FOUND, ENOENT, "machine-local no longer holds lease %s", vm);
		goto done;
	}
	s = sandbox_destroy(st, rec, reason ? reason : "released", err);
done:
	if (lock >= 0) {
		lease_unlock(lock);
	}
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                       unsigned flags, char **check_name_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (check_name_out)
		*check_name_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown verify flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	json_object *rec = lu_get_object(doc, "record");
	relay_status s;
	char detail[512];
	if (rec == NULL || lu_get_string(rec, "vm") == NULL)
		s = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		           "verify needs a machine-local lease document");
	else if ((s = sandbox_verify_gone(st, rec, detail, sizeof detail)) != RELAY_OK)
		s = lu_err(st, err, RELAY_E_UNVERIFIED, 0, "%s: %s", lu_get_string(rec, "vm"), detail);
	if (s == RELAY_OK && check_name_out)
		*check_name_out = st->host->strdup("namespace");
	if (doc)
		json_object_put(doc);
	return s;
}

static relay_status m_images(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	(void)call;
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown images flags 0x%x", flags);
	return text_out(st, inventory_images(st), out, err);
}

static relay_status m_health(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	(void)call;
	local_state *st = state;
	if (out)
		*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown health flags 0x%x", flags);
	if (access(st->leases_dir, W_OK) != 0)
		return lu_err(st, err, RELAY_E_UNAVAILABLE, errno, "the lease store %s is not writable",
		              st->leases_dir);
	if (out == NULL)
		return RELAY_OK;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "ok", json_object_new_boolean(true));
	json_object_object_add(o, "service", json_object_new_string(LOCAL_PLUGIN_NAME));
	json_object_object_add(o, "rootless", json_object_new_boolean(st->rootless));
	json_object_object_add(o, "store", json_object_new_string(st->state_dir));
	return text_out(st, o, out, err);
}

static relay_status m_catalog(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	(void)call;
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown catalog flags 0x%x", flags);
	json_object *cat = NULL;
	relay_status s = inventory_catalog(st, &cat, err);
	if (s != RELAY_OK)
		return s;
	return text_out(st, cat, out, err);
}

static relay_status m_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                      unsigned flags, char **out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown find flags 0x%x", flags);
	if (purpose == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "find_by_purpose needs a purpose");
	json_object *all = lease_list(st);
	json_object *found = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(all); i++) {
		json_object *rec = json_object_array_get_idx(all, i);
		const char *p = lu_get_string(rec, "purpose");
		if (p && strcmp(p, purpose) == 0)
			json_object_array_add(found, lease_document(st, rec));
	}
	json_object_put(all);
	return text_out(st, found, out, err);
}

static relay_status m_binding(relay_plugin_state *state, unsigned flags, char **out, relay_error *err)
{
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown binding flags 0x%x", flags);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "machine", json_object_new_string(LOCAL_PLUGIN_NAME));
	json_object_object_add(o, "endpoint", NULL);
	json_object_object_add(o, "store", json_object_new_string(st->state_dir));
	json_object_object_add(o, "environmentFingerprint", NULL);
	return text_out(st, o, out, err);
}

static relay_status m_console(relay_plugin_state *state, const char *lease_json, const char *op,
                              const char *request_json, relay_call *call, unsigned flags, char **out,
                              relay_error *err)
{
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown console flags 0x%x", flags);
	return console_op(st, lease_json, op, request_json, call, out, err);
}

static relay_status m_doctor(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                             relay_error *err)
{
	(void)call;
	local_state *st = state;
	*out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown doctor flags 0x%x", flags);
	return text_out(st, inventory_doctor(st), out, err);
}

/* ---- transport ops ------------------------------------------------------------ */

static void conn_free(local_conn *c)
{
	if (c == NULL)
		return;
	free(c->vm);
	free(c->lease_dir);
	if (c->record)
		json_object_put(c->record);
	free(c);
}

static relay_status t_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                           unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	*conn_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown open flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	relay_status s = RELAY_OK;
	json_object *rec = NULL;
	local_conn *c = NULL;
	const char *vm = doc_vm(doc);
	if (doc == NULL || lease_local_facts(doc) == NULL || vm == NULL) {
		s = lu_err(st, err, RELAY_E_UNSUPPORTED, 0,
		           "machine-local's transport only reaches machine-local leases");
		goto done;
	}
	int e = 0;
	rec = lease_read(st, vm, &e);
	if (rec == NULL) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local no longer holds lease %s", vm);
		goto done;
	}
	c = calloc(1, sizeof *c);
	json_object *init = lu_get_object(lu_get_object(rec, "pids"), "init");
	json_object *user = lu_get_object(rec, "guestUser");
	const char *dir = lu_get_string(lu_get_object(rec, "paths"), "leaseDir");
	const char *home = lu_get_string(user, "home");
	if (c == NULL || dir == NULL) {
		s = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	c->vm = strdup(vm);
	c->lease_dir = strdup(dir);
	c->init_pid = (pid_t)lu_get_int(init, "pid", 0);
	c->init_start = (unsigned long long)lu_get_int(init, "startTime", 0);
	c->uid = (uid_t)lu_get_int(user, "uid", 0);
	c->gid = (gid_t)lu_get_int(user, "gid", 0);
	snprintf(c->home, sizeof c->home, "%s", home ? home : "/");
	if (!lu_proc_alive(c->init_pid, c->init_start)) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, ESRCH, "guest %s is not running (its init is gone)",
		           vm);
		goto done;
	}
	c->record = rec;
	rec = NULL;
	*conn_out = c;
	c = NULL;
done:
	conn_free(c);
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static void t_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags)
{
	(void)state;
	(void)flags;
	conn_free(conn);
}

static relay_status t_exec(relay_plugin_state *state, relay_transport_conn *conn,
                           const relay_exec_request *req, relay_call *call, unsigned flags,
                           relay_exec_result *res, relay_error *err)
{
	return exec_run(state, conn, req, call, flags, res, err);
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

/* ---- descriptor ------------------------------------------------------------------ */

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
    .console = m_console,
    .doctor = m_doctor,
};

static const relay_transport_ops transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_GUEST_FACTS | RELAY_TRANSPORT_STDIO_BYTES,
    .open = t_open,
    .close = t_close,
    .exec = t_exec,
    .push = t_push,
    .pull = t_pull,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = LOCAL_PLUGIN_NAME,
    .version = LOCAL_PLUGIN_VERSION,
    .description = "Linux namespace sandboxes over an overlay of a base tree (a sandbox, not a VM)",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .capabilities = 0,
    .init = local_init,
    .fini = local_fini,
    .machine = &machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
