/*
 * session/slice.h — what every room's slice of a guest is made of
 * (session/guest.h, guest_slice_ops), after libvirt's virObjectLockable: a
 * head holding the slice's own lock (and a condition for waiters), first
 * in the room's struct, so the
 * session can lock a slice it cannot look into. A room allocates its slice
 * with slice_alloc() and frees it with slice_free(); its fields' part of the
 * ownership record is a util/record.h table.
 *
 * Lock order (guest.h says it whole): the session's lock (session_lock)
 * before a slice's; a slice's lock is a leaf: holding it, take no other lock
 * (no other slice's, not the session's, not a queue's) and do no I/O.
 */
#ifndef RELAY_SESSION_SLICE_H
#define RELAY_SESSION_SLICE_H

#include <pthread.h>
#include <stddef.h>

typedef struct slice_head {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* for a waiter on the slice, under `lock` */
} slice_head;

/* A zeroed slice of `size` bytes (its struct starts with a slice_head) with
 * its lock and condition made; NULL when out of memory. */
void *slice_alloc(size_t size);
/* Destroys the lock and condition and frees the slice (NULL: nothing). */
void slice_free(void *slice);
void slice_lock(const void *slice);
void slice_unlock(const void *slice);
/* Waits on the slice's condition (the slice's lock held), and wakes every
 * waiter. */
void slice_wait(const void *slice);
void slice_broadcast(const void *slice);

#endif
