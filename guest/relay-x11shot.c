/*
 * relay-x11shot — the capture-x11 guest program (guest.md §11.2).
 *
 *   relay-x11shot --display <DISPLAY> --out <absolute out.png> [--xauthority <file>]
 *
 * Reads the root window of an X display and writes it as an 8-bit RGB PNG.
 * C99 + POSIX, libc only: it speaks the X11 core protocol itself over the
 * display's Unix socket (/tmp/.X11-unix/X<n>, then the Linux abstract socket
 * of the same name) or TCP (port 6000 + n), authenticates with
 * MIT-MAGIC-COOKIE-1 from the Xauthority file, fetches the root window with
 * GetImage (ZPixmap) in horizontal strips of at most STRIP_MAX_BYTES (so no
 * reply is ever larger than that, whatever the screen size), and encodes the
 * PNG itself: one zlib stream of a single fixed-Huffman deflate block with a
 * small LZ77 matcher tuned for screen contents (the pixel to the left, the
 * pixel above, and a hash of the next four bytes) over Paeth-filtered rows.
 *
 * Success prints exactly {"screenshot_file_path":"<out>","width":W,"height":H}
 * and a newline on standard output and exits 0. Exit codes:
 *   2  usage (unknown or missing option, relative --out, malformed display)
 *   3  display unreachable, authentication refused, or the X server failed
 *      the protocol (an X error, a short or malformed reply, a timeout)
 *   4  unsupported visual (only TrueColor of depth 24 or 32 is read)
 *   5  the output could not be written (it exists, a write failed, or memory
 *      ran out); a file this program created is removed again
 * Diagnostics go to standard error, one line each, prefixed "relay-x11shot: ".
 */
#define _POSIX_C_SOURCE 200809L

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
#include <sys/un.h>
#include <unistd.h>

enum {
	EXIT_USAGE = 2,
	EXIT_DISPLAY = 3,
	EXIT_VISUAL = 4,
	EXIT_WRITE = 5,
};

/* One GetImage reply carries at most this many bytes of pixels. */
#define STRIP_MAX_BYTES (4u * 1024u * 1024u)
/* Each wait for the X server (connect, a reply) is bounded by this. */
#define IO_TIMEOUT_MS 20000
/* The zlib stream is cut into IDAT chunks of at most this size. */
#define IDAT_MAX_BYTES (1u << 20)

#define X_TCP_PORT_BASE    6000
#define X_OPCODE_GET_IMAGE 73
#define X_FORMAT_ZPIXMAP   2
#define X_VISUAL_TRUECOLOR 4

static const char usage_text[] =
    "usage: relay-x11shot --display <DISPLAY> --out <absolute out.png> [--xauthority <file>]\n"
    "Reads the root window of an X display (TrueColor, depth 24 or 32) and writes an RGB PNG.\n"
    "Exit codes: 0 written, 2 usage, 3 display unreachable or authentication refused,\n"
    "4 unsupported visual, 5 the output could not be written.\n";

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void diag(const char *fmt, ...)
{
	char line[600];
	int n = snprintf(line, sizeof line, "relay-x11shot: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = strlen(line);
	line[len++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, line, len);
	(void)ignored;
}

/* ------------------------------------------------------------------------ */
/* Growable byte buffer                                                      */

typedef struct {
	unsigned char *data;
	size_t len;
	size_t cap;
	int failed;
} buf_t;

static int buf_reserve(buf_t *b, size_t extra)
{
	if (b->failed)
		return 0;
	if (b->len + extra <= b->cap)
		return 1;
	size_t cap = b->cap ? b->cap : 65536;
	while (cap < b->len + extra) {
		if (cap > SIZE_MAX / 2) {
			b->failed = 1;
			return 0;
		}
		cap *= 2;
	}
	unsigned char *p = realloc(b->data, cap);
	if (!p) {
		b->failed = 1;
		return 0;
	}
	b->data = p;
	b->cap = cap;
	return 1;
}

static void buf_put(buf_t *b, const void *data, size_t len)
{
	if (!buf_reserve(b, len))
		return;
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/* ------------------------------------------------------------------------ */
/* CRC-32 (PNG chunks) and Adler-32 (zlib)                                    */

/* Filled once by crc_init() before any use; read-only afterwards. The
 * program is single-threaded. */
static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		crc_table[n] = c;
	}
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = ~crc;
	for (size_t i = 0; i < len; i++)
		crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
	return ~crc;
}

typedef struct {
	uint32_t a, b;
} adler_t;

static void adler_update(adler_t *ad, const unsigned char *p, size_t len)
{
	uint32_t a = ad->a, b = ad->b;
	while (len > 0) {
		size_t n = len < 5552 ? len : 5552; /* largest n keeping b < 2^32 */
		len -= n;
		while (n >= 8) {
			a += p[0];
			b += a;
			a += p[1];
			b += a;
			a += p[2];
			b += a;
			a += p[3];
			b += a;
			a += p[4];
			b += a;
			a += p[5];
			b += a;
			a += p[6];
			b += a;
			a += p[7];
			b += a;
			p += 8;
			n -= 8;
		}
		while (n-- > 0) {
			a += *p++;
			b += a;
		}
		a %= 65521u;
		b %= 65521u;
	}
	ad->a = a;
	ad->b = b;
}

/* ------------------------------------------------------------------------ */
/* Deflate: one fixed-Huffman block, greedy LZ77                               */

#define LZ_HASH_BITS 16
#define LZ_WINDOW    32768u
#define LZ_MIN_MATCH 4u
#define LZ_MAX_MATCH 258u
/* Bytes that must follow a position before it is coded while more input is
 * still to come (a match may then reach its full length). */
#define LZ_LOOKAHEAD (LZ_MAX_MATCH + 8u)

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
	size_t pos;       /* next input position to code */
	size_t row_bytes; /* distance to the same byte one image row up */
	uint64_t bits;    /* pending output bits, LSB first */
	unsigned nbits;   /* how many of them */
	buf_t *out;
} deflater_t;

