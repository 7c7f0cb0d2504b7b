/*
 * relay-x11shot/png.c — byte buffers, CRC-32, the deflate encoder and PNG chunks (x11shot.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "x11shot.h"

/* ------------------------------------------------------------------------ */
/* Growable byte buffer                                                      */

int buf_reserve(buf_t *b, size_t extra)
{
	if (b->failed)
		return 0;
	if (b->len + extra <= b->cap)
		return 1;
	size_t cap = b->cap ? b->cap : 65536;
	while (cap < b->len + extra) {
		if (cap > SIZE_MAX / 2) {
			b->failed = 1;
			return 0;
		}
		cap *= 2;
	}
	unsigned char *p = realloc(b->data, cap);
	if (!p) {
		b->failed = 1;
		return 0;
	}
	b->data = p;
	b->cap = cap;
	return 1;
}

void buf_put(buf_t *b, const void *data, size_t len)
{
	if (!buf_reserve(b, len))
		return;
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/* ------------------------------------------------------------------------ */
/* CRC-32 (PNG chunks)                                                       */

/* Filled once by crc_init() before any use; read-only afterwards. The
 * program is single-threaded. */
static uint32_t crc_table[256];

void crc_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		crc_table[n] = c;
	}
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = ~crc;
	for (size_t i = 0; i < len; i++)
		crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
	return ~crc;
}

/* ------------------------------------------------------------------------ */
/* Deflate: one fixed-Huffman block, greedy LZ77                               */

static uint32_t reverse_bits(uint32_t code, unsigned len)
{
	uint32_t r = 0;
	for (unsigned i = 0; i < len; i++) {
		r = (r << 1) | (code & 1);
		code >>= 1;
	}
	return r;
}

uint32_t pack_code(uint32_t pattern, unsigned len)
{
	return pattern | ((uint32_t)len << 24);
}

void fixed_codes_init(fixed_codes_t *fc)
{
	/* RFC 1951 §3.2.6. */
	for (unsigned v = 0; v < 256; v++) {
		if (v < 144)
			fc->lit[v] = pack_code(reverse_bits(0x30 + v, 8), 8);
		else
			fc->lit[v] = pack_code(reverse_bits(0x190 + (v - 144), 9), 9);
	}
	fc->end_of_block = pack_code(reverse_bits(0, 7), 7);

	static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
	                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
	static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
	                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
	for (unsigned c = 0; c < 29; c++) {
		unsigned sym = 257 + c;
		uint32_t code;
		unsigned clen;
		if (sym < 280) {
			code = reverse_bits(sym - 256, 7);
			clen = 7;
		} else {
			code = reverse_bits(0xC0 + (sym - 280), 8);
			clen = 8;
		}
		unsigned span = (c == 28) ? 1 : (1u << len_extra[c]);
		for (unsigned e = 0; e < span; e++) {
			unsigned length = len_base[c] + e;
			if (length > LZ_MAX_MATCH || (c == 27 && length == 258))
				continue; /* 258 has its own code */
			fc->len[length] = pack_code(code | (e << clen), clen + len_extra[c]);
		}
	}

	static const uint16_t dist_base[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
	                                       33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
	                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
	for (unsigned c = 0; c < 30; c++) {
		unsigned extra = c < 4 ? 0 : (c / 2) - 1;
		uint32_t code = reverse_bits(c, 5);
		for (unsigned e = 0; e < (1u << extra); e++) {
			unsigned d = dist_base[c] + e;
			if (d <= LZ_WINDOW)
				fc->dist[d] = pack_code(code | (e << 5), 5 + extra);
		}
	}
}

void bits_put(deflater_t *z, uint32_t packed)
{
	z->bits |= (uint64_t)(packed & 0xFFFFFFu) << z->nbits;
	z->nbits += packed >> 24;
	if (z->nbits >= 32) {
		unsigned char b[4] = {(unsigned char)z->bits, (unsigned char)(z->bits >> 8),
		                      (unsigned char)(z->bits >> 16), (unsigned char)(z->bits >> 24)};
		buf_put(z->out, b, 4);
		z->bits >>= 32;
		z->nbits -= 32;
	}
}

void bits_flush(deflater_t *z)
{
	while (z->nbits > 0) {
		unsigned char b = (unsigned char)z->bits;
		buf_put(z->out, &b, 1);
		z->bits >>= 8;
		z->nbits = z->nbits > 8 ? z->nbits - 8 : 0;
	}
}

static uint32_t load32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static unsigned first_diff_byte(uint64_t x)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (unsigned)__builtin_ctzll(x) >> 3;
#elif defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	return (unsigned)__builtin_clzll(x) >> 3;
#else
	unsigned char a[8];
	memcpy(a, &x, 8);
	unsigned i = 0;
	while (i < 8 && a[i] == 0)
		i++;
	return i;
#endif
}

