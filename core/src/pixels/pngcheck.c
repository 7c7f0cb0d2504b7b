/*
 * pixels/pngcheck.c — see pngcheck.h.
 */
#include "pixels/pngcheck.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "relay_support/adler32.h"

/* The largest side libpng is allowed (pngcodec.c's png_set_user_limits). */
#define PNGCHECK_MAX_SIDE_PX 32768u

/* Inflated bytes looked at per round: the filter bytes and the Adler-32 are taken from it while it
 * is still in the cache. */
#define PNGCHECK_WINDOW_BYTES (256u * 1024u)

static uint32_t be32(const unsigned char *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static bool four_letters(const unsigned char *type)
{
	for (int i = 0; i < 4; i++)
		if (!((type[i] >= 'A' && type[i] <= 'Z') || (type[i] >= 'a' && type[i] <= 'z')))
			return false;
	return true;
}

/* The concatenated IDAT data of a plain PNG (malloc'd, *z_len bytes) and its IHDR, or NULL. */
static unsigned char *plain_stream(const unsigned char *data, size_t len, pngcheck_image *out, size_t *z_len)
{
	static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
	size_t pos = 8, total = 0, first_idat = 0;
	int idat_state = 0; /* 0 before the IDATs, 1 in them, 2 after them */
	unsigned char *z = NULL;
	if (len < 8 + 25 || memcmp(data, signature, 8) != 0 || be32(data + 8) != 13 ||
	    memcmp(data + 12, "IHDR", 4) != 0)
		return NULL;
	{
		const unsigned char *h = data + 16;
		uint32_t w = be32(h), ht = be32(h + 4);
		if (w == 0 || ht == 0 || w > PNGCHECK_MAX_SIDE_PX || ht > PNGCHECK_MAX_SIDE_PX || h[8] != 8 ||
		    (h[9] != 2 && h[9] != 6) || h[10] != 0 || h[11] != 0 || h[12] != 0)
			return NULL;
		out->width = w;
		out->height = ht;
		out->channels = h[9] == 2 ? 3 : 4;
	}
	/* Every chunk after IHDR: sizes first, so the copy below stays inside data. */
	for (pos = 8 + 25;;) {
		if (len - pos < 12)
			return NULL;
		uint32_t n = be32(data + pos);
		const unsigned char *type = data + pos + 4;
		if (n > len - pos - 12 || !four_letters(type))
			return NULL;
		if (memcmp(type, "IEND", 4) == 0) {
			if (n != 0 || idat_state == 0 || pos + 12 != len)
				return NULL;
			break;
		}
		if (memcmp(type, "IDAT", 4) == 0) {
			if (idat_state == 2)
				return NULL;
			if (idat_state == 0)
				first_idat = pos;
			idat_state = 1;
			total += n;
		} else if ((type[0] & 0x20) == 0 || memcmp(type, "tRNS", 4) == 0 || idat_state == 1) {
			return NULL; /* critical (PLTE, unknown), tRNS, or ancillary after the data */
		}
		pos += 12 + (size_t)n;
	}
	z = malloc(total ? total : 1);
	if (z == NULL)
		return NULL;
	*z_len = 0;
	for (pos = first_idat; memcmp(data + pos + 4, "IDAT", 4) == 0; pos += 12 + (size_t)be32(data + pos)) {
		memcpy(z + *z_len, data + pos + 8, be32(data + pos));
		*z_len += be32(data + pos);
	}
	return z;
}

/* True when the zlib stream z[0 .. z_len) inflates to exactly `rows` rows of `row_bytes` bytes each
 * beginning with a filter byte of 0 to 4, and ends with their Adler-32 and nothing after it. */
static bool stream_sound(unsigned char *z, size_t z_len, uint32_t rows, size_t row_bytes)
{
	const uint64_t want = (uint64_t)rows * row_bytes;
	uint64_t produced = 0, next_filter = 0;
	uint32_t adler = 1;
	unsigned char *window = NULL;
	z_stream s;
	bool sound = false;
	int rc;
	memset(&s, 0, sizeof s);
	/* RFC 1950 §2.2: deflate, a window of at most 32 KiB, no preset dictionary, FCHECK. */
	if (z_len < 2 + 4 || (z[0] & 0x0F) != 8 || (z[0] >> 4) > 7 || (z[1] & 0x20) != 0 ||
	    ((unsigned)z[0] * 256u + z[1]) % 31u != 0)
		return false;
	window = malloc(PNGCHECK_WINDOW_BYTES);
	if (window == NULL || inflateInit2(&s, -15) != Z_OK) /* raw deflate: the check is ours */
		goto cleanup;
	s.next_in = z + 2;
	s.avail_in = (uInt)(z_len - 2);
	do {
		s.next_out = window;
		s.avail_out = PNGCHECK_WINDOW_BYTES;
		rc = inflate(&s, Z_NO_FLUSH);
		if (rc != Z_OK && rc != Z_STREAM_END)
			break;
		size_t got = PNGCHECK_WINDOW_BYTES - s.avail_out;
		if (got > want - produced)
			break; /* more image data than rows */
		for (; next_filter < produced + got; next_filter += row_bytes)
			if (window[next_filter - produced] > 4)
				goto cleanup;
		adler = rs_adler32(adler, window, got);
		produced += got;
		if (rc == Z_STREAM_END) {
			sound = produced == want && s.avail_in == 4 && be32(s.next_in) == adler;
			break;
		}
		if (got == 0 && s.avail_in == 0)
			break; /* the stream ends early */
	} while (1);
cleanup:
	inflateEnd(&s);
	free(window);
	return sound;
}

bool pngcheck_plain_sound(const unsigned char *data, size_t len, pngcheck_image *out)
{
	size_t z_len = 0;
	unsigned char *z = plain_stream(data, len, out, &z_len);
	bool sound = z && z_len <= UINT32_MAX &&
	             stream_sound(z, z_len, out->height, 1 + (size_t)out->width * out->channels);
	free(z);
	return sound;
}
