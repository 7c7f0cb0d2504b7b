/*
 * test_standin_exec.c — machine-service-standin: exec (§3.7: shell quoting,
 * script mode, rc, stdout then stderr, the 64,000-character tail, timeout
 * and `ssh failed`), push and pull (§3.8 and their refusals), namespace
 * isolation of /var/tmp and /tmp, release cancelling a running exec, a
 * second release, and the fake cua-driver (§12.2 item 8).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <png.h>

#include "standin_client.h"
#include "util/randx.h"

static standin_proc proc;
static char *vm;

static int start_with(const char *const *args)
{
	memset(&proc, 0, sizeof proc);
	if (!standin_start(&proc, args))
		return -1;
	standin_reply r;
	vm = standin_acquire(
	    &proc, "{\"purpose\":\"relay-exec-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	standin_reply_free(&r);
	return vm ? 0 : -1;
}

static int setup(void **state)
{
	(void)state;
	return start_with(NULL);
}

static int setup_none(void **state)
{
	(void)state;
	const char *args[] = {"--isolation", "none", NULL};
	return start_with(args);
}

static int teardown(void **state)
{
	(void)state;
	standin_cleanup(&proc);
	free(vm);
	vm = NULL;
	return 0;
}

/* Runs exec with the JSON body; returns the status. */
static long exec_body(const char *body, standin_reply *r)
{
	return standin_postf(&proc, r, body, "/machines/%s/exec", vm);
}

