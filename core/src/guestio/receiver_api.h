/*
 * guestio/receiver_api.h — the host ⇄ receiver protocol (spec/guest.md §5.2)
 * as C: one typed function per receiver subcommand the rooms above use, so
 * no room builds a receiver argv array or reads a frame key as a literal.
 * The names and limits themselves are guest/receiver_protocol.h, which
 * scripts/layers keeps to guestio/ and runs/ (evidence/ reads the receiver's
 * records inside packages through guest/receiver_records.h).
 *
 * Every function runs `R/receiver <subcommand> ...` through gio_receiver()
 * (guestio/receiver_cmd.c: the transient-retry rule, exit 2 =
 * RELAY_E_INVALID_ARGUMENT, exit 3 = RELAY_E_REFUSED, another exit =
 * RELAY_E_PROTOCOL, with "receiver <cmd> failed (exit N): <why>" in err)
 * and checks the frame it answers; out-parameters are cleared on entry and
 * filled only on RELAY_OK; a frame without the facts its command answers is
 * RELAY_E_PROTOCOL with err->sys_errno EBADMSG. `run`, `capture-test` and `cancel` run
 * supervised (guest_io.h, gio_supervision). `version` is run by the staging
 * check of runs/ in one shell command with the receiver's hash
 * (runs/stage_programs.c), and `serve` by guestio/resident.c.
 */
#ifndef RELAY_GUESTIO_RECEIVER_API_H
#define RELAY_GUESTIO_RECEIVER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guestio/guest_io.h"

/* The largest request record the receiver takes (bytes). */
#define GIO_RECEIVER_REQUEST_MAX_BYTES (1024u * 1024u)

/* A file as a frame names it: `hash`, `scan` and `archive` answer
 * {path, sha256, bytes}. */
typedef struct gio_file_frame {
	char *path; /* absolute guest path; owned */
	char sha256[65];
	uint64_t bytes;
} gio_file_frame;
void gio_file_frame_free(gio_file_frame *f);

/* `receiver hash PATH`: the file's SHA-256 and size. RELAY_E_REFUSED
 * (exit 3) when the receiver looked and found no such file. */
relay_status gio_rcv_hash(guest_io *io, const char *path, gio_file_frame *out, relay_error *err);

/* `receiver prepare --root R DIR...`: the folders below R, made with the
 * receiver's path check; in batches of 512. */
relay_status gio_rcv_prepare(guest_io *io, const char *const *dirs, size_t count, relay_error *err);

/* `receiver init --root R --session ID`: the recording session (a second
 * init with the same id reattaches it; another session's state is refused). */
relay_status gio_rcv_init(guest_io *io, const char *session_id, relay_error *err);

/* `receiver reset --root R --id ID`: the guest step of a recording reset.
 * On failure *locked_out tells whether the receiver lock refused it
 * (frame code "receiver-locked"). */
relay_status gio_rcv_reset(guest_io *io, const char *reset_id, bool *locked_out, relay_error *err);

/* What `receiver scan` inventories. */
typedef enum gio_scan_mode {
	GIO_SCAN_ALL = 0,     /* every file below base/rel */
	GIO_SCAN_PRESENT = 1, /* --present: what exists, a missing rel is no error */
	GIO_SCAN_IMAGE = 2,   /* --image: one image file and its facts */
} gio_scan_mode;
/* `receiver scan --root R --base BASE [--present|--image] REL`: the
 * inventory file the receiver wrote, a transient directly in R
 * (RECEIVER_TRANSIENT_INVENTORY): the caller pulls and checks it. */
relay_status gio_rcv_scan(guest_io *io, const char *base, const char *rel, gio_scan_mode mode,
                          uint64_t timeout_ms, gio_file_frame *inventory_out, relay_error *err);

/* `receiver archive --root R --base BASE [--present] --out OUT -- PATH...`:
 * one evidence archive at OUT (a transient of R); the frame must name OUT. */
relay_status gio_rcv_archive(guest_io *io, const char *base, bool present, const char *out_path,
                             const char *const *paths, size_t count, uint64_t timeout_ms,
                             gio_file_frame *archive_out, relay_error *err);

