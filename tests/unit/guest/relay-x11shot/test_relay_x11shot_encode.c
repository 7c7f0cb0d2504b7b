/*
 * test_relay_x11shot_encode — relay-x11shot's encoder in-process
 * (guest/relay-x11shot/pixels.c, png.c and encode.c are compiled in):
 * the SSE2 row filter (Up or Sub), the SSE2 Adler-32 and the word-wise BGRX
 * conversion give the bytes of the plain byte-by-byte formulas written out
 * here, for every row length and alignment, at the sums' extremes; and the
 * zlib stream of a screen-like picture fed in uneven strips (so the deflate
 * window slides many times) inflates, with zlib, to exactly the filtered
 * rows (zlib checks the Adler-32 too).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "relay-x11shot/x11shot.h"
#include "relay_support/adler32.h"

/* The program's diagnostics (relay-x11shot.c is not compiled in). */
void diag(const char *fmt, ...)
{
	(void)fmt;
}

/* Deterministic bytes (the test must not depend on a seed it cannot show). */
static uint32_t rng_state = 12345;

static uint32_t rng(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return rng_state >> 8;
}

/* Up or Sub, whichever has the smaller sum of |signed byte| (Up on a tie). */
static void ref_filter(const unsigned char *cur, const unsigned char *prev, size_t n, unsigned char *dst)
{
	unsigned long up = 0, sub = 0;
	for (size_t i = 0; i < n; i++) {
		int u = (signed char)(unsigned char)(cur[i] - prev[i]);
		int l = (signed char)(unsigned char)(cur[i] - (i >= 3 ? cur[i - 3] : 0));
		up += (unsigned long)abs(u);
		sub += (unsigned long)abs(l);
	}
	dst[0] = sub < up ? 1 : 2;
	for (size_t i = 0; i < n; i++)
		dst[1 + i] = (unsigned char)(cur[i] - (dst[0] == 2 ? prev[i] : i >= 3 ? cur[i - 3] : 0));
}

static void test_filter_matches_the_formula(void **state)
{
	(void)state;
	unsigned char cur[4000], prev[4000], got[4001], want[4001], scratch[4001];
	unsigned types = 0;
	for (size_t n = 0; n < 4000; n += (n < 80 ? 1 : 97)) {
		for (int kind = 0; kind < 4; kind++) {
			for (size_t i = 0; i < n; i++) {
				/* random, extremes only, a vertical and a horizontal gradient */
				cur[i] = (unsigned char)(kind == 0   ? rng()
				                         : kind == 1 ? (rng() & 1) * 255
				                         : kind == 2 ? 40
				                                     : i / 3);
				prev[i] = (unsigned char)(kind == 0   ? rng()
				                          : kind == 1 ? (rng() & 1) * 255
				                          : kind == 2 ? 39
				                                      : i / 3 + 7);
			}
			filter_row(cur, prev, n, got, scratch);
			ref_filter(cur, prev, n, want);
			assert_memory_equal(got, want, n + 1);
			types |= 1u << got[0];
		}
	}
	assert_int_equal(types, (1u << 1) | (1u << 2)); /* both were chosen */
}

static void test_adler_matches_the_formula(void **state)
{
	(void)state;
	size_t cap = 70000;
	unsigned char *data = malloc(cap);
	assert_non_null(data);
	size_t lengths[] = {0, 1, 15, 16, 17, 5535, 5536, 5537, 5552, 11072, 11073, 65536, 69999};
	for (int fill = 0; fill < 3; fill++) {
		for (size_t i = 0; i < cap; i++)
			data[i] = (unsigned char)(fill == 0 ? 0xFF : fill == 1 ? rng() : 0);
		for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
			size_t len = lengths[k];
			uint32_t a = 1, b = 0;
			for (size_t i = 0; i < len; i++) {
				a = (a + data[i]) % 65521u;
				b = (b + a) % 65521u;
			}
			/* in two uneven pieces, as the encoder feeds rows */
			size_t first = len / 3 + 1 > len ? len : len / 3 + 1;
			uint32_t ad = rs_adler32(rs_adler32(1, data, first), data + first, len - first);
			assert_int_equal(ad, (b << 16) | a);
			assert_int_equal(adler32(1, data, (uInt)len), ad);
		}
	}
	free(data);
}

