/*
 * guest/receiver_protocol.h — the host ⇄ receiver protocol: names and limits
 * that the core (core/src/runs/, core/src/guestio/) and the guest receiver (guest/receiver/)
 * must agree on, so neither defines them on its own. Plain C99 macros, and
 * one include, receiver_records.h (the part the core's evidence/ reads): the
 * receiver is libc-only and the core is C11.
 *
 * The prose contract is spec/guest.md §5–§16; this file is what both sides
 * compile against.
 */
#ifndef RELAY_RECEIVER_PROTOCOL_H
#define RELAY_RECEIVER_PROTOCOL_H

#include "receiver_records.h"

/* `receiver version` reports it; the request's "protocol" key carries it. */
#define RECEIVER_PROTOCOL_VERSION 1
/* The name `receiver version` reports (spec/guest.md §5.2). */
#define RECEIVER_PROGRAM_NAME "mcp-relay-receiver"

/* Size limits (bytes). */
#define RECEIVER_REQUEST_MAX_BYTES (1024u * 1024u)      /* spec/guest.md §6 */
#define RECEIVER_SCRIPT_MAX_BYTES  (8u * 1024u * 1024u) /* a script part on standard input */
#define RECEIVER_RECEIPT_MAX_BYTES (8u * 1024u * 1024u) /* what the host accepts as a receipt */
/* Request limits (spec/guest.md §6.1). */
#define RECEIVER_TIMEOUT_MAX_MS    3600000 /* timeoutMs: 1 to 3,600,000 */
#define RECEIVER_BECAUSE_MAX_CHARS 16384   /* because: non-blank, at most 16,384 characters */

/*
 * Subcommands (spec/guest.md §5.2): argv[1] of the receiver. Every invocation
 * prints exactly one JSON line on standard output, its frame (§5.1);
 * `run --stdin` may follow it with the parts it names (below).
 */
#define RECEIVER_CMD_VERSION      "version"
#define RECEIVER_CMD_HASH         "hash"
#define RECEIVER_CMD_PREPARE      "prepare"
#define RECEIVER_CMD_INIT         "init"
#define RECEIVER_CMD_SCAN         "scan"
#define RECEIVER_CMD_ARCHIVE      "archive"
#define RECEIVER_CMD_UNPACK       "unpack"
#define RECEIVER_CMD_REMOVE       "remove"
#define RECEIVER_CMD_CAPTURE_TEST "capture-test"
#define RECEIVER_CMD_RUN          "run"
#define RECEIVER_CMD_CANCEL       "cancel"
#define RECEIVER_CMD_RESET        "reset"
#define RECEIVER_CMD_SERVE        "serve" /* spec/guest.md §17: the resident receiver */

/* Options of the subcommands (spec/guest.md §5.2). */
#define RECEIVER_OPT_ROOT      "--root"
#define RECEIVER_OPT_BASE      "--base"
#define RECEIVER_OPT_SESSION   "--session"
#define RECEIVER_OPT_PRESENT   "--present"
#define RECEIVER_OPT_IMAGE     "--image"
#define RECEIVER_OPT_OUT       "--out"
#define RECEIVER_OPT_CAPTURE   "--capture"
#define RECEIVER_OPT_WAIT_MS   "--wait-ms"
#define RECEIVER_OPT_EVERY_MS  "--every-ms"
#define RECEIVER_OPT_EXECUTION "--execution"
#define RECEIVER_OPT_ID        "--id"

/* Exit statuses (spec/guest.md §5.3). */
#define RECEIVER_EXIT_DONE     0 /* the command did its job (run: a receipt or a frame outcome) */
#define RECEIVER_EXIT_USAGE    2 /* usage or request-parse error; nothing was started */
#define RECEIVER_EXIT_INTERNAL 3 /* internal failure; the frame's "error" says what */

/* Transient names directly in R that `receiver remove` accepts (§5.2). */
#define RECEIVER_TRANSIENT_INVENTORY     ".inventory-"
#define RECEIVER_TRANSIENT_ARCHIVE       ".archive-"
#define RECEIVER_TRANSIENT_PUSH          ".push-"
#define RECEIVER_TRANSIENT_CAPTURE_PROBE ".capture-probe-"

/*
 * Frame keys (spec/guest.md §5.2, §5.4). A failed command's frame is
 * {"error": message}. `version`: {receiver, version, protocol, platform};
 * `hash` and `scan`: {path, sha256, bytes}; `capture-test`: {ok, afterMs}
 * or {ok: false, tries, diagnostic}; `run`: {executionId, receipt:
 * {path, sha256, bytes} | null, duplicate, requestMatches?, outcome?}
 * (the outcome only when no receipt exists); `cancel`: {executionId,
 * signalled}.
 */
