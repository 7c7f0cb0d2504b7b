/* sha256.c — streaming SHA-256 over libcrypto (relay_kit/sha256.h). */
#include "relay_kit/sha256.h"

#include <openssl/evp.h>

bool rk_sha256_begin(rk_sha256 *h)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		h->md_ctx = NULL;
		return false;
	}
	h->md_ctx = ctx;
	return true;
}

void rk_sha256_update(rk_sha256 *h, const void *data, size_t len)
{
	if (h->md_ctx && len)
		EVP_DigestUpdate(h->md_ctx, data, len);
}

void rk_sha256_end(rk_sha256 *h, char hex_out[65])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	hex_out[0] = '\0';
	if (h->md_ctx == NULL)
		return;
	if (EVP_DigestFinal_ex(h->md_ctx, md, &md_len) == 1 && md_len == 32) {
		for (unsigned i = 0; i < 32; i++) {
			hex_out[2 * i] = hex[md[i] >> 4];
			hex_out[2 * i + 1] = hex[md[i] & 15];
		}
		hex_out[64] = '\0';
	}
	rk_sha256_discard(h);
}

void rk_sha256_discard(rk_sha256 *h)
{
	EVP_MD_CTX_free(h->md_ctx);
	h->md_ctx = NULL;
}
