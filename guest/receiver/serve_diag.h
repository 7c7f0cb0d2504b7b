/*
 * receiver/serve_diag.h — a diagnostic script on `receiver serve`'s channel
 * (guest.md §17 item 3 over §13; the framing is in guest/receiver_protocol.h,
 * RECEIVER_REQ_DIAGNOSTIC). serve runs it itself: no worker, no lock, no
 * journal line, nothing written under R; the command runs in a session of
 * its own, so ending serve ends nothing it started.
 */
#ifndef RECEIVER_SERVE_DIAG_H
#define RECEIVER_SERVE_DIAG_H

#include "stdio_parts.h"

/* Takes the diagnostic request at the head of reader (stdin_parts_next
 * answered STDIN_NEXT_DIAGNOSTIC), runs it and answers it. 0 when serve
 * goes on; -1 when the stream is out of step (the refusal was answered). */
int serve_diagnostic(stdin_reader *reader);

#endif
