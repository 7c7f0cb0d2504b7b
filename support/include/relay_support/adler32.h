/*
 * relay_support/adler32.h — Adler-32 (RFC 1950 §8.2, the zlib stream's check value), on SSE2
 * where the compiler targets it (x86-64's baseline): the capture program writes it after every
 * PNG it encodes and the relay checks it in every PNG it is sent (pixels/pngcheck.h).
 */
#ifndef RELAY_SUPPORT_ADLER32_H
#define RELAY_SUPPORT_ADLER32_H

#include <stddef.h>
#include <stdint.h>

/* The Adler-32 of what `adler` covered followed by p[0 .. len): 1 for nothing yet, so
 * rs_adler32(1, p, n) is the check value of p alone, and feeding a buffer in pieces gives the
 * value of the whole. No state, no failure; p may be NULL when len is 0. Built with
 * RS_ADLER32_SCALAR defined, the SSE2 path is left out (the tests compare the two). */
uint32_t rs_adler32(uint32_t adler, const unsigned char *p, size_t len);

#endif
