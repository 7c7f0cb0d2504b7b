#include "session/queue.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "util/log.h"

void queue_init(guest_queue *q)
{
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->changed, NULL);
	q->head = q->tail = NULL;
	q->waiting = 0;
	q->busy = false;
	q->stopping = false;
	q->thread_started = false;
}

static void *worker(void *arg)
{
	guest_queue *q = arg;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (q->head == NULL && !q->stopping)
			pthread_cond_wait(&q->changed, &q->lock);
		if (q->head == NULL)
			break;
		guest_job *job = q->head;
		q->head = job->next;
		if (q->head == NULL)
			q->tail = NULL;
		q->waiting--;
		bool skip = job->cancelled_before_start && job->cancelled_before_start(job);
		q->busy = true;
		pthread_mutex_unlock(&q->lock);
		if (skip)
			job->drop(job, "cancelled before it started");
		else
			job->run(job);
		pthread_mutex_lock(&q->lock);
		q->busy = false;
		pthread_cond_broadcast(&q->changed);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

bool queue_push(guest_queue *q, guest_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&q->lock);
	if (q->stopping) {
		pthread_mutex_unlock(&q->lock);
		return false;
	}
	if (q->tail)
		q->tail->next = job;
	else
		q->head = job;
	q->tail = job;
	q->waiting++;
	if (!q->thread_started) {
		if (pthread_create(&q->thread, NULL, worker, q) == 0) {
			q->thread_started = true;
		} else {
			/* No thread: run inline, in order, on the caller. */
			log_error("cannot start a guest worker thread; running the operation inline");
			q->head = q->tail = NULL;
			q->waiting--;
			q->busy = true;
			pthread_mutex_unlock(&q->lock);
			job->run(job);
			pthread_mutex_lock(&q->lock);
			q->busy = false;
		}
	}
	pthread_cond_broadcast(&q->changed);
	pthread_mutex_unlock(&q->lock);
	return true;
}

bool queue_active(guest_queue *q)
{
	pthread_mutex_lock(&q->lock);
	bool active = q->busy || q->head != NULL;
	pthread_mutex_unlock(&q->lock);
	return active;
}

bool queue_wait_idle(guest_queue *q, long timeout_ms)
{
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	if (timeout_ms >= 0) {
		deadline.tv_sec += timeout_ms / 1000;
		deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&q->lock);
	while (q->busy || q->head != NULL) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&q->changed, &q->lock);
		} else if (pthread_cond_timedwait(&q->changed, &q->lock, &deadline) == ETIMEDOUT) {
			break;
		}
	}
	bool idle = !q->busy && q->head == NULL;
	pthread_mutex_unlock(&q->lock);
	return idle;
}

static guest_job *take_waiting(guest_queue *q)
{
	guest_job *jobs = q->head;
	q->head = q->tail = NULL;
	q->waiting = 0;
	return jobs;
}

static void drop_all(guest_job *jobs, const char *why)
{
	while (jobs) {
		guest_job *next = jobs->next;
		jobs->drop(jobs, why);
		jobs = next;
	}
}

void queue_drop_waiting(guest_queue *q, const char *why)
{
	pthread_mutex_lock(&q->lock);
	guest_job *jobs = take_waiting(q);
	pthread_cond_broadcast(&q->changed);
	pthread_mutex_unlock(&q->lock);
	drop_all(jobs, why);
}

void queue_stop(guest_queue *q, const char *why)
{
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	guest_job *jobs = take_waiting(q);
	pthread_cond_broadcast(&q->changed);
	bool started = q->thread_started;
	pthread_mutex_unlock(&q->lock);
	drop_all(jobs, why);
	if (started) {
		pthread_join(q->thread, NULL);
		pthread_mutex_lock(&q->lock);
		q->thread_started = false;
		pthread_mutex_unlock(&q->lock);
	}
}

void queue_destroy(guest_queue *q)
{
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->changed);
}

static void *detached_main(void *arg)
{
	guest_job *job = arg;
	job->run(job);
	return NULL;
}

bool run_detached(guest_job *job)
{
	pthread_t thread;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&thread, &attr, detached_main, job);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		job->run(job);
		return false;
	}
	return true;
}
