/*
 * test_pixels_preview — image_present() (spec/images.md §9.3–§9.5): area-average
 * previews checked pixel by pixel against an independent double-precision
 * reference (pixels_fixtures.h), the 0.75 shrink loop on noise, pass-through
 * of originals that fit, every PNG colour type and bit depth (palette with
 * tRNS, 16-bit, grey+alpha, 1-bit grey, tRNS colours, Adam7), damaged image
 * data caught by the full decode, JPEG/WebP pass-through and refusal, and
 * the presentation receipt.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pixels/image.h"
#include "pixels_fixtures.h"
#include "util/jsonx.h"
#include "util/sha256.h"

/* Deterministic pseudo-random numbers (xorshift), per test. */
static uint32_t rng_next(uint32_t *s)
{
	uint32_t x = *s;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	*s = x;
	return x;
}

static void present_ok(const fx_buf *b, const char *mime, image_presentation *pr)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_present(b->data, b->len, mime, pr, &err);
	if (st != RELAY_OK)
		print_message("image_present: %s\n", err.message);
	assert_int_equal(st, RELAY_OK);
	/* What every presentation must satisfy. */
	assert_non_null(pr->bytes);
	assert_true(pr->width >= 1 && pr->width <= 2000);
	assert_true(pr->height >= 1 && pr->height <= 2000);
	assert_true(pr->base64_len <= 4194304);
	assert_int_equal(pr->base64_len, image_base64_len(pr->len));
	char *b64 = image_base64_encode(pr->bytes, pr->len, NULL);
	assert_string_equal(pr->base64, b64);
	free(b64);
	char hex[65];
	sha256_buffer_hex(pr->bytes, pr->len, hex);
	assert_string_equal(pr->sha256, hex);
	assert_non_null(pr->receipt);
	int64_t v = 0;
	assert_true(jsonx_get_int(pr->receipt, "width", &v));
	assert_int_equal(v, pr->width);
	assert_true(jsonx_get_int(pr->receipt, "height", &v));
	assert_int_equal(v, pr->height);
	assert_true(jsonx_get_int(pr->receipt, "bytes", &v));
	assert_int_equal(v, (int64_t)pr->len);
	assert_string_equal(jsonx_get_str(pr->receipt, "sha256"), hex);
	assert_string_equal(jsonx_get_str(pr->receipt, "mimeType"), pr->mime_type);
	bool transformed = !pr->transformed;
	assert_true(jsonx_get_bool(pr->receipt, "transformed", &transformed));
	assert_int_equal(transformed, pr->transformed);
	assert_int_equal(pr->transformed, pr->len != b->len || memcmp(pr->bytes, b->data, b->len) != 0);
}

static void present_refused(const fx_buf *b, const char *mime, const char *needle)
{
	image_presentation pr;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_present(b->data, b->len, mime, &pr, &err);
	if (st == RELAY_OK || !strstr(err.message, needle))
		print_message("status %d, message '%s' (wanted '%s')\n", st, err.message, needle);
	assert_true(st != RELAY_OK);
	assert_string_equal(image_delivery_status(st), "presentation-unavailable");
	assert_non_null(strstr(err.message, needle));
	assert_null(pr.bytes);
	assert_null(pr.receipt);
}

/* The preview box of §9.3 (never enlarging), for the test's own check. */
static void expected_dims(uint32_t w, uint32_t h, uint32_t *dw, uint32_t *dh)
{
	double scale = fmin(1.0, fmin(2000.0 / w, 2000.0 / h));
	*dw = (uint32_t)fmax(1.0, round(w * scale));
	*dh = (uint32_t)fmax(1.0, round(h * scale));
}

/* Decodes the preview and compares it with the area-average reference of
 * the RGBA source. */
static void check_against_reference(const unsigned char *src_rgba, uint32_t w, uint32_t h,
                                    const image_presentation *pr)
{
	uint32_t pw = 0, ph = 0;
	unsigned char *got = fx_png_decode_rgba(pr->bytes, pr->len, &pw, &ph);
	assert_non_null(got);
	assert_int_equal(pw, pr->width);
	assert_int_equal(ph, pr->height);
	size_t ties = 0;
	char first[200];
	size_t bad = fx_compare_with_reference(src_rgba, w, h, got, pw, ph, &ties, first, sizeof first);
	if (bad)
		print_message("%zu channel values differ from the reference; first: %s\n", bad, first);
	print_message("compared %u x %u preview pixels with the reference (%zu rounding ties)\n", pw, ph,
	              ties);
	assert_int_equal(bad, 0);
	free(got);
}

/* ---- large PNGs ---------------------------------------------------------------- */

