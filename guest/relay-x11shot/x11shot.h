/*
 * relay-x11shot/x11shot.h — what the files of relay-x11shot share
 * (relay-x11shot.c is the program; see its comment):
 *
 *   relay-x11shot.c         options, the output, main
 *   relay-x11shot/x11.c     display names, connecting, Xauthority, the X11
 *                           handshake and GetImage
 *   relay-x11shot/pixels.c  pixel formats to RGB rows, the row filter
 *   relay-x11shot/png.c     byte buffers, CRC-32, deflate, PNG chunks
 *   relay-x11shot/shm.c     the MIT-SHM extension: GetImage into shared memory
 *   relay-x11shot/encode.c  rows to a zlib stream: convert, filter, checksum, deflate
 */
#ifndef RELAY_X11SHOT_H
#define RELAY_X11SHOT_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum {
	EXIT_USAGE = 2,
	EXIT_DISPLAY = 3,
	EXIT_VISUAL = 4,
	EXIT_WRITE = 5,
};

/* One GetImage reply carries at most this many bytes of pixels: small
 * enough for the strip being encoded and the next one the server fills
 * meanwhile to stay in the CPU's cache, whatever the screen size. */
#define STRIP_MAX_BYTES (256u * 1024u)
/* The MIT-SHM segment holds at most this many bytes of strips. */
#define SHM_MAX_BYTES (16u * 1024u * 1024u)
/* A server resetting (its last client left) drops connections that arrive
 * meanwhile: one dropped before the setup reply is made again this often,
 * SETUP_RETRY_MS times the attempt apart. */
#define SETUP_ATTEMPTS 5
#define SETUP_RETRY_MS 20
/* Each wait for the X server (connect, a reply) is bounded by this. */
#define IO_TIMEOUT_MS 20000
/* The encoder codes its window whenever this much new data is in it. */
#define ENCODE_CHUNK_BYTES (128u * 1024u)
/* The zlib stream is cut into IDAT chunks of at most this size. */
#define IDAT_MAX_BYTES (1u << 20)

#define X_TCP_PORT_BASE       6000
#define X_OPCODE_GET_IMAGE    73
#define X_OPCODE_GET_GEOMETRY 14
#define X_FORMAT_ZPIXMAP      2
#define X_VISUAL_TRUECOLOR    4

#define FAMILY_INTERNET  0
#define FAMILY_INTERNET6 6
#define FAMILY_LOCAL     256
#define FAMILY_WILD      65535

#define LZ_HASH_BITS 16
#define LZ_WINDOW    32768u
#define LZ_MIN_MATCH 4u
#define LZ_MAX_MATCH 258u
/* Bytes that must follow a position before it is coded while more input is
 * still to come (a match may then reach its full length). */
#define LZ_LOOKAHEAD (LZ_MAX_MATCH + 8u)

typedef struct {
	unsigned char *data;
	size_t len;
	size_t cap;
	int failed;
} buf_t;

typedef struct {
	/* Codes already bit-reversed for the LSB-first stream, extra bits
	 * appended: low 24 bits the pattern, high 8 bits its length. */
	uint32_t lit[256];
	uint32_t len[LZ_MAX_MATCH + 1];
	uint32_t dist[LZ_WINDOW + 1];
	uint32_t end_of_block;
} fixed_codes_t;

typedef struct {
	const fixed_codes_t *codes;
	uint32_t *head;   /* LZ_HASH_BITS-indexed last position of each hash */
	size_t pos;       /* next stream position to code */
	size_t base;      /* stream position of the window's first byte */
	size_t row_bytes; /* distance to the same byte one image row up */
	uint64_t bits;    /* pending output bits, LSB first */
	unsigned nbits;   /* how many of them */
	buf_t *out;
} deflater_t;

typedef struct {
	char host[256];  /* empty or "unix": local socket */
	char path[108];  /* explicit socket path (DISPLAY=/path:n), else empty */
	unsigned number; /* display number */
	unsigned screen; /* screen number */
} display_t;

typedef struct {
	unsigned char data[256];
	size_t len;
	int found;
} cookie_t;

