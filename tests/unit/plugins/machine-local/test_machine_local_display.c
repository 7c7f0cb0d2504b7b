/*
 * test_machine_local_display — a machine-local guest's own Xvfb display and
 * console (root, Xvfb, x11vnc):
 *   - capture-x11 plans the snapshot for the lease's display; the planned
 *     relay-x11shot build is staged into the guest, a real X client
 *     (tests/fixtures/x11-pattern) paints a known picture, the planned
 *     command takes the screenshot, and every pixel of the PNG is checked;
 *   - console-vnc over machine-local's console passthrough: capabilities,
 *     resolve, open (x11vnc on the guest's loopback answers "RFB 003.008"
 *     inside the guest's network namespace), replayed and refused opens,
 *     cancel, and a viewer named by MCP_RELAY_VNC_VIEWER started in the
 *     guest's network namespace with the one-time password.
 * Skips with a message when Xvfb, x11vnc, relay-x11shot or the pattern
 * client is missing (make all builds the last two).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <png.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include "../../../fixtures/x11-pattern/pattern.h"
#include "machine_local_fixture.h"

static char g_shot[1024], g_pattern[1024];

static void require_display_tools(void)
{
	ML_SKIP_UNLESS_READY();
	const char *build = getenv("RELAY_BUILD_DIR");
	snprintf(g_shot, sizeof g_shot, "%s/libexec/mcp-relay/receivers/linux-%s/relay-x11shot", build,
#if defined(__x86_64__)
	         "x86_64"
#elif defined(__aarch64__)
	         "aarch64"
#else
	         "unknown"
#endif
	);
	snprintf(g_pattern, sizeof g_pattern, "%s/tests/fixtures/x11-pattern/relay-x11-pattern", build);
	const char *missing = NULL;
	if (access("/usr/bin/Xvfb", X_OK) != 0)
		missing = "Xvfb is not installed (apt-get install xvfb)";
	else if (access(g_shot, X_OK) != 0)
		missing = "relay-x11shot is not built (make relay-x11shot)";
	else if (access(g_pattern, X_OK) != 0)
		missing = "the X pattern client is not built (make relay-x11-pattern; needs libx11-dev)";
	if (missing) {
		fprintf(stderr, "skipped: %s\n", missing);
		skip();
	}
}

static loaded_plugin *load_other(ml_env *e, const char *name, relay_plugin_kind kind)
{
	char *path = ml_plugin_path(name);
	char cfg[1024];
	snprintf(cfg, sizeof cfg,
	         "{\"stateDir\":\"%s/%s\",\"libexecDir\":\"%s/libexec/mcp-relay/receivers\"}", e->state_dir,
	         name, getenv("RELAY_BUILD_DIR"));
	loaded_plugin *p = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (loader_load(&e->registry, path, kind, cfg, &p, &err) != RELAY_OK)
		fail_msg("loading %s: %s", name, err.message);
	free(path);
	return p;
}

static json_object *push_file(ml_env *e, relay_transport_conn *c, const char *local, const char *remote)
{
	char *facts = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (e->p->transport.push(e->p->state, c, local, remote, NULL, 0, &facts, &err) != RELAY_OK)
		fail_msg("push %s: %s", local, err.message);
	json_object *o = ml_parse(facts);
	free(facts);
	return o;
}

/* Decodes an 8-bit RGB PNG; returns the rows (free) and the size. */
static unsigned char *read_png(const char *path, unsigned *w, unsigned *h)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	if (setjmp(png_jmpbuf(png)))
		fail_msg("%s is not a valid PNG", path);
	png_init_io(png, f);
	png_read_info(png, info);
	*w = png_get_image_width(png, info);
	*h = png_get_image_height(png, info);
	assert_int_equal(png_get_bit_depth(png, info), 8);
	assert_int_equal(png_get_color_type(png, info), PNG_COLOR_TYPE_RGB);
	size_t stride = png_get_rowbytes(png, info);
	unsigned char *data = malloc(stride * *h);
	png_bytep *rows = malloc(sizeof *rows * *h);
	for (unsigned y = 0; y < *h; y++)
		rows[y] = data + y * stride;
	png_read_image(png, rows);
	png_read_end(png, NULL);
	png_destroy_read_struct(&png, &info, NULL);
	free(rows);
	fclose(f);
	return data;
}

