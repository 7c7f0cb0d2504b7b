/*
 * relay_support/numfile.h — a small file of whole numbers (a lease's
 * "expires" file: "<expiresAtMs> <graceMs> [<backstopMs>]"), read whole.
 */
#ifndef RELAY_SUPPORT_NUMFILE_H
#define RELAY_SUPPORT_NUMFILE_H

/* Reads fd (at most 127 bytes; the caller closes it) and parses its first
 * `count` (1 to 8) whole numbers, separated by white space, into out.
 * 0, or -1 when it cannot be read or holds fewer (out then untouched). */
int rs_read_numbers(int fd, long long *out, int count);

#endif
