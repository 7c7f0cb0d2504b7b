/*
 * support/src/adler32.c — see relay_support/adler32.h.
 */
#include "relay_support/adler32.h"

#if defined(__SSE2__) && !defined(RS_ADLER32_SCALAR)
#include <emmintrin.h>
#define RS_ADLER32_SSE2 1
#endif

#define ADLER_MOD 65521u

/* Largest n keeping b < 2^32 before the modulo (zlib's NMAX), rounded down to 16. */
#define ADLER_NMAX 5536u

/* The sums of p[0 .. len), len <= ADLER_NMAX, without the modulo (the caller reduces). */
static void block_scalar(uint32_t *pa, uint32_t *pb, const unsigned char *p, size_t len)
{
	uint32_t a = *pa, b = *pb;
	while (len >= 8) {
		for (int k = 0; k < 8; k++) {
			a += p[k];
			b += a;
		}
		p += 8;
		len -= 8;
	}
	while (len-- > 0) {
		a += *p++;
		b += a;
	}
	*pa = a;
	*pb = b;
}

#ifdef RS_ADLER32_SSE2
/* The same for len a multiple of 16: per 16 bytes, a grows by their sum
 * and b by 16 times the a before them plus the bytes weighted 16 down to 1. */
static void block_sse2(uint32_t *pa, uint32_t *pb, const unsigned char *p, size_t len)
{
	const __m128i zero = _mm_setzero_si128();
	const __m128i w_lo = _mm_setr_epi16(16, 15, 14, 13, 12, 11, 10, 9);
	const __m128i w_hi = _mm_setr_epi16(8, 7, 6, 5, 4, 3, 2, 1);
	__m128i v_a = zero, v_prev_a = zero, v_w = zero;
	size_t chunks = len / 16;
	for (size_t k = 0; k < chunks; k++) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
		v_prev_a = _mm_add_epi32(v_prev_a, v_a);
		v_a = _mm_add_epi32(v_a, _mm_sad_epu8(x, zero));
		v_w = _mm_add_epi32(v_w, _mm_madd_epi16(_mm_unpacklo_epi8(x, zero), w_lo));
		v_w = _mm_add_epi32(v_w, _mm_madd_epi16(_mm_unpackhi_epi8(x, zero), w_hi));
	}
	uint32_t lanes_a[4], lanes_prev[4], lanes_w[4];
	_mm_storeu_si128((__m128i *)(void *)lanes_a, v_a);
	_mm_storeu_si128((__m128i *)(void *)lanes_prev, v_prev_a);
	_mm_storeu_si128((__m128i *)(void *)lanes_w, v_w);
	uint32_t sum = lanes_a[0] + lanes_a[2]; /* _mm_sad_epu8: two 64-bit sums */
	uint32_t prev = lanes_prev[0] + lanes_prev[2];
	uint32_t weighted = lanes_w[0] + lanes_w[1] + lanes_w[2] + lanes_w[3];
	*pb += (uint32_t)len * *pa + 16u * prev + weighted;
	*pa += sum;
}
#endif

uint32_t rs_adler32(uint32_t adler, const unsigned char *p, size_t len)
{
	uint32_t a = adler & 0xFFFFu, b = adler >> 16;
	while (len > 0) {
		size_t n = len < ADLER_NMAX ? len : ADLER_NMAX;
		size_t head = 0;
#ifdef RS_ADLER32_SSE2
		head = n / 16 * 16;
		if (head)
			block_sse2(&a, &b, p, head);
#endif
		block_scalar(&a, &b, p + head, n - head);
		a %= ADLER_MOD;
		b %= ADLER_MOD;
		p += n;
		len -= n;
	}
	return (b << 16) | a;
}
