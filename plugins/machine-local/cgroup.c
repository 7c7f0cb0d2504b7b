/*
 * cgroup.c — the cgroups of machine-local guests.
 *
 * At start the plugin looks for a cgroup v2 folder of its own
 * (<cgroup2 mount><own cgroup>/mcp-relay-local) and the controllers it can
 * enable there, and, for hosts whose controllers are bound to cgroup v1
 * (hybrid systems), for writable v1 "pids" and "memory" hierarchies
 * (<v1 mount><own cgroup there>/mcp-relay-local). Each guest gets a folder
 * named after its vm in every one of them; the guest's launcher joins them
 * all before it creates the guest's namespaces, so every process of the
 * guest is counted. Limits: memory.max / memory.limit_in_bytes, pids.max,
 * cpu.max (v2 only). Release kills what is left (cgroup.kill on v2), waits
 * until the cgroups are empty, and removes them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "local.h"

static bool file_has_word(const char *path, const char *word)
{
	char buf[1024];
	lu_read_line(path, buf, sizeof buf);
	char *save = NULL;
	for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
		if (strcmp(t, word) == 0)
			return true;
	return false;
}

static int write_file_text(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	lu_textf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	ssize_t w = write(fd, text, strlen(text));
	int rc = w == (ssize_t)strlen(text) ? 0 : (errno ? errno : EIO);
	close(fd);
	return rc;
}

/* Field 5 (the mount point) of a mountinfo line, copied into out. */
static bool mount_point_of(const char *line, char *out, size_t size)
{
	const char *p = line;
	for (int i = 0; i < 4 && p; i++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	const char *end = p ? strchr(p, ' ') : NULL;
	if (end == NULL || (size_t)(end - p) >= size)
		return false;
	memcpy(out, p, (size_t)(end - p));
	out[end - p] = '\0';
	return true;
}

/* The mount point of the cgroup2 hierarchy (v1 == false), or of the v1
 * hierarchy whose super options name `controller`. */
static bool find_mount(bool v1, const char *controller, char *out, size_t size)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	bool found = false;
	while (!found && f && fgets(line, sizeof line, f)) {
		char *sep = strstr(line, " - ");
		if (sep == NULL)
			continue;
		if (!v1) {
			found = strncmp(sep + 3, "cgroup2 ", 8) == 0 && mount_point_of(line, out, size);
			continue;
		}
		if (strncmp(sep + 3, "cgroup ", 7) != 0)
			continue;
		/* " - cgroup cgroup rw,pids": the last field lists the controllers. */
		char *opts = strrchr(sep, ' ');
		char *nl = opts ? strchr(opts, '\n') : NULL;
		if (nl)
			*nl = '\0';
		char *save = NULL;
		for (char *t = opts ? strtok_r(opts + 1, ",", &save) : NULL; t && !found;
		     t = strtok_r(NULL, ",", &save))
			found = strcmp(t, controller) == 0 && mount_point_of(line, out, size);
	}
	if (f)
		fclose(f);
	return found;
}

/* This process's cgroup in the hierarchy whose /proc/self/cgroup line
 * starts with the id and names `controller` ("" = the v2 line "0::"). */
static void own_cgroup(const char *controller, char *out, size_t size)
{
	snprintf(out, size, "/");
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096];
	while (f && fgets(line, sizeof line, f)) {
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 == NULL)
			continue;
		*c2 = '\0';
		bool match = controller[0] ? false : strcmp(c1 + 1, "") == 0;
		char *save = NULL;
		for (char *t = strtok_r(c1 + 1, ",", &save); controller[0] && t && !match;
		     t = strtok_r(NULL, ",", &save))
			match = strcmp(t, controller) == 0;
		if (!match)
			continue;
		snprintf(out, size, "%s", c2 + 1);
		char *nl = strchr(out, '\n');
		if (nl)
			*nl = '\0';
		break;
	}
	if (f)
		fclose(f);
}

/* <mount><own>/mcp-relay-local, created; malloc'd, or NULL with a reason. */
static char *make_base(const char *mount, const char *own, char *reason, size_t reason_size)
{
	char base[PATH_MAX * 2 + 48];
	lu_textf(base, sizeof base, "%s%s/mcp-relay-local", mount, strcmp(own, "/") == 0 ? "" : own);
	if (mkdir(base, 0755) != 0 && errno != EEXIST) {
		lu_textf(reason, reason_size, "cannot create %s: %s", base, strerror(errno));
		return NULL;
	}
	/* Made earlier by someone else (root), it may not be this user's. */
	if (access(base, W_OK | X_OK) != 0) {
		lu_textf(reason, reason_size, "%s is not writable by this user: %s", base, strerror(errno));
		return NULL;
	}
	return strdup(base);
}

static void detect_v1(local_state *st)
{
	static const char *const names[] = {"pids", "memory"};
	char **slots[] = {&st->cgroup_v1_pids, &st->cgroup_v1_memory};
	for (size_t i = 0; i < 2; i++) {
		char mount[PATH_MAX], own[PATH_MAX], why[256] = "";
		if (!find_mount(true, names[i], mount, sizeof mount))
			continue; /* no such v1 hierarchy: nothing to say */
		own_cgroup(names[i], own, sizeof own);
		*slots[i] = make_base(mount, own, why, sizeof why);
		if (*slots[i] == NULL)
			lu_textf(st->cgroup_v1_reason, sizeof st->cgroup_v1_reason, "cgroup v1 %s: %s",
			         names[i], why);
	}
}