/* `receiver unpack --root R --base DEST ARCHIVE`: *unpacked_out files placed. */
relay_status gio_rcv_unpack(guest_io *io, const char *dest, const char *archive, uint64_t timeout_ms,
                            int64_t *unpacked_out, relay_error *err);

/* `receiver remove --root R NAME...`: transients directly in R. */
relay_status gio_rcv_remove(guest_io *io, const char *const *names, size_t count, relay_error *err);

/* What `receiver capture-test` answered. */
typedef struct gio_capture_test {
	bool answered;    /* exit 0 with a frame */
	int exit_code;    /* the receiver's exit status */
	char *error;      /* a failed command's frame error, or NULL; owned */
	bool ok;          /* a test screenshot arrived */
	int64_t after_ms; /* ok: how long it took */
	char *diagnostic; /* !ok: the capture command's last diagnostic, or NULL; owned */
} gio_capture_test;
void gio_capture_test_free(gio_capture_test *t);
/* `receiver capture-test --root R --capture JSON --wait-ms W --every-ms E`,
 * supervised by `sv` within `limit_ms`. RELAY_OK when the command ran
 * (whatever it answered: *out says); sv->cancelled after a cancellation. */
relay_status gio_rcv_capture_test(guest_io *io, gio_supervision *sv, const char *capture_json,
                                  int64_t wait_ms, int64_t every_ms, uint64_t limit_ms, gio_capture_test *out,
                                  relay_error *err);

/* `receiver run --root R REQUEST` (the request pushed to R), or with
 * `request_path` NULL `receiver run --root R --stdin` (one round trip: the
 * request and the script on standard input as sv->stdin_data, spec/guest.md
 * §16.2), supervised by `sv`. `res` is the exec's (the frame and its parts
 * on standard output: guestio/frame.h reads them). */
relay_status gio_rcv_run(guest_io *io, gio_supervision *sv, const char *request_path, uint64_t limit_ms,
                         size_t max_output_bytes, relay_exec_result *res, relay_error *err);
/* True when a `run` answer is the receiver's usage refusal of its standard
 * input (exit 2, frame outcome refused): the run may be sent by push. */
bool gio_rcv_run_stdin_refused(const relay_exec_result *res);

/* Where the receipt of `execution_id` lives, relative to R (malloc'd). */
char *gio_receipt_rel(const char *execution_id);

/* How a receipt's (or a frame's) outcome ended (spec/guest.md §7.5). */
typedef enum gio_outcome_kind {
	GIO_OUTCOME_UNKNOWN = 0, /* absent or another word */
	GIO_OUTCOME_COMPLETED,
	GIO_OUTCOME_REFUSED,
	GIO_OUTCOME_UNCERTAIN,
} gio_outcome_kind;
/* The outcome {kind, diagnostic, exitStatus} read once. Strings and the
 * exit status are borrowed from `outcome`. */
typedef struct gio_outcome {
	gio_outcome_kind kind;
	const char *diagnostic;  /* or NULL */
	bool has_code;           /* completed with an exit code */
	int64_t code;            /* the exit code */
	const char *signal_name; /* completed by a signal ("SIGKILL"), or NULL */
} gio_outcome;
void gio_outcome_read(const json_object *outcome, gio_outcome *out);

/* A receipt (spec/guest.md §7.5) read once into what delivery/ and tools/ look
 * at: runs/ reads the receipt it brought home and hands the struct on, and
 * no room above it takes the receipt's JSON or names its keys. Everything
 * is borrowed from the receipt JSON (`json`, which must outlive the struct),
 * NULL where absent. Reading checks nothing: runs/ validates a receipt
 * before anyone takes it (run_receipt_problem). */
typedef struct gio_receipt {
	json_object *json; /* the receipt itself, for what keeps or checks it whole
	                      (a step download's copy, evidence_step_expected) */
	const char *execution_id;
	const char *session_id;
	const char *request_sha256;
	json_object *outcome_json; /* {kind, diagnostic, exitStatus} */
	gio_outcome outcome;
	json_object *image_evidence; /* {status, snapshots, ...} */
	json_object *snapshots;      /* the imageEvidence's snapshots array */
} gio_receipt;
void gio_receipt_read(const json_object *receipt, gio_receipt *out);

#endif
