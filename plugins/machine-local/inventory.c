/*
 * inventory.c — what machine-local offers: the images (named base trees),
 * their application catalog (the dpkg database of each tree, plus the guest
 * programs the relay ships), and the readiness checks of `doctor`.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/guest_facts.h"

static size_t count_active(local_state *st)
{
	json_object *all = lease_list(st);
	size_t n = json_object_array_length(all);
	json_object_put(all);
	pthread_mutex_lock(&st->lock);
	n += st->reserved_count;
	pthread_mutex_unlock(&st->lock);
	return n;
}

static bool tree_ok(const char *tree)
{
	struct stat sb;
	return stat(tree, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static json_object *opt_int(bool on, int64_t v)
{
	return on && v > 0 ? json_object_new_int64(v) : NULL;
}

static json_object *cgroup_bound(bool v2, bool v1, const char *key, int64_t v)
{
	if (!(v2 || v1) || v <= 0)
		return NULL;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "version", json_object_new_int(v2 ? 2 : 1));
	json_object_object_add(o, key, json_object_new_int64(v));
	return o;
}

/* What every new guest is bounded by (the record's "bounds" says what one
 * guest got): null = not bounded here. */
static json_object *guest_bounds(local_state *st)
{
	json_object *b = json_object_new_object();
	json_object *ids = NULL;
	if (uids_in_use(st)) {
		ids = json_object_new_object();
		json_object_object_add(ids, "first", json_object_new_int64(st->user.uid));
		json_object_object_add(ids, "count", json_object_new_int64(st->user_count));
	}
	json_object_object_add(b, "guestUids", ids);
	json_object_object_add(b, "processes", opt_int(st->user.uid != 0, st->bound_processes));
	json_object_object_add(b, "dataBytes", opt_int(true, local_data_bound(st)));
	json_object_object_add(b, "fileBytes", opt_int(true, st->bound_file_bytes));
	bool v2 = st->cgroup_base != NULL;
	json_object_object_add(
	    b, "cgroupPids",
	    cgroup_bound(v2 && st->cgroup_pids, st->cgroup_v1_pids != NULL, "max", st->limit_pids));
	json_object_object_add(b, "cgroupMemory",
	                       cgroup_bound(v2 && st->cgroup_memory, st->cgroup_v1_memory != NULL, "maxBytes",
	                                    st->limit_memory_bytes));
	json_object_object_add(b, "cgroupCpu",
	                       cgroup_bound(v2 && st->cgroup_cpu, false, "percent", st->limit_cpu_percent));
	return b;
}

