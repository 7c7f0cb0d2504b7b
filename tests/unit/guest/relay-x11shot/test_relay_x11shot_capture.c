/*
 * test_relay_x11shot_capture — guest/relay-x11shot against real X servers.
 *
 * Starts Xvfb on a free display (with an MIT-MAGIC-COOKIE-1 file made by
 * xauth, or without authentication), runs tests/fixtures/x11-pattern (it
 * paints a known picture over the root), runs relay-x11shot and decodes its
 * PNG with libpng, checking every pixel against pattern.h. Also: the cookie
 * from $XAUTHORITY and ~/.Xauthority, TCP, wrong display / wrong or missing
 * cookie (exit 3), an existing output (exit 5), usage errors (exit 2),
 * depth 16 and 30 roots (exit 4), 1920x1080, and a depth-32 Xvfb root when
 * Xvfb accepts one.
 *
 * Xvfb can only serve LSBFirst images of depth 24 at 32 bits per pixel, so
 * the other layouts relay-x11shot must read (depth 32, MSBFirst, 24 bits per
 * pixel with row padding, BGR masks) and server-side failures (an X error
 * for GetImage, a refused setup) are served by a small X server speaking the
 * real protocol on a Unix socket inside the test (fake_x_* below).
 *
 * Skips with a message when Xvfb or xauth is missing, or when relay-x11shot
 * or the pattern client were not built (make all builds both).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <png.h>

#include "../../../fixtures/x11-pattern/pattern.h"
#include "relay_support/fds.h"
#include "util/fsutil.h"
#include "util/process.h"
#include "util/randx.h"

#define EXIT_USAGE   2
#define EXIT_DISPLAY 3
#define EXIT_VISUAL  4
#define EXIT_WRITE   5

/* Set once by the group setup, read-only afterwards. */
static char g_dir[256];
static char g_shot[1024];
static char g_pattern[1024];
static int g_have_xvfb, g_have_xauth, g_have_shot, g_have_pattern;
/* relay-x11shot's environment when a test asks which way it read the pixels. */
static const char *const g_trace_env[] = {"PATH=/usr/bin:/bin", "HOME=/nonexistent",
                                          "XAUTHORITY=/nonexistent/.Xauthority", "RELAY_X11SHOT_TRACE=1",
                                          NULL};

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

static int on_path(const char *name)
{
	const char *path = getenv("PATH");
	char buf[1024];
	if (!path)
		path = "/usr/bin:/bin";
	const char *p = path;
	while (*p) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, name);
		if (access(buf, X_OK) == 0)
			return 1;
		if (!colon)
			break;
		p = colon + 1;
	}
	return 0;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static int run_in(const char *const *argv, const char *const *envp, int stdin_fd, relay_process_result *res)
{
	relay_process_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.envp = envp;
	req.stdin_fd = stdin_fd;
	req.stdout_fd = -1;
	req.timeout_ms = 60000;
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	relay_error err;
	relay_status st = process_run(&req, NULL, NULL, 0, res, &err);
	if (st != RELAY_OK) {
		print_message("cannot run %s: %s\n", argv[0], err.message);
		return -1;
	}
	return res->exit_code;
}

static int run(const char *const *argv, const char *const *envp, relay_process_result *res)
{
	return run_in(argv, envp, -1, res);
}

typedef struct {
	pid_t pid;
	unsigned number;
	char display[32];
	char auth[512]; /* cookie file, "" without authentication */
	char log[512];
} xserver;

static int display_in_use(unsigned n)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/.X%u-lock", n);
	if (access(path, F_OK) == 0)
		return 1;
	snprintf(path, sizeof path, "/tmp/.X11-unix/X%u", n);
	return access(path, F_OK) == 0;
}

static int socket_answers(unsigned n)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof sa.sun_path, "/tmp/.X11-unix/X%u", n);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
	close(fd);
	return ok;
}

/* True when /tmp/.X<n>-lock names `pid`: the server answering on display n
 * is the one this test started, not another that took the number first
 * (its socket answers while ours exits "already active"). */
static int lock_names(unsigned n, pid_t pid)
{
	char path[64], text[32] = "";
	snprintf(path, sizeof path, "/tmp/.X%u-lock", n);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t r = read(fd, text, sizeof text - 1);
	close(fd);
	text[r > 0 ? r : 0] = '\0';
	return atoi(text) == (int)pid;
}

static void xauth_add(const char *file, const char *display, const char *cookie_hex)
{
	const char *argv[] = {"xauth",    "-q", "-f", file, "add", display, "MIT-MAGIC-COOKIE-1",
	                      cookie_hex, NULL};
	relay_process_result res;
	int rc = run(argv, NULL, &res);
	if (rc != 0)
		print_message("xauth failed (%d): %s\n", rc, res.err ? res.err : "");
	assert_int_equal(rc, 0);
	process_result_release(&res);
}

/* Starts Xvfb with `screen` ("1280x800x24"). Returns 1 when it serves, 0 when
 * it refused to start (*why says why). */
/* Set by a test before xvfb_start: the next servers run without MIT-SHM. */
static int g_xvfb_no_shm;

