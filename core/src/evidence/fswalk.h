/*
 * evidence/fswalk.h — link-safe file system access below a root folder, for
 * the evidence modules.
 *
 * Every function resolves a relative path one component at a time with
 * openat(..., O_NOFOLLOW), starting from an open folder descriptor, so a
 * symbolic link anywhere on the way is refused (ELOOP/ENOTDIR become
 * RELAY_E_UNSAFE_PATH) and nothing outside the root is ever opened or
 * written. Descriptors returned are owned by the caller (close()).
 */
#ifndef RELAY_EVIDENCE_FSWALK_H
#define RELAY_EVIDENCE_FSWALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "relay/status.h"

/* A growable list of owned strings. */
typedef struct fw_strlist {
	char **items;
	size_t count;
	size_t capacity;
} fw_strlist;

bool fw_strlist_push(fw_strlist *list, const char *text); /* copies text */
void fw_strlist_free(fw_strlist *list);

/* Opens `path` as a folder without following a link at its last component
 * (O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC). -1 with errno on failure. */
int fw_open_root(const char *path);

/* Opens the folder `rel_dir` ("" = root itself, a dup) below `root_fd`.
 * With `create`, missing folders are made 0700 and their relative paths
 * appended to `created` (may be NULL). Returns the descriptor or -1 with
 * `err` filled (RELAY_E_UNSAFE_PATH for a link or non-folder on the way). */
int fw_open_dir_at(int root_fd, const char *rel_dir, bool create, fw_strlist *created, relay_error *err);

/* Opens the parent folder of `rel` (see fw_open_dir_at) and points *leaf_out
 * at its last component (inside rel; borrowed). */
int fw_open_parent_at(int root_fd, const char *rel, bool create, fw_strlist *created, const char **leaf_out,
                      relay_error *err);

/* Opens the regular file `rel` below root_fd for reading (O_NOFOLLOW,
 * checked to be a regular file). RELAY_E_NOT_FOUND when missing,
 * RELAY_E_UNSAFE_PATH for a link or special file. */
int fw_open_file_read_at(int root_fd, const char *rel, relay_error *err);

/* Creates `rel` below root_fd with O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW and
 * `mode`; parents are created 0700 (recorded in created_dirs). */
int fw_create_file_at(int root_fd, const char *rel, mode_t mode, fw_strlist *created_dirs, relay_error *err);

/* Removes the file `rel` below root_fd (never following links). Missing is
 * not an error. */
relay_status fw_unlink_at(int root_fd, const char *rel, relay_error *err);
/* Removes the empty folder `rel` below root_fd; missing or not empty is not
 * an error. */
void fw_rmdir_at(int root_fd, const char *rel);

/* One entry of a tree walk. */
typedef enum fw_kind { FW_FILE, FW_DIR, FW_LINK, FW_OTHER } fw_kind;
typedef struct fw_entry {
	char *path; /* relative, '/'-separated; owned */
	fw_kind kind;
	uint64_t bytes; /* st_size */
	uint64_t nlink; /* st_nlink */
} fw_entry;
typedef struct fw_tree {
	fw_entry *items;
	size_t count, capacity;
} fw_tree;

/* Lists every entry below `root` (not following links; folders are listed
 * and descended into, links and special files are listed and not), sorted
 * by path in byte order. A missing root gives an empty list when
 * `missing_ok`. Entries whose relative path starts with one of `skip`
 * (NULL-terminated, may be NULL; exact path or path + "/") are left out. */
relay_status fw_walk(const char *root, bool missing_ok, const char *const *skip, fw_tree *out,
                     relay_error *err);
void fw_tree_free(fw_tree *tree);

#endif
