/*
 * relay_kit/reaper.h — the reaper loop of a machine plugin: a thread that
 * calls `scan` every interval_ms until it is stopped. What a scan reaps is
 * the plugin's (expired leases, leases whose relay died, orphan folders);
 * the loop, its wake-up and its stop are the kit's.
 *
 * An rk_reaper all zero (memset or `= {0}`) is a reaper that never
 * started: rk_reaper_stop on it does nothing.
 */
#ifndef RELAY_KIT_REAPER_H
#define RELAY_KIT_REAPER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct rk_reaper {
	pthread_mutex_t lock; /* guards stopping; the thread waits on wake with it */
	pthread_cond_t wake;
	pthread_t thread;
	bool started; /* the thread runs (set and read by the owner only) */
	bool stopping;
	int64_t interval_ms;
	void (*scan)(void *arg);
	void *arg;
} rk_reaper;

/* Starts the thread: the first scan comes interval_ms after the start (a
 * scan at start is the caller's, before this). 0, or the pthread error
 * (nothing runs then). */
int rk_reaper_start(rk_reaper *r, int64_t interval_ms, void (*scan)(void *arg), void *arg);
/* Wakes the thread, waits for a running scan to end and joins it. */
void rk_reaper_stop(rk_reaper *r);

#endif