static int xvfb_start(xserver *xs, const char *screen, int with_auth, int tcp, char *why, size_t why_len)
{
	static unsigned next_try; /* only the test thread starts servers */
	memset(xs, 0, sizeof *xs);
	if (!next_try)
		next_try = 120 + (unsigned)(getpid() % 500);
	for (int attempt = 0; attempt < 20; attempt++) {
		unsigned n = next_try++;
		if (next_try > 900)
			next_try = 120;
		if (display_in_use(n))
			continue;
		xs->number = n;
		snprintf(xs->display, sizeof xs->display, ":%u", n);
		snprintf(xs->log, sizeof xs->log, "%s/xvfb-%u.log", g_dir, n);
		if (with_auth) {
			char cookie[33];
			random_hex(cookie, 32);
			snprintf(xs->auth, sizeof xs->auth, "%s/xauth-%u", g_dir, n);
			xauth_add(xs->auth, xs->display, cookie);
		}
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			int fd = open(xs->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			int nul = open("/dev/null", O_RDONLY);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
			if (nul >= 0)
				dup2(nul, 0);
			rs_close_from(3);
			setpgid(0, 0);
			const char *argv[16];
			int a = 0;
			argv[a++] = "Xvfb";
			argv[a++] = xs->display;
			argv[a++] = "-screen";
			argv[a++] = "0";
			argv[a++] = screen;
			argv[a++] = "-noreset";
			argv[a++] = tcp ? "-listen" : "-nolisten";
			argv[a++] = "tcp";
			if (g_xvfb_no_shm) {
				argv[a++] = "-extension";
				argv[a++] = "MIT-SHM";
			}
			if (with_auth) {
				argv[a++] = "-auth";
				argv[a++] = xs->auth;
			}
			argv[a] = NULL;
			execvp("Xvfb", (char *const *)argv);
			_exit(127);
		}
		xs->pid = pid;
		for (int waited = 0; waited < 15000; waited += 20) {
			int status;
			if (waitpid(pid, &status, WNOHANG) == pid) {
				xs->pid = 0;
				char text[512] = "";
				int fd = open(xs->log, O_RDONLY);
				if (fd >= 0) {
					ssize_t r = read(fd, text, sizeof text - 1);
					text[r > 0 ? r : 0] = '\0';
					close(fd);
				}
				if (strstr(text, "already active") || strstr(text, "in use"))
					break; /* a race for the number: try the next */
				for (char *p = text; *p; p++)
					if (*p == '\n')
						*p = ' ';
				snprintf(why, why_len, "Xvfb %s -screen 0 %s exited: %s", xs->display, screen,
				         text);
				return 0;
			}
			if (socket_answers(n) && lock_names(n, pid))
				return 1;
			sleep_ms(20);
		}
		if (xs->pid) {
			kill(-xs->pid, SIGKILL);
			waitpid(xs->pid, NULL, 0);
			xs->pid = 0;
		}
	}
	snprintf(why, why_len, "no Xvfb display could be started");
	return 0;
}

static void xvfb_stop(xserver *xs)
{
	if (xs->pid > 0) {
		kill(xs->pid, SIGTERM);
		for (int waited = 0; waited < 5000; waited += 20) {
			if (waitpid(xs->pid, NULL, WNOHANG) == xs->pid) {
				xs->pid = 0;
				return;
			}
			sleep_ms(20);
		}
		kill(-xs->pid, SIGKILL);
		waitpid(xs->pid, NULL, 0);
		xs->pid = 0;
	}
}

/* Starts the pattern client and waits for its "ready" line. */
static pid_t pattern_start(const xserver *xs, unsigned width, unsigned height)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		rs_close_from(3);
		setenv("DISPLAY", xs->display, 1);
		if (xs->auth[0])
			setenv("XAUTHORITY", xs->auth, 1);
		else
			setenv("XAUTHORITY", "/nonexistent/.Xauthority", 1);
		execl(g_pattern, g_pattern, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char line[128] = "";
	size_t len = 0;
	struct pollfd pfd = {p[0], POLLIN, 0};
	while (len < sizeof line - 1 && !strchr(line, '\n')) {
		if (poll(&pfd, 1, 15000) <= 0)
			break;
		ssize_t r = read(p[0], line + len, sizeof line - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		line[len] = '\0';
	}
	close(p[0]);
	char want[64];
	snprintf(want, sizeof want, "ready %ux%u\n", width, height);
	if (strcmp(line, want) != 0) {
		print_message("pattern client said '%s', wanted '%s'\n", line, want);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail();
	}
	return pid;
}

static void pattern_stop(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

typedef struct {
	int exit_code;
	char out[1024];
	char err[2048];
} shot_result;

/* Runs relay-x11shot. `xauthority` NULL omits the option; envp as given. */
static int shot(const char *display, const char *out, const char *xauthority, const char *const *envp,
                shot_result *sr)
{
	const char *argv[10];
	int a = 0;
	argv[a++] = g_shot;
	argv[a++] = "--display";
	argv[a++] = display;
	argv[a++] = "--out";
	argv[a++] = out;
	if (xauthority) {
		argv[a++] = "--xauthority";
		argv[a++] = xauthority;
	}
	argv[a] = NULL;
	static const char *const default_env[] = {"PATH=/usr/bin:/bin", "HOME=/nonexistent",
	                                          "XAUTHORITY=/nonexistent/.Xauthority", NULL};
	relay_process_result res;
	memset(sr, 0, sizeof *sr);
	sr->exit_code = run(argv, envp ? envp : default_env, &res);
	snprintf(sr->out, sizeof sr->out, "%s", res.out ? res.out : "");
	snprintf(sr->err, sizeof sr->err, "%s", res.err ? res.err : "");
	process_result_release(&res);
	if (sr->err[0])
		print_message("relay-x11shot stderr: %s", sr->err);
	return sr->exit_code;
}

static void out_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", g_dir, name);
	unlink(buf);
}

/* Checks the success line, the file mode and header, decodes the PNG and
 * compares every pixel with pattern_expected (or expect_fn). */
typedef void (*expect_fn)(unsigned x, unsigned y, unsigned w, unsigned h, unsigned char rgb[3]);

static void check_capture(const char *path, const shot_result *sr, unsigned width, unsigned height,
                          expect_fn expect)
{
	char line[1200];
	snprintf(line, sizeof line, "{\"screenshot_file_path\":\"%s\",\"width\":%u,\"height\":%u}\n", path,
	         width, height);
	assert_int_equal(sr->exit_code, 0);
	assert_string_equal(sr->out, line);

	struct stat st;
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);

	/* 8-bit RGB, not interlaced, and the first deflate block is fixed
	 * Huffman (BTYPE 01) or stored (00). */
	unsigned char head[44];
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, head, sizeof head), (ssize_t)sizeof head);
	close(fd);
	static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	assert_memory_equal(head, sig, 8);
	assert_memory_equal(head + 12, "IHDR", 4);
	assert_int_equal(head[24], 8);
	assert_int_equal(head[25], 2);
	assert_int_equal(head[28], 0);
	assert_memory_equal(head + 37, "IDAT", 4);
	assert_int_equal((head[41] & 0x0F), 8); /* zlib: deflate */
	unsigned btype = (head[43] >> 1) & 3;
	assert_true(btype == 0 || btype == 1);

	png_image image;
	memset(&image, 0, sizeof image);
	image.version = PNG_IMAGE_VERSION;
	assert_true(png_image_begin_read_from_file(&image, path));
	assert_int_equal(image.width, width);
	assert_int_equal(image.height, height);
	image.format = PNG_FORMAT_RGB;
	unsigned char *pixels = malloc(PNG_IMAGE_SIZE(image));
	assert_non_null(pixels);
	if (!png_image_finish_read(&image, NULL, pixels, 0, NULL)) {
		print_message("libpng: %s\n", image.message);
		fail();
	}
	size_t mismatches = 0;
	for (unsigned y = 0; y < height; y++) {
		for (unsigned x = 0; x < width; x++) {
			unsigned char want[3];
			expect(x, y, width, height, want);
			const unsigned char *got = pixels + ((size_t)y * width + x) * 3;
			if (memcmp(got, want, 3) != 0) {
				if (mismatches < 5)
					print_message("pixel (%u,%u): got %u,%u,%u want %u,%u,%u\n", x, y,
					              got[0], got[1], got[2], want[0], want[1], want[2]);
				mismatches++;
			}
		}
	}
	free(pixels);
	assert_int_equal(mismatches, 0);
}

