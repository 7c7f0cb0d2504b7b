/*
 * relay_kit/durable.h — replacing a file whole, so a reader sees the old
 * contents or the new, never a part: the bytes go to "<path>.tmp-<salt>"
 * (O_EXCL, O_NOFOLLOW, `mode`), are flushed, and the temporary file is
 * renamed over `path`. With RK_DURABLE_SYNC the file and then its folder
 * are fsync'ed, so the new contents survive a crash of the machine.
 */
#ifndef RELAY_KIT_DURABLE_H
#define RELAY_KIT_DURABLE_H

#include <stddef.h>
#include <sys/types.h>

enum {
	RK_DURABLE_SYNC = 1u << 0, /* fsync the file and its folder */
};

/* 0, or the errno of the first failure (the temporary file is removed, and
 * `path` keeps what it held). Unknown flags: EINVAL. */
int rk_write_durable(const char *path, const void *data, size_t len, mode_t mode, unsigned flags);

#endif
