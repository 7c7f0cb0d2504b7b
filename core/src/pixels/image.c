/*
 * pixels/image.c — image_inspect, image_present and the presentation
 * receipt (spec/images.md §4, §9).
 */
#include "pixels/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pixels/container.h"
#include "pixels/pngcodec.h"
#include "pixels/resample.h"
#include "util/error.h"
#include "util/jsonx.h"

/* zlib level of the preview's PNG (spec/images.md §9.4). */
#define PREVIEW_ZLIB_LEVEL 6

/* ------------------------------------------------------------------------ */
/* base64                                                                    */

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t image_base64_len(size_t len)
{
	return (len + 2) / 3 * 4;
}

char *image_base64_encode(const void *data, size_t len, size_t *len_out)
{
	const unsigned char *in = data;
	if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
		return NULL;
	size_t out_len = image_base64_len(len);
	char *out = malloc(out_len + 1);
	if (!out)
		return NULL;
	char *o = out;
	size_t i = 0;
	for (; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		o[0] = b64_alphabet[v >> 18];
		o[1] = b64_alphabet[(v >> 12) & 63];
		o[2] = b64_alphabet[(v >> 6) & 63];
		o[3] = b64_alphabet[v & 63];
		o += 4;
	}
	if (i < len) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0);
		o[0] = b64_alphabet[v >> 18];
		o[1] = b64_alphabet[(v >> 12) & 63];
		o[2] = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
		o[3] = '=';
		o += 4;
	}
	*o = '\0';
	if (len_out)
		*len_out = out_len;
	return out;
}

/* ------------------------------------------------------------------------ */
/* types                                                                     */

const char *image_mime_for_path(const char *path)
{
	if (!path)
		return NULL;
	const char *slash = strrchr(path, '/');
	const char *dot = strrchr(slash ? slash + 1 : path, '.');
	if (!dot)
		return NULL;
	if (strcasecmp(dot, ".png") == 0)
		return IMAGE_MIME_PNG;
	if (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0)
		return IMAGE_MIME_JPEG;
	if (strcasecmp(dot, ".webp") == 0)
		return IMAGE_MIME_WEBP;
	return NULL;
}

const char *image_mime_from_signature(const void *bytes, size_t len)
{
	const unsigned char *p = bytes;
	static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	if (len >= 8 && memcmp(p, png_sig, 8) == 0)
		return IMAGE_MIME_PNG;
	if (len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
		return IMAGE_MIME_JPEG;
	if (len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
		return IMAGE_MIME_WEBP;
	if (len >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0))
		return "image/gif";
	return NULL;
}

const char *image_delivery_status(relay_status code)
{
	return (code == RELAY_E_UNSUPPORTED || code == RELAY_E_TOO_LARGE) ? "presentation-unavailable"
	                                                                  : "transfer-failed";
}

/* ------------------------------------------------------------------------ */
/* inspect                                                                   */

relay_status image_inspect(const void *bytes, size_t len, const char *mime_type, image_info *info,
                           relay_error *err)
{
	memset(info, 0, sizeof *info);
	if (!bytes && len > 0)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "no image bytes given");
	if (len > IMAGE_MAX_ORIGINAL_BYTES)
		return relay_error_set(err, RELAY_E_TOO_LARGE, 0,
		                       "the original has %zu bytes; originals may have at most 64 MiB "
		                       "(67,108,864 bytes)",
		                       len);
	if (len == 0)
		return relay_error_set(err, RELAY_E_UNSUPPORTED, 0, "the image file is empty");
	const char *found = image_mime_from_signature(bytes, len);
	if (mime_type && strcmp(mime_type, IMAGE_MIME_PNG) != 0 && strcmp(mime_type, IMAGE_MIME_JPEG) != 0 &&
	    strcmp(mime_type, IMAGE_MIME_WEBP) != 0)
		return relay_error_set(err, RELAY_E_UNSUPPORTED, 0,
		                       "only PNG, JPEG and WebP images are supported (this one is %s)",
		                       mime_type);
	if (!found || (strcmp(found, "image/gif") == 0))
		return relay_error_set(
		    err, RELAY_E_UNSUPPORTED, 0,
		    found ? "the image is a GIF; only PNG, JPEG and WebP images are supported"
		          : "the bytes are not a PNG, JPEG or WebP image (unknown signature)");
	if (mime_type && strcmp(mime_type, found) != 0)
		return relay_error_set(
		    err, RELAY_E_UNSUPPORTED, 0,
		    "the image's bytes do not match its type: expected %s, the signature is %s", mime_type,
		    found);
	const unsigned char *data = bytes;
	if (strcmp(found, IMAGE_MIME_PNG) == 0)
		return container_check_png(data, len, info, err);
	if (strcmp(found, IMAGE_MIME_JPEG) == 0)
		return container_check_jpeg(data, len, info, err);
	return container_check_webp(data, len, info, err);
}

