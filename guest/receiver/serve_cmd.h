/*
 * receiver/serve_cmd.h — serve's own requests for the host's step downloads
 * (guest/receiver_protocol.h RECEIVER_REQ_COMMAND, RECEIVER_REQ_FILE): a
 * receiver command run in a worker as `receiver <argv…>` would run it, and
 * a file below R read and sent whole, so the host's archive, pull and
 * removal of a run's evidence take no new process in the guest or on the
 * host.
 */
#ifndef RECEIVER_SERVE_CMD_H
#define RECEIVER_SERVE_CMD_H

#include "stdio_parts.h"

/* Each takes the request at the head of reader (stdin_parts_next answered
 * STDIN_NEXT_COMMAND or STDIN_NEXT_FILE) and answers it: 0; -1 with the
 * refusal's diagnostic in err (nothing ran; the stream is still in step:
 * serve answers the refusal and goes on). */
int serve_command(stdin_reader *reader, rerr *err);
int serve_file(stdin_reader *reader, const char *root, rerr *err);

#endif
