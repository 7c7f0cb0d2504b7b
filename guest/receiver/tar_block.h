/*
 * receiver/tar_block.h — the block size and limits tar_write.c and
 * tar_read.c share (spec/evidence.md §5.3).
 */
#ifndef RECEIVER_TAR_BLOCK_H
#define RECEIVER_TAR_BLOCK_H

#include <stdint.h>

#define BLOCK           512u
#define PAX_MAX_BYTES   (64u * 1024u)
#define INDEX_MAX_BYTES (32u * 1024u * 1024u)
#define COPY_CHUNK      (1024u * 1024u)

/* n rounded up to whole blocks. */
static inline uint64_t pad512(uint64_t n)
{
	return (n + BLOCK - 1) / BLOCK * BLOCK;
}

#endif
