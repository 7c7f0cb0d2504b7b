/*
 * test_pixels_container — image_inspect(): the container rules of spec/images.md
 * §9.2 and the limits of §4, on PNGs written by libpng and hand-built
 * chunk, marker and RIFF streams (truncated, damaged, animated, wrong
 * magic, over the limits), real JPEG and WebP files from ImageMagick when
 * `convert` is installed; the MIME helpers, base64 and the policy object.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pixels/image.h"
#include "pixels_fixtures.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/process.h"

/* ---- helpers ----------------------------------------------------------------- */

static void expect_refused(const fx_buf *b, const char *mime, relay_status code, const char *needle)
{
	image_info info;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_inspect(b->data, b->len, mime, &info, &err);
	if (st != code || !strstr(err.message, needle))
		print_message("status %d, message '%s' (wanted %d with '%s')\n", st, err.message, code,
		              needle);
	assert_int_equal(st, code);
	assert_non_null(strstr(err.message, needle));
	assert_string_equal(image_delivery_status(st), "presentation-unavailable");
}

static void expect_ok(const fx_buf *b, const char *mime, image_info *info)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_inspect(b->data, b->len, mime, info, &err);
	if (st != RELAY_OK)
		print_message("refused: %s\n", err.message);
	assert_int_equal(st, RELAY_OK);
}

static void gradient_row(uint32_t y, unsigned char *row, void *ctx)
{
	uint32_t w = *(const uint32_t *)ctx;
	for (uint32_t x = 0; x < w; x++) {
		row[3 * x] = (unsigned char)x;
		row[3 * x + 1] = (unsigned char)y;
		row[3 * x + 2] = (unsigned char)(x + y);
	}
}

static fx_buf small_png(uint32_t w, uint32_t h)
{
	fx_png_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.color_type = PNG_COLOR_TYPE_RGB;
	spec.bit_depth = 8;
	spec.zlib_level = 6;
	spec.extra_chunks = 1;
	return fx_png_write(w, h, &spec, gradient_row, &w);
}

/* Offsets of every chunk of a PNG (for surgery). */
static size_t chunk_offset(const fx_buf *b, const char *type)
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

/* Flips bits of one byte (out of line: GCC's -Wstringop-overflow misreads
 * direct indexing after cmocka asserts). */
__attribute__((noinline)) static void flip_byte(fx_buf *b, size_t at, unsigned mask)
{
	assert_true(at < b->len);
	b->data[at] = (unsigned char)(b->data[at] ^ mask);
}

static fx_buf copy_buf(const fx_buf *b)
{
	fx_buf c = {0};
	fx_put(&c, b->data, b->len);
	return c;
}

/* A PNG of hand-built chunks: IHDR, optional extra chunks before and after
 * IDAT, one IDAT of valid (all zero) image data, IEND. */
static fx_buf built_png(uint32_t w, uint32_t h, const char *before_type, const char *after_type)
{
	fx_buf b = {0};
	fx_png_signature(&b);
	fx_png_ihdr(&b, w, h, 8, 0, 0);
	if (before_type)
		fx_png_chunk(&b, before_type, "abcd", 4);
	fx_buf z = {0};
	size_t raw = (size_t)(w + 1) * (h < 64 ? h : 64);
	fx_zlib_zeros(&z, raw < (1u << 20) ? raw : (1u << 20)); /* the start of the data of a huge image */
	fx_png_chunk(&b, "IDAT", z.data, (uint32_t)z.len);
	free(z.data);
	if (after_type)
		fx_png_chunk(&b, after_type, "abcd", 4);
	fx_png_chunk(&b, "IEND", NULL, 0);
	return b;
}

/* ---- PNG ------------------------------------------------------------------- */

static void test_png_valid(void **state)
{
	(void)state;
	fx_buf b = small_png(37, 21);
	image_info info;
	expect_ok(&b, IMAGE_MIME_PNG, &info);
	assert_int_equal(info.format, IMAGE_FORMAT_PNG);
	assert_string_equal(info.mime_type, IMAGE_MIME_PNG);
	assert_int_equal(info.width, 37);
	assert_int_equal(info.height, 21);
	assert_int_equal(info.bit_depth, 8);
	assert_int_equal(info.color_type, 2);
	assert_false(info.interlaced);
	assert_false(info.has_alpha);
	assert_true(info.records >= 6); /* IHDR, gAMA, tEXt, zTXt, iTXt, IDAT, IEND */
	/* Detected from the signature too. */
	expect_ok(&b, NULL, &info);
	assert_int_equal(info.format, IMAGE_FORMAT_PNG);
	free(b.data);

	fx_buf u = built_png(10, 10, "vpAg", "zzZz"); /* unknown ancillary chunks pass */
	expect_ok(&u, IMAGE_MIME_PNG, &info);
	free(u.data);
}

