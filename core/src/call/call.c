#include "call/call.h"

#include "call/tool_result.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/clock.h"

#define PROGRESS_MIN_INTERVAL_MS 1000

struct relay_call {
	const relay_call_sink *sink; /* NULL for an internal call */
	void *request;               /* the sink's; freed by sink->finished */
	bool reports_progress;
	atomic_bool cancelled;

	pthread_mutex_t lock; /* the fields below */
	bool done;            /* completing: no progress, no cancellation after this */
	bool sent_progress;
	double last_progress;
	int64_t last_progress_ms;
	double total; /* the total sent so far, < 0 when none was */
};

static relay_call *call_alloc(void)
{
	relay_call *call = calloc(1, sizeof *call);
	if (call == NULL)
		return NULL;
	pthread_mutex_init(&call->lock, NULL);
	atomic_init(&call->cancelled, false);
	call->total = -1;
	return call;
}

relay_call *relay_call_new(const relay_call_sink *sink, void *request, bool reports_progress)
{
	relay_call *call = call_alloc();
	if (call == NULL)
		return NULL;
	call->sink = sink;
	call->request = request;
	call->reports_progress = reports_progress;
	return call;
}

relay_call *relay_call_new_internal(void)
{
	return call_alloc();
}

bool relay_call_is_cancelled(const relay_call *call)
{
	return call != NULL && atomic_load(&call->cancelled);
}

void relay_call_cancel(relay_call *call)
{
	if (call)
		atomic_store(&call->cancelled, true);
}

bool relay_call_cancel_unanswered(relay_call *call)
{
	if (call == NULL)
		return false;
	pthread_mutex_lock(&call->lock);
	bool marked = !call->done;
	if (marked)
		atomic_store(&call->cancelled, true);
	pthread_mutex_unlock(&call->lock);
	return marked;
}

double relay_call_last_progress(const relay_call *call)
{
	if (call == NULL)
		return 0;
	pthread_mutex_lock((pthread_mutex_t *)&call->lock);
	double last = call->last_progress;
	pthread_mutex_unlock((pthread_mutex_t *)&call->lock);
	return last;
}

void relay_call_progress(relay_call *call, double progress, double total, const char *message, bool force)
{
	if (call == NULL || call->sink == NULL || !call->reports_progress || atomic_load(&call->cancelled) ||
	    !isfinite(progress))
		return;
	pthread_mutex_lock(&call->lock);
	/* Relay time (util/clock.h), so that tests can move it. */
	int64_t now_ms = clock_now_ms();
	if (call->done || atomic_load(&call->cancelled))
		goto out;
	if (call->sent_progress) {
		/* At most one a second, except the first and last of a phase. */
		if (!force && now_ms - call->last_progress_ms < PROGRESS_MIN_INTERVAL_MS)
			goto out;
		/* progress increases strictly with every notification. */
		if (progress <= call->last_progress) {
			if (!force)
				goto out;
			progress = call->last_progress + 1;
		}
	}
	/* total: sent only when known, and then never changed. */
	if (call->total < 0 && total >= 0 && isfinite(total))
		call->total = total;
	double total_sent = call->total >= 0 && progress <= call->total ? call->total : -1;
	if (call->sink->progress(call->request, progress, total_sent, message)) {
		call->last_progress = progress;
		call->last_progress_ms = now_ms;
		call->sent_progress = true;
	}
out:
	pthread_mutex_unlock(&call->lock);
}

void relay_call_complete(relay_call *call, tool_result *result)
{
	if (call == NULL) {
		tool_result_free(result);
		return;
	}
	const relay_call_sink *sink = call->sink;
	if (sink && sink->detach)
		sink->detach(call->request);
	pthread_mutex_lock(&call->lock);
	call->done = true;
	/* Answered under the call's lock: no progress notification of this
	 * call can follow its answer. */
	if (sink && !atomic_load(&call->cancelled))
		sink->answer(call->request, result);
	pthread_mutex_unlock(&call->lock);
	tool_result_free(result);
	if (sink)
		sink->finished(call->request);
	pthread_mutex_destroy(&call->lock);
	free(call);
}