#define REQUIRE_X()                                                                                          \
	do {                                                                                                 \
		if (!g_have_xvfb) {                                                                          \
			print_message("SKIP: Xvfb is not installed (Debian: xvfb)\n");                       \
			skip();                                                                              \
		}                                                                                            \
		if (!g_have_shot || !g_have_pattern) {                                                       \
			print_message("SKIP: %s or %s is not built (run make all)\n", g_shot, g_pattern);    \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

#define REQUIRE_XAUTH()                                                                                      \
	do {                                                                                                 \
		if (!g_have_xauth) {                                                                         \
			print_message("SKIP: xauth is not installed (Debian: xauth)\n");                     \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

/* Captures a pattern-painted Xvfb of the given size and checks it. */
static void capture_pattern(const char *screen, unsigned width, unsigned height)
{
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, screen, 1, 0, why, sizeof why)) {
		print_message("%s\n", why);
		fail();
	}
	pid_t client = pattern_start(&xs, width, height);
	char out[512];
	out_path(out, sizeof out, "pattern.png");
	shot_result sr;
	shot(xs.display, out, xs.auth, NULL, &sr);
	pattern_stop(client);
	xvfb_stop(&xs);
	check_capture(out, &sr, width, height, pattern_expected);
}

/* ------------------------------------------------------------------------ */
/* tests against Xvfb                                                        */

static void test_capture_1280x800_with_cookie(void **state)
{
	(void)state;
	REQUIRE_X();
	REQUIRE_XAUTH();
	capture_pattern("1280x800x24", 1280, 800);
}

static void test_capture_1920x1080(void **state)
{
	(void)state;
	REQUIRE_X();
	REQUIRE_XAUTH();
	capture_pattern("1920x1080x24", 1920, 1080);
}

static void test_capture_depth32_xvfb(void **state)
{
	(void)state;
	REQUIRE_X();
	REQUIRE_XAUTH();
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, "640x480x32", 1, 0, why, sizeof why)) {
		print_message("SKIP: this Xvfb refuses a depth-32 root (%s); depth 32 is covered by the "
		              "in-test X server\n",
		              why);
		skip();
	}
	pid_t client = pattern_start(&xs, 640, 480);
	char out[512];
	out_path(out, sizeof out, "depth32.png");
	shot_result sr;
	shot(xs.display, out, xs.auth, NULL, &sr);
	pattern_stop(client);
	xvfb_stop(&xs);
	check_capture(out, &sr, 640, 480, pattern_expected);
}