static void test_png_signature_and_magic(void **state)
{
	(void)state;
	fx_buf b = small_png(8, 8);
	fx_buf c = copy_buf(&b);
	c.data[1] = 'Q';
	expect_refused(&c, IMAGE_MIME_PNG, RELAY_E_UNSUPPORTED, "the bytes are not a PNG, JPEG or WebP");
	expect_refused(&c, NULL, RELAY_E_UNSUPPORTED, "unknown signature");
	/* The right bytes under the wrong type. */
	expect_refused(&b, IMAGE_MIME_JPEG, RELAY_E_UNSUPPORTED, "do not match its type");
	expect_refused(&b, "image/gif", RELAY_E_UNSUPPORTED, "only PNG, JPEG and WebP");
	fx_buf gif = {0};
	fx_put(&gif, "GIF89a\x01\x00\x01\x00\x00\x00\x00;", 14);
	expect_refused(&gif, NULL, RELAY_E_UNSUPPORTED, "GIF");
	fx_buf empty = {0};
	fx_put(&empty, "", 0);
	image_info info;
	relay_error err;
	assert_int_equal(image_inspect("", 0, NULL, &info, &err), RELAY_E_UNSUPPORTED);
	free(b.data);
	free(c.data);
	free(gif.data);
}

static void test_png_truncated_and_corrupt(void **state)
{
	(void)state;
	fx_buf b = small_png(64, 64);
	/* Truncated anywhere: before IEND, inside a chunk, inside the
	 * signature. */
	size_t cuts[] = {4, 8, 20, 40, b.len / 2, b.len - 12, b.len - 1};
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		fx_buf t = {0};
		fx_put(&t, b.data, cuts[i]);
		image_info info;
		relay_error err;
		assert_int_equal(image_inspect(t.data, t.len, IMAGE_MIME_PNG, &info, &err),
		                 RELAY_E_UNSUPPORTED);
		free(t.data);
	}
	/* A flipped byte in IDAT: the CRC catches it. */
	fx_buf c = copy_buf(&b);
	size_t idat = chunk_offset(&c, "IDAT");
	assert_true(idat > 0);
	flip_byte(&c, idat + 8 + 5, 0x40);
	expect_refused(&c, IMAGE_MIME_PNG, RELAY_E_UNSUPPORTED, "wrong CRC");
	free(c.data);
	/* Bytes after IEND. */
	fx_buf d = copy_buf(&b);
	fx_put(&d, "junk", 4);
	expect_refused(&d, IMAGE_MIME_PNG, RELAY_E_UNSUPPORTED, "after its IEND");
	free(d.data);
	free(b.data);
}

static void test_png_ihdr_rules(void **state)
{
	(void)state;
	static const struct {
		unsigned depth, ctype;
		int ok;
	} combos[] = {{1, 0, 1},  {2, 0, 1}, {4, 0, 1},  {8, 0, 1}, {16, 0, 1}, {3, 0, 0}, {8, 2, 1},
	              {16, 2, 1}, {4, 2, 0}, {1, 3, 1},  {8, 3, 1}, {16, 3, 0}, {8, 4, 1}, {16, 4, 1},
	              {4, 4, 0},  {8, 6, 1}, {16, 6, 1}, {2, 6, 0}, {8, 1, 0},  {8, 5, 0}, {8, 7, 0}};
	for (size_t i = 0; i < sizeof combos / sizeof combos[0]; i++) {
		fx_buf b = {0};
		fx_png_signature(&b);
		fx_png_ihdr(&b, 4, 4, combos[i].depth, combos[i].ctype, 0);
		if (combos[i].ctype == 3) {
			unsigned char plte[6] = {0, 0, 0, 255, 255, 255};
			fx_png_chunk(&b, "PLTE", plte, 6);
		}
		fx_buf z = {0};
		fx_zlib_zeros(&z, 4 * (1 + 16));
		fx_png_chunk(&b, "IDAT", z.data, (uint32_t)z.len);
		fx_png_chunk(&b, "IEND", NULL, 0);
		image_info info;
		relay_error err;
		relay_status st = image_inspect(b.data, b.len, IMAGE_MIME_PNG, &info, &err);
		if ((st == RELAY_OK) != combos[i].ok)
			print_message("depth %u colour type %u: %s\n", combos[i].depth, combos[i].ctype,
			              err.message);
		assert_int_equal(st == RELAY_OK, combos[i].ok);
		free(b.data);
		free(z.data);
	}
	/* Compression, filter and interlace methods; IHDR length; IHDR not
	 * first; zero size. */
	fx_buf b = {0};
	fx_png_signature(&b);
	unsigned char ihdr[13] = {0, 0, 0, 4, 0, 0, 0, 4, 8, 2, 1, 0, 0};
	fx_png_chunk(&b, "IHDR", ihdr, 13);
	fx_png_chunk(&b, "IEND", NULL, 0);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "compression method 1");
	b.len = 0;
	fx_png_signature(&b);
	ihdr[10] = 0;
	ihdr[12] = 2;
	fx_png_chunk(&b, "IHDR", ihdr, 13);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "interlace method 2");
	b.len = 0;
	fx_png_signature(&b);
	fx_png_chunk(&b, "IHDR", ihdr, 12);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "IHDR of 13 bytes");
	b.len = 0;
	fx_png_signature(&b);
	fx_png_chunk(&b, "gAMA", "abcd", 4);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "first PNG chunk must be IHDR");
	b.len = 0;
	fx_png_signature(&b);
	fx_png_ihdr(&b, 0, 5, 8, 2, 0);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "invalid size");
	free(b.data);
}

