/*
 * The index.html viewer (spec/evidence.md §10) rendered by a real browser:
 * headless Chromium dumps the DOM (every step title present, guest text
 * escaped, no script but the JSON data block, images by package path) and
 * takes a screenshot whose pixels prove both the before (red) and the after
 * (blue) screenshots of the steps actually rendered. The page needs no
 * scripts, so nothing in it is asked to run.
 *
 * Skips with a message when no chromium binary is installed
 * (apt-get install -y chromium).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../common/evidence_fixture.h"
#include "evidence/package.h"

#define RUN1 "run-5d1f0c9a8e7b4c3d2a1f0e9d8c7b6a59"
#define RUN2 "run-0a1b2c3d4e5f60718293a4b5c6d7e8f9"

static const char *find_chromium(void)
{
	static const char *names[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
	                              "/usr/bin/google-chrome", NULL};
	for (int i = 0; names[i]; i++)
		if (access(names[i], X_OK) == 0)
			return names[i];
	return NULL;
}

static int run_chromium(const char *chromium, const char *profile, const char *extra, const char *url,
                        const char *stdout_file)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
	         "timeout 120 %s --headless --no-sandbox --disable-gpu --disable-background-networking "
	         "--disable-component-update --disable-sync --no-first-run --hide-scrollbars "
	         "--user-data-dir=%s %s '%s' > '%s' 2>/dev/null",
	         chromium, profile, extra, url, stdout_file);
	return system(cmd);
}

/* Counts pixels close to rgb in a PNG file. */
static size_t count_colour(const char *png_path, unsigned rgb, unsigned *width_out, unsigned *height_out)
{
	png_image img;
	memset(&img, 0, sizeof img);
	img.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_file(&img, png_path))
		return 0;
	img.format = PNG_FORMAT_RGB;
	size_t size = PNG_IMAGE_SIZE(img);
	unsigned char *buf = malloc(size);
	if (buf == NULL || !png_image_finish_read(&img, NULL, buf, 0, NULL)) {
		free(buf);
		return 0;
	}
	int r = (int)(rgb >> 16), g = (int)((rgb >> 8) & 255), b = (int)(rgb & 255);
	size_t n = 0;
	for (size_t i = 0; i + 2 < size; i += 3)
		if (abs(buf[i] - r) < 8 && abs(buf[i + 1] - g) < 8 && abs(buf[i + 2] - b) < 8)
			n++;
	*width_out = img.width;
	*height_out = img.height;
	free(buf);
	return n;
}

static size_t count_substr(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

static void test_viewer_in_chromium(void **state)
{
	(void)state;
	const char *chromium = find_chromium();
	if (chromium == NULL) {
		print_message("skipped: chromium is not installed (apt-get install -y chromium)\n");
		skip();
	}
	fx_pkg p;
	fx_init(&p);
	fx_run a = {RUN1,     "shell-1", "shell /usr/bin/xdg-open https://example.com",
	            0,        false,     true,
	            true,     NULL,      NULL,
	            0xd03030, 0x3050d0};
	fx_run b = {
	    RUN2,     "shell-2", "shell echo '<b>&amp;</b>' > out.txt", 1, false, true, true, NULL, NULL,
	    0xd03030, 0x3050d0};
	fx_add_run(&p, &a);
	fx_add_run(&p, &b);
	fx_add_extraction(&p);
	fx_finish(&p);
	evidence_delivery_options o = {.project_dir = p.root};
	o.identity.guest = "login-test-1";
	evidence_delivery_result res;
	relay_error err = {0};
	assert_int_equal(evidence_package_deliver(p.dir, &o, &res, &err), RELAY_OK);
	evidence_delivery_result_free(&res);

	char url[1200], profile[600], dom_file[600], shot[600], shot_arg[700];
	snprintf(url, sizeof url, "file://%s/index.html", p.dir);
	snprintf(profile, sizeof profile, "%s/chromium-profile", p.root);
	snprintf(dom_file, sizeof dom_file, "%s/dom.html", p.root);
	snprintf(shot, sizeof shot, "%s/shot.png", p.root);

	/* 1. Structure from the DOM as Chromium parsed it. */
	assert_int_equal(run_chromium(chromium, profile, "--dump-dom", url, dom_file), 0);
	char *dom = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(dom_file, 1 << 26, &dom, &len, NULL), RELAY_OK);
	assert_true(len > 1000);
	assert_non_null(strstr(dom, "shell-1 — shell /usr/bin/xdg-open https://example.com"));
	assert_non_null(strstr(dom, "shell-2 — shell echo '&lt;b&gt;&amp;amp;&lt;/b&gt;' &gt; out.txt"));
	assert_non_null(
	    strstr(dom, "&lt;script&gt;alert(1)&lt;/script&gt;")); /* the agent's reason, escaped */
	assert_int_equal(count_substr(dom, "<script"), 1);         /* only the JSON data block */
	assert_non_null(strstr(dom, "<script type=\"application/json\" id=\"relay-review\">"));
	assert_non_null(strstr(dom, "<img src=\"state/snapshots/" FX_SESSION "/" RUN1 "-before.png\""));
	assert_non_null(strstr(dom, "<img src=\"state/snapshots/" FX_SESSION "/" RUN1 "-after.png\""));
	assert_non_null(strstr(dom, "<img src=\"state/snapshots/" FX_SESSION "/" RUN2 "-before.png\""));
	assert_non_null(strstr(dom, "<img src=\"state/snapshots/" FX_SESSION "/" RUN2 "-after.png\""));
	assert_non_null(strstr(
	    dom, "href=\"extractions/screens/6f0c1e9a-3b2d-4c5e-8f7a-1b2c3d4e5f60/login/step-1.png\""));
	assert_non_null(strstr(dom, "Execution: failed"));
	assert_non_null(strstr(dom, "error: sign-in button not found"));
	free(dom);

	/* 2. Pixels: both images of the first step render side by side. */
	snprintf(shot_arg, sizeof shot_arg, "--screenshot=%s --window-size=1400,1600", shot);
	assert_int_equal(run_chromium(chromium, profile, shot_arg, url, dom_file), 0);
	unsigned w = 0, h = 0;
	size_t red = count_colour(shot, 0xd03030, &w, &h);
	size_t blue = count_colour(shot, 0x3050d0, &w, &h);
	print_message("screenshot %ux%u: %zu before-image pixels, %zu after-image pixels\n", w, h, red, blue);
	/* A 320x200 image shown at full size is 64,000 pixels; a broken image
	 * icon has none of these colours. */
	assert_true(red >= 20000);
	assert_true(blue >= 20000);
	/* To look at the page yourself: EVIDENCE_VIEWER_KEEP=/some/dir keeps the
	 * screenshot there. */
	const char *keep = getenv("EVIDENCE_VIEWER_KEEP");
	if (keep != NULL) {
		char dst[700];
		snprintf(dst, sizeof dst, "%s/viewer-screenshot.png", keep);
		unlink(dst);
		fs_copy_file(shot, dst, 0600, NULL);
	}
	fx_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_viewer_in_chromium),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