static void test_preview_5120x2880_rgba_pixel_by_pixel(void **state)
{
	(void)state;
	const uint32_t w = 5120, h = 2880;
	unsigned char *src = malloc((size_t)w * h * 4);
	assert_non_null(src);
	/* Smooth gradients, 64-pixel blocks with sharp edges, and alpha in
	 * 320-pixel blocks of 255, 0, 128 and 255 (fully transparent areas
	 * exercise the alpha-weighted colour). */
	static const unsigned char alphas[4] = {255, 0, 128, 255};
	for (uint32_t y = 0; y < h; y++) {
		for (uint32_t x = 0; x < w; x++) {
			unsigned char *p = src + ((size_t)y * w + x) * 4;
			p[0] = (unsigned char)(x * 255 / (w - 1));
			p[1] = (unsigned char)(y * 255 / (h - 1));
			p[2] = ((x / 64) + (y / 64)) % 2 ? 40 : 220;
			p[3] = alphas[(x / 320 + y / 320) % 4];
		}
	}
	fx_buf png = fx_png_from_rgba(src, w, h, 1, 1);
	print_message("original: %u x %u RGBA, %zu bytes\n", w, h, png.len);
	image_presentation pr;
	present_ok(&png, IMAGE_MIME_PNG, &pr);
	uint32_t dw, dh;
	expected_dims(w, h, &dw, &dh);
	assert_int_equal(dw, 2000);
	assert_int_equal(dh, 1125);
	assert_int_equal(pr.width, dw);
	assert_int_equal(pr.height, dh);
	assert_int_equal(pr.original_width, w);
	assert_int_equal(pr.original_height, h);
	assert_int_equal(pr.shrink_steps, 0);
	assert_true(pr.transformed);
	assert_string_equal(pr.mime_type, IMAGE_MIME_PNG);
	/* RGBA output: some alpha is below 255. */
	assert_int_equal(pr.bytes[25], 6);
	check_against_reference(src, w, h, &pr);
	image_presentation_free(&pr);
	free(png.data);
	free(src);
}

static void test_preview_rgb_fractional_ratio(void **state)
{
	(void)state;
	/* 3001 x 2003: both axes at a non-integer ratio (about 1.5), RGB. */
	const uint32_t w = 3001, h = 2003;
	unsigned char *src = malloc((size_t)w * h * 4);
	assert_non_null(src);
	uint32_t seed = 12345;
	for (uint32_t y = 0; y < h; y++) {
		for (uint32_t x = 0; x < w; x++) {
			unsigned char *p = src + ((size_t)y * w + x) * 4;
			p[0] = (unsigned char)((x * 7 + y * 3) & 255);
			p[1] = (unsigned char)(((x ^ y) >> 2) & 255);
			p[2] = (x % 97 < 3 || y % 89 < 2) ? (unsigned char)(rng_next(&seed) & 255) : 128;
			p[3] = 255;
		}
	}
	fx_buf png = fx_png_from_rgba(src, w, h, 0, 1);
	image_presentation pr;
	present_ok(&png, NULL, &pr);
	uint32_t dw, dh;
	expected_dims(w, h, &dw, &dh);
	assert_int_equal(pr.width, dw);
	assert_int_equal(pr.height, dh);
	assert_int_equal(pr.width, 2000);
	assert_int_equal(pr.height, 1335);
	assert_int_equal(pr.bytes[25], 2); /* opaque: encoded as RGB */
	if (pr.shrink_steps == 0)
		check_against_reference(src, w, h, &pr);
	else
		print_message("note: the preview needed %u shrink steps\n", pr.shrink_steps);
	image_presentation_free(&pr);
	free(png.data);
	free(src);
}

/* Noise does not compress: at 2000 x 2000 its base64 is far over 4 MiB, so
 * the preview shrinks by 0.75 steps (2000, 1500, 1125, 843, ...) until it
 * fits, and the step before the last did not fit. */