static void test_png_chunk_rules(void **state)
{
	(void)state;
	/* An unknown critical chunk. */
	fx_buf b = built_png(10, 10, "XYZW", NULL);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "unknown critical chunk 'XYZW'");
	free(b.data);
	/* Animation chunks. */
	const char *anim[] = {"acTL", "fcTL", "fdAT"};
	for (int i = 0; i < 3; i++) {
		fx_buf a = built_png(10, 10, anim[i], NULL);
		expect_refused(&a, NULL, RELAY_E_UNSUPPORTED, "animated");
		free(a.data);
	}
	/* IDAT chunks not consecutive. */
	fx_buf c = {0};
	fx_png_signature(&c);
	fx_png_ihdr(&c, 10, 10, 8, 0, 0);
	fx_buf z = {0};
	fx_zlib_zeros(&z, 110);
	fx_png_chunk(&c, "IDAT", z.data, 10);
	fx_png_chunk(&c, "tEXt", "a\0b", 3);
	fx_png_chunk(&c, "IDAT", z.data + 10, (uint32_t)z.len - 10);
	fx_png_chunk(&c, "IEND", NULL, 0);
	expect_refused(&c, NULL, RELAY_E_UNSUPPORTED, "not consecutive");
	free(c.data);
	/* IEND with data; no IDAT; no IEND; a chunk type that is not letters. */
	fx_buf d = {0};
	fx_png_signature(&d);
	fx_png_ihdr(&d, 10, 10, 8, 0, 0);
	fx_png_chunk(&d, "IDAT", z.data, (uint32_t)z.len);
	fx_png_chunk(&d, "IEND", "x", 1);
	expect_refused(&d, NULL, RELAY_E_UNSUPPORTED, "IEND chunk is not empty");
	d.len = 0;
	fx_png_signature(&d);
	fx_png_ihdr(&d, 10, 10, 8, 0, 0);
	fx_png_chunk(&d, "IEND", NULL, 0);
	expect_refused(&d, NULL, RELAY_E_UNSUPPORTED, "no IDAT");
	d.len = 0;
	fx_png_signature(&d);
	fx_png_ihdr(&d, 10, 10, 8, 0, 0);
	fx_png_chunk(&d, "IDAT", z.data, (uint32_t)z.len);
	expect_refused(&d, NULL, RELAY_E_UNSUPPORTED, "no IEND");
	d.len = 0;
	fx_png_signature(&d);
	fx_png_ihdr(&d, 10, 10, 8, 0, 0);
	fx_png_chunk(&d, "ab1d", "x", 1);
	expect_refused(&d, NULL, RELAY_E_UNSUPPORTED, "invalid type");
	/* Palette rules: PLTE missing for colour type 3, PLTE in grey, tRNS
	 * longer than the palette. */
	d.len = 0;
	fx_png_signature(&d);
	fx_png_ihdr(&d, 10, 10, 8, 3, 0);
	fx_png_chunk(&d, "IDAT", z.data, (uint32_t)z.len);
	fx_png_chunk(&d, "IEND", NULL, 0);
	expect_refused(&d, NULL, RELAY_E_UNSUPPORTED, "no PLTE");
	d.len = 0;
	fx_png_signature(&d);
	fx_png_ihdr(&d, 10, 10, 8, 0, 0);
	fx_png_chunk(&d, "PLTE", "abc", 3);
	expect_refused(&d, NULL, RELAY_E_UNSUPPORTED, "PLTE chunk in a greyscale");
	d.len = 0;
	fx_png_signature(&d);
	fx_png_ihdr(&d, 10, 10, 8, 3, 0);
	fx_png_chunk(&d, "PLTE", "abcdef", 6);
	fx_png_chunk(&d, "tRNS", "abc", 3);
	expect_refused(&d, NULL, RELAY_E_UNSUPPORTED, "tRNS chunk has 3 bytes");
	free(d.data);
	free(z.data);
}

static void test_png_too_many_chunks(void **state)
{
	(void)state;
	fx_buf b = {0};
	fx_png_signature(&b);
	fx_png_ihdr(&b, 10, 10, 8, 0, 0);
	for (int i = 0; i < 9997; i++)
		fx_png_chunk(&b, "tEXt", "k\0v", 3);
	size_t keep = b.len;
	fx_buf z = {0};
	fx_zlib_zeros(&z, 110);
	fx_png_chunk(&b, "IDAT", z.data, (uint32_t)z.len);
	fx_png_chunk(&b, "IEND", NULL, 0);
	image_info info;
	expect_ok(&b, NULL, &info); /* 10,000 chunks exactly */
	assert_int_equal(info.records, 10000);
	b.len = keep;
	fx_png_chunk(&b, "tEXt", "k\0v", 3);
	fx_png_chunk(&b, "IDAT", z.data, (uint32_t)z.len);
	fx_png_chunk(&b, "IEND", NULL, 0);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "more than 10,000 chunks");
	free(b.data);
	free(z.data);
}

/* The declared size of a PNG is refused from its header, with nothing
 * allocated for it: checked in a forked child whose address space is capped
 * just above what it already uses (without ASan), or by the sanitizer's
 * allocation hook recording the largest allocation (with ASan, whose shadow
 * memory makes an address-space cap unusable). */
#if defined(__SANITIZE_ADDRESS__)
#define RELAY_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RELAY_TEST_ASAN 1
#endif
#endif

#ifdef RELAY_TEST_ASAN
/* From the sanitizer runtime (declared here: GCC ships no header for it). */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
/* Written by the malloc hook of the forked child only. */
static volatile size_t largest_allocation;
static void on_malloc(const volatile void *ptr, size_t size)
{
	(void)ptr;
	if (size > largest_allocation)
		largest_allocation = size;
}
static void on_free(const volatile void *ptr)
{
	(void)ptr;
}
#endif

