/*
 * tests/unit/pixels/pixels_fixtures.h — builders of test images for the
 * test_pixels_*.c tests: PNGs written with libpng from a pixel function,
 * hand-built PNG chunk streams, JPEG marker streams and WebP RIFF files,
 * and an independent double-precision area-average reference.
 *
 * Header-only (static functions); include from one test file each.
 */
#ifndef RELAY_TEST_PIXELS_FIXTURES_H
#define RELAY_TEST_PIXELS_FIXTURES_H

#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pixels/container.h"

/* ---- a growable byte buffer ---------------------------------------------- */

typedef struct {
	unsigned char *data;
	size_t len, cap;
} fx_buf;

static inline void fx_put(fx_buf *b, const void *data, size_t len)
{
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		b->data = realloc(b->data, cap);
		if (!b->data)
			abort();
		b->cap = cap;
	}
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
}

static inline void fx_put_u8(fx_buf *b, unsigned v)
{
	unsigned char c = (unsigned char)v;
	fx_put(b, &c, 1);
}

static inline void fx_put_be16(fx_buf *b, unsigned v)
{
	unsigned char c[2] = {(unsigned char)(v >> 8), (unsigned char)v};
	fx_put(b, c, 2);
}

static inline void fx_put_be32(fx_buf *b, uint32_t v)
{
	unsigned char c[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
	                      (unsigned char)v};
	fx_put(b, c, 4);
}

static inline void fx_put_le32(fx_buf *b, uint32_t v)
{
	unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
	                      (unsigned char)(v >> 24)};
	fx_put(b, c, 4);
}

/* ---- PNG written by libpng ------------------------------------------------ */

/* Fills one row of `width` samples in the PNG's own layout (bit depth and
 * colour type as given to fx_png_write). */
typedef void (*fx_row_fn)(uint32_t y, unsigned char *row, void *ctx);

typedef struct {
	int color_type; /* PNG_COLOR_TYPE_* */
	int bit_depth;
	int interlace; /* PNG_INTERLACE_NONE / ADAM7 */
	int zlib_level;
	const png_color *palette;
	int palette_len;
	const png_byte *trns; /* palette alpha */
	int trns_len;
	const png_color_16 *trns_color; /* grey or RGB transparent value */
	int extra_chunks;               /* write tEXt, zTXt, iTXt, iCCP-free ancillaries too */
} fx_png_spec;

static inline void fx_png_write_fn(png_structp png, png_bytep data, size_t len)
{
	fx_put(png_get_io_ptr(png), data, len);
}

static inline void fx_png_flush_fn(png_structp png)
{
	(void)png;
}

static inline fx_buf fx_png_write(uint32_t width, uint32_t height, const fx_png_spec *spec, fx_row_fn fn,
                                  void *ctx)
{
	fx_buf out = {0};
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	if (setjmp(png_jmpbuf(png)))
		abort();
	png_set_write_fn(png, &out, fx_png_write_fn, fx_png_flush_fn);
	png_set_IHDR(png, info, width, height, spec->bit_depth, spec->color_type, spec->interlace,
	             PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_set_compression_level(png, spec->zlib_level);
	if (spec->palette)
		png_set_PLTE(png, info, spec->palette, spec->palette_len);
	if (spec->trns || spec->trns_color)
		png_set_tRNS(png, info, spec->trns, spec->trns_len, spec->trns_color);
	if (spec->extra_chunks) {
		png_text text[3];
		memset(text, 0, sizeof text);
		text[0].compression = PNG_TEXT_COMPRESSION_NONE;
		text[0].key = (char *)"Comment";
		text[0].text = (char *)"plain text chunk";
		text[1].compression = PNG_TEXT_COMPRESSION_zTXt;
		text[1].key = (char *)"Description";
		text[1].text = (char *)"compressed text chunk, compressed text chunk";
		text[2].compression = PNG_ITXT_COMPRESSION_zTXt;
		text[2].key = (char *)"Title";
		text[2].text = (char *)"international text";
		png_set_text(png, info, text, 3);
		png_set_gAMA(png, info, 0.45455);
	}
	png_write_info(png, info);
	size_t rowbytes = png_get_rowbytes(png, info);
	unsigned char *row = calloc(1, rowbytes);
	int passes = png_set_interlace_handling(png);
	for (int pass = 0; pass < passes; pass++) {
		for (uint32_t y = 0; y < height; y++) {
			memset(row, 0, rowbytes);
			fn(y, row, ctx);
			png_write_row(png, row);
		}
	}
	free(row);
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	return out;
}

/* An 8-bit RGBA picture held in memory, written as RGB or RGBA. */
typedef struct {
	const unsigned char *rgba;
	uint32_t width;
	int with_alpha;
} fx_rgba_ctx;

static inline void fx_rgba_row(uint32_t y, unsigned char *row, void *ctx)
{
	const fx_rgba_ctx *c = ctx;
	const unsigned char *src = c->rgba + (size_t)y * c->width * 4;
	if (c->with_alpha) {
		memcpy(row, src, (size_t)c->width * 4);
		return;
	}
	for (uint32_t x = 0; x < c->width; x++)
		memcpy(row + 3 * x, src + 4 * x, 3);
}

static inline fx_buf fx_png_from_rgba(const unsigned char *rgba, uint32_t width, uint32_t height,
                                      int with_alpha, int zlib_level)
{
	fx_png_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.color_type = with_alpha ? PNG_COLOR_TYPE_RGB_ALPHA : PNG_COLOR_TYPE_RGB;
	spec.bit_depth = 8;
	spec.interlace = PNG_INTERLACE_NONE;
	spec.zlib_level = zlib_level;
	fx_rgba_ctx ctx = {rgba, width, with_alpha};
	return fx_png_write(width, height, &spec, fx_rgba_row, &ctx);
}

/* Decodes any PNG to 8-bit RGBA with libpng's simplified API. */
static inline unsigned char *fx_png_decode_rgba(const unsigned char *data, size_t len, uint32_t *w,
                                                uint32_t *h)
{
	png_image image;
	memset(&image, 0, sizeof image);
	image.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_memory(&image, data, len))
		return NULL;
	image.format = PNG_FORMAT_RGBA;
	unsigned char *pixels = malloc(PNG_IMAGE_SIZE(image));
	if (!pixels || !png_image_finish_read(&image, NULL, pixels, 0, NULL)) {
		free(pixels);
		png_image_free(&image);
		return NULL;
	}
	*w = image.width;
	*h = image.height;
	return pixels;
}

