/*
 * guestio/resident.h — the resident receiver's channel of one guest
 * (spec/guest.md §17): a long-lived stream of the guest's transport
 * (relay/transport.h, RELAY_TRANSPORT_STREAM) with `receiver serve --root R`
 * at its far end, opened once the guest is staged and kept in the guest's
 * record (guest->link->resident, link.h) until the guest is released.
 *
 * Every request on it is framed as `receiver run --stdin` takes one (the
 * header line and both parts: run_stdin_parts_text in runs/) and every
 * answer as `run --stdin` answers (the frame line, then the parts it
 * names), so an answer read here is what the one-shot path reads from the
 * exec's standard output, and the same code checks it (guestio/frame.h).
 *
 * Threads: the guest's queue orders runs and diagnostics, so one call at a
 * time uses the channel; a step download may borrow it between calls for
 * one request (gio_resident_lend, link->resident_lent). The pointer and
 * the flags are read and written under the link slice's lock.
 */
#ifndef RELAY_GUESTIO_RESIDENT_H
#define RELAY_GUESTIO_RESIDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guestio/guest_io.h"

typedef struct gio_resident gio_resident;

/* A channel that has had no request for this long is closed and opened
 * again before the next one, so it never races `serve`'s own idle end
 * (RECEIVER_SERVE_IDLE_MS, 15 minutes). */
#define GIO_RESIDENT_REOPEN_IDLE_MS (14 * 60 * 1000)
/* How long a request's bytes may take to go into the channel. */
#define GIO_RESIDENT_WRITE_MS 30000

/* In the relay's environment, "off" keeps every run off the channel
 * (one-shot or pushed), for benchmarks that compare the paths. */
#define GIO_RESIDENT_ENV "MCP_RELAY_RESIDENT"

/* True when the guest's transport offers the stream trait (and
 * GIO_RESIDENT_ENV is not "off"). */
bool gio_resident_possible(const guest_io *io);

/* Makes sure the guest has a live channel: keeps the open one when it is
 * alive (nothing unread, not at end of file, not idle past
 * GIO_RESIDENT_REOPEN_IDLE_MS), else closes it and starts `receiver serve`
 * on a new stream. RELAY_OK, or the transport's failure in err (the
 * caller then takes the one-shot path, §17 item 3). */
relay_status gio_resident_ensure(guest_io *io, relay_error *err);

/* How a request on the channel ended. */
typedef enum gio_resident_end {
	GIO_RESIDENT_ANSWERED,  /* *answer holds the whole answer */
	GIO_RESIDENT_NOT_SENT,  /* not every byte went in: no receiver can have run it; the channel is closed
	                         */
	GIO_RESIDENT_BROKEN,    /* sent whole, then the channel broke or spoke out of step before a whole
	                           answer: the run may have happened; the channel is closed */
	GIO_RESIDENT_TIMED_OUT, /* sent whole, no answer within limit_ms; the channel is closed */
	GIO_RESIDENT_CANCELLED, /* the call was cancelled and no answer came in the grace; closed */
} gio_resident_end;

/* Sends `request` (len bytes, borrowed) and reads its answer, waiting at
 * most limit_ms. While it waits, sv->tick_ms progress goes to io->call,
 * and a cancellation of io->call runs `receiver cancel` for
 * sv->cancel_execution (every 500 ms until it signals) and waits
 * sv->cancel_grace_ms more for the answer (sv->cancelled,
 * sv->receiver_cancel_signalled set). On ANSWERED *answer_out (malloc'd)
 * holds *answer_len bytes; otherwise NULL and err says what happened. */
gio_resident_end gio_resident_request(guest_io *io, gio_supervision *sv, const void *request, size_t len,
                                      uint64_t limit_ms, char **answer_out, size_t *answer_len,
                                      relay_error *err);

/* A step download's request on the guest's channel, sent only when the
 * channel is open and idle (no run has it, no other download, not idle
 * long enough to be reopened, its serve has not refused such a request):
 * a run that begins meanwhile waits for it (at most limit_ms plus the
 * write). No supervision: a cancelled call ends the wait at once and closes
 * the channel. Ends as gio_resident_request; GIO_RESIDENT_NOT_SENT (with
 * RELAY_E_UNAVAILABLE in err when the channel was not idle, or serve
 * refused the request kind: then no later request of this kind is sent to
 * it) tells the caller to use the transport instead. */
gio_resident_end gio_resident_lend(guest_io *io, const void *request, size_t len, uint64_t limit_ms,
                                   char **answer_out, size_t *answer_len, relay_error *err);

/* Closes the guest's channel, if it has one (at release, or when a
 * request leaves it broken). `serve` sees end of input and exits. */
void gio_resident_close(session_manager *m, guest *g);

#endif
