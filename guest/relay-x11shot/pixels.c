/*
 * relay-x11shot/pixels.c — pixel formats to RGB rows and the row filter (x11shot.h).
 *
 * The filter runs on SSE2 on x86-64 (part of the architecture's baseline:
 * no run-time check), sixteen bytes at a time; elsewhere, and for the last
 * bytes of a row, the same arithmetic runs byte by byte. Both give
 * identical bytes (tests/unit/guest/relay-x11shot/test_relay_x11shot_encode.c
 * compares them with the formulas).
 */
#define _POSIX_C_SOURCE 200809L

#include "x11shot.h"

#if defined(__SSE2__) && !defined(X11SHOT_SCALAR)
#include <emmintrin.h>
#define X11SHOT_SSE2 1
#endif

/* ------------------------------------------------------------------------ */
/* Pixel conversion                                                          */

channel_t channel_of(uint32_t mask)
{
	channel_t c = {0, 0};
	if (!mask)
		return c;
	while (!(mask & 1)) {
		mask >>= 1;
		c.shift++;
	}
	while (mask & 1) {
		mask >>= 1;
		c.bits++;
	}
	return c;
}

static unsigned char channel_value(uint32_t pixel, channel_t c)
{
	uint32_t v = (pixel >> c.shift) & ((c.bits >= 32) ? 0xFFFFFFFFu : ((1u << c.bits) - 1));
	if (c.bits == 8)
		return (unsigned char)v;
	if (c.bits > 8)
		return (unsigned char)(v >> (c.bits - 8));
	if (c.bits == 0)
		return 0;
	return (unsigned char)((v * 255u + ((1u << c.bits) - 1) / 2) / ((1u << c.bits) - 1));
}

/* 32 bpp LSB-first pixels with masks ff0000/ff00/ff (what Xvfb and most
 * X servers serve): bytes B, G, R, pad to R, G, B. On a little-endian host
 * four pixels become three 32-bit words, otherwise byte by byte. */
static void convert_bgrx(const unsigned char *src, unsigned width, unsigned char *rgb)
{
	unsigned x = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	for (; x + 4 <= width; x += 4) {
		uint32_t p[4], q[4], w[3];
		memcpy(p, src + 4 * (size_t)x, 16);
		for (int k = 0; k < 4; k++) /* 0x00RRGGBB to the bytes R, G, B, 0 */
			q[k] = ((p[k] >> 16) & 0xFFu) | (p[k] & 0xFF00u) | ((p[k] & 0xFFu) << 16);
		w[0] = q[0] | (q[1] << 24);
		w[1] = (q[1] >> 8) | (q[2] << 16);
		w[2] = (q[2] >> 16) | (q[3] << 8);
		memcpy(rgb + 3 * (size_t)x, w, 12);
	}
#endif
	for (; x < width; x++) {
		rgb[3 * x] = src[4 * x + 2];
		rgb[3 * x + 1] = src[4 * x + 1];
		rgb[3 * x + 2] = src[4 * x];
	}
}

/* Converts one ZPixmap scanline to RGB bytes in rgb[0 .. 3*width). */
void convert_row(const pixfmt_t *pf, const unsigned char *src, unsigned width, unsigned char *rgb)
{
	if (pf->fast_bgrx) {
		convert_bgrx(src, width, rgb);
		return;
	}
	unsigned bpp = pf->bytes_per_pixel;
	for (unsigned x = 0; x < width; x++) {
		const unsigned char *p = src + (size_t)x * bpp;
		uint32_t pixel = 0;
		if (pf->msb_first) {
			for (unsigned k = 0; k < bpp; k++)
				pixel = (pixel << 8) | p[k];
		} else {
			for (unsigned k = bpp; k-- > 0;)
				pixel = (pixel << 8) | p[k];
		}
		rgb[3 * x] = channel_value(pixel, pf->r);
		rgb[3 * x + 1] = channel_value(pixel, pf->g);
		rgb[3 * x + 2] = channel_value(pixel, pf->b);
	}
}

/* ------------------------------------------------------------------------ */
/* The row filter                                                            */

/* Each row is filtered with Up (type 2: the byte above subtracted) or Sub
 * (type 1: the byte one pixel to the left), whichever leaves the smaller
 * sum of |filtered byte| (as signed bytes), the usual PNG heuristic. Both
 * undo in one cheap pass; Paeth (type 4), which this encoder used before,
 * made files 1.6% smaller on desktop pictures but costs a decoder 2.5 times
 * the instructions (libpng: 121M against 49M at 1280x800), and the relay
 * decodes every image it attaches in full (spec/images.md §9.3 step 2). */

#ifdef X11SHOT_SSE2
/* min(v, 256 - v) of each byte, summed. */
static uint64_t msad_sse2(__m128i v, __m128i zero)
{
	__m128i m = _mm_min_epu8(v, _mm_sub_epi8(zero, v));
	__m128i s = _mm_sad_epu8(m, zero);
	return (uint64_t)_mm_cvtsi128_si32(s) + (uint64_t)_mm_cvtsi128_si32(_mm_srli_si128(s, 8));
}
#endif

static unsigned msad_byte(unsigned char v)
{
	return v < 128 ? v : 256u - v;
}

/* Writes one PNG row: dst[0] the filter type, then the n filtered bytes of
 * `cur` against `prev`, the previous row's RGB (all zeros for the first
 * row). `sub` (n + 1 bytes) is scratch. */
void filter_row(const unsigned char *cur, const unsigned char *prev, size_t n, unsigned char *dst,
                unsigned char *sub)
{
	uint64_t cost_up = 0, cost_sub = 0;
	unsigned char *up = dst + 1, *left = sub + 1;
	size_t i = 0;
	for (; i < 3 && i < n; i++) {
		up[i] = (unsigned char)(cur[i] - prev[i]);
		left[i] = cur[i];
		cost_up += msad_byte(up[i]);
		cost_sub += msad_byte(left[i]);
	}
#ifdef X11SHOT_SSE2
	__m128i zero = _mm_setzero_si128();
	for (; i + 16 <= n; i += 16) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(cur + i));
		__m128i u = _mm_sub_epi8(x, _mm_loadu_si128((const __m128i *)(const void *)(prev + i)));
		__m128i l = _mm_sub_epi8(x, _mm_loadu_si128((const __m128i *)(const void *)(cur + i - 3)));
		_mm_storeu_si128((__m128i *)(void *)(up + i), u);
		_mm_storeu_si128((__m128i *)(void *)(left + i), l);
		cost_up += msad_sse2(u, zero);
		cost_sub += msad_sse2(l, zero);
	}
#endif
	for (; i < n; i++) {
		up[i] = (unsigned char)(cur[i] - prev[i]);
		left[i] = (unsigned char)(cur[i] - cur[i - 3]);
		cost_up += msad_byte(up[i]);
		cost_sub += msad_byte(left[i]);
	}
	dst[0] = 2;
	if (cost_sub < cost_up) {
		dst[0] = 1;
		memcpy(up, left, n);
	}
}
