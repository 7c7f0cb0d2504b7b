/*
 * guestio/guest_io.h — talking to one guest through its transport: running
 * commands and the guest receiver, pushing and pulling files with the
 * transient-retry rule, inventories through `receiver scan`, and archive
 * pushes unpacked by `receiver unpack` (spec/guest.md §3.4, §3.5, §5.2).
 *
 * A guest_io is a short-lived session object a tool creates on the guest's
 * queue (gio_begin), uses, and ends (gio_end). It borrows the guest's
 * transport connection (gio_link_transport(), link.h) and owns:
 *   - a host scratch folder <guest dir>/io-<random>/ for pulled inventories
 *     and archives, removed by gio_end;
 *   - the list of transient guest files it created (R/.inventory-*,
 *     R/.push-*, R/.archive-*), removed with one `receiver remove` by
 *     gio_end (or gio_remove_transients) once the receiver is known to run;
 *   - a JSON list of transfer facts for host/transfers/.
 *
 * Threads: a guest_io belongs to the thread that began it, except that
 * gio_exec_call() and gio_push() may be called from a second thread when the
 * transport has RELAY_TRANSPORT_CONCURRENT (the cancel of a running script,
 * the two files of a run pushed side by side).
 *
 * Statuses returned follow relay/status.h and always fill `err` with a
 * message naming what failed; gio_tool_code() maps them to tool error codes.
 * Units: every *_ms is milliseconds, every *bytes is bytes.
 */
#ifndef RELAY_GUESTIO_GUEST_IO_H
#define RELAY_GUESTIO_GUEST_IO_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "evidence/fswalk.h"
#include "guestio/frame.h"
#include "relay/transport.h"
#include "session/manager_internal.h"

/* spec/guest.md §3.5: a transient push or pull is tried up to this many times in
 * all, waiting attempt x GIO_RETRY_WAIT_MS between tries. */
#define GIO_TRANSFER_ATTEMPTS 3
#define GIO_RETRY_WAIT_MS     250
/* Limit of small receiver commands (version, hash of a small file, prepare,
 * init, remove, reset) and of guest commands before the receiver exists. */
#define GIO_SHORT_TIMEOUT_MS 60000
/* spec/guest.md §3.4: scan timeout = 120,000 ms + 125 ms per MiB, rounded up. */
#define GIO_SCAN_BASE_MS    120000
#define GIO_SCAN_MS_PER_MIB 125
/* `receiver remove` takes at most this many bytes of names per command. */
#define GIO_REMOVE_BATCH_BYTES 65536

typedef struct guest_io {
	session_manager *m;
	guest *g;
	relay_call *call;             /* the tool call (progress, cancellation); may be NULL */
	struct loaded_plugin *plugin; /* transport plugin; borrowed from the guest */
	relay_transport_conn *conn;   /* borrowed from the guest */
	uint32_t traits;              /* RELAY_TRANSPORT_* of the plugin */
	char *root;                   /* R, the guest root; owned */
	char *receiver;               /* R/receiver; owned */
	char *evidence;               /* the guest's evidence folder at begin; owned */
	char *scratch;                /* host scratch folder, created on first use; owned */
	bool receiver_ready;          /* R/receiver is known to run (transients can be removed) */
	fw_strlist transients;        /* names directly in R to remove */
	json_object *transfers;       /* [{op, local, remote, bytes, sha256, attempts, ...}] */
	pthread_mutex_t
	    transfers_lock; /* guards `transfers` and `transients` (pushes may run on two threads) */
} guest_io;

/* Opens the guest's transport and fills `io`. RELAY_OK, or a failure (the
 * transport could not be opened) with err filled; `io` is then cleared and
 * need not be ended. */
relay_status gio_begin(guest_io *io, session_manager *m, guest *g, relay_call *call, relay_error *err);
/* Removes transients (best effort, 60 s) and the scratch folder; frees. */
void gio_end(guest_io *io);

/* The host scratch folder (created 0700 on first use), or NULL. Borrowed. */
const char *gio_scratch(guest_io *io, relay_error *err);
/* A fresh path "<scratch>/<prefix><16 hex><suffix>" (malloc'd), not created. */
char *gio_scratch_path(guest_io *io, const char *prefix, const char *suffix, relay_error *err);