static void test_screenshot_shows_x_client_pixels(void **state)
{
	(void)state;
	require_display_tools();
	ml_env e;
	ml_load(&e, "{\"screen\":\"1280x800x24\"}");
	loaded_plugin *cap = load_other(&e, "capture-x11", RELAY_KIND_CAPTURE);
	char *lease = ml_acquire(&e, "shot-1", NULL);
	json_object *doc = ml_parse(lease);
	assert_string_equal(jsonx_get_str(doc, "display"), ":0");

	/* The plan, for this lease, before and after staging. */
	const char *root = "/var/tmp/2026-01-01-00-00-00-Z-mcp-relay-relay-shot-1-00000000";
	char context[16384];
	snprintf(context, sizeof context,
	         "{\"lease\":%s,\"applications\":[],\"platform\":\"linux-%s\",\"guestRoot\":\"%s\","
	         "\"cuaDriver\":null}",
	         lease, strstr(g_shot, "x86_64") ? "x86_64" : "aarch64", root);
	char *text = NULL;
	relay_error err;
	assert_int_equal(cap->capture.plan(cap->state, context, 0, &text, &err), RELAY_OK);
	json_object *plan = ml_parse(text);
	free(text);
	bool enabled = false;
	assert_true(jsonx_get_bool(plan, "enabled", &enabled) && enabled);
	assert_non_null(strstr(jsonx_get_str(plan, "because"), ":0"));
	json_object *capture = jsonx_get_obj(plan, "capture");
	assert_string_equal(jsonx_get_str(capture, "check"), "png-file");
	int64_t timeout = 0;
	assert_true(jsonx_get_int(capture, "timeoutMs", &timeout) && timeout == 60000);
	json_object *argv = jsonx_get_array(capture, "argv");
	json_object *stage = json_object_array_get_idx(jsonx_get_array(plan, "stage"), 0);
	assert_string_equal(jsonx_get_str(stage, "local"), g_shot);
	assert_string_equal(jsonx_get_str(stage, "remote"), "bin/relay-x11shot");

	/* Stage as relay_stage would, and the X client. */
	relay_transport_conn *c = ml_open(&e, lease);
	char remote[1024];
	snprintf(remote, sizeof remote, "%s/%s", root, jsonx_get_str(stage, "remote"));
	json_object_put(push_file(&e, c, g_shot, remote));
	json_object_put(push_file(&e, c, g_pattern, "/home/relay/relay-x11-pattern"));
	char *out = NULL;
	assert_int_equal(
	    ml_sh(&e, c,
	          "/home/relay/relay-x11-pattern >/tmp/pattern.out 2>&1 </dev/null & "
	          "for i in $(seq 200); do grep -q ready /tmp/pattern.out && break; sleep 0.05; done; "
	          "cat /tmp/pattern.out; id; ulimit -a",
	          &out),
	    0);
	if (!strstr(out, "ready"))
		fprintf(stderr, "PATTERN: %s\n", out);
	assert_non_null(strstr(out, "ready"));
	free(out);

	/* The planned command, with @OUT@ replaced, run as the receiver runs it. */
	const char *args[16];
	size_t n = json_object_array_length(argv);
	assert_true(n < 15);
	int outs = 0;
	for (size_t i = 0; i < n; i++) {
		const char *a = json_object_get_string(json_object_array_get_idx(argv, i));
		if (strcmp(a, "@OUT@") == 0) {
			a = "/tmp/shot.png";
			outs++;
		}
		args[i] = a;
	}
	args[n] = NULL;
	assert_int_equal(outs, 1);
	assert_string_equal(args[0], remote);
	relay_exec_result res;
	assert_int_equal(ml_exec_full(&e, c, args, 0, 60000, 65536, &res), 0);
	assert_non_null(strstr(res.out, "\"screenshot_file_path\":\"/tmp/shot.png\""));
	free(res.out);
	free(res.err);

	char local[600];
	snprintf(local, sizeof local, "%s/shot.png", e.state_dir);
	char *facts = NULL;
	assert_int_equal(e.p->transport.pull(e.p->state, c, "/tmp/shot.png", local, NULL, 0, &facts, &err),
	                 RELAY_OK);
	free(facts);
	unsigned w = 0, h = 0;
	unsigned char *px = read_png(local, &w, &h);
	assert_int_equal(w, 1280);
	assert_int_equal(h, 800);
	unsigned bad = 0;
	for (unsigned y = 0; y < h; y++)
		for (unsigned x = 0; x < w; x++) {
			unsigned char want[3];
			pattern_expected(x, y, w, h, want);
			const unsigned char *got = px + ((size_t)y * w + x) * 3;
			if (memcmp(got, want, 3) != 0 && bad++ < 5)
				fprintf(stderr, "pixel (%u,%u): %u %u %u, expected %u %u %u\n", x, y, got[0],
				        got[1], got[2], want[0], want[1], want[2]);
		}
	assert_int_equal(bad, 0);
	/* Known colours at known places, spelled out. */
	const unsigned char *red = px + ((size_t)(800 * 15 / 100) * w + 1280 * 15 / 100) * 3;
	assert_int_equal(red[0], 255);
	assert_int_equal(red[1], 0);
	assert_int_equal(red[2], 0);
	free(px);
	e.p->transport.close(e.p->state, c, 0);
	json_object_put(plan);
	json_object_put(doc);
	ml_release(&e, lease);
	free(lease);
	ml_unload(&e, true);
}

