/*
 * ssh_sha256.h — incremental SHA-256 (OpenSSL libcrypto) for hashing the
 * bytes of a transfer while they stream, on the host side.
 */
#ifndef TRANSFER_SSH_SHA256_H
#define TRANSFER_SSH_SHA256_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ssh_sha256 {
	void *md_ctx; /* EVP_MD_CTX */
} ssh_sha256;

/* false when libcrypto could not set up a context. */
bool ssh_sha256_begin(ssh_sha256 *h);
void ssh_sha256_update(ssh_sha256 *h, const void *data, size_t len);
/* Writes 64 lowercase hex digits and a NUL, and releases the context. */
void ssh_sha256_end(ssh_sha256 *h, char hex_out[65]);
/* Releases the context without a result (safe after end()). */
void ssh_sha256_discard(ssh_sha256 *h);

#endif