typedef struct {
	int fd;
	int image_msb_first; /* image-byte-order: 1 MSBFirst */
	uint32_t root;
	unsigned width, height;
	unsigned depth;
	unsigned bits_per_pixel;
	unsigned scanline_pad;
	unsigned visual_class;
	uint32_t red_mask, green_mask, blue_mask;
	uint16_t sequence; /* of the last request sent */
	int is_unix;       /* a local socket: file descriptors can be passed */
	int setup_dropped; /* the server closed the connection before its setup reply */
	uint32_t resource_base, resource_mask;
	/* MIT-SHM (shm.c): the extension's opcode (0: not offered or not
	 * asked), and the attached segment while one is. */
	int shm_tried; /* shm_attach was called on this connection */
	unsigned shm_opcode;
	uint32_t shm_seg;
	unsigned char *shm_map;
	size_t shm_bytes;
} xconn_t;

typedef struct {
	unsigned shift, bits;
} channel_t;

typedef struct {
	channel_t r, g, b;
	unsigned bytes_per_pixel;
	int msb_first;
	int fast_bgrx; /* 32 bpp, LSB first, masks ff0000/ff00/ff */
} pixfmt_t;

/* The PNG encoder of one image: rows in, a zlib stream out (encode.c).
 * Filtered rows go into a sliding window of LZ_WINDOW bytes of history plus
 * room for at least ENCODE_CHUNK_BYTES more, so memory stays small whatever
 * the screen size. */
typedef struct {
	const pixfmt_t *pf;
	unsigned width;
	size_t row_bytes;           /* 1 + 3 * width: filter type and RGB */
	unsigned char *rgb_rows[2]; /* [0] the row above (zeros first), [1] this one */
	unsigned char *sub_row;     /* filter_row's scratch */
	unsigned char *win;         /* filtered stream bytes from z.base on */
	size_t win_len, win_cap;
	fixed_codes_t *codes;
	uint32_t *head;
	deflater_t z;
	uint32_t adler; /* of the filtered rows so far (relay_support/adler32.h) */
	buf_t *out;
} encoder_t;

/* One diagnostic line on standard error, prefixed "relay-x11shot: ". */
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* png.c */
int buf_reserve(buf_t *b, size_t extra);
void buf_put(buf_t *b, const void *data, size_t len);
void put_be32(unsigned char *p, uint32_t v);
void crc_init(void);
uint32_t pack_code(uint32_t pattern, unsigned len);
void fixed_codes_init(fixed_codes_t *fc);
void bits_put(deflater_t *z, uint32_t packed);
void bits_flush(deflater_t *z);
void deflate_run(deflater_t *z, const unsigned char *data, size_t avail, int final);
void png_chunk(buf_t *out, const char *type, const unsigned char *data, size_t len);
void png_assemble(buf_t *png, const buf_t *zout, unsigned width, unsigned height);

/* encode.c */
int encoder_init(encoder_t *e, const pixfmt_t *pf, unsigned width, unsigned height, buf_t *zout);
void encoder_rows(encoder_t *e, const unsigned char *src, size_t stride, unsigned rows);
void encoder_finish(encoder_t *e);
void encoder_free(encoder_t *e);

/* pixels.c */
channel_t channel_of(uint32_t mask);
void convert_row(const pixfmt_t *pf, const unsigned char *src, unsigned width, unsigned char *rgb);
void filter_row(const unsigned char *cur, const unsigned char *prev, size_t n, unsigned char *dst,
                unsigned char *sub);

/* x11.c */
int write_all_fd(int fd, const void *data, size_t len, int use_poll);
int parse_display(const char *text, display_t *d);
int connect_display(const display_t *d, char *why, size_t why_len);
void find_cookie(const char *path, const display_t *d, cookie_t *cookie);
size_t pad4(size_t n);
int x_setup(xconn_t *x, const display_t *d, const cookie_t *cookie, const char *display_text);
void put_image_region(unsigned char *req, const xconn_t *x, unsigned y, unsigned rows);
int send_get_image(xconn_t *x, unsigned y, unsigned rows);
int read_get_image(xconn_t *x, uint16_t sequence, unsigned char *strip, size_t expect_bytes,
                   const char *display_text);
int x_next_reply(xconn_t *x, unsigned char head[32]);
int x_check_root_size(xconn_t *x, const char *display_text);
int x_read_data(xconn_t *x, void *data, size_t len);
uint16_t rd16(const unsigned char *p);
uint32_t rd32(const unsigned char *p);

/* shm.c */
int shm_attach(xconn_t *x, size_t bytes);
int shm_send_get_image(xconn_t *x, unsigned y, unsigned rows, size_t offset);
int shm_read_get_image(xconn_t *x, uint16_t sequence, size_t expect_bytes, const char *display_text,
                       int *refused);
int x_sync(xconn_t *x);
void shm_release(xconn_t *x);

#endif
