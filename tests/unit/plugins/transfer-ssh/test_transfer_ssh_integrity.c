/*
 * transfer-ssh's hash checks and host-side refusals, against a real sshd
 * whose sessions find a tampering `tar` first on PATH (sshd_config SetEnv).
 * The stand-in runs the real tar and, when a marker file in the guest root
 * asks for it, changes what tar moves: one bit flipped in a file's data on
 * its way into tar (a push whose guest copy no longer matches what was
 * sent), one byte appended before packing (a pull whose bytes no longer
 * match the guest's facts),
 * the list of hashes the host appends to a push stream changed (so only the
 * guest's own comparison can catch it), or a symbolic link slipped into a
 * tree after the guest-side check (which the host must refuse while
 * unpacking).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "transfer_ssh_fixture.h"

typedef struct integrity_suite {
	ssh_fixture fx;
	ssh_plugin_handle plugin;
	relay_transport_conn *conn;
	const char *skip_reason;
	char local[64];
	char fakebin[128];
} integrity_suite;

static integrity_suite suite;

/* The tampering tar; %s is the guest root holding the marker files. */
static const char fake_tar[] =
    "#!/bin/sh\n"
    "# test stand-in: the real tar, with damage asked for by a marker file\n"
    "real=/usr/bin/tar\n"
    "[ -x \"$real\" ] || real=/bin/tar\n"
    "markers='%s'\n"
    "mode= dir=. prev= last=\n"
    "for a in \"$@\"; do\n"
    "  [ \"$prev\" = -C ] && dir=$a\n"
    "  case $a in -x) mode=x ;; -c) mode=c ;; esac\n"
    "  prev=$a last=$a\n"
    "done\n"
    "first() { find \"$1\" -type f ! -name '.*' | LC_ALL=C sort | head -n 1; }\n"
    "# Flips one bit in the data of the first member named f00 or f: damage in transit.\n"
    "flip() {\n"
    "  perl -e 'binmode STDIN; binmode STDOUT; my $done = 0;\n"
    "    while (read(STDIN, my $h, 512) == 512) {\n"
    "      print $h;\n"
    "      my $name = unpack(\"Z100\", $h);\n"
    "      my $size = oct((unpack(\"x124 A12\", $h) =~ s/[^0-7]//gr) || 0);\n"
    "      my $pad = ($size + 511) & ~511;\n"
    "      next if $pad == 0;\n"
    "      read(STDIN, my $d, $pad);\n"
    "      if (!$done && $name =~ m{(^|/)(f00|f)$}) { substr($d, 0, 1) = chr(ord(substr($d, 0, 1)) ^ 1); "
    "$done = 1 }\n"
    "      print $d;\n"
    "    }\n"
    "    print while read(STDIN, $_, 65536);'\n"
    "}\n"
    "if [ \"$mode\" = x ]; then\n"
    "  if [ -e \"$markers/.tamper-push\" ]; then flip | \"$real\" \"$@\"; st=$?; else \"$real\" \"$@\"; "
    "st=$?; fi\n"
    "  [ \"$st\" = 0 ] || exit \"$st\"\n"
    "  if [ -e \"$markers/.tamper-list\" ]; then for f in \"$dir\"/.relay-expected-*; do printf X >> \"$f\"; "
    "done; fi\n"
    "  exit 0\n"
    "fi\n"
    "if [ \"$mode\" = c ]; then\n"
    "  if [ -e \"$markers/.tamper-pull\" ]; then f=$(first \"$last\"); printf X >> \"$f\"; fi\n"
    "  if [ -e \"$markers/.tamper-link\" ] && [ -d \"$last\" ]; then ln -s /etc/passwd "
    "\"$last/zz-late-link\"; fi\n"
    "fi\n"
    "exec \"$real\" \"$@\"\n";