/* ---- hand-built PNG chunk streams ---------------------------------------- */

static inline void fx_png_signature(fx_buf *b)
{
	static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	fx_put(b, sig, 8);
}

static inline void fx_png_chunk(fx_buf *b, const char *type, const void *data, uint32_t len)
{
	fx_put_be32(b, len);
	size_t at = b->len;
	fx_put(b, type, 4);
	fx_put(b, data, len);
	fx_put_be32(b, container_crc32(0, b->data + at, (size_t)len + 4));
}

static inline void fx_png_ihdr(fx_buf *b, uint32_t w, uint32_t h, unsigned depth, unsigned ctype,
                               unsigned interlace)
{
	unsigned char d[13];
	d[0] = (unsigned char)(w >> 24);
	d[1] = (unsigned char)(w >> 16);
	d[2] = (unsigned char)(w >> 8);
	d[3] = (unsigned char)w;
	d[4] = (unsigned char)(h >> 24);
	d[5] = (unsigned char)(h >> 16);
	d[6] = (unsigned char)(h >> 8);
	d[7] = (unsigned char)h;
	d[8] = (unsigned char)depth;
	d[9] = (unsigned char)ctype;
	d[10] = 0;
	d[11] = 0;
	d[12] = (unsigned char)interlace;
	fx_png_chunk(b, "IHDR", d, 13);
}

/* A zlib stream of `len` zero bytes in stored blocks (any image data). */
static inline void fx_zlib_zeros(fx_buf *b, size_t len)
{
	fx_put_u8(b, 0x78);
	fx_put_u8(b, 0x01);
	size_t left = len;
	do {
		size_t n = left > 65535 ? 65535 : left;
		fx_put_u8(b, left == n ? 1 : 0);
		unsigned char hdr[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)~n,
		                        (unsigned char)(~n >> 8)};
		fx_put(b, hdr, 4);
		unsigned char zero[1024] = {0};
		for (size_t k = 0; k < n; k += sizeof zero)
			fx_put(b, zero, n - k < sizeof zero ? n - k : sizeof zero);
		left -= n;
	} while (left > 0);
	fx_put_be32(b, (uint32_t)(len % 65521) << 16 | 1u); /* Adler-32 of zeros */
}

/* ---- JPEG marker streams ---------------------------------------------------- */

typedef struct {
	unsigned sof;       /* 0xC0 baseline, 0xC2 progressive, ... */
	unsigned precision; /* 8 */
	unsigned width, height;
	unsigned components;  /* 1, 3, 4 */
	size_t comment_bytes; /* a COM segment payload of this size (split as needed) */
	int scans;            /* number of SOS segments */
} fx_jpeg_spec;