static void test_png_declared_huge_refused_without_allocating(void **state)
{
	(void)state;
	static const struct {
		uint32_t w, h;
		const char *needle;
	} cases[] = {{100000, 100000, "32,768 pixels per side"},
	             {32769, 10, "32,768 pixels per side"},
	             {10000, 4001, "40,000,000 pixels"},
	             {0x7FFFFFFF, 0x7FFFFFFF, "32,768 pixels per side"}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fx_buf b = built_png(cases[i].w, cases[i].h, NULL, NULL);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
#ifdef RELAY_TEST_ASAN
			__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#else
			long pages = 0, ignored = 0;
			FILE *f = fopen("/proc/self/statm", "r");
			if (!f || fscanf(f, "%ld %ld", &pages, &ignored) != 2)
				_exit(90);
			fclose(f);
			struct rlimit rl;
			rl.rlim_cur = rl.rlim_max =
			    (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (16u << 20);
			if (setrlimit(RLIMIT_AS, &rl) != 0)
				_exit(91);
#endif
			image_info info;
			image_presentation pr;
			relay_error err;
			relay_status st1 = image_inspect(b.data, b.len, IMAGE_MIME_PNG, &info, &err);
			if (st1 != RELAY_E_TOO_LARGE || !strstr(err.message, cases[i].needle))
				_exit(92);
			relay_status st2 = image_present(b.data, b.len, IMAGE_MIME_PNG, &pr, &err);
			if (st2 != RELAY_E_TOO_LARGE || !strstr(err.message, cases[i].needle))
				_exit(93);
#ifdef RELAY_TEST_ASAN
			__sanitizer_install_malloc_and_free_hooks(NULL, NULL);
			if (largest_allocation > (1u << 20))
				_exit(94);
#endif
			_exit(0);
		}
		int status = 0;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			print_message("case %ux%u: child status %d\n", cases[i].w, cases[i].h, status);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
		free(b.data);
	}
}

static void test_original_over_64_mib(void **state)
{
	(void)state;
	size_t len = IMAGE_MAX_ORIGINAL_BYTES + 1;
	unsigned char *big = calloc(1, len);
	assert_non_null(big);
	static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	memcpy(big, sig, 8);
	image_info info;
	relay_error err;
	assert_int_equal(image_inspect(big, len, IMAGE_MIME_PNG, &info, &err), RELAY_E_TOO_LARGE);
	assert_non_null(strstr(err.message, "64 MiB"));
	free(big);
}

/* ---- JPEG ------------------------------------------------------------------ */

static fx_jpeg_spec jpeg_spec(unsigned sof, unsigned w, unsigned h)
{
	fx_jpeg_spec s;
	memset(&s, 0, sizeof s);
	s.sof = sof;
	s.precision = 8;
	s.width = w;
	s.height = h;
	s.components = 3;
	s.scans = sof == 0xC2 ? 3 : 1;
	return s;
}

static void test_jpeg_valid(void **state)
{
	(void)state;
	fx_jpeg_spec s = jpeg_spec(0xC0, 640, 480);
	fx_buf b = fx_jpeg_build(&s);
	image_info info;
	expect_ok(&b, IMAGE_MIME_JPEG, &info);
	assert_int_equal(info.format, IMAGE_FORMAT_JPEG);
	assert_int_equal(info.width, 640);
	assert_int_equal(info.height, 480);
	assert_int_equal(info.components, 3);
	assert_false(info.progressive);
	free(b.data);
	s = jpeg_spec(0xC2, 31, 17);
	s.components = 1;
	b = fx_jpeg_build(&s);
	expect_ok(&b, NULL, &info);
	assert_true(info.progressive);
	assert_int_equal(info.components, 1);
	free(b.data);
	s = jpeg_spec(0xC0, 8, 8);
	s.components = 4;
	b = fx_jpeg_build(&s);
	expect_ok(&b, NULL, &info);
	free(b.data);
}

