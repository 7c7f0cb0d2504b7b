#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The test offset is process-wide by design (one clock for the relay); it is
 * atomic so readers on every thread see it without a lock. The test-clock
 * file path is set once at startup before threads exist. */
static _Atomic int64_t clock_offset_ms;
/* A frozen relay time ("@<unix ms>" in the clock file), or 0 when the clock
 * runs. Set only from the clock file, for tests that need exact times. */
static _Atomic int64_t clock_frozen_ms;
static char *clock_file_path;

static int64_t real_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void refresh_offset_from_file(void)
{
	if (clock_file_path == NULL)
		return;
	int fd = open(clock_file_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[32];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	bool frozen = buf[0] == '@';
	char *start = frozen ? buf + 1 : buf;
	char *end = NULL;
	errno = 0;
	long long value = strtoll(start, &end, 10);
	if (errno != 0 || end == start)
		return;
	if (frozen && value > 0) {
		atomic_store(&clock_frozen_ms, (int64_t)value);
	} else if (!frozen) {
		atomic_store(&clock_frozen_ms, 0);
		atomic_store(&clock_offset_ms, (int64_t)value);
	}
}

void clock_init_from_env(void)
{
	const char *path = getenv("MCP_RELAY_TEST_CLOCK_FILE");
	if (path && *path) {
		clock_file_path = strdup(path);
		refresh_offset_from_file();
	}
}

int64_t clock_now_ms(void)
{
	refresh_offset_from_file();
	int64_t frozen = atomic_load(&clock_frozen_ms);
	if (frozen > 0)
		return frozen;
	return real_now_ms() + atomic_load(&clock_offset_ms);
}

void clock_set_offset_ms(int64_t offset_ms)
{
	atomic_store(&clock_offset_ms, offset_ms);
}

void clock_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mutex, int64_t wait_ms)
{
	if (wait_ms <= 0)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(wait_ms / 1000);
	ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cond, mutex, &ts);
}

bool clock_wait_until_ms(pthread_cond_t *cond, pthread_mutex_t *mutex, int64_t deadline_ms,
                         int64_t max_real_wait_ms)
{
	int64_t now = clock_now_ms();
	if (now >= deadline_ms)
		return true;
	int64_t wait_ms = deadline_ms - now;
	if (clock_file_path != NULL && wait_ms > 250)
		wait_ms = 250; /* notice offset changes promptly */
	if (max_real_wait_ms > 0 && wait_ms > max_real_wait_ms)
		wait_ms = max_real_wait_ms;
	clock_cond_wait_ms(cond, mutex, wait_ms);
	return clock_now_ms() >= deadline_ms;
}
