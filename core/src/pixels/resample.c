/*
 * pixels/resample.c — exact box filter (area averaging) with fractional
 * pixel coverage, separable, in double precision.
 *
 * For every output row the source rows it covers are visited once each:
 * a source row's horizontal pass is computed when it is first needed and
 * kept while the next output row (which may share that one source row, its
 * last) uses it, so each source row is filtered horizontally exactly once.
 */
#include "pixels/resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* The contributions along one axis: output index o takes count[o] source
 * pixels from start[o], with weights weight[o * max_count + k]; sum[o] is
 * their total (the covered length, w / dst_w up to rounding). */
typedef struct axis_weights {
	uint32_t *start;
	uint32_t *count;
	double *weight;
	double *sum;
	uint32_t max_count;
} axis_weights;

static void axis_free(axis_weights *a)
{
	free(a->start);
	free(a->count);
	free(a->weight);
	free(a->sum);
	memset(a, 0, sizeof *a);
}

static int axis_build(axis_weights *a, uint32_t n, uint32_t dst_n)
{
	memset(a, 0, sizeof *a);
	a->max_count = (uint32_t)((n + dst_n - 1) / dst_n) + 1;
	a->start = malloc(sizeof *a->start * dst_n);
	a->count = malloc(sizeof *a->count * dst_n);
	a->weight = malloc(sizeof *a->weight * (size_t)dst_n * a->max_count);
	a->sum = malloc(sizeof *a->sum * dst_n);
	if (!a->start || !a->count || !a->weight || !a->sum) {
		axis_free(a);
		return -1;
	}
	for (uint32_t o = 0; o < dst_n; o++) {
		double left = (double)((uint64_t)o * n) / (double)dst_n;
		double right = (double)((uint64_t)(o + 1) * n) / (double)dst_n;
		uint32_t first = (uint32_t)floor(left);
		uint32_t end = (uint32_t)ceil(right);
		if (end > n)
			end = n;
		uint32_t count = 0;
		double sum = 0;
		double *w = a->weight + (size_t)o * a->max_count;
		a->start[o] = first;
		for (uint32_t i = first; i < end && count < a->max_count; i++) {
			double lo = left > (double)i ? left : (double)i;
			double hi = right < (double)i + 1.0 ? right : (double)i + 1.0;
			double cover = hi - lo;
			if (cover <= 0) {
				if (count == 0)
					a->start[o] = i + 1;
				continue;
			}
			w[count++] = cover;
			sum += cover;
		}
		a->count[o] = count;
		a->sum[o] = sum;
	}
	return 0;
}

static void horizontal_rgb(const unsigned char *row, const axis_weights *ax, uint32_t dst_w, double *h)
{
	for (uint32_t o = 0; o < dst_w; o++) {
		const unsigned char *p = row + (size_t)ax->start[o] * 3;
		const double *w = ax->weight + (size_t)o * ax->max_count;
		double s0 = 0, s1 = 0, s2 = 0;
		for (uint32_t k = 0; k < ax->count[o]; k++, p += 3) {
			s0 += w[k] * p[0];
			s1 += w[k] * p[1];
			s2 += w[k] * p[2];
		}
		h[3 * o] = s0;
		h[3 * o + 1] = s1;
		h[3 * o + 2] = s2;
	}
}

static void horizontal_rgba(const unsigned char *row, const axis_weights *ax, uint32_t dst_w, double *h)
{
	for (uint32_t o = 0; o < dst_w; o++) {
		const unsigned char *p = row + (size_t)ax->start[o] * 4;
		const double *w = ax->weight + (size_t)o * ax->max_count;
		double s0 = 0, s1 = 0, s2 = 0, sa = 0;
		for (uint32_t k = 0; k < ax->count[o]; k++, p += 4) {
			double wa = w[k] * p[3];
			s0 += wa * p[0];
			s1 += wa * p[1];
			s2 += wa * p[2];
			sa += wa;
		}
		h[4 * o] = s0;
		h[4 * o + 1] = s1;
		h[4 * o + 2] = s2;
		h[4 * o + 3] = sa;
	}
}