/* Reads the RFB banner from 127.0.0.1:5900 inside the guest's network
 * namespace (a thread of its own switches namespace). */
typedef struct banner_job {
	pid_t init;
	char banner[16];
	int connected;
} banner_job;

static void *banner_thread(void *arg)
{
	banner_job *j = arg;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)j->init);
	int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0 || setns(ns, CLONE_NEWNET) != 0)
		return NULL;
	close(ns);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons(5900);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
		j->connected = 1;
		struct pollfd pfd = {fd, POLLIN, 0};
		size_t got = 0;
		while (got < 12 && poll(&pfd, 1, 5000) > 0) {
			ssize_t r = read(fd, j->banner + got, 12 - got);
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		j->banner[got] = '\0';
	}
	close(fd);
	return NULL;
}

static banner_job read_banner(pid_t init)
{
	banner_job j;
	memset(&j, 0, sizeof j);
	j.init = init;
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, banner_thread, &j), 0);
	pthread_join(t, NULL);
	return j;
}

static json_object *console_call(loaded_plugin *vnc, relay_machine_link *link, const char *lease,
                                 const char *op, const char *console_id, const char *attempt,
                                 relay_status expect)
{
	char *out = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status s;
	if (strcmp(op, "capabilities") == 0)
		s = vnc->console.capabilities(vnc->state, link, NULL, 0, &out, &err);
	else if (strcmp(op, "resolve") == 0)
		s = vnc->console.resolve(vnc->state, link, lease, NULL, 0, &out, &err);
	else if (strcmp(op, "open") == 0)
		s = vnc->console.open(vnc->state, link, lease, console_id, attempt, NULL, 0, &out, &err);
	else
		s = vnc->console.cancel(vnc->state, link, lease, console_id, attempt, NULL, 0, &out, &err);
	if (s != expect)
		fail_msg("console %s: %s (%s)", op, relay_status_str(s), err.message);
	if (s != RELAY_OK)
		return NULL;
	json_object *o = ml_parse(out);
	free(out);
	return o;
}

