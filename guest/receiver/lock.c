/*
 * receiver/lock.c — see lock.h.
 */
#include "lock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsx.h"
#include "proc.h"

#define OWNER_MAX_BYTES 65536

void lock_init(receiver_lock *lk)
{
	memset(lk, 0, sizeof(*lk));
	lk->phase = "acquired";
	durable_file_init(&lk->owner);
}

void lock_dispose(receiver_lock *lk)
{
	free(lk->root);
	free(lk->dir);
	free(lk->execution_id);
	lk->root = lk->dir = lk->execution_id = NULL;
	durable_file_close(&lk->owner);
}

jv *lock_read_owner(const char *root)
{
	char *path = xasprintf("%s/%s/owner.json", root, LOCK_DIR_NAME);
	buf text;
	rerr err;
	jv *owner = NULL;
	buf_init(&text);
	if (read_file_limited(path, OWNER_MAX_BYTES, &text, NULL, NULL, &err) == 0)
		owner = jv_parse(text.data, text.len, &err);
	if (owner && owner->type != JV_OBJECT) {
		jv_free(owner);
		owner = NULL;
	}
	buf_free(&text);
	free(path);
	return owner;
}

int lock_write_owner(receiver_lock *lk, rerr *err)
{
	jv *o = jv_object();
	jv *groups = jv_array();
	char *text;
	size_t i;
	int rc;
	jv_set_int(o, "pid", (int64_t)getpid());
	jv_set_str(o, "startTime", lk->start_time);
	if (lk->have_ticks)
		jv_set_int(o, "startTicks", (int64_t)lk->start_ticks);
	jv_set_str(o, "bootId", lk->boot_id);
	jv_set_str(o, "executionId", lk->execution_id);
	jv_set_bool(o, "active", lk->active);
	for (i = 0; i < lk->group_count; i++)
		jv_push(groups, jv_int((int64_t)lk->groups[i]));
	jv_set(o, "operationPids", groups);
	jv_set_bool(o, "pendingSpawn", lk->pending_spawn);
	jv_set_bool(o, "settled", lk->settled);
	jv_set_str(o, "phase", lk->phase);
	text = jv_to_text(o, JV_PRETTY);
	rc = durable_rewrite(&lk->owner, lk->dir, "owner.json", text, strlen(text), err);
	free(text);
	jv_free(o);
	return rc;
}

int lock_add_group(receiver_lock *lk, pid_t pgid, rerr *err)
{
	if (lk->group_count >= LOCK_MAX_GROUPS) {
		err_set(err, "too many process groups still unconfirmed in the lock");
		return -1;
	}
	lk->groups[lk->group_count++] = pgid;
	lk->pending_spawn = 0;
	return lock_write_owner(lk, err);
}

int lock_drop_group(receiver_lock *lk, pid_t pgid, rerr *err)
{
	size_t i;
	for (i = 0; i < lk->group_count; i++) {
		if (lk->groups[i] == pgid) {
			memmove(&lk->groups[i], &lk->groups[i + 1],
			        (lk->group_count - i - 1) * sizeof(pid_t));
			lk->group_count--;
			break;
		}
	}
	return lock_write_owner(lk, err);
}

/* 1 when the recorded owner is provably gone or settled and no recorded
 * group survives; 0 when it may still be live; *same_execution_out tells
 * whether a live owner runs execution_id. */
static int lock_is_stale(const jv *owner, const char *execution_id, int *live_same_out)
{
	char boot[64];
	const char *owner_boot = jv_get_str(owner, "bootId");
	const char *owner_exec = jv_get_str(owner, "executionId");
	const char *owner_start = jv_get_str(owner, "startTime");
	jv *settled_v = jv_get(owner, "settled");
	jv *groups = jv_get(owner, "operationPids");
	int64_t pid = 0, ticks = 0;
	int owner_gone = 0, settled;
	size_t i;
	*live_same_out = 0;
	if (!jv_get_int(owner, "pid", &pid) || pid <= 0 || !owner_boot || !jv_is(groups, JV_ARRAY) ||
	    !jv_is(settled_v, JV_BOOL))
		return 0; /* unreadable: unconfirmed */
	settled = settled_v->boolean;
	boot_identity(boot);
	if (*boot && *owner_boot && strcmp(boot, owner_boot) != 0)
		return 1; /* another boot: nothing of it runs any more */
	if (!pid_alive((pid_t)pid)) {
		owner_gone = 1;
	} else if (jv_get_int(owner, "startTicks", &ticks)) {
		unsigned long long now_ticks = 0;
		if (proc_start_ticks((pid_t)pid, &now_ticks) == 0 && now_ticks != (unsigned long long)ticks)
			owner_gone = 1;
	} else if (owner_start) {
		char now_start[32];
		proc_start_time((pid_t)pid, now_start);
		if (strcmp(now_start, owner_start) != 0)
			owner_gone = 1;
	}
	if (!owner_gone && !settled) {
		*live_same_out = owner_exec && execution_id && strcmp(owner_exec, execution_id) == 0;
		return 0;
	}
	for (i = 0; i < groups->count; i++) {
		jv *g = groups->items[i];
		if (!jv_is(g, JV_NUMBER) || !g->number_is_int)
			return 0;
		if (group_alive((pid_t)g->number_int))
			return 0;
	}
	return 1;
}