json_object *inventory_images(relay_plugin_state *state, relay_call *call)
{
	(void)call;
	local_state *st = state;
	size_t running = count_active(st);
	bool acquirable = (int)running < st->max_guests;
	json_object *images = json_object_new_object();
	for (size_t i = 0; i < st->image_count; i++) {
		const local_image *im = &st->images[i];
		bool ok = tree_ok(im->tree);
		json_object *o = json_object_new_object();
		json_object_object_add(o, "kind", json_object_new_string("linux"));
		json_object_object_add(o, "base_available", json_object_new_boolean(ok));
		json_object_object_add(o, "tree", json_object_new_string(im->tree));
		bool display = ok && st->display_enabled && sandbox_image_has(st, im->tree, "usr/bin/Xvfb");
		json_object_object_add(o, "display", json_object_new_boolean(display));
		json_object_object_add(
		    o, "vnc",
		    json_object_new_boolean(display && sandbox_image_has(st, im->tree, "usr/bin/x11vnc")));
		json_object *conc = json_object_new_object();
		json_object_object_add(conc, "running", json_object_new_int64((int64_t)running));
		json_object_object_add(conc, "limit", json_object_new_int(st->max_guests));
		json_object_object_add(conc, "acquirable", json_object_new_boolean(ok && acquirable));
		json_object_object_add(o, "concurrency", conc);
		json_object_object_add(images, im->key, o);
	}
	json_object *cap = json_object_new_object();
	json_object_object_add(cap, "local_running", json_object_new_int64((int64_t)running));
	json_object_object_add(cap, "local_limit", json_object_new_int(st->max_guests));
	json_object *net = json_object_new_object();
	json_object_object_add(net, "helper",
	                       st->helper_path ? json_object_new_string(st->helper_name) : NULL);
	json_object_object_add(net, "nat",
	                       json_object_new_string(st->helper_path ? "outbound, no host or private ranges"
	                                                              : "loopback only"));
	json_object_object_add(net, "internet", json_object_new_boolean(st->helper_path != NULL));
	json_object_object_add(cap, "network", net);
	json_object *cg = json_object_new_object();
	json_object_object_add(cg, "available", json_object_new_boolean(st->cgroup_base != NULL));
	json_object_object_add(cg, "memory", json_object_new_boolean(st->cgroup_memory));
	json_object_object_add(cg, "pids", json_object_new_boolean(st->cgroup_pids));
	json_object_object_add(cg, "cpu", json_object_new_boolean(st->cgroup_cpu));
	json_object_object_add(cg, "reason",
	                       st->cgroup_reason[0] ? json_object_new_string(st->cgroup_reason) : NULL);
	json_object *v1 = json_object_new_object();
	json_object_object_add(v1, "pids",
	                       st->cgroup_v1_pids ? json_object_new_string(st->cgroup_v1_pids) : NULL);
	json_object_object_add(v1, "memory",
	                       st->cgroup_v1_memory ? json_object_new_string(st->cgroup_v1_memory) : NULL);
	json_object_object_add(v1, "reason",
	                       st->cgroup_v1_reason[0] ? json_object_new_string(st->cgroup_v1_reason) : NULL);
	json_object_object_add(cg, "v1", v1);
	json_object_object_add(cap, "cgroups", cg);
	json_object_object_add(cap, "bounds", guest_bounds(st));
	json_object *out = json_object_new_object();
	json_object_object_add(out, "images", images);
	json_object_object_add(out, "capacity", cap);
	return out;
}

/* ---- catalog ------------------------------------------------------------------ */

typedef struct app {
	char *id;
	char *name;
	char *version; /* may be NULL */
} app;

typedef struct app_list {
	app *items;
	size_t count, cap;
} app_list;

static void apps_add(app_list *l, const char *id, const char *name, const char *version)
{
	if (l->count == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		app *p = realloc(l->items, cap * sizeof *p);
		if (p == NULL)
			return;
		l->items = p;
		l->cap = cap;
	}
	app *a = &l->items[l->count];
	a->id = strdup(id);
	a->name = strdup(name);
	a->version = version ? strdup(version) : NULL;
	if (a->id && a->name)
		l->count++;
	else {
		free(a->id);
		free(a->name);
		free(a->version);
	}
}

static void apps_free(app_list *l)
{
	for (size_t i = 0; i < l->count; i++) {
		free(l->items[i].id);
		free(l->items[i].name);
		free(l->items[i].version);
	}
	free(l->items);
}

static int app_cmp(const void *a, const void *b)
{
	return strcmp(((const app *)a)->id, ((const app *)b)->id);
}

static bool apps_has(const app_list *l, const char *id)
{
	for (size_t i = 0; i < l->count; i++)
		if (strcmp(l->items[i].id, id) == 0)
			return true;
	return false;
}

/* Removes the X servers (dpkg:xvfb, dpkg:xserver-xorg-core, each with or
 * without an architecture suffix) that capture plugins take as capture
 * software. */
static void apps_drop_x_servers(app_list *l)
{
	static const char *const servers[] = {"dpkg:xvfb", "dpkg:xserver-xorg-core"};
	size_t kept = 0;
	for (size_t i = 0; i < l->count; i++) {
		bool drop = false;
		for (size_t k = 0; k < sizeof servers / sizeof servers[0] && !drop; k++) {
			size_t n = strlen(servers[k]);
			drop = strncmp(l->items[i].id, servers[k], n) == 0 &&
			       (l->items[i].id[n] == '\0' || l->items[i].id[n] == ':');
		}
		if (drop) {
			free(l->items[i].id);
			free(l->items[i].name);
			free(l->items[i].version);
		} else {
			l->items[kept++] = l->items[i];
		}
	}
	l->count = kept;
}

static void add_dpkg_app(void *ctx, const char *id, const char *name, const char *version)
{
	apps_add(ctx, id, name, version);
}

/* Reads <tree>/var/lib/dpkg/status (its first 64 MiB): every installed
 * package becomes an application (relay_kit/guest_facts.h names them). */
