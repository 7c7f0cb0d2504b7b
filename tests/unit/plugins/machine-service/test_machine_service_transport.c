/*
 * The service-mediated transport of the machine-service plugin against the
 * real stand-in: exec (output, exit codes, working folder, environment,
 * the timeout), push of files and trees (parents made, trees moved into
 * place rather than nested), pull into a fresh staging folder (links and
 * special files refused in the guest), transient retries of transfers and
 * the transport choice of profile/backends.c.
 */
#include "machine_service_fixture.h"

#include <sys/stat.h>

#include "profile/backends.h"

static ms_fixture fx;
static char *lease_text;
static relay_transport_conn *conn;
static char guest_root[256];
static char local_dir[256];

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof fx);
	if (access(ms_plugin_path(), R_OK) != 0 || access(standin_binary_path(), X_OK) != 0)
		return 0; /* each test skips with the reason */
	ms_start_standin(&fx, NULL);
	ms_load(&fx, "{\"destructionCheck\":\"service\"}");
	relay_error err;
	const char *purpose = "relay-xfer-0badc0de";
	if (ms_acquire_lease(&fx, purpose, "ubuntu2404", false, &lease_text, &err) != RELAY_OK) {
		fprintf(stderr, "acquire failed: %s\n", err.message);
		return -1;
	}
	snprintf(guest_root, sizeof guest_root, "/var/tmp/2026-01-01-00-00-00-Z-mcp-relay-%s", purpose);
	if (fx.plugin->transport.open(fx.plugin->state, lease_text, NULL, 0, &conn, &err) != RELAY_OK) {
		fprintf(stderr, "open failed: %s\n", err.message);
		return -1;
	}
	snprintf(local_dir, sizeof local_dir, "/tmp/ms-xfer-local-XXXXXX");
	if (mkdtemp(local_dir) == NULL)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (conn)
		fx.plugin->transport.close(fx.plugin->state, conn, 0);
	conn = NULL;
	free(lease_text);
	lease_text = NULL;
	ms_teardown(&fx);
	relay_error err;
	if (local_dir[0])
		fs_remove_tree(local_dir, &err);
	local_dir[0] = '\0';
	return 0;
}

/* Runs argv in the guest; returns the status and fills res. */
static relay_status run(const char *const *argv, const char *cwd, const char *const *envp,
                        uint64_t timeout_ms, unsigned flags, relay_exec_result *res)
{
	relay_exec_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.cwd = cwd;
	req.envp = envp;
	req.timeout_ms = timeout_ms;
	memset(res, 0, sizeof *res);
	res->struct_size = sizeof *res;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = fx.plugin->transport.exec(fx.plugin->state, conn, &req, NULL, flags, res, &err);
	if (st != RELAY_OK)
		fprintf(stderr, "exec: %s\n", err.message);
	return st;
}

static void release_result(relay_exec_result *res)
{
	free(res->out);
	free(res->err);
}

static char *guest_path(const char *rel)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", guest_root, rel) < 0)
		return NULL;
	return p;
}

static char *sh(const char *script)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	relay_exec_result res;
	assert_int_equal(run(argv, NULL, NULL, 20000, RELAY_EXEC_MERGE_OUTPUT, &res), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	free(res.err);
	return res.out;
}

static void write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

static char *read_file(const char *path)
{
	char *data = NULL;
	size_t len = 0;
	relay_error err;
	if (fs_read_file(path, 1 << 20, &data, &len, &err) != RELAY_OK)
		return NULL;
	return data;
}

/* ---- exec ---------------------------------------------------------------------------------- */

