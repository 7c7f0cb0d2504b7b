/*
 * pixels/resample.h — area-averaging downscale (spec/images.md §9.4), internal to
 * pixels/.
 *
 * Output pixel (X, Y) of a dst_w x dst_h image covers the source rectangle
 * [X * w / dst_w, (X + 1) * w / dst_w) x [Y * h / dst_h, (Y + 1) * h / dst_h)
 * (each bound computed in double as (double)(X * w) / dst_w). Every source
 * pixel counts with the fraction of it inside that rectangle (the product of
 * its horizontal and vertical overlaps). Separable: a horizontal pass per
 * source row, then a vertical pass, accumulated in double. With alpha, the
 * colour channels are weighted by alpha and divided by the summed weighted
 * alpha (0 where that sum is 0), and the alpha is the plain weighted
 * average. Results are rounded to nearest (floor(v + 0.5)) and clamped to
 * 0..255.
 */
#ifndef RELAY_PIXELS_RESAMPLE_H
#define RELAY_PIXELS_RESAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "relay/status.h"

/* Resamples src (width x height x channels, channels 3 or 4; borrowed) to
 * dst_w x dst_h with 1 <= dst_w <= width and 1 <= dst_h <= height. *dst_out
 * is malloc'd (free()) with dst_w x dst_h x channels bytes. With channels
 * 4, *opaque_out (may be NULL) tells whether every output alpha is 255. */
relay_status resample_area(const unsigned char *src, uint32_t width, uint32_t height, unsigned channels,
                           uint32_t dst_w, uint32_t dst_h, unsigned char **dst_out, bool *opaque_out,
                           relay_error *err);

#endif