static void test_argv_quoting_and_output_order(void **state)
{
	(void)state;
	standin_reply r;
	/* Each element is shell-quoted: spaces, quotes, empty strings and
	 * metacharacters arrive unchanged. */
	assert_int_equal(
	    exec_body("{\"argv\":[\"printf\",\"%s|\",\"a b\",\"it's\",\"\",\";ls\",\"$HOME\"]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "vm"), vm);
	assert_string_equal(jsonx_get_str(r.json, "output"), "a b|it's||;ls|$HOME|");
	int64_t rc = -2;
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	assert_int_equal(rc, 0);
	standin_reply_free(&r);
	/* Non-strings are JSON-encoded (as Python's json.dumps) first. */
	assert_int_equal(exec_body("{\"argv\":[\"printf\",\"%s|\",1.5,true,null,{\"a\":[1,2]}]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "1.5|true|null|{\"a\": [1, 2]}|");
	standin_reply_free(&r);
	/* Standard output first, then standard error; the exit status. */
	assert_int_equal(exec_body("{\"argv\":[\"sh\",\"-c\",\"echo err >&2; echo out; exit 7\"]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "out\nerr\n");
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	assert_int_equal(rc, 7);
	standin_reply_free(&r);
	/* A child killed by a signal: the shell reports 128 + n. */
	assert_int_equal(exec_body("{\"argv\":[\"sh\",\"-c\",\"kill -9 $$\"]}", &r), 200);
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	assert_int_equal(rc, 137);
	standin_reply_free(&r);
	/* The shell itself killed by a signal (ssh would die with it): rc -1. */
	assert_int_equal(exec_body("{\"script\":\"kill -9 $$\"}", &r), 200);
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	assert_int_equal(rc, -1);
	standin_reply_free(&r);
	/* Standard input is /dev/null; HOME is the lease's home, also the cwd. */
	assert_int_equal(exec_body("{\"argv\":[\"sh\",\"-c\",\"cat; echo \\\"$HOME\\\"; pwd\"]}", &r), 200);
	char *home = standin_lease_path(&proc, vm, "home");
	char expected[PATH_MAX * 2 + 8];
	snprintf(expected, sizeof expected, "%s\n%s\n", home, home);
	assert_string_equal(jsonx_get_str(r.json, "output"), expected);
	free(home);
	standin_reply_free(&r);
}

static void test_script_mode_and_validation(void **state)
{
	(void)state;
	standin_reply r;
	/* script wins over argv. */
	assert_int_equal(exec_body("{\"script\":\"echo from script\\nexit 3\\n\",\"argv\":[\"false\"]}", &r),
	                 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "from script\n");
	int64_t rc = 0;
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	assert_int_equal(rc, 3);
	standin_reply_free(&r);
	assert_int_equal(exec_body("{}", &r), 409);
	assert_string_equal(standin_error_text(&r), "need 'argv' or 'script'");
	standin_reply_free(&r);
	assert_int_equal(exec_body("{\"argv\":[\"true\"],\"timeout\":0}", &r), 409);
	assert_string_equal(standin_error_text(&r), "timeout must be positive");
	standin_reply_free(&r);
	assert_int_equal(exec_body("{\"argv\":[\"true\"],\"timeout\":-5}", &r), 409);
	assert_string_equal(standin_error_text(&r), "timeout must be positive");
	standin_reply_free(&r);
	/* A non-integer timeout is ignored (600 applies). */
	assert_int_equal(exec_body("{\"argv\":[\"true\"],\"timeout\":1.5}", &r), 200);
	standin_reply_free(&r);
}

static void test_timeout_answers_ssh_failed(void **state)
{
	(void)state;
	standin_reply r;
	assert_int_equal(exec_body("{\"argv\":[\"sh\",\"-c\",\"echo partial; sleep 60\"],\"timeout\":1}", &r),
	                 409);
	assert_string_equal(standin_error_text(&r), "ssh failed");
	standin_reply_free(&r);
	/* The machine is usable afterwards. */
	assert_int_equal(exec_body("{\"argv\":[\"echo\",\"again\"]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "again\n");
	standin_reply_free(&r);
}

static void test_output_keeps_the_last_64000_characters(void **state)
{
	(void)state;
	standin_reply r;
	assert_int_equal(
	    exec_body("{\"argv\":[\"sh\",\"-c\",\"head -c 70000 /dev/zero | tr '\\\\0' a; printf END >&2\"]}",
	              &r),
	    200);
	const char *out = jsonx_get_str(r.json, "output");
	assert_int_equal(strlen(out), 64000);
	assert_int_equal(out[0], 'a');
	assert_string_equal(out + 64000 - 3, "END");
	standin_reply_free(&r);
	/* Characters, not bytes: 65,000 two-byte characters keep 64,000. */
	assert_int_equal(
	    exec_body("{\"argv\":[\"sh\",\"-c\",\"yes \\u00e9 | head -n 65000 | tr -d '\\\\n'\"]}", &r), 200);
	out = jsonx_get_str(r.json, "output");
	assert_int_equal(utf8_length(out, strlen(out)), 64000);
	assert_int_equal(strlen(out), 128000);
	standin_reply_free(&r);
	/* Invalid UTF-8 is replaced, not refused. */
	assert_int_equal(exec_body("{\"argv\":[\"printf\",\"\\\\377ok\"]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "\xef\xbf\xbdok");
	standin_reply_free(&r);
}

static void test_namespace_isolation(void **state)
{
	(void)state;
	char name[64], hex[17];
	random_hex(hex, 16);
	snprintf(name, sizeof name, "standin-isolation-%s", hex);
	char body[PATH_MAX * 2 + 512];
	snprintf(body, sizeof body,
	         "{\"argv\":[\"sh\",\"-c\",\"echo guest > /var/tmp/%s && echo t > /tmp/%s && ls /var/tmp\"]}",
	         name, name);
	standin_reply r;
	assert_int_equal(exec_body(body, &r), 200);
	int64_t rc = -1;
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	if (rc == 255 && strstr(jsonx_get_str(r.json, "output"), "sandbox:") != NULL) {
		const char *why = jsonx_get_str(r.json, "output");
		fprintf(stderr, "skipping: namespaces refused on this host: %s\n", why);
		standin_reply_free(&r);
		skip();
		return;
	}
	assert_int_equal(rc, 0);
	/* The guest sees only its own /var/tmp. */
	char listing[128];
	snprintf(listing, sizeof listing, "%s\n", name);
	assert_string_equal(jsonx_get_str(r.json, "output"), listing);
	standin_reply_free(&r);

	char rel[128];
	snprintf(rel, sizeof rel, "guest/var-tmp/%s", name);
	char *inside = standin_lease_path(&proc, vm, rel);
	snprintf(rel, sizeof rel, "guest/tmp/%s", name);
	char *inside_tmp = standin_lease_path(&proc, vm, rel);
	char host_var_tmp[128], host_tmp[128];
	snprintf(host_var_tmp, sizeof host_var_tmp, "/var/tmp/%s", name);
	snprintf(host_tmp, sizeof host_tmp, "/tmp/%s", name);
	struct stat st;
	assert_int_equal(stat(inside, &st), 0);
	assert_int_equal(stat(inside_tmp, &st), 0);
	assert_int_equal(stat(host_var_tmp, &st), -1);
	assert_int_equal(stat(host_tmp, &st), -1);

	/* Push and pull translate guest paths into the lease folder. */
	snprintf(body, sizeof body, "{\"remote_path\":\"/var/tmp/%s\",\"local_path\":\"%s/pulled/%s\"}", name,
	         proc.root, name);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/pull", vm), 200);
	standin_reply_free(&r);
	char pulled[PATH_MAX + 128];
	snprintf(pulled, sizeof pulled, "%s/pulled/%s", proc.root, name);
	char *text = NULL;
	size_t len = 0;
	relay_error err;
	assert_int_equal(fs_read_file(pulled, 1024, &text, &len, &err), RELAY_OK);
	assert_string_equal(text, "guest\n");
	free(text);
	free(inside);
	free(inside_tmp);
}

static void test_push_and_pull(void **state)
{
	(void)state;
	relay_error err;
	char local[PATH_MAX + 64], body[PATH_MAX * 2];
	snprintf(local, sizeof local, "%s/upload", proc.root);
	assert_int_equal(fs_mkdir_p(local, 0700, &err), RELAY_OK);
	char file[PATH_MAX + 128];
	snprintf(file, sizeof file, "%s/a.txt", local);
	assert_int_equal(fs_write_durable(file, "alpha\n", 6, 0600, &err), RELAY_OK);
	snprintf(file, sizeof file, "%s/sub", local);
	assert_int_equal(fs_mkdir_p(file, 0700, &err), RELAY_OK);
	snprintf(file, sizeof file, "%s/sub/b.txt", local);
	assert_int_equal(fs_write_durable(file, "beta\n", 5, 0600, &err), RELAY_OK);

	standin_reply r;
	/* A directory goes over with everything below it. */
	snprintf(body, sizeof body, "{\"local_path\":\"%s\",\"remote_path\":\"/var/tmp/tree\"}", local);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 200);
	assert_string_equal(jsonx_get_str(r.json, "vm"), vm);
	assert_string_equal(jsonx_get_str(r.json, "pushed"), local);
	assert_string_equal(jsonx_get_str(r.json, "to"), "/var/tmp/tree");
	standin_reply_free(&r);
	assert_int_equal(
	    exec_body("{\"argv\":[\"cat\",\"/var/tmp/tree/a.txt\",\"/var/tmp/tree/sub/b.txt\"]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "alpha\nbeta\n");
	standin_reply_free(&r);
	/* A file into the home folder by a relative path. */
	snprintf(body, sizeof body, "{\"local_path\":\"%s/a.txt\",\"remote_path\":\"copy.txt\"}", local);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 200);
	standin_reply_free(&r);
	assert_int_equal(exec_body("{\"argv\":[\"cat\",\"copy.txt\"]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "alpha\n");
	standin_reply_free(&r);

	/* Pull makes the missing folders above local_path. */
	snprintf(body, sizeof body,
	         "{\"remote_path\":\"/var/tmp/tree\",\"local_path\":\"%s/down/deep/tree\"}", proc.root);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/pull", vm), 200);
	assert_string_equal(jsonx_get_str(r.json, "pulled"), "/var/tmp/tree");
	standin_reply_free(&r);
	snprintf(file, sizeof file, "%s/down/deep/tree/sub/b.txt", proc.root);
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(fs_read_file(file, 1024, &text, &len, &err), RELAY_OK);
	assert_string_equal(text, "beta\n");
	free(text);

	/* Refusals. */
	snprintf(body, sizeof body, "{\"local_path\":\"%s/absent\",\"remote_path\":\"/var/tmp/x\"}",
	         proc.root);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 409);
	char expect[PATH_MAX + 64];
	snprintf(expect, sizeof expect, "no such local path: %s/absent", proc.root);
	assert_string_equal(standin_error_text(&r), expect);
	standin_reply_free(&r);

	snprintf(file, sizeof file, "%s/sub/link", local);
	assert_int_equal(symlink("b.txt", file), 0);
	snprintf(body, sizeof body, "{\"local_path\":\"%s\",\"remote_path\":\"/var/tmp/tree2\"}", local);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 409);
	assert_string_equal(standin_error_text(&r), "Recursive upload cannot contain symlinks");
	standin_reply_free(&r);

	const char *ssh_paths[] = {"ssh", "ssh/lease/identity", ""};
	for (size_t i = 0; i < 3; i++) {
		snprintf(body, sizeof body, "{\"local_path\":\"%s/%s\",\"remote_path\":\"/var/tmp/x\"}",
		         proc.root, ssh_paths[i]);
		assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 409);
		assert_string_equal(standin_error_text(&r),
		                    "Transfer path overlaps private lease SSH material");
		standin_reply_free(&r);
		snprintf(body, sizeof body, "{\"remote_path\":\"/var/tmp/tree\",\"local_path\":\"%s/%s\"}",
		         proc.root, ssh_paths[i]);
		assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/pull", vm), 409);
		assert_string_equal(standin_error_text(&r),
		                    "Transfer path overlaps private lease SSH material");
		standin_reply_free(&r);
	}

	snprintf(body, sizeof body, "{\"remote_path\":\"/var/tmp/absent\",\"local_path\":\"%s/x\"}",
	         proc.root);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/pull", vm), 409);
	assert_int_equal(strncmp(standin_error_text(&r), "scp failed: ", 12), 0);
	standin_reply_free(&r);
	snprintf(body, sizeof body, "{\"local_path\":\"%s/a.txt\",\"remote_path\":\"/etc/standin-x\"}",
	         local);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 409);
	assert_string_equal(standin_error_text(&r), "scp failed: path outside the lease");
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, "{\"local_path\":\"/x\"}", "/machines/%s/push", vm), 409);
	assert_string_equal(standin_error_text(&r), "need 'local_path' and 'remote_path'");
	standin_reply_free(&r);
}

static void test_isolation_none_limits_paths(void **state)
{
	(void)state;
	relay_error err;
	char local[PATH_MAX + 64], body[PATH_MAX * 2];
	snprintf(local, sizeof local, "%s/file.txt", proc.root);
	assert_int_equal(fs_write_durable(local, "x\n", 2, 0600, &err), RELAY_OK);
	char hex[9];
	random_hex(hex, 8);
	char guest_root[128];
	snprintf(guest_root, sizeof guest_root, "/var/tmp/%s-mcp-relay-relay-exec-00000001", hex);
	standin_reply r;
	/* Outside the home folder and the purpose's /var/tmp entry: refused. */
	snprintf(body, sizeof body, "{\"local_path\":\"%s\",\"remote_path\":\"/var/tmp/other-%s\"}", local,
	         hex);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 409);
	assert_string_equal(standin_error_text(&r), "scp failed: path outside the lease");
	standin_reply_free(&r);
	/* The relay's guest tree is a real host path in this mode. */
	snprintf(body, sizeof body, "{\"argv\":[\"mkdir\",\"%s\"]}", guest_root);
	assert_int_equal(exec_body(body, &r), 200);
	standin_reply_free(&r);
	snprintf(body, sizeof body, "{\"local_path\":\"%s\",\"remote_path\":\"%s/file.txt\"}", local,
	         guest_root);
	assert_int_equal(standin_postf(&proc, &r, body, "/machines/%s/push", vm), 200);
	standin_reply_free(&r);
	char host_file[256];
	snprintf(host_file, sizeof host_file, "%s/file.txt", guest_root);
	struct stat st;
	assert_int_equal(stat(host_file, &st), 0);
	/* Release deletes the entry. */
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", vm), 200);
	standin_reply_free(&r);
	assert_int_equal(stat(guest_root, &st), -1);
}

typedef struct exec_thread {
	standin_reply reply;
	long status;
} exec_thread;

static void *run_long_exec(void *arg)
{
	exec_thread *t = arg;
	t->status = exec_body("{\"argv\":[\"sh\",\"-c\",\"touch started; sleep 60\"]}", &t->reply);
	return NULL;
}

static void test_release_cancels_running_exec_and_second_release(void **state)
{
	(void)state;
	exec_thread t;
	memset(&t, 0, sizeof t);
	pthread_t thread;
	assert_int_equal(pthread_create(&thread, NULL, run_long_exec, &t), 0);
	char *started = standin_lease_path(&proc, vm, "home/started");
	struct stat st;
	for (int i = 0; i < 600 && stat(started, &st) != 0; i++)
		standin_sleep_ms(50);
	assert_int_equal(stat(started, &st), 0);
	free(started);

	standin_reply r;
	assert_int_equal(standin_postf(&proc, &r, "{\"reason\":\"finished\"}", "/machines/%s/release", vm),
	                 200);
	assert_string_equal(jsonx_get_str(r.json, "vm"), vm);
	bool released = false;
	assert_true(jsonx_get_bool(r.json, "released", &released));
	assert_true(released);
	assert_string_equal(jsonx_get_str(r.json, "reason"), "finished");
	standin_reply_free(&r);
	pthread_join(thread, NULL);
	assert_int_equal(t.status, 409);
	char text[256];
	snprintf(text, sizeof text, "command cancelled by release of %s", vm);
	assert_string_equal(standin_error_text(&t.reply), text);
	standin_reply_free(&t.reply);

	/* A second release: unknown VM; the snapshot is gone. */
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/release", vm), 409);
	snprintf(text, sizeof text, "unknown VM: %s", vm);
	assert_string_equal(standin_error_text(&r), text);
	standin_reply_free(&r);
	char path[256];
	snprintf(path, sizeof path, "/machines/%s", vm);
	assert_int_equal(standin_get(&proc, path, &r), 404);
	standin_reply_free(&r);
	/* Default reason. */
	char *other = standin_acquire(
	    &proc, "{\"purpose\":\"relay-exec-00000002\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	standin_reply_free(&r);
	assert_int_equal(standin_postf(&proc, &r, NULL, "/machines/%s/release", other), 200);
	assert_string_equal(jsonx_get_str(r.json, "reason"), "requested");
	standin_reply_free(&r);
	free(other);
}

static void *run_first_of_two(void *arg)
{
	exec_thread *t = arg;
	t->status =
	    exec_body("{\"argv\":[\"sh\",\"-c\",\"touch started; sleep 2; touch first-done\"]}", &t->reply);
	return NULL;
}

static void test_operations_on_one_machine_run_one_at_a_time(void **state)
{
	(void)state;
	exec_thread t;
	memset(&t, 0, sizeof t);
	pthread_t thread;
	assert_int_equal(pthread_create(&thread, NULL, run_first_of_two, &t), 0);
	char *started = standin_lease_path(&proc, vm, "home/started");
	struct stat st;
	for (int i = 0; i < 600 && stat(started, &st) != 0; i++)
		standin_sleep_ms(50);
	assert_int_equal(stat(started, &st), 0);
	free(started);
	/* Sent while the first runs: it waits for the operation lock, so it
	 * sees the first one's last file. A heartbeat does not wait. */
	standin_reply r;
	assert_int_equal(standin_postf(&proc, &r, "{}", "/machines/%s/heartbeat", vm), 200);
	standin_reply_free(&r);
	assert_int_equal(
	    exec_body("{\"argv\":[\"sh\",\"-c\",\"test -e first-done && echo after-first\"]}", &r), 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "after-first\n");
	standin_reply_free(&r);
	pthread_join(thread, NULL);
	assert_int_equal(t.status, 200);
	standin_reply_free(&t.reply);
}

static void test_unprivileged_user_namespace(void **state)
{
	(void)state;
	if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
		fprintf(stderr,
		        "skipping: needs root and setpriv to start the stand-in as an unprivileged user\n");
		skip();
		return;
	}
	static const char *const prefix[] = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
	                                     NULL};
	standin_proc p = {0};
	standin_make_root(&p);
	assert_int_equal(chown(p.root, 65534, 65534), 0);
	p.prefix = prefix;
	const char *args[] = {"--isolation", "namespace", NULL};
	char log[PATH_MAX + 32];
	snprintf(log, sizeof log, "/tmp/standin-userns-%d.log", (int)getpid());
	if (!standin_start_ex(&p, args, -1, log)) {
		fprintf(stderr, "skipping: unprivileged user namespaces are refused here (see %s)\n", log);
		standin_cleanup(&p);
		skip();
		return;
	}
	unlink(log);
	standin_reply r;
	char *name = standin_acquire(
	    &p, "{\"purpose\":\"relay-userns-00000001\",\"image\":\"ubuntu2404\",\"env\":\"none\"}", &r);
	assert_non_null(name);
	standin_reply_free(&r);
	assert_int_equal(
	    standin_postf(&p, &r,
	                  "{\"argv\":[\"sh\",\"-c\",\"id -u; echo u > /var/tmp/userns-file; ls /var/tmp\"]}",
	                  "/machines/%s/exec", name),
	    200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "65534\nuserns-file\n");
	standin_reply_free(&r);
	char *inside = standin_lease_path(&p, name, "guest/var-tmp/userns-file");
	struct stat st;
	assert_int_equal(stat(inside, &st), 0);
	assert_int_equal(st.st_uid, 65534);
	free(inside);
	free(name);
	standin_cleanup(&p);
}

#define CUA_CALL                                                                                             \
	"{\"argv\":[\"cua-driver\",\"call\",\"get_desktop_state\",\"--json\","                               \
	"\"{\\\"screenshot_out_file\\\":\\\"/var/tmp/shot-%d.png\\\"}\"],\"timeout\":%d}"

/* Decodes a PNG; true when every pixel has the colour of the first, which
 * goes to rgb_out. */
static bool png_solid_colour(const char *path, unsigned char rgb_out[3])
{
	png_image image;
	memset(&image, 0, sizeof image);
	image.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_file(&image, path))
		return false;
	image.format = PNG_FORMAT_RGB;
	size_t size = PNG_IMAGE_SIZE(image);
	unsigned char *pixels = malloc(size);
	bool ok = pixels && png_image_finish_read(&image, NULL, pixels, 0, NULL);
	for (size_t i = 3; ok && i < size; i += 3)
		ok = memcmp(pixels, pixels + i, 3) == 0;
	if (ok)
		memcpy(rgb_out, pixels, 3);
	free(pixels);
	png_image_free(&image);
	return ok && size > 0;
}

static void test_fake_cua_driver(void **state)
{
	(void)state;
	standin_reply r;
	char body[512];
	unsigned char colour[2][3];
	for (int i = 0; i < 2; i++) {
		snprintf(body, sizeof body, CUA_CALL, i, 60);
		assert_int_equal(exec_body(body, &r), 200);
		int64_t rc = -1;
		assert_true(jsonx_get_int(r.json, "rc", &rc));
		assert_int_equal(rc, 0);
		json_object *printed = jsonx_parse_str(jsonx_get_str(r.json, "output"), NULL, 0);
		char expected[64];
		snprintf(expected, sizeof expected, "/var/tmp/shot-%d.png", i);
		assert_non_null(printed);
		assert_int_equal(json_object_object_length(printed), 1);
		assert_string_equal(jsonx_get_str(printed, "screenshot_file_path"), expected);
		json_object_put(printed);
		standin_reply_free(&r);
		/* A valid PNG of one solid colour. */
		char rel[64];
		snprintf(rel, sizeof rel, "guest/var-tmp/shot-%d.png", i);
		char *path = standin_lease_path(&proc, vm, rel);
		assert_true(png_solid_colour(path, colour[i]));
		free(path);
	}
	/* Before and after differ. */
	assert_memory_not_equal(colour[0], colour[1], 3);
	/* Anything but the exact argv is refused with exit 2. */
	assert_int_equal(exec_body("{\"argv\":[\"cua-driver\",\"serve\"]}", &r), 200);
	int64_t rc = 0;
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	assert_int_equal(rc, 2);
	standin_reply_free(&r);
}

static void test_capture_modes(void **state)
{
	(void)state;
	char body[512];
	standin_reply r;
	int64_t rc = 0;
	const char *fail_args[] = {"--capture", "fail", NULL};
	assert_int_equal(start_with(fail_args), 0);
	snprintf(body, sizeof body, CUA_CALL, 0, 60);
	assert_int_equal(exec_body(body, &r), 200);
	assert_true(jsonx_get_int(r.json, "rc", &rc));
	assert_int_equal(rc, 1);
	standin_reply_free(&r);
	teardown(NULL);

	const char *hang_args[] = {"--capture", "hang", NULL};
	assert_int_equal(start_with(hang_args), 0);
	snprintf(body, sizeof body, CUA_CALL, 0, 1);
	assert_int_equal(exec_body(body, &r), 409);
	assert_string_equal(standin_error_text(&r), "ssh failed");
	standin_reply_free(&r);
	teardown(NULL);

	const char *none_args[] = {"--capture", "none", NULL};
	assert_int_equal(start_with(none_args), 0);
	assert_int_equal(exec_body("{\"argv\":[\"sh\",\"-c\",\"command -v cua-driver || echo absent\"]}", &r),
	                 200);
	assert_string_equal(jsonx_get_str(r.json, "output"), "absent\n");
	standin_reply_free(&r);
	teardown(NULL);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_argv_quoting_and_output_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_script_mode_and_validation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_timeout_answers_ssh_failed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_output_keeps_the_last_64000_characters, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_namespace_isolation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_push_and_pull, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_isolation_none_limits_paths, setup_none, teardown),
	    cmocka_unit_test_setup_teardown(test_release_cancels_running_exec_and_second_release, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_operations_on_one_machine_run_one_at_a_time, setup,
	                                    teardown),
	    cmocka_unit_test(test_unprivileged_user_namespace),
	    cmocka_unit_test_setup_teardown(test_fake_cua_driver, setup, teardown),
	    cmocka_unit_test(test_capture_modes),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
