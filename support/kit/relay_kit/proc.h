/*
 * relay_kit/proc.h — a process of this host named so that a reused pid is
 * not mistaken for it: its pid and its start time (field 22 of
 * /proc/<pid>/stat, in clock ticks since boot).
 */
#ifndef RELAY_KIT_PROC_H
#define RELAY_KIT_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* The start time of `pid`, 0 when it does not exist, is a zombie, or pid <= 0. */
unsigned long long rk_proc_start(pid_t pid);
/* true when `pid` runs (not a zombie) and started at `start`. */
bool rk_proc_alive(pid_t pid, unsigned long long start);

#endif