static void test_exec_output_exit_cwd_env(void **state)
{
	(void)state;
	ms_require_builds();
	relay_exec_result res;
	const char *echo[] = {"printf", "%s|%s", "two words", "$HOME;`x`", NULL};
	assert_int_equal(run(echo, NULL, NULL, 10000, 0, &res), RELAY_OK);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "two words|$HOME;`x`"); /* each element passed unchanged */
	assert_string_equal(res.err, "");
	assert_true(res.termination_confirmed);
	release_result(&res);

	const char *fail[] = {"/bin/sh", "-c", "echo out; echo err >&2; exit 7", NULL};
	assert_int_equal(run(fail, NULL, NULL, 10000, RELAY_EXEC_MERGE_OUTPUT, &res), RELAY_OK);
	assert_int_equal(res.exit_code, 7);
	assert_string_equal(res.out, "out\nerr\n");
	assert_null(res.err);
	release_result(&res);

	char *made = sh("mkdir -p /var/tmp/ms-cwd-test && echo ok");
	free(made);
	const char *where[] = {"/bin/sh", "-c", "pwd; echo \"$RELAY_A-$RELAY_B\"", NULL};
	const char *envp[] = {"RELAY_A=1", "RELAY_B=two words", NULL};
	assert_int_equal(run(where, "/var/tmp/ms-cwd-test", envp, 10000, 0, &res), RELAY_OK);
	assert_string_equal(res.out, "/var/tmp/ms-cwd-test\n1-two words\n");
	release_result(&res);

	/* Output over the cap: the tail is kept when asked. */
	const char *many[] = {"/bin/sh", "-c", "i=0; while [ $i -lt 100 ]; do echo line$i; i=$((i+1)); done",
	                      NULL};
	relay_exec_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = many;
	req.timeout_ms = 10000;
	req.max_output_bytes = 8;
	memset(&res, 0, sizeof res);
	res.struct_size = sizeof res;
	relay_error err;
	assert_int_equal(
	    fx.plugin->transport.exec(fx.plugin->state, conn, &req, NULL, RELAY_EXEC_KEEP_TAIL, &res, &err),
	    RELAY_OK);
	assert_true(res.output_truncated);
	assert_int_equal(res.out_len, 8);
	assert_non_null(strstr(res.out, "line99"));
	release_result(&res);
}

static void test_exec_timeout_is_reported(void **state)
{
	(void)state;
	ms_require_builds();
	const char *slow[] = {"sleep", "5", NULL};
	relay_exec_result res;
	/* 1 s, sent as the whole second 1; the service kills at it. */
	assert_int_equal(run(slow, NULL, NULL, 900, 0, &res), RELAY_OK);
	assert_true(res.timed_out);
	assert_false(res.termination_confirmed);
	release_result(&res);
	json_object *reqs = ms_requests(&fx, "POST", NULL);
	bool found = false;
	for (size_t i = 0; i < json_object_array_length(reqs); i++) {
		json_object *e = json_object_array_get_idx(reqs, i);
		if (strstr(jsonx_get_str(e, "path"), "/exec") == NULL ||
		    strstr(jsonx_get_str(e, "body"), "sleep") == NULL)
			continue;
		json_object *body = ms_parse(jsonx_get_str(e, "body"));
		int64_t timeout = 0;
		assert_true(jsonx_get_int(body, "timeout", &timeout));
		assert_int_equal(timeout, 1);
		json_object_put(body);
		found = true;
	}
	assert_true(found);
	json_object_put(reqs);
}

static void test_exec_failures(void **state)
{
	(void)state;
	ms_require_builds();
	relay_exec_result res;
	const char *cmd[] = {"true", NULL};
	/* A 500 answer: the command may have run. */
	ms_fault(&fx, "{\"route\":\"exec\",\"status\":500,\"times\":1}");
	assert_int_equal(run(cmd, NULL, NULL, 10000, 0, &res), RELAY_E_INDETERMINATE);
	/* A dropped connection: the same. */
	ms_fault(&fx, "{\"route\":\"exec\",\"dropConnection\":true,\"times\":1}");
	assert_int_equal(run(cmd, NULL, NULL, 10000, 0, &res), RELAY_E_INDETERMINATE);
	/* Exec is never retried by the transport. */
	size_t before = ms_count_requests(&fx, "POST", NULL);
	ms_fault(&fx, "{\"route\":\"exec\",\"status\":503,\"times\":1}");
	assert_int_equal(run(cmd, NULL, NULL, 10000, 0, &res), RELAY_E_INDETERMINATE);
	assert_int_equal(ms_count_requests(&fx, "POST", NULL), before + 1);
	/* Unknown flags. */
	assert_int_equal(run(cmd, NULL, NULL, 10000, 0x80, &res), RELAY_E_UNSUPPORTED_FLAGS);
}