/* ------------------------------------------------------------------------ */
/* policy and receipt                                                        */

json_object *image_policy_new(void)
{
	json_object *p = json_object_new_object();
	json_object *supported = json_object_new_array();
	json_object *resampled = json_object_new_array();
	json_object *frames = json_object_new_array();
	if (!p || !supported || !resampled || !frames)
		goto fail;
	json_object_array_add(supported, json_object_new_string(IMAGE_MIME_PNG));
	json_object_array_add(supported, json_object_new_string(IMAGE_MIME_JPEG));
	json_object_array_add(supported, json_object_new_string(IMAGE_MIME_WEBP));
	json_object_array_add(resampled, json_object_new_string(IMAGE_MIME_PNG));
	json_object_array_add(frames, json_object_new_string("baseline"));
	json_object_array_add(frames, json_object_new_string("progressive"));
	bool ok = jsonx_add_int(p, "version", 1) &&
	          jsonx_add_str(p, "processor", "mcp-relay/image-presentation") &&
	          jsonx_add_int(p, "maxWidth", IMAGE_PREVIEW_MAX_SIDE) &&
	          jsonx_add_int(p, "maxHeight", IMAGE_PREVIEW_MAX_SIDE) &&
	          jsonx_add_int(p, "maxBytes", IMAGE_PREVIEW_MAX_BASE64) &&
	          jsonx_add_str(p, "maxBytesEncoding", "base64") &&
	          jsonx_add_int(p, "maxOriginalBytes", IMAGE_MAX_ORIGINAL_BYTES) &&
	          jsonx_add_int(p, "maxPixels", IMAGE_MAX_PIXELS) &&
	          jsonx_add_int(p, "maxDimension", IMAGE_MAX_DIMENSION);
	ok = ok && jsonx_add(p, "supportedMimeTypes", supported);
	supported = NULL;
	ok = ok && jsonx_add(p, "resampledMimeTypes", resampled);
	resampled = NULL;
	ok = ok && jsonx_add_str(p, "animation", "reject") &&
	     jsonx_add_str(p, "compressedPngMetadata", "ignore");
	ok = ok && jsonx_add(p, "jpegFrames", frames);
	frames = NULL;
	ok = ok && jsonx_add_int(p, "maxContainerRecords", IMAGE_MAX_CONTAINER_RECORDS) &&
	     jsonx_add_str(p, "dimensionSpace", "stored");
	if (!ok)
		goto fail;
	return p;
fail:
	json_object_put(p);
	json_object_put(supported);
	json_object_put(resampled);
	json_object_put(frames);
	return NULL;
}

