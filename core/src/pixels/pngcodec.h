/*
 * pixels/pngcodec.h — PNG decoding and encoding through libpng, internal to
 * pixels/ (spec/images.md §9.4).
 *
 * Decoding gives 8-bit RGB or RGBA: palettes expanded, tRNS honoured
 * (palette alpha, or the single transparent grey or RGB value), grey
 * expanded to RGB, 16-bit samples keep their high byte, Adam7 interlacing
 * undone. Ancillary chunks other than PLTE and tRNS are skipped unread (so
 * iCCP, zTXt and iTXt are never inflated); libpng's "benign" errors are
 * errors, so a damaged zlib stream (a wrong Adler-32, trailing garbage) is
 * caught. The caller has validated the container first (container.h): CRCs
 * are not computed a second time.
 */
#ifndef RELAY_PIXELS_PNGCODEC_H
#define RELAY_PIXELS_PNGCODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/status.h"

typedef struct pngcodec_image {
	unsigned char *pixels; /* width * height * channels bytes, top row first; owned (free()), or NULL */
	uint32_t width;        /* pixels */
	uint32_t height;       /* pixels */
	unsigned channels;     /* 3 (RGB) or 4 (RGBA) */
} pngcodec_image;

/* Decodes data[0..len) (borrowed) completely. With keep_pixels the pixels
 * are kept in out->pixels; without, the image is decoded row by row and
 * only checked (out->pixels stays NULL). RELAY_E_UNSUPPORTED with libpng's
 * message when the data is damaged; RELAY_E_NO_MEMORY. */
relay_status pngcodec_decode(const unsigned char *data, size_t len, bool keep_pixels, pngcodec_image *out,
                             relay_error *err);

/* Encodes pixels (borrowed, width * height * channels, channels 3 or 4) as
 * an 8-bit, non-interlaced PNG with only IHDR, IDAT and IEND: per row the
 * filter with the smallest sum of absolute values, zlib level
 * `zlib_level`. *png_out is malloc'd (free()), its size in *png_len. */
relay_status pngcodec_encode(const unsigned char *pixels, uint32_t width, uint32_t height, unsigned channels,
                             int zlib_level, unsigned char **png_out, size_t *png_len, relay_error *err);

#endif