static void check_noise_shrink(uint32_t w, uint32_t h)
{
	unsigned char *src = malloc((size_t)w * h * 4);
	assert_non_null(src);
	uint32_t seed = 0x9E3779B9u ^ w;
	for (size_t i = 0; i < (size_t)w * h; i++) {
		uint32_t r = rng_next(&seed);
		src[4 * i] = (unsigned char)r;
		src[4 * i + 1] = (unsigned char)(r >> 8);
		src[4 * i + 2] = (unsigned char)(r >> 16);
		src[4 * i + 3] = 255;
	}
	fx_buf png = fx_png_from_rgba(src, w, h, 0, 0);
	image_presentation pr;
	present_ok(&png, IMAGE_MIME_PNG, &pr);
	uint32_t dw, dh;
	expected_dims(w, h, &dw, &dh);
	uint32_t seq_w[16], seq_h[16];
	seq_w[0] = dw;
	seq_h[0] = dh;
	for (int i = 1; i < 16; i++) {
		seq_w[i] = (uint32_t)fmax(1.0, floor(seq_w[i - 1] * 0.75));
		seq_h[i] = (uint32_t)fmax(1.0, floor(seq_h[i - 1] * 0.75));
	}
	print_message("noise %u x %u (%zu bytes): preview %u x %u after %u shrink steps, %zu base64 chars\n",
	              w, h, png.len, pr.width, pr.height, pr.shrink_steps, pr.base64_len);
	assert_true(pr.shrink_steps >= 1 && pr.shrink_steps < 16);
	assert_int_equal(pr.width, seq_w[pr.shrink_steps]);
	assert_int_equal(pr.height, seq_h[pr.shrink_steps]);
	assert_true(pr.transformed);
	check_against_reference(src, w, h, &pr);

	/* The previous size did not fit: the reference preview at that size,
	 * encoded the same way (8-bit RGB, all filters, zlib level 6), is over
	 * 4 MiB of base64. */
	uint32_t pw = seq_w[pr.shrink_steps - 1], ph = seq_h[pr.shrink_steps - 1];
	unsigned char *prev = malloc((size_t)pw * ph * 4);
	assert_non_null(prev);
	for (uint32_t Y = 0; Y < ph; Y++) {
		for (uint32_t X = 0; X < pw; X++) {
			double ref[4];
			fx_area_reference(src, w, h, pw, ph, X, Y, ref);
			for (int c = 0; c < 4; c++)
				prev[((size_t)Y * pw + X) * 4 + c] =
				    (unsigned char)fmin(255, floor(ref[c] + 0.5));
		}
	}
	fx_png_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.color_type = PNG_COLOR_TYPE_RGB;
	spec.bit_depth = 8;
	spec.zlib_level = 6;
	fx_rgba_ctx ctx = {prev, pw, 0};
	fx_buf bigger = fx_png_write(pw, ph, &spec, fx_rgba_row, &ctx);
	assert_true(image_base64_len(bigger.len) > 4194304);
	free(bigger.data);
	free(prev);
	image_presentation_free(&pr);
	free(png.data);
	free(src);
}

static void test_noise_shrinks_by_three_quarters(void **state)
{
	(void)state;
	check_noise_shrink(2400, 2400);
}

/* An original inside the 2000 x 2000 box whose base64 is too large starts
 * at its own size (never enlarged) and shrinks from there. */
static void test_heavy_png_within_box_is_not_enlarged(void **state)
{
	(void)state;
	check_noise_shrink(1900, 1700);
}

/* ---- pass-through, damage, receipt ------------------------------------------------- */

static void grad_row(uint32_t y, unsigned char *row, void *ctx)
{
	uint32_t w = *(const uint32_t *)ctx;
	for (uint32_t x = 0; x < w; x++) {
		row[3 * x] = (unsigned char)(x / 4);
		row[3 * x + 1] = (unsigned char)(y / 3);
		row[3 * x + 2] = 99;
	}
}

static fx_buf gradient_png(uint32_t w, uint32_t h, int extra_chunks)
{
	fx_png_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.color_type = PNG_COLOR_TYPE_RGB;
	spec.bit_depth = 8;
	spec.zlib_level = 6;
	spec.extra_chunks = extra_chunks;
	return fx_png_write(w, h, &spec, grad_row, &w);
}