static inline void fx_jpeg_segment(fx_buf *b, unsigned marker, const unsigned char *payload, size_t len)
{
	fx_put_u8(b, 0xFF);
	fx_put_u8(b, marker);
	fx_put_be16(b, (unsigned)(len + 2));
	fx_put(b, payload, len);
}

static inline fx_buf fx_jpeg_build(const fx_jpeg_spec *s)
{
	fx_buf b = {0};
	fx_put_u8(&b, 0xFF);
	fx_put_u8(&b, 0xD8);
	static const unsigned char jfif[14] = {'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0};
	fx_jpeg_segment(&b, 0xE0, jfif, sizeof jfif);
	unsigned char dqt[65];
	memset(dqt, 1, sizeof dqt);
	dqt[0] = 0;
	fx_jpeg_segment(&b, 0xDB, dqt, sizeof dqt);
	size_t left = s->comment_bytes;
	unsigned char *com = calloc(1, 65533);
	memset(com, 'c', 65533);
	while (left > 0) {
		size_t n = left > 65533 ? 65533 : left;
		fx_jpeg_segment(&b, 0xFE, com, n);
		left -= n;
	}
	free(com);
	unsigned char sof[6 + 3 * 4];
	sof[0] = (unsigned char)s->precision;
	sof[1] = (unsigned char)(s->height >> 8);
	sof[2] = (unsigned char)s->height;
	sof[3] = (unsigned char)(s->width >> 8);
	sof[4] = (unsigned char)s->width;
	sof[5] = (unsigned char)s->components;
	for (unsigned c = 0; c < s->components; c++) {
		sof[6 + 3 * c] = (unsigned char)(c + 1);
		sof[6 + 3 * c + 1] = 0x11;
		sof[6 + 3 * c + 2] = 0;
	}
	fx_jpeg_segment(&b, s->sof, sof, 6 + 3 * (size_t)s->components);
	unsigned char dht[17 + 2];
	memset(dht, 0, sizeof dht);
	dht[1] = 2; /* two codes of length 1 */
	fx_jpeg_segment(&b, 0xC4, dht, sizeof dht);
	for (int scan = 0; scan < (s->scans ? s->scans : 1); scan++) {
		unsigned char sos[1 + 2 + 3] = {1, 1, 0x00, 0, 63, 0};
		fx_jpeg_segment(&b, 0xDA, sos, sizeof sos);
		/* Entropy-coded data with stuffed FF 00 and a restart marker. */
		static const unsigned char ecs[] = {0x12, 0x34, 0xFF, 0x00, 0x56, 0xFF,
		                                    0xD0, 0x78, 0x9A, 0xFF, 0x00};
		fx_put(&b, ecs, sizeof ecs);
	}
	fx_put_u8(&b, 0xFF);
	fx_put_u8(&b, 0xD9);
	return b;
}

/* ---- WebP RIFF files -------------------------------------------------------- */

static inline void fx_webp_chunk(fx_buf *b, const char *fourcc, const unsigned char *data, uint32_t len)
{
	fx_put(b, fourcc, 4);
	fx_put_le32(b, len);
	fx_put(b, data, len);
	if (len & 1)
		fx_put_u8(b, 0);
}

/* VP8L payload header for w x h (plus a few bytes of "data"). */
static inline uint32_t fx_vp8l_payload(unsigned char *p, unsigned w, unsigned h, int alpha)
{
	uint32_t bits = (uint32_t)(w - 1) | (uint32_t)(h - 1) << 14 | (uint32_t)(alpha ? 1 : 0) << 28;
	p[0] = 0x2F;
	p[1] = (unsigned char)bits;
	p[2] = (unsigned char)(bits >> 8);
	p[3] = (unsigned char)(bits >> 16);
	p[4] = (unsigned char)(bits >> 24);
	p[5] = 0x11;
	p[6] = 0x22;
	return 7;
}

/* VP8 (lossy) key-frame header for w x h. */
static inline uint32_t fx_vp8_payload(unsigned char *p, unsigned w, unsigned h)
{
	p[0] = 0x10; /* key frame (bit 0 clear), version 0, show frame */
	p[1] = 0x02;
	p[2] = 0x00;
	p[3] = 0x9D;
	p[4] = 0x01;
	p[5] = 0x2A;
	p[6] = (unsigned char)w;
	p[7] = (unsigned char)((w >> 8) & 0x3F);
	p[8] = (unsigned char)h;
	p[9] = (unsigned char)((h >> 8) & 0x3F);
	p[10] = 0x33;
	p[11] = 0x44;
	return 12;
}

/* Wraps chunks (already built in `body`) in RIFF/WEBP. */
static inline fx_buf fx_webp_wrap(const fx_buf *body)
{
	fx_buf b = {0};
	fx_put(&b, "RIFF", 4);
	fx_put_le32(&b, (uint32_t)(body->len + 4));
	fx_put(&b, "WEBP", 4);
	fx_put(&b, body->data, body->len);
	return b;
}

static inline void fx_vp8x(fx_buf *body, unsigned flags, unsigned w, unsigned h)
{
	unsigned char x[10] = {0};
	x[0] = (unsigned char)flags;
	x[4] = (unsigned char)(w - 1);
	x[5] = (unsigned char)((w - 1) >> 8);
	x[6] = (unsigned char)((w - 1) >> 16);
	x[7] = (unsigned char)(h - 1);
	x[8] = (unsigned char)((h - 1) >> 8);
	x[9] = (unsigned char)((h - 1) >> 16);
	fx_webp_chunk(body, "VP8X", x, 10);
}

/* ---- the area-average reference ---------------------------------------------- */

/* Straightforward 2-D box filter over an RGBA8 source: for output (X, Y),
 * every source pixel in the covered rectangle weighted by its overlap area;
 * colour weighted by alpha and divided by the summed weighted alpha; alpha
 * the weighted mean. Writes the unrounded values (4 doubles per pixel). */
static inline void fx_area_reference(const unsigned char *rgba, uint32_t w, uint32_t h, uint32_t dw,
                                     uint32_t dh, uint32_t X, uint32_t Y, double out[4])
{
	double x0 = (double)((uint64_t)X * w) / dw, x1 = (double)((uint64_t)(X + 1) * w) / dw;
	double y0 = (double)((uint64_t)Y * h) / dh, y1 = (double)((uint64_t)(Y + 1) * h) / dh;
	double sw = 0, sa = 0, sc[3] = {0, 0, 0};
	for (uint32_t sy = (uint32_t)floor(y0); sy < h && (double)sy < y1; sy++) {
		double oy = fmin(y1, sy + 1.0) - fmax(y0, (double)sy);
		if (oy <= 0)
			continue;
		for (uint32_t sx = (uint32_t)floor(x0); sx < w && (double)sx < x1; sx++) {
			double ox = fmin(x1, sx + 1.0) - fmax(x0, (double)sx);
			if (ox <= 0)
				continue;
			const unsigned char *p = rgba + ((size_t)sy * w + sx) * 4;
			double wt = ox * oy;
			sw += wt;
			sa += wt * p[3];
			for (int c = 0; c < 3; c++)
				sc[c] += wt * p[3] * p[c];
		}
	}
	for (int c = 0; c < 3; c++)
		out[c] = sa > 0 ? sc[c] / sa : 0;
	out[3] = sa / sw;
}

/* Compares a decoded preview (RGBA8) with the reference. Exact, except
 * where the reference lies within 1e-7 of a rounding tie (x.5): there the
 * summation order may decide, and +-1 is accepted. Returns mismatches;
 * *ties_out counts the tie cases. */
static inline size_t fx_compare_with_reference(const unsigned char *src_rgba, uint32_t w, uint32_t h,
                                               const unsigned char *preview_rgba, uint32_t dw, uint32_t dh,
                                               size_t *ties_out, char *first, size_t first_len)
{
	size_t mismatches = 0, ties = 0;
	if (first_len)
		first[0] = '\0';
	for (uint32_t Y = 0; Y < dh; Y++) {
		for (uint32_t X = 0; X < dw; X++) {
			double ref[4];
			fx_area_reference(src_rgba, w, h, dw, dh, X, Y, ref);
			const unsigned char *got = preview_rgba + ((size_t)Y * dw + X) * 4;
			int transparent = floor(ref[3] + 0.5) == 0;
			for (int c = 0; c < 4; c++) {
				if (c < 3 && transparent && ref[3] == 0)
					continue; /* colour of a fully transparent pixel: no meaning */
				double v = ref[c];
				double r = floor(v + 0.5);
				r = r < 0 ? 0 : r > 255 ? 255 : r;
				int tie = fabs(v - floor(v) - 0.5) < 1e-7;
				if (tie)
					ties++;
				int diff = (int)got[c] - (int)r;
				if (diff == 0 || (tie && (diff == 1 || diff == -1)))
					continue;
				if (mismatches == 0 && first_len)
					snprintf(first, first_len,
					         "(%u,%u) channel %d: got %u, reference %.6f", X, Y, c,
					         got[c], v);
				mismatches++;
			}
		}
	}
	*ties_out = ties;
	return mismatches;
}

#endif