void cgroup_detect(local_state *st)
{
	/* Without root the same search finds what is delegated to the relay's
	 * user (its own cgroup writable, e.g. systemd's user@.service with
	 * Delegate=yes), and says why nothing is where nothing is. */
	detect_v1(st);
	char mount[PATH_MAX] = "", own[PATH_MAX];
	if (!find_mount(false, NULL, mount, sizeof mount)) {
		snprintf(st->cgroup_reason, sizeof st->cgroup_reason, "no cgroup v2 hierarchy is mounted");
		return;
	}
	own_cgroup("", own, sizeof own);
	char parent[PATH_MAX * 2 + 8], path[PATH_MAX * 2 + 96];
	lu_textf(parent, sizeof parent, "%s%s", mount, strcmp(own, "/") == 0 ? "" : own);
	st->cgroup_base = make_base(mount, own, st->cgroup_reason, sizeof st->cgroup_reason);
	if (st->cgroup_base == NULL)
		return;
	/* Controllers: enabled for the children of `parent`, then of `base`. */
	lu_textf(path, sizeof path, "%s/cgroup.controllers", parent);
	char want[64] = "";
	if (file_has_word(path, "memory"))
		strcat(want, "+memory ");
	if (file_has_word(path, "pids"))
		strcat(want, "+pids ");
	if (file_has_word(path, "cpu"))
		strcat(want, "+cpu ");
	for (int pass = 0; want[0] && pass < 2; pass++)
		write_file_text(pass == 0 ? parent : st->cgroup_base, "cgroup.subtree_control", want);
	lu_textf(path, sizeof path, "%s/cgroup.subtree_control", st->cgroup_base);
	st->cgroup_memory = file_has_word(path, "memory");
	st->cgroup_pids = file_has_word(path, "pids");
	st->cgroup_cpu = file_has_word(path, "cpu");
	if (!st->cgroup_memory && !st->cgroup_pids && !st->cgroup_cpu)
		lu_textf(st->cgroup_reason, sizeof st->cgroup_reason,
		         "the cgroup v2 hierarchy at %s offers no memory, pids or cpu controller to %s (on "
		         "hybrid systems they are bound to cgroup v1)%s",
		         mount, st->cgroup_base,
		         st->cgroup_v1_pids || st->cgroup_v1_memory
		             ? "; the v1 hierarchies limit guests instead"
		             : "; guests get cgroups for tracking only");
}

bool cgroup_limits_pids(const local_state *st)
{
	return st->cgroup_v1_pids != NULL || (st->cgroup_base && st->cgroup_pids);
}

bool cgroup_limits_memory(const local_state *st)
{
	return st->cgroup_v1_memory != NULL || (st->cgroup_base && st->cgroup_memory);
}

/* Creates <base>/<vm>; malloc'd path or NULL (logged). */
static char *make_one(local_state *st, const char *base, const char *vm)
{
	char path[PATH_MAX];
	lu_textf(path, sizeof path, "%s/%s", base, vm);
	if (mkdir(path, 0755) != 0) {
		st->host->log(RELAY_LOG_WARNING, LOCAL_PLUGIN_NAME,
		              "cannot create the cgroup %s (%s); no limits", path, strerror(errno));
		return NULL;
	}
	return strdup(path);
}

static json_object *limit_fact(int version, const char *key, int64_t value)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "version", json_object_new_int(version));
	json_object_object_add(o, key, json_object_new_int64(value));
	return o;
}

/* Writes one limit; on success records it in `limits` (the record's
 * "limits") and `bounds` (the record's "bounds"). */
static void set_limit(const char *dir, const char *file, int64_t value, const char *text, int version,
                      const char *limits_key, const char *bounds_key, const char *fact_key,
                      json_object *limits, json_object *bounds)
{
	if (dir == NULL || value <= 0 || write_file_text(dir, file, text) != 0)
		return;
	json_object_object_add(limits, limits_key, json_object_new_int64(value));
	json_object_object_add(bounds, bounds_key, limit_fact(version, fact_key, value));
}

