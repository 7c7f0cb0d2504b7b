/* clock.c — the kit's monotonic clock and sleep (relay_kit/clock.h). */
#include "relay_kit/clock.h"

#include <errno.h>
#include <time.h>

int64_t rk_monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rk_sleep_ms(int64_t ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}