static void test_png_that_fits_passes_unchanged(void **state)
{
	(void)state;
	fx_buf png = gradient_png(800, 600, 1);
	image_presentation pr;
	present_ok(&png, IMAGE_MIME_PNG, &pr);
	assert_false(pr.transformed);
	assert_int_equal(pr.len, png.len);
	assert_memory_equal(pr.bytes, png.data, png.len);
	assert_int_equal(pr.width, 800);
	assert_int_equal(pr.height, 600);
	assert_int_equal(pr.shrink_steps, 0);
	/* The receipt, exactly. */
	char *text = jsonx_to_string(pr.receipt, 0);
	char want[2048];
	snprintf(
	    want, sizeof want,
	    "{\"originalWidth\":800,\"originalHeight\":600,\"width\":800,\"height\":600,\"mimeType\":"
	    "\"image/png\",\"sha256\":\"%s\",\"bytes\":%zu,\"transformed\":false,\"policy\":{\"version\":1,"
	    "\"processor\":\"mcp-relay/image-presentation\",\"maxWidth\":2000,\"maxHeight\":2000,"
	    "\"maxBytes\":4194304,\"maxBytesEncoding\":\"base64\",\"maxOriginalBytes\":67108864,"
	    "\"maxPixels\":40000000,\"maxDimension\":32768,\"supportedMimeTypes\":[\"image/png\","
	    "\"image/jpeg\",\"image/webp\"],\"resampledMimeTypes\":[\"image/png\"],\"animation\":\"reject\","
	    "\"compressedPngMetadata\":\"ignore\",\"jpegFrames\":[\"baseline\",\"progressive\"],"
	    "\"maxContainerRecords\":10000,\"dimensionSpace\":\"stored\"}}",
	    pr.sha256, png.len);
	assert_string_equal(text, want);
	free(text);
	image_presentation_free(&pr);
	image_presentation_free(&pr); /* twice is harmless */
	image_presentation_free(NULL);
	free(png.data);

	/* Exactly 2000 x 2000 still fits. */
	png = gradient_png(2000, 2000, 0);
	present_ok(&png, IMAGE_MIME_PNG, &pr);
	assert_false(pr.transformed);
	image_presentation_free(&pr);
	free(png.data);
	/* 2001 wide does not. */
	png = gradient_png(2001, 50, 0);
	present_ok(&png, IMAGE_MIME_PNG, &pr);
	assert_true(pr.transformed);
	assert_int_equal(pr.width, 2000);
	assert_int_equal(pr.height, 50);
	image_presentation_free(&pr);
	free(png.data);
}

static size_t find_chunk(const fx_buf *b, const char *type)
{
	size_t pos = 8;
	while (pos + 12 <= b->len) {
		uint32_t len = (uint32_t)b->data[pos] << 24 | (uint32_t)b->data[pos + 1] << 16 |
		               (uint32_t)b->data[pos + 2] << 8 | b->data[pos + 3];
		if (memcmp(b->data + pos + 4, type, 4) == 0)
			return pos;
		pos += (size_t)len + 12;
	}
	return 0;
}

static void fix_crc(fx_buf *b, size_t chunk)
{
	uint32_t len = (uint32_t)b->data[chunk] << 24 | (uint32_t)b->data[chunk + 1] << 16 |
	               (uint32_t)b->data[chunk + 2] << 8 | b->data[chunk + 3];
	uint32_t crc = container_crc32(0, b->data + chunk + 4, (size_t)len + 4);
	unsigned char *p = b->data + chunk + 8 + len;
	p[0] = (unsigned char)(crc >> 24);
	p[1] = (unsigned char)(crc >> 16);
	p[2] = (unsigned char)(crc >> 8);
	p[3] = (unsigned char)crc;
}

/* Damaged image data behind correct CRCs: the container is valid, but the
 * full decode (done even for a PNG that fits) refuses it. */
static void test_damaged_png_data_is_caught(void **state)
{
	(void)state;
	fx_buf png = gradient_png(300, 200, 0);
	size_t idat = find_chunk(&png, "IDAT");
	assert_true(idat > 0);
	uint32_t idat_len = (uint32_t)png.data[idat] << 24 | (uint32_t)png.data[idat + 1] << 16 |
	                    (uint32_t)png.data[idat + 2] << 8 | png.data[idat + 3];

	/* A damaged deflate stream. */
	fx_buf a = {0};
	fx_put(&a, png.data, png.len);
	for (uint32_t i = 20; i < 60 && i < idat_len; i++)
		a.data[idat + 8 + i] ^= 0x5A;
	fix_crc(&a, idat);
	present_refused(&a, IMAGE_MIME_PNG, "cannot be decoded");
	free(a.data);

	/* A wrong Adler-32 at the end of the zlib stream. */
	fx_buf c = {0};
	fx_put(&c, png.data, png.len);
	c.data[idat + 8 + idat_len - 1] ^= 0x01;
	fix_crc(&c, idat);
	present_refused(&c, IMAGE_MIME_PNG, "cannot be decoded");
	free(c.data);

	/* Too little image data: IDAT cut short (CRC and IEND kept valid). */
	fx_buf d = {0};
	fx_put(&d, png.data, idat);
	uint32_t cut = idat_len / 2;
	fx_png_chunk(&d, "IDAT", png.data + idat + 8, cut);
	fx_png_chunk(&d, "IEND", NULL, 0);
	present_refused(&d, IMAGE_MIME_PNG, "cannot be decoded");
	free(d.data);

	/* The same damage in a PNG that needs resampling. */
	fx_buf big = gradient_png(2500, 40, 0);
	idat = find_chunk(&big, "IDAT");
	big.data[idat + 8 + 30] ^= 0xFF;
	big.data[idat + 8 + 31] ^= 0xFF;
	fix_crc(&big, idat);
	present_refused(&big, IMAGE_MIME_PNG, "cannot be decoded");
	free(big.data);

	/* Container failures surface from image_present too. */
	fx_buf t = {0};
	fx_put(&t, png.data, png.len - 5);
	present_refused(&t, IMAGE_MIME_PNG, "truncated");
	free(t.data);
	present_refused(&png, IMAGE_MIME_WEBP, "do not match its type");
	free(png.data);
}