static void test_jpeg_refusals(void **state)
{
	(void)state;
	static const unsigned other_sofs[] = {0xC1, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9,
	                                      0xCA, 0xCB, 0xCD, 0xCE, 0xCF};
	for (size_t i = 0; i < sizeof other_sofs / sizeof other_sofs[0]; i++) {
		fx_jpeg_spec s = jpeg_spec(other_sofs[i], 16, 16);
		fx_buf b = fx_jpeg_build(&s);
		expect_refused(&b, IMAGE_MIME_JPEG, RELAY_E_UNSUPPORTED,
		               "only baseline (SOF0) and progressive");
		free(b.data);
	}
	fx_jpeg_spec s = jpeg_spec(0xC0, 16, 16);
	s.precision = 12;
	fx_buf b = fx_jpeg_build(&s);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "12-bit");
	free(b.data);
	s = jpeg_spec(0xC0, 16, 0);
	b = fx_jpeg_build(&s);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "zero (deferred) height");
	free(b.data);
	s = jpeg_spec(0xC0, 16, 16);
	s.components = 2;
	b = fx_jpeg_build(&s);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "2 components");
	free(b.data);
	s = jpeg_spec(0xC0, 40000, 16);
	b = fx_jpeg_build(&s);
	expect_refused(&b, NULL, RELAY_E_TOO_LARGE, "32,768 pixels per side");
	free(b.data);

	/* Surgery on a valid stream. */
	s = jpeg_spec(0xC0, 64, 48);
	fx_buf good = fx_jpeg_build(&s);
	/* Truncated: no EOI, or cut inside a segment or the scan. */
	size_t cuts[] = {1, 3, 10, 30, good.len - 2, good.len - 1};
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		fx_buf t = {0};
		fx_put(&t, good.data, cuts[i]);
		image_info info;
		relay_error err;
		assert_int_equal(image_inspect(t.data, t.len, NULL, &info, &err), RELAY_E_UNSUPPORTED);
		free(t.data);
	}
	/* Data after EOI. */
	fx_buf after = copy_buf(&good);
	fx_put(&after, "\x00\x01", 2);
	expect_refused(&after, IMAGE_MIME_JPEG, RELAY_E_UNSUPPORTED, "after its EOI");
	free(after.data);
	/* Two frames: append a second SOF0 right after the first frame (find
	 * it and duplicate it). */
	size_t sof_at = 0;
	for (size_t i = 2; i + 1 < good.len; i++)
		if (good.data[i] == 0xFF && good.data[i + 1] == 0xC0) {
			sof_at = i;
			break;
		}
	assert_true(sof_at > 0);
	size_t sof_len = 2 + ((size_t)good.data[sof_at + 2] << 8 | good.data[sof_at + 3]);
	fx_buf two = {0};
	fx_put(&two, good.data, sof_at + sof_len);
	fx_put(&two, good.data + sof_at, sof_len);
	fx_put(&two, good.data + sof_at + sof_len, good.len - sof_at - sof_len);
	expect_refused(&two, NULL, RELAY_E_UNSUPPORTED, "more than one frame");
	free(two.data);
	/* A DNL marker after the scan, before EOI. */
	fx_buf dnl = {0};
	fx_put(&dnl, good.data, good.len - 2);
	fx_put(&dnl, "\xFF\xDC\x00\x04\x00\x30\xFF\xD9", 8);
	expect_refused(&dnl, NULL, RELAY_E_UNSUPPORTED, "DNL");
	free(dnl.data);
	/* SOS before the frame: remove the SOF segment. */
	fx_buf nosof = {0};
	fx_put(&nosof, good.data, sof_at);
	fx_put(&nosof, good.data + sof_at + sof_len, good.len - sof_at - sof_len);
	expect_refused(&nosof, NULL, RELAY_E_UNSUPPORTED, "before its frame");
	free(nosof.data);
	/* A second SOI; a bad segment length. */
	fx_buf soi = {0};
	fx_put(&soi, good.data, 2);
	fx_put(&soi, good.data, good.len);
	expect_refused(&soi, NULL, RELAY_E_UNSUPPORTED, "second SOI");
	free(soi.data);
	fx_buf badlen = copy_buf(&good);
	badlen.data[4] = 0;
	badlen.data[5] = 1;
	expect_refused(&badlen, NULL, RELAY_E_UNSUPPORTED, "invalid length");
	free(badlen.data);
	/* Too many markers: 10,001 COM segments. */
	fx_buf many = {0};
	fx_put(&many, good.data, 2);
	for (int i = 0; i < 10001; i++)
		fx_put(&many, "\xFF\xFE\x00\x03x", 5);
	fx_put(&many, good.data + 2, good.len - 2);
	expect_refused(&many, NULL, RELAY_E_UNSUPPORTED, "more than 10,000 markers");
	free(many.data);
	free(good.data);
}

/* ---- WebP ------------------------------------------------------------------ */

static void test_webp_valid(void **state)
{
	(void)state;
	unsigned char p[16];
	image_info info;
	/* Simple lossless. */
	fx_buf body = {0};
	uint32_t n = fx_vp8l_payload(p, 300, 200, 1);
	fx_webp_chunk(&body, "VP8L", p, n);
	fx_buf b = fx_webp_wrap(&body);
	expect_ok(&b, IMAGE_MIME_WEBP, &info);
	assert_int_equal(info.format, IMAGE_FORMAT_WEBP);
	assert_int_equal(info.width, 300);
	assert_int_equal(info.height, 200);
	assert_true(info.lossless);
	assert_true(info.has_alpha);
	free(body.data);
	free(b.data);
	/* Simple lossy. */
	body = (fx_buf){0};
	n = fx_vp8_payload(p, 1000, 700);
	fx_webp_chunk(&body, "VP8 ", p, n);
	b = fx_webp_wrap(&body);
	expect_ok(&b, NULL, &info);
	assert_false(info.lossless);
	assert_int_equal(info.width, 1000);
	assert_int_equal(info.height, 700);
	free(body.data);
	free(b.data);
	/* Extended: VP8X + ICCP + ALPH + VP8 + EXIF, consistent. */
	body = (fx_buf){0};
	fx_vp8x(&body, 0x20 | 0x10 | 0x08, 1000, 700);
	fx_webp_chunk(&body, "ICCP", (const unsigned char *)"icc", 3);
	fx_webp_chunk(&body, "ALPH", (const unsigned char *)"\x00\x01", 2);
	fx_webp_chunk(&body, "VP8 ", p, n);
	fx_webp_chunk(&body, "EXIF", (const unsigned char *)"exif", 4);
	b = fx_webp_wrap(&body);
	expect_ok(&b, NULL, &info);
	assert_true(info.extended);
	assert_true(info.has_alpha);
	free(body.data);
	free(b.data);
}

