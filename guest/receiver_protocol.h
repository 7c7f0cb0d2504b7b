/*
 * guest/receiver_protocol.h — the host ⇄ receiver protocol: names and limits
 * that the core (core/src/runs/, core/src/guestio/) and the guest receiver (guest/receiver/)
 * must agree on, so neither defines them on its own. Plain C99 macros, no
 * includes: the receiver is libc-only and the core is C11.
 *
 * The prose contract is guest.md §5–§16; this file is what both sides
 * compile against.
 */
#ifndef RELAY_RECEIVER_PROTOCOL_H
#define RELAY_RECEIVER_PROTOCOL_H

/* `receiver version` reports it; the request's "protocol" key carries it. */
#define RECEIVER_PROTOCOL_VERSION 1

/* Size limits (bytes). */
#define RECEIVER_REQUEST_MAX_BYTES (1024u * 1024u)      /* guest.md §6 */
#define RECEIVER_SCRIPT_MAX_BYTES  (8u * 1024u * 1024u) /* a script part on standard input */
#define RECEIVER_RECEIPT_MAX_BYTES (8u * 1024u * 1024u) /* what the host accepts as a receipt */

/*
 * A run in one round trip (guest.md §16.2): `receiver run --root R --stdin`.
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

#endif
