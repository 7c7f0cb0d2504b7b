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
 * pixel above, and a hash of the next four bytes) over rows filtered with
 * Up or Sub (pixels.c says why not Paeth).
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
    "       relay-x11shot --display <DISPLAY> --serve [--xauthority <file>]\n"
    "Reads the root window of an X display (TrueColor, depth 24 or 32) and writes an RGB PNG;\n"
    "with --serve, one for each absolute path read from standard input, on one connection.\n"
    "Exit codes: 0 written, 2 usage, 3 display unreachable or authentication refused,\n"
    "4 unsupported visual, 5 the output could not be written.\n";

/* The last diagnostic, for --serve's failure answers (the program is
 * single-threaded). */
static char last_diag[600];

void diag(const char *fmt, ...)
{
	char line[600];
	int n = snprintf(line, sizeof line, "relay-x11shot: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = strlen(line);
	memcpy(last_diag, line + n, len - (size_t)n + 1);
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
	int serve;
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
		else if (strcmp(a, "--serve") == 0 && !o->serve) {
			o->serve = 1;
			continue;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
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
	if (!o->display || !o->out == !o->serve) {
		diag("--display and one of --out or --serve are required");
		return -1;
	}
	if (o->out && o->out[0] != '/') {
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

/* Strips of the root window: at most STRIP_MAX_BYTES each. */
typedef struct {
	size_t stride;    /* bytes of one ZPixmap scanline */
	unsigned rows;    /* per strip */
	unsigned count;   /* strips */
	size_t bytes_max; /* of one strip, padded */
} strips_t;

static strips_t strips_of(const xconn_t *x, const pixfmt_t *pf)
{
	strips_t st;
	size_t pad_bytes = x->scanline_pad / 8;
	st.stride = ((size_t)x->width * pf->bytes_per_pixel + pad_bytes - 1) / pad_bytes * pad_bytes;
	size_t rows = STRIP_MAX_BYTES / st.stride;
	if (rows < 1)
		rows = 1;
	if (rows > x->height)
		rows = x->height;
	st.rows = (unsigned)rows;
	st.count = (x->height + st.rows - 1) / st.rows;
	st.bytes_max = pad4(st.stride * st.rows);
	return st;
}

static unsigned strip_rows(const xconn_t *x, const strips_t *st, unsigned s)
{
	unsigned y = s * st->rows;
	return x->height - y < st->rows ? x->height - y : st->rows;
}

static void trace(const char *what)
{
	if (getenv("RELAY_X11SHOT_TRACE"))
		diag("%s", what);
}

/* Set by --serve before its first shot (the program is single-threaded). */
static int serving;

/* Strips in flight at once with MIT-SHM, each in its own slot of the
 * segment. With --serve, all of them up to SHM_MAX_BYTES (at 1280x800,
 * sixteen): the server serves the whole screen in one go instead of being
 * woken once per strip (each wake costs a scheduling delay on a loaded
 * machine), and the segment, faulted in once, serves every shot. A one-shot
 * run uses two (the server fills one while the other is encoded): a fresh
 * 4 MB segment costs the server more in page faults (6 against 3 ms of
 * Xvfb's CPU a shot at 1280x800) than the wakes it saves. */
static unsigned shm_slots(const strips_t *st)
{
	size_t slots = serving ? SHM_MAX_BYTES / st->bytes_max : 2;
	if (slots < 2)
		slots = 2;
	return (unsigned)(slots < st->count ? slots : st->count);
}

/* The root window by ShmGetImage into the slots of one segment (shm_slots).
 * 0 done, 1 the server refused the segment before any pixel was read (use
 * GetImage), or an exit code with a diagnostic. */
static int capture_shm(xconn_t *x, const strips_t *st, encoder_t *enc, const char *display)
{
	uint16_t seqs[SHM_MAX_BYTES / STRIP_MAX_BYTES + 2];
	unsigned slots = shm_slots(st);
	int refused = 0, rc = 0;
	for (unsigned s = 0; s < slots; s++) {
		if (shm_send_get_image(x, s * st->rows, strip_rows(x, st, s), s * st->bytes_max) < 0)
			goto lost;
		seqs[s] = x->sequence;
	}
	for (unsigned s = 0; s < st->count; s++) {
		unsigned rows = strip_rows(x, st, s), slot = s % slots;
		rc = shm_read_get_image(x, seqs[slot], st->stride * rows, display, &refused);
		if (rc)
			return rc;
		if (refused && s == 0) {
			if (x_sync(x) < 0)
				goto lost;
			return 1;
		}
		if (refused) {
			diag("display %s answered ShmGetImage with an X error; the root window could not be "
			     "read",
			     display);
			return EXIT_DISPLAY;
		}
		encoder_rows(enc, x->shm_map + slot * st->bytes_max, st->stride, rows);
		if (s + slots < st->count) {
			if (shm_send_get_image(x, (s + slots) * st->rows, strip_rows(x, st, s + slots),
			                       slot * st->bytes_max) < 0)
				goto lost;
			seqs[slot] = x->sequence;
		}
	}
	return 0;
lost:
	diag("lost display %s: %s", display, strerror(errno));
	return EXIT_DISPLAY;
}

/* The root window by GetImage, strip by strip through the socket (the
 * request for the next strip is out while this one is encoded). */
static int capture_socket(xconn_t *x, const strips_t *st, encoder_t *enc, const char *display)
{
	unsigned char *strip = malloc(st->bytes_max);
	int rc = 0;
	if (!strip) {
		diag("out of memory for a %ux%u capture", x->width, x->height);
		return EXIT_WRITE;
	}
	if (send_get_image(x, 0, strip_rows(x, st, 0)) < 0)
		goto lost;
	for (unsigned s = 0; s < st->count; s++) {
		unsigned rows = strip_rows(x, st, s);
		uint16_t seq = x->sequence;
		if (s + 1 < st->count && send_get_image(x, (s + 1) * st->rows, strip_rows(x, st, s + 1)) < 0)
			goto lost;
		rc = read_get_image(x, seq, strip, st->stride * rows, display);
		if (rc)
			goto cleanup;
		encoder_rows(enc, strip, st->stride, rows);
	}
	goto cleanup;
lost:
	diag("lost display %s: %s", display, strerror(errno));
	rc = EXIT_DISPLAY;
cleanup:
	free(strip);
	return rc;
}

/* Reads the root window and deflates its filtered RGB rows into zout
 * as one zlib stream: by MIT-SHM when the server takes a segment, else by
 * GetImage. 0, or an exit code with a diagnostic. */
static int capture_deflated(xconn_t *x, const pixfmt_t *pf, const char *display, buf_t *zout)
{
	encoder_t enc;
	strips_t st = strips_of(x, pf);
	int rc = 0;
	if (encoder_init(&enc, pf, x->width, x->height, zout) < 0) {
		diag("out of memory for a %ux%u capture", x->width, x->height);
		rc = EXIT_WRITE;
		goto cleanup;
	}
	rc = 1;
	if (!x->shm_map && !x->shm_tried) { /* once per connection; the segment stays */
		x->shm_tried = 1;
		rc = shm_attach(x, shm_slots(&st) * st.bytes_max);
		if (rc < 0) {
			diag("lost display %s: %s", display, strerror(errno));
			rc = EXIT_DISPLAY;
			goto cleanup;
		}
	}
	if (x->shm_map) {
		rc = capture_shm(x, &st, &enc, display);
		if (rc == 1)
			shm_release(x);
		trace(rc == 1 ? "the server refused the shared segment; reading with GetImage"
		              : "read with MIT-SHM");
	} else {
		trace("no MIT-SHM segment here; reading with GetImage");
	}
	if (rc == 1)
		rc = capture_socket(x, &st, &enc, display);
	if (rc == 0)
		encoder_finish(&enc);
cleanup:
	encoder_free(&enc);
	return rc;
}

/* Creates the output (O_EXCL: an existing file fails before any X work).
 * 0, or EXIT_WRITE with a diagnostic. */
static int open_output(const char *out, int *fd)
{
	*fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (*fd >= 0)
		return 0;
	diag("cannot create %s: %s%s", out, strerror(errno),
	     errno == EEXIST ? " (the output must not exist yet)" : "");
	return EXIT_WRITE;
}

/* Connects, authenticates and reads the root visual. 0, or an exit code
 * with a diagnostic (x->fd is then closed or -1). */
static int connect_x(const options_t *opt, xconn_t *x, pixfmt_t *pf)
{
	display_t disp;
	cookie_t cookie;
	char auth_path[4096], why[400] = "";
	int rc;
	memset(x, 0, sizeof *x);
	x->fd = -1;
	if (parse_display(opt->display, &disp) < 0) {
		diag("malformed display '%s' (expected [host]:number[.screen])", opt->display);
		return EXIT_USAGE;
	}
	xauthority_path(opt->xauthority, auth_path, sizeof auth_path);
	memset(&cookie, 0, sizeof cookie);
	if (auth_path[0])
		find_cookie(auth_path, &disp, &cookie);
	if (opt->xauthority && !cookie.found)
		diag("note: %s holds no MIT-MAGIC-COOKIE-1 for display %s; trying without authentication",
		     opt->xauthority, opt->display);
	for (int attempt = 1;; attempt++) {
		x->fd = connect_display(&disp, why, sizeof why);
		x->is_unix = !disp.host[0] || disp.path[0];
		if (x->fd < 0) {
			diag("display %s is unreachable: %s", opt->display, why);
			return EXIT_DISPLAY;
		}
		x->setup_dropped = 0;
		rc = x_setup(x, &disp, &cookie, opt->display);
		if (!x->setup_dropped || attempt == SETUP_ATTEMPTS)
			break;
		close(x->fd);
		struct timespec pause = {0, (long)attempt * SETUP_RETRY_MS * 1000000L};
		nanosleep(&pause, NULL);
	}
	if (rc == 0)
		rc = check_visual(x, opt->display, pf);
	if (rc) {
		close(x->fd);
		x->fd = -1;
	}
	return rc;
}

/* One shot into out_fd (created by open_output, closed here): the PNG
 * written, the result printed. A failed shot removes the file. 0, or an
 * exit code with a diagnostic. */
static int shoot(xconn_t *x, const pixfmt_t *pf, const char *display, const char *out, int out_fd)
{
	buf_t png = {0}, zout = {0};
	int rc = capture_deflated(x, pf, display, &zout);
	if (rc)
		goto cleanup;
	png_assemble(&png, &zout, x->width, x->height);
	if (png.failed || zout.failed) {
		diag("out of memory encoding a %ux%u PNG", x->width, x->height);
		rc = EXIT_WRITE;
		goto cleanup;
	}
	/* Not synced here: whoever keeps the file makes it durable (the guest
	 * receiver syncs it with its directory at its commit point). */
	if (write_all_fd(out_fd, png.data, png.len, 0) < 0) {
		diag("cannot write %s: %s", out, strerror(errno));
		rc = EXIT_WRITE;
		goto cleanup;
	}
	int closed = close(out_fd);
	out_fd = -1;
	if (closed < 0) {
		diag("cannot write %s: %s", out, strerror(errno));
		rc = EXIT_WRITE;
		goto cleanup;
	}
	if (print_result(out, x->width, x->height) < 0) {
		diag("cannot write the result to standard output: %s", strerror(errno));
		rc = EXIT_WRITE;
	}
cleanup:
	if (out_fd >= 0)
		close(out_fd);
	if (rc != 0) {
		/* We created the output (O_EXCL); a failed capture leaves nothing. */
		struct stat st;
		if (lstat(out, &st) == 0 && S_ISREG(st.st_mode))
			unlink(out);
	}
	free(png.data);
	free(zout.data);
	return rc;
}

/* The failure answer of --serve: {"exit":N,"diagnostic":"..."}. */
static void print_failure(int code)
{
	buf_t line = {0};
	char head[32];
	int n = snprintf(head, sizeof head, "{\"exit\":%d,\"diagnostic\":", code);
	buf_put(&line, head, (size_t)n);
	json_put_string(&line, last_diag);
	buf_put(&line, "}\n", 2);
	if (!line.failed)
		(void)write_all_fd(STDOUT_FILENO, line.data, line.len, 0);
	free(line.data);
}

/* --serve (spec/guest.md §17 item 5): one connection, kept; each line of
 * standard input is an absolute output path, answered by one line on
 * standard output, the one-shot success line or print_failure's. Before
 * each shot the root window's size is asked again: a screen that changed
 * since the connection was made ends the program (exit 3) after answering,
 * so that a new connection reads the new size. Ends with standard input
 * (exit 0), or after a failure of the display itself (its exit code). */
static int serve(const options_t *opt)
{
	xconn_t x;
	pixfmt_t pf;
	char path[4096];
	int rc = connect_x(opt, &x, &pf);
	if (rc)
		return rc;
	serving = 1;
	while (fgets(path, sizeof path, stdin)) {
		size_t len = strlen(path);
		int out_fd = -1;
		if (len == 0 || path[len - 1] != '\n') {
			diag("--serve: an output path longer than %zu bytes, or no newline", sizeof path - 2);
			print_failure(EXIT_USAGE);
			rc = EXIT_USAGE;
			break;
		}
		path[len - 1] = '\0';
		if (path[0] != '/') {
			diag("--serve: the output must be an absolute path, got '%s'", path);
			print_failure(EXIT_USAGE);
			continue;
		}
		rc = x_check_root_size(&x, opt->display);
		if (rc == 0)
			rc = open_output(path, &out_fd);
		if (rc == 0)
			rc = shoot(&x, &pf, opt->display, path, out_fd);
		if (rc)
			print_failure(rc);
		if (rc == EXIT_DISPLAY)
			break;
		rc = 0;
	}
	shm_release(&x);
	close(x.fd);
	return rc;
}

int main(int argc, char **argv)
{
	options_t opt;
	xconn_t x;
	pixfmt_t pf;
	int out_fd = -1, rc;

	signal(SIGPIPE, SIG_IGN);
	if (parse_args(argc, argv, &opt) < 0) {
		fputs(usage_text, stderr);
		return EXIT_USAGE;
	}
	display_t disp;
	if (parse_display(opt.display, &disp) < 0) {
		diag("malformed display '%s' (expected [host]:number[.screen])", opt.display);
		return EXIT_USAGE;
	}
	if (opt.serve)
		return serve(&opt);
	rc = open_output(opt.out, &out_fd);
	if (rc)
		return rc;
	rc = connect_x(&opt, &x, &pf);
	if (rc == 0)
		rc = shoot(&x, &pf, opt.display, opt.out, out_fd);
	else {
		close(out_fd);
		unlink(opt.out);
	}
	if (x.fd >= 0)
		close(x.fd);
	return rc;
}
