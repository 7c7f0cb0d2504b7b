/*
 * pixels/pngcodec.c — libpng decoding to RGB(A)8 and minimal PNG encoding.
 *
 * libpng reports errors by longjmp. Each setjmp lives in a small function
 * whose changing state is kept in a struct owned by its caller, so nothing
 * the caller frees afterwards is an indeterminate local of the function
 * that called setjmp.
 */
#include "pixels/pngcodec.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pixels/pngcheck.h"
#include "util/error.h"
#include "util/strbuf.h"

/* Ancillary chunks libpng knows but the preview does not need: skipped
 * unread (PLTE and tRNS are kept). */
static const png_byte skipped_chunks[] = "bKGD\0cHRM\0eXIf\0gAMA\0hIST\0iCCP\0iTXt\0oFFs\0pCAL\0pHYs\0"
                                         "sBIT\0sCAL\0sPLT\0sRGB\0tEXt\0tIME\0zTXt";
#define SKIPPED_CHUNK_COUNT 17

typedef struct codec_state {
	/* decoding input */
	const unsigned char *data;
	size_t len;
	size_t pos;
	/* encoding output */
	strbuf out;
	/* results and resources */
	png_structp png;
	png_infop info;
	unsigned char *pixels;
	unsigned char **rows;
	unsigned char *row;
	uint32_t width, height;
	unsigned channels;
	char message[200];
	int no_memory;
} codec_state;

static void on_error(png_structp png, png_const_charp message)
{
	codec_state *s = png_get_error_ptr(png);
	snprintf(s->message, sizeof s->message, "%s", message ? message : "unknown libpng error");
	png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp message)
{
	(void)png;
	(void)message;
}

static void on_read(png_structp png, png_bytep out, size_t n)
{
	codec_state *s = png_get_io_ptr(png);
	if (n > s->len - s->pos)
		png_error(png, "the PNG data ends early");
	memcpy(out, s->data + s->pos, n);
	s->pos += n;
}

static void on_write(png_structp png, png_bytep data, size_t n)
{
	codec_state *s = png_get_io_ptr(png);
	strbuf_append(&s->out, data, n);
	if (!strbuf_ok(&s->out)) {
		s->no_memory = 1;
		png_error(png, "out of memory for the encoded PNG");
	}
}

static void on_flush(png_structp png)
{
	(void)png;
}

/* Returns 0, or 1 after a libpng error (s->message says which). */
static int decode_run(codec_state *s, int keep_pixels)
{
	if (setjmp(png_jmpbuf(s->png)))
		return 1;
	png_set_read_fn(s->png, s, on_read);
	png_set_keep_unknown_chunks(s->png, PNG_HANDLE_CHUNK_NEVER, NULL, 0);
	png_set_keep_unknown_chunks(s->png, PNG_HANDLE_CHUNK_NEVER, skipped_chunks, SKIPPED_CHUNK_COUNT);
	png_set_crc_action(s->png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE); /* checked by the container */
	png_set_benign_errors(s->png, 0);
	png_set_user_limits(s->png, 32768, 32768);
	png_read_info(s->png, s->info);

	int ctype = png_get_color_type(s->png, s->info);
	int depth = png_get_bit_depth(s->png, s->info);
	int trns = png_get_valid(s->png, s->info, PNG_INFO_tRNS) != 0;
	if (ctype == PNG_COLOR_TYPE_PALETTE)
		png_set_palette_to_rgb(s->png);
	if ((ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_GRAY_ALPHA) && depth < 8)
		png_set_expand_gray_1_2_4_to_8(s->png);
	if (trns)
		png_set_tRNS_to_alpha(s->png);
	if (depth == 16)
		png_set_strip_16(s->png);
	if (ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_GRAY_ALPHA)
		png_set_gray_to_rgb(s->png);
	int passes = png_set_interlace_handling(s->png);
	png_read_update_info(s->png, s->info);

	s->width = png_get_image_width(s->png, s->info);
	s->height = png_get_image_height(s->png, s->info);
	s->channels = png_get_channels(s->png, s->info);
	size_t rowbytes = png_get_rowbytes(s->png, s->info);
	if ((s->channels != 3 && s->channels != 4) || png_get_bit_depth(s->png, s->info) != 8 ||
	    rowbytes != (size_t)s->width * s->channels)
		png_error(s->png, "unexpected pixel layout after the 8-bit RGB(A) conversion");

	if (keep_pixels || passes > 1) {
		s->pixels = malloc(rowbytes * s->height);
		s->rows = malloc(sizeof *s->rows * s->height);
		if (!s->pixels || !s->rows) {
			s->no_memory = 1;
			png_error(s->png, "out of memory for the decoded pixels");
		}
		for (uint32_t y = 0; y < s->height; y++)
			s->rows[y] = s->pixels + (size_t)y * rowbytes;
		png_read_image(s->png, s->rows);
	} else {
		s->row = malloc(rowbytes);
		if (!s->row) {
			s->no_memory = 1;
			png_error(s->png, "out of memory for a decoded row");
		}
		for (uint32_t y = 0; y < s->height; y++)
			png_read_row(s->png, s->row, NULL);
	}
	png_read_end(s->png, NULL);
	return 0;
}