static void test_vnc_console(void **state)
{
	(void)state;
	require_display_tools();
	if (access("/usr/bin/x11vnc", X_OK) != 0) {
		fprintf(stderr, "skipped: x11vnc is not installed (apt-get install x11vnc)\n");
		skip();
	}
	unsetenv("MCP_RELAY_VNC_VIEWER");
	ml_env e;
	ml_load(&e, NULL);
	loaded_plugin *vnc = load_other(&e, "console-vnc", RELAY_KIND_CONSOLE);
	relay_machine_link link;
	loader_machine_link(e.p, &link); /* the typed console (ABI 1.7), as the core lends it */
	assert_ptr_equal(link.console_state, e.p->state);
	assert_null(e.p->machine.console);

	json_object *caps = console_call(vnc, &link, NULL, "capabilities", NULL, NULL, RELAY_OK);
	json_object *linux_b = jsonx_get_obj(
	    jsonx_get_obj(jsonx_get_obj(jsonx_get_obj(caps, "options"), "vnc"), "backends"), "linux");
	bool b = false;
	assert_true(jsonx_get_bool(linux_b, "available", &b) && b);
	assert_string_equal(jsonx_get_str(linux_b, "backend"), "x11vnc");
	assert_string_equal(jsonx_get_str(linux_b, "pixels"), "unverified");
	json_object_put(caps);

	/* A guest acquired without vnc has no console. */
	char *plain = ml_acquire(&e, "plain-1", NULL);
	console_call(vnc, &link, plain, "resolve", NULL, NULL, RELAY_E_NOT_FOUND);

	char *lease = ml_acquire(&e, "vnc-1", "\"vnc\":true");
	json_object *doc = ml_parse(lease);
	json_object *console = jsonx_get_obj(doc, "console");
	assert_string_equal(jsonx_get_str(console, "status"), "ready");
	char console_id[64];
	snprintf(console_id, sizeof console_id, "%s", jsonx_get_str(console, "console_id"));
	pid_t init = (pid_t)ml_local_int(lease, "initPid");

	json_object *r = console_call(vnc, &link, lease, "resolve", NULL, NULL, RELAY_OK);
	assert_string_equal(jsonx_get_str(r, "status"), "ready");
	assert_string_equal(jsonx_get_str(r, "console_id"), console_id);
	assert_string_equal(jsonx_get_str(r, "vm"), jsonx_get_str(doc, "vm"));
	assert_string_equal(jsonx_get_str(r, "human_confirmation"), "unverified");
	assert_string_equal(jsonx_get_str(r, "viewer_connected"), "unverified");
	assert_true(jsonx_get_bool(r, "server_enforced_view_only", &b) && b);
	assert_true(jsonx_has(r, "attempt") && jsonx_get_obj(r, "attempt") == NULL);
	json_object_put(r);
	/* Nothing listens before an open. */
	banner_job j = read_banner(init);
	assert_int_equal(j.connected, 0);

	r = console_call(vnc, &link, lease, "open", console_id, "att-1", RELAY_OK);
	json_object *attempt = jsonx_get_obj(r, "attempt");
	assert_string_equal(jsonx_get_str(attempt, "attempt_id"), "att-1");
	assert_string_equal(jsonx_get_str(attempt, "status"), "dispatching");
	assert_string_equal(jsonx_get_str(attempt, "reason"), "worker-unavailable");
	assert_true(jsonx_get_bool(r, "viewer_launched", &b) && !b);
	int64_t port = 0;
	assert_true(jsonx_get_int(jsonx_get_obj(r, "endpoint"), "port", &port) && port == 5900);
	/* No secret and no secret's path in the report. */
	assert_null(strstr(json_object_to_json_string(r), ".relay-vnc-"));
	assert_null(strstr(json_object_to_json_string(r), ".passwd"));
	json_object_put(r);
	j = read_banner(init);
	assert_int_equal(j.connected, 1);
	assert_string_equal(j.banner, "RFB 003.008\n");

	/* The same attempt id answers the existing attempt; another is refused. */
	r = console_call(vnc, &link, lease, "open", console_id, "att-1", RELAY_OK);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r, "attempt"), "status"), "dispatching");
	json_object_put(r);
	console_call(vnc, &link, lease, "open", console_id, "att-2", RELAY_E_REFUSED);
	console_call(vnc, &link, lease, "open", "wrong-console", "att-3", RELAY_E_REFUSED);
	console_call(vnc, &link, lease, "open", console_id, "bad id!", RELAY_E_INVALID_ARGUMENT);

	r = console_call(vnc, &link, lease, "cancel", console_id, "att-1", RELAY_OK);
	attempt = jsonx_get_obj(r, "attempt");
	assert_string_equal(jsonx_get_str(attempt, "status"), "cancelled");
	assert_string_equal(jsonx_get_str(attempt, "viewer_cleanup"), "local-children-stopped");
	json_object_put(r);
	j = read_banner(init);
	assert_int_equal(j.connected, 0);

	/* With a viewer: it runs in the guest's network namespace and gets the
	 * one-time password; cancel stops it. */
	char viewer[600], seen[600];
	snprintf(viewer, sizeof viewer, "%s/viewer.sh", e.state_dir);
	snprintf(seen, sizeof seen, "%s/viewer.seen", e.state_dir);
	char script[4096];
	snprintf(script, sizeof script,
	         "#!/bin/bash\necho $$ > %s.pid\nexec 3<>/dev/tcp/127.0.0.1/5900 || exit 1\nhead -c 12 <&3 > "
	         "%s.tmp\n"
	         "[ ${#VNC_PASSWORD} = 8 ] && echo has-password >> %s.tmp\necho \"$1\" >> %s.tmp\nmv %s.tmp "
	         "%s\nsleep 300\n",
	         seen, seen, seen, seen, seen, seen);
	relay_error err;
	assert_int_equal(fs_write_durable(viewer, script, strlen(script), 0700, &err), RELAY_OK);
	setenv("MCP_RELAY_VNC_VIEWER", viewer, 1);
	r = console_call(vnc, &link, lease, "open", console_id, "att-4", RELAY_OK);
	attempt = jsonx_get_obj(r, "attempt");
	assert_string_equal(jsonx_get_str(attempt, "status"), "launched");
	assert_true(jsonx_get_bool(r, "viewer_launched", &b) && b);
	json_object_put(r);
	char *seen_text = NULL;
	size_t len = 0;
	for (int i = 0; i < 100 && fs_read_file(seen, 4096, &seen_text, &len, &err) != RELAY_OK; i++)
		usleep(100000);
	assert_non_null(seen_text);
	assert_string_equal(seen_text, "RFB 003.008\nhas-password\n127.0.0.1::5900\n");
	free(seen_text);
	r = console_call(vnc, &link, lease, "cancel", console_id, "att-4", RELAY_OK);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(r, "attempt"), "viewer_cleanup"),
	                    "local-children-stopped");
	json_object_put(r);
	char pidfile[700], *pid_text = NULL;
	snprintf(pidfile, sizeof pidfile, "%s.pid", seen);
	assert_int_equal(fs_read_file(pidfile, 64, &pid_text, &len, &err), RELAY_OK);
	pid_t viewer_pid = (pid_t)atoi(pid_text);
	free(pid_text);
	assert_true(viewer_pid > 1);
	assert_false(ml_pid_alive(viewer_pid));
	unsetenv("MCP_RELAY_VNC_VIEWER");

	json_object_put(doc);
	ml_release(&e, lease);
	ml_release(&e, plain);
	free(lease);
	free(plain);
	ml_unload(&e, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_screenshot_shows_x_client_pixels, ml_teardown),
	    cmocka_unit_test_teardown(test_vnc_console, ml_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