static void read_dpkg(const char *tree, app_list *apps)
{
	char path[PATH_MAX];
	lu_tree_path(path, sizeof path, tree, "var/lib/dpkg/status");
	size_t len = 0;
	char *text = lu_read_small(path, (size_t)64 << 20, &len);
	if (text)
		rk_dpkg_installed_each(text, add_dpkg_app, apps);
	free(text);
}

static bool guest_program(local_state *st, const char *name)
{
	if (st->kit.libexec_dir == NULL)
		return false;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s/%s", st->kit.libexec_dir, st->platform, name);
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

relay_status inventory_catalog(relay_plugin_state *state, relay_call *call, json_object **out,
                               relay_error *err)
{
	(void)call;
	(void)err;
	local_state *st = state;
	json_object *images = json_object_new_array();
	for (size_t i = 0; i < st->image_count; i++) {
		const local_image *im = &st->images[i];
		if (!tree_ok(im->tree))
			continue;
		app_list apps = {0};
		read_dpkg(im->tree, &apps);
		/* With displays off (options.display "off") no X server runs in
		 * the guest, so the catalog offers none: a capture plugin reading
		 * it must not plan snapshots of a display that does not exist. */
		bool xvfb = st->display_enabled && sandbox_image_has(st, im->tree, "usr/bin/Xvfb");
		if (!st->display_enabled)
			apps_drop_x_servers(&apps);
		if (xvfb && !apps_has(&apps, "dpkg:xvfb"))
			apps_add(&apps, "xvfb", "Xvfb", NULL);
		/* The relay's own guest programs, staged by relay_stage. */
		if (guest_program(st, "receiver"))
			apps_add(&apps, "mcp-relay:receiver", "mcp-relay receiver", LOCAL_PLUGIN_VERSION);
		if (guest_program(st, "relay-x11shot") && xvfb)
			apps_add(&apps, "mcp-relay:relay-x11shot", "relay-x11shot", LOCAL_PLUGIN_VERSION);
		qsort(apps.items, apps.count, sizeof *apps.items, app_cmp);
		json_object *list = json_object_new_array();
		for (size_t k = 0; k < apps.count && k < 20000; k++) {
			json_object *a = json_object_new_object();
			json_object_object_add(a, "id", json_object_new_string(apps.items[k].id));
			json_object_object_add(a, "name", json_object_new_string(apps.items[k].name));
			json_object_object_add(a, "aliases", json_object_new_array());
			json_object_object_add(
			    a, "version",
			    apps.items[k].version ? json_object_new_string(apps.items[k].version) : NULL);
			json_object_array_add(list, a);
		}
		apps_free(&apps);
		json_object *img = json_object_new_object();
		json_object_object_add(img, "image", json_object_new_string(im->key));
		json_object_object_add(img, "os", json_object_new_string("linux"));
		json_object_object_add(img, "architecture", json_object_new_string(st->arch));
		json_object_object_add(img, "applications", list);
		json_object_array_add(images, img);
	}
	json_object *cat = json_object_new_object();
	json_object_object_add(cat, "schemaVersion", json_object_new_int(1));
	json_object_object_add(cat, "images", images);
	*out = cat;
	return RELAY_OK;
}

/* ---- doctor -------------------------------------------------------------------- */

static void check_at(json_object *arr, const char *name, bool ok, const char *detail, const char *fix,
                     bool optional)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "check", json_object_new_string(name));
	json_object_object_add(o, "ok", json_object_new_boolean(ok));
	json_object_object_add(o, "detail", json_object_new_string(detail));
	json_object_object_add(o, "fix", fix ? json_object_new_string(fix) : NULL);
	if (optional)
		json_object_object_add(o, "level", json_object_new_string("warning"));
	json_object_array_add(arr, o);
}

/* A check guests cannot work without. */
static void check(json_object *arr, const char *name, bool ok, const char *detail, const char *fix)
{
	check_at(arr, name, ok, detail, fix, false);
}

/* An optional capability: guests work without it; `detail` says what its
 * absence costs (relay/machine.h doctor, "level": "warning"). */
static void optional_check(json_object *arr, const char *name, bool ok, const char *detail, const char *fix)
{
	check_at(arr, name, ok, detail, fix, true);
}

