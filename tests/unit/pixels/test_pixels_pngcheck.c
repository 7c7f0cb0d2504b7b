/*
 * test_pixels_pngcheck — pixels/pngcheck.h: a plain PNG's image data checked without libpng.
 *
 * What it must never do is accept what libpng refuses: every image here goes through both,
 * pngcheck_plain_sound() and pngcodec_decode() (which tries pngcheck first, then libpng), and
 * libpng's own verdict on the same bytes with the plain check out of the way (keep_pixels, the
 * path that always decodes with libpng). Plain captures written by libpng in every filter, RGB and
 * RGBA, in one IDAT or in IDATs of one byte, are sound; other layouts are left to libpng; and each
 * kind of damage to a plain image (its Adler-32, a filter byte, a row too few or too many,
 * bytes after the stream, a stream cut short, a wrong zlib header) is left to libpng, which
 * refuses it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "pixels/pngcheck.h"
#include "pixels/pngcodec.h"
#include "pixels_fixtures.h"

static uint32_t lcg_state = 12345u;

static unsigned rnd(void)
{
	lcg_state = lcg_state * 1103515245u + 12345u;
	return (lcg_state >> 16) & 0xFFFFu;
}

/* pngcodec_decode's verdict: with keep_pixels libpng's alone (that path never takes the plain
 * check), without it the checking path (the plain check, then libpng). */
static int accepted(const fx_buf *b, bool keep_pixels)
{
	pngcodec_image img;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = pngcodec_decode(b->data, b->len, keep_pixels, &img, &err);
	if (!keep_pixels)
		assert_null(img.pixels);
	free(img.pixels);
	return st == RELAY_OK;
}

#define libpng_accepts(b) accepted((b), true)
#define decode_accepts(b) accepted((b), false)

/* A picture with flat runs and noise, as a desktop capture has both. */
static unsigned char *picture(uint32_t w, uint32_t h)
{
	unsigned char *rgba = malloc((size_t)w * h * 4);
	assert_non_null(rgba);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			unsigned char *p = rgba + ((size_t)y * w + x) * 4;
			int noisy = (x / 16 + y / 16) % 3 == 0;
			p[0] = (unsigned char)(noisy ? rnd() : x);
			p[1] = (unsigned char)(noisy ? rnd() : y);
			p[2] = (unsigned char)(x ^ y);
			p[3] = (unsigned char)(noisy ? rnd() : 255);
		}
	return rgba;
}

static void test_plain_captures_are_sound(void **state)
{
	(void)state;
	static const uint32_t sizes[][2] = {{1, 1}, {3, 2}, {17, 9}, {640, 3}, {1280, 800}};
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		for (int alpha = 0; alpha < 2; alpha++) {
			for (int level = 0; level <= 9; level += 3) {
				unsigned char *rgba = picture(sizes[k][0], sizes[k][1]);
				fx_buf b = fx_png_from_rgba(rgba, sizes[k][0], sizes[k][1], alpha, level);
				pngcheck_image out;
				assert_true(pngcheck_plain_sound(b.data, b.len, &out));
				assert_int_equal(out.width, sizes[k][0]);
				assert_int_equal(out.height, sizes[k][1]);
				assert_int_equal(out.channels, alpha ? 4 : 3);
				assert_true(libpng_accepts(&b));
				assert_true(decode_accepts(&b));
				free(b.data);
				free(rgba);
			}
		}
	}
}

/* Signature, IHDR (8-bit, colour type ctype), the zlib stream z in IDAT chunks of at most
 * `idat_bytes`, IEND. */
static fx_buf plain_png(uint32_t w, uint32_t h, unsigned ctype, const unsigned char *z, size_t z_len,
                        size_t idat_bytes)
{
	fx_buf b = {0};
	fx_png_signature(&b);
	fx_png_ihdr(&b, w, h, 8, ctype, 0);
	for (size_t at = 0; at < z_len; at += idat_bytes)
		fx_png_chunk(&b, "IDAT", z + at,
		             (uint32_t)(z_len - at < idat_bytes ? z_len - at : idat_bytes));
	fx_png_chunk(&b, "IEND", "", 0);
	return b;
}

/* The zlib stream of raw[0 .. len) (malloc'd, *z_len bytes). */
static unsigned char *deflated(const unsigned char *raw, size_t len, size_t *z_len)
{
	uLongf n = compressBound((uLong)len);
	unsigned char *z = malloc(n);
	assert_non_null(z);
	assert_int_equal(compress2(z, &n, raw, (uLong)len, 6), Z_OK);
	*z_len = n;
	return z;
}

/* Filtered rows of a w x h RGB image: each row's filter byte (0 to 4, in turn) and noise. */
static unsigned char *filtered_rows(uint32_t w, uint32_t h, size_t *len)
{
	size_t row = 1 + (size_t)w * 3;
	unsigned char *raw = malloc(row * h);
	assert_non_null(raw);
	for (uint32_t y = 0; y < h; y++) {
		raw[y * row] = (unsigned char)(y % 5);
		for (size_t i = 1; i < row; i++)
			raw[y * row + i] = (unsigned char)rnd();
	}
	*len = row * h;
	return raw;
}

static void expect_left_to_libpng_and_refused(const fx_buf *b, const char *what)
{
	pngcheck_image out;
	if (pngcheck_plain_sound(b->data, b->len, &out))
		fail_msg("%s: the plain check accepted it", what);
	if (libpng_accepts(b))
		fail_msg("%s: libpng accepted it", what);
	if (decode_accepts(b))
		fail_msg("%s: pngcodec_decode accepted it", what);
}

