/*
 * receiver/failpoint.h — the guest receiver's named fault-injection points,
 * in test builds only (-DRELAY_FAILPOINTS=ON; core/src/util/failpoint.h is
 * the host side). C99 + POSIX, libc only.
 *
 * The receiver reads the same setting as the relay, MCP_RELAY_FAILPOINTS,
 * from its own environment, and takes the entries whose names start
 * "receiver." (the others are the relay's):
 *
 *     MCP_RELAY_FAILPOINTS="receiver.run.after-started=crash"
 *
 * `crash` writes "receiver: failpoint NAME: crash" to standard error and
 * ends the receiver with _exit(RECEIVER_FAILPOINT_EXIT_CODE) before it
 * prints its frame; `error` makes an error-capable point fail as its
 * write would (the message "failpoint NAME: injected error"); `off` does
 * nothing. An unknown receiver name or action ends the receiver at the first
 * check with a message naming the entry. A transport that gives the guest
 * a clean environment (machine-local, ssh) never carries the setting: the
 * receiver's points are reached through the fake backend, whose commands
 * inherit the relay's environment.
 *
 * Without RELAY_FAILPOINTS both macros compile to nothing.
 */
#ifndef RECEIVER_FAILPOINT_H
#define RECEIVER_FAILPOINT_H

#include "util.h"

#define RECEIVER_FAILPOINT_EXIT_CODE 86

#ifdef RELAY_FAILPOINTS
/* 0 to go on; -1 with err filled when `name` is set to error (err may be
 * NULL only at a crash-only point); does not return when set to crash. */
int receiver_failpoint_check(const char *name, rerr *err);
#define RECEIVER_FAILPOINT(name)            ((void)receiver_failpoint_check((name), NULL))
#define RECEIVER_FAILPOINT_ERROR(name, err) receiver_failpoint_check((name), (err))
#else
#define RECEIVER_FAILPOINT(name)            ((void)0)
#define RECEIVER_FAILPOINT_ERROR(name, err) ((void)(err), 0)
#endif

#endif
