/*
 * receiver/frame.h — the one JSON line each invocation prints on standard
 * output (spec/guest.md §5.1). Nothing else is ever written to fd 1.
 */
#ifndef RECEIVER_FRAME_H
#define RECEIVER_FRAME_H

#include "json.h"

/* Prints value as one compact line on stdout and frees it. */
void frame_emit(jv *value);
/* {"error": message}; also logs it on stderr. Returns exit_code. */
int frame_error(int exit_code, const char *message);

#endif