/* The cookie found through $XAUTHORITY, then through $HOME/.Xauthority. */
static void test_cookie_from_environment(void **state)
{
	(void)state;
	REQUIRE_X();
	REQUIRE_XAUTH();
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, "800x600x24", 1, 0, why, sizeof why)) {
		print_message("%s\n", why);
		fail();
	}
	pid_t client = pattern_start(&xs, 800, 600);

	char env_auth[600];
	snprintf(env_auth, sizeof env_auth, "XAUTHORITY=%s", xs.auth);
	const char *env1[] = {"PATH=/usr/bin:/bin", "HOME=/nonexistent", env_auth, NULL};
	char out1[512];
	out_path(out1, sizeof out1, "env-xauthority.png");
	shot_result sr1;
	shot(xs.display, out1, NULL, env1, &sr1);

	char home[512], home_auth[600], env_home[600];
	snprintf(home, sizeof home, "%s/home-%u", g_dir, xs.number);
	assert_int_equal(mkdir(home, 0700), 0);
	snprintf(home_auth, sizeof home_auth, "%s/.Xauthority", home);
	relay_error err;
	assert_int_equal(fs_copy_file(xs.auth, home_auth, 0600, &err), RELAY_OK);
	snprintf(env_home, sizeof env_home, "HOME=%s", home);
	const char *env2[] = {"PATH=/usr/bin:/bin", env_home, NULL};
	char out2[512];
	out_path(out2, sizeof out2, "home-xauthority.png");
	shot_result sr2;
	shot(xs.display, out2, NULL, env2, &sr2);

	pattern_stop(client);
	xvfb_stop(&xs);
	check_capture(out1, &sr1, 800, 600, pattern_expected);
	check_capture(out2, &sr2, 800, 600, pattern_expected);
}

static void test_capture_without_auth(void **state)
{
	(void)state;
	REQUIRE_X();
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, "1024x768x24", 0, 0, why, sizeof why)) {
		print_message("%s\n", why);
		fail();
	}
	pid_t client = pattern_start(&xs, 1024, 768);
	char out[512];
	out_path(out, sizeof out, "noauth.png");
	shot_result sr;
	shot(xs.display, out, NULL, NULL, &sr);
	pattern_stop(client);
	xvfb_stop(&xs);
	check_capture(out, &sr, 1024, 768, pattern_expected);
}

static void test_capture_over_tcp(void **state)
{
	(void)state;
	REQUIRE_X();
	REQUIRE_XAUTH();
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, "640x400x24", 1, 1, why, sizeof why)) {
		print_message("%s\n", why);
		fail();
	}
	pid_t client = pattern_start(&xs, 640, 400);
	char display[64], out[512];
	snprintf(display, sizeof display, "127.0.0.1:%u", xs.number);
	out_path(out, sizeof out, "tcp.png");
	shot_result sr;
	shot(display, out, xs.auth, NULL, &sr);
	pattern_stop(client);
	xvfb_stop(&xs);
	if (sr.exit_code == EXIT_DISPLAY && strstr(sr.err, "connect to")) {
		print_message("SKIP: Xvfb does not listen on TCP here: %s\n", sr.err);
		skip();
	}
	check_capture(out, &sr, 640, 400, pattern_expected);
}

static void assert_no_file(const char *path)
{
	struct stat st;
	assert_int_equal(lstat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
}

static void test_wrong_or_missing_cookie_exit_3(void **state)
{
	(void)state;
	REQUIRE_X();
	REQUIRE_XAUTH();
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, "640x480x24", 1, 0, why, sizeof why)) {
		print_message("%s\n", why);
		fail();
	}
	char wrong[512], cookie[33];
	snprintf(wrong, sizeof wrong, "%s/wrong-%u", g_dir, xs.number);
	random_hex(cookie, 32);
	xauth_add(wrong, xs.display, cookie);

	char out[512];
	out_path(out, sizeof out, "wrong-cookie.png");
	shot_result sr;
	shot(xs.display, out, wrong, NULL, &sr);
	assert_int_equal(sr.exit_code, EXIT_DISPLAY);
	assert_non_null(strstr(sr.err, "refused"));
	assert_no_file(out);

	/* No cookie at all for a server that wants one. */
	shot(xs.display, out, NULL, NULL, &sr);
	assert_int_equal(sr.exit_code, EXIT_DISPLAY);
	assert_non_null(strstr(sr.err, "--xauthority"));
	assert_no_file(out);
	xvfb_stop(&xs);
}

static void test_unreachable_display_exit_3(void **state)
{
	(void)state;
	if (!g_have_shot) {
		print_message("SKIP: %s is not built (run make all)\n", g_shot);
		skip();
	}
	unsigned n = 990;
	while (n > 900 && display_in_use(n))
		n--;
	char display[32], out[512];
	snprintf(display, sizeof display, ":%u", n);
	out_path(out, sizeof out, "unreachable.png");
	shot_result sr;
	shot(display, out, NULL, NULL, &sr);
	assert_int_equal(sr.exit_code, EXIT_DISPLAY);
	assert_non_null(strstr(sr.err, "unreachable"));
	assert_no_file(out);
}

static void test_existing_output_exit_5(void **state)
{
	(void)state;
	REQUIRE_X();
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, "320x240x24", 0, 0, why, sizeof why)) {
		print_message("%s\n", why);
		fail();
	}
	char out[512];
	out_path(out, sizeof out, "exists.png");
	relay_error err;
	assert_int_equal(fs_write_exclusive(out, "keep", 4, 0600, &err), RELAY_OK);
	shot_result sr;
	shot(xs.display, out, NULL, NULL, &sr);
	xvfb_stop(&xs);
	assert_int_equal(sr.exit_code, EXIT_WRITE);
	assert_string_equal(sr.out, "");
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(out, 100, &data, &len, &err), RELAY_OK);
	assert_int_equal(len, 4);
	assert_memory_equal(data, "keep", 4);
	free(data);

	/* A symbolic link at the output path is not followed. */
	char link_path[512];
	out_path(link_path, sizeof link_path, "link.png");
	char target[512];
	out_path(target, sizeof target, "link-target.png");
	assert_int_equal(symlink(target, link_path), 0);
	shot(":0", link_path, NULL, NULL, &sr);
	assert_int_equal(sr.exit_code, EXIT_WRITE);
	assert_no_file(target);
}

