/*
 * cli/plugin_test.h — `mcp-relay plugin-test --kind KIND path.so`, the
 * conformance runner for plugin authors (docs/writing-a-plugin.md lists
 * every check with its message).
 *
 * The plugin is loaded through the real loader (loader/loader.c, the same
 * nine checks as the relay), with a counting copy of the host table so that
 * every block from host->alloc is accounted for. Each check has a fixed
 * number and prints one line: "check N ok   <title>", "check N skip <title>:
 * <why>" or "check N FAIL <title>" followed by "     <message>", the first
 * failure's one exact message. The exit status is 0 only when no check
 * failed.
 *
 *   plugin_test.c            arguments, loading, the counting host, output
 *   plugin_test_machine.c    checks 10-19: the lease lifecycle
 *   plugin_test_transport.c  checks 20-29: exec
 *   plugin_test_xfer.c       checks 30-39: push and pull, paths and facts
 *   plugin_test_stream.c     checks 50-54: the long-lived stream
 *   plugin_test_kinds.c      checks 2-5 (tables, flags, errors,
 *                            out-parameters) and 40-49 (capture, console)
 *   plugin_test_hard.c       checks 60-64: cancellation of exec, push and
 *                            pull; operations at the same time
 *   plugin_test_recover.c    checks 65-67: restart adoption, release
 *                            retries, the indeterminate acquire
 *   plugin_test_cancel.c     checks 68-69: push and pull cancelled while
 *                            they move bytes
 */
#ifndef RELAY_CLI_PLUGIN_TEST_H
#define RELAY_CLI_PLUGIN_TEST_H

#include <stdbool.h>
#include <stdint.h>

#include "loader/loader.h"

/* A flag bit no operation of ABI 1.x knows. */
#define PT_UNKNOWN_FLAG 0x40000000u

typedef struct pt_run {
	loaded_plugin *plugin;  /* borrowed from the registry */
	relay_plugin_kind kind; /* --kind */
	const char *image;      /* --image, or NULL: the first image with a base */
	char *lease_json;       /* a live lease (acquired or --lease); malloc'd */
	const char *config;     /* the init configuration (restart, check 65); borrowed */
	char image_key[128];    /* the image check 11 leased, "" before */
	bool lease_acquired;    /* we acquired it: release it at the end */
	char guest_root[512];   /* R of the transport checks, "" before it exists */
	char scratch[512];      /* a host folder of ours for pushes and pulls */
	relay_transport_conn *conn;
	/* First failure per check, so each check reports one message. */
	char failure[100][1024];
	bool failed[100];
	bool skipped[100];
	char skip_why[100][256];
	bool ran[100];
} pt_run;

/* Records a failure of check `n` (only the first message is kept). */
void pt_fail(pt_run *run, int n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Marks check `n` as run (passing unless pt_fail was called for it). */
void pt_ran(pt_run *run, int n);
void pt_skip(pt_run *run, int n, const char *why);

/* The counting host table lent to the plugin: free what the plugin
 * returns with pt_host()->free. */
const relay_host *pt_host(void);

/* Sleeps `ms` milliseconds (restarted after a signal). */
void pt_sleep_ms(uint64_t ms);

/* The status name for messages: "RELAY_E_NOT_FOUND (not found)". */
const char *pt_status(relay_status status);

/* ---- plugin_test_kinds.c ---- */
/* Checks 3-5 for one call made with PT_UNKNOWN_FLAG: `status` and `err` as
 * answered, `*out` the out-parameter (freed here when non-NULL; may be
 * NULL for an operation without one). */
void pt_refusal(pt_run *run, const char *kind, const char *op, relay_status status, const relay_error *err,
                char **out);
void pt_check_tables(pt_run *run);          /* check 2 */
void pt_check_flags(pt_run *run);           /* checks 3, 4, 5 */
void pt_check_capture(pt_run *run);         /* check 40 */
void pt_check_console(pt_run *run);         /* check 45 */
void pt_check_machine_console(pt_run *run); /* check 46 (and 3-5 for its slots) */

/* ---- plugin_test_machine.c ---- */
void pt_machine_acquire(pt_run *run);   /* checks 10, 11 */
void pt_machine_lifecycle(pt_run *run); /* checks 12-14 */
void pt_machine_release(pt_run *run);   /* checks 15-18 */
/* The spec of an acquire of `image` for guest name `guest` and `purpose`
 * (relay/machine.h); malloc'd JSON text. */
char *pt_acquire_spec(const char *guest, const char *image, const char *purpose);
/* A fresh purpose "relay-plugin-test-<what>-<16 hex>" into out. */
void pt_purpose(const char *what, char *out, size_t out_len);

/* ---- plugin_test_transport.c ---- */
bool pt_transport_open(pt_run *run);  /* check 20 and the guest root */
void pt_transport_exec(pt_run *run);  /* checks 21-27 */
void pt_transport_close(pt_run *run); /* removes the guest root, closes */

/* Runs `sh -c script` in the guest; returns RELAY_OK and fills *res (the
 * caller frees out/err with free()). */
relay_status pt_sh(pt_run *run, const char *script, uint64_t timeout_ms, relay_exec_result *res,
                   relay_error *err);

/* ---- plugin_test_xfer.c ---- */
void pt_transport_xfer(pt_run *run); /* checks 30-36 */

/* ---- plugin_test_stream.c ---- */
void pt_transport_stream(pt_run *run); /* checks 50-54 (skipped without RELAY_TRANSPORT_STREAM) */

/* ---- plugin_test_hard.c, plugin_test_recover.c ---- */
void pt_transport_hard(pt_run *run);  /* checks 60-64, on an open connection */
void pt_machine_recover(pt_run *run); /* checks 65-67, with the lease of check 11 */

/* ---- plugin_test_cancel.c ---- */
void pt_transport_cancel_mid(pt_run *run); /* checks 68, 69, on an open connection */

#endif
