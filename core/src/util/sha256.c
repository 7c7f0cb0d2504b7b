#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"

struct sha256_ctx {
	EVP_MD_CTX *md;
};

sha256_ctx *sha256_new(void)
{
	sha256_ctx *ctx = calloc(1, sizeof *ctx);
	if (ctx == NULL)
		return NULL;
	ctx->md = EVP_MD_CTX_new();
	if (ctx->md == NULL || EVP_DigestInit_ex(ctx->md, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx->md);
		free(ctx);
		return NULL;
	}
	return ctx;
}

void sha256_update(sha256_ctx *ctx, const void *data, size_t len)
{
	EVP_DigestUpdate(ctx->md, data, len);
}

static void to_hex(const unsigned char *digest, char hex_out[SHA256_HEX_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		hex_out[2 * i] = hex[digest[i] >> 4];
		hex_out[2 * i + 1] = hex[digest[i] & 15];
	}
	hex_out[SHA256_HEX_LEN] = '\0';
}

void sha256_final(sha256_ctx *ctx, char hex_out[SHA256_HEX_LEN + 1])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_DigestFinal_ex(ctx->md, digest, &len);
	to_hex(digest, hex_out);
	sha256_abort(ctx);
}

void sha256_abort(sha256_ctx *ctx)
{
	if (ctx == NULL)
		return;
	EVP_MD_CTX_free(ctx->md);
	free(ctx);
}

void sha256_buffer_hex(const void *data, size_t len, char hex_out[SHA256_HEX_LEN + 1])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	EVP_Digest(data, len, digest, &dlen, EVP_sha256(), NULL);
	to_hex(digest, hex_out);
}

relay_status sha256_fd_hex(int fd, char hex_out[SHA256_HEX_LEN + 1], uint64_t *bytes_out, relay_error *err)
{
	enum { CHUNK = 8 << 20 };
	relay_status status = RELAY_OK;
	unsigned char *buf = malloc(CHUNK);
	sha256_ctx *ctx = sha256_new();
	uint64_t total = 0;
	if (buf == NULL || ctx == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory while hashing");
		goto cleanup;
	}
	for (;;) {
		ssize_t n = read(fd, buf, CHUNK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			status = relay_error_set(err, RELAY_E_IO, errno, "read failed while hashing: %s",
			                         strerror(errno));
			goto cleanup;
		}
		if (n == 0)
			break;
		sha256_update(ctx, buf, (size_t)n);
		total += (uint64_t)n;
	}
	sha256_final(ctx, hex_out);
	ctx = NULL;
	if (bytes_out)
		*bytes_out = total;
cleanup:
	sha256_abort(ctx);
	free(buf);
	return status;
}

relay_status sha256_file_hex(const char *path, char hex_out[SHA256_HEX_LEN + 1], uint64_t *bytes_out,
                             relay_error *err)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ELOOP)
			return relay_error_set(err, RELAY_E_UNSAFE_PATH, errno, "symlink %s", path);
		return relay_error_set(err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_IO, errno,
		                       "cannot open %s: %s", path, strerror(errno));
	}
	relay_status status;
	struct stat before, after;
	if (fstat(fd, &before) != 0) {
		status = relay_error_set(err, RELAY_E_IO, errno, "cannot stat %s", path);
		goto cleanup;
	}
	if (!S_ISREG(before.st_mode)) {
		status = relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "special file %s", path);
		goto cleanup;
	}
	uint64_t bytes = 0;
	status = sha256_fd_hex(fd, hex_out, &bytes, err);
	if (status != RELAY_OK)
		goto cleanup;
	if (fstat(fd, &after) != 0 || after.st_size != before.st_size || (uint64_t)after.st_size != bytes ||
	    after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
	    after.st_mtim.tv_nsec != before.st_mtim.tv_nsec) {
		status = relay_error_set(err, RELAY_E_INTEGRITY, 0, "source changed while hashing: %s", path);
		goto cleanup;
	}
	if (bytes_out)
		*bytes_out = bytes;
cleanup:
	close(fd);
	return status;
}

int sha256_hex_valid(const char *text)
{
	if (text == NULL || strlen(text) != SHA256_HEX_LEN)
		return 0;
	for (int i = 0; i < SHA256_HEX_LEN; i++) {
		char c = text[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	return 1;
}
