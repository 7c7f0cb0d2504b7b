/*
 * relay-x11shot — the capture-x11 guest program (spec/guest.md §11.2).
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

#include "relay-x11shot/x11shot.h"

static const char usage_text[] =
    "usage: relay-x11shot --display <DISPLAY> --out <absolute out.png> [--xauthority <file>]\n"
    "Reads the root window of an X display (TrueColor, depth 24 or 32) and writes an RGB PNG.\n"
    "Exit codes: 0 written, 2 usage, 3 display unreachable or authentication refused,\n"
    "4 unsupported visual, 5 the output could not be written.\n";

void diag(const char *fmt, ...)
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

/* Refuses what the encoder cannot read (exit code, with a diagnostic) and
 * fills *pf from the root visual; 0 when it can be captured. */
static int check_visual(const xconn_t *x, const char *display, pixfmt_t *pf)
{
	if (x->visual_class != X_VISUAL_TRUECOLOR || (x->depth != 24 && x->depth != 32) ||
	    (x->bits_per_pixel != 24 && x->bits_per_pixel != 32)) {
		static const char *const classes[] = {"StaticGray",  "GrayScale", "StaticColor",
		                                      "PseudoColor", "TrueColor", "DirectColor"};
		diag("display %s has a %s root visual of depth %u (%u bits per pixel); only TrueColor of "
		     "depth "
		     "24 or 32 is supported",
		     display, x->visual_class < 6 ? classes[x->visual_class] : "unknown", x->depth,
		     x->bits_per_pixel);
		return EXIT_VISUAL;
	}
	if (x->width == 0 || x->height == 0 || x->scanline_pad == 0 || x->scanline_pad % 8 != 0) {
		diag("display %s reported an unusable root window (%ux%u, scanline pad %u)", display,
		     x->width, x->height, x->scanline_pad);
		return EXIT_DISPLAY;
	}

	pf->r = channel_of(x->red_mask);
	pf->g = channel_of(x->green_mask);
	pf->b = channel_of(x->blue_mask);
	pf->bytes_per_pixel = x->bits_per_pixel / 8;
	pf->msb_first = x->image_msb_first;
	pf->fast_bgrx = x->bits_per_pixel == 32 && !x->image_msb_first && x->red_mask == 0xFF0000u &&
	                x->green_mask == 0xFF00u && x->blue_mask == 0xFFu;
	if (!pf->r.bits || !pf->g.bits || !pf->b.bits) {
		diag("display %s has a TrueColor visual without red, green and blue masks", display);
		return EXIT_VISUAL;
	}
	return 0;
}

/* Prints {"screenshot_file_path":out,"width":W,"height":H} and a newline. */
static int print_result(const char *out, unsigned width, unsigned height)
{
	buf_t line = {0};
	char dims[64];
	int n = snprintf(dims, sizeof dims, ",\"width\":%u,\"height\":%u}\n", width, height);
	int rc = 0;
	buf_put(&line, "{\"screenshot_file_path\":", 24);
	json_put_string(&line, out);
	buf_put(&line, dims, (size_t)n);
	if (line.failed || write_all_fd(STDOUT_FILENO, line.data, line.len, 0) < 0)
		rc = -1;
	free(line.data);
	return rc;
}

/* Xauthority: --xauthority, else $XAUTHORITY, else ~/.Xauthority ("" when
 * none can be named). */
static void xauthority_path(const char *given, char *out, size_t out_len)
{
	out[0] = '\0';
	if (given) {
		snprintf(out, out_len, "%s", given);
	} else if (getenv("XAUTHORITY") && getenv("XAUTHORITY")[0]) {
		snprintf(out, out_len, "%s", getenv("XAUTHORITY"));
	} else {
		/* No getpwuid(): a static program cannot load NSS. */
		const char *home = getenv("HOME");
		if (home && home[0])
			snprintf(out, out_len, "%s/.Xauthority", home);
	}
}

/* Reads the root window strip by strip (the request for the next strip is
 * out while this one is converted) and deflates the Paeth-filtered RGB rows
 * into zout as one zlib stream. 0, or an exit code with a diagnostic. */
