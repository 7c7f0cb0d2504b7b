/*
 * receiver/sha256.h — a small SHA-256 (FIPS 180-4) for the guest receiver,
 * which links nothing beyond libc.
 *
 * Two block functions compute the same digest: a portable C one, and on
 * x86-64 (built with GCC or clang) one using the CPU's SHA extensions
 * (SHA-NI, with SSE4.1 and SSSE3), several times faster. sha256_begin picks
 * the accelerated one when CPUID reports all three extensions, unless the
 * environment variable
 *
 *     RELAY_RECEIVER_SHA256=portable
 *
 * forces the portable code (for tests, and to rule the accelerated code out
 * when diagnosing a guest). Any other value, or none, means automatic. The
 * variable is read by every sha256_begin, so it applies to each new hash.
 * Other architectures and compilers always use the portable code.
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
	/* Set by sha256_begin: 1 when this hash runs on the x86 SHA
	 * extensions, 0 for the portable code. */
	int x86_sha;
} sha256_state;

/* Starts a hash and chooses its block function (see above). */
void sha256_begin(sha256_state *st);
void sha256_feed(sha256_state *st, const void *data, size_t len);
/* Writes 64 lowercase hex digits and a NUL. */
void sha256_end_hex(sha256_state *st, char hex[SHA256_HEX_CHARS + 1]);
void sha256_hex_of(const void *data, size_t len, char hex[SHA256_HEX_CHARS + 1]);
/* True when text is exactly 64 lowercase hex digits. */
int sha256_hex_ok(const char *text);

#endif
