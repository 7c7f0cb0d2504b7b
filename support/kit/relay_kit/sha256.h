/*
 * relay_kit/sha256.h — streaming SHA-256 (OpenSSL libcrypto) for hashing
 * the bytes of a transfer while they pass, on the host side. The host
 * table's sha256_buffer hashes a whole buffer; this is its streaming half.
 */
#ifndef RELAY_KIT_SHA256_H
#define RELAY_KIT_SHA256_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rk_sha256 {
	void *md_ctx; /* EVP_MD_CTX */
} rk_sha256;

/* false when libcrypto could not set up a context. */
bool rk_sha256_begin(rk_sha256 *h);
void rk_sha256_update(rk_sha256 *h, const void *data, size_t len);
/* Writes 64 lowercase hex digits and a NUL, and releases the context. */
void rk_sha256_end(rk_sha256 *h, char hex_out[65]);
/* Releases the context without a result (safe after end()). */
void rk_sha256_discard(rk_sha256 *h);

#endif
