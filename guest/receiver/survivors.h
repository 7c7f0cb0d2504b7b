/*
 * receiver/survivors.h — what a step leaves running (spec/guest.md §16.1): the
 * list recorded as `leftRunning`, and the background drainer that keeps
 * survivors' later output from blocking or breaking them.
 */
#ifndef RECEIVER_SURVIVORS_H
#define RECEIVER_SURVIVORS_H

#include <stddef.h>
#include <sys/types.h>

#include "json.h"
#include "util.h"

#define BACKGROUND_DIR           "state/background"
#define BACKGROUND_LOG_MAX_BYTES (1024u * 1024u) /* the log, notes included */
#define LEFT_RUNNING_MAX_LISTED  64
#define LEFT_RUNNING_COMMAND_MAX 64

/* Starts the drainer of a step's output pipes (either fd may be -1; both
 * -1 starts nothing and sets *pid_out to 0). It runs detached in a session
 * of its own with standard input, output and error on /dev/null, appends
 * what arrives to R/state/background/<execution_id>.log (created 0600,
 * append-only, at most BACKGROUND_LOG_MAX_BYTES; past that it keeps reading
 * and counts what it discards, and the log says so), and exits when both
 * pipes reach end of file. The fds are closed in this process either way.
 * 0 with *pid_out, -1 with err. */
int survivors_start_drain(const char *root, const char *execution_id, int out_fd, int err_fd, pid_t *pid_out,
                          rerr *err);

/* The processes a step left running: every live process in process group
 * `pgid` or descended from this process, except this process and the
 * `excluded` pids (the drainer). Returns {"count": N, "processes": [{"pid",
 * "pgid", "command"}]} with at most LEFT_RUNNING_MAX_LISTED listed, sorted
 * by pid; `command` is the process name (at most LEFT_RUNNING_COMMAND_MAX
 * bytes, valid UTF-8). Linux reads /proc; elsewhere the count is 0. */
jv *survivors_list(pid_t pgid, const pid_t *excluded, size_t excluded_count);

#endif
