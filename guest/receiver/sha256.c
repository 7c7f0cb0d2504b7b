/*
 * receiver/sha256.c — see sha256.h.
 */
#include "sha256.h"

#include <string.h>

static const uint32_t k_round[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(sha256_state *st, const unsigned char *p)
{
	uint32_t w[64];
	uint32_t a, b, c, d, e, f, g, h;
	int i;
	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
		       (uint32_t)p[4 * i + 3];
	for (i = 16; i < 64; i++) {
		uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = st->h[0];
	b = st->h[1];
	c = st->h[2];
	d = st->h[3];
	e = st->h[4];
	f = st->h[5];
	g = st->h[6];
	h = st->h[7];
	for (i = 0; i < 64; i++) {
		uint32_t s1 = ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = h + s1 + ch + k_round[i] + w[i];
		uint32_t s0 = ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = s0 + maj;
		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	st->h[0] += a;
	st->h[1] += b;
	st->h[2] += c;
	st->h[3] += d;
	st->h[4] += e;
	st->h[5] += f;
	st->h[6] += g;
	st->h[7] += h;
}

void sha256_begin(sha256_state *st)
{
	static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	memcpy(st->h, init, sizeof(init));
	st->total_bytes = 0;
	st->block_len = 0;
}

void sha256_feed(sha256_state *st, const void *data, size_t len)
{
	const unsigned char *p = data;
	st->total_bytes += len;
	if (st->block_len) {
		size_t take = 64 - st->block_len;
		if (take > len)
			take = len;
		memcpy(st->block + st->block_len, p, take);
		st->block_len += take;
		p += take;
		len -= take;
		if (st->block_len == 64) {
			sha256_block(st, st->block);
			st->block_len = 0;
		}
	}
	while (len >= 64) {
		sha256_block(st, p);
		p += 64;
		len -= 64;
	}
	if (len) {
		memcpy(st->block, p, len);
		st->block_len = len;
	}
}

void sha256_end_hex(sha256_state *st, char hex[SHA256_HEX_CHARS + 1])
{
	static const char digits[] = "0123456789abcdef";
	uint64_t bits = st->total_bytes * 8;
	unsigned char pad = 0x80;
	unsigned char zero = 0;
	unsigned char len_be[8];
	int i;
	sha256_feed(st, &pad, 1);
	while (st->block_len != 56)
		sha256_feed(st, &zero, 1);
	for (i = 0; i < 8; i++)
		len_be[i] = (unsigned char)(bits >> (56 - 8 * i));
	sha256_feed(st, len_be, 8);
	for (i = 0; i < 32; i++) {
		unsigned char byte = (unsigned char)(st->h[i / 4] >> (24 - 8 * (i % 4)));
		hex[2 * i] = digits[byte >> 4];
		hex[2 * i + 1] = digits[byte & 15];
	}
	hex[64] = '\0';
}

void sha256_hex_of(const void *data, size_t len, char hex[SHA256_HEX_CHARS + 1])
{
	sha256_state st;
	sha256_begin(&st);
	sha256_feed(&st, data, len);
	sha256_end_hex(&st, hex);
}

int sha256_hex_ok(const char *text)
{
	size_t i;
	if (!text || strlen(text) != 64)
		return 0;
	for (i = 0; i < 64; i++) {
		char c = text[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	return 1;
}