relay_status pngcodec_decode(const unsigned char *data, size_t len, bool keep_pixels, pngcodec_image *out,
                             relay_error *err)
{
	codec_state s;
	relay_status st = RELAY_OK;
	memset(&s, 0, sizeof s);
	memset(out, 0, sizeof *out);
	if (!keep_pixels) {
		/* A plain capture is checked without libpng; anything else, damage included, is
		 * decoded by libpng, whose message is the one reported (pngcheck.h). */
		pngcheck_image plain;
		if (pngcheck_plain_sound(data, len, &plain)) {
			out->width = plain.width;
			out->height = plain.height;
			out->channels = plain.channels;
			return RELAY_OK;
		}
	}
	s.data = data;
	s.len = len;
	s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, on_error, on_warning);
	if (s.png)
		s.info = png_create_info_struct(s.png);
	if (!s.png || !s.info) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory starting the PNG decoder");
		goto cleanup;
	}
	if (decode_run(&s, keep_pixels) != 0) {
		if (s.no_memory)
			st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "%s (the image is %u x %u)",
			                     s.message, s.width, s.height);
		else
			st = relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
			                     "the PNG image data cannot be decoded: %s", s.message);
		goto cleanup;
	}
	if (keep_pixels) {
		out->pixels = s.pixels;
		s.pixels = NULL;
	}
	out->width = s.width;
	out->height = s.height;
	out->channels = s.channels;
cleanup:
	png_destroy_read_struct(s.png ? &s.png : NULL, s.info ? &s.info : NULL, NULL);
	free(s.pixels);
	free(s.rows);
	free(s.row);
	return st;
}

static int encode_run(codec_state *s, const unsigned char *pixels, int zlib_level)
{
	if (setjmp(png_jmpbuf(s->png)))
		return 1;
	png_set_write_fn(s->png, s, on_write, on_flush);
	png_set_IHDR(s->png, s->info, s->width, s->height, 8,
	             s->channels == 4 ? PNG_COLOR_TYPE_RGB_ALPHA : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
	             PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_set_compression_level(s->png, zlib_level);
	png_set_filter(s->png, PNG_FILTER_TYPE_BASE, PNG_ALL_FILTERS);
	png_set_compression_buffer_size(s->png, 256 * 1024);
	png_write_info(s->png, s->info);
	size_t rowbytes = (size_t)s->width * s->channels;
	for (uint32_t y = 0; y < s->height; y++)
		png_write_row(s->png, pixels + (size_t)y * rowbytes);
	png_write_end(s->png, NULL);
	return 0;
}

relay_status pngcodec_encode(const unsigned char *pixels, uint32_t width, uint32_t height, unsigned channels,
                             int zlib_level, unsigned char **png_out, size_t *png_len, relay_error *err)
{
	codec_state s;
	relay_status st = RELAY_OK;
	memset(&s, 0, sizeof s);
	*png_out = NULL;
	*png_len = 0;
	if (!pixels || width == 0 || height == 0 || (channels != 3 && channels != 4))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "nothing to encode (%u x %u, %u channels)", width, height, channels);
	strbuf_init(&s.out);
	s.width = width;
	s.height = height;
	s.channels = channels;
	s.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s, on_error, on_warning);
	if (s.png)
		s.info = png_create_info_struct(s.png);
	if (!s.png || !s.info) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory starting the PNG encoder");
		goto cleanup;
	}
	strbuf_reserve(&s.out, (size_t)width * height * channels / 4 + 4096);
	if (encode_run(&s, pixels, zlib_level) != 0) {
		st = relay_error_set(err, s.no_memory ? RELAY_E_NO_MEMORY : RELAY_E_INTERNAL, 0,
		                     "the preview could not be encoded as PNG: %s", s.message);
		goto cleanup;
	}
	*png_out = (unsigned char *)strbuf_detach(&s.out, png_len);
	if (!*png_out)
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory for the encoded preview");
cleanup:
	png_destroy_write_struct(s.png ? &s.png : NULL, s.info ? &s.info : NULL);
	strbuf_free(&s.out);
	return st;
}
