/*
 * relay_support/which.h — finding a program the way a shell would.
 */
#ifndef RELAY_SUPPORT_WHICH_H
#define RELAY_SUPPORT_WHICH_H

/* The search path used when PATH is unset. */
#define RS_WHICH_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

/* Absolute path (malloc'd, the caller frees) of `program`: a name with a
 * slash is taken as it is (made absolute with realpath); otherwise each
 * absolute folder of `search_path` (NULL: $PATH, or RS_WHICH_DEFAULT_PATH
 * when unset) is tried in order. Only a regular file the caller may execute
 * counts; empty and relative PATH entries are skipped (they would depend on
 * the working folder). NULL with errno ENOENT when not found (EINVAL for an
 * empty name, ENOMEM). */
char *rs_which(const char *program, const char *search_path);

#endif