static uint32_t reverse_bits(uint32_t code, unsigned len)
{
	uint32_t r = 0;
	for (unsigned i = 0; i < len; i++) {
		r = (r << 1) | (code & 1);
		code >>= 1;
	}
	return r;
}

static uint32_t pack_code(uint32_t pattern, unsigned len)
{
	return pattern | ((uint32_t)len << 24);
}

static void fixed_codes_init(fixed_codes_t *fc)
{
	/* RFC 1951 §3.2.6. */
	for (unsigned v = 0; v < 256; v++) {
		if (v < 144)
			fc->lit[v] = pack_code(reverse_bits(0x30 + v, 8), 8);
		else
			fc->lit[v] = pack_code(reverse_bits(0x190 + (v - 144), 9), 9);
	}
	fc->end_of_block = pack_code(reverse_bits(0, 7), 7);

	static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
	                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
	static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
	                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
	for (unsigned c = 0; c < 29; c++) {
		unsigned sym = 257 + c;
		uint32_t code;
		unsigned clen;
		if (sym < 280) {
			code = reverse_bits(sym - 256, 7);
			clen = 7;
		} else {
			code = reverse_bits(0xC0 + (sym - 280), 8);
			clen = 8;
		}
		unsigned span = (c == 28) ? 1 : (1u << len_extra[c]);
		for (unsigned e = 0; e < span; e++) {
			unsigned length = len_base[c] + e;
			if (length > LZ_MAX_MATCH || (c == 27 && length == 258))
				continue; /* 258 has its own code */
			fc->len[length] = pack_code(code | (e << clen), clen + len_extra[c]);
		}
	}

	static const uint16_t dist_base[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
	                                       33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
	                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
	for (unsigned c = 0; c < 30; c++) {
		unsigned extra = c < 4 ? 0 : (c / 2) - 1;
		uint32_t code = reverse_bits(c, 5);
		for (unsigned e = 0; e < (1u << extra); e++) {
			unsigned d = dist_base[c] + e;
			if (d <= LZ_WINDOW)
				fc->dist[d] = pack_code(code | (e << 5), 5 + extra);
		}
	}
}

static void bits_put(deflater_t *z, uint32_t packed)
{
	z->bits |= (uint64_t)(packed & 0xFFFFFFu) << z->nbits;
	z->nbits += packed >> 24;
	if (z->nbits >= 32) {
		unsigned char b[4] = {(unsigned char)z->bits, (unsigned char)(z->bits >> 8),
		                      (unsigned char)(z->bits >> 16), (unsigned char)(z->bits >> 24)};
		buf_put(z->out, b, 4);
		z->bits >>= 32;
		z->nbits -= 32;
	}
}

static void bits_flush(deflater_t *z)
{
	while (z->nbits > 0) {
		unsigned char b = (unsigned char)z->bits;
		buf_put(z->out, &b, 1);
		z->bits >>= 8;
		z->nbits = z->nbits > 8 ? z->nbits - 8 : 0;
	}
}

static uint32_t load32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static unsigned first_diff_byte(uint64_t x)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (unsigned)__builtin_ctzll(x) >> 3;
#elif defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	return (unsigned)__builtin_clzll(x) >> 3;
#else
	unsigned char a[8];
	memcpy(a, &x, 8);
	unsigned i = 0;
	while (i < 8 && a[i] == 0)
		i++;
	return i;
#endif
}

/* Length of the common prefix of a and b, at most `limit`. */
static size_t match_length(const unsigned char *a, const unsigned char *b, size_t limit)
{
	size_t n = 0;
	while (n + 8 <= limit) {
		uint64_t x = load64(a + n) ^ load64(b + n);
		if (x)
			return n + first_diff_byte(x);
		n += 8;
	}
	while (n < limit && a[n] == b[n])
		n++;
	return n;
}

static uint32_t lz_hash(uint32_t v)
{
	return (v * 2654435761u) >> (32 - LZ_HASH_BITS);
}

/* Codes data[z->pos .. avail) (keeping LZ_LOOKAHEAD bytes back unless
 * `final`). data[0 .. avail) must stay in place between calls. */
static void deflate_run(deflater_t *z, const unsigned char *data, size_t avail, int final)
{
	const fixed_codes_t *fc = z->codes;
	size_t i = z->pos;
	size_t stop = final ? avail : (avail > LZ_LOOKAHEAD ? avail - LZ_LOOKAHEAD : 0);
	size_t hash_stop = avail >= 4 ? avail - 3 : 0; /* positions with 4 readable bytes */
	while (i < stop) {
		size_t best_len = 0, best_dist = 0;
		if (i < hash_stop) {
			uint32_t v = load32(data + i);
			uint32_t h = lz_hash(v);
			size_t limit = avail - i < LZ_MAX_MATCH ? avail - i : LZ_MAX_MATCH;
			size_t cands[3];
			cands[0] = z->head[h];
			cands[1] = i >= 3 ? i - 3 : i;                       /* the pixel to the left */
			cands[2] = i >= z->row_bytes ? i - z->row_bytes : i; /* the pixel above */
			z->head[h] = (uint32_t)i;
			for (int k = 0; k < 3; k++) {
				size_t c = cands[k];
				if (c >= i || i - c > LZ_WINDOW || load32(data + c) != v)
					continue;
				size_t len = match_length(data + c, data + i, limit);
				if (len > best_len) {
					best_len = len;
					best_dist = i - c;
					if (len == limit)
						break;
				}
			}
		}
		if (best_len >= LZ_MIN_MATCH) {
			bits_put(z, fc->len[best_len]);
			bits_put(z, fc->dist[best_dist]);
			/* Index a few positions inside the match so later data
			 * can refer back into it. */
			size_t end = i + best_len;
			size_t step = best_len > 32 ? best_len / 8 : 1;
			for (size_t p = i + 1; p < end && p < hash_stop; p += step)
				z->head[lz_hash(load32(data + p))] = (uint32_t)p;
			i = end;
		} else {
			bits_put(z, fc->lit[data[i]]);
			i++;
		}
	}
	z->pos = i;
}

/* ------------------------------------------------------------------------ */
/* Socket I/O with timeouts                                                  */