static void test_usage_exit_2(void **state)
{
	(void)state;
	if (!g_have_shot) {
		print_message("SKIP: %s is not built (run make all)\n", g_shot);
		skip();
	}
	shot_result sr;
	assert_int_equal(shot(":0", "relative.png", NULL, NULL, &sr), EXIT_USAGE);
	assert_int_equal(shot("no-colon", "/tmp/x.png", NULL, NULL, &sr), EXIT_USAGE);
	assert_int_equal(shot(":zero", "/tmp/x.png", NULL, NULL, &sr), EXIT_USAGE);
	const char *argv[] = {g_shot, "--out", "/tmp/x.png", NULL};
	relay_process_result res;
	assert_int_equal(run(argv, NULL, &res), EXIT_USAGE);
	process_result_release(&res);
	const char *argv2[] = {g_shot, "--display", ":0", "--out", "/tmp/x.png", "--bogus", "1", NULL};
	assert_int_equal(run(argv2, NULL, &res), EXIT_USAGE);
	process_result_release(&res);
}

static void test_unsupported_depth_exit_4(void **state)
{
	(void)state;
	REQUIRE_X();
	const char *screens[] = {"640x480x16", "640x480x30", "640x480x8"};
	for (size_t i = 0; i < sizeof screens / sizeof screens[0]; i++) {
		xserver xs;
		char why[600];
		if (!xvfb_start(&xs, screens[i], 0, 0, why, sizeof why)) {
			print_message("note: %s\n", why);
			continue;
		}
		char out[512];
		out_path(out, sizeof out, "depth.png");
		shot_result sr;
		shot(xs.display, out, NULL, NULL, &sr);
		xvfb_stop(&xs);
		assert_int_equal(sr.exit_code, EXIT_VISUAL);
		assert_non_null(strstr(sr.err, "only TrueColor of depth 24 or 32"));
		assert_no_file(out);
	}
}

/* The pattern on an Xvfb of `screen` (1280x800: sixteen strips, so both
 * halves of the shared segment are used in turn), read with MIT-SHM or,
 * on a server started without the extension, with GetImage: the same
 * pixels, and the program says which way it read them. */
static void shm_or_not(const char *screen, unsigned width, unsigned height, int no_shm, const char *says)
{
	xserver xs;
	char why[600];
	g_xvfb_no_shm = no_shm;
	int started = xvfb_start(&xs, screen, 0, 0, why, sizeof why);
	g_xvfb_no_shm = 0;
	if (!started) {
		print_message("%s\n", why);
		fail();
	}
	pid_t client = pattern_start(&xs, width, height);
	char out[512];
	out_path(out, sizeof out, no_shm ? "no-shm.png" : "shm.png");
	shot_result sr;
	shot(xs.display, out, NULL, g_trace_env, &sr);
	pattern_stop(client);
	xvfb_stop(&xs);
	assert_non_null(strstr(sr.err, says));
	check_capture(out, &sr, width, height, pattern_expected);
}

static void test_capture_by_shm_and_without(void **state)
{
	(void)state;
	REQUIRE_X();
	shm_or_not("1280x800x24", 1280, 800, 0, "read with MIT-SHM");
	shm_or_not("1280x800x24", 1280, 800, 1, "no MIT-SHM segment here; reading with GetImage");
}

/* --serve: one connection, one answer line per path; each file checked
 * like a one-shot capture's, a failure answered and the next path served. */
static void test_serve_answers_each_path(void **state)
{
	(void)state;
	REQUIRE_X();
	xserver xs;
	char why[600];
	if (!xvfb_start(&xs, "640x480x24", 0, 0, why, sizeof why)) {
		print_message("%s\n", why);
		fail();
	}
	pid_t client = pattern_start(&xs, 640, 480);
	char out1[512], out2[512], input[512];
	out_path(out1, sizeof out1, "serve-1.png");
	out_path(out2, sizeof out2, "serve-2.png");
	out_path(input, sizeof input, "serve-input.txt");
	FILE *f = fopen(input, "w");
	assert_non_null(f);
	fprintf(f, "%s\n%s\nrelative.png\n%s\n", out1, out1, out2);
	fclose(f);
	int in_fd = open(input, O_RDONLY);
	assert_true(in_fd >= 0);
	const char *argv[] = {g_shot, "--display", xs.display, "--serve", NULL};
	static const char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/nonexistent",
	                                  "XAUTHORITY=/nonexistent/.Xauthority", NULL};
	relay_process_result res;
	int rc = run_in(argv, env, in_fd, &res);
	close(in_fd);
	char got[4096];
	snprintf(got, sizeof got, "%s", res.out ? res.out : "");
	process_result_release(&res);
	pattern_stop(client);
	xvfb_stop(&xs);
	assert_int_equal(rc, 0);

	char *lines[4] = {NULL, NULL, NULL, NULL};
	char *save = NULL;
	int n = 0;
	for (char *l = strtok_r(got, "\n", &save); l && n < 4; l = strtok_r(NULL, "\n", &save))
		lines[n++] = l;
	assert_int_equal(n, 4);
	assert_non_null(strstr(lines[1], "{\"exit\":5,\"diagnostic\":\"cannot create "));
	assert_non_null(
	    strstr(lines[2], "{\"exit\":2,\"diagnostic\":\"--serve: the output must be an absolute path"));
	const char *outs[2] = {out1, out2};
	const char *answers[2] = {lines[0], lines[3]};
	for (int i = 0; i < 2; i++) {
		shot_result sr;
		memset(&sr, 0, sizeof sr);
		snprintf(sr.out, sizeof sr.out, "%s\n", answers[i]);
		check_capture(outs[i], &sr, 640, 480, pattern_expected);
	}
}

/* ------------------------------------------------------------------------ */
/* The in-test X server                                                      */

