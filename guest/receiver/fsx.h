/*
 * receiver/fsx.h — the guest root's path rules and durable file writes
 * (spec/guest.md §0, §1, §3.4).
 *
 * Every path the receiver touches lies under the guest root R. At and below
 * R no existing component may be a symbolic link; above R the operating
 * system's aliases are tolerated. Files are created 0600, directories 0700.
 */
#ifndef RECEIVER_FSX_H
#define RECEIVER_FSX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "util.h"

/* A relative path: non-empty, not absolute, no NUL, no backslash, no
 * control character, no empty, "." or ".." segment. */
int rel_path_ok(const char *rel);

/* Checks that root is an absolute, normalised path to an existing directory
 * that is not a symbolic link. */
int root_check(const char *root, rerr *err);

/* When abs is root itself or lies below it (textually, normalised), sets
 * *rel_out to the part below root ("" for root itself; borrowed from abs)
 * and returns 0; -1 otherwise. */
int path_below_root(const char *root, const char *abs, const char **rel_out);

/* Walks root/rel component by component with lstat: no component may be a
 * symbolic link and every component but the last must be a directory.
 * Missing components are fine when allow_missing is set (the walk stops at
 * the first missing one and *exists_out is 0). */
int path_walk_check(const char *root, const char *rel, int allow_missing, int *exists_out, rerr *err);

/* mkdir -p root/rel with mode 0700 and the path check before and after
 * each creation; fsyncs each parent whose entry changed. */
int dir_ensure(const char *root, const char *rel, rerr *err);

/* fsync a directory by path (deferred while syncs are deferred). */
int fsync_dir(const char *dir, rerr *err);
/* fsync a file descriptor (deferred while syncs are deferred). */
int fsx_fsync(int fd);

/* Commit points instead of one fsync per file (spec/guest.md §16.2 item 4):
 * after fsx_defer_syncs(root), every fsync of a file or directory only
 * marks the guest root's filesystem dirty, and fsx_commit() makes all of it
 * durable with one syncfs(2). -1 where the platform has no syncfs (the
 * fsyncs then stay immediate). The receiver calls fsx_commit before a
 * script or capture is started and before any frame is printed. */
int fsx_defer_syncs(const char *root);
int fsx_commit(rerr *err);

/* Durable write of dir/name: dir/name.tmp-<random> created
 * O_CREAT|O_EXCL|O_NOFOLLOW 0600, written, fsynced, renamed over the target,
 * directory fsynced. */
int durable_write(const char *dir, const char *name, const void *data, size_t len, rerr *err);
/* The same, but the target must not exist yet (link instead of rename);
 * an existing target gives -1 with errno EEXIST kept in *exists_out = 1. */
int durable_write_new(const char *dir, const char *name, const void *data, size_t len, int *exists_out,
                      rerr *err);

/* Reads a whole regular file (opened O_NOFOLLOW) of at most max_bytes.
 * Returns 0, -1 on error; *missing_out is set when it does not exist;
 * *too_large_out when it is larger than max_bytes. */
int read_file_limited(const char *path, size_t max_bytes, buf *out, int *missing_out, int *too_large_out,
                      rerr *err);

/* Hashes an open file descriptor from its start: SHA-256 hex and size.
 * Reads 8 MiB at a time. */
int hash_fd(int fd, char hex[65], uint64_t *bytes_out, rerr *err);
/* The same over at most max_bytes from the start. */
int hash_fd_prefix(int fd, uint64_t max_bytes, char hex[65], uint64_t *bytes_out, rerr *err);

/* True for the append-only logs of what steps left running
 * (R/state/background/<executionId>.log, spec/guest.md §16.1): such a file may
 * grow while it is inventoried or archived, and its first N bytes never
 * change, so readers take the size they first saw and accept growth. */
int path_is_append_only_log(const char *path);

/* Joins a and b with one "/" (b may be ""). malloc'd. */
char *path_join(const char *a, const char *b);

/* True when the name exists (lstat). */
int path_exists(const char *path);

/* Recursively removes a directory tree (no symbolic link is followed). */
int remove_tree(const char *path, rerr *err);

#endif