static int capture_deflated(xconn_t *x, const pixfmt_t *pf, const char *display, buf_t *zout)
{
	unsigned char *raw = NULL, *strips[2] = {NULL, NULL}, *rgb_rows[2] = {NULL, NULL};
	uint32_t *head = NULL;
	fixed_codes_t *codes = NULL;
	int rc = 0;
	size_t pad_bytes = x->scanline_pad / 8;
	size_t stride = ((size_t)x->width * pf->bytes_per_pixel + pad_bytes - 1) / pad_bytes * pad_bytes;
	size_t rows_per_strip = STRIP_MAX_BYTES / stride;
	if (rows_per_strip < 1)
		rows_per_strip = 1;
	if (rows_per_strip > x->height)
		rows_per_strip = x->height;
	size_t row_bytes = 1 + (size_t)x->width * 3;
	raw = malloc(row_bytes * x->height + 8);
	strips[0] = malloc(pad4(stride * rows_per_strip));
	strips[1] = malloc(pad4(stride * rows_per_strip));
	head = calloc((size_t)1 << LZ_HASH_BITS, sizeof *head);
	codes = malloc(sizeof *codes);
	rgb_rows[0] = calloc(row_bytes, 1); /* the row above the first: zeros */
	rgb_rows[1] = calloc(row_bytes, 1);
	if (!raw || !strips[0] || !strips[1] || !head || !codes || !rgb_rows[0] || !rgb_rows[1]) {
		diag("out of memory for a %ux%u capture", x->width, x->height);
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
	z.out = zout;
	/* zlib header: deflate, 32 KiB window, no dictionary, fastest. */
	unsigned char zhead[2] = {0x78, 0x01};
	buf_put(zout, zhead, 2);
	bits_put(&z, pack_code(1 | (1 << 1), 3)); /* BFINAL=1, BTYPE=01 (fixed) */
	adler_t adler = {1, 0};

	/* Pipelined strips: the request for the next strip is out while this
	 * one is converted and compressed. */
	unsigned nstrips = (unsigned)((x->height + rows_per_strip - 1) / rows_per_strip);
	if (send_get_image(x, 0, (unsigned)(rows_per_strip < x->height ? rows_per_strip : x->height)) < 0) {
		diag("lost display %s: %s", display, strerror(errno));
		rc = EXIT_DISPLAY;
		goto cleanup;
	}
	for (unsigned s = 0; s < nstrips; s++) {
		unsigned y0 = (unsigned)(s * rows_per_strip);
		unsigned rows =
		    (unsigned)((x->height - y0) < rows_per_strip ? (x->height - y0) : rows_per_strip);
		uint16_t seq = x->sequence;
		if (s + 1 < nstrips) {
			unsigned y1 = y0 + rows;
			unsigned rows1 =
			    (unsigned)((x->height - y1) < rows_per_strip ? (x->height - y1) : rows_per_strip);
			if (send_get_image(x, y1, rows1) < 0) {
				diag("lost display %s: %s", display, strerror(errno));
				rc = EXIT_DISPLAY;
				goto cleanup;
			}
		}
		unsigned char *strip = strips[s & 1];
		rc = read_get_image(x, seq, strip, stride * rows, display);
		if (rc)
			goto cleanup;
		unsigned char *dst = raw + (size_t)y0 * row_bytes;
		for (unsigned r = 0; r < rows; r++) {
			convert_row(pf, strip + (size_t)r * stride, x->width, rgb_rows[1]);
			paeth_row(rgb_rows[1], rgb_rows[0], row_bytes - 1, dst + (size_t)r * row_bytes);
			unsigned char *t = rgb_rows[0];
			rgb_rows[0] = rgb_rows[1];
			rgb_rows[1] = t;
		}
		adler_update(&adler, dst, (size_t)rows * row_bytes);
		deflate_run(&z, raw, (size_t)(y0 + rows) * row_bytes, s + 1 == nstrips);
	}
	bits_put(&z, codes->end_of_block);
	bits_flush(&z);
	unsigned char ztail[4];
	put_be32(ztail, (adler.b << 16) | adler.a);
	buf_put(zout, ztail, 4);
cleanup:
	free(raw);
	free(strips[0]);
	free(strips[1]);
	free(rgb_rows[0]);
	free(rgb_rows[1]);
	free(head);
	free(codes);
	return rc;
}

int main(int argc, char **argv)
{
	options_t opt;
	display_t disp;
	xconn_t x;
	cookie_t cookie;
	buf_t png = {0}, zout = {0};
	int out_fd = -1;
	int created = 0; /* the output file is ours to remove on failure */
	pixfmt_t pf;
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

	char auth_path[4096];
	xauthority_path(opt.xauthority, auth_path, sizeof auth_path);
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

	rc = check_visual(&x, opt.display, &pf);
	if (rc)
		goto cleanup;

	rc = capture_deflated(&x, &pf, opt.display, &zout);
	if (rc)
		goto cleanup;
	close(x.fd);
	x.fd = -1;

	png_assemble(&png, &zout, x.width, x.height);
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

	if (print_result(opt.out, x.width, x.height) < 0) {
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
	free(png.data);
	free(zout.data);
	return rc;
}
