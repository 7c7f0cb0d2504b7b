/*
 * session/queue.h — a guest's ordered operations: jobs run one after
 * another, in the order they were pushed, on the guest's own worker thread
 * (started with the first job). Jobs of different guests run concurrently.
 */
#ifndef RELAY_SESSION_QUEUE_H
#define RELAY_SESSION_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct guest_job guest_job;
struct guest_job {
	/* Runs the job on the worker thread; owns and frees the job. */
	void (*run)(guest_job *job);
	/* Disposes of a job that will never run (the queue stopped, or its call
	 * was cancelled while it waited); owns and frees the job. */
	void (*drop)(guest_job *job, const char *why);
	/* May the job be skipped when its call is cancelled before it starts? */
	bool (*cancelled_before_start)(const guest_job *job);
	guest_job *next;
};

typedef struct guest_queue {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	guest_job *head;
	guest_job *tail;
	size_t waiting; /* jobs not yet started */
	bool busy;      /* a job is running */
	bool stopping;  /* no more jobs are taken */
	bool thread_started;
	pthread_t thread;
} guest_queue;

void queue_init(guest_queue *q);
/* Appends a job; returns false (and does not take the job) once stopping. */
bool queue_push(guest_queue *q, guest_job *job);
/* True while a job runs or waits. */
bool queue_active(guest_queue *q);
/* Waits until no job runs or waits, or `timeout_ms` passes (< 0: forever).
 * Returns true when idle. */
bool queue_wait_idle(guest_queue *q, long timeout_ms);
/* Stops taking jobs, drops the waiting ones with `why`, waits for the
 * running one and the worker thread. */
void queue_stop(guest_queue *q, const char *why);
/* Drops waiting jobs with `why` without stopping. */
void queue_drop_waiting(guest_queue *q, const char *why);
void queue_destroy(guest_queue *q);

/* Runs a job on a detached thread of its own (tools outside every guest
 * queue). Returns false when no thread could be started (the job is then
 * run on the caller's thread). */
bool run_detached(guest_job *job);

#endif