static void test_bgrx_conversion_matches_the_masks(void **state)
{
	(void)state;
	pixfmt_t fast, masked;
	memset(&fast, 0, sizeof fast);
	fast.r = channel_of(0xFF0000u);
	fast.g = channel_of(0xFF00u);
	fast.b = channel_of(0xFFu);
	fast.bytes_per_pixel = 4;
	masked = fast;
	fast.fast_bgrx = 1;
	unsigned char src[4 * 203], got[3 * 203], want[3 * 203];
	for (unsigned width = 1; width <= 203; width++) {
		for (size_t i = 0; i < sizeof src; i++)
			src[i] = (unsigned char)rng(); /* the pad byte too: it must be ignored */
		convert_row(&fast, src, width, got);
		convert_row(&masked, src, width, want);
		assert_memory_equal(got, want, 3 * width);
	}
}

/* A screen-like picture: a vertical gradient, flat windows, noise, text-like
 * stripes; BGRX with 4-byte scanlines. */
static unsigned char *screen(unsigned w, unsigned h)
{
	unsigned char *px = malloc((size_t)w * h * 4);
	for (unsigned y = 0; y < h; y++) {
		for (unsigned x = 0; x < w; x++) {
			unsigned char *p = px + ((size_t)y * w + x) * 4;
			uint32_t v = 0x2b5876 + y * 0x000101;
			if (x > w / 8 && x < w / 2 && y > h / 10 && y < h / 2)
				v = ((x / 3 + y) % 11 == 0) ? 0x202020 : 0xf5f5f5;
			else if (x > w * 2 / 3 && y > h * 2 / 3)
				v = rng() & 0xFFFFFF;
			p[0] = (unsigned char)v;
			p[1] = (unsigned char)(v >> 8);
			p[2] = (unsigned char)(v >> 16);
			p[3] = (unsigned char)rng();
		}
	}
	return px;
}

static void test_zlib_stream_inflates_to_the_filtered_rows(void **state)
{
	(void)state;
	const unsigned w = 1280, h = 300;
	unsigned char *px = screen(w, h);
	pixfmt_t pf;
	memset(&pf, 0, sizeof pf);
	pf.r = channel_of(0xFF0000u);
	pf.g = channel_of(0xFF00u);
	pf.b = channel_of(0xFFu);
	pf.bytes_per_pixel = 4;
	pf.fast_bgrx = 1;
	buf_t zout = {0};
	encoder_t enc;
	assert_int_equal(encoder_init(&enc, &pf, w, h, &zout), 0);
	size_t stride = (size_t)w * 4;
	for (unsigned y = 0, step = 1; y < h; y += step, step = step % 37 + 5) {
		unsigned rows = y + step > h ? h - y : step;
		encoder_rows(&enc, px + (size_t)y * stride, stride, rows);
	}
	encoder_finish(&enc);
	encoder_free(&enc);
	assert_false(zout.failed);

	size_t row_bytes = 1 + (size_t)w * 3;
	unsigned char *want = malloc(row_bytes * h), *rgb = calloc(row_bytes, 1),
	              *prev = calloc(row_bytes, 1);
	for (unsigned y = 0; y < h; y++) {
		for (unsigned x = 0; x < w; x++) {
			const unsigned char *p = px + (size_t)y * stride + (size_t)x * 4;
			rgb[3 * x] = p[2];
			rgb[3 * x + 1] = p[1];
			rgb[3 * x + 2] = p[0];
		}
		ref_filter(rgb, prev, row_bytes - 1, want + (size_t)y * row_bytes);
		memcpy(prev, rgb, row_bytes - 1);
	}
	uLongf got_len = (uLongf)(row_bytes * h + 16);
	unsigned char *got = malloc(got_len);
	assert_int_equal(uncompress(got, &got_len, zout.data, (uLong)zout.len), Z_OK);
	assert_int_equal(got_len, row_bytes * h);
	assert_memory_equal(got, want, row_bytes * h);
	assert_true(zout.len < row_bytes * h / 4); /* the matcher found the runs */
	free(got);
	free(want);
	free(rgb);
	free(prev);
	free(zout.data);
	free(px);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_filter_matches_the_formula),
	    cmocka_unit_test(test_adler_matches_the_formula),
	    cmocka_unit_test(test_bgrx_conversion_matches_the_masks),
	    cmocka_unit_test(test_zlib_stream_inflates_to_the_filtered_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