static void test_webp_refusals(void **state)
{
	(void)state;
	unsigned char p[16];
	uint32_t n = fx_vp8l_payload(p, 300, 200, 0);
	/* Animated: the VP8X flag, or ANIM / ANMF chunks. */
	fx_buf body = {0};
	fx_vp8x(&body, 0x02, 300, 200);
	fx_webp_chunk(&body, "ANIM", (const unsigned char *)"\0\0\0\0\0\0", 6);
	fx_webp_chunk(&body, "ANMF", p, n);
	fx_buf b = fx_webp_wrap(&body);
	expect_refused(&b, IMAGE_MIME_WEBP, RELAY_E_UNSUPPORTED, "animated");
	free(body.data);
	free(b.data);
	body = (fx_buf){0};
	fx_vp8x(&body, 0, 300, 200);
	fx_webp_chunk(&body, "ANIM", (const unsigned char *)"\0\0\0\0\0\0", 6);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "animated");
	free(body.data);
	free(b.data);
	/* Canvas and image disagree. */
	body = (fx_buf){0};
	fx_vp8x(&body, 0, 301, 200);
	fx_webp_chunk(&body, "VP8L", p, n);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "canvas is 301 x 200");
	free(body.data);
	free(b.data);
	/* VP8X not first. */
	body = (fx_buf){0};
	fx_webp_chunk(&body, "VP8L", p, n);
	fx_vp8x(&body, 0, 300, 200);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "not the first chunk");
	free(body.data);
	free(b.data);
	/* RIFF size wrong; truncated; garbage appended; no image chunk. */
	body = (fx_buf){0};
	fx_webp_chunk(&body, "VP8L", p, n);
	b = fx_webp_wrap(&body);
	fx_buf c = copy_buf(&b);
	c.data[4] ^= 1;
	expect_refused(&c, NULL, RELAY_E_UNSUPPORTED, "RIFF size");
	free(c.data);
	c = (fx_buf){0};
	fx_put(&c, b.data, b.len - 3);
	expect_refused(&c, NULL, RELAY_E_UNSUPPORTED, "RIFF size");
	c.data[4] = (unsigned char)(c.len - 8);
	expect_refused(&c, NULL, RELAY_E_UNSUPPORTED, "truncated");
	free(c.data);
	c = copy_buf(&b);
	fx_put(&c, "xx", 2);
	expect_refused(&c, NULL, RELAY_E_UNSUPPORTED, "RIFF size");
	free(c.data);
	free(b.data);
	free(body.data);
	body = (fx_buf){0};
	fx_webp_chunk(&body, "XMP ", (const unsigned char *)"xmp", 3);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "first chunk is 'XMP '");
	free(body.data);
	free(b.data);
	/* Lossy data that is not a key frame, or lacks its start code. */
	n = fx_vp8_payload(p, 20, 20);
	p[0] |= 1;
	body = (fx_buf){0};
	fx_webp_chunk(&body, "VP8 ", p, n);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "key frame");
	free(body.data);
	free(b.data);
	p[0] &= 0xFE;
	p[4] = 0;
	body = (fx_buf){0};
	fx_webp_chunk(&body, "VP8 ", p, n);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "start code");
	free(body.data);
	free(b.data);
	/* Two image chunks. */
	n = fx_vp8l_payload(p, 30, 20, 0);
	body = (fx_buf){0};
	fx_webp_chunk(&body, "VP8L", p, n);
	fx_webp_chunk(&body, "VP8L", p, n);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_UNSUPPORTED, "more than one image chunk");
	free(body.data);
	free(b.data);
	/* Over the pixel limit from the canvas (VP8X is read first). */
	body = (fx_buf){0};
	fx_vp8x(&body, 0, 16000, 16000);
	b = fx_webp_wrap(&body);
	expect_refused(&b, NULL, RELAY_E_TOO_LARGE, "40,000,000 pixels");
	free(body.data);
	free(b.data);
}

/* ---- real files from ImageMagick ---------------------------------------------- */

static char g_dir[256];

static int have_convert(void)
{
	const char *argv[] = {"convert", "-version", NULL};
	relay_process_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.stdin_fd = -1;
	req.stdout_fd = -1;
	req.timeout_ms = 30000;
	relay_process_result res;
	memset(&res, 0, sizeof res);
	res.struct_size = sizeof res;
	relay_error err;
	int ok = process_run(&req, NULL, NULL, 0, &res, &err) == RELAY_OK && res.exit_code == 0;
	process_result_release(&res);
	return ok;
}

/* Runs convert <args> [<format>:]<out> and reads <out>. */
static int convert_to(const char *const *args, const char *format, const char *out, fx_buf *b)
{
	const char *argv[32];
	char target[600];
	int a = 0;
	argv[a++] = "convert";
	for (; *args; args++)
		argv[a++] = *args;
	snprintf(target, sizeof target, "%s%s%s", format ? format : "", format ? ":" : "", out);
	argv[a++] = target;
	argv[a] = NULL;
	relay_process_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.stdin_fd = -1;
	req.stdout_fd = -1;
	req.timeout_ms = 60000;
	relay_process_result res;
	memset(&res, 0, sizeof res);
	res.struct_size = sizeof res;
	relay_error err;
	int ok = process_run(&req, NULL, NULL, 0, &res, &err) == RELAY_OK && res.exit_code == 0;
	if (!ok)
		print_message("convert failed: %s\n", res.err ? res.err : err.message);
	process_result_release(&res);
	if (!ok)
		return 0;
	char *data = NULL;
	size_t len = 0;
	if (fs_read_file(out, IMAGE_MAX_ORIGINAL_BYTES, &data, &len, &err) != RELAY_OK)
		return 0;
	*b = (fx_buf){(unsigned char *)data, len, len};
	return 1;
}

