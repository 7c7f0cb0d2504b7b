/*
 * relay-x11shot/pixels.c — pixel formats to RGB rows and the Paeth filter (x11shot.h).
 *
 * The filter is the encoder's largest cost (about three quarters of the
 * instructions of a 1280x800 shot when done byte by byte), so on x86-64 it
 * runs on SSE2 (part of the architecture's baseline: no run-time check),
 * sixteen bytes at a time; elsewhere, and for the last bytes of a row, the
 * same arithmetic runs byte by byte. Both give identical bytes
 * (tests/unit/guest/relay-x11shot/test_relay_x11shot_encode.c compares them).
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
/* The Paeth filter                                                          */

#ifdef X11SHOT_SSE2
/* paeth(a, b, c) of eight 16-bit lanes holding bytes. */
static __m128i paeth_lanes(__m128i a, __m128i b, __m128i c)
{
	__m128i zero = _mm_setzero_si128();
	__m128i p1 = _mm_sub_epi16(b, c), p2 = _mm_sub_epi16(a, c);
	__m128i p3 = _mm_add_epi16(p1, p2);
	__m128i pa = _mm_max_epi16(p1, _mm_sub_epi16(zero, p1));
	__m128i pb = _mm_max_epi16(p2, _mm_sub_epi16(zero, p2));
	__m128i pc = _mm_max_epi16(p3, _mm_sub_epi16(zero, p3));
	/* a when pa <= pb and pa <= pc; else b when pb <= pc; else c */
	__m128i not_a = _mm_or_si128(_mm_cmpgt_epi16(pa, pb), _mm_cmpgt_epi16(pa, pc));
	__m128i not_b = _mm_cmpgt_epi16(pb, pc);
	__m128i bc = _mm_or_si128(_mm_andnot_si128(not_b, b), _mm_and_si128(not_b, c));
	return _mm_or_si128(_mm_andnot_si128(not_a, a), _mm_and_si128(not_a, bc));
}

/* out[i] for i in [3, end) with end - 3 a multiple of 16. */
static void paeth_sse2(const unsigned char *cur, const unsigned char *prev, size_t end, unsigned char *out)
{
	__m128i zero = _mm_setzero_si128();
	for (size_t i = 3; i < end; i += 16) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(cur + i));
		__m128i a = _mm_loadu_si128((const __m128i *)(const void *)(cur + i - 3));
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(prev + i));
		__m128i c = _mm_loadu_si128((const __m128i *)(const void *)(prev + i - 3));
		__m128i lo = paeth_lanes(_mm_unpacklo_epi8(a, zero), _mm_unpacklo_epi8(b, zero),
		                         _mm_unpacklo_epi8(c, zero));
		__m128i hi = paeth_lanes(_mm_unpackhi_epi8(a, zero), _mm_unpackhi_epi8(b, zero),
		                         _mm_unpackhi_epi8(c, zero));
		_mm_storeu_si128((__m128i *)(void *)(out + i), _mm_sub_epi8(x, _mm_packus_epi16(lo, hi)));
	}
}
#endif

/* Writes one PNG row with the Paeth filter (type 4): dst[0] = 4, then
 * cur[i] - paeth(left, up, up-left). `prev` is the previous row's RGB (all
 * zeros for the first row). Paeth was the smallest of the fixed filters on
 * desktop pictures with this encoder (about 6% below Sub and Up). */
void paeth_row(const unsigned char *cur, const unsigned char *prev, size_t n, unsigned char *dst)
{
	dst[0] = 4;
	unsigned char *out = dst + 1;
	size_t i = 0;
	for (; i < 3 && i < n; i++)
		out[i] = (unsigned char)(cur[i] - prev[i]);
#ifdef X11SHOT_SSE2
	if (n >= 3 + 16) {
		size_t end = 3 + (n - 3) / 16 * 16;
		paeth_sse2(cur, prev, end, out);
		i = end;
	}
#endif
	for (; i < n; i++) {
		int a = cur[i - 3], b = prev[i], c = prev[i - 3];
		int pa = b - c, pb = a - c, pc = pa + pb;
		pa = pa < 0 ? -pa : pa;
		pb = pb < 0 ? -pb : pb;
		pc = pc < 0 ? -pc : pc;
		int pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
		out[i] = (unsigned char)(cur[i] - pred);
	}
}
