/*
 * lease.c — machine-local's lease records.
 *
 * Every lease has a folder <stateDir>/leases/<vm>/ (0700) holding
 *   lease.json    the record, written durably (temporary file, fsync,
 *                 rename, fsync of the folder) at every change;
 *   expires       "<expiresAtMs> <graceMs>\n", read by the guest init;
 *   lock          the flock that serialises changes between threads and
 *                 relays sharing the store;
 *   control.sock  the guest init's control socket;
 *   upper/ work/ merged/   the overlay's layers and mount point;
 *   init.log, network.log, display.log, console.log.
 * docs/machine-local.md describes the record's fields.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/lease_doc.h"

char *lease_dir_of(local_state *st, const char *vm)
{
	size_t len = strlen(st->kit.leases_dir) + strlen(vm) + 2;
	char *dir = malloc(len);
	if (dir)
		snprintf(dir, len, "%s/%s", st->kit.leases_dir, vm);
	return dir;
}

json_object *lease_read(local_state *st, const char *vm, int *errno_out)
{
	if (!lu_valid_token(vm, 200)) {
		if (errno_out)
			*errno_out = EINVAL;
		return NULL;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s/lease.json", st->kit.leases_dir, vm);
	return lu_read_json(path, 1u << 20, errno_out);
}

int lease_write(local_state *st, json_object *record, bool sync)
{
	const char *vm = lu_get_string(record, "vm");
	if (vm == NULL)
		return EINVAL;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s/lease.json", st->kit.leases_dir, vm);
	return lu_write_json_durable(path, record, sync);
}

int lease_write_expires(local_state *st, json_object *record)
{
	const char *vm = lu_get_string(record, "vm");
	if (vm == NULL)
		return EINVAL;
	char path[PATH_MAX], text[64];
	snprintf(path, sizeof path, "%s/%s/expires", st->kit.leases_dir, vm);
	int n = snprintf(text, sizeof text, "%lld %lld\n", (long long)lu_get_int(record, "expiresAtMs", 0),
	                 (long long)lu_get_int(record, "graceMs", st->grace_ms));
	return lu_write_durable(path, text, (size_t)n, 0600, false);
}

int lease_lock(local_state *st, const char *vm, bool wait)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s/lock", st->kit.leases_dir, vm);
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

void lease_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

json_object *lease_list(local_state *st)
{
	json_object *arr = json_object_new_array();
	DIR *d = opendir(st->kit.leases_dir);
	if (d == NULL)
		return arr;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		json_object *rec = lease_read(st, de->d_name, NULL);
		if (rec && lu_get_string(rec, "vm") && strcmp(lu_get_string(rec, "vm"), de->d_name) == 0)
			json_object_array_add(arr, rec);
		else if (rec)
			json_object_put(rec);
	}
	closedir(d);
	return arr;
}

bool lease_owner_alive(local_state *st, json_object *record)
{
	json_object *owner = lu_get_object(record, "owner");
	if (owner == NULL)
		return false;
	const char *boot = lu_get_string(owner, "bootId");
	if (boot == NULL || strcmp(boot, st->boot_id) != 0)
		return false;
	pid_t pid = (pid_t)lu_get_int(owner, "pid", 0);
	unsigned long long start = (unsigned long long)lu_get_int(owner, "startTime", 0);
	if (pid == st->self_pid && start == st->self_start)
		return true;
	return lu_proc_alive(pid, start);
}

void lease_set_owner(local_state *st, json_object *record)
{
	json_object *owner = json_object_new_object();
	json_object_object_add(owner, "pid", json_object_new_int64(st->self_pid));
	json_object_object_add(owner, "startTime", json_object_new_int64((int64_t)st->self_start));
	json_object_object_add(owner, "bootId", json_object_new_string(st->boot_id));
	json_object_object_add(record, "owner", owner);
}

json_object *lease_document(local_state *st, json_object *record)
{
	(void)st;
	const char *state = lu_get_string(record, "state");
	json_object *pids = lu_get_object(record, "pids");
	json_object *init = lu_get_object(pids, "init");
	pid_t init_pid = (pid_t)lu_get_int(init, "pid", 0);
	unsigned long long init_start = (unsigned long long)lu_get_int(init, "startTime", 0);
	if (state && strcmp(state, "running") == 0 && !lu_proc_alive(init_pid, init_start))
		state = "failed";
	json_object *doc = rk_lease_document(record, state);

	json_object *local = json_object_new_object();
	json_object *paths = lu_get_object(record, "paths");
	json_object_object_add(local, "leaseDir", rk_json_copy(paths, "leaseDir"));
	json_object_object_add(local, "initPid", json_object_new_int64(init_pid));
	json_object_object_add(local, "initStartTime", json_object_new_int64((int64_t)init_start));
	json_object_object_add(local, "upper", rk_json_copy(paths, "upper"));
	json_object_object_add(local, "work", rk_json_copy(paths, "work"));
	json_object_object_add(local, "lower", rk_json_copy(paths, "lower"));
	char merged[64];
	snprintf(merged, sizeof merged, "/proc/%d/root", (int)init_pid);
	json_object_object_add(local, "merged", json_object_new_string(merged));
	json_object_object_add(local, "mountPoint", rk_json_copy(paths, "merged"));
	json_object_object_add(local, "display", rk_json_copy(record, "display"));
	json_object_object_add(local, "cgroup", rk_json_copy(paths, "cgroup"));
	json_object_object_add(local, "network", rk_json_copy(record, "network"));
	json_object_object_add(local, "guestUser", rk_json_copy(record, "guestUser"));
	json_object_object_add(local, "bounds", rk_json_copy(record, "bounds"));
	json_object_object_add(local, "cgroupsV1", rk_json_copy(paths, "cgroupsV1"));
	json_object_object_add(local, "namespaces", rk_json_copy(record, "namespaces"));
	json_object_object_add(local, "pids", rk_json_copy(record, "pids"));
	json_object_object_add(local, "graceMs", rk_json_copy(record, "graceMs"));
	json_object_object_add(local, "deadlineMs", rk_json_copy(record, "deadlineMs"));
	json_object_object_add(doc, "local", local);
	return doc;
}

json_object *lease_local_facts(json_object *lease_doc)
{
	return lu_get_object(lease_doc, "local");
}
