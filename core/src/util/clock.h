/*
 * util/clock.h — the relay's one clock.
 *
 * Everything that keeps lease time (renewal, deadlines, capacity waits,
 * timestamps in records) reads clock_now_ms(). Tests drive it: with
 * MCP_RELAY_TEST_CLOCK_FILE set at startup, the file holds an offset in
 * milliseconds (decimal text) that is added to the real time and re-read
 * whenever it changes (docs/lifecycle.md, One clock); or "@<Unix ms>", which freezes
 * relay time at that instant until the file changes again, so that a test
 * and a fake backend see exactly the times the relay computed with. Waiting for a point in relay time
 * goes through clock_wait_until_ms(), which wakes early when the offset
 * moves, so a test can jump minutes ahead instantly.
 */
#ifndef RELAY_UTIL_CLOCK_H
#define RELAY_UTIL_CLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Reads MCP_RELAY_TEST_CLOCK_FILE once; call before threads start. */
void clock_init_from_env(void);
/* Relay time: Unix milliseconds (real time plus the test offset). */
int64_t clock_now_ms(void);
/* Real monotonic milliseconds, for measuring durations that are not lease
 * time (timeouts of a single request). Never offset. */
int64_t clock_monotonic_ms(void);
/* Sets the test offset directly (unit tests). */
void clock_set_offset_ms(int64_t offset_ms);

/* Waits on `cond` (its `mutex` held by the caller) until it is signalled
 * or `wait_ms` real milliseconds pass (at once when `wait_ms` <= 0); the
 * caller loops on its own condition. */
void clock_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mutex, int64_t wait_ms);

/* Blocks on `cond` (with `mutex` held) until relay time reaches
 * deadline_ms, the condition is signalled, or at most max_real_wait_ms of
 * real time passes (so offset changes are noticed). Returns true when the
 * deadline has been reached. */
bool clock_wait_until_ms(pthread_cond_t *cond, pthread_mutex_t *mutex, int64_t deadline_ms,
                         int64_t max_real_wait_ms);

#endif