/* ---- push and pull ---------------------------------------------------------------------------- */

static void test_push_file_makes_parents(void **state)
{
	(void)state;
	ms_require_builds();
	char local[PATH_MAX];
	snprintf(local, sizeof local, "%s/hello.txt", local_dir);
	write_file(local, "hello\n");
	char *remote = guest_path("support/a/b/hello.txt");
	relay_error err;
	char *facts = (char *)1;
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, remote, NULL, 0, &facts, &err),
	    RELAY_OK);
	assert_null(facts); /* the core verifies through the receiver */
	char script[8192];
	snprintf(script, sizeof script, "cat %s", remote);
	char *out = sh(script);
	assert_string_equal(out, "hello\n");
	free(out);
	/* Pushing again replaces the file. */
	write_file(local, "again\n");
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, remote, NULL, 0, NULL, &err), RELAY_OK);
	out = sh(script);
	assert_string_equal(out, "again\n");
	free(out);
	/* A folder in the way is refused. */
	char *folder = guest_path("support/a");
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, folder, NULL, 0, NULL, &err),
	    RELAY_E_INVALID_ARGUMENT);
	/* Paths a remote shell would split are refused before anything is sent. */
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, "/var/tmp/a b", NULL, 0, NULL, &err),
	    RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, "relative", NULL, 0, NULL, &err),
	    RELAY_E_INVALID_ARGUMENT);
	free(folder);
	free(remote);
}

static void test_push_tree_fills_the_folder(void **state)
{
	(void)state;
	ms_require_builds();
	char tree[PATH_MAX], sub[PATH_MAX + 8], file[PATH_MAX + 32];
	snprintf(tree, sizeof tree, "%s/ws", local_dir);
	mkdir(tree, 0700);
	snprintf(sub, sizeof sub, "%s/sub", tree);
	mkdir(sub, 0700);
	snprintf(file, sizeof file, "%s/top.txt", tree);
	write_file(file, "top\n");
	snprintf(file, sizeof file, "%s/sub/inner.txt", tree);
	write_file(file, "inner\n");
	char *remote = guest_path("workspace");
	relay_error err;
	assert_int_equal(fx.plugin->transport.push(fx.plugin->state, conn, tree, remote, NULL,
	                                           RELAY_XFER_TREE, NULL, &err),
	                 RELAY_OK);
	/* Again into the existing folder: merged, never nested as workspace/ws. */
	snprintf(file, sizeof file, "%s/second.txt", tree);
	write_file(file, "second\n");
	assert_int_equal(fx.plugin->transport.push(fx.plugin->state, conn, tree, remote, NULL,
	                                           RELAY_XFER_TREE, NULL, &err),
	                 RELAY_OK);
	char script[8192];
	snprintf(script, sizeof script, "cd %s && find . | sort && ls -a .. | grep -c relay-push || true",
	         remote);
	char *out = sh(script);
	assert_string_equal(out, ".\n./second.txt\n./sub\n./sub/inner.txt\n./top.txt\n0\n");
	free(out);
	/* A local tree with a symbolic link is refused before anything is sent. */
	snprintf(file, sizeof file, "%s/link", tree);
	assert_int_equal(symlink("/etc/passwd", file), 0);
	assert_int_equal(fx.plugin->transport.push(fx.plugin->state, conn, tree, remote, NULL,
	                                           RELAY_XFER_TREE, NULL, &err),
	                 RELAY_E_UNSAFE_PATH);
	free(remote);
}