static int wait_fd(int fd, short events)
{
	struct pollfd pfd = {fd, events, 0};
	for (;;) {
		int r = poll(&pfd, 1, IO_TIMEOUT_MS);
		if (r > 0)
			return 0;
		if (r == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (errno != EINTR)
			return -1;
	}
}

static int write_all_fd(int fd, const void *data, size_t len, int use_poll)
{
	const unsigned char *p = data;
	while (len > 0) {
		if (use_poll && wait_fd(fd, POLLOUT) < 0)
			return -1;
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all_fd(int fd, void *data, size_t len)
{
	unsigned char *p = data;
	while (len > 0) {
		if (wait_fd(fd, POLLIN) < 0)
			return -1;
		ssize_t n = read(fd, p, len);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		if (n == 0) {
			errno = ECONNRESET;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* DISPLAY parsing and connecting                                            */

typedef struct {
	char host[256];  /* empty or "unix": local socket */
	char path[108];  /* explicit socket path (DISPLAY=/path:n), else empty */
	unsigned number; /* display number */
	unsigned screen; /* screen number */
} display_t;

static int parse_uint(const char *s, size_t len, unsigned max, unsigned *out)
{
	if (len == 0 || len > 9)
		return -1;
	unsigned v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > max)
		return -1;
	*out = v;
	return 0;
}

static int parse_display(const char *text, display_t *d)
{
	memset(d, 0, sizeof *d);
	const char *colon = strrchr(text, ':');
	if (!colon)
		return -1;
	size_t host_len = (size_t)(colon - text);
	if (host_len > 0 && colon[-1] == ':')
		return -1; /* DECnet "host::n" is not supported */
	const char *num = colon + 1;
	const char *dot = strchr(num, '.');
	size_t num_len = dot ? (size_t)(dot - num) : strlen(num);
	if (parse_uint(num, num_len, 65535 - X_TCP_PORT_BASE, &d->number) < 0)
		return -1;
	if (dot && parse_uint(dot + 1, strlen(dot + 1), 255, &d->screen) < 0)
		return -1;
	if (host_len > 0 && text[0] == '/') {
		if (host_len >= sizeof d->path)
			return -1;
		memcpy(d->path, text, host_len);
		return 0;
	}
	if (host_len >= 2 && text[0] == '[' && colon[-1] == ']') { /* [v6addr]:n */
		text++;
		host_len -= 2;
	}
	if (host_len >= sizeof d->host)
		return -1;
	memcpy(d->host, text, host_len);
	d->host[host_len] = '\0';
	if (strcmp(d->host, "unix") == 0)
		d->host[0] = '\0';
	return 0;
}

static int connect_unix(const char *path, int abstract)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	size_t len = strlen(path);
	size_t off = abstract ? 1 : 0;
	if (len + off >= sizeof sa.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sa.sun_path + off, path, len);
	socklen_t sa_len =
	    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + off + len + (abstract ? 0 : 1));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sa_len) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Resolves `host` without NSS (which a static program cannot load): a
 * numeric IPv4 or IPv6 address, "localhost", or a name listed in /etc/hosts. */
static int resolve_host(const char *host, struct sockaddr_storage *ss, socklen_t *ss_len, unsigned port)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	char addr[256];
	memset(ss, 0, sizeof *ss);
	snprintf(addr, sizeof addr, "%s", host);
	if (strcmp(host, "localhost") == 0)
		snprintf(addr, sizeof addr, "127.0.0.1");
	for (int attempt = 0; attempt < 2; attempt++) {
		if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
			s4->sin_family = AF_INET;
			s4->sin_port = htons((uint16_t)port);
			*ss_len = sizeof *s4;
			return 0;
		}
		if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
			s6->sin6_family = AF_INET6;
			s6->sin6_port = htons((uint16_t)port);
			*ss_len = sizeof *s6;
			return 0;
		}
		if (attempt > 0)
			break;
		/* Look the name up in /etc/hosts. */
		FILE *f = fopen("/etc/hosts", "r");
		if (!f)
			break;
		char line[512];
		int found = 0;
		while (!found && fgets(line, sizeof line, f)) {
			char *hash = strchr(line, '#');
			if (hash)
				*hash = '\0';
			char *save = NULL;
			char *first = strtok_r(line, " \t\r\n", &save);
			if (!first)
				continue;
			for (char *name = strtok_r(NULL, " \t\r\n", &save); name;
			     name = strtok_r(NULL, " \t\r\n", &save)) {
				if (strcmp(name, host) == 0) {
					snprintf(addr, sizeof addr, "%s", first);
					found = 1;
					break;
				}
			}
		}
		fclose(f);
		if (!found)
			break;
	}
	return -1;
}

