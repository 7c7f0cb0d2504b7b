/*
 * guestio/resident_calls.h — a step download's guest work on the resident
 * receiver's channel (guest/receiver_protocol.h RECEIVER_REQ_COMMAND and
 * RECEIVER_REQ_FILE): `receiver archive` and `receiver remove` run by serve
 * in a worker, and a file below R read by serve and sent on the answer,
 * instead of a transport exec and a transport pull (each a new ssh client,
 * an sshd session and its shells on transfer-ssh). gio_receiver() and
 * gio_pull() try these first; every failure before an answer falls back
 * to the transport, so a guest without a channel, an older receiver or a
 * broken channel changes nothing but the speed. host/transfers names the
 * way each pull took ("channel" or "transport").
 */
#ifndef RELAY_GUESTIO_RESIDENT_CALLS_H
#define RELAY_GUESTIO_RESIDENT_CALLS_H

#include "guestio/guest_io.h"

/* Runs `receiver <args…>` (NULL-terminated, borrowed; args[0] the command)
 * through serve when the channel is idle and serve runs that command:
 * RELAY_OK with *res filled as gio_exec fills it (caller frees with
 * gio_exec_result_free); RELAY_E_UNAVAILABLE when nothing was sent, or the
 * answer did not come whole (the caller runs it through the transport; a
 * receiver command may run twice, as gio_receiver's own retries do);
 * RELAY_E_CANCELLED when the call was cancelled meanwhile. *res is empty
 * after a failure. */
relay_status gio_resident_command(guest_io *io, const char *const *args, uint64_t timeout_ms,
                                  relay_exec_result *res, relay_error *err);

/* Brings the regular file `remote` (below io->root) to `local` (created or
 * truncated, 0600) through serve: RELAY_OK; RELAY_E_UNAVAILABLE when it
 * cannot come this way (no idle channel, not below R, larger than
 * RECEIVER_SERVE_FILE_MAX_BYTES, not a regular file, no whole answer: the
 * caller pulls it through the transport); RELAY_E_CANCELLED; an I/O
 * failure writing `local`. The caller checks size and SHA-256 as after a
 * transport pull. */
relay_status gio_resident_pull(guest_io *io, const char *remote, const char *local, relay_error *err);

#endif