static void test_imagemagick_files(void **state)
{
	(void)state;
	if (!have_convert()) {
		print_message("SKIP: ImageMagick's convert is not installed (Debian: imagemagick); the "
		              "hand-built JPEG and WebP streams above still ran\n");
		skip();
	}
	char out[512];
	fx_buf b;
	image_info info;
	const char *baseline[] = {"-size", "320x200", "gradient:red-blue", NULL};
	snprintf(out, sizeof out, "%s/baseline.jpg", g_dir);
	assert_true(convert_to(baseline, NULL, out, &b));
	expect_ok(&b, IMAGE_MIME_JPEG, &info);
	assert_int_equal(info.width, 320);
	assert_int_equal(info.height, 200);
	assert_false(info.progressive);
	/* Truncated and corrupt real JPEGs. */
	fx_buf t = {0};
	fx_put(&t, b.data, b.len / 2);
	expect_refused(&t, NULL, RELAY_E_UNSUPPORTED, "truncated");
	free(t.data);
	free(b.data);

	const char *progressive[] = {"-size", "333x222", "plasma:", "-interlace", "JPEG", NULL};
	snprintf(out, sizeof out, "%s/progressive.jpg", g_dir);
	assert_true(convert_to(progressive, NULL, out, &b));
	expect_ok(&b, NULL, &info);
	assert_true(info.progressive);
	assert_int_equal(info.width, 333);
	free(b.data);

	const char *grey[] = {"-size", "64x48", "gradient:", "-colorspace", "Gray", NULL};
	snprintf(out, sizeof out, "%s/grey.jpg", g_dir);
	assert_true(convert_to(grey, NULL, out, &b));
	expect_ok(&b, NULL, &info);
	assert_int_equal(info.components, 1);
	free(b.data);

	const char *lossless[] = {"-size", "120x80", "gradient:", "-define", "webp:lossless=true", NULL};
	snprintf(out, sizeof out, "%s/lossless.webp", g_dir);
	assert_true(convert_to(lossless, NULL, out, &b));
	expect_ok(&b, IMAGE_MIME_WEBP, &info);
	assert_int_equal(info.width, 120);
	assert_int_equal(info.height, 80);
	assert_true(info.lossless);
	t = (fx_buf){0};
	fx_put(&t, b.data, b.len - 5);
	expect_refused(&t, NULL, RELAY_E_UNSUPPORTED, "RIFF size");
	free(t.data);
	free(b.data);

	const char *lossy[] = {"-size", "121x81", "plasma:", "-quality", "80", NULL};
	snprintf(out, sizeof out, "%s/lossy.webp", g_dir);
	assert_true(convert_to(lossy, NULL, out, &b));
	expect_ok(&b, NULL, &info);
	assert_int_equal(info.width, 121);
	assert_int_equal(info.height, 81);
	free(b.data);

	const char *alpha[] = {"-size", "50x40", "xc:none",           "-fill",
	                       "red",   "-draw", "circle 25,20 25,5", NULL};
	snprintf(out, sizeof out, "%s/alpha.webp", g_dir);
	assert_true(convert_to(alpha, NULL, out, &b));
	expect_ok(&b, NULL, &info);
	assert_int_equal(info.width, 50);
	free(b.data);

	/* An animated PNG (APNG) as ImageMagick writes it. */
	const char *apng[] = {"-delay", "10", "-size", "20x20", "xc:red", "xc:blue", NULL};
	snprintf(out, sizeof out, "%s/anim.png", g_dir);
	b = (fx_buf){0};
	int wrote_apng = convert_to(apng, "APNG", out, &b);
	if (wrote_apng && memmem(b.data, b.len, "acTL", 4)) {
		expect_refused(&b, IMAGE_MIME_PNG, RELAY_E_UNSUPPORTED, "animated");
	} else {
		/* ImageMagick 6 writes APNG through ffmpeg when ffmpeg is installed,
		 * and ffmpeg 5 makes a single-frame PNG of it (no acTL chunk): there
		 * is nothing animated to refuse then. */
		print_message("note: this ImageMagick cannot write an animated PNG; the hand-built "
		              "acTL case covers it\n");
	}
	free(b.data);
	/* An animated WebP. */
	const char *awebp[] = {"-delay", "10", "-size", "20x20", "xc:red", "xc:blue", NULL};
	snprintf(out, sizeof out, "%s/anim.webp", g_dir);
	if (convert_to(awebp, NULL, out, &b)) {
		/* ImageMagick 6 appends a stray single-frame WebP after the
		 * animated one: the whole file is refused for its RIFF size, the
		 * animated RIFF alone for its animation. */
		size_t riff = 8 + ((size_t)b.data[4] | (size_t)b.data[5] << 8 | (size_t)b.data[6] << 16 |
		                   (size_t)b.data[7] << 24);
		if (riff < b.len) {
			expect_refused(&b, IMAGE_MIME_WEBP, RELAY_E_UNSUPPORTED, "RIFF size");
			b.len = riff;
		}
		if (memmem(b.data, b.len, "ANIM", 4))
			expect_refused(&b, IMAGE_MIME_WEBP, RELAY_E_UNSUPPORTED, "animated");
		else
			print_message(
			    "note: this ImageMagick wrote no animated WebP; the hand-built VP8X/ANIM "
			    "cases cover it\n");
		free(b.data);
	}
}