static json_object *receipt_new(const image_presentation *pr)
{
	json_object *r = json_object_new_object();
	json_object *policy = image_policy_new();
	if (!r || !policy)
		goto fail;
	bool ok = jsonx_add_int(r, "originalWidth", pr->original_width) &&
	          jsonx_add_int(r, "originalHeight", pr->original_height) &&
	          jsonx_add_int(r, "width", pr->width) && jsonx_add_int(r, "height", pr->height) &&
	          jsonx_add_str(r, "mimeType", pr->mime_type) && jsonx_add_str(r, "sha256", pr->sha256) &&
	          jsonx_add_int(r, "bytes", (int64_t)pr->len) &&
	          jsonx_add_bool(r, "transformed", pr->transformed);
	ok = ok && jsonx_add(r, "policy", policy);
	policy = NULL;
	if (!ok)
		goto fail;
	return r;
fail:
	json_object_put(r);
	json_object_put(policy);
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* present                                                                   */

static bool fits_preview(uint32_t width, uint32_t height, size_t bytes)
{
	return width <= IMAGE_PREVIEW_MAX_SIDE && height <= IMAGE_PREVIEW_MAX_SIDE &&
	       image_base64_len(bytes) <= IMAGE_PREVIEW_MAX_BASE64;
}

/* Resamples the decoded PNG into the preview box and shrinks it by 0.75
 * steps until its base64 fits (§9.3 step 4). */
static relay_status resample_to_fit(const pngcodec_image *img, image_presentation *out, relay_error *err)
{
	/* Never enlarge: an original within the box but too heavy starts at
	 * its own size (decision: the box is a bound, not a target). */
	double scale = fmin(1.0, fmin((double)IMAGE_PREVIEW_MAX_SIDE / img->width,
	                              (double)IMAGE_PREVIEW_MAX_SIDE / img->height));
	uint32_t w = (uint32_t)fmax(1.0, round(img->width * scale));
	uint32_t h = (uint32_t)fmax(1.0, round(img->height * scale));
	unsigned steps = 0;
	for (;;) {
		unsigned char *pixels = NULL, *png = NULL;
		size_t png_len = 0;
		bool opaque = true;
		relay_status st = resample_area(img->pixels, img->width, img->height, img->channels, w, h,
		                                &pixels, &opaque, err);
		if (st != RELAY_OK)
			return st;
		unsigned channels = img->channels;
		if (channels == 4 && opaque) {
			/* Every alpha is 255: encode as RGB (§9.4). */
			size_t n = (size_t)w * h;
			for (size_t i = 0; i < n; i++) {
				pixels[3 * i] = pixels[4 * i];
				pixels[3 * i + 1] = pixels[4 * i + 1];
				pixels[3 * i + 2] = pixels[4 * i + 2];
			}
			channels = 3;
		}
		st = pngcodec_encode(pixels, w, h, channels, PREVIEW_ZLIB_LEVEL, &png, &png_len, err);
		free(pixels);
		if (st != RELAY_OK)
			return st;
		if (image_base64_len(png_len) <= IMAGE_PREVIEW_MAX_BASE64) {
			out->bytes = png;
			out->len = png_len;
			out->width = w;
			out->height = h;
			out->shrink_steps = steps;
			return RELAY_OK;
		}
		free(png);
		uint32_t nw = (uint32_t)fmax(1.0, floor(w * 0.75));
		uint32_t nh = (uint32_t)fmax(1.0, floor(h * 0.75));
		if (nw == w && nh == h)
			return relay_error_set(
			    err, RELAY_E_UNSUPPORTED, 0,
			    "the PNG cannot be shown within 4 MiB of base64 even at %u x %u pixels", w, h);
		w = nw;
		h = nh;
		steps++;
	}
}

void image_presentation_free(image_presentation *p)
{
	if (!p)
		return;
	free(p->bytes);
	free(p->base64);
	json_object_put(p->receipt);
	memset(p, 0, sizeof *p);
}

relay_status image_present(const void *bytes, size_t len, const char *mime_type, image_presentation *out,
                           relay_error *err)
{
	relay_status st;
	image_info info, check;
	pngcodec_image img;
	memset(out, 0, sizeof *out);
	memset(&img, 0, sizeof img);

	st = image_inspect(bytes, len, mime_type, &info, err);
	if (st != RELAY_OK)
		goto cleanup;
	out->original_width = info.width;
	out->original_height = info.height;
	out->mime_type = info.mime_type;
	bool fits = fits_preview(info.width, info.height, len);

	if (info.format == IMAGE_FORMAT_PNG) {
		/* Always decoded in full, so damaged image data is caught even
		 * when the original is attached unchanged (§9.3 step 2). */
		st = pngcodec_decode(bytes, len, !fits, &img, err);
		if (st != RELAY_OK)
			goto cleanup;
		if (img.width != info.width || img.height != info.height) {
			st = relay_error_set(err, RELAY_E_INTERNAL, 0,
			                     "the decoded PNG is %u x %u, its header %u x %u", img.width,
			                     img.height, info.width, info.height);
			goto cleanup;
		}
	} else if (!fits) {
		st = relay_error_set(err, RELAY_E_UNSUPPORTED, 0, "%s", IMAGE_DIAGNOSTIC_NOT_RESAMPLED);
		goto cleanup;
	}

	if (fits) {
		out->bytes = malloc(len);
		if (!out->bytes) {
			st = relay_error_set(err, RELAY_E_NO_MEMORY, 0,
			                     "out of memory copying a %zu-byte preview", len);
			goto cleanup;
		}
		memcpy(out->bytes, bytes, len);
		out->len = len;
		out->width = info.width;
		out->height = info.height;
		out->transformed = false;
	} else {
		st = resample_to_fit(&img, out, err);
		if (st != RELAY_OK)
			goto cleanup;
		out->mime_type = IMAGE_MIME_PNG;
		out->transformed = out->len != len || memcmp(out->bytes, bytes, len) != 0;
	}

	/* The preview is checked again as what it claims to be (§9.3 step 5). */
	st = image_inspect(out->bytes, out->len, out->mime_type, &check, err);
	if (st != RELAY_OK) {
		st = relay_error_set(err, RELAY_E_INTERNAL, 0, "the produced preview is not valid: %s",
		                     err->message);
		goto cleanup;
	}
	if (check.width != out->width || check.height != out->height ||
	    !fits_preview(check.width, check.height, out->len)) {
		st =
		    relay_error_set(err, RELAY_E_INTERNAL, 0,
		                    "the produced preview (%u x %u, %zu bytes) is outside the preview bounds",
		                    check.width, check.height, out->len);
		goto cleanup;
	}

	sha256_buffer_hex(out->bytes, out->len, out->sha256);
	out->base64 = image_base64_encode(out->bytes, out->len, &out->base64_len);
	out->receipt = out->base64 ? receipt_new(out) : NULL;
	if (!out->base64 || !out->receipt) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0,
		                     "out of memory for the preview's base64 or receipt");
		goto cleanup;
	}
	st = RELAY_OK;

cleanup:
	free(img.pixels);
	if (st != RELAY_OK)
		image_presentation_free(out);
	return st;
}
