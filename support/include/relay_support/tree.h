/*
 * relay_support/tree.h — creating and removing folder trees safely.
 *
 * Removal never follows a symbolic link: a link is removed, never what it
 * points to. Every entry is reached with openat(O_NOFOLLOW | O_DIRECTORY)
 * and fstatat(AT_SYMLINK_NOFOLLOW) relative to its parent's descriptor and
 * removed with unlinkat, so a folder swapped for a link while the removal
 * runs is not entered. Depth is bounded (RS_TREE_MAX_DEPTH): deeper trees
 * are refused (ELOOP) instead of exhausting descriptors or stack.
 */
#ifndef RELAY_SUPPORT_TREE_H
#define RELAY_SUPPORT_TREE_H

#include <sys/types.h>

#include "relay_support/rs_error.h"

/* Deepest folder nesting rs_remove_tree enters (the top folder is depth 0). */
#define RS_TREE_MAX_DEPTH 256

/* Removes `path` (a file, link or whole folder tree); a missing path is
 * success. On failure (-1, errno) it goes on removing what it can and
 * reports the first failure. */
int rs_remove_tree(const char *path, rs_error *err);

/* The same for `name` relative to the folder descriptor dir_fd (or
 * AT_FDCWD). */
int rs_remove_tree_at(int dir_fd, const char *name, rs_error *err);

/* rs_mkdir_p flags. */
enum {
	/* The last component must be a folder itself, not a symbolic link to one
	 * (lstat). Without it the result is checked with stat, as mkdir -p does. */
	RS_MKDIR_NO_LINK_LEAF = 1u << 0,
};

/* Creates `path` and its missing parents with `mode` (existing folders are
 * left as they are; links to folders among the parents are followed, like
 * mkdir -p). Empty path: EINVAL. A component that exists and is not a
 * folder: ENOTDIR. Unknown flags: EINVAL. */
int rs_mkdir_p(const char *path, mode_t mode, unsigned flags, rs_error *err);

#endif