static unsigned char to_byte(double v)
{
	v = floor(v + 0.5);
	if (v <= 0)
		return 0;
	if (v >= 255)
		return 255;
	return (unsigned char)v;
}

relay_status resample_area(const unsigned char *src, uint32_t width, uint32_t height, unsigned channels,
                           uint32_t dst_w, uint32_t dst_h, unsigned char **dst_out, bool *opaque_out,
                           relay_error *err)
{
	relay_status st = RELAY_OK;
	axis_weights ax, ay;
	double *h = NULL, *acc = NULL;
	unsigned char *dst = NULL;
	bool opaque = true;
	*dst_out = NULL;
	memset(&ax, 0, sizeof ax);
	memset(&ay, 0, sizeof ay);
	if (!src || (channels != 3 && channels != 4) || dst_w == 0 || dst_h == 0 || dst_w > width ||
	    dst_h > height)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "cannot resample %u x %u (%u channels) to %u x %u", width, height,
		                       channels, dst_w, dst_h);
	size_t cw = (size_t)dst_w * channels;
	h = malloc(sizeof *h * cw);
	acc = malloc(sizeof *acc * cw);
	dst = malloc(cw * dst_h);
	if (!h || !acc || !dst || axis_build(&ax, width, dst_w) != 0 || axis_build(&ay, height, dst_h) != 0) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory resampling %u x %u to %u x %u",
		                     width, height, dst_w, dst_h);
		goto cleanup;
	}

	size_t src_stride = (size_t)width * channels;
	int64_t cached_row = -1; /* the source row whose horizontal pass is in h */
	for (uint32_t oy = 0; oy < dst_h; oy++) {
		memset(acc, 0, sizeof *acc * cw);
		const double *wy = ay.weight + (size_t)oy * ay.max_count;
		for (uint32_t k = 0; k < ay.count[oy]; k++) {
			uint32_t sy = ay.start[oy] + k;
			if ((int64_t)sy != cached_row) {
				const unsigned char *row = src + (size_t)sy * src_stride;
				if (channels == 3)
					horizontal_rgb(row, &ax, dst_w, h);
				else
					horizontal_rgba(row, &ax, dst_w, h);
				cached_row = sy;
			}
			double w = wy[k];
			for (size_t i = 0; i < cw; i++)
				acc[i] += w * h[i];
		}
		unsigned char *out = dst + (size_t)oy * cw;
		if (channels == 3) {
			for (uint32_t o = 0; o < dst_w; o++) {
				double area = ax.sum[o] * ay.sum[oy];
				out[3 * o] = to_byte(acc[3 * o] / area);
				out[3 * o + 1] = to_byte(acc[3 * o + 1] / area);
				out[3 * o + 2] = to_byte(acc[3 * o + 2] / area);
			}
		} else {
			for (uint32_t o = 0; o < dst_w; o++) {
				double area = ax.sum[o] * ay.sum[oy];
				double alpha_sum = acc[4 * o + 3];
				if (alpha_sum > 0) {
					out[4 * o] = to_byte(acc[4 * o] / alpha_sum);
					out[4 * o + 1] = to_byte(acc[4 * o + 1] / alpha_sum);
					out[4 * o + 2] = to_byte(acc[4 * o + 2] / alpha_sum);
				} else {
					out[4 * o] = out[4 * o + 1] = out[4 * o + 2] = 0;
				}
				out[4 * o + 3] = to_byte(alpha_sum / area);
				if (out[4 * o + 3] != 255)
					opaque = false;
			}
		}
	}
	*dst_out = dst;
	dst = NULL;
	if (opaque_out)
		*opaque_out = channels == 3 || opaque;
cleanup:
	axis_free(&ax);
	axis_free(&ay);
	free(h);
	free(acc);
	free(dst);
	return st;
}
