/*
 * relay_support/read_small.h — a small file read whole in one read(2): a
 * pid file, or a file of the kernel's (/proc/<pid>/cmdline,
 * /proc/self/task/<tid>/children), which answers in one read up to a page.
 */
#ifndef RELAY_SUPPORT_READ_SMALL_H
#define RELAY_SUPPORT_READ_SMALL_H

#include <stddef.h>
#include <sys/types.h>

/* Reads at most size - 1 bytes of `path` (opened O_RDONLY | O_CLOEXEC |
 * open_flags, e.g. O_NOFOLLOW) into buf and ends them with a NUL: the
 * count (0 for an empty file), or -1 with errno when it cannot be opened
 * or read (buf then holds ""). size must be at least 1. */
ssize_t rs_read_small(const char *path, int open_flags, char *buf, size_t size);

#endif