static lock_outcome try_mkdir(receiver_lock *lk, rerr *err)
{
	if (mkdir(lk->dir, 0700) == 0) {
		rerr ignored;
		fsync_dir(lk->root, &ignored);
		return LOCK_TAKEN;
	}
	if (errno == EEXIST)
		return LOCK_UNCONFIRMED;
	err_set(err, "cannot create the receiver lock %s: %s", lk->dir, strerror(errno));
	return LOCK_ERROR;
}

lock_outcome lock_acquire(receiver_lock *lk, const char *root, const char *execution_id, rerr *err)
{
	lock_outcome got;
	jv *owner;
	int live_same = 0;
	struct stat st;
	lk->root = xstrdup(root);
	lk->dir = xasprintf("%s/%s", root, LOCK_DIR_NAME);
	lk->execution_id = xstrdup(execution_id);
	boot_identity(lk->boot_id);
	proc_start_time(getpid(), lk->start_time);
	lk->have_ticks = proc_start_ticks(getpid(), &lk->start_ticks) == 0;
	if (lstat(lk->dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
		err_set(err, "%s exists and is not a directory (a symbolic link or file); remove it",
		        lk->dir);
		return LOCK_ERROR;
	}
	got = try_mkdir(lk, err);
	if (got != LOCK_UNCONFIRMED)
		goto taken;
	owner = lock_read_owner(root);
	if (!owner)
		return LOCK_UNCONFIRMED;
	if (!lock_is_stale(owner, execution_id, &live_same)) {
		jv_free(owner);
		return live_same ? LOCK_IN_PROGRESS : LOCK_UNCONFIRMED;
	}
	jv_free(owner);
	/* Reclaim: one reclaimer wins the recovery directory. */
	{
		char *recovery = xasprintf("%s/recovery", lk->dir);
		char rnd[17];
		char *retired;
		int won = mkdir(recovery, 0700) == 0;
		free(recovery);
		if (!won || random_hex(rnd, 8, err) != 0)
			return LOCK_UNCONFIRMED;
		retired = xasprintf("%s/%s-retired-%s", root, LOCK_DIR_NAME, rnd);
		if (rename(lk->dir, retired) != 0) {
			free(retired);
			return LOCK_UNCONFIRMED;
		}
		fprintf(stderr, "receiver: reclaimed a stale receiver lock (kept as %s)\n", retired);
		free(retired);
		{
			rerr ignored;
			fsync_dir(root, &ignored);
		}
	}
	got = try_mkdir(lk, err);
taken:
	if (got != LOCK_TAKEN)
		return got;
	lk->held = 1;
	lk->active = 1;
	lk->phase = "acquired";
	if (lock_write_owner(lk, err) != 0) {
		rmdir(lk->dir);
		lk->held = 0;
		return LOCK_ERROR;
	}
	return LOCK_TAKEN;
}

int lock_release(receiver_lock *lk, rerr *err)
{
	char *path;
	if (!lk->held)
		return 0;
	if (lk->group_count > 0) {
		/* A group could not be confirmed stopped: keep the lock, settled, so
		 * the next run reclaims it once that group is gone. */
		lk->settled = 1;
		lk->active = 0;
		lk->phase = "settled";
		lk->held = 0;
		return lock_write_owner(lk, err);
	}
	durable_file_close(&lk->owner);
	path = xasprintf("%s/cancel", lk->dir);
	unlink(path);
	free(path);
	path = xasprintf("%s/owner.json", lk->dir);
	unlink(path);
	free(path);
	if (rmdir(lk->dir) != 0) {
		err_set(err, "cannot remove the receiver lock %s: %s", lk->dir, strerror(errno));
		return -1;
	}
	lk->held = 0;
	return fsync_dir(lk->root, err);
}

int lock_cancel_requested(const receiver_lock *lk)
{
	char *path = xasprintf("%s/cancel", lk->dir);
	int present = path_exists(path);
	free(path);
	return present;
}
