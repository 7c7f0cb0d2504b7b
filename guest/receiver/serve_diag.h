/*
 * receiver/serve_diag.h — a diagnostic script on `receiver serve`'s channel
 * (spec/guest.md §17 item 3 over §13; the framing is in guest/receiver_protocol.h,
 * RECEIVER_REQ_DIAGNOSTIC). serve runs it itself: no worker, no lock, no
 * journal line, nothing written under R; the command runs in a session of
 * its own, so ending serve ends nothing it started.
 */
#ifndef RECEIVER_SERVE_DIAG_H
#define RECEIVER_SERVE_DIAG_H

#include "stdio_parts.h"

/* Takes the diagnostic request at the head of reader (stdin_parts_next
 * answered STDIN_NEXT_DIAGNOSTIC), runs it and answers it: SERVE_DIAG_DONE.
 * SERVE_DIAG_REFUSED (nothing ran; serve goes on) or SERVE_DIAG_OUT_OF_STEP
 * (the stream is out of step; serve ends) with the refusal's diagnostic in
 * err, for serve to answer. */
#define SERVE_DIAG_DONE        0
#define SERVE_DIAG_REFUSED     1
#define SERVE_DIAG_OUT_OF_STEP 2
int serve_diagnostic(stdin_reader *reader, rerr *err);

#endif