void cgroup_make(local_state *st, const char *vm, json_object *record)
{
	json_object *paths = lu_get_object(record, "paths");
	json_object *bounds = lu_get_object(record, "bounds");
	json_object *limits = json_object_new_object();
	json_object *v1 = json_object_new_array();
	char *v2 = st->cgroup_base ? make_one(st, st->cgroup_base, vm) : NULL;
	char *pids1 = st->cgroup_v1_pids ? make_one(st, st->cgroup_v1_pids, vm) : NULL;
	char *mem1 = st->cgroup_v1_memory ? make_one(st, st->cgroup_v1_memory, vm) : NULL;
	json_object_object_add(bounds, "cgroupPids", NULL);
	json_object_object_add(bounds, "cgroupMemory", NULL);
	json_object_object_add(bounds, "cgroupCpu", NULL);
	char text[64];
	snprintf(text, sizeof text, "%lld", (long long)st->limit_memory_bytes);
	if (v2 && st->cgroup_memory)
		set_limit(v2, "memory.max", st->limit_memory_bytes, text, 2, "memoryBytes", "cgroupMemory",
		          "maxBytes", limits, bounds);
	else
		set_limit(mem1, "memory.limit_in_bytes", st->limit_memory_bytes, text, 1, "memoryBytes",
		          "cgroupMemory", "maxBytes", limits, bounds);
	snprintf(text, sizeof text, "%lld", (long long)st->limit_pids);
	if (v2 && st->cgroup_pids)
		set_limit(v2, "pids.max", st->limit_pids, text, 2, "pids", "cgroupPids", "max", limits,
		          bounds);
	else
		set_limit(pids1, "pids.max", st->limit_pids, text, 1, "pids", "cgroupPids", "max", limits,
		          bounds);
	snprintf(text, sizeof text, "%d 100000", st->limit_cpu_percent * 1000);
	if (v2 && st->cgroup_cpu)
		set_limit(v2, "cpu.max", st->limit_cpu_percent, text, 2, "cpuPercent", "cgroupCpu", "percent",
		          limits, bounds);
	json_object_object_add(record, "limits", limits);
	json_object_object_add(paths, "cgroup", v2 ? json_object_new_string(v2) : NULL);
	if (pids1)
		json_object_array_add(v1, json_object_new_string(pids1));
	if (mem1)
		json_object_array_add(v1, json_object_new_string(mem1));
	json_object_object_add(paths, "cgroupsV1", v1);
	free(v2);
	free(pids1);
	free(mem1);
}

size_t cgroup_paths(json_object *record, const char **out, size_t max)
{
	json_object *paths = lu_get_object(record, "paths");
	size_t n = 0;
	const char *v2 = lu_get_string(paths, "cgroup");
	if (v2 && n < max)
		out[n++] = v2;
	json_object *v1 = NULL;
	if (json_object_object_get_ex(paths, "cgroupsV1", &v1) && json_object_is_type(v1, json_type_array))
		for (size_t i = 0; i < json_object_array_length(v1) && n < max; i++) {
			const char *p = json_object_get_string(json_object_array_get_idx(v1, i));
			if (p && p[0] == '/')
				out[n++] = p;
		}
	return n;
}

/* 1 when a process is in the cgroup, 0 when none, -1 when unreadable.
 * cgroup.procs lists the processes of this cgroup on v1 and v2 alike. */
static int cgroup_populated(const char *path)
{
	char procs[PATH_MAX];
	lu_textf(procs, sizeof procs, "%s/cgroup.procs", path);
	char line[64];
	int fd = open(procs, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, line, sizeof line);
	close(fd);
	return n < 0 ? -1 : n > 0;
}

static int remove_one(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		return 0;
	write_file_text(path, "cgroup.kill", "1"); /* v2 only; v1 has none */
	int64_t until = lu_monotonic_ms() + 5000;
	while (cgroup_populated(path) == 1 && lu_monotonic_ms() < until)
		lu_sleep_ms(5);
	for (int i = 0; i < 100; i++) {
		if (rmdir(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return errno;
		lu_sleep_ms(10);
	}
	return EBUSY;
}

int cgroup_remove_all(json_object *record)
{
	const char *paths[8];
	size_t n = cgroup_paths(record, paths, 8);
	int first = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = remove_one(paths[i]);
		if (rc && !first)
			first = rc;
	}
	return first;
}

const char *cgroup_left(json_object *record)
{
	const char *paths[8];
	size_t n = cgroup_paths(record, paths, 8);
	struct stat sb;
	for (size_t i = 0; i < n; i++)
		if (lstat(paths[i], &sb) == 0)
			return paths[i];
	return NULL;
}

/* Removes the empty cgroups of one base folder: left by guests that stopped
 * without a release (a guest that stopped itself, a store that was
 * deleted). A cgroup is only removed when no process is in it and it is
 * older than a minute, so one being set up by an acquisition (of any
 * relay) is never touched. */
static void remove_orphans_in(local_state *st, const char *base)
{
	DIR *d = base ? opendir(base) : NULL;
	if (d == NULL)
		return;
	struct dirent *de;
	time_t now = time(NULL);
	while ((de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, "local-", 6) != 0)
			continue;
		char path[PATH_MAX];
		lu_textf(path, sizeof path, "%s/%s", base, de->d_name);
		struct stat sb;
		if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode) || now - sb.st_mtime < 60)
			continue;
		if (cgroup_populated(path) == 0 && rmdir(path) == 0)
			st->host->log(RELAY_LOG_DEBUG, LOCAL_PLUGIN_NAME, "removed the empty cgroup %s",
			              path);
	}
	closedir(d);
}

void cgroup_remove_orphans(local_state *st)
{
	remove_orphans_in(st, st->cgroup_base);
	remove_orphans_in(st, st->cgroup_v1_pids);
	remove_orphans_in(st, st->cgroup_v1_memory);
}
