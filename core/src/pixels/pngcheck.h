/*
 * pixels/pngcheck.h — the image data of a plain PNG checked without libpng, internal to pixels/
 * (spec/images.md §9.3 step 2: the original is decoded in full, so damage is caught even when it
 * is attached unchanged).
 *
 * A screenshot is "plain": 8-bit RGB or RGBA, not interlaced, its IDAT chunks in one run, no
 * tRNS or PLTE and no unknown critical chunk. Such an image's data is sound when its zlib
 * stream (header, every deflate block, the Adler-32 at its end, nothing after it) inflates to
 * exactly height rows of one filter byte (0 to 4) and width × channels sample bytes: whatever
 * the filtered bytes are, the pixels they unfilter to are valid, so they are not unfiltered
 * here. That check costs an inflate and an SSE2 Adler-32 (relay_support/adler32.h); libpng's
 * full decode of the same image computes zlib's scalar Adler-32 and unfilters every row, more
 * than twice the instructions for a 1280 × 800 capture.
 *
 * pngcheck only ever says "sound" or "not mine": everything it does not accept (another
 * layout, or any damage) goes to libpng (pngcodec.c), whose message the caller reports.
 */
#ifndef RELAY_PIXELS_PNGCHECK_H
#define RELAY_PIXELS_PNGCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pngcheck_image {
	uint32_t width;    /* pixels */
	uint32_t height;   /* pixels */
	unsigned channels; /* 3 (RGB) or 4 (RGBA) */
} pngcheck_image;

/* True when data[0 .. len) (borrowed; a container already validated, container.h) is a plain
 * PNG whose image data is sound, with *out filled; false otherwise (*out then unspecified),
 * also when memory for the inflate ran out. Never fails otherwise; reads nothing outside data. */
bool pngcheck_plain_sound(const unsigned char *data, size_t len, pngcheck_image *out);

#endif
