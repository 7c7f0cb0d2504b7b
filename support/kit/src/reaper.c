/* reaper.c — the reaper loop (relay_kit/reaper.h). */
#include "relay_kit/reaper.h"

#include <string.h>
#include <time.h>

static void *reaper_main(void *arg)
{
	rk_reaper *r = arg;
	pthread_mutex_lock(&r->lock);
	while (!r->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t ns = (int64_t)ts.tv_nsec + (r->interval_ms % 1000) * 1000000;
		ts.tv_sec += (time_t)(r->interval_ms / 1000) + (time_t)(ns / 1000000000);
		ts.tv_nsec = (long)(ns % 1000000000);
		pthread_cond_timedwait(&r->wake, &r->lock, &ts);
		if (r->stopping)
			break;
		pthread_mutex_unlock(&r->lock);
		r->scan(r->arg);
		pthread_mutex_lock(&r->lock);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int rk_reaper_start(rk_reaper *r, int64_t interval_ms, void (*scan)(void *arg), void *arg)
{
	memset(r, 0, sizeof *r);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->wake, NULL);
	r->interval_ms = interval_ms > 0 ? interval_ms : 1;
	r->scan = scan;
	r->arg = arg;
	int rc = pthread_create(&r->thread, NULL, reaper_main, r);
	if (rc != 0) {
		pthread_cond_destroy(&r->wake);
		pthread_mutex_destroy(&r->lock);
		return rc;
	}
	r->started = true;
	return 0;
}

void rk_reaper_stop(rk_reaper *r)
{
	if (!r->started)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_cond_broadcast(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	r->started = false;
}
