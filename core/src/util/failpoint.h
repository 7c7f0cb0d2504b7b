/*
 * util/failpoint.h — named fault-injection points, in test builds only
 * (issue 17 point 2; FreeBSD's fail(9) points are the model).
 *
 * A build configured with -DRELAY_FAILPOINTS=ON (scripts/test's build-test)
 * compiles each point into a check of MCP_RELAY_FAILPOINTS:
 *
 *     MCP_RELAY_FAILPOINTS="finish.after-manifest=crash,stage.before-push=error"
 *
 * Actions: `crash` writes "mcp-relay: failpoint NAME: crash" to standard
 * error and ends the process with _exit(RELAY_FAILPOINT_EXIT_CODE) (no
 * atexit handler, no flush: a SIGKILL as far as the files are concerned);
 * `error` makes an error-capable point fail with RELAY_E_IO and the message
 * "failpoint NAME: injected error" (the operation fails as if that step's
 * system call had); `off` does nothing. Unknown names, unknown actions and
 * `error` at a crash-only point end the process at the first check with a
 * message naming the entry (a typo never silently tests nothing). Names
 * starting "receiver." belong to the guest receiver (guest/receiver/
 * failpoint.h) and are ignored here.
 *
 * Without RELAY_FAILPOINTS (the default, every user's build) both macros
 * compile to nothing: no string, no call, no code.
 *
 * In a file of the core, one line each:
 *
 *     RELAY_FAILPOINT("release.after-destroy");                   crash only
 *     if ((st = RELAY_FAILPOINT_ERROR("stage.before-push", &err)) != RELAY_OK) goto cleanup;
 *
 * Every point is in the catalogue of failpoint.c and in docs/reliability.md
 * §2 (name, file, function).
 */
#ifndef RELAY_UTIL_FAILPOINT_H
#define RELAY_UTIL_FAILPOINT_H

#include "relay/status.h"

/* What a crash action passes to _exit: tests tell it from a SIGKILL. */
#define RELAY_FAILPOINT_EXIT_CODE 86

#ifdef RELAY_FAILPOINTS
/* Checks point `name` (a catalogue name). Crashes when it is set to crash;
 * fills `err` (may be NULL at a crash-only point) and returns RELAY_E_IO
 * when it is set to error; else RELAY_OK. Thread-safe. */
relay_status relay_failpoint_check(const char *name, relay_error *err);
#define RELAY_FAILPOINT(name)            ((void)relay_failpoint_check((name), NULL))
#define RELAY_FAILPOINT_ERROR(name, err) relay_failpoint_check((name), (err))
#else
#define RELAY_FAILPOINT(name)            ((void)0)
#define RELAY_FAILPOINT_ERROR(name, err) ((void)(err), RELAY_OK)
#endif

#endif
