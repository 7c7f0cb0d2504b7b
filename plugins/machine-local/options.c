/*
 * options.c — machine-local's options and their defaults (docs/machine-local.md,
 * Options).
 *
 * Options (config "options", every key optional; read through the kit's
 * table, relay_kit/options.h, which refuses unknown keys):
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
 *   "rootless":         {"withoutSubids": "refuse" | "map-user"}  a relay that is
 *                       not root and has no subordinate ids: refuse guests (default)
 *                       or run them as the relay's user mapped to guest root
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/options.h"

static bool valid_image_key(const char *key)
{
	return lu_valid_token(key, 128);
}

/* {"withoutSubids": "refuse" | "map-user"} (subids.c, sandbox.c). */
static relay_status parse_rootless(local_state *st, json_object *v, relay_error *err)
{
	const char *w = json_object_is_type(v, json_type_object) ? lu_get_string(v, "withoutSubids") : NULL;
	bool only_key = json_object_is_type(v, json_type_object) && json_object_object_length(v) == 1;
	if (!only_key || w == NULL || (strcmp(w, "refuse") != 0 && strcmp(w, "map-user") != 0))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.rootless must be {\"withoutSubids\": \"refuse\"} (the default) or "
		              "{\"withoutSubids\": \"map-user\"}");
	st->rootless_map_user = strcmp(w, "map-user") == 0;
	return RELAY_OK;
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
		if (slot == &st->bound_data_bytes)
			st->bound_data_bytes_set = true;
	}
	return RELAY_OK;
}

static bool valid_tree_path(const char *path)
{
	/* overlayfs option syntax: no ',' ':' or '\\' in a lower path */
	return path && path[0] == '/' && strpbrk(path, ",:\\\n") == NULL && strlen(path) < 1024;
}

static relay_status opt_images(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	local_state *st = spec->ctx;
	if (!json_object_is_type(v, json_type_object))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.images must map image keys to absolute tree folders");
	json_object_object_foreach(v, ik, iv)
	{
		const char *tree =
		    json_object_is_type(iv, json_type_string) ? json_object_get_string(iv) : NULL;
		if (!valid_image_key(ik) || strcmp(ik, "local") == 0)
			return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.images: %s is not a valid image key (A-Z, a-z, 0-9, ., _, -; "
			              "\"local\" is reserved for the host root)",
			              ik);
		if (!valid_tree_path(tree))
			return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.images.%s must be an absolute folder without ',' or ':'", ik);
		if (st->image_count >= LOCAL_MAX_IMAGES)
			return lu_err(st, err, RELAY_E_TOO_LARGE, 0, "options.images: at most %d images",
			              LOCAL_MAX_IMAGES - 1);
		st->images[st->image_count].key = strdup(ik);
		st->images[st->image_count].tree = strdup(tree);
		st->image_count++;
	}
	return RELAY_OK;
}

static relay_status opt_network_helper(const rk_options *spec, const rk_option *opt, json_object *v,
                                       relay_error *err)
{
	local_state *st = spec->ctx;
	static const char *const helpers[] = {"auto", "slirp4netns", "pasta", "none", NULL};
	int i = 0;
	relay_status s = rk_option_choice(spec, opt->key, v, helpers, &i, err);
	if (s == RELAY_OK)
		snprintf(st->helper_choice, sizeof st->helper_choice, "%s", helpers[i]);
	return s;
}

static relay_status opt_guest_user(const rk_options *spec, const rk_option *opt, json_object *v,
                                   relay_error *err)
{
	(void)opt;
	return parse_user(spec->ctx, v, err);
}

static relay_status opt_limits(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	local_state *st = spec->ctx;
	if (!json_object_is_type(v, json_type_object))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.limits must be {\"memoryBytes\", \"pids\", \"cpuPercent\"}");
	json_object_object_foreach(v, lk, lv)
	{
		int64_t n = json_object_get_int64(lv);
		if (!json_object_is_type(lv, json_type_int) || n < 0)
			return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.limits.%s must be a whole number (0 = no limit)", lk);
		if (strcmp(lk, "memoryBytes") == 0)
			st->limit_memory_bytes = n;
		else if (strcmp(lk, "pids") == 0)
			st->limit_pids = n;
		else if (strcmp(lk, "cpuPercent") == 0 && n <= 100000)
			st->limit_cpu_percent = (int)n;
		else
			return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.limits.%s is unknown (memoryBytes, pids, cpuPercent)", lk);
	}
	return RELAY_OK;
}

static relay_status opt_rootless(const rk_options *spec, const rk_option *opt, json_object *v,
                                 relay_error *err)
{
	(void)opt;
	return parse_rootless(spec->ctx, v, err);
}

static relay_status opt_bounds(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	return parse_bounds(spec->ctx, v, err);
}

static relay_status opt_mask(const rk_options *spec, const rk_option *opt, json_object *v, relay_error *err)
{
	(void)opt;
	local_state *st = spec->ctx;
	if (!json_object_is_type(v, json_type_array))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.mask must be an array of absolute paths");
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		const char *p = json_object_get_string(json_object_array_get_idx(v, i));
		if (p == NULL || p[0] != '/' || strstr(p, "..") || st->mask_count >= LOCAL_MAX_MASKS)
			return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.mask: at most %d absolute paths without \"..\"",
			              LOCAL_MAX_MASKS);
		st->masks[st->mask_count++] = strdup(p);
	}
	return RELAY_OK;
}

relay_status options_parse(local_state *st, json_object *opts, relay_error *err)
{
	int64_t max_guests = st->max_guests;
	const rk_option table[] = {
	    {"images", opt_images, 0, 0, NULL},
	    {"maxGuests", NULL, 1, 64, &max_guests},
	    RK_OPTIONS_LEASE_TIMES(&st->grace_ms, &st->backstop_ms, &st->reaper_interval_ms),
	    {"networkHelper", opt_network_helper, 0, 0, NULL},
	    RK_OPTIONS_DISPLAY(&st->display_enabled, st->screen),
	    {"guestUser", opt_guest_user, 0, 0, NULL},
	    {"limits", opt_limits, 0, 0, NULL},
	    {"bounds", opt_bounds, 0, 0, NULL},
	    {"mask", opt_mask, 0, 0, NULL},
	    {"rootless", opt_rootless, 0, 0, NULL},
	};
	const rk_options spec = {st->host, LOCAL_PLUGIN_NAME, NULL, table, sizeof table / sizeof table[0],
	                         st};
	relay_status s = rk_options_parse(&spec, opts, err);
	st->max_guests = (int)max_guests;
	return s;
}

void options_defaults(local_state *st)
{
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
}

int64_t local_data_bound(const local_state *st)
{
	/* RLIMIT_DATA counts address space a program only reserves (the shadow
	 * of AddressSanitizer, a runtime's heap reservation), not memory in
	 * use: by default it is the fallback bound where no memory cgroup
	 * bounds what the guest really uses. */
	return st->bound_data_bytes_set || !cgroup_limits_memory(st) ? st->bound_data_bytes : 0;
}