static int try_namespaces(local_state *st)
{
	pid_t pid = fork();
	if (pid < 0)
		return errno;
	if (pid == 0) {
		int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC;
		if (st->rootless)
			flags |= CLONE_NEWUSER;
		_exit(unshare(flags) == 0 ? 0 : (errno & 0x7f));
	}
	int wst = 0;
	while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
	}
	return WIFEXITED(wst) ? WEXITSTATUS(wst) : EIO;
}

/* "cause (fix: remedy) rest" -> "cause rest", "remedy" ("" when there is
 * none); the remedy may hold parentheses of its own. */
static void split_fix(const char *reason, char *cause, size_t cause_size, char *fix, size_t fix_size)
{
	const char *at = strstr(reason, " (fix: ");
	fix[0] = '\0';
	if (at == NULL) {
		lu_textf(cause, cause_size, "%s", reason);
		return;
	}
	const char *from = at + 7, *p = from;
	int depth = 0;
	for (; *p && !(*p == ')' && depth == 0); p++)
		depth += *p == '(' ? 1 : *p == ')' ? -1 : 0;
	lu_textf(fix, fix_size, "%.*s", (int)(p - from), from);
	lu_textf(cause, cause_size, "%.*s%s", (int)(at - reason), reason, *p ? p + 1 : "");
}

static void network_check(local_state *st, json_object *arr)
{
	char detail[768], cause[400], fix[400];
	if (st->helper_path) {
		snprintf(
		    detail, sizeof detail,
		    "%s gives nat guests outbound access (no host, no private ranges)%s; internet and allow "
		    "go through the relay's egress proxy",
		    st->helper_name,
		    st->rootless ? ", started by the relay for each guest's namespaces" : "");
		optional_check(arr, "network helper", true, detail, NULL);
		return;
	}
	split_fix(st->helper_reason, cause, sizeof cause, fix, sizeof fix);
	snprintf(detail, sizeof detail,
	         "no usable network helper: %s; nat gives loopback only; internet and allow go through the "
	         "relay's egress proxy",
	         cause);
	optional_check(arr, "network helper", false, detail, fix[0] ? fix : NULL);
}

static void cgroup_check(local_state *st, json_object *arr)
{
	char detail[512];
	bool v1 = st->cgroup_v1_memory && st->cgroup_v1_pids;
	bool limited = cgroup_limits_memory(st) && cgroup_limits_pids(st);
	if (limited)
		snprintf(detail, sizeof detail, "guests get cgroups under %s (memory %s, pids %s, cpu %s%s)",
		         st->cgroup_base && !v1 ? st->cgroup_base : st->cgroup_v1_pids, "limited", "limited",
		         st->cgroup_cpu ? "limited" : "unlimited",
		         v1 ? "; memory and pids through cgroup v1" : "");
	else if (st->cgroup_base)
		snprintf(detail, sizeof detail,
		         "guests run, but their %s not limited by a cgroup: the controllers are not enabled "
		         "under %s (bound to cgroup v1 on this host)%s",
		         !st->cgroup_memory && !st->cgroup_pids ? "memory and process count are"
		         : st->cgroup_memory                    ? "process count is"
		                                                : "memory is",
		         st->cgroup_base,
		         uids_in_use(st) ? "; RLIMIT_NPROC on each guest's own uid still bounds its processes"
		                         : "");
	else
		snprintf(detail, sizeof detail,
		         "guests run, but their memory in all and their CPU are not limited: no cgroup (%s); "
		         "%s",
		         st->cgroup_reason[0] ? st->cgroup_reason : st->cgroup_v1_reason,
		         uids_in_use(st)
		             ? "each guest's processes are bounded by RLIMIT_NPROC on its own uid, "
		               "each process by RLIMIT_DATA and RLIMIT_FSIZE"
		             : "only RLIMIT_DATA and RLIMIT_FSIZE bound each process");
	char fix[600];
	if (st->rootless)
		lu_textf(fix, sizeof fix,
		         "to limit guests, start the relay in cgroups its user owns: with systemd, "
		         "systemd-run --user --scope -p "
		         "Delegate=yes mcp-relay ...; with cgroup v1 (like here), as root: mkdir "
		         "/sys/fs/cgroup/pids/%s /sys/fs/cgroup/memory/%s && chown -R %s "
		         "/sys/fs/cgroup/pids/%s /sys/fs/cgroup/memory/%s, then, as %s, echo $$ into both "
		         "cgroup.procs before starting the relay from that shell",
		         st->relay_user, st->relay_user, st->relay_user, st->relay_user, st->relay_user,
		         st->relay_user);
	else
		snprintf(
		    fix, sizeof fix, "%s",
		    "to limit guests, run on a host with the unified cgroup v2 hierarchy and its memory and "
		    "pids controllers enabled (inside a container: its runtime's cgroup setting, e.g. "
		    "--cgroupns=private on a v2 host)");
	optional_check(arr, "cgroups", limited, detail, limited ? NULL : fix);
}