static int group_setup(void **state)
{
	(void)state;
	suite.skip_reason = ssh_fixture_missing();
	if (suite.skip_reason == NULL && system("command -v perl >/dev/null 2>&1") != 0)
		suite.skip_reason = "perl is missing; the tampering tar stand-in needs it to damage a stream";
	if (suite.skip_reason)
		return 0;
	strcpy(suite.local, "/tmp/relay-ssh-local-XXXXXX");
	if (mkdtemp(suite.local) == NULL)
		return -1;
	snprintf(suite.fakebin, sizeof suite.fakebin, "%s/fakebin", suite.local);
	mkdir(suite.fakebin, 0755);
	char env[256];
	snprintf(env, sizeof env, "PATH=%s:/usr/local/bin:/usr/bin:/bin", suite.fakebin);
	if (ssh_fixture_start_env(&suite.fx, env, NULL) != 0 ||
	    ssh_plugin_load(&suite.plugin, "transfer-ssh", RELAY_KIND_TRANSPORT) != 0)
		return -1;
	char script[4096], path[256];
	snprintf(script, sizeof script, fake_tar, suite.fx.guest_root);
	snprintf(path, sizeof path, "%s/tar", suite.fakebin);
	fixture_write(path, script);
	chmod(path, 0755);
	relay_error err = {0};
	if (suite.plugin.plugin->transport.open(suite.plugin.plugin->state, suite.fx.lease, NULL, 0,
	                                        &suite.conn, &err) != RELAY_OK) {
		fprintf(stderr, "open failed: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (suite.skip_reason)
		return 0;
	if (suite.conn)
		suite.plugin.plugin->transport.close(suite.plugin.plugin->state, suite.conn, 0);
	ssh_plugin_unload(&suite.plugin);
	ssh_fixture_stop(&suite.fx);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", suite.local);
	fixture_run(cmd);
	return 0;
}

#define SKIP_WITHOUT_SSHD() SSH_SKIP_IF(suite.skip_reason)

#define assert_status(expr, expected)                                                                        \
	do {                                                                                                 \
		relay_status got_ = (expr);                                                                  \
		if (got_ != (expected))                                                                      \
			fprintf(stderr, "got %s: %s\n", relay_status_str(got_), err.message);                \
		assert_int_equal(got_, (expected));                                                          \
	} while (0)

static void marker(const char *name, bool on)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", suite.fx.guest_root, name);
	if (on)
		fixture_write(path, "");
	else
		unlink(path);
}

static relay_status push(const char *local, const char *remote, unsigned flags, char **facts,
                         relay_error *err)
{
	memset(err, 0, sizeof *err);
	return suite.plugin.plugin->transport.push(suite.plugin.plugin->state, suite.conn, local, remote,
	                                           NULL, flags, facts, err);
}

static relay_status pull(const char *remote, const char *local, unsigned flags, char **facts,
                         relay_error *err)
{
	memset(err, 0, sizeof *err);
	return suite.plugin.plugin->transport.pull(suite.plugin.plugin->state, suite.conn, remote, local,
	                                           NULL, flags, facts, err);
}

static void test_untampered_round_trip(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	/* The stand-in is on PATH but idle: transfers succeed. */
	char src[256], dst[256], back[256];
	snprintf(src, sizeof src, "%s/plain.bin", suite.local);
	snprintf(dst, sizeof dst, "%s/plain.bin", suite.fx.guest_root);
	snprintf(back, sizeof back, "%s/plain-back.bin", suite.local);
	assert_int_equal(fixture_random_file(src, 70000, 9, 0600), 0);
	relay_error err;
	assert_status(push(src, dst, 0, NULL, &err), RELAY_OK);
	assert_status(pull(dst, back, 0, NULL, &err), RELAY_OK);
	assert_true(fixture_same_file(src, back));
}

static void test_push_detects_changed_guest_copy(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char src[256], dst[256], path[300];
	snprintf(src, sizeof src, "%s/push-tree", suite.local);
	snprintf(dst, sizeof dst, "%s/pushed-tree", suite.fx.guest_root);
	mkdir(src, 0755);
	for (int i = 0; i < 20; i++) {
		snprintf(path, sizeof path, "%s/f%02d", src, i);
		assert_int_equal(fixture_random_file(path, 1000 + (size_t)i, (unsigned)i, 0644), 0);
	}
	relay_error err;
	char *facts = NULL;
	marker(".tamper-push", true);
	assert_status(push(src, dst, RELAY_XFER_TREE, &facts, &err), RELAY_E_INTEGRITY);
	assert_null(facts);
	assert_non_null(strstr(err.message, "f00"));
	/* Nothing under the destination's name, no temporary copy left. */
	assert_false(fixture_exists(dst));
	assert_int_equal(fixture_count_prefix(suite.fx.guest_root, ".relay-push-"), 0);

	snprintf(path, sizeof path, "%s/f05", src);
	snprintf(dst, sizeof dst, "%s/pushed-file", suite.fx.guest_root);
	assert_status(push(path, dst, 0, NULL, &err), RELAY_E_INTEGRITY);
	assert_false(fixture_exists(dst));
	assert_int_equal(fixture_count_prefix(suite.fx.guest_root, ".relay-push-"), 0);
	marker(".tamper-push", false);

	assert_status(push(path, dst, 0, NULL, &err), RELAY_OK);
	assert_true(fixture_same_file(path, dst));
}

static void test_guest_compares_before_replacing(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char src[256], dst[256];
	snprintf(src, sizeof src, "%s/listed.bin", suite.local);
	snprintf(dst, sizeof dst, "%s/listed.bin", suite.fx.guest_root);
	assert_int_equal(fixture_random_file(src, 4096, 77, 0600), 0);
	fixture_write(dst, "the old content stays\n");
	relay_error err;
	marker(".tamper-list", true);
	assert_status(push(src, dst, 0, NULL, &err), RELAY_E_INTEGRITY);
	marker(".tamper-list", false);
	assert_non_null(strstr(err.message, "nothing was replaced"));
	char old[64] = {0};
	FILE *f = fopen(dst, "r");
	assert_non_null(f);
	assert_non_null(fgets(old, sizeof old, f));
	fclose(f);
	assert_string_equal(old, "the old content stays\n");
	assert_int_equal(fixture_count_prefix(suite.fx.guest_root, ".relay-push-"), 0);
}

/* RELAY_XFER_CALLER_VERIFIES: the caller scans the copy itself, so the
 * push hashes nothing in the guest (wrappers around the guest's hash tools
 * log every call), returns no facts, and a copy damaged in transit is not
 * the transport's to notice any more. Without the flag the tools run. The
 * flag means nothing to a pull, which refuses it. */
static void test_caller_verified_push_hashes_nothing(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char src[256], dst[256], path[300], calls[256], wrapper[512];
	const char *tools[] = {"sha256sum", "openssl", "shasum"};
	snprintf(calls, sizeof calls, "%s/.hash-calls", suite.fx.guest_root);
	for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
		snprintf(
		    wrapper, sizeof wrapper,
		    "#!/bin/sh\necho \"%s $*\" >> '%s'\n"
		    "for d in /usr/bin /bin; do [ -x \"$d/%s\" ] && exec \"$d/%s\" \"$@\"; done\nexit 127\n",
		    tools[i], calls, tools[i], tools[i]);
		snprintf(path, sizeof path, "%s/%s", suite.fakebin, tools[i]);
		fixture_write(path, wrapper);
		chmod(path, 0755);
	}
	snprintf(src, sizeof src, "%s/unchecked-tree", suite.local);
	mkdir(src, 0755);
	for (int i = 0; i < 12; i++) {
		snprintf(path, sizeof path, "%s/f%02d", src, i);
		assert_int_equal(fixture_random_file(path, 3000 + (size_t)i, 100u + (unsigned)i, 0644), 0);
	}
	relay_error err;
	char *facts = (char *)"unset";
	snprintf(dst, sizeof dst, "%s/unchecked-tree", suite.fx.guest_root);
	assert_status(push(src, dst, RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES, &facts, &err), RELAY_OK);
	assert_null(facts);
	assert_true(fixture_same_tree(src, dst));
	assert_false(fixture_exists(calls));

	/* Damage in transit now passes the transport: the caller's scan is
	 * what catches it. */
	marker(".tamper-push", true);
	snprintf(dst, sizeof dst, "%s/unchecked-damaged", suite.fx.guest_root);
	assert_status(push(src, dst, RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES, NULL, &err), RELAY_OK);
	marker(".tamper-push", false);
	assert_false(fixture_same_tree(src, dst));
	assert_false(fixture_exists(calls));

	/* Without the flag the guest hashes. */
	snprintf(dst, sizeof dst, "%s/checked-tree", suite.fx.guest_root);
	assert_status(push(src, dst, RELAY_XFER_TREE, &facts, &err), RELAY_OK);
	assert_non_null(facts);
	free(facts);
	assert_true(fixture_exists(calls));

	snprintf(path, sizeof path, "%s/unchecked-back", suite.local);
	assert_status(pull(dst, path, RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES, NULL, &err),
	              RELAY_E_UNSUPPORTED_FLAGS);
	for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", suite.fakebin, tools[i]);
		unlink(path);
	}
	unlink(calls);
}

