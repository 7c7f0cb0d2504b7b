/*
 * receiver/run.h — `receiver run --root R REQUEST` (spec/guest.md §7): admit,
 * journal, snapshot and run one recorded request, never replaying an
 * execution id.
 */
#ifndef RECEIVER_RUN_H
#define RECEIVER_RUN_H

/* Prints the run frame; returns the exit status (spec/guest.md §5.3). With
 * from_stdin the request and script come framed on standard input and the
 * receipt (and after-image) go out after the frame (spec/guest.md §16.2);
 * request_path is then unused. */
int run_command(const char *root, const char *request_path, int from_stdin);

struct stdin_parts;
/* The same for a request `receiver serve` already read and checked
 * (spec/guest.md §17 item 2): `parts` is taken (left cleared); the answer is
 * framed as with from_stdin. */
int run_command_parts(const char *root, struct stdin_parts *parts);

#endif