/* Runs argv (NULL-terminated) in the guest through the transport under
 * `call` (io->call for gio_exec). `flags` are RELAY_EXEC_*. `res` is filled
 * (res->out/err owned by the caller: gio_exec_result_free). Returns the
 * transport's status. */
relay_status gio_exec_call(guest_io *io, relay_call *call, const char *const *argv, const char *cwd,
                           uint64_t timeout_ms, size_t max_output_bytes, unsigned flags,
                           relay_exec_result *res, relay_error *err);
relay_status gio_exec(guest_io *io, const char *const *argv, const char *cwd, uint64_t timeout_ms,
                      size_t max_output_bytes, unsigned flags, relay_exec_result *res, relay_error *err);
void gio_exec_result_free(relay_exec_result *res);

/* How gio_exec_supervised watches a long command. */
typedef struct gio_supervision {
	int64_t tick_ms;       /* progress notification interval in ms; 0 = none */
	const char *tick_what; /* what runs, for progress messages ("script", "capture test") */
	int64_t limit_ms;      /* the limit named in progress messages, in ms */
	/* With RELAY_TRANSPORT_CONCURRENT, when the tool call is cancelled:
	 * run `receiver cancel --root R --execution <id>` beside the command
	 * (retried every 500 ms until it signals) and give the command
	 * cancel_grace_ms to end on its own before the exec is aborted. NULL:
	 * abort at once. */
	const char *cancel_execution;
	int64_t cancel_grace_ms;
	/* With RELAY_EXEC_STDIO_BYTES in the flags (a transport with
	 * RELAY_TRANSPORT_STDIO_BYTES only): the bytes sent on the command's
	 * standard input (borrowed) and the cap on its standard output. */
	const void *stdin_data;
	size_t stdin_len;
	size_t max_stdout_bytes;
	/* out */
	bool cancelled;                 /* the tool call was cancelled while the command ran */
	bool receiver_cancel_signalled; /* `receiver cancel` answered signalled: true */
} gio_supervision;

#ifdef RELAY_FAILPOINTS
/* "MCP_RELAY_FAILPOINTS=<the receiver entries of the relay's own setting>"
 * for a receiver command's environment, or NULL when it names none (test
 * builds only; docs/reliability.md §2). malloc'd. */
char *gio_receiver_failpoints_env(void);
#endif

/* Runs `receiver cancel --root R --execution <id>` once (15 s limit);
 * true when it answered signalled: true. */
bool gio_receiver_cancel(guest_io *io, const char *execution_id);

/* gio_exec, supervised: the exec runs under an internal call of its own
 * (tracked by the manager, so the session's grace deadline still stops
 * it), progress goes to io->call every sv->tick_ms, and a cancellation of
 * io->call is handled as gio_supervision describes. Returns the exec's
 * status (RELAY_E_CANCELLED when it was aborted). */
relay_status gio_exec_supervised(guest_io *io, gio_supervision *sv, const char *const *argv, const char *cwd,
                                 uint64_t timeout_ms, size_t max_output_bytes, unsigned flags,
                                 relay_exec_result *res, relay_error *err);

/* True when a failed push or pull should be tried again (spec/guest.md §3.5):
 * RELAY_E_TRANSIENT, RELAY_E_TIMEOUT, or a message naming scp, ssh, a
 * connection, "timed out", an HTTP 5xx, or a request that got no answer. */
bool gio_transient(relay_status status, const char *message);

/* Pushes host `local` to guest `remote` (RELAY_XFER_TREE for a folder)
 * with the retry rule; each retry records a `transfer-retry` event. On
 * RELAY_OK *facts_out (may be NULL) receives the transport's guest-side
 * facts (a JSON array) or NULL when the transport computes none. `what`
 * names the file for messages ("the receiver", a support file). */
relay_status gio_push(guest_io *io, const char *local, const char *remote, unsigned xfer_flags,
                      const char *what, json_object **facts_out, relay_error *err);
