/*
 * util/fsutil.h — file system helpers with the project's rules: folders
 * 0700, files 0600, durable writes (temporary file, fsync, rename, fsync of
 * the folder), no following of symbolic links where the caller owns the tree.
 */
#ifndef RELAY_UTIL_FSUTIL_H
#define RELAY_UTIL_FSUTIL_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "relay/status.h"

/* Creates `path` and its missing parents with `mode` (existing folders are
 * left as they are). A component that exists and is not a folder is
 * RELAY_E_IO (ENOTDIR). */
relay_status fs_mkdir_p(const char *path, mode_t mode, relay_error *err);

/* Writes data to `path` durably: "<path>.tmp-<random>" created
 * O_CREAT|O_EXCL|O_NOFOLLOW with `mode`, fsync, rename over `path`, fsync of
 * the folder. */
relay_status fs_write_durable(const char *path, const void *data, size_t len, mode_t mode, relay_error *err);
/* Pretty JSON (two-space indentation) plus a final newline, durably, 0600. */
relay_status fs_write_json_durable(const char *path, const json_object *obj, relay_error *err);
/* Creates `path` exclusively (O_CREAT|O_EXCL|O_NOFOLLOW, `mode`) with data,
 * then fsyncs it. RELAY_E_IO with EEXIST when it exists. */
relay_status fs_write_exclusive(const char *path, const void *data, size_t len, mode_t mode,
                                relay_error *err);

/* Reads a whole regular file (O_NOFOLLOW) of at most max_bytes into a
 * malloc'd NUL-terminated buffer. RELAY_E_NOT_FOUND, RELAY_E_TOO_LARGE,
 * RELAY_E_UNSAFE_PATH (symlink or not a regular file), RELAY_E_IO. */
relay_status fs_read_file(const char *path, size_t max_bytes, char **data_out, size_t *len_out,
                          relay_error *err);
/* fs_read_file's reading, of an open descriptor (`name` for messages); the
 * caller keeps and closes `fd`. */
relay_status fs_read_fd(int fd, const char *name, size_t max_bytes, char **data_out, size_t *len_out,
                        relay_error *err);
/* Reads and parses a JSON file (at most max_bytes). */
relay_status fs_read_json(const char *path, size_t max_bytes, json_object **obj_out, relay_error *err);

/* Sync groups: the host's commit points (docs/runs.md, "Durability"; the
 * host side of spec/guest.md §16.2 item 4). While a group is open on the
 * calling thread, every fsync this file makes (fs_write_durable,
 * fs_write_exclusive, fs_copy_file, fs_fsync_dir, fs_fsync_fd) only notes
 * the file system it touched; fs_sync_group_commit() makes all of it
 * durable with one syncfs(2) per file system noted (one on a host whose
 * state and project folders share a disk). Files are still written to a
 * temporary name and renamed, so a crash of the process leaves every file
 * whole or absent; a loss of power before the commit point may leave a file
 * written since the last point empty (a new name) or old (a replaced one),
 * which is why the caller commits before it acts on those files (sends a
 * request, answers a call). Per thread: each thread's writes have their own
 * commit point. */
/* Opens a group on this thread: true when this call opened it (then the
 * caller ends it), false when one was open already (a nested writer joins
 * the outer group and must not end it). */
bool fs_sync_group_begin(void);
/* The commit point: one syncfs per file system noted since the last point.
 * The group stays open. RELAY_OK at once when no group is open or nothing
 * is pending. */
relay_status fs_sync_group_commit(relay_error *err);
/* Commits and closes the group when `opened` (fs_sync_group_begin's
 * answer); a no-op otherwise. */
relay_status fs_sync_group_end(bool opened, relay_error *err);
/* fsync(fd), or noted in the open group; 0 or -1 with errno, as fsync. */
int fs_fsync_fd(int fd);

/* fsync() of a folder. */
relay_status fs_fsync_dir(const char *path, relay_error *err);
/* fsync() of the folder that holds `path`. */
relay_status fs_fsync_parent(const char *path, relay_error *err);

/* Removes a file or a whole tree without following symbolic links (a link
 * is removed, never its target). Missing is not an error. */
relay_status fs_remove_tree(const char *path, relay_error *err);

/* Writes all of data to fd, again after EINTR; RELAY_E_NO_SPACE on ENOSPC.
 * `what` names the file in the message. */
relay_status fs_write_all(int fd, const void *data, size_t len, const char *what, relay_error *err);

/* "<a>/<b>" (malloc'd), with one slash between. NULL on allocation failure. */
char *fs_path_join(const char *a, const char *b);
/* malloc'd copy of the folder part of `path` ("." when none). */
char *fs_dirname(const char *path);
/* Pointer to the last component of `path` (borrowed). */
const char *fs_basename(const char *path);

bool fs_is_dir(const char *path);          /* follows links */
bool fs_exists_nofollow(const char *path); /* lstat succeeds */

/* Free bytes for an unprivileged writer on the volume holding `path`. */
relay_status fs_free_bytes(const char *path, uint64_t *free_out, relay_error *err);

/* Copies a regular file (O_NOFOLLOW source; destination created O_EXCL with
 * `mode`) and fsyncs it. */
relay_status fs_copy_file(const char *src, const char *dst, mode_t mode, relay_error *err);

#endif