/* ---- helpers of image.h ------------------------------------------------------- */

static void test_mime_helpers(void **state)
{
	(void)state;
	assert_string_equal(image_mime_for_path("a/b/shot.png"), IMAGE_MIME_PNG);
	assert_string_equal(image_mime_for_path("x.PNG"), IMAGE_MIME_PNG);
	assert_string_equal(image_mime_for_path("x.jpg"), IMAGE_MIME_JPEG);
	assert_string_equal(image_mime_for_path("x.JPEG"), IMAGE_MIME_JPEG);
	assert_string_equal(image_mime_for_path("x.webp"), IMAGE_MIME_WEBP);
	assert_null(image_mime_for_path("x.gif"));
	assert_null(image_mime_for_path("png"));
	assert_null(image_mime_for_path("dir.png/file"));
	assert_null(image_mime_for_path(NULL));
	assert_string_equal(image_delivery_status(RELAY_E_UNSUPPORTED), "presentation-unavailable");
	assert_string_equal(image_delivery_status(RELAY_E_TOO_LARGE), "presentation-unavailable");
	assert_string_equal(image_delivery_status(RELAY_E_NO_MEMORY), "transfer-failed");
	assert_string_equal(image_delivery_status(RELAY_E_INTERNAL), "transfer-failed");
}

static void test_base64(void **state)
{
	(void)state;
	/* RFC 4648 §10. */
	static const char *const vectors[][2] = {{"", ""},
	                                         {"f", "Zg=="},
	                                         {"fo", "Zm8="},
	                                         {"foo", "Zm9v"},
	                                         {"foob", "Zm9vYg=="},
	                                         {"fooba", "Zm9vYmE="},
	                                         {"foobar", "Zm9vYmFy"}};
	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		size_t len = 99;
		char *e = image_base64_encode(vectors[i][0], strlen(vectors[i][0]), &len);
		assert_non_null(e);
		assert_string_equal(e, vectors[i][1]);
		assert_int_equal(len, strlen(vectors[i][1]));
		assert_int_equal(image_base64_len(strlen(vectors[i][0])), len);
		free(e);
	}
	unsigned char all[256];
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	char *e = image_base64_encode(all, sizeof all, NULL);
	assert_non_null(e);
	assert_int_equal(strlen(e), 344);
	assert_memory_equal(e, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4v", 64);
	assert_string_equal(e + 332, "+fr7/P3+/w==");
	free(e);
	/* 4 MiB of base64 is 3 MiB of bytes exactly. */
	assert_int_equal(image_base64_len(3145728), 4194304);
	assert_true(image_base64_len(3145729) > 4194304);
}

static void test_policy_object(void **state)
{
	(void)state;
	json_object *p = image_policy_new();
	assert_non_null(p);
	char *text = jsonx_to_string(p, 0);
	assert_string_equal(
	    text, "{\"version\":1,\"processor\":\"mcp-relay/image-presentation\",\"maxWidth\":2000,"
	          "\"maxHeight\":2000,\"maxBytes\":4194304,\"maxBytesEncoding\":\"base64\","
	          "\"maxOriginalBytes\":67108864,\"maxPixels\":40000000,\"maxDimension\":32768,"
	          "\"supportedMimeTypes\":[\"image/png\",\"image/jpeg\",\"image/webp\"],"
	          "\"resampledMimeTypes\":[\"image/png\"],\"animation\":\"reject\","
	          "\"compressedPngMetadata\":\"ignore\",\"jpegFrames\":[\"baseline\",\"progressive\"],"
	          "\"maxContainerRecords\":10000,\"dimensionSpace\":\"stored\"}");
	free(text);
	json_object_put(p);
}

static void test_crc32(void **state)
{
	(void)state;
	assert_int_equal(container_crc32(0, (const unsigned char *)"123456789", 9), 0xCBF43926u);
	assert_int_equal(container_crc32(0, (const unsigned char *)"", 0), 0);
	/* Split input continues the same CRC. */
	const unsigned char *t = (const unsigned char *)"The quick brown fox jumps over the lazy dog";
	uint32_t whole = container_crc32(0, t, 43);
	assert_int_equal(whole, 0x414FA339u);
	assert_int_equal(container_crc32(container_crc32(0, t, 17), t + 17, 26), whole);
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof g_dir, "/tmp/relay-image-test-XXXXXX");
	return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	relay_error err;
	fs_remove_tree(g_dir, &err);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_png_valid),
	    cmocka_unit_test(test_png_signature_and_magic),
	    cmocka_unit_test(test_png_truncated_and_corrupt),
	    cmocka_unit_test(test_png_ihdr_rules),
	    cmocka_unit_test(test_png_chunk_rules),
	    cmocka_unit_test(test_png_too_many_chunks),
	    cmocka_unit_test(test_png_declared_huge_refused_without_allocating),
	    cmocka_unit_test(test_original_over_64_mib),
	    cmocka_unit_test(test_jpeg_valid),
	    cmocka_unit_test(test_jpeg_refusals),
	    cmocka_unit_test(test_webp_valid),
	    cmocka_unit_test(test_webp_refusals),
	    cmocka_unit_test(test_imagemagick_files),
	    cmocka_unit_test(test_mime_helpers),
	    cmocka_unit_test(test_base64),
	    cmocka_unit_test(test_policy_object),
	    cmocka_unit_test(test_crc32),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
