/*
 * receiver/run.h — `receiver run --root R REQUEST` (guest.md §7): admit,
 * journal, snapshot and run one recorded request, never replaying an
 * execution id.
 */
#ifndef RECEIVER_RUN_H
#define RECEIVER_RUN_H

/* Prints the run frame; returns the exit status (guest.md §5.3). */
int run_command(const char *root, const char *request_path);

#endif
