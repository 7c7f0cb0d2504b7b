/*
 * receiver/lock.h — the receiver lock R/.receiver-lock (spec/guest.md §7.2).
 *
 * Taken with mkdir; owner.json says who holds it and which process groups
 * it runs, and is rewritten durably at every phase. A lock is reclaimed
 * only when its owner is provably gone (dead pid, another boot, another
 * start time, or settled) and no recorded process group survives; anything
 * else is reported unconfirmed and the lock is kept. owner.json is one inode
 * for the lock's life: its rewrites go in place (durable_rewrite).
 */
#ifndef RECEIVER_LOCK_H
#define RECEIVER_LOCK_H

#include <sys/types.h>

#include "fsx.h"
#include "json.h"
#include "util.h"

#define LOCK_DIR_NAME   ".receiver-lock"
#define LOCK_MAX_GROUPS 8

typedef enum lock_outcome {
	LOCK_TAKEN,       /* we hold it */
	LOCK_IN_PROGRESS, /* a live receiver holds it for the same execution */
	LOCK_UNCONFIRMED, /* held, or its ownership or operations cannot be confirmed gone */
	LOCK_ERROR        /* I/O failure (err says what) */
} lock_outcome;

typedef struct receiver_lock {
	char *root;
	char *dir;
	char *execution_id;
	char start_time[32];
	unsigned long long start_ticks;
	int have_ticks;
	char boot_id[64];
	pid_t groups[LOCK_MAX_GROUPS];
	size_t group_count;
	int pending_spawn;
	int settled;
	int active;
	const char *phase;
	int held;
	durable_file owner; /* owner.json, rewritten in place (fsx.h) */
} receiver_lock;

void lock_init(receiver_lock *lk);
void lock_dispose(receiver_lock *lk);
lock_outcome lock_acquire(receiver_lock *lk, const char *root, const char *execution_id, rerr *err);
/* Rewrites owner.json durably. */
int lock_write_owner(receiver_lock *lk, rerr *err);
int lock_add_group(receiver_lock *lk, pid_t pgid, rerr *err);
int lock_drop_group(receiver_lock *lk, pid_t pgid, rerr *err);
/* Removes the lock, or keeps it settled when a group survives. */
int lock_release(receiver_lock *lk, rerr *err);
/* True when R/.receiver-lock/cancel exists. */
int lock_cancel_requested(const receiver_lock *lk);

/* Reads R/.receiver-lock/owner.json (NULL when absent or unreadable). */
jv *lock_read_owner(const char *root);

#endif