/* ---- every colour type and bit depth ----------------------------------------------- */

typedef enum {
	CASE_RGB16,
	CASE_RGB16_TRNS,
	CASE_PALETTE8_TRNS,
	CASE_PALETTE2,
	CASE_GREY_ALPHA16,
	CASE_GREY_ALPHA8,
	CASE_GREY1,
	CASE_GREY4,
	CASE_GREY8_TRNS,
	CASE_GREY16,
	CASE_RGB8_TRNS,
	CASE_RGBA16,
	CASE_RGBA8_ADAM7,
	CASE_COUNT
} color_case;

static const char *const case_names[CASE_COUNT] = {
    "RGB 16-bit",      "RGB 16-bit with tRNS", "palette 8-bit with tRNS",
    "palette 2-bit",   "grey+alpha 16-bit",    "grey+alpha 8-bit",
    "grey 1-bit",      "grey 4-bit",           "grey 8-bit with tRNS",
    "grey 16-bit",     "RGB 8-bit with tRNS",  "RGBA 16-bit",
    "RGBA 8-bit Adam7"};

typedef struct {
	color_case which;
	uint32_t w;
	unsigned char *expected; /* RGBA8, w x h */
	png_color palette[256];
	png_byte trns[256];
} color_ctx;

/* The sample values at (x, y): up to 4 channels of 16 bits; and what
 * 8-bit RGBA they must decode to. */
static void color_sample(const color_ctx *c, uint32_t x, uint32_t y, uint16_t s[4], unsigned char rgba[4])
{
	uint32_t v = x * 131 + y * 977;
	switch (c->which) {
	case CASE_RGB16:
	case CASE_RGBA16:
		s[0] = (uint16_t)(v * 3);
		s[1] = (uint16_t)(v * 5 + 7);
		s[2] = (uint16_t)(v ^ 0x5A5A);
		s[3] = (uint16_t)((x * 40503u) ^ (y << 9));
		rgba[0] = (unsigned char)(s[0] >> 8);
		rgba[1] = (unsigned char)(s[1] >> 8);
		rgba[2] = (unsigned char)(s[2] >> 8);
		rgba[3] = c->which == CASE_RGBA16 ? (unsigned char)(s[3] >> 8) : 255;
		break;
	case CASE_RGB16_TRNS:
		/* 1000,2000,3000 is transparent; 1001,2000,3000 (same high
		 * bytes) is not: tRNS compares all 16 bits. */
		s[0] = (uint16_t)(x % 3 == 0 ? 1000 : x % 3 == 1 ? 1001 : v);
		s[1] = 2000;
		s[2] = 3000;
		rgba[0] = (unsigned char)(s[0] >> 8);
		rgba[1] = 2000 >> 8;
		rgba[2] = 3000 >> 8;
		rgba[3] = s[0] == 1000 ? 0 : 255;
		break;
	case CASE_PALETTE8_TRNS: {
		unsigned i = (x * 3 + y * 5) & 255;
		s[0] = (uint16_t)i;
		rgba[0] = c->palette[i].red;
		rgba[1] = c->palette[i].green;
		rgba[2] = c->palette[i].blue;
		rgba[3] = i < 200 ? c->trns[i] : 255;
		break;
	}
	case CASE_PALETTE2: {
		unsigned i = (x / 3 + y) & 3;
		s[0] = (uint16_t)i;
		rgba[0] = c->palette[i].red;
		rgba[1] = c->palette[i].green;
		rgba[2] = c->palette[i].blue;
		rgba[3] = 255;
		break;
	}
	case CASE_GREY_ALPHA16:
		s[0] = (uint16_t)(v * 11);
		s[1] = (uint16_t)(x * 977 + y * 31);
		rgba[0] = rgba[1] = rgba[2] = (unsigned char)(s[0] >> 8);
		rgba[3] = (unsigned char)(s[1] >> 8);
		break;
	case CASE_GREY_ALPHA8:
		s[0] = (uint16_t)(v & 255);
		s[1] = (uint16_t)((x * 7) & 255);
		rgba[0] = rgba[1] = rgba[2] = (unsigned char)s[0];
		rgba[3] = (unsigned char)s[1];
		break;
	case CASE_GREY1:
		s[0] = (uint16_t)(((x / 2) ^ y) & 1);
		rgba[0] = rgba[1] = rgba[2] = s[0] ? 255 : 0;
		rgba[3] = 255;
		break;
	case CASE_GREY4:
		s[0] = (uint16_t)((x + y) & 15);
		rgba[0] = rgba[1] = rgba[2] = (unsigned char)(s[0] * 17);
		rgba[3] = 255;
		break;
	case CASE_GREY8_TRNS:
		s[0] = (uint16_t)(x % 5 == 0 ? 77 : (v & 255));
		rgba[0] = rgba[1] = rgba[2] = (unsigned char)s[0];
		rgba[3] = s[0] == 77 ? 0 : 255;
		break;
	case CASE_GREY16:
		s[0] = (uint16_t)(v * 13 + 5);
		rgba[0] = rgba[1] = rgba[2] = (unsigned char)(s[0] >> 8);
		rgba[3] = 255;
		break;
	case CASE_RGB8_TRNS:
		if (x % 4 == 0) {
			s[0] = 10;
			s[1] = 20;
			s[2] = 30;
		} else {
			s[0] = (uint16_t)(v & 255);
			s[1] = (uint16_t)((v >> 3) & 255);
			s[2] = 31;
		}
		rgba[0] = (unsigned char)s[0];
		rgba[1] = (unsigned char)s[1];
		rgba[2] = (unsigned char)s[2];
		rgba[3] = (s[0] == 10 && s[1] == 20 && s[2] == 30) ? 0 : 255;
		break;
	case CASE_RGBA8_ADAM7:
	default:
		s[0] = (uint16_t)(v & 255);
		s[1] = (uint16_t)((v >> 4) & 255);
		s[2] = (uint16_t)((x * y) & 255);
		s[3] = (uint16_t)((x * 5) & 255);
		rgba[0] = (unsigned char)s[0];
		rgba[1] = (unsigned char)s[1];
		rgba[2] = (unsigned char)s[2];
		rgba[3] = (unsigned char)s[3];
		break;
	}
}

