/*
 * relay_kit/clock.h — the plugin kit's monotonic clock and sleep
 * (docs/development.md, "The plugin kit").
 */
#ifndef RELAY_KIT_CLOCK_H
#define RELAY_KIT_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds (only differences mean anything). */
int64_t rk_monotonic_ms(void);
/* Sleeps `ms` milliseconds, resuming after signals; ms <= 0 returns at once. */
void rk_sleep_ms(int64_t ms);

#endif