static void bounds_check(local_state *st, json_object *arr)
{
	char detail[512];
	if (uids_in_use(st))
		snprintf(detail, sizeof detail,
		         "every guest runs as a uid of its own (%u to %u, on the host %u to %u%s); guest "
		         "commands get RLIMIT_NPROC %lld, RLIMIT_DATA %lld, RLIMIT_FSIZE %lld (0 = none)",
		         (unsigned)st->user.uid, (unsigned)st->user.uid + st->user_count - 1,
		         (unsigned)subids_host_uid(st, st->user.uid),
		         (unsigned)subids_host_uid(st, st->user.uid) + st->user_count - 1,
		         st->rootless ? ": subordinate ids of the relay's user" : "",
		         (long long)st->bound_processes, (long long)local_data_bound(st),
		         (long long)st->bound_file_bytes);
	else
		snprintf(detail, sizeof detail,
		         "guest commands run as root of the guest (%s, which RLIMIT_NPROC does not bound); "
		         "they get RLIMIT_DATA %lld, RLIMIT_FSIZE %lld (0 = none)",
		         st->rootless ? "the relay's own user" : "uid 0", (long long)local_data_bound(st),
		         (long long)st->bound_file_bytes);
	check(arr, "bounds", true, detail, NULL);
}

/* Without root: who the guests are. */
static void subids_check(local_state *st, json_object *arr)
{
	if (!st->rootless)
		return;
	char detail[600], cause[400], fix[400];
	if (st->subids) {
		snprintf(detail, sizeof detail,
		         "guests run as subordinate ids of %s (uids %u+%lu, gids %u+%lu in /etc/subuid and "
		         "/etc/subgid, mapped by %s)",
		         st->relay_user, (unsigned)st->subuid_first, st->subuid_count,
		         (unsigned)st->subgid_first, st->subgid_count, st->newuidmap_path);
		check(arr, "subordinate ids", true, detail, NULL);
		return;
	}
	split_fix(st->subids_reason, cause, sizeof cause, fix, sizeof fix);
	if (st->rootless_map_user) {
		snprintf(detail, sizeof detail,
		         "%s: guests run as the relay's own user (options.rootless.withoutSubids map-user), "
		         "so they can signal, ptrace and write that user's processes and files",
		         cause);
		optional_check(arr, "subordinate ids", false, detail, fix[0] ? fix : NULL);
		return;
	}
	snprintf(detail, sizeof detail, "%s: acquire refuses guests", cause);
	char fixes[600];
	snprintf(fixes, sizeof fixes,
	         "%s; or allow guests as the relay's own user: MCP_RELAY_LOCAL_OPTIONS "
	         "{\"rootless\": {\"withoutSubids\": \"map-user\"}}",
	         fix);
	check(arr, "subordinate ids", false, detail, fixes);
}

/* Each image: what acquire checks first (sandbox_precondition), then a real
 * acquisition of a throwaway guest, released at once: "Ready" only when an
 * acquire would succeed now. */