static void test_pull_file_and_tree(void **state)
{
	(void)state;
	ms_require_builds();
	char script[8192];
	snprintf(script, sizeof script,
	         "mkdir -p %s/workspace/out/deep && printf one > %s/workspace/out/a.txt && printf two > "
	         "%s/workspace/out/deep/b.txt && echo ok",
	         guest_root, guest_root, guest_root);
	free(sh(script));
	char *remote_file = guest_path("workspace/out/a.txt");
	char *remote_tree = guest_path("workspace/out");
	char local_file[PATH_MAX + 16], local_tree[PATH_MAX + 16];
	snprintf(local_file, sizeof local_file, "%s/a.txt", local_dir);
	snprintf(local_tree, sizeof local_tree, "%s/tree", local_dir);
	relay_error err;
	assert_int_equal(
	    fx.plugin->transport.pull(fx.plugin->state, conn, remote_file, local_file, NULL, 0, NULL, &err),
	    RELAY_OK);
	char *data = read_file(local_file);
	assert_string_equal(data, "one");
	free(data);
	struct stat st;
	assert_int_equal(stat(local_file, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* The destination must not exist. */
	assert_int_equal(
	    fx.plugin->transport.pull(fx.plugin->state, conn, remote_file, local_file, NULL, 0, NULL, &err),
	    RELAY_E_IO);
	assert_int_equal(fx.plugin->transport.pull(fx.plugin->state, conn, remote_tree, local_tree, NULL,
	                                           RELAY_XFER_TREE, NULL, &err),
	                 RELAY_OK);
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/deep/b.txt", local_tree);
	data = read_file(path);
	assert_string_equal(data, "two");
	free(data);
	assert_int_equal(stat(local_tree, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	/* The kinds must agree. */
	snprintf(path, sizeof path, "%s/wrong", local_dir);
	assert_int_equal(
	    fx.plugin->transport.pull(fx.plugin->state, conn, remote_tree, path, NULL, 0, NULL, &err),
	    RELAY_E_INVALID_ARGUMENT);
	/* A missing guest path. */
	char *missing = guest_path("workspace/nothing");
	assert_int_equal(
	    fx.plugin->transport.pull(fx.plugin->state, conn, missing, path, NULL, 0, NULL, &err),
	    RELAY_E_NOT_FOUND);
	/* The staging folders are gone afterwards. */
	char staging[PATH_MAX + 32];
	snprintf(staging, sizeof staging, "%s/transfer-tmp", fx.state_dir);
	char *left = NULL;
	snprintf(script, sizeof script, "ls -A %s | wc -l", staging);
	FILE *p = popen(script, "r");
	char count[32] = "";
	assert_non_null(fgets(count, sizeof count, p));
	pclose(p);
	assert_int_equal(atoi(count), 0);
	free(left);
	free(missing);
	free(remote_file);
	free(remote_tree);
}

static void test_pull_refuses_links_in_the_guest(void **state)
{
	(void)state;
	ms_require_builds();
	char script[8192];
	snprintf(script, sizeof script,
	         "mkdir -p %s/workspace/linked && printf x > %s/workspace/linked/ok.txt && ln -s /etc/passwd "
	         "%s/workspace/linked/escape && ln -s /etc/hostname %s/workspace/solo && echo ok",
	         guest_root, guest_root, guest_root, guest_root);
	free(sh(script));
	char *tree = guest_path("workspace/linked");
	char *solo = guest_path("workspace/solo");
	char local[PATH_MAX + 16];
	snprintf(local, sizeof local, "%s/linked", local_dir);
	relay_error err;
	assert_int_equal(
	    fx.plugin->transport.pull(fx.plugin->state, conn, tree, local, NULL, RELAY_XFER_TREE, NULL, &err),
	    RELAY_E_UNSAFE_PATH);
	assert_false(fs_exists_nofollow(local));
	assert_int_equal(fx.plugin->transport.pull(fx.plugin->state, conn, solo, local, NULL, 0, NULL, &err),
	                 RELAY_E_UNSAFE_PATH);
	assert_false(fs_exists_nofollow(local));
	free(tree);
	free(solo);
}

static void test_transfers_retry_transient_failures_only(void **state)
{
	(void)state;
	ms_require_builds();
	char local[PATH_MAX + 16];
	snprintf(local, sizeof local, "%s/r.txt", local_dir);
	write_file(local, "retry\n");
	char *remote = guest_path("support/r.txt");
	char path[512];
	json_object *doc = ms_parse(lease_text);
	snprintf(path, sizeof path, "/machines/%s/push", jsonx_get_str(doc, "vm"));
	json_object_put(doc);
	relay_error err;
	/* A 503 then success: tried again after 250 ms. */
	ms_fault(&fx, "{\"route\":\"push\",\"status\":503,\"times\":1}");
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, remote, NULL, 0, NULL, &err), RELAY_OK);
	assert_int_equal(ms_count_requests(&fx, "POST", path), 2);
	/* scp failures three times: transfer-failed after three attempts. */
	ms_fault(&fx,
	         "{\"route\":\"push\",\"status\":409,\"times\":3,\"error\":\"scp failed: lost connection\"}");
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, remote, NULL, 0, NULL, &err),
	    RELAY_E_TRANSIENT);
	assert_non_null(strstr(err.message, "after 3 attempts"));
	assert_int_equal(ms_count_requests(&fx, "POST", path), 5);
	/* A definite refusal is not tried again. */
	ms_fault(
	    &fx,
	    "{\"route\":\"push\",\"status\":409,\"times\":1,\"error\":\"Transfer path overlaps private lease "
	    "SSH material\"}");
	assert_int_equal(
	    fx.plugin->transport.push(fx.plugin->state, conn, local, remote, NULL, 0, NULL, &err),
	    RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "Transfer path overlaps private lease SSH material"));
	assert_int_equal(ms_count_requests(&fx, "POST", path), 6);
	/* A dropped connection on pull is retried too. */
	char local_pull[PATH_MAX + 16];
	snprintf(local_pull, sizeof local_pull, "%s/pulled.txt", local_dir);
	ms_fault(&fx, "{\"route\":\"pull\",\"dropConnection\":true,\"times\":1}");
	assert_int_equal(
	    fx.plugin->transport.pull(fx.plugin->state, conn, remote, local_pull, NULL, 0, NULL, &err),
	    RELAY_OK);
	char *data = read_file(local_pull);
	assert_string_equal(data, "retry\n");
	free(data);
	free(remote);
}

