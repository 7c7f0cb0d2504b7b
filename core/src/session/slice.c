/*
 * The head of a room's slice of a guest: its lock (slice.h).
 */
#include "session/slice.h"

#include <stdlib.h>

void *slice_alloc(size_t size)
{
	slice_head *head = calloc(1, size);
	if (head == NULL)
		return NULL;
	if (pthread_mutex_init(&head->lock, NULL) != 0) {
		free(head);
		return NULL;
	}
	if (pthread_cond_init(&head->changed, NULL) != 0) {
		pthread_mutex_destroy(&head->lock);
		free(head);
		return NULL;
	}
	return head;
}

void slice_free(void *slice)
{
	slice_head *head = slice;
	if (head == NULL)
		return;
	pthread_cond_destroy(&head->changed);
	pthread_mutex_destroy(&head->lock);
	free(head);
}

/* The lock is mutable in a const slice: a reader of a slice it may not
 * change still takes it. */
void slice_lock(const void *slice)
{
	pthread_mutex_lock(&((slice_head *)(void *)slice)->lock);
}

void slice_unlock(const void *slice)
{
	pthread_mutex_unlock(&((slice_head *)(void *)slice)->lock);
}

void slice_wait(const void *slice)
{
	slice_head *head = (slice_head *)(void *)slice;
	pthread_cond_wait(&head->changed, &head->lock);
}

void slice_broadcast(const void *slice)
{
	pthread_cond_broadcast(&((slice_head *)(void *)slice)->changed);
}