static void test_every_filter_and_any_idat_split(void **state)
{
	(void)state;
	const uint32_t w = 33, h = 20;
	size_t raw_len, z_len;
	unsigned char *raw = filtered_rows(w, h, &raw_len);
	unsigned char *z = deflated(raw, raw_len, &z_len);
	static const size_t splits[] = {1, 2, 5, 4096, 1u << 20};
	for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
		fx_buf b = plain_png(w, h, 2, z, z_len, splits[k]);
		pngcheck_image out;
		assert_true(pngcheck_plain_sound(b.data, b.len, &out));
		assert_true(libpng_accepts(&b));
		free(b.data);
	}
	free(z);
	free(raw);
}

static void test_damage_is_left_to_libpng(void **state)
{
	(void)state;
	const uint32_t w = 40, h = 30;
	size_t raw_len, z_len, row = 1 + (size_t)w * 3;
	unsigned char *raw = filtered_rows(w, h, &raw_len);
	unsigned char *z = deflated(raw, raw_len, &z_len);
	fx_buf b;

	z[z_len - 1] ^= 0x01; /* the Adler-32 */
	b = plain_png(w, h, 2, z, z_len, 7);
	expect_left_to_libpng_and_refused(&b, "a wrong Adler-32");
	free(b.data);
	z[z_len - 1] ^= 0x01;

	b = plain_png(w, h, 2, z, z_len - 1, 4096); /* the stream cut short */
	expect_left_to_libpng_and_refused(&b, "a stream cut short");
	free(b.data);

	{
		unsigned char *longer = malloc(z_len + 3);
		memcpy(longer, z, z_len);
		memcpy(longer + z_len, "xyz", 3);
		b = plain_png(w, h, 2, longer, z_len + 3, 4096);
		expect_left_to_libpng_and_refused(&b, "bytes after the stream");
		free(b.data);
		free(longer);
	}
	free(z);

	raw[row * 7] = 5; /* a filter byte that is none */
	z = deflated(raw, raw_len, &z_len);
	b = plain_png(w, h, 2, z, z_len, 4096);
	expect_left_to_libpng_and_refused(&b, "filter byte 5");
	free(b.data);
	free(z);
	raw[row * 7] = 1;

	z = deflated(raw, raw_len - row, &z_len); /* a row too few */
	b = plain_png(w, h, 2, z, z_len, 4096);
	expect_left_to_libpng_and_refused(&b, "a row too few");
	free(b.data);
	free(z);

	{
		unsigned char *more = malloc(raw_len + row);
		memcpy(more, raw, raw_len);
		memcpy(more + raw_len, raw, row);
		z = deflated(more, raw_len + row, &z_len); /* a row too many */
		b = plain_png(w, h, 2, z, z_len, 4096);
		expect_left_to_libpng_and_refused(&b, "a row too many");
		free(b.data);
		free(z);
		free(more);
	}

	z = deflated(raw, raw_len, &z_len);
	z[1] ^= 0x20; /* FDICT: a preset dictionary, FCHECK now wrong too */
	b = plain_png(w, h, 2, z, z_len, 4096);
	expect_left_to_libpng_and_refused(&b, "a zlib header with FDICT");
	free(b.data);
	free(z);
	free(raw);
}

/* Rows left as fx_png_write clears them (any layout's row fits). */
static void zero_row(uint32_t y, unsigned char *row, void *ctx)
{
	(void)y;
	(void)row;
	(void)ctx;
}

static void test_other_layouts_are_left_to_libpng(void **state)
{
	(void)state;
	static const png_color palette[2] = {{0, 0, 0}, {255, 255, 255}};
	static const png_color_16 transparent = {0, 0, 0, 0, 0};
	unsigned char *rgba = picture(24, 12);
	fx_rgba_ctx rgb = {rgba, 24, 0};
	struct {
		const char *what;
		fx_png_spec spec;
	} cases[] = {
	    {"grey", {.color_type = PNG_COLOR_TYPE_GRAY, .bit_depth = 8}},
	    {"16-bit", {.color_type = PNG_COLOR_TYPE_RGB, .bit_depth = 16}},
	    {"interlaced",
	     {.color_type = PNG_COLOR_TYPE_RGB, .bit_depth = 8, .interlace = PNG_INTERLACE_ADAM7}},
	    {"palette",
	     {.color_type = PNG_COLOR_TYPE_PALETTE, .bit_depth = 1, .palette = palette, .palette_len = 2}},
	    {"RGB with tRNS", {.color_type = PNG_COLOR_TYPE_RGB, .bit_depth = 8, .trns_color = &transparent}},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		fx_buf b = fx_png_write(24, 12, &cases[k].spec, zero_row, NULL);
		pngcheck_image out;
		if (pngcheck_plain_sound(b.data, b.len, &out))
			fail_msg("%s: the plain check took it", cases[k].what);
		assert_true(libpng_accepts(&b));
		assert_true(decode_accepts(&b));
		free(b.data);
	}
	/* Text and gamma before the image data stay plain. */
	fx_png_spec texts = {.color_type = PNG_COLOR_TYPE_RGB, .bit_depth = 8, .extra_chunks = 1};
	fx_buf b = fx_png_write(24, 12, &texts, fx_rgba_row, &rgb);
	pngcheck_image out;
	assert_true(pngcheck_plain_sound(b.data, b.len, &out));
	assert_true(libpng_accepts(&b));
	free(b.data);
	free(rgba);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_plain_captures_are_sound),
	    cmocka_unit_test(test_every_filter_and_any_idat_split),
	    cmocka_unit_test(test_damage_is_left_to_libpng),
	    cmocka_unit_test(test_other_layouts_are_left_to_libpng),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
