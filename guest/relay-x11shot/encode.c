/*
 * relay-x11shot/encode.c — rows to one zlib stream (x11shot.h): each row is
 * converted to RGB, filtered (Up or Sub) into the window, added to the Adler-32
 * while it is still in the cache, and the window is deflated (one
 * fixed-Huffman block) whenever ENCODE_CHUNK_BYTES of new data are in it,
 * then slid so that only the LZ_WINDOW bytes a match may refer to are kept.
 */
#define _POSIX_C_SOURCE 200809L

#include "x11shot.h"

#include "relay_support/adler32.h"

/* 0, or -1 when memory ran out (or the image is too large for the
 * encoder's 32-bit positions); *e is then safe to encoder_free. */
int encoder_init(encoder_t *e, const pixfmt_t *pf, unsigned width, unsigned height, buf_t *zout)
{
	memset(e, 0, sizeof *e);
	e->pf = pf;
	e->width = width;
	e->row_bytes = 1 + (size_t)width * 3;
	e->out = zout;
	if ((uint64_t)e->row_bytes * height >= UINT32_MAX)
		return -1;
	size_t room = e->row_bytes > ENCODE_CHUNK_BYTES ? e->row_bytes : ENCODE_CHUNK_BYTES;
	e->win_cap = LZ_WINDOW + LZ_LOOKAHEAD + room;
	e->rgb_rows[0] = calloc(e->row_bytes, 1); /* the row above the first: zeros */
	e->rgb_rows[1] = calloc(e->row_bytes, 1);
	e->sub_row = malloc(e->row_bytes);
	e->win = malloc(e->win_cap);
	e->head = calloc((size_t)1 << LZ_HASH_BITS, sizeof *e->head);
	e->codes = malloc(sizeof *e->codes);
	if (!e->rgb_rows[0] || !e->rgb_rows[1] || !e->sub_row || !e->win || !e->head || !e->codes)
		return -1;
	crc_init();
	fixed_codes_init(e->codes);
	e->z.codes = e->codes;
	e->z.head = e->head;
	e->z.row_bytes = e->row_bytes;
	e->z.out = zout;
	e->adler = 1;
	/* zlib header: deflate, 32 KiB window, no dictionary, fastest. */
	unsigned char zhead[2] = {0x78, 0x01};
	buf_put(zout, zhead, 2);
	bits_put(&e->z, pack_code(1 | (1 << 1), 3)); /* BFINAL=1, BTYPE=01 (fixed) */
	return 0;
}

/* Codes what is in the window (keeping the lookahead) and drops what no
 * later match can reach. */
static void encoder_slide(encoder_t *e)
{
	deflate_run(&e->z, e->win, e->win_len, 0);
	size_t coded = e->z.pos - e->z.base;
	if (coded <= LZ_WINDOW)
		return;
	size_t shift = coded - LZ_WINDOW;
	memmove(e->win, e->win + shift, e->win_len - shift);
	e->win_len -= shift;
	e->z.base += shift;
}

/* Adds `rows` ZPixmap scanlines, `stride` bytes apart. */
void encoder_rows(encoder_t *e, const unsigned char *src, size_t stride, unsigned rows)
{
	for (unsigned r = 0; r < rows; r++) {
		if (e->win_len + e->row_bytes > e->win_cap)
			encoder_slide(e);
		unsigned char *dst = e->win + e->win_len;
		convert_row(e->pf, src + (size_t)r * stride, e->width, e->rgb_rows[1]);
		filter_row(e->rgb_rows[1], e->rgb_rows[0], e->row_bytes - 1, dst, e->sub_row);
		e->adler = rs_adler32(e->adler, dst, e->row_bytes);
		e->win_len += e->row_bytes;
		unsigned char *t = e->rgb_rows[0];
		e->rgb_rows[0] = e->rgb_rows[1];
		e->rgb_rows[1] = t;
	}
}

/* Codes the rest and ends the block and the zlib stream. */
void encoder_finish(encoder_t *e)
{
	deflate_run(&e->z, e->win, e->win_len, 1);
	bits_put(&e->z, e->codes->end_of_block);
	bits_flush(&e->z);
	unsigned char ztail[4];
	put_be32(ztail, e->adler);
	buf_put(e->out, ztail, 4);
}

void encoder_free(encoder_t *e)
{
	free(e->rgb_rows[0]);
	free(e->rgb_rows[1]);
	free(e->sub_row);
	free(e->win);
	free(e->head);
	free(e->codes);
	memset(e, 0, sizeof *e);
}