/* profile/backends.c: transfer-ssh for leases with an SSH endpoint, the
 * service's own transport otherwise. */
static void test_transport_choice(void **state)
{
	(void)state;
	ms_require_builds();
	relay_backends b;
	memset(&b, 0, sizeof b);
	loaded_plugin ssh;
	memset(&ssh, 0, sizeof ssh);
	ssh.descriptor.kinds = RELAY_KIND_TRANSPORT;
	b.plugins[SLOT_MACHINE] = fx.plugin;
	b.plugins[SLOT_TRANSPORT] = &ssh;
	assert_ptr_equal(backends_transport_for(&b, lease_text), fx.plugin);
	const char *with_ssh = "{\"vm\":\"x\",\"ssh\":{\"host\":\"127.0.0.1\",\"port\":22,\"user\":\"admin\","
	                       "\"identityFile\":\"/k\",\"knownHostsFile\":\"/h\"}}";
	assert_ptr_equal(backends_transport_for(&b, with_ssh), &ssh);
	/* Without transfer-ssh installed the service transport still serves. */
	b.plugins[SLOT_TRANSPORT] = NULL;
	assert_ptr_equal(backends_transport_for(&b, with_ssh), fx.plugin);
	char not_installed[] = "no plugin named transfer-ssh";
	b.load_errors[SLOT_TRANSPORT] = not_installed;
	b.load_status[SLOT_TRANSPORT] = RELAY_E_NOT_FOUND;
	assert_ptr_equal(backends_transport_for(&b, with_ssh), fx.plugin);
	/* Installed but refused to start (bad options): no quiet fallback for
	 * SSH leases; the caller reports the load error. Others are unaffected. */
	char refused[] = "transfer-ssh: options.spareSessions must be ...";
	b.load_errors[SLOT_TRANSPORT] = refused;
	b.load_status[SLOT_TRANSPORT] = RELAY_E_INVALID_ARGUMENT;
	assert_null(backends_transport_for(&b, with_ssh));
	assert_ptr_equal(backends_transport_for(&b, lease_text), fx.plugin);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_exec_output_exit_cwd_env, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_exec_timeout_is_reported, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_exec_failures, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_push_file_makes_parents, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_push_tree_fills_the_folder, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pull_file_and_tree, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pull_refuses_links_in_the_guest, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transfers_retry_transient_failures_only, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_transport_choice, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
