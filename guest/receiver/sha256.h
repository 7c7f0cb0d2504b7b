/*
 * receiver/sha256.h — a small SHA-256 (FIPS 180-4) for the guest receiver,
 * which links nothing beyond libc.
 */
#ifndef RECEIVER_SHA256_H
#define RECEIVER_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_HEX_CHARS 64

typedef struct sha256_state {
	uint32_t h[8];
	uint64_t total_bytes;
	unsigned char block[64];
	size_t block_len;
} sha256_state;

void sha256_begin(sha256_state *st);
void sha256_feed(sha256_state *st, const void *data, size_t len);
/* Writes 64 lowercase hex digits and a NUL. */
void sha256_end_hex(sha256_state *st, char hex[SHA256_HEX_CHARS + 1]);
void sha256_hex_of(const void *data, size_t len, char hex[SHA256_HEX_CHARS + 1]);
/* True when text is exactly 64 lowercase hex digits. */
int sha256_hex_ok(const char *text);

#endif
