/*
 * reaper.c — machine-local's reaper.
 *
 * A background thread (the kit's loop, relay_kit/reaper.h, every
 * options.reaperIntervalMs, 2 s by default) and one scan when the plugin
 * starts look at every lease record in the store.
 * A lease is destroyed when
 *   - its TTL and grace have run out (now > expiresAtMs + graceMs) and its
 *     owner is this relay or a relay that is no longer running; or
 *   - its owner relay is gone and the lease can no longer be used: the
 *     guest init is dead, or the acquisition or release was interrupted
 *     (state provisioning or releasing).
 * A lease whose owner relay is gone but whose TTL has not run out is left
 * alone: the guest outlives its relay (pause mode) until a restarted relay
 * takes it back, releases it, or its time runs out.
 * Lease folders without a readable record older than a minute (a crash
 * between mkdir and the first write) are removed.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "local.h"

static bool should_reap(local_state *st, json_object *rec, const char **why)
{
	int64_t now = st->host->now_ms();
	int64_t expires = lu_get_int(rec, "expiresAtMs", 0);
	int64_t grace = lu_get_int(rec, "graceMs", st->grace_ms);
	bool owner_alive = lease_owner_alive(st, rec);
	json_object *owner = lu_get_object(rec, "owner");
	bool mine = owner && lu_get_int(owner, "pid", 0) == st->self_pid &&
	            (unsigned long long)lu_get_int(owner, "startTime", 0) == st->self_start;
	if (owner_alive && !mine)
		return false; /* another running relay looks after it */
	if (expires > 0 && now > expires + grace) {
		*why = "its TTL and grace ran out";
		return true;
	}
	if (mine)
		return false;
	const char *state = lu_get_string(rec, "state");
	if (state && (strcmp(state, "provisioning") == 0 || strcmp(state, "releasing") == 0)) {
		*why = "its relay died while acquiring or releasing it";
		return true;
	}
	json_object *init = lu_get_object(lu_get_object(rec, "pids"), "init");
	if (!lu_proc_alive((pid_t)lu_get_int(init, "pid", 0),
	                   (unsigned long long)lu_get_int(init, "startTime", 0))) {
		*why = "its guest and its relay are both gone";
		return true;
	}
	return false;
}

static void remove_orphan_folders(local_state *st)
{
	DIR *d = opendir(st->kit.leases_dir);
	if (d == NULL)
		return;
	struct dirent *de;
	time_t now = time(NULL);
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char path[PATH_MAX], rec[PATH_MAX];
		lu_textf(path, sizeof path, "%s/%s", st->kit.leases_dir, de->d_name);
		lu_textf(rec, sizeof rec, "%s/lease.json", path);
		struct stat sb;
		if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode) || now - sb.st_mtime < 60)
			continue;
		if (access(rec, F_OK) == 0)
			continue;
		int lock = lease_lock(st, de->d_name, false);
		if (lock < 0)
			continue;
		if (access(rec, F_OK) != 0) {
			st->host->log(RELAY_LOG_INFO, LOCAL_PLUGIN_NAME,
			              "removing %s: a lease folder without a record", path);
			subids_remove_tree(st, path);
		}
		lease_unlock(lock);
	}
	closedir(d);
}

void reaper_scan(local_state *st, bool at_start)
{
	json_object *all = lease_list(st);
	for (size_t i = 0; i < json_object_array_length(all); i++) {
		json_object *rec = json_object_array_get_idx(all, i);
		const char *why = NULL;
		if (!should_reap(st, rec, &why))
			continue;
		const char *vm = lu_get_string(rec, "vm");
		int lock = lease_lock(st, vm, false);
		if (lock < 0)
			continue; /* busy: an operation holds it; next pass */
		json_object *fresh = lease_read(st, vm, NULL);
		if (fresh && should_reap(st, fresh, &why)) {
			relay_error err;
			memset(&err, 0, sizeof err);
			relay_status s = sandbox_destroy(st, fresh, "reaped", &err);
			if (s == RELAY_OK)
				st->host->log(
				    RELAY_LOG_INFO, LOCAL_PLUGIN_NAME, "%sreaped guest %s (purpose %s): %s",
				    at_start ? "at start, " : "", vm,
				    lu_get_string(fresh, "purpose") ? lu_get_string(fresh, "purpose") : "?",
				    why);
			else
				st->host->log(RELAY_LOG_WARNING, LOCAL_PLUGIN_NAME,
				              "reaping guest %s failed: %s", vm, err.message);
		}
		if (fresh)
			json_object_put(fresh);
		lease_unlock(lock);
	}
	json_object_put(all);
	remove_orphan_folders(st);
	cgroup_remove_orphans(st);
	uids_reconcile(st);
}

static void scan_periodically(void *arg)
{
	reaper_scan(arg, false);
}

int reaper_start(local_state *st)
{
	return rk_reaper_start(&st->reaper, st->reaper_interval_ms, scan_periodically, st);
}

void reaper_stop(local_state *st)
{
	rk_reaper_stop(&st->reaper);
}