#define RECEIVER_FRAME_ERROR        "error"
#define RECEIVER_FRAME_RECEIVER     "receiver"
#define RECEIVER_FRAME_VERSION      "version"
#define RECEIVER_FRAME_PROTOCOL     "protocol"
#define RECEIVER_FRAME_PLATFORM     "platform"
#define RECEIVER_FRAME_PATH         "path"
#define RECEIVER_FRAME_SHA256       "sha256"
#define RECEIVER_FRAME_BYTES        "bytes"
#define RECEIVER_FRAME_OK           "ok"
#define RECEIVER_FRAME_AFTER_MS     "afterMs"
#define RECEIVER_FRAME_DIAGNOSTIC   "diagnostic"
#define RECEIVER_FRAME_EXECUTION_ID "executionId"
#define RECEIVER_FRAME_RECEIPT      "receipt"
#define RECEIVER_FRAME_DUPLICATE    "duplicate"
#define RECEIVER_FRAME_OUTCOME      "outcome"
#define RECEIVER_FRAME_PARTS        "parts"
#define RECEIVER_FRAME_SIGNALLED    "signalled"
/* Where the receipt of execution ID lives, relative to R:
 * RECEIVER_RECEIPTS_DIR "/" ID ".json". */
#define RECEIVER_RECEIPTS_DIR "state/receiver/receipts"

/*
 * Request keys (spec/guest.md §6.1): every one is required (optional values are
 * null), unknown keys are refused.
 */
#define RECEIVER_REQ_PROTOCOL      "protocol"
#define RECEIVER_REQ_EXECUTION_ID  "executionId"
#define RECEIVER_REQ_SESSION_ID    "sessionId"
#define RECEIVER_REQ_ATTEMPT_ID    "attemptId"
#define RECEIVER_REQ_GUEST         "guest"
#define RECEIVER_REQ_BECAUSE       "because"
#define RECEIVER_REQ_EVIDENCE_MODE "evidenceMode" /* always "recorded" */
#define RECEIVER_REQ_LANGUAGE      "language"     /* shell | javascript | typescript | python */
#define RECEIVER_REQ_SCRIPT        "script"       /* {path, sha256, bytes, origin, localName} */
#define RECEIVER_REQ_RUNTIME       "runtime"      /* {nodePath} */
#define RECEIVER_REQ_CWD           "cwd"
#define RECEIVER_REQ_TIMEOUT_MS    "timeoutMs"
#define RECEIVER_REQ_STEP          "step"      /* {id, title, expected, inputMode} */
#define RECEIVER_REQ_SNAPSHOTS     "snapshots" /* {afterIntervalMs, group} */
#define RECEIVER_REQ_CAPTURE       "capture"   /* the capture command, or null */
/* Optional (MCP_RELAY_RECORD=video): {fps, display} asks for a screen
 * recording of the run, from just before the script until the after-image
 * (guest/receiver/record.h); absent or null: none. */
#define RECEIVER_REQ_VIDEO "video"
/* The receipt's key for it and the video's place and limits are in
 * receiver_records.h (RECEIVER_RECEIPT_VIDEO, RECEIVER_VIDEOS_DIR, ...). */
#define RECEIVER_SCRIPT_PATH       "path"
#define RECEIVER_SCRIPT_SHA256     "sha256"
#define RECEIVER_SCRIPT_BYTES      "bytes"
#define RECEIVER_SCRIPT_ORIGIN     "origin" /* "inline" | "file" */
#define RECEIVER_SCRIPT_LOCAL_NAME "localName"
#define RECEIVER_RUNTIME_NODE_PATH "nodePath"
#define RECEIVER_EVIDENCE_RECORDED "recorded"
/* Where the request and the script go, relative to R (spec/guest.md §6). */
#define RECEIVER_REQUESTS_DIR "requests"
#define RECEIVER_STREAMED_DIR "streamed" /* inline code: streamed/<executionId>.<ext> */
#define RECEIVER_SCRIPTS_DIR  "scripts"  /* a localPath file: scripts/<random>.<ext> */

/*
 * Receipt keys (spec/guest.md §7.5, §15 step 5) the host checks and copies.
 */
