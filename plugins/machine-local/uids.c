/*
 * uids.c — one guest uid per guest.
 *
 * The guest user's uid (and gid) comes from a range, options.guestUser
 * uid .. uid + count - 1 (gid likewise): every guest gets one of its own, so
 * what the kernel counts per user (RLIMIT_NPROC, and per-user limits such as
 * inotify instances or message queues) is counted per guest. The guest's
 * user namespace maps ids 1:1, so the guest sees the same uid as the host;
 * without root it maps the uid to a subordinate id of the relay's user
 * (subids.c), and "a host process runs as it" means that subordinate id.
 *
 * A uid is claimed durably before the lease record names it: the claim is a
 * symbolic link <stateDir>/uids/<uid> -> <vm>, made and removed only under
 * an flock of <stateDir>/uids/.lock (so relays sharing the store never hand
 * one uid out twice), and the folder is fsync'd. A claim is given back at
 * release, once the guest is verified gone. A claim whose lease folder no
 * longer exists (a relay killed between the claim and the record, or
 * during a release) is stale; it is removed when no process of that uid is
 * left on the host, at the next claim or at the start scan. A uid is never
 * handed out while a host process still runs as it.
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

static int open_claims(local_state *st, int *lock_out)
{
	*lock_out = -1;
	char path[PATH_MAX];
	lu_textf(path, sizeof path, "%s/uids", st->kit.state_dir);
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return -1;
	int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dir < 0)
		return -1;
	int lock = openat(dir, ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) != 0) {
		int e = errno;
		if (lock >= 0)
			close(lock);
		close(dir);
		errno = e;
		return -1;
	}
	*lock_out = lock;
	return dir;
}

static void close_claims(int dir, int lock)
{
	if (lock >= 0)
		close(lock); /* releases the flock */
	if (dir >= 0)
		close(dir);
}

/* Marks in `busy` (count entries from first) every uid some host process
 * runs as (real, effective or saved). */
static void uids_running(uid_t first, unsigned count, bool *busy)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		char path[64], line[256];
		lu_textf(path, sizeof path, "/proc/%s/status", de->d_name);
		FILE *f = fopen(path, "re");
		while (f && fgets(line, sizeof line, f)) {
			unsigned r, e, s;
			if (strncmp(line, "Uid:", 4) != 0)
				continue;
			if (sscanf(line + 4, "%u %u %u", &r, &e, &s) == 3) {
				unsigned ids[3] = {r, e, s};
				for (int i = 0; i < 3; i++)
					if (ids[i] >= first && ids[i] - first < count)
						busy[ids[i] - first] = true;
			}
			break;
		}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
}

/* The vm a claim names, or "" when it is not a claim link. */
static void claim_target(int dir, const char *name, char *vm, size_t size)
{
	ssize_t n = readlinkat(dir, name, vm, size - 1);
	vm[n > 0 ? n : 0] = '\0';
}

static bool lease_folder_exists(local_state *st, const char *vm)
{
	if (!lu_valid_token(vm, 200))
		return false;
	char *dir = lease_dir_of(st, vm);
	struct stat sb;
	bool exists = dir && lstat(dir, &sb) == 0;
	free(dir);
	return exists;
}

/* Removes stale claims (their lease folder is gone and no process runs as
 * the uid). `busy` has user_count entries; it is filled from /proc here, at
 * the first stale claim, unless *scanned says it already was. Called with
 * the claims lock held. */
static void drop_stale(local_state *st, int dir, bool *busy, bool *scanned)
{
	for (unsigned k = 0; k < st->user_count; k++) {
		char name[16], vm[256];
		snprintf(name, sizeof name, "%u", (unsigned)st->user.uid + k);
		claim_target(dir, name, vm, sizeof vm);
		if (vm[0] == '\0' || lease_folder_exists(st, vm))
			continue;
		if (!*scanned) {
			uids_running(subids_host_uid(st, st->user.uid), st->user_count, busy);
			*scanned = true;
		}
		if (busy[k])
			continue;
		if (unlinkat(dir, name, 0) == 0)
			st->host->log(RELAY_LOG_DEBUG, LOCAL_PLUGIN_NAME,
			              "gave back guest uid %s: its lease %s is gone", name, vm);
	}
}

relay_status uids_claim(local_state *st, const char *vm, local_user *user, relay_error *err)
{
	if (!uids_in_use(st))
		return RELAY_OK;
	int lock = -1;
	int dir = open_claims(st, &lock);
	if (dir < 0)
		return lu_err(st, err, RELAY_E_IO, errno, "cannot lock the guest uid claims in %s/uids",
		              st->kit.state_dir);
	bool *busy = calloc(st->user_count, sizeof *busy);
	relay_status status = RELAY_OK;
	if (busy == NULL) {
		status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto cleanup;
	}
	bool scanned = true;
	uids_running(subids_host_uid(st, st->user.uid), st->user_count, busy);
	drop_stale(st, dir, busy, &scanned);
	for (unsigned k = 0; k < st->user_count; k++) {
		char name[16];
		snprintf(name, sizeof name, "%u", (unsigned)st->user.uid + k);
		if (busy[k])
			continue;
		if (symlinkat(vm, dir, name) != 0) {
			if (errno == EEXIST)
				continue;
			status = lu_err(st, err, RELAY_E_IO, errno, "cannot claim guest uid %s in %s/uids",
			                name, st->kit.state_dir);
			goto cleanup;
		}
		if (fsync(dir) != 0) {
			int e = errno;
			unlinkat(dir, name, 0);
			status = lu_err(st, err, RELAY_E_IO, e, "cannot sync the guest uid claims");
			goto cleanup;
		}
		user->uid = st->user.uid + k;
		user->gid = st->user.gid + k;
		goto cleanup;
	}
	status = lu_err(st, err, RELAY_E_CAPACITY, 0,
	                "every guest uid from %u to %u is in use (by a guest or a host process); release a "
	                "guest or raise options.guestUser.count",
	                (unsigned)st->user.uid, (unsigned)st->user.uid + st->user_count - 1);
cleanup:
	free(busy);
	close_claims(dir, lock);
	return status;
}

void uids_release(local_state *st, const char *vm, uid_t uid)
{
	if (!uids_in_use(st) || uid < st->user.uid || uid - st->user.uid >= st->user_count)
		return;
	int lock = -1;
	int dir = open_claims(st, &lock);
	if (dir < 0)
		return;
	char name[16], target[256];
	snprintf(name, sizeof name, "%u", (unsigned)uid);
	claim_target(dir, name, target, sizeof target);
	if (strcmp(target, vm) == 0 && unlinkat(dir, name, 0) == 0)
		fsync(dir);
	close_claims(dir, lock);
}

void uids_reconcile(local_state *st)
{
	if (!uids_in_use(st))
		return;
	int lock = -1;
	int dir = open_claims(st, &lock);
	if (dir < 0)
		return;
	bool *busy = calloc(st->user_count, sizeof *busy);
	if (busy) {
		bool scanned = false; /* /proc is read only when a claim is stale */
		drop_stale(st, dir, busy, &scanned);
		free(busy);
	}
	close_claims(dir, lock);
}

bool uids_in_use(const local_state *st)
{
	return st->user.uid != 0 && st->user_count > 0;
}
