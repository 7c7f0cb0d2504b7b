/*
 * util/sha256.h — SHA-256 (OpenSSL libcrypto) as lowercase hex.
 */
#ifndef RELAY_UTIL_SHA256_H
#define RELAY_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "relay/status.h"

#define SHA256_HEX_LEN 64

typedef struct sha256_ctx sha256_ctx;

/* Incremental hashing. sha256_new returns NULL on allocation failure;
 * sha256_final writes 64 hex digits + NUL and frees the context. */
sha256_ctx *sha256_new(void);
void sha256_update(sha256_ctx *ctx, const void *data, size_t len);
void sha256_final(sha256_ctx *ctx, char hex_out[SHA256_HEX_LEN + 1]);
void sha256_abort(sha256_ctx *ctx);

void sha256_buffer_hex(const void *data, size_t len, char hex_out[SHA256_HEX_LEN + 1]);

/* Hashes a regular file, opened O_NOFOLLOW, in 8 MiB reads. A symbolic
 * link or special file is RELAY_E_UNSAFE_PATH; a file whose size changes
 * while it is read is RELAY_E_INTEGRITY. */
relay_status sha256_file_hex(const char *path, char hex_out[SHA256_HEX_LEN + 1], uint64_t *bytes_out,
                             relay_error *err);
/* The same for an open descriptor (read from its current offset to EOF). */
relay_status sha256_fd_hex(int fd, char hex_out[SHA256_HEX_LEN + 1], uint64_t *bytes_out, relay_error *err);

/* True when `text` is exactly 64 lowercase hex digits. */
int sha256_hex_valid(const char *text);

#endif