static void image_checks(local_state *st, relay_call *call, json_object *arr)
{
	char detail[1200];
	for (size_t i = 0; i < st->image_count; i++) {
		const local_image *im = &st->images[i];
		relay_error err;
		memset(&err, 0, sizeof err);
		relay_status status = sandbox_precondition(st, im, &err);
		int64_t t0 = lu_monotonic_ms();
		if (status == RELAY_OK) {
			char guest[48], hex[7];
			lu_random_hex(st, hex, 6);
			snprintf(guest, sizeof guest, "doctor-probe-%s", hex);
			json_object *spec = json_object_new_object();
			json_object_object_add(spec, "guest", json_object_new_string(guest));
			json_object_object_add(spec, "purpose", json_object_new_string("mcp-relay-doctor"));
			json_object_object_add(spec, "image", json_object_new_string(im->key));
			json_object_object_add(spec, "ttlMs", json_object_new_int64(120000));
			json_object *record = NULL;
			status = sandbox_acquire(st, spec, call, &record, &err);
			json_object_put(spec);
			if (status == RELAY_OK) {
				relay_error derr;
				memset(&derr, 0, sizeof derr);
				if (sandbox_destroy(st, record, "doctor", &derr) != RELAY_OK)
					st->host->log(RELAY_LOG_WARNING, LOCAL_PLUGIN_NAME,
					              "doctor's probe guest of image %s was not removed: %s",
					              im->key, derr.message);
				json_object_put(record);
			}
		}
		char cause[1000], fix[400];
		if (status == RELAY_OK) {
			snprintf(
			    detail, sizeof detail,
			    "image %s: %s exists, and a guest of it was acquired and released now (%lld ms)",
			    im->key, im->tree, (long long)(lu_monotonic_ms() - t0));
			check(arr, "image", true, detail, NULL);
			continue;
		}
		split_fix(err.message, cause, sizeof cause, fix, sizeof fix);
		snprintf(detail, sizeof detail, "image %s: acquire fails now: %s", im->key, cause);
		check(arr, "image", false, detail, fix[0] ? fix : "the message names what is missing");
	}
}

json_object *inventory_doctor(relay_plugin_state *state, relay_call *call)
{
	local_state *st = state;
	json_object *arr = json_object_new_array();
	char detail[512];
	int e = try_namespaces(st);
	snprintf(detail, sizeof detail, "%s",
	         e == 0 ? (st->rootless ? "user, mount, PID, network, UTS and IPC namespaces can be created"
	                                : "mount, PID, network, UTS and IPC namespaces can be created")
	                : strerror(e));
	check(arr, "namespaces", e == 0, detail,
	      e == 0 ? NULL
	             : (st->rootless ? "enable unprivileged user namespaces (sudo sysctl -w "
	                               "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also "
	                               "kernel.apparmor_restrict_unprivileged_userns=0), or run the relay "
	                               "as root"
	                             : "this kernel or container does not allow new namespaces"));
	FILE *f = fopen("/proc/filesystems", "re");
	bool overlay = false;
	char line[128];
	while (f && fgets(line, sizeof line, f))
		if (strstr(line, "\toverlay"))
			overlay = true;
	if (f)
		fclose(f);
	check(arr, "overlayfs", overlay,
	      overlay ? "overlayfs is available" : "overlayfs is not in /proc/filesystems",
	      overlay ? NULL : "load the overlay module (sudo modprobe overlay)");
	bool writable = access(st->kit.leases_dir, W_OK) == 0;
	snprintf(detail, sizeof detail, "lease records go to %s", st->kit.leases_dir);
	check(arr, "state folder", writable, detail,
	      writable ? NULL : "make the relay's state folder writable");
	subids_check(st, arr);
	network_check(st, arr);
	const local_image *local = sandbox_find_image(st, "local");
	bool xvfb = local && sandbox_image_has(st, local->tree, "usr/bin/Xvfb");
	optional_check(arr, "display", xvfb && st->display_enabled,
	               xvfb ? (st->display_enabled ? "each guest gets its own Xvfb display"
	                                           : "displays are off by option (display \"off\"): "
	                                             "guests have no display and runs take no snapshots")
	                    : "Xvfb is not installed: guests have no display and runs take no snapshots",
	               xvfb ? NULL : "sudo apt-get install xvfb");
	bool vnc = local && sandbox_image_has(st, local->tree, "usr/bin/x11vnc");
	bool console = vnc && xvfb && st->display_enabled;
	optional_check(arr, "console", console,
	               console ? "x11vnc serves the guest display on the guest's loopback"
	               : vnc   ? "no guest display, so no console to watch"
	                       : "x11vnc is not installed: a guest's display cannot be watched (no console)",
	               vnc ? NULL : "sudo apt-get install x11vnc");
	cgroup_check(st, arr);
	bounds_check(st, arr);
	image_checks(st, call, arr);
	return arr;
}
