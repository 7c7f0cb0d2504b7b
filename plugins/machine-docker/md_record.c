/*
 * md_record.c — machine-docker's lease records (<stateDir>/leases/<vm>.json,
 * written durably at every change, serialised by the flock on <vm>.lock),
 * their owner, and the lease md_document made of a record.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"
#include "md_lease.h"
#include "relay_kit/lease_doc.h"

bool md_valid_name(const char *s)
{
	if (s == NULL || s[0] == '\0' || strlen(s) > 120)
		return false;
	for (const char *p = s; *p; p++) {
		bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		          ((*p == '-' || *p == '_' || *p == '.') && p != s);
		if (!ok)
			return false;
	}
	return true;
}

static void md_record_path(md_state *st, const char *vm, const char *ext, char *out, size_t size)
{
	snprintf(out, size, "%s/%s.%s", st->kit.leases_dir, vm, ext);
}

json_object *md_record_read(md_state *st, const char *vm, int *errno_out)
{
	if (!md_valid_name(vm)) {
		if (errno_out)
			*errno_out = EINVAL;
		return NULL;
	}
	char path[PATH_MAX];
	md_record_path(st, vm, "json", path, sizeof path);
	return md_read_json(path, errno_out);
}

int md_record_write(md_state *st, json_object *rec)
{
	char path[PATH_MAX];
	md_record_path(st, md_str(rec, "vm"), "json", path, sizeof path);
	const char *text =
	    json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
	return md_write_durable(path, text, strlen(text));
}

void md_record_remove(md_state *st, const char *vm)
{
	char path[PATH_MAX];
	md_record_path(st, vm, "json", path, sizeof path);
	unlink(path);
	md_record_path(st, vm, "lock", path, sizeof path);
	unlink(path);
}

int md_record_lock(md_state *st, const char *vm)
{
	char path[PATH_MAX];
	md_record_path(st, vm, "lock", path, sizeof path);
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

void md_set_owner(md_state *st, json_object *rec)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "bootId", json_object_new_string(st->boot_id));
	json_object_object_add(o, "pid", json_object_new_int64(st->self_pid));
	json_object_object_add(o, "startTime", json_object_new_int64((int64_t)st->self_start));
	json_object_object_add(rec, "owner", o);
}

bool md_owner_alive(md_state *st, json_object *rec)
{
	json_object *o = md_obj(rec, "owner");
	const char *boot = md_str(o, "bootId");
	if (o == NULL || boot == NULL || strcmp(boot, st->boot_id) != 0)
		return false;
	pid_t pid = (pid_t)md_int(o, "pid", 0);
	unsigned long long start = (unsigned long long)md_int(o, "startTime", 0);
	if (pid == st->self_pid && start == st->self_start)
		return true;
	return pid > 0 && md_proc_start(pid) == start;
}

/* The name or id the container API knows the guest's container by: the vm
 * for a plain container, the task's container id for a Swarm service. */
const char *md_container_of(json_object *rec)
{
	const char *c = md_str(rec, "container");
	return c ? c : md_str(rec, "vm");
}

bool md_is_service(json_object *rec)
{
	const char *m = md_str(rec, "mode");
	return m && strcmp(m, "service") == 0;
}

/* The lease md_document (relay/machine.h) of a record, with `state` as found. */
json_object *md_document(md_state *st, json_object *rec, const char *state)
{
	json_object *doc = rk_lease_document(rec, state);
	if (md_str(rec, "lost")) /* relay/machine.h 1.5: why the guest is lost */
		json_object_object_add(doc, "lostReason", rk_json_copy(rec, "lost"));
	json_object *d = json_object_new_object();
	json_object_object_add(d, "container",
	                       json_object_new_string(md_container_of(rec) ? md_container_of(rec) : ""));
	json_object_object_add(d, "mode",
	                       json_object_new_string(md_is_service(rec) ? "service" : "container"));
	json_object_object_add(d, "containerId", rk_json_copy(rec, "containerId"));
	json_object_object_add(d, "user", rk_json_copy(rec, "user"));
	json_object_object_add(d, "endpoint", json_object_new_string(st->endpoint));
	json_object_object_add(d, "runtime", rk_json_copy(rec, "runtime"));
	json_object_object_add(d, "limitsNotApplied", rk_json_copy(rec, "limitsNotApplied"));
	json_object_object_add(d, "network", rk_json_copy(rec, "network"));
	json_object_object_add(doc, "docker", d);
	return doc;
}