static int connect_tcp(const char *host, unsigned port, char *why, size_t why_len)
{
	struct sockaddr_storage ss;
	socklen_t ss_len = 0;
	if (resolve_host(host, &ss, &ss_len, port) < 0) {
		snprintf(why, why_len, "cannot resolve host '%s' (use an IP address or a name in /etc/hosts)",
		         host);
		return -1;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0) {
		snprintf(why, why_len, "socket: %s", strerror(errno));
		return -1;
	}
	int flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	int r = connect(fd, (struct sockaddr *)&ss, ss_len);
	if (r < 0 && errno == EINPROGRESS) {
		int soerr = 0;
		socklen_t sl = sizeof soerr;
		if (wait_fd(fd, POLLOUT) < 0)
			soerr = errno;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		r = soerr ? -1 : 0;
		errno = soerr;
	}
	if (r < 0) {
		snprintf(why, why_len, "connect to %s port %u: %s", host, port, strerror(errno));
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, flags);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

static int connect_display(const display_t *d, char *why, size_t why_len)
{
	if (d->path[0]) {
		int fd = connect_unix(d->path, 0);
		if (fd < 0)
			snprintf(why, why_len, "connect to %s: %s", d->path, strerror(errno));
		return fd;
	}
	if (d->host[0])
		return connect_tcp(d->host, X_TCP_PORT_BASE + d->number, why, why_len);
	char path[64];
	snprintf(path, sizeof path, "/tmp/.X11-unix/X%u", d->number);
	int fd = connect_unix(path, 0);
	if (fd >= 0)
		return fd;
	int file_errno = errno;
#ifdef __linux__
	fd = connect_unix(path, 1);
	if (fd >= 0)
		return fd;
#endif
	snprintf(why, why_len, "connect to %s: %s (is an X server running on display :%u?)", path,
	         strerror(file_errno), d->number);
	return -1;
}

/* ------------------------------------------------------------------------ */
/* Xauthority                                                                */

#define FAMILY_INTERNET  0
#define FAMILY_INTERNET6 6
#define FAMILY_LOCAL     256
#define FAMILY_WILD      65535

typedef struct {
	unsigned char data[256];
	size_t len;
	int found;
} cookie_t;

static int read_counted(FILE *f, unsigned char *out, size_t cap, size_t *len_out)
{
	unsigned char lb[2];
	if (fread(lb, 1, 2, f) != 2)
		return -1;
	size_t len = ((size_t)lb[0] << 8) | lb[1];
	if (len > cap) {
		/* Longer than anything we match: skip it. */
		if (fseek(f, (long)len, SEEK_CUR) != 0)
			return -1;
		*len_out = SIZE_MAX;
		return 0;
	}
	if (len > 0 && fread(out, 1, len, f) != len)
		return -1;
	*len_out = len;
	return 0;
}

/* Finds the MIT-MAGIC-COOKIE-1 entry for the display. Preference: an entry
 * whose family and address name this connection exactly (the local host
 * name for a local socket, the address for TCP), then a FamilyWild entry,
 * then any local entry of the same display number (a sandbox's UTS
 * namespace may carry another host name than the one that wrote the file).
 * A missing file is not an error: the connection is tried without a cookie. */
static void find_cookie(const char *path, const display_t *d, cookie_t *cookie)
{
	memset(cookie, 0, sizeof *cookie);
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	char hostname[256] = "";
	gethostname(hostname, sizeof hostname - 1);
	unsigned char tcp_addr[16];
	size_t tcp_addr_len = 0;
	if (d->host[0] && !d->path[0]) {
		struct sockaddr_storage ss;
		socklen_t sl;
		if (resolve_host(d->host, &ss, &sl, 0) == 0) {
			if (ss.ss_family == AF_INET) {
				memcpy(tcp_addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
				tcp_addr_len = 4;
			} else {
				memcpy(tcp_addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
				tcp_addr_len = 16;
			}
		}
	}
	int is_local = !d->host[0] || d->path[0] || strcmp(d->host, "localhost") == 0 ||
	               (tcp_addr_len == 4 && tcp_addr[0] == 127);
	char number[16];
	snprintf(number, sizeof number, "%u", d->number);
	int best_rank = 0; /* 3 exact, 2 wild, 1 local of the same number */
	for (;;) {
		unsigned char fb[2];
		if (fread(fb, 1, 2, f) != 2)
			break;
		unsigned family = ((unsigned)fb[0] << 8) | fb[1];
		unsigned char addr[256], num[64], name[64], data[256];
		size_t addr_len, num_len, name_len, data_len;
		if (read_counted(f, addr, sizeof addr, &addr_len) < 0 ||
		    read_counted(f, num, sizeof num, &num_len) < 0 ||
		    read_counted(f, name, sizeof name, &name_len) < 0 ||
		    read_counted(f, data, sizeof data, &data_len) < 0)
			break;
		if (name_len != 18 || memcmp(name, "MIT-MAGIC-COOKIE-1", 18) != 0 || data_len == SIZE_MAX)
			continue;
		int number_matches = num_len == strlen(number) && memcmp(num, number, num_len) == 0;
		int rank = 0;
		if (family == FAMILY_WILD) {
			rank = (num_len == 0 || number_matches) ? 2 : 0;
		} else if (!number_matches) {
			rank = 0;
		} else if (family == FAMILY_LOCAL) {
			int same_host = addr_len == strlen(hostname) && memcmp(addr, hostname, addr_len) == 0;
			rank = (is_local && same_host) ? 3 : (is_local ? 1 : 0);
		} else if ((family == FAMILY_INTERNET || family == FAMILY_INTERNET6) && tcp_addr_len > 0 &&
		           addr_len == tcp_addr_len && memcmp(addr, tcp_addr, addr_len) == 0) {
			rank = 3;
		}
		if (rank > best_rank) {
			best_rank = rank;
			memcpy(cookie->data, data, data_len);
			cookie->len = data_len;
			cookie->found = 1;
		}
	}
	fclose(f);
}

/* ------------------------------------------------------------------------ */
/* X11 connection setup                                                      */

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
} xconn_t;

static uint16_t rd16(const unsigned char *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

static uint32_t rd32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static size_t pad4(size_t n)
{
	return (n + 3) & ~(size_t)3;
}

/* Returns 0, or an exit code after a diagnostic. */
static int x_setup(xconn_t *x, const display_t *d, const cookie_t *cookie, const char *display_text)
{
	unsigned char req[12 + 20 + 256];
	const uint16_t probe = 1;
	unsigned char native_lsb;
	memcpy(&native_lsb, &probe, 1);
	/* All protocol integers travel in our own byte order. */
	memset(req, 0, sizeof req);
	req[0] = native_lsb ? 'l' : 'B';
	uint16_t v;
	v = 11;
	memcpy(req + 2, &v, 2);
	v = 0;
	memcpy(req + 4, &v, 2);
	size_t len = 12;
	if (cookie->found) {
		v = 18;
		memcpy(req + 6, &v, 2);
		v = (uint16_t)cookie->len;
		memcpy(req + 8, &v, 2);
		memcpy(req + 12, "MIT-MAGIC-COOKIE-1", 18);
		len += pad4(18);
		memcpy(req + len, cookie->data, cookie->len);
		len += pad4(cookie->len);
	}
	if (write_all_fd(x->fd, req, len, 1) < 0) {
		diag("cannot send the connection setup to display %s: %s", display_text, strerror(errno));
		return EXIT_DISPLAY;
	}
	unsigned char head[8];
	if (read_all_fd(x->fd, head, 8) < 0) {
		diag("display %s closed the connection during setup: %s", display_text, strerror(errno));
		return EXIT_DISPLAY;
	}
	size_t extra = (size_t)rd16(head + 6) * 4;
	unsigned char *s = malloc(extra ? extra : 1);
	if (!s) {
		diag("out of memory reading the connection setup");
		return EXIT_WRITE;
	}
	int rc = 0;
	if (read_all_fd(x->fd, s, extra) < 0) {
		diag("display %s closed the connection during setup: %s", display_text, strerror(errno));
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	if (head[0] != 1) {
		size_t reason_len = head[0] == 0 ? head[1] : extra;
		if (reason_len > extra)
			reason_len = extra;
		while (reason_len > 0 && (s[reason_len - 1] == '\n' || s[reason_len - 1] == '\0'))
			reason_len--;
		for (size_t i = 0; i < reason_len; i++)
			if (s[i] < 0x20 || s[i] > 0x7e)
				s[i] = '?';
		diag("display %s refused the connection (%s): %.*s; %s", display_text,
		     head[0] == 2 ? "further authentication required" : "failed", (int)reason_len,
		     (const char *)s,
		     cookie->found
		         ? "the MIT-MAGIC-COOKIE-1 from the Xauthority file was not accepted"
		         : "no MIT-MAGIC-COOKIE-1 for this display was found; pass --xauthority <file>");
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	if (extra < 32) {
		diag("display %s sent a malformed connection setup", display_text);
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	size_t vendor_len = rd16(s + 16);
	unsigned nscreens = s[20], nformats = s[21];
	x->image_msb_first = s[22] == 1;
	size_t off = 32 + pad4(vendor_len);
	if (off + (size_t)nformats * 8 > extra) {
		diag("display %s sent a malformed connection setup (formats)", display_text);
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	const unsigned char *formats = s + off;
	off += (size_t)nformats * 8;
	if (d->screen >= nscreens) {
		diag("display %s has %u screen(s); screen %u does not exist", display_text, nscreens,
		     d->screen);
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	const unsigned char *screen = NULL;
	int visual_found = 0;
	for (unsigned i = 0; i <= d->screen; i++) {
		if (off + 40 > extra) {
			diag("display %s sent a malformed connection setup (screens)", display_text);
			rc = EXIT_DISPLAY;
			goto cleanup;
		}
		screen = s + off;
		off += 40;
		unsigned ndepths = screen[39];
		for (unsigned k = 0; k < ndepths; k++) {
			if (off + 8 > extra) {
				diag("display %s sent a malformed connection setup (depths)", display_text);
				rc = EXIT_DISPLAY;
				goto cleanup;
			}
			size_t nvisuals = rd16(s + off + 2);
			const unsigned char *depth = s + off;
			off += 8;
			if (off + nvisuals * 24 > extra) {
				diag("display %s sent a malformed connection setup (visuals)", display_text);
				rc = EXIT_DISPLAY;
				goto cleanup;
			}
			if (i == d->screen) {
				for (size_t vi = 0; vi < nvisuals; vi++) {
					const unsigned char *vis = s + off + vi * 24;
					if (rd32(vis) == rd32(screen + 32) && depth[0] == screen[38]) {
						visual_found = 1;
						x->visual_class = vis[4];
						x->red_mask = rd32(vis + 8);
						x->green_mask = rd32(vis + 12);
						x->blue_mask = rd32(vis + 16);
					}
				}
			}
			off += nvisuals * 24;
		}
	}
	if (!visual_found) {
		diag("display %s does not describe its root visual in the connection setup", display_text);
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	x->root = rd32(screen);
	x->width = rd16(screen + 20);
	x->height = rd16(screen + 22);
	x->depth = screen[38];
	for (unsigned i = 0; i < nformats; i++) {
		if (formats[i * 8] == x->depth) {
			x->bits_per_pixel = formats[i * 8 + 1];
			x->scanline_pad = formats[i * 8 + 2];
		}
	}
cleanup:
	free(s);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Pixel conversion                                                          */

typedef struct {
	unsigned shift, bits;
} channel_t;

static channel_t channel_of(uint32_t mask)
{
	channel_t c = {0, 0};
	if (!mask)
		return c;
	while (!(mask & 1)) {
		mask >>= 1;
		c.shift++;
	}
	while (mask & 1) {
		mask >>= 1;
		c.bits++;
	}
	return c;
}

static unsigned char channel_value(uint32_t pixel, channel_t c)
{
	uint32_t v = (pixel >> c.shift) & ((c.bits >= 32) ? 0xFFFFFFFFu : ((1u << c.bits) - 1));
	if (c.bits == 8)
		return (unsigned char)v;
	if (c.bits > 8)
		return (unsigned char)(v >> (c.bits - 8));
	if (c.bits == 0)
		return 0;
	return (unsigned char)((v * 255u + ((1u << c.bits) - 1) / 2) / ((1u << c.bits) - 1));
}

typedef struct {
	channel_t r, g, b;
	unsigned bytes_per_pixel;
	int msb_first;
	int fast_bgrx; /* 32 bpp, LSB first, masks ff0000/ff00/ff */
} pixfmt_t;

/* Converts one ZPixmap scanline to RGB bytes in rgb[0 .. 3*width). */
static void convert_row(const pixfmt_t *pf, const unsigned char *src, unsigned width, unsigned char *rgb)
{
	if (pf->fast_bgrx) {
		for (unsigned x = 0; x < width; x++) {
			rgb[3 * x] = src[4 * x + 2];
			rgb[3 * x + 1] = src[4 * x + 1];
			rgb[3 * x + 2] = src[4 * x];
		}
		return;
	}
	unsigned bpp = pf->bytes_per_pixel;
	for (unsigned x = 0; x < width; x++) {
		const unsigned char *p = src + (size_t)x * bpp;
		uint32_t pixel = 0;
		if (pf->msb_first) {
			for (unsigned k = 0; k < bpp; k++)
				pixel = (pixel << 8) | p[k];
		} else {
			for (unsigned k = bpp; k-- > 0;)
				pixel = (pixel << 8) | p[k];
		}
		rgb[3 * x] = channel_value(pixel, pf->r);
		rgb[3 * x + 1] = channel_value(pixel, pf->g);
		rgb[3 * x + 2] = channel_value(pixel, pf->b);
	}
}

/* Writes one PNG row with the Paeth filter (type 4): dst[0] = 4, then
 * cur[i] - paeth(left, up, up-left). `prev` is the previous row's RGB (all
 * zeros for the first row). Paeth was the smallest of the fixed filters on
 * desktop pictures with this encoder (about 6% below Sub and Up). */
static void paeth_row(const unsigned char *cur, const unsigned char *prev, size_t n, unsigned char *dst)
{
	dst[0] = 4;
	unsigned char *out = dst + 1;
	for (size_t i = 0; i < 3 && i < n; i++)
		out[i] = (unsigned char)(cur[i] - prev[i]);
	for (size_t i = 3; i < n; i++) {
		int a = cur[i - 3], b = prev[i], c = prev[i - 3];
		int pa = b - c, pb = a - c, pc = pa + pb;
		pa = pa < 0 ? -pa : pa;
		pb = pb < 0 ? -pb : pb;
		pc = pc < 0 ? -pc : pc;
		int pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
		out[i] = (unsigned char)(cur[i] - pred);
	}
}

/* ------------------------------------------------------------------------ */
/* Capture                                                                   */

static int send_get_image(xconn_t *x, unsigned y, unsigned rows)
{
	unsigned char req[20];
	uint16_t v16;
	uint32_t v32;
	req[0] = X_OPCODE_GET_IMAGE;
	req[1] = X_FORMAT_ZPIXMAP;
	v16 = 5;
	memcpy(req + 2, &v16, 2);
	memcpy(req + 4, &x->root, 4);
	v16 = 0;
	memcpy(req + 8, &v16, 2);
	v16 = (uint16_t)y;
	memcpy(req + 10, &v16, 2);
	v16 = (uint16_t)x->width;
	memcpy(req + 12, &v16, 2);
	v16 = (uint16_t)rows;
	memcpy(req + 14, &v16, 2);
	v32 = 0xFFFFFFFFu;
	memcpy(req + 16, &v32, 4);
	x->sequence++;
	return write_all_fd(x->fd, req, sizeof req, 1);
}

static const char *x_error_name(unsigned code)
{
	static const char *const names[] = {
	    "",          "BadRequest", "BadValue",    "BadWindow",   "BadPixmap", "BadAtom",
	    "BadCursor", "BadFont",    "BadMatch",    "BadDrawable", "BadAccess", "BadAlloc",
	    "BadColor",  "BadGC",      "BadIDChoice", "BadName",     "BadLength", "BadImplementation"};
	return code < sizeof names / sizeof names[0] ? names[code] : "unknown";
}

/* Reads the GetImage reply for `sequence` into strip (expect_bytes of
 * pixels). Events are skipped. Returns 0 or an exit code. */
static int read_get_image(xconn_t *x, uint16_t sequence, unsigned char *strip, size_t expect_bytes,
                          const char *display_text)
{
	for (;;) {
		unsigned char head[32];
		if (read_all_fd(x->fd, head, 32) < 0) {
			diag("lost display %s while reading the root window: %s", display_text,
			     strerror(errno));
			return EXIT_DISPLAY;
		}
		if (head[0] == 0) {
			diag("display %s answered GetImage with X error %u (%s); the root window could not "
			     "be read",
			     display_text, head[1], x_error_name(head[1]));
			return EXIT_DISPLAY;
		}
		if (head[0] != 1) {
			if (head[0] == 35) { /* GenericEvent: skip its extra data */
				size_t skip = (size_t)rd32(head + 4) * 4;
				unsigned char sink[256];
				while (skip > 0) {
					size_t n = skip < sizeof sink ? skip : sizeof sink;
					if (read_all_fd(x->fd, sink, n) < 0)
						return EXIT_DISPLAY;
					skip -= n;
				}
			}
			continue; /* an event: not ours */
		}
		size_t data_len = (size_t)rd32(head + 4) * 4;
		if (rd16(head + 2) != sequence || data_len != pad4(expect_bytes)) {
			diag("display %s sent an unexpected GetImage reply (sequence %u, %zu bytes; expected "
			     "%u, "
			     "%zu bytes)",
			     display_text, rd16(head + 2), data_len, sequence, pad4(expect_bytes));
			return EXIT_DISPLAY;
		}
		if (read_all_fd(x->fd, strip, data_len) < 0) {
			diag("lost display %s while reading the root window: %s", display_text,
			     strerror(errno));
			return EXIT_DISPLAY;
		}
		return 0;
	}
}

/* ------------------------------------------------------------------------ */
/* PNG container                                                             */

static void png_chunk(buf_t *out, const char *type, const unsigned char *data, size_t len)
{
	unsigned char head[8];
	put_be32(head, (uint32_t)len);
	memcpy(head + 4, type, 4);
	buf_put(out, head, 8);
	buf_put(out, data, len);
	uint32_t crc = crc_update(0, (const unsigned char *)type, 4);
	crc = crc_update(crc, data, len);
	unsigned char tail[4];
	put_be32(tail, crc);
	buf_put(out, tail, 4);
}

static int json_put_string(buf_t *b, const char *s)
{
	buf_put(b, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char esc[8];
		if (*p == '"' || *p == '\\') {
			esc[0] = '\\';
			esc[1] = (char)*p;
			buf_put(b, esc, 2);
		} else if (*p < 0x20) {
			snprintf(esc, sizeof esc, "\\u%04x", *p);
			buf_put(b, esc, 6);
		} else {
			buf_put(b, p, 1);
		}
	}
	buf_put(b, "\"", 1);
	return b->failed ? -1 : 0;
}

/* ------------------------------------------------------------------------ */

typedef struct {
	const char *display;
	const char *out;
	const char *xauthority;
} options_t;

static int parse_args(int argc, char **argv, options_t *o)
{
	memset(o, 0, sizeof *o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char **slot = NULL;
		if (strcmp(a, "--display") == 0)
			slot = &o->display;
		else if (strcmp(a, "--out") == 0)
			slot = &o->out;
		else if (strcmp(a, "--xauthority") == 0)
			slot = &o->xauthority;
		else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage_text, stderr);
			return -1;
		} else {
			diag("unknown argument '%s'", a);
			return -1;
		}
		if (i + 1 >= argc) {
			diag("%s needs a value", a);
			return -1;
		}
		if (*slot) {
			diag("%s given twice", a);
			return -1;
		}
		*slot = argv[++i];
	}
	if (!o->display || !o->out) {
		diag("--display and --out are required");
		return -1;
	}
	if (o->out[0] != '/') {
		diag("--out must be an absolute path, got '%s'", o->out);
		return -1;
	}
	if (o->xauthority && !o->xauthority[0]) {
		diag("--xauthority must name a file");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	options_t opt;
	display_t disp;
	xconn_t x;
	cookie_t cookie;
	buf_t png = {0}, zout = {0}, line = {0};
	unsigned char *raw = NULL, *strips[2] = {NULL, NULL}, *rgb_rows[2] = {NULL, NULL};
	uint32_t *head = NULL;
	fixed_codes_t *codes = NULL;
	int out_fd = -1;
	int created = 0; /* the output file is ours to remove on failure */
	int rc = 0;
	memset(&x, 0, sizeof x);
	x.fd = -1;

	signal(SIGPIPE, SIG_IGN);
	if (parse_args(argc, argv, &opt) < 0) {
		fputs(usage_text, stderr);
		return EXIT_USAGE;
	}
	if (parse_display(opt.display, &disp) < 0) {
		diag("malformed display '%s' (expected [host]:number[.screen])", opt.display);
		return EXIT_USAGE;
	}

	/* Create the output first: an existing file fails before any X work. */
	out_fd = open(opt.out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out_fd < 0) {
		diag("cannot create %s: %s%s", opt.out, strerror(errno),
		     errno == EEXIST ? " (the output must not exist yet)" : "");
		return EXIT_WRITE;
	}
	created = 1;

	/* Xauthority: --xauthority, else $XAUTHORITY, else ~/.Xauthority. */
	char auth_path[4096] = "";
	if (opt.xauthority) {
		snprintf(auth_path, sizeof auth_path, "%s", opt.xauthority);
	} else if (getenv("XAUTHORITY") && getenv("XAUTHORITY")[0]) {
		snprintf(auth_path, sizeof auth_path, "%s", getenv("XAUTHORITY"));
	} else {
		/* No getpwuid(): a static program cannot load NSS. */
		const char *home = getenv("HOME");
		if (home && home[0])
			snprintf(auth_path, sizeof auth_path, "%s/.Xauthority", home);
	}
	memset(&cookie, 0, sizeof cookie);
	if (auth_path[0])
		find_cookie(auth_path, &disp, &cookie);
	if (opt.xauthority && !cookie.found)
		diag("note: %s holds no MIT-MAGIC-COOKIE-1 for display %s; trying without authentication",
		     opt.xauthority, opt.display);

	char why[400] = "";
	x.fd = connect_display(&disp, why, sizeof why);
	if (x.fd < 0) {
		diag("display %s is unreachable: %s", opt.display, why);
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	rc = x_setup(&x, &disp, &cookie, opt.display);
	if (rc)
		goto cleanup;

	if (x.visual_class != X_VISUAL_TRUECOLOR || (x.depth != 24 && x.depth != 32) ||
	    (x.bits_per_pixel != 24 && x.bits_per_pixel != 32)) {
		static const char *const classes[] = {"StaticGray",  "GrayScale", "StaticColor",
		                                      "PseudoColor", "TrueColor", "DirectColor"};
		diag("display %s has a %s root visual of depth %u (%u bits per pixel); only TrueColor of "
		     "depth "
		     "24 or 32 is supported",
		     opt.display, x.visual_class < 6 ? classes[x.visual_class] : "unknown", x.depth,
		     x.bits_per_pixel);
		rc = EXIT_VISUAL;
		goto cleanup;
	}
	if (x.width == 0 || x.height == 0 || x.scanline_pad == 0 || x.scanline_pad % 8 != 0) {
		diag("display %s reported an unusable root window (%ux%u, scanline pad %u)", opt.display,
		     x.width, x.height, x.scanline_pad);
		rc = EXIT_DISPLAY;
		goto cleanup;
	}

	pixfmt_t pf;
	pf.r = channel_of(x.red_mask);
	pf.g = channel_of(x.green_mask);
	pf.b = channel_of(x.blue_mask);
	pf.bytes_per_pixel = x.bits_per_pixel / 8;
	pf.msb_first = x.image_msb_first;
	pf.fast_bgrx = x.bits_per_pixel == 32 && !x.image_msb_first && x.red_mask == 0xFF0000u &&
	               x.green_mask == 0xFF00u && x.blue_mask == 0xFFu;
	if (!pf.r.bits || !pf.g.bits || !pf.b.bits) {
		diag("display %s has a TrueColor visual without red, green and blue masks", opt.display);
		rc = EXIT_VISUAL;
		goto cleanup;
	}

	size_t pad_bytes = x.scanline_pad / 8;
	size_t stride = ((size_t)x.width * pf.bytes_per_pixel + pad_bytes - 1) / pad_bytes * pad_bytes;
	size_t rows_per_strip = STRIP_MAX_BYTES / stride;
	if (rows_per_strip < 1)
		rows_per_strip = 1;
	if (rows_per_strip > x.height)
		rows_per_strip = x.height;
	size_t row_bytes = 1 + (size_t)x.width * 3;
	raw = malloc(row_bytes * x.height + 8);
	strips[0] = malloc(pad4(stride * rows_per_strip));
	strips[1] = malloc(pad4(stride * rows_per_strip));
	head = calloc((size_t)1 << LZ_HASH_BITS, sizeof *head);
	codes = malloc(sizeof *codes);
	rgb_rows[0] = calloc(row_bytes, 1); /* the row above the first: zeros */
	rgb_rows[1] = calloc(row_bytes, 1);
	if (!raw || !strips[0] || !strips[1] || !head || !codes || !rgb_rows[0] || !rgb_rows[1]) {
		diag("out of memory for a %ux%u capture", x.width, x.height);
		rc = EXIT_WRITE;
		goto cleanup;
	}
	crc_init();
	fixed_codes_init(codes);

	deflater_t z;
	memset(&z, 0, sizeof z);
	z.codes = codes;
	z.head = head;
	z.row_bytes = row_bytes;
	z.out = &zout;
	/* zlib header: deflate, 32 KiB window, no dictionary, fastest. */
	unsigned char zhead[2] = {0x78, 0x01};
	buf_put(&zout, zhead, 2);
	bits_put(&z, pack_code(1 | (1 << 1), 3)); /* BFINAL=1, BTYPE=01 (fixed) */
	adler_t adler = {1, 0};

	/* Pipelined strips: the request for the next strip is out while this
	 * one is converted and compressed. */
	unsigned nstrips = (unsigned)((x.height + rows_per_strip - 1) / rows_per_strip);
	if (send_get_image(&x, 0, (unsigned)(rows_per_strip < x.height ? rows_per_strip : x.height)) < 0) {
		diag("lost display %s: %s", opt.display, strerror(errno));
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	for (unsigned s = 0; s < nstrips; s++) {
		unsigned y0 = (unsigned)(s * rows_per_strip);
		unsigned rows =
		    (unsigned)((x.height - y0) < rows_per_strip ? (x.height - y0) : rows_per_strip);
		uint16_t seq = x.sequence;
		if (s + 1 < nstrips) {
			unsigned y1 = y0 + rows;
			unsigned rows1 =
			    (unsigned)((x.height - y1) < rows_per_strip ? (x.height - y1) : rows_per_strip);
			if (send_get_image(&x, y1, rows1) < 0) {
				diag("lost display %s: %s", opt.display, strerror(errno));
				rc = EXIT_DISPLAY;
				goto cleanup;
			}
		}
		unsigned char *strip = strips[s & 1];
		rc = read_get_image(&x, seq, strip, stride * rows, opt.display);
		if (rc)
			goto cleanup;
		unsigned char *dst = raw + (size_t)y0 * row_bytes;
		for (unsigned r = 0; r < rows; r++) {
			convert_row(&pf, strip + (size_t)r * stride, x.width, rgb_rows[1]);
			paeth_row(rgb_rows[1], rgb_rows[0], row_bytes - 1, dst + (size_t)r * row_bytes);
			unsigned char *t = rgb_rows[0];
			rgb_rows[0] = rgb_rows[1];
			rgb_rows[1] = t;
		}
		adler_update(&adler, dst, (size_t)rows * row_bytes);
		deflate_run(&z, raw, (size_t)(y0 + rows) * row_bytes, s + 1 == nstrips);
	}
	close(x.fd);
	x.fd = -1;
	bits_put(&z, codes->end_of_block);
	bits_flush(&z);
	unsigned char ztail[4];
	put_be32(ztail, (adler.b << 16) | adler.a);
	buf_put(&zout, ztail, 4);

	/* The PNG: signature, IHDR, IDAT..., IEND. */
	static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	unsigned char ihdr[13];
	put_be32(ihdr, x.width);
	put_be32(ihdr + 4, x.height);
	ihdr[8] = 8;  /* bit depth */
	ihdr[9] = 2;  /* RGB */
	ihdr[10] = 0; /* deflate */
	ihdr[11] = 0; /* adaptive filtering */
	ihdr[12] = 0; /* not interlaced */
	buf_reserve(&png, zout.len + zout.len / IDAT_MAX_BYTES * 12 + 128);
	buf_put(&png, signature, 8);
	png_chunk(&png, "IHDR", ihdr, sizeof ihdr);
	for (size_t off = 0; off < zout.len || off == 0; off += IDAT_MAX_BYTES) {
		size_t n = zout.len - off < IDAT_MAX_BYTES ? zout.len - off : IDAT_MAX_BYTES;
		png_chunk(&png, "IDAT", zout.data + off, n);
		if (n == 0)
			break;
	}
	png_chunk(&png, "IEND", NULL, 0);
	if (png.failed || zout.failed) {
		diag("out of memory encoding a %ux%u PNG", x.width, x.height);
		rc = EXIT_WRITE;
		goto cleanup;
	}
	if (write_all_fd(out_fd, png.data, png.len, 0) < 0 || fsync(out_fd) < 0) {
		diag("cannot write %s: %s", opt.out, strerror(errno));
		rc = EXIT_WRITE;
		goto cleanup;
	}
	if (close(out_fd) < 0) {
		out_fd = -1;
		diag("cannot write %s: %s", opt.out, strerror(errno));
		rc = EXIT_WRITE;
		goto cleanup;
	}
	out_fd = -1;

	buf_put(&line, "{\"screenshot_file_path\":", 24);
	json_put_string(&line, opt.out);
	char dims[64];
	int n = snprintf(dims, sizeof dims, ",\"width\":%u,\"height\":%u}\n", x.width, x.height);
	buf_put(&line, dims, (size_t)n);
	if (line.failed || write_all_fd(STDOUT_FILENO, line.data, line.len, 0) < 0) {
		diag("cannot write the result to standard output: %s", strerror(errno));
		rc = EXIT_WRITE;
		goto cleanup;
	}

cleanup:
	if (x.fd >= 0)
		close(x.fd);
	if (out_fd >= 0)
		close(out_fd);
	if (rc != 0 && created) {
		/* We created the output (O_EXCL); a failed capture leaves nothing. */
		struct stat st;
		if (lstat(opt.out, &st) == 0 && S_ISREG(st.st_mode))
			unlink(opt.out);
	}
	free(raw);
	free(strips[0]);
	free(strips[1]);
	free(rgb_rows[0]);
	free(rgb_rows[1]);
	free(head);
	free(codes);
	free(png.data);
	free(zout.data);
	free(line.data);
	return rc;
}
