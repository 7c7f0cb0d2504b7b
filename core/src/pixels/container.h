/*
 * pixels/container.h — container validation of PNG, JPEG and WebP originals
 * (spec/images.md §9.2), internal to pixels/. image_inspect() in
 * image.h is the public entry; these are its per-format halves.
 *
 * Each walks the whole container without decoding pixel data, fills *info
 * (zeroed by the caller) and returns RELAY_OK, or RELAY_E_UNSUPPORTED /
 * RELAY_E_TOO_LARGE with the rule that failed in err->message. The size
 * limit is the caller's; the pixel and dimension limits are checked here
 * the moment the header gives the dimensions.
 */
#ifndef RELAY_PIXELS_CONTAINER_H
#define RELAY_PIXELS_CONTAINER_H

#include <stddef.h>
#include <stdint.h>

#include "pixels/image.h"

relay_status container_check_png(const unsigned char *data, size_t len, image_info *info, relay_error *err);
relay_status container_check_jpeg(const unsigned char *data, size_t len, image_info *info, relay_error *err);
relay_status container_check_webp(const unsigned char *data, size_t len, image_info *info, relay_error *err);

/* The dimension and pixel limits of spec/images.md §4 for a header's width and
 * height: RELAY_OK or RELAY_E_TOO_LARGE naming the limit. */
relay_status container_check_limits(const char *what, uint64_t width, uint64_t height, relay_error *err);

/* CRC-32 (ISO 3309, as PNG uses it) of data[0..len), continuing `crc` (0 to
 * start). Slice-by-8; the tables are built once. */
uint32_t container_crc32(uint32_t crc, const unsigned char *data, size_t len);

#endif