static void color_spec(color_case which, fx_png_spec *spec, unsigned *channels)
{
	memset(spec, 0, sizeof *spec);
	spec->zlib_level = 6;
	spec->interlace = PNG_INTERLACE_NONE;
	switch (which) {
	case CASE_RGB16: spec->color_type = PNG_COLOR_TYPE_RGB, spec->bit_depth = 16, *channels = 3; break;
	case CASE_RGB16_TRNS:
		spec->color_type = PNG_COLOR_TYPE_RGB, spec->bit_depth = 16, *channels = 3;
		break;
	case CASE_PALETTE8_TRNS:
		spec->color_type = PNG_COLOR_TYPE_PALETTE, spec->bit_depth = 8, *channels = 1;
		break;
	case CASE_PALETTE2:
		spec->color_type = PNG_COLOR_TYPE_PALETTE, spec->bit_depth = 2, *channels = 1;
		break;
	case CASE_GREY_ALPHA16:
		spec->color_type = PNG_COLOR_TYPE_GRAY_ALPHA, spec->bit_depth = 16, *channels = 2;
		break;
	case CASE_GREY_ALPHA8:
		spec->color_type = PNG_COLOR_TYPE_GRAY_ALPHA, spec->bit_depth = 8, *channels = 2;
		break;
	case CASE_GREY1: spec->color_type = PNG_COLOR_TYPE_GRAY, spec->bit_depth = 1, *channels = 1; break;
	case CASE_GREY4: spec->color_type = PNG_COLOR_TYPE_GRAY, spec->bit_depth = 4, *channels = 1; break;
	case CASE_GREY8_TRNS:
		spec->color_type = PNG_COLOR_TYPE_GRAY, spec->bit_depth = 8, *channels = 1;
		break;
	case CASE_GREY16: spec->color_type = PNG_COLOR_TYPE_GRAY, spec->bit_depth = 16, *channels = 1; break;
	case CASE_RGB8_TRNS: spec->color_type = PNG_COLOR_TYPE_RGB, spec->bit_depth = 8, *channels = 3; break;
	case CASE_RGBA16:
		spec->color_type = PNG_COLOR_TYPE_RGB_ALPHA, spec->bit_depth = 16, *channels = 4;
		break;
	case CASE_RGBA8_ADAM7:
	default:
		spec->color_type = PNG_COLOR_TYPE_RGB_ALPHA;
		spec->bit_depth = 8;
		spec->interlace = PNG_INTERLACE_ADAM7;
		*channels = 4;
		break;
	}
}