/* One fact {path, bytes, sha256} (relay/transport.h FACTS); new reference. */
json_object *gio_fact_new(const char *path, uint64_t bytes, const char *sha256);
/* Compares the facts a transport returned for a push (`got`) with what the
 * core sent (`sent`, the same shape; either order): the same paths, sizes
 * and SHA-256s. RELAY_OK, or RELAY_E_PROTOCOL (gio_tool_code:
 * transfer-failed) naming the first path that differs: a transport whose
 * facts contradict the copy is not trusted, whatever a later scan says. */
relay_status gio_facts_compare(json_object *got, json_object *sent, const char *what, relay_error *err);
/* gio_push of one file the core hashed (`sha256`, `bytes`), and when the
 * transport returns guest-side facts, gio_facts_compare against them
 * (*checked_out true: the facts came and were compared; false: the caller
 * must verify the copy another way). */
relay_status gio_push_checked_facts(guest_io *io, const char *local, const char *remote, const char *sha256,
                                    uint64_t bytes, const char *what, bool *checked_out, relay_error *err);
/* Pulls guest `remote` to host `local` (must not exist) with the retry rule. */
relay_status gio_pull(guest_io *io, const char *remote, const char *local, unsigned xfer_flags,
                      const char *what, relay_error *err);

/* The scan timeout for `bytes` of data (spec/guest.md §3.4). */
uint64_t gio_scan_timeout_ms(uint64_t bytes);

/* Inventories `rel` under the guest folder `base` (absolute) with
 * `receiver scan`: the frame names R/.inventory-<random>.json, which is
 * pulled, checked against the frame's sha256 and bytes, parsed and queued
 * for removal. *facts_out: a JSON array of {path, sha256, bytes} (new
 * reference) sorted by path. `expected_bytes` sizes the timeout. */
relay_status gio_scan(guest_io *io, const char *base, const char *rel, bool present, uint64_t expected_bytes,
                      json_object **facts_out, relay_error *err);

/* Looks a path up in a facts array; borrowed or NULL. */
json_object *gio_fact_find(json_object *facts, const char *path);

/* Records a transient guest file name (directly in R) for removal. */
void gio_add_transient(guest_io *io, const char *name);
/* Removes the recorded transients now (best effort). */
void gio_remove_transients(guest_io *io);

/* One member of an archive push: the archive name (relative, the
 * destination below the unpack base), its expected size and SHA-256, and
 * how to open its bytes. */
typedef struct gio_member {
	const char *name;
	uint64_t bytes;
	const char *sha256;
} gio_member;
/* Opens member `index` for reading; returns a descriptor or -1 with the
 * reason in `why` (*changed: the source is no longer what was hashed). */
typedef int (*gio_member_open_fn)(void *ctx, size_t index, bool *changed, char *why, size_t why_len);

/* Writes members into one evidence archive (spec/evidence.md §5.3) in the
 * scratch folder, checking each member's bytes against its SHA-256 and size
 * as it is copied (a change is RELAY_E_INTEGRITY, "staging source changed:
 * <name>"), pushes it to R/.push-<random>.tar and runs `receiver unpack
 * --root R --base <dest> <archive>`. `dest` is an absolute guest folder
 * inside R that exists. */
relay_status gio_push_archive(guest_io *io, const gio_member *members, size_t count,
                              gio_member_open_fn open_fn, void *open_ctx, const char *dest, relay_error *err);

/* Appends a transfer fact {op, what, local, remote, bytes, sha256?,
 * attempts, method} to io->transfers. Strings borrowed. */
void gio_note_transfer(guest_io *io, const char *op, const char *what, const char *local, const char *remote,
                       uint64_t bytes, const char *sha256, int attempts, const char *method);
/* Writes io->transfers to <evidence>/host/transfers/<ms>-<random>.json
 * when it holds anything (best effort, logged on failure). */
void gio_write_transfers(guest_io *io, const char *operation);

/* The tool error code for a failed guest operation: integrity-failed for
 * RELAY_E_INTEGRITY, path-refused for RELAY_E_UNSAFE_PATH on the host side
 * is the caller's business, transfer-failed otherwise. */
const char *gio_tool_code(relay_status status);

#endif