/* Length of the common prefix of a and b, at most `limit`. */
static size_t match_length(const unsigned char *a, const unsigned char *b, size_t limit)
{
	size_t n = 0;
	while (n + 8 <= limit) {
		uint64_t x = load64(a + n) ^ load64(b + n);
		if (x)
			return n + first_diff_byte(x);
		n += 8;
	}
	while (n < limit && a[n] == b[n])
		n++;
	return n;
}

static uint32_t lz_hash(uint32_t v)
{
	return (v * 2654435761u) >> (32 - LZ_HASH_BITS);
}

/* Codes data[z->pos - z->base .. avail) (keeping LZ_LOOKAHEAD bytes back
 * unless `final`). data[0] is the stream's byte z->base; the LZ_WINDOW
 * bytes before z->pos must be in data (the encoder slides the window and
 * raises z->base). Positions in z->head are of the whole stream. */
void deflate_run(deflater_t *z, const unsigned char *data, size_t avail, int final)
{
	const fixed_codes_t *fc = z->codes;
	size_t base = z->base;
	size_t i = z->pos - base;
	size_t stop = final ? avail : (avail > LZ_LOOKAHEAD ? avail - LZ_LOOKAHEAD : 0);
	size_t hash_stop = avail >= 4 ? avail - 3 : 0; /* positions with 4 readable bytes */
	while (i < stop) {
		size_t best_len = 0, best_dist = 0;
		if (i < hash_stop) {
			uint32_t v = load32(data + i);
			uint32_t h = lz_hash(v);
			size_t limit = avail - i < LZ_MAX_MATCH ? avail - i : LZ_MAX_MATCH;
			size_t dists[3];
			size_t last = z->head[h];
			dists[0] = last >= base && last - base < i ? i - (last - base) : 0;
			dists[1] = i >= 3 ? 3 : 0;                       /* the pixel to the left */
			dists[2] = i >= z->row_bytes ? z->row_bytes : 0; /* the pixel above */
			z->head[h] = (uint32_t)(i + base);
			for (int k = 0; k < 3; k++) {
				size_t d = dists[k];
				if (d == 0 || d > LZ_WINDOW || load32(data + i - d) != v)
					continue;
				size_t len = match_length(data + i - d, data + i, limit);
				if (len > best_len) {
					best_len = len;
					best_dist = d;
					if (len == limit)
						break;
				}
			}
		}
		if (best_len >= LZ_MIN_MATCH) {
			bits_put(z, fc->len[best_len]);
			bits_put(z, fc->dist[best_dist]);
			/* Index a few positions inside the match so later data
			 * can refer back into it. */
			size_t end = i + best_len;
			size_t step = best_len > 32 ? best_len / 8 : 1;
			for (size_t p = i + 1; p < end && p < hash_stop; p += step)
				z->head[lz_hash(load32(data + p))] = (uint32_t)(p + base);
			i = end;
		} else {
			bits_put(z, fc->lit[data[i]]);
			i++;
		}
	}
	z->pos = i + base;
}

/* ------------------------------------------------------------------------ */
/* PNG container                                                             */

void png_chunk(buf_t *out, const char *type, const unsigned char *data, size_t len)
{
	unsigned char head[8];
	put_be32(head, (uint32_t)len);
	memcpy(head + 4, type, 4);
	buf_put(out, head, 8);
	buf_put(out, data, len);
	uint32_t crc = crc_update(0, (const unsigned char *)type, 4);
	crc = crc_update(crc, data, len);
	unsigned char tail[4];
	put_be32(tail, crc);
	buf_put(out, tail, 4);
}

/* The PNG: signature, IHDR (8-bit RGB), the zlib stream zout cut into
 * IDAT chunks, IEND; png->failed on allocation failure. */
void png_assemble(buf_t *png, const buf_t *zout, unsigned width, unsigned height)
{
	static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	unsigned char ihdr[13];
	put_be32(ihdr, width);
	put_be32(ihdr + 4, height);
	ihdr[8] = 8;  /* bit depth */
	ihdr[9] = 2;  /* RGB */
	ihdr[10] = 0; /* deflate */
	ihdr[11] = 0; /* adaptive filtering */
	ihdr[12] = 0; /* not interlaced */
	buf_reserve(png, zout->len + zout->len / IDAT_MAX_BYTES * 12 + 128);
	buf_put(png, signature, 8);
	png_chunk(png, "IHDR", ihdr, sizeof ihdr);
	for (size_t off = 0; off < zout->len || off == 0; off += IDAT_MAX_BYTES) {
		size_t n = zout->len - off < IDAT_MAX_BYTES ? zout->len - off : IDAT_MAX_BYTES;
		png_chunk(png, "IDAT", zout->data + off, n);
		if (n == 0)
			break;
	}
	png_chunk(png, "IEND", NULL, 0);
}
