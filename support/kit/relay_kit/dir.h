/*
 * relay_kit/dir.h — a folder's entries in a fixed order (strcmp), so that
 * what is built from a tree (a pushed archive) is the same for the same
 * tree.
 */
#ifndef RELAY_KIT_DIR_H
#define RELAY_KIT_DIR_H

#include <stddef.h>

/* The names in the folder dir_fd (read through a duplicate; "." and ".."
 * left out), sorted; *count_out of them. malloc'd (free with
 * rk_dir_names_free); NULL with errno when the folder cannot be read or
 * memory runs out. */
char **rk_dir_names_sorted(int dir_fd, size_t *count_out);
void rk_dir_names_free(char **names, size_t count);

#endif