static void test_pull_detects_changed_bytes(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char tree[256], path[300], local[256];
	snprintf(tree, sizeof tree, "%s/pull-tree", suite.fx.guest_root);
	snprintf(local, sizeof local, "%s/pulled-tree", suite.local);
	mkdir(tree, 0700);
	for (int i = 0; i < 10; i++) {
		snprintf(path, sizeof path, "%s/g%02d", tree, i);
		assert_int_equal(fixture_random_file(path, 500 + (size_t)i, (unsigned)i + 50, 0600), 0);
	}
	relay_error err;
	char *facts = NULL;
	marker(".tamper-pull", true);
	assert_status(pull(tree, local, RELAY_XFER_TREE, &facts, &err), RELAY_E_INTEGRITY);
	assert_null(facts);
	assert_false(fixture_exists(local));
	assert_int_equal(fixture_count_prefix(suite.local, ".pulled-tree"), 0);

	snprintf(path, sizeof path, "%s/g03", tree);
	snprintf(local, sizeof local, "%s/pulled-file", suite.local);
	assert_status(pull(path, local, 0, NULL, &err), RELAY_E_INTEGRITY);
	assert_false(fixture_exists(local));
	assert_int_equal(fixture_count_prefix(suite.local, ".pulled-file"), 0);
	marker(".tamper-pull", false);
}