typedef struct {
	color_ctx *c;
	int depth;
	unsigned channels;
} row_ctx;

static void color_row(uint32_t y, unsigned char *row, void *ctx)
{
	row_ctx *r = ctx;
	for (uint32_t x = 0; x < r->c->w; x++) {
		uint16_t s[4] = {0, 0, 0, 0};
		unsigned char rgba[4];
		color_sample(r->c, x, y, s, rgba);
		if (r->depth == 16) {
			for (unsigned k = 0; k < r->channels; k++) {
				row[(x * r->channels + k) * 2] = (unsigned char)(s[k] >> 8);
				row[(x * r->channels + k) * 2 + 1] = (unsigned char)s[k];
			}
		} else if (r->depth == 8) {
			for (unsigned k = 0; k < r->channels; k++)
				row[x * r->channels + k] = (unsigned char)s[k];
		} else {
			unsigned per_byte = 8 / (unsigned)r->depth;
			unsigned shift = 8 - (unsigned)r->depth * (x % per_byte + 1);
			row[x / per_byte] |= (unsigned char)(s[0] << shift);
		}
	}
}

static void run_color_case(color_case which, uint32_t w, uint32_t h)
{
	color_ctx c;
	memset(&c, 0, sizeof c);
	c.which = which;
	c.w = w;
	for (int i = 0; i < 256; i++) {
		c.palette[i].red = (png_byte)i;
		c.palette[i].green = (png_byte)(255 - i);
		c.palette[i].blue = (png_byte)(i * 7);
		c.trns[i] = (png_byte)(i < 100 ? i * 2 : 255 - i);
	}
	fx_png_spec spec;
	unsigned channels = 0;
	color_spec(which, &spec, &channels);
	png_color_16 trns_color;
	memset(&trns_color, 0, sizeof trns_color);
	if (spec.color_type == PNG_COLOR_TYPE_PALETTE) {
		spec.palette = c.palette;
		spec.palette_len = which == CASE_PALETTE2 ? 4 : 256;
		if (which == CASE_PALETTE8_TRNS) {
			spec.trns = c.trns;
			spec.trns_len = 200;
		}
	}
	if (which == CASE_RGB16_TRNS) {
		trns_color.red = 1000;
		trns_color.green = 2000;
		trns_color.blue = 3000;
		spec.trns_color = &trns_color;
	} else if (which == CASE_GREY8_TRNS) {
		trns_color.gray = 77;
		spec.trns_color = &trns_color;
	} else if (which == CASE_RGB8_TRNS) {
		trns_color.red = 10;
		trns_color.green = 20;
		trns_color.blue = 30;
		spec.trns_color = &trns_color;
	}
	row_ctx rc = {&c, spec.bit_depth, channels};
	fx_buf png = fx_png_write(w, h, &spec, color_row, &rc);

	unsigned char *expected = malloc((size_t)w * h * 4);
	assert_non_null(expected);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			uint16_t s[4];
			color_sample(&c, x, y, s, expected + ((size_t)y * w + x) * 4);
		}

	image_info info;
	relay_error err;
	assert_int_equal(image_inspect(png.data, png.len, IMAGE_MIME_PNG, &info, &err), RELAY_OK);
	assert_int_equal(info.bit_depth, (unsigned)spec.bit_depth);
	assert_int_equal(info.color_type, (unsigned)spec.color_type);
	assert_int_equal(info.interlaced, spec.interlace == PNG_INTERLACE_ADAM7);

	image_presentation pr;
	present_ok(&png, IMAGE_MIME_PNG, &pr);
	uint32_t dw, dh;
	expected_dims(w, h, &dw, &dh);
	for (unsigned step = 0; step < pr.shrink_steps; step++) {
		dw = (uint32_t)fmax(1.0, floor(dw * 0.75));
		dh = (uint32_t)fmax(1.0, floor(dh * 0.75));
	}
	assert_int_equal(pr.width, dw);
	assert_int_equal(pr.height, dh);
	if (h < 100)
		assert_int_equal(pr.shrink_steps, 0);
	print_message("%s: %u x %u -> %u x %u (%u shrink steps)\n", case_names[which], w, h, pr.width,
	              pr.height, pr.shrink_steps);
	check_against_reference(expected, w, h, &pr);
	image_presentation_free(&pr);

	/* A small one of the same kind fits and passes unchanged, after its
	 * full decode. */
	c.w = w < 300 ? w : 300;
	fx_buf small = fx_png_write(c.w, h < 300 ? h : 300, &spec, color_row, &rc);
	present_ok(&small, IMAGE_MIME_PNG, &pr);
	assert_false(pr.transformed);
	image_presentation_free(&pr);
	free(small.data);
	free(expected);
	free(png.data);
}