typedef struct {
	char socket_path[300];
	int listen_fd;
	pthread_t thread;
	/* What it serves. */
	unsigned width, height;
	unsigned depth, bits_per_pixel;
	int msb_first;
	unsigned visual_class;
	uint32_t red_mask, green_mask, blue_mask;
	int refuse_setup;     /* answer the setup with Failed */
	int error_get_image;  /* answer GetImage with BadMatch */
	int offer_shm;        /* QueryExtension: MIT-SHM present (opcode 131), but refuse its requests */
	unsigned shm_refused; /* MIT-SHM requests answered with an error */
	int trace;            /* run relay-x11shot with RELAY_X11SHOT_TRACE=1 */
	unsigned requests;    /* GetImage requests served */
} fake_x;

static void put16(unsigned char *p, uint16_t v)
{
	memcpy(p, &v, 2);
}

static void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static int fx_read(int fd, void *buf, size_t len)
{
	unsigned char *p = buf;
	while (len > 0) {
		ssize_t r = read(fd, p, len);
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

static int fx_write(int fd, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	while (len > 0) {
		ssize_t r = write(fd, p, len);
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

static uint32_t fx_scale(unsigned char v, uint32_t mask)
{
	unsigned shift = 0, bits = 0;
	while (mask && !(mask & 1)) {
		mask >>= 1;
		shift++;
	}
	while (mask & 1) {
		mask >>= 1;
		bits++;
	}
	uint32_t value = bits >= 8 ? (uint32_t)v << (bits - 8) : (uint32_t)v >> (8 - bits);
	return value << shift;
}

/* What relay-x11shot may ask besides GetImage: QueryExtension (MIT-SHM
 * absent, or present when offer_shm), the MIT-SHM requests (each refused
 * with an X error, as a server does that cannot map the segment), and
 * GetInputFocus (the round trip after a refusal). */
static void fx_other_request(fake_x *fx, int fd, const unsigned char *req, uint16_t seq)
{
	unsigned char r[32];
	memset(r, 0, sizeof r);
	put16(r + 2, seq);
	if (req[0] == 98) { /* QueryExtension */
		r[0] = 1;
		r[8] = fx->offer_shm && memcmp(req + 8, "MIT-SHM", 7) == 0;
		r[9] = r[8] ? 131 : 0;
		fx_write(fd, r, sizeof r);
	} else if (req[0] == 131 && fx->offer_shm) {
		fx->shm_refused++;
		if (req[1] == 6 || req[1] == 4) { /* ShmAttachFd, ShmGetImage: BadAccess */
			r[0] = 0;
			r[1] = 10;
			r[10] = 131;
			fx_write(fd, r, sizeof r);
		}
	} else if (req[0] == 43) { /* GetInputFocus */
		r[0] = 1;
		fx_write(fd, r, sizeof r);
	} else {
		r[0] = 0;
		r[1] = 1; /* BadRequest */
		r[10] = req[0];
		fx_write(fd, r, sizeof r);
	}
}

static void fx_serve(fake_x *fx, int fd)
{
	unsigned char setup[12];
	if (fx_read(fd, setup, 12) < 0 || setup[0] != 'l')
		return; /* the test host is little-endian: relay-x11shot sends 'l' */
	uint16_t name_len, data_len;
	memcpy(&name_len, setup + 6, 2);
	memcpy(&data_len, setup + 8, 2);
	unsigned char skip[1024];
	size_t auth_len = ((name_len + 3u) & ~3u) + ((data_len + 3u) & ~3u);
	if (auth_len > sizeof skip || fx_read(fd, skip, auth_len) < 0)
		return;
	if (fx->refuse_setup) {
		static const char reason[] = "fake server says no";
		unsigned char r[8 + 20];
		memset(r, 0, sizeof r);
		r[0] = 0;
		r[1] = (unsigned char)strlen(reason);
		put16(r + 2, 11);
		put16(r + 6, 5);
		memcpy(r + 8, reason, strlen(reason));
		fx_write(fd, r, sizeof r);
		return;
	}
	static const char vendor[] = "relay-fake-x"; /* 12 bytes */
	unsigned char s[8 + 32 + 12 + 8 + 40 + 8 + 24];
	memset(s, 0, sizeof s);
	s[0] = 1;
	put16(s + 2, 11);
	put16(s + 6, (uint16_t)((sizeof s - 8) / 4));
	unsigned char *d = s + 8;
	put32(d + 4, 0x00400000); /* resource-id-base */
	put32(d + 8, 0x001fffff);
	put16(d + 16, (uint16_t)strlen(vendor));
	put16(d + 18, 65535);
	d[20] = 1; /* screens */
	d[21] = 1; /* formats */
	d[22] = fx->msb_first ? 1 : 0;
	d[23] = fx->msb_first ? 1 : 0;
	d[24] = 32;
	d[25] = 32;
	d[26] = 8;
	d[27] = 255;
	memcpy(d + 32, vendor, 12);
	unsigned char *fmt = d + 32 + 12;
	fmt[0] = (unsigned char)fx->depth;
	fmt[1] = (unsigned char)fx->bits_per_pixel;
	fmt[2] = 32;
	unsigned char *scr = fmt + 8;
	put32(scr, 0x100);    /* root */
	put32(scr + 4, 0x20); /* colormap */
	put16(scr + 20, (uint16_t)fx->width);
	put16(scr + 22, (uint16_t)fx->height);
	put32(scr + 32, 0x21); /* root visual */
	scr[38] = (unsigned char)fx->depth;
	scr[39] = 1; /* allowed depths */
	unsigned char *dep = scr + 40;
	dep[0] = (unsigned char)fx->depth;
	put16(dep + 2, 1);
	unsigned char *vis = dep + 8;
	put32(vis, 0x21);
	vis[4] = (unsigned char)fx->visual_class;
	vis[5] = 8;
	put16(vis + 6, 256);
	put32(vis + 8, fx->red_mask);
	put32(vis + 12, fx->green_mask);
	put32(vis + 16, fx->blue_mask);
	if (fx_write(fd, s, sizeof s) < 0)
		return;

	uint16_t seq = 0;
	for (;;) {
		unsigned char req[64];
		if (fx_read(fd, req, 4) < 0)
			return;
		uint16_t len4;
		memcpy(&len4, req + 2, 2);
		if (len4 < 1 || len4 > sizeof req / 4 || fx_read(fd, req + 4, (size_t)len4 * 4 - 4) < 0)
			return;
		if (req[0] != 73) {
			seq++;
			fx_other_request(fx, fd, req, seq);
			continue;
		}
		if (len4 != 5)
			return;
		seq++;
		fx->requests++;
		uint16_t y, w, h;
		memcpy(&y, req + 10, 2);
		memcpy(&w, req + 12, 2);
		memcpy(&h, req + 14, 2);
		if (fx->error_get_image) {
			unsigned char e[32];
			memset(e, 0, sizeof e);
			e[1] = 8; /* BadMatch */
			put16(e + 2, seq);
			e[10] = 73;
			fx_write(fd, e, sizeof e);
			continue;
		}
		/* An event first, which the client must skip. */
		unsigned char ev[32];
		memset(ev, 0, sizeof ev);
		ev[0] = 12; /* Expose */
		put16(ev + 2, seq);
		if (fx_write(fd, ev, sizeof ev) < 0)
			return;
		unsigned bpp = fx->bits_per_pixel / 8;
		size_t stride = ((size_t)w * bpp + 3) & ~(size_t)3;
		size_t len = stride * h;
		unsigned char *data = calloc(1, len + 32);
		if (!data)
			return;
		unsigned char *r = data;
		r[0] = 1;
		r[1] = (unsigned char)fx->depth;
		put16(r + 2, seq);
		put32(r + 4, (uint32_t)(len / 4));
		put32(r + 8, 0x21);
		for (unsigned row = 0; row < h; row++) {
			unsigned char *line = data + 32 + row * stride;
			for (unsigned x = 0; x < w; x++) {
				unsigned char rgb[3];
				pattern_expected(x, y + row, fx->width, fx->height, rgb);
				uint32_t pixel = fx_scale(rgb[0], fx->red_mask) |
				                 fx_scale(rgb[1], fx->green_mask) |
				                 fx_scale(rgb[2], fx->blue_mask);
				if (fx->depth == 32)
					pixel |=
					    0xFF000000u & ~(fx->red_mask | fx->green_mask | fx->blue_mask);
				unsigned char *p = line + (size_t)x * bpp;
				for (unsigned k = 0; k < bpp; k++) {
					unsigned shift = fx->msb_first ? 8 * (bpp - 1 - k) : 8 * k;
					p[k] = (unsigned char)(pixel >> shift);
				}
			}
			/* Row padding is garbage on a real server too. */
			for (size_t k = (size_t)w * bpp; k < stride; k++)
				line[k] = 0xA5;
		}
		int wr = fx_write(fd, data, len + 32);
		free(data);
		if (wr < 0)
			return;
	}
}

static void *fx_thread(void *arg)
{
	fake_x *fx = arg;
	int fd = accept(fx->listen_fd, NULL, NULL);
	if (fd >= 0) {
		fx_serve(fx, fd);
		close(fd);
	}
	return NULL;
}

static void fx_start(fake_x *fx, const char *name)
{
	snprintf(fx->socket_path, sizeof fx->socket_path, "%s/%s.sock", g_dir, name);
	unlink(fx->socket_path);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true(strlen(fx->socket_path) < sizeof sa.sun_path);
	memcpy(sa.sun_path, fx->socket_path, strlen(fx->socket_path) + 1);
	fx->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fx->listen_fd >= 0);
	assert_int_equal(bind(fx->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(fx->listen_fd, 1), 0);
	assert_int_equal(pthread_create(&fx->thread, NULL, fx_thread, fx), 0);
}

static void fx_stop(fake_x *fx)
{
	/* Unblocks accept() when the client never connected. */
	shutdown(fx->listen_fd, SHUT_RDWR);
	pthread_join(fx->thread, NULL);
	close(fx->listen_fd);
	unlink(fx->socket_path);
}

static void fx_capture(fake_x *fx, const char *name, shot_result *sr, char *out, size_t out_len)
{
	fx_start(fx, name);
	char display[400];
	snprintf(display, sizeof display, "%s:0", fx->socket_path);
	char file[64];
	snprintf(file, sizeof file, "%s.png", name);
	out_path(out, out_len, file);
	shot(display, out, NULL, fx->trace ? g_trace_env : NULL, sr);
	fx_stop(fx);
}

/* What Xvfb serves: depth 24 at 32 bits per pixel, LSB first, masks
 * ff0000/ff00/ff. */
static void fx_bgrx(fake_x *fx, unsigned width, unsigned height)
{
	memset(fx, 0, sizeof *fx);
	fx->width = width;
	fx->height = height;
	fx->depth = 24;
	fx->bits_per_pixel = 32;
	fx->visual_class = 4;
	fx->red_mask = 0xFF0000;
	fx->green_mask = 0xFF00;
	fx->blue_mask = 0xFF;
}

static void test_depth32_msb_first(void **state)
{
	(void)state;
	if (!g_have_shot) {
		print_message("SKIP: %s is not built (run make all)\n", g_shot);
		skip();
	}
	fake_x fx;
	memset(&fx, 0, sizeof fx);
	fx.width = 333;
	fx.height = 211;
	fx.depth = 32;
	fx.bits_per_pixel = 32;
	fx.msb_first = 1;
	fx.visual_class = 4;
	fx.red_mask = 0xFF0000;
	fx.green_mask = 0xFF00;
	fx.blue_mask = 0xFF;
	shot_result sr;
	char out[512];
	fx_capture(&fx, "msb32", &sr, out, sizeof out);
	check_capture(out, &sr, fx.width, fx.height, pattern_expected);
}

static void test_depth24_packed_bgr_lsb_strips(void **state)
{
	(void)state;
	if (!g_have_shot) {
		print_message("SKIP: %s is not built (run make all)\n", g_shot);
		skip();
	}
	/* 24 bits per pixel with padded rows, BGR masks, and so wide that
	 * the capture needs several GetImage strips (256 KiB each). */
	fake_x fx;
	memset(&fx, 0, sizeof fx);
	fx.width = 5001;
	fx.height = 700;
	fx.depth = 24;
	fx.bits_per_pixel = 24;
	fx.msb_first = 0;
	fx.visual_class = 4;
	fx.red_mask = 0xFF;
	fx.green_mask = 0xFF00;
	fx.blue_mask = 0xFF0000;
	shot_result sr;
	char out[512];
	fx_capture(&fx, "bgr24", &sr, out, sizeof out);
	assert_true(fx.requests >= 3);
	check_capture(out, &sr, fx.width, fx.height, pattern_expected);
}

/* A server that offers MIT-SHM but refuses the segment: the capture is
 * read with GetImage on the same connection, pixel for pixel. */
static void test_shm_refused_falls_back(void **state)
{
	(void)state;
	if (!g_have_shot) {
		print_message("SKIP: %s is not built (run make all)\n", g_shot);
		skip();
	}
	fake_x fx;
	fx_bgrx(&fx, 333, 211);
	fx.offer_shm = 1;
	fx.trace = 1;
	shot_result sr;
	char out[512];
	fx_capture(&fx, "shm-refused", &sr, out, sizeof out);
	assert_true(fx.shm_refused >= 2); /* the attachment and the first ShmGetImage */
	assert_true(fx.requests >= 1);
	assert_non_null(strstr(sr.err, "the server refused the shared segment; reading with GetImage"));
	check_capture(out, &sr, fx.width, fx.height, pattern_expected);
}

static void test_fake_server_failures(void **state)
{
	(void)state;
	if (!g_have_shot) {
		print_message("SKIP: %s is not built (run make all)\n", g_shot);
		skip();
	}
	fake_x fx;
	fx_bgrx(&fx, 64, 64);
	shot_result sr;
	char out[512];

	fx.refuse_setup = 1;
	fx_capture(&fx, "refused", &sr, out, sizeof out);
	assert_int_equal(sr.exit_code, EXIT_DISPLAY);
	assert_non_null(strstr(sr.err, "fake server says no"));
	assert_no_file(out);

	fx.refuse_setup = 0;
	fx.error_get_image = 1;
	fx_capture(&fx, "xerror", &sr, out, sizeof out);
	assert_int_equal(sr.exit_code, EXIT_DISPLAY);
	assert_non_null(strstr(sr.err, "BadMatch"));
	assert_no_file(out);

	fx.error_get_image = 0;
	fx.visual_class = 5; /* DirectColor */
	fx_capture(&fx, "directcolor", &sr, out, sizeof out);
	assert_int_equal(sr.exit_code, EXIT_VISUAL);
	assert_no_file(out);
}

/* ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
	(void)state;
	signal(SIGPIPE, SIG_IGN);
	snprintf(g_dir, sizeof g_dir, "/tmp/relay-x11shot-test-XXXXXX");
	if (!mkdtemp(g_dir))
		return -1;
	const char *build = getenv("RELAY_BUILD_DIR");
	if (!build)
		build = ".";
	snprintf(g_shot, sizeof g_shot, "%s/libexec/mcp-relay/receivers/%s/relay-x11shot", build,
	         RELAY_HOST_PLATFORM);
	snprintf(g_pattern, sizeof g_pattern, "%s/tests/fixtures/x11-pattern/relay-x11-pattern", build);
	g_have_shot = access(g_shot, X_OK) == 0;
	g_have_pattern = access(g_pattern, X_OK) == 0;
	g_have_xvfb = on_path("Xvfb");
	g_have_xauth = on_path("xauth");
	return 0;
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
	    cmocka_unit_test(test_capture_1280x800_with_cookie),
	    cmocka_unit_test(test_capture_1920x1080),
	    cmocka_unit_test(test_capture_depth32_xvfb),
	    cmocka_unit_test(test_cookie_from_environment),
	    cmocka_unit_test(test_capture_without_auth),
	    cmocka_unit_test(test_capture_over_tcp),
	    cmocka_unit_test(test_wrong_or_missing_cookie_exit_3),
	    cmocka_unit_test(test_unreachable_display_exit_3),
	    cmocka_unit_test(test_existing_output_exit_5),
	    cmocka_unit_test(test_usage_exit_2),
	    cmocka_unit_test(test_unsupported_depth_exit_4),
	    cmocka_unit_test(test_depth32_msb_first),
	    cmocka_unit_test(test_depth24_packed_bgr_lsb_strips),
	    cmocka_unit_test(test_fake_server_failures),
	    cmocka_unit_test(test_capture_by_shm_and_without),
	    cmocka_unit_test(test_serve_answers_each_path),
	    cmocka_unit_test(test_shm_refused_falls_back),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