#define RECEIVER_RCPT_EXECUTION_ID   "executionId"
#define RECEIVER_RCPT_REQUEST_SHA256 "requestSha256"
#define RECEIVER_RCPT_SESSION_ID     "sessionId"
#define RECEIVER_RCPT_OUTCOME        "outcome"
#define RECEIVER_RCPT_IMAGE_EVIDENCE "imageEvidence"
#define RECEIVER_RCPT_SNAPSHOTS      "snapshots"
#define RECEIVER_OUTCOME_KIND        "kind"
#define RECEIVER_OUTCOME_DIAGNOSTIC  "diagnostic"
#define RECEIVER_OUTCOME_EXIT_STATUS "exitStatus" /* {code: int|null, signal: string|null} */
#define RECEIVER_KIND_COMPLETED      "completed"
#define RECEIVER_KIND_REFUSED        "refused"
#define RECEIVER_KIND_UNCERTAIN      "uncertain"

/*
 * A run in one round trip (spec/guest.md §16.2): `receiver run --root R --stdin`.
 *
 * Standard input: one JSON line (at most RECEIVER_STDIN_HEADER_MAX_BYTES,
 * newline included)
 *     {"protocol":1,"parts":[
 *        {"name":"request","path":"requests/<id>.json","bytes":N,"sha256":H},
 *        {"name":"script","path":"<streamed|scripts>/<name>","bytes":M,"sha256":H2}]}
 * then exactly N + M bytes: the parts in that order, then end of file.
 * Paths are relative to R. The receiver checks every part's size and
 * SHA-256 before anything else; a short or long stream, a hash mismatch,
 * a bad header or a script path other than the request's `script.path`
 * is a refusal (frame `refused`, exit 2) and nothing runs. It then writes
 * the parts where the paths say (unless the execution id was seen before:
 * the replay rule of §7.1 decides, whatever path the request came by).
 *
 * Standard output: the frame line (§5.4) with, when a receipt exists, a
 * "parts" array [{"name":"receipt","bytes","sha256"}(,
 * {"name":"after-image","path":"state/snapshots/...png","bytes","sha256"})],
 * then those parts' bytes in that order. The after-image original rides
 * along only up to RECEIVER_ATTACH_IMAGE_MAX_BYTES (§16.3). The host
 * checks every part against the frame and the receipt and pulls what fails
 * its check the old way.
 */
#define RECEIVER_RUN_STDIN_OPTION       "--stdin"
#define RECEIVER_STDIN_HEADER_MAX_BYTES 65536u
#define RECEIVER_PART_REQUEST           "request"
#define RECEIVER_PART_SCRIPT            "script"
#define RECEIVER_PART_RECEIPT           "receipt"
#define RECEIVER_PART_AFTER_IMAGE       "after-image"
#define RECEIVER_ATTACH_IMAGE_MAX_BYTES (8u * 1024u * 1024u)
/* Keys of the standard-input header and of each part. */
#define RECEIVER_PART_KEY_NAME   "name"
#define RECEIVER_PART_KEY_PATH   "path"
#define RECEIVER_PART_KEY_BYTES  "bytes"
#define RECEIVER_PART_KEY_SHA256 "sha256"

/*
 * The resident receiver (spec/guest.md §17): `receiver serve --root R` reads
 * requests framed as `run --stdin` reads one, one after another, and
 * answers each framed as `run --stdin` answers, in order. A header it
 * cannot parse is answered with a refused outcome frame of executionId
 * "unknown", after which it exits 2 (the stream is out of step). It exits
 * 0 at end of input, when R is gone, or after RECEIVER_SERVE_IDLE_MS
 * without a request.
 */
#define RECEIVER_SERVE_IDLE_MS (15 * 60 * 1000)
/* A worker that ended without its answer (a signal, a crash) is answered
 * for by serve, which goes on: {"executionId", "receipt": null,
 * "workerExit": {"code": int|null, "signal": int|null}, "stderr": the
 * worker's last RECEIVER_SERVE_STDERR_TAIL bytes of standard error}. The
 * host reads it as the one-shot path reads a receiver's nonzero exit. */
#define RECEIVER_FRAME_WORKER_EXIT  "workerExit"
#define RECEIVER_FRAME_CODE         "code"
#define RECEIVER_FRAME_SIGNAL       "signal"
#define RECEIVER_FRAME_STDERR       "stderr"
#define RECEIVER_SERVE_STDERR_TAIL  600
#define RECEIVER_SERVE_IDLE_ENV     "RELAY_RECEIVER_SERVE_IDLE_MS"
#define RECEIVER_SERVE_ROOT_POLL_MS 5000 /* how often an idle serve checks that R still exists */

