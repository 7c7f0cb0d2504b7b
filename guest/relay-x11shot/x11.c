/*
 * relay-x11shot/x11.c — display names, connecting, Xauthority, the X11 handshake and GetImage (x11shot.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "x11shot.h"

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

int write_all_fd(int fd, const void *data, size_t len, int use_poll)
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

int parse_display(const char *text, display_t *d)
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

int connect_display(const display_t *d, char *why, size_t why_len)
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
void find_cookie(const char *path, const display_t *d, cookie_t *cookie)
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

uint16_t rd16(const unsigned char *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

uint32_t rd32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

size_t pad4(size_t n)
{
	return (n + 3) & ~(size_t)3;
}

/* Returns 0, or an exit code after a diagnostic. */
int x_setup(xconn_t *x, const display_t *d, const cookie_t *cookie, const char *display_text)
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
		x->setup_dropped = 1;
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
		x->setup_dropped = 1;
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
	x->resource_base = rd32(s + 4);
	x->resource_mask = rd32(s + 8);
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
/* Capture                                                                   */

/* Bytes 4 to 19 of GetImage and of MIT-SHM's ShmGetImage, laid out alike:
 * the root, the strip of `rows` rows from row y, all planes. */
void put_image_region(unsigned char *req, const xconn_t *x, unsigned y, unsigned rows)
{
	uint16_t v16[4] = {0, (uint16_t)y, (uint16_t)x->width, (uint16_t)rows};
	uint32_t planes = 0xFFFFFFFFu;
	memcpy(req + 4, &x->root, 4);
	memcpy(req + 8, v16, 8);
	memcpy(req + 16, &planes, 4);
}

int send_get_image(xconn_t *x, unsigned y, unsigned rows)
{
	unsigned char req[20];
	uint16_t len = 5;
	req[0] = X_OPCODE_GET_IMAGE;
	req[1] = X_FORMAT_ZPIXMAP;
	memcpy(req + 2, &len, 2);
	put_image_region(req, x, y, rows);
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

/* Reads the next reply or error into head (32 bytes), skipping events.
 * 0, or -1 with errno when the connection failed. */
int x_next_reply(xconn_t *x, unsigned char head[32])
{
	for (;;) {
		if (read_all_fd(x->fd, head, 32) < 0)
			return -1;
		if (head[0] == 0 || head[0] == 1)
			return 0;
		if (head[0] == 35) { /* GenericEvent: skip its extra data */
			size_t skip = (size_t)rd32(head + 4) * 4;
			unsigned char sink[256];
			while (skip > 0) {
				size_t n = skip < sizeof sink ? skip : sizeof sink;
				if (read_all_fd(x->fd, sink, n) < 0)
					return -1;
				skip -= n;
			}
		}
		/* an event: not ours */
	}
}

/* Reads `len` bytes of a reply's extra data. */
int x_read_data(xconn_t *x, void *data, size_t len)
{
	return read_all_fd(x->fd, data, len);
}

/* Reads the GetImage reply for `sequence` into strip (expect_bytes of
 * pixels). Events are skipped. Returns 0 or an exit code. */
int read_get_image(xconn_t *x, uint16_t sequence, unsigned char *strip, size_t expect_bytes,
                   const char *display_text)
{
	unsigned char head[32];
	if (x_next_reply(x, head) < 0) {
		diag("lost display %s while reading the root window: %s", display_text, strerror(errno));
		return EXIT_DISPLAY;
	}
	if (head[0] == 0) {
		diag("display %s answered GetImage with X error %u (%s); the root window could not "
		     "be read",
		     display_text, head[1], x_error_name(head[1]));
		return EXIT_DISPLAY;
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
		diag("lost display %s while reading the root window: %s", display_text, strerror(errno));
		return EXIT_DISPLAY;
	}
	return 0;
}

/* GetGeometry of the root: 0 when it still has the size of the connection
 * setup, else an exit code with a diagnostic. */
int x_check_root_size(xconn_t *x, const char *display_text)
{
	unsigned char req[8], head[32];
	uint16_t v = 2;
	req[0] = X_OPCODE_GET_GEOMETRY;
	req[1] = 0;
	memcpy(req + 2, &v, 2);
	memcpy(req + 4, &x->root, 4);
	x->sequence++;
	if (write_all_fd(x->fd, req, sizeof req, 1) < 0 || x_next_reply(x, head) < 0) {
		diag("lost display %s: %s", display_text, strerror(errno));
		return EXIT_DISPLAY;
	}
	if (head[0] != 1 || rd16(head + 2) != x->sequence || rd32(head + 4) != 0) {
		diag("display %s did not answer GetGeometry of the root window", display_text);
		return EXIT_DISPLAY;
	}
	if (rd16(head + 16) != x->width || rd16(head + 18) != x->height) {
		diag("display %s is now %ux%u (was %ux%u when connected)", display_text, rd16(head + 16),
		     rd16(head + 18), x->width, x->height);
		return EXIT_DISPLAY;
	}
	return 0;
}