static void test_host_refuses_late_link(void **state)
{
	(void)state;
	SKIP_WITHOUT_SSHD();
	char tree[256], path[300], local[256];
	snprintf(tree, sizeof tree, "%s/late-link-tree", suite.fx.guest_root);
	snprintf(local, sizeof local, "%s/late-link", suite.local);
	mkdir(tree, 0700);
	snprintf(path, sizeof path, "%s/a.txt", tree);
	fixture_write(path, "a\n");
	relay_error err;
	marker(".tamper-link", true);
	/* The guest-side check passed; the link appears before tar runs, so
	 * only the host's own check while unpacking stands in the way. */
	assert_status(pull(tree, local, RELAY_XFER_TREE, NULL, &err), RELAY_E_UNSAFE_PATH);
	assert_non_null(strstr(err.message, "zz-late-link"));
	assert_non_null(strstr(err.message, "symbolic link"));
	assert_false(fixture_exists(local));
	assert_int_equal(fixture_count_prefix(suite.local, ".late-link"), 0);
	marker(".tamper-link", false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_untampered_round_trip),
	    cmocka_unit_test(test_push_detects_changed_guest_copy),
	    cmocka_unit_test(test_guest_compares_before_replacing),
	    cmocka_unit_test(test_pull_detects_changed_bytes),
	    cmocka_unit_test(test_host_refuses_late_link),
	    cmocka_unit_test(test_caller_verified_push_hashes_nothing),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