/*
 * A diagnostic script on serve's channel (spec/guest.md §17 item 3 over §13): the
 * header
 *     {"protocol":1,"diagnostic":{"executionId":"diagnostic-…","argv":[…],
 *      "limitMs":N},"parts":[{"name":"script","bytes":M,"sha256":H}]}
 * then the script's M bytes, which become argv's last argument. serve runs
 * it itself (no worker: it touches nothing under R, takes no lock and writes
 * no journal line) in a session of its own, standard input /dev/null,
 * standard output and error one pipe; it kills the session's process group
 * at limitMs, or when its own standard input ends (the host closed the
 * channel: a cancellation), and stops reading RECEIVER_DIAG_DRAIN_MS after
 * the command ended when something it left running still holds the pipe.
 * The answer:
 *     {"executionId":…,"diagnosticExit":{"code":int|null,"signal":int|null,
 *      "timedOut":bool,"outputTruncated":bool},
 *      "parts":[{"name":"output","bytes":K,"sha256":H}]}
 * then the output's last K <= RECEIVER_DIAG_OUTPUT_KEEP bytes. A script
 * that fails its hash is answered with the refused frame (nothing ran) and
 * serve goes on; a diagnostic header it cannot read leaves the stream out
 * of step, as any header (the refusal, exit 2).
 */
#define RECEIVER_REQ_DIAGNOSTIC         "diagnostic"
#define RECEIVER_DIAG_ARGV              "argv"
#define RECEIVER_DIAG_LIMIT_MS          "limitMs"
#define RECEIVER_DIAG_ARGV_MAX          16
#define RECEIVER_DIAG_SCRIPT_MAX_BYTES  98304u
#define RECEIVER_DIAG_OUTPUT_KEEP       64000u
#define RECEIVER_DIAG_DRAIN_MS          500
#define RECEIVER_FRAME_DIAGNOSTIC_EXIT  "diagnosticExit"
#define RECEIVER_FRAME_TIMED_OUT        "timedOut"
#define RECEIVER_FRAME_OUTPUT_TRUNCATED "outputTruncated"
#define RECEIVER_PART_OUTPUT            "output"

/*
 * serve's own requests for the host's step downloads (spec/guest.md §17 item 3
 * extended: what the host would run as a separate `receiver` command or
 * pull through its transport goes over the open channel instead, so a run's
 * evidence comes home without a new process on either side).
 *
 * A receiver command:
 *     {"protocol":1,"command":{"argv":["archive","--root",R,…]}}
 * no parts. serve runs argv[0] (one of RECEIVER_SERVE_COMMANDS) in a worker
 * (a fork, standard input /dev/null), exactly as `receiver <argv…>` would
 * run, and answers once it has ended:
 *     {"commandExit":{"code":int|null,"signal":int|null},
 *      "parts":[{"name":"stdout",…},{"name":"stderr",…}]}
 * then both streams' bytes (at most RECEIVER_SERVE_COMMAND_OUTPUT_MAX each:
 * the first bytes of standard output, the last of standard error). Another
 * command is refused with the refused frame (nothing ran).
 *
 * A file below R:
 *     {"protocol":1,"file":{"path":"R/rel"}}
 * serve reads it itself (a regular file, opened O_NOFOLLOW, at most
 * RECEIVER_SERVE_FILE_MAX_BYTES) and answers
 *     {"file":{"path":…},"parts":[{"name":"file","bytes":B,"sha256":H}]}
 * then its B bytes, or {"file":{"path":…},"error":"…","tooLarge":bool,
 * "parts":[]} (the host then pulls it through its transport).
 */
#define RECEIVER_REQ_COMMAND              "command"
#define RECEIVER_COMMAND_ARGV             "argv"
#define RECEIVER_SERVE_COMMANDS           "archive, remove"
#define RECEIVER_SERVE_COMMAND_OUTPUT_MAX (1u << 20)
#define RECEIVER_FRAME_COMMAND_EXIT       "commandExit"
#define RECEIVER_PART_STDOUT              "stdout"
#define RECEIVER_PART_STDERR              "stderr"
#define RECEIVER_REQ_FILE                 "file"
#define RECEIVER_FILE_PATH                "path"
#define RECEIVER_FRAME_FILE               "file"
#define RECEIVER_FRAME_TOO_LARGE          "tooLarge"
#define RECEIVER_PART_FILE                "file"
#define RECEIVER_SERVE_FILE_MAX_BYTES     (8u * 1024u * 1024u)

#endif
