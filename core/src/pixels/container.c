/*
 * pixels/container.c — PNG, JPEG and WebP container validation (spec/images.md
 * §9.2). Reads headers and walks chunks or markers; never decodes pixels and
 * never allocates.
 */
#include "pixels/container.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "util/error.h"

/* ------------------------------------------------------------------------ */
/* CRC-32                                                                    */

/* Filled once by crc_build() under crc_once, read-only afterwards. */
static uint32_t crc_tables[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_build(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		crc_tables[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = crc_tables[0][n];
		for (int t = 1; t < 8; t++) {
			c = crc_tables[0][c & 0xFF] ^ (c >> 8);
			crc_tables[t][n] = c;
		}
	}
}

uint32_t container_crc32(uint32_t crc, const unsigned char *p, size_t len)
{
	pthread_once(&crc_once, crc_build);
	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
		                     (uint32_t)p[3] << 24);
		uint32_t hi =
		    (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
		crc = crc_tables[7][lo & 0xFF] ^ crc_tables[6][(lo >> 8) & 0xFF] ^
		      crc_tables[5][(lo >> 16) & 0xFF] ^ crc_tables[4][lo >> 24] ^ crc_tables[3][hi & 0xFF] ^
		      crc_tables[2][(hi >> 8) & 0xFF] ^ crc_tables[1][(hi >> 16) & 0xFF] ^
		      crc_tables[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len-- > 0)
		crc = crc_tables[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
	return ~crc;
}

/* ------------------------------------------------------------------------ */

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t be16(const unsigned char *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t le24(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
}

static uint32_t le16(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static relay_status refuse(relay_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static relay_status refuse(relay_error *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	relay_status st = relay_error_setv(err, RELAY_E_UNSUPPORTED, 0, fmt, ap);
	va_end(ap);
	return st;
}

relay_status container_check_limits(const char *what, uint64_t width, uint64_t height, relay_error *err)
{
	if (width > IMAGE_MAX_DIMENSION || height > IMAGE_MAX_DIMENSION)
		return relay_error_set(
		    err, RELAY_E_TOO_LARGE, 0,
		    "the %s is %llu x %llu pixels; originals may have at most 32,768 pixels "
		    "per side",
		    what, (unsigned long long)width, (unsigned long long)height);
	if (width * height > IMAGE_MAX_PIXELS)
		return relay_error_set(err, RELAY_E_TOO_LARGE, 0,
		                       "the %s is %llu x %llu = %llu pixels; originals may have at most "
		                       "40,000,000 pixels",
		                       what, (unsigned long long)width, (unsigned long long)height,
		                       (unsigned long long)(width * height));
	return RELAY_OK;
}

/* ------------------------------------------------------------------------ */
/* PNG                                                                       */

static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static int chunk_is(const unsigned char *type, const char *name)
{
	return memcmp(type, name, 4) == 0;
}

static int png_depth_allowed(unsigned color_type, unsigned depth)
{
	switch (color_type) {
	case 0: return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
	case 2: return depth == 8 || depth == 16;
	case 3: return depth == 1 || depth == 2 || depth == 4 || depth == 8;
	case 4: return depth == 8 || depth == 16;
	case 6: return depth == 8 || depth == 16;
	default: return 0;
	}
}

relay_status container_check_png(const unsigned char *data, size_t len, image_info *info, relay_error *err)
{
	if (len < 8 || memcmp(data, png_signature, 8) != 0)
		return refuse(err,
		              "the PNG signature is missing (the file does not start with the 8 PNG bytes)");
	info->format = IMAGE_FORMAT_PNG;
	info->mime_type = IMAGE_MIME_PNG;

	size_t pos = 8;
	unsigned chunks = 0;
	int seen_plte = 0, seen_idat = 0, idat_ended = 0, seen_trns = 0;
	uint32_t plte_entries = 0;
	for (;;) {
		if (len - pos < 12)
			return refuse(err, "the PNG is truncated: %s at byte %zu",
			              chunks == 0 ? "no IHDR chunk" : "no IEND chunk", pos);
		uint32_t clen = be32(data + pos);
		const unsigned char *type = data + pos + 4;
		if (clen > 0x7FFFFFFFu)
			return refuse(err, "PNG chunk %u at byte %zu declares a length over 2^31-1",
			              chunks + 1, pos);
		for (int i = 0; i < 4; i++) {
			unsigned char c = type[i];
			if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')))
				return refuse(
				    err, "PNG chunk %u at byte %zu has an invalid type (not four letters)",
				    chunks + 1, pos);
		}
		if ((uint64_t)clen + 12 > len - pos)
			return refuse(
			    err, "the PNG is truncated: chunk '%.4s' at byte %zu needs %u bytes, %zu remain",
			    (const char *)type, pos, clen + 12, len - pos);
		if (++chunks > IMAGE_MAX_CONTAINER_RECORDS)
			return refuse(err, "the PNG has more than 10,000 chunks");
		const unsigned char *body = type + 4;
		uint32_t want_crc = be32(body + clen);
		if (container_crc32(0, type, (size_t)clen + 4) != want_crc)
			return refuse(err,
			              "PNG chunk '%.4s' at byte %zu has a wrong CRC (the file is damaged)",
			              (const char *)type, pos);

		if (chunks == 1) {
			if (!chunk_is(type, "IHDR") || clen != 13)
				return refuse(
				    err, "the first PNG chunk must be IHDR of 13 bytes, found '%.4s' of %u",
				    (const char *)type, clen);
			uint32_t w = be32(body), h = be32(body + 4);
			unsigned depth = body[8], ctype = body[9];
			if (w == 0 || h == 0 || w > 0x7FFFFFFFu || h > 0x7FFFFFFFu)
				return refuse(err, "the PNG IHDR declares an invalid size %u x %u", w, h);
			relay_status st = container_check_limits("PNG", w, h, err);
			if (st != RELAY_OK)
				return st;
			if (!png_depth_allowed(ctype, depth))
				return refuse(
				    err,
				    "the PNG IHDR has colour type %u with bit depth %u, which PNG does "
				    "not allow",
				    ctype, depth);
			if (body[10] != 0 || body[11] != 0)
				return refuse(err,
				              "the PNG IHDR has compression method %u and filter method %u "
				              "(both must be 0)",
				              body[10], body[11]);
			if (body[12] > 1)
				return refuse(err, "the PNG IHDR has interlace method %u (must be 0 or 1)",
				              body[12]);
			info->width = w;
			info->height = h;
			info->bit_depth = depth;
			info->color_type = ctype;
			info->interlaced = body[12] == 1;
			info->has_alpha = ctype == 4 || ctype == 6;
		} else if (chunk_is(type, "IHDR")) {
			return refuse(err, "the PNG has a second IHDR chunk at byte %zu", pos);
		} else if (chunk_is(type, "IEND")) {
			if (clen != 0)
				return refuse(err, "the PNG IEND chunk is not empty");
			if (!seen_idat)
				return refuse(err, "the PNG has no IDAT chunk");
			if (pos + 12 != len)
				return refuse(err, "the PNG has %zu bytes after its IEND chunk",
				              len - pos - 12);
			break;
		} else if (chunk_is(type, "IDAT")) {
			if (idat_ended)
				return refuse(
				    err, "the PNG's IDAT chunks are not consecutive (another at byte %zu)",
				    pos);
			if (info->color_type == 3 && !seen_plte)
				return refuse(err,
				              "the PNG has a palette colour type but no PLTE before IDAT");
			seen_idat = 1;
		} else if (chunk_is(type, "PLTE")) {
			if (seen_plte)
				return refuse(err, "the PNG has a second PLTE chunk");
			if (seen_idat)
				return refuse(err, "the PNG's PLTE chunk comes after IDAT");
			if (info->color_type == 0 || info->color_type == 4)
				return refuse(err, "the PNG has a PLTE chunk in a greyscale image");
			if (clen == 0 || clen % 3 != 0 || clen > 768)
				return refuse(err,
				              "the PNG PLTE chunk has %u bytes (must be 3 to 768, a multiple "
				              "of 3)",
				              clen);
			if (info->color_type == 3 && clen / 3 > (1u << info->bit_depth))
				return refuse(err,
				              "the PNG palette has %u entries, more than bit depth %u allows",
				              clen / 3, info->bit_depth);
			seen_plte = 1;
			plte_entries = clen / 3;
		} else if (chunk_is(type, "acTL") || chunk_is(type, "fcTL") || chunk_is(type, "fdAT")) {
			return refuse(err,
			              "the PNG is animated (it has an %.4s chunk); animated images are not "
			              "presented",
			              (const char *)type);
		} else if (!(type[0] & 0x20)) {
			return refuse(err, "the PNG has an unknown critical chunk '%.4s'",
			              (const char *)type);
		} else {
			if (chunk_is(type, "tRNS")) {
				if (seen_trns || seen_idat || info->color_type == 4 ||
				    info->color_type == 6 || (info->color_type == 3 && !seen_plte))
					return refuse(err,
					              "the PNG tRNS chunk is misplaced or not allowed for "
					              "colour type %u",
					              info->color_type);
				uint32_t want = info->color_type == 0 ? 2 : info->color_type == 2 ? 6 : 0;
				if (info->color_type == 3 ? (clen == 0 || clen > plte_entries) : clen != want)
					return refuse(
					    err, "the PNG tRNS chunk has %u bytes, wrong for colour type %u",
					    clen, info->color_type);
				seen_trns = 1;
				info->has_alpha = true;
			}
			/* Other ancillary chunks (iCCP, zTXt and iTXt included) are
			 * checked by CRC and never inflated. */
		}
		if (seen_idat && !chunk_is(type, "IDAT"))
			idat_ended = 1;
		pos += (size_t)clen + 12;
	}
	info->records = chunks;
	return RELAY_OK;
}

/* ------------------------------------------------------------------------ */
/* JPEG                                                                      */

relay_status container_check_jpeg(const unsigned char *data, size_t len, image_info *info, relay_error *err)
{
	if (len < 4 || data[0] != 0xFF || data[1] != 0xD8)
		return refuse(err, "the JPEG does not start with SOI (FF D8)");
	info->format = IMAGE_FORMAT_JPEG;
	info->mime_type = IMAGE_MIME_JPEG;

	size_t pos = 2;
	unsigned markers = 1, frames = 0, scans = 0;
	for (;;) {
		if (pos >= len)
			return refuse(err, "the JPEG is truncated: no EOI marker");
		if (data[pos] != 0xFF)
			return refuse(err, "the JPEG has no marker where one must be, at byte %zu", pos);
		while (pos < len && data[pos] == 0xFF)
			pos++; /* fill bytes */
		if (pos >= len)
			return refuse(err, "the JPEG is truncated: no EOI marker");
		unsigned marker = data[pos++];
		size_t marker_at = pos - 2;
		if (++markers > IMAGE_MAX_CONTAINER_RECORDS)
			return refuse(err, "the JPEG has more than 10,000 markers");
		if (marker == 0xD9) {
			if (!frames || !scans)
				return refuse(err, "the JPEG ends (EOI) before %s",
				              frames ? "any scan" : "its frame");
			if (pos != len)
				return refuse(err, "the JPEG has %zu bytes after its EOI marker", len - pos);
			break;
		}
		if (marker == 0xD8)
			return refuse(err, "the JPEG has a second SOI marker at byte %zu", marker_at);
		if (marker >= 0xD0 && marker <= 0xD7)
			return refuse(err,
			              "the JPEG has a restart marker outside entropy-coded data at byte %zu",
			              marker_at);
		if (marker == 0x01)
			continue; /* TEM: no length */
		if (marker == 0x00 || (marker >= 0x02 && marker <= 0xBF))
			return refuse(err, "the JPEG has an invalid marker FF %02X at byte %zu", marker,
			              marker_at);
		if (len - pos < 2)
			return refuse(err, "the JPEG is truncated inside marker FF %02X", marker);
		size_t seg = be16(data + pos);
		if (seg < 2)
			return refuse(err, "the JPEG marker FF %02X at byte %zu has an invalid length %zu",
			              marker, marker_at, seg);
		if (seg > len - pos)
			return refuse(err,
			              "the JPEG is truncated: marker FF %02X at byte %zu needs %zu bytes",
			              marker, marker_at, seg);
		const unsigned char *p = data + pos + 2;
		if (marker == 0xC0 || marker == 0xC2) {
			if (frames++)
				return refuse(err, "the JPEG has more than one frame");
			if (seg < 8)
				return refuse(err, "the JPEG frame header is too short");
			unsigned precision = p[0], nf = p[5];
			uint32_t h = be16(p + 1), w = be16(p + 3);
			if (precision != 8)
				return refuse(err,
				              "the JPEG has %u-bit samples; only 8-bit JPEGs are presented",
				              precision);
			if (h == 0)
				return refuse(
				    err, "the JPEG frame has a zero (deferred) height; DNL is not supported");
			if (w == 0)
				return refuse(err, "the JPEG frame has a zero width");
			if (nf != 1 && nf != 3 && nf != 4)
				return refuse(err, "the JPEG frame has %u components (must be 1, 3 or 4)",
				              nf);
			if (seg != 8 + 3 * (size_t)nf)
				return refuse(err,
				              "the JPEG frame header length %zu does not match its %u "
				              "components",
				              seg, nf);
			for (unsigned c = 0; c < nf; c++) {
				unsigned hs = p[6 + 3 * c + 1] >> 4, vs = p[6 + 3 * c + 1] & 15,
				         tq = p[6 + 3 * c + 2];
				if (hs < 1 || hs > 4 || vs < 1 || vs > 4 || tq > 3)
					return refuse(
					    err,
					    "the JPEG frame has invalid sampling or table values for "
					    "component %u",
					    c + 1);
			}
			relay_status st = container_check_limits("JPEG", w, h, err);
			if (st != RELAY_OK)
				return st;
			info->width = w;
			info->height = h;
			info->components = nf;
			info->progressive = marker == 0xC2;
		} else if ((marker >= 0xC1 && marker <= 0xCF) && marker != 0xC4 && marker != 0xC8 &&
		           marker != 0xCC) {
			return refuse(err,
			              "the JPEG frame is SOF%u; only baseline (SOF0) and progressive (SOF2) "
			              "JPEGs are presented",
			              marker - 0xC0);
		} else if (marker == 0xDC) {
			return refuse(err, "the JPEG has a DNL marker; deferred heights are not supported");
		} else if (marker == 0xDA) {
			if (!frames)
				return refuse(err, "the JPEG has a scan (SOS) before its frame");
			unsigned ns = seg >= 3 ? p[0] : 0;
			if (ns < 1 || ns > 4 || ns > info->components || seg != 6 + 2 * (size_t)ns)
				return refuse(err, "the JPEG scan header at byte %zu is malformed",
				              marker_at);
			scans++;
			/* Skip the entropy-coded data to the next marker: FF
			 * followed by neither 00 (stuffing) nor a restart. */
			size_t q = pos + seg;
			for (;;) {
				const unsigned char *ff = memchr(data + q, 0xFF, len - q);
				if (!ff)
					return refuse(err,
					              "the JPEG is truncated inside its scan data (no EOI)");
				q = (size_t)(ff - data);
				if (q + 1 >= len)
					return refuse(err,
					              "the JPEG is truncated inside its scan data (no EOI)");
				unsigned next = data[q + 1];
				if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
					q += 2;
					continue;
				}
				if (next == 0xFF) { /* fill byte before a marker */
					q += 1;
					continue;
				}
				break;
			}
			pos = q;
			continue;
		}
		/* DHT, DQT, DRI, DAC, APPn, COM, JPG, JPGn: skipped. */
		pos += seg;
	}
	if (!frames)
		return refuse(err, "the JPEG has no frame");
	info->records = markers;
	return RELAY_OK;
}

/* ------------------------------------------------------------------------ */
/* WebP                                                                      */

relay_status container_check_webp(const unsigned char *data, size_t len, image_info *info, relay_error *err)
{
	if (len < 12 || memcmp(data, "RIFF", 4) != 0 || memcmp(data + 8, "WEBP", 4) != 0)
		return refuse(err, "the WebP does not start with a RIFF header of form WEBP");
	info->format = IMAGE_FORMAT_WEBP;
	info->mime_type = IMAGE_MIME_WEBP;
	uint64_t riff = le32(data + 4);
	if (riff != (uint64_t)len - 8)
		return refuse(err,
		              "the WebP RIFF size is %llu but the file holds %zu bytes after the header "
		              "(truncated or padded)",
		              (unsigned long long)riff, len - 8);

	size_t pos = 12;
	unsigned chunks = 0, images = 0;
	int extended = 0;
	uint32_t canvas_w = 0, canvas_h = 0;
	while (pos < len) {
		if (len - pos < 8)
			return refuse(err, "the WebP is truncated inside a chunk header at byte %zu", pos);
		const unsigned char *fourcc = data + pos;
		uint64_t csize = le32(data + pos + 4);
		uint64_t padded = csize + (csize & 1);
		if (padded > len - pos - 8 && csize == len - pos - 8)
			padded = csize; /* a last chunk without its pad byte */
		if (padded > len - pos - 8)
			return refuse(err, "the WebP is truncated: chunk '%.4s' at byte %zu needs %llu bytes",
			              (const char *)fourcc, pos, (unsigned long long)padded + 8);
		if (++chunks > IMAGE_MAX_CONTAINER_RECORDS)
			return refuse(err, "the WebP has more than 10,000 chunks");
		const unsigned char *p = data + pos + 8;
		if (chunk_is(fourcc, "VP8X")) {
			if (chunks != 1)
				return refuse(err, "the WebP VP8X chunk is not the first chunk");
			if (csize < 10)
				return refuse(err, "the WebP VP8X chunk is too short");
			if (p[0] & 0x02)
				return refuse(
				    err, "the WebP is animated (VP8X animation flag); animated images are "
				         "not presented");
			extended = 1;
			info->extended = true;
			info->has_alpha = (p[0] & 0x10) != 0;
			canvas_w = le24(p + 4) + 1;
			canvas_h = le24(p + 7) + 1;
			relay_status st = container_check_limits("WebP canvas", canvas_w, canvas_h, err);
			if (st != RELAY_OK)
				return st;
		} else if (chunk_is(fourcc, "ANIM") || chunk_is(fourcc, "ANMF")) {
			return refuse(err,
			              "the WebP is animated (it has an %.4s chunk); animated images are not "
			              "presented",
			              (const char *)fourcc);
		} else if (chunk_is(fourcc, "VP8 ") || chunk_is(fourcc, "VP8L")) {
			if (images++)
				return refuse(err, "the WebP has more than one image chunk");
			uint32_t w, h;
			if (fourcc[3] == ' ') {
				if (csize < 10)
					return refuse(err, "the WebP VP8 chunk is too short");
				if (p[0] & 1)
					return refuse(err,
					              "the WebP VP8 data does not start with a key frame");
				if (p[3] != 0x9D || p[4] != 0x01 || p[5] != 0x2A)
					return refuse(err, "the WebP VP8 data lacks its start code");
				w = le16(p + 6) & 0x3FFF;
				h = le16(p + 8) & 0x3FFF;
			} else {
				if (csize < 5 || p[0] != 0x2F)
					return refuse(err, "the WebP VP8L data lacks its signature byte");
				uint32_t bits = le32(p + 1);
				if (bits >> 29)
					return refuse(err, "the WebP VP8L data has an unknown version %u",
					              bits >> 29);
				w = (bits & 0x3FFF) + 1;
				h = ((bits >> 14) & 0x3FFF) + 1;
				info->lossless = true;
				if (!extended)
					info->has_alpha = (bits >> 28) & 1;
			}
			if (w == 0 || h == 0)
				return refuse(err, "the WebP image chunk declares a zero dimension");
			if (extended && (w != canvas_w || h != canvas_h))
				return refuse(err, "the WebP image is %u x %u but its VP8X canvas is %u x %u",
				              w, h, canvas_w, canvas_h);
			relay_status st = container_check_limits("WebP", w, h, err);
			if (st != RELAY_OK)
				return st;
			info->width = w;
			info->height = h;
		} else if (chunks == 1) {
			return refuse(err, "the WebP's first chunk is '%.4s' (must be VP8, VP8L or VP8X)",
			              (const char *)fourcc);
		} else if (chunk_is(fourcc, "ALPH") && (!extended || images)) {
			return refuse(err, "the WebP ALPH chunk is misplaced");
		}
		/* ICCP, EXIF, XMP , ALPH and unknown chunks are skipped. */
		pos += 8 + (size_t)padded;
	}
	if (!images)
		return refuse(err, "the WebP has no image chunk (VP8 or VP8L)");
	info->records = chunks;
	return RELAY_OK;
}