static void test_all_color_types_and_depths(void **state)
{
	(void)state;
	for (int which = 0; which < CASE_COUNT; which++)
		run_color_case((color_case)which, 4001, 7);
	/* A taller Adam7 image with a vertical ratio too. */
	run_color_case(CASE_RGBA8_ADAM7, 2600, 2300);
}

/* ---- JPEG and WebP ---------------------------------------------------------------- */

static void test_jpeg_and_webp_pass_through(void **state)
{
	(void)state;
	fx_jpeg_spec s;
	memset(&s, 0, sizeof s);
	s.sof = 0xC2;
	s.precision = 8;
	s.width = 2000;
	s.height = 1500;
	s.components = 3;
	s.scans = 4;
	fx_buf jpg = fx_jpeg_build(&s);
	image_presentation pr;
	present_ok(&jpg, IMAGE_MIME_JPEG, &pr);
	assert_false(pr.transformed);
	assert_string_equal(pr.mime_type, IMAGE_MIME_JPEG);
	assert_int_equal(pr.width, 2000);
	assert_int_equal(pr.height, 1500);
	assert_int_equal(pr.original_width, 2000);
	assert_memory_equal(pr.bytes, jpg.data, jpg.len);
	image_presentation_free(&pr);
	free(jpg.data);

	unsigned char p[16];
	fx_buf body = {0};
	uint32_t n = fx_vp8l_payload(p, 1024, 768, 1);
	fx_webp_chunk(&body, "VP8L", p, n);
	fx_buf webp = fx_webp_wrap(&body);
	present_ok(&webp, NULL, &pr);
	assert_false(pr.transformed);
	assert_string_equal(pr.mime_type, IMAGE_MIME_WEBP);
	assert_int_equal(pr.width, 1024);
	assert_int_equal(pr.height, 768);
	char *text = jsonx_to_string(pr.receipt, 0);
	assert_non_null(strstr(text, "\"mimeType\":\"image/webp\""));
	assert_non_null(strstr(text, "\"transformed\":false"));
	free(text);
	image_presentation_free(&pr);
	free(webp.data);
	free(body.data);
}

static void test_jpeg_and_webp_over_bounds_unavailable(void **state)
{
	(void)state;
	/* Over 2000 pixels on one side. */
	fx_jpeg_spec s;
	memset(&s, 0, sizeof s);
	s.sof = 0xC0;
	s.precision = 8;
	s.width = 2001;
	s.height = 100;
	s.components = 3;
	fx_buf jpg = fx_jpeg_build(&s);
	present_refused(&jpg, IMAGE_MIME_JPEG, IMAGE_DIAGNOSTIC_NOT_RESAMPLED);
	free(jpg.data);
	/* Small, but over 4 MiB of base64 (3 MiB + 1 byte of file). */
	s.width = 100;
	s.height = 2000;
	s.comment_bytes = 3145728;
	jpg = fx_jpeg_build(&s);
	assert_true(image_base64_len(jpg.len) > 4194304);
	present_refused(&jpg, IMAGE_MIME_JPEG, IMAGE_DIAGNOSTIC_NOT_RESAMPLED);
	free(jpg.data);
	/* Just under: passes. */
	s.comment_bytes = 3145728 - 400;
	jpg = fx_jpeg_build(&s);
	if (image_base64_len(jpg.len) <= 4194304) {
		image_presentation pr;
		present_ok(&jpg, IMAGE_MIME_JPEG, &pr);
		image_presentation_free(&pr);
	}
	free(jpg.data);

	unsigned char p[16];
	fx_buf body = {0};
	uint32_t n = fx_vp8_payload(p, 2500, 100);
	fx_webp_chunk(&body, "VP8 ", p, n);
	fx_buf webp = fx_webp_wrap(&body);
	present_refused(&webp, IMAGE_MIME_WEBP, IMAGE_DIAGNOSTIC_NOT_RESAMPLED);
	free(webp.data);
	free(body.data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_preview_5120x2880_rgba_pixel_by_pixel),
	    cmocka_unit_test(test_preview_rgb_fractional_ratio),
	    cmocka_unit_test(test_noise_shrinks_by_three_quarters),
	    cmocka_unit_test(test_heavy_png_within_box_is_not_enlarged),
	    cmocka_unit_test(test_png_that_fits_passes_unchanged),
	    cmocka_unit_test(test_damaged_png_data_is_caught),
	    cmocka_unit_test(test_all_color_types_and_depths),
	    cmocka_unit_test(test_jpeg_and_webp_pass_through),
	    cmocka_unit_test(test_jpeg_and_webp_over_bounds_unavailable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
