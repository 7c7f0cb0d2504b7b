/*
 * test_machine_local_lifecycle — machine-local guests, really made (root):
 * release leaves no process, mount, folder or cgroup; a guest cannot see
 * host processes; what is written at / stays in the guest; four guests at
 * once, each on its own; bad input (unknown image, a name in use, bad flags,
 * capacity) is refused clearly and changes nothing; renew, inspect,
 * find_by_purpose, binding, images and catalog.
 */
#include <dirent.h>
#include <pthread.h>
#include <sys/utsname.h>
#include <time.h>

#include "machine_local_fixture.h"

static size_t count_leases(ml_env *e)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/leases", e->state_dir);
	DIR *d = opendir(dir);
	size_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* Any host process still in the namespace whose inode is `ino`. */
static pid_t ns_member(const char *kind, unsigned long long ino)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = 0;
	while (!found && (de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		char path[400];
		snprintf(path, sizeof path, "/proc/%s/ns/%s", de->d_name, kind);
		struct stat sb;
		if (stat(path, &sb) == 0 && (unsigned long long)sb.st_ino == ino &&
		    ml_pid_alive(atoi(de->d_name)))
			found = atoi(de->d_name);
	}
	closedir(d);
	return found;
}

static void test_release_leaves_nothing(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, NULL);
	char *lease = ml_acquire(&e, "life-1", NULL);
	json_object *doc = ml_parse(lease);
	assert_string_equal(jsonx_get_str(doc, "state"), "running");
	assert_string_equal(jsonx_get_str(doc, "image"), "local");
	assert_non_null(jsonx_get_str(doc, "lease_id"));
	json_object *local = jsonx_get_obj(doc, "local");
	assert_non_null(local);
	int64_t init_pid = 0, pidns = 0, mntns = 0, helper = 0;
	assert_true(jsonx_get_int(local, "initPid", &init_pid) && init_pid > 1);
	jsonx_get_int(jsonx_get_obj(local, "namespaces"), "pid", &pidns);
	jsonx_get_int(jsonx_get_obj(local, "namespaces"), "mnt", &mntns);
	jsonx_get_int(jsonx_get_obj(jsonx_get_obj(local, "pids"), "helper"), "pid", &helper);
	char lease_dir[512], upper[512], cgroup[512];
	snprintf(lease_dir, sizeof lease_dir, "%s", jsonx_get_str(local, "leaseDir"));
	snprintf(upper, sizeof upper, "%s", jsonx_get_str(local, "upper"));
	const char *cg = jsonx_get_str(local, "cgroup");
	snprintf(cgroup, sizeof cgroup, "%s", cg ? cg : "");
	assert_true(fs_is_dir(upper));
	assert_true(ml_pid_alive((pid_t)init_pid));

	/* Processes that try to outlive the release: a daemon in its own
	 * session, and a plain background job. */
	relay_transport_conn *c = ml_open(&e, lease);
	assert_int_equal(ml_sh(&e, c,
	                       "setsid sleep 1000 </dev/null >/dev/null 2>&1 & sleep 1000 </dev/null "
	                       ">/dev/null 2>&1 & echo ok",
	                       NULL),
	                 0);
	char *out = NULL;
	assert_int_equal(ml_sh(&e, c, "ps -e -o comm= | grep -c sleep", &out), 0);
	assert_int_equal(atoi(out), 2);
	free(out);
	e.p->transport.close(e.p->state, c, 0);

	ml_release(&e, lease);
	assert_false(ml_pid_alive((pid_t)init_pid));
	if (helper)
		assert_false(ml_pid_alive((pid_t)helper));
	assert_int_equal(ns_member("pid", (unsigned long long)pidns), 0);
	assert_int_equal(ns_member("mnt", (unsigned long long)mntns), 0);
	assert_false(ml_mountinfo_mentions(lease_dir));
	assert_false(fs_exists_nofollow(lease_dir));
	assert_false(fs_exists_nofollow(upper));
	if (cgroup[0])
		assert_false(fs_exists_nofollow(cgroup));
	assert_int_equal(count_leases(&e), 0);

	/* A second release is "no longer known", and changes nothing. */
	relay_error err;
	assert_int_equal(e.p->machine.release(e.p->state, lease, "released", NULL, 0, &err),
	                 RELAY_E_NOT_FOUND);
	char *check = NULL;
	assert_int_equal(e.p->machine.verify_destroyed(e.p->state, lease, NULL, 0, &check, &err), RELAY_OK);
	free(check);
	json_object_put(doc);
	free(lease);
	ml_unload(&e, true);
}

static void test_guest_cannot_see_host_processes(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, NULL);
	char *lease = ml_acquire(&e, "iso-1", NULL);
	relay_transport_conn *c = ml_open(&e, lease);
	char *out = NULL;
	/* Every process the guest can see, with its command line. */
	assert_int_equal(
	    ml_sh(&e, c, "for d in /proc/[0-9]*; do echo \"${d#/proc/} $(tr '\\0' ' ' < $d/cmdline)\"; done",
	          &out),
	    0);
	int count = 0;
	char self[64];
	snprintf(self, sizeof self, "%d ", (int)getpid());
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		count++;
		assert_null(strstr(line, "test_machine_local")); /* the host test itself */
		assert_null(strstr(line, "slirp4netns"));        /* the host-side helper */
	}
	/* init, the shell, and the shell's children at most */
	assert_true(count >= 1 && count <= 5);
	free(out);
	assert_int_equal(ml_sh(&e, c, "tr '\\0' ' ' < /proc/1/cmdline", &out), 0);
	assert_non_null(strstr(out, "machine-local-init"));
	free(out);
	/* hostname = guest name; same kernel, so uname -sm is the host's */
	assert_int_equal(ml_sh(&e, c, "hostname; uname -sm; id -un; echo $HOME; pwd", &out), 0);
	struct utsname un;
	uname(&un);
	char expect[512];
	snprintf(expect, sizeof expect, "iso-1\n%s %s\nrelay\n/home/relay\n/home/relay\n", un.sysname,
	         un.machine);
	assert_string_equal(out, expect);
	free(out);
	/* The relay's state folder (every lease's upper layer) is hidden. */
	char script[1024];
	snprintf(script, sizeof script, "ls -A %s | wc -l", e.state_dir);
	assert_int_equal(ml_sh(&e, c, script, &out), 0);
	assert_int_equal(atoi(out), 0);
	free(out);
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	free(lease);
	ml_unload(&e, true);
}

static void test_root_writes_stay_in_guest(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	char name[64], host_path[96];
	snprintf(name, sizeof name, "relay-escape-%d-%ld", (int)getpid(), (long)time(NULL));
	snprintf(host_path, sizeof host_path, "/%s", name);

	/* The default guest user cannot write at /. */
	ml_env e;
	ml_load(&e, NULL);
	char *lease = ml_acquire(&e, "root-1", NULL);
	relay_transport_conn *c = ml_open(&e, lease);
	char script[512];
	snprintf(script, sizeof script, "touch /%s", name);
	assert_int_not_equal(ml_sh(&e, c, script, NULL), 0);
	/* The transport writes at / (as the relay): it lands in the guest only. */
	char local[512];
	snprintf(local, sizeof local, "%s/payload", e.state_dir);
	relay_error err;
	assert_int_equal(fs_write_durable(local, "inside\n", 7, 0600, &err), RELAY_OK);
	char *facts = NULL;
	if (e.p->transport.push(e.p->state, c, local, host_path, NULL, 0, &facts, &err) != RELAY_OK)
		fail_msg("push to %s failed: %s", host_path, err.message);
	free(facts);
	char *out = NULL;
	snprintf(script, sizeof script, "cat /%s", name);
	assert_int_equal(ml_sh(&e, c, script, &out), 0);
	assert_string_equal(out, "inside\n");
	free(out);
	assert_false(fs_exists_nofollow(host_path));
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	free(lease);
	ml_unload(&e, true);

	/* Guest root (options.guestUser "root") writes at / and into /etc. */
	ml_load(&e, "{\"guestUser\":\"root\"}");
	lease = ml_acquire(&e, "root-2", NULL);
	c = ml_open(&e, lease);
	char *hosts_before = NULL;
	size_t hb_len = 0;
	assert_int_equal(fs_read_file("/etc/hostname", 1 << 16, &hosts_before, &hb_len, &err), RELAY_OK);
	snprintf(script, sizeof script,
	         "id -u && echo root-was-here > /%s && echo changed >> /etc/hostname && cat /%s", name, name);
	assert_int_equal(ml_sh(&e, c, script, &out), 0);
	assert_string_equal(out, "0\nroot-was-here\n");
	free(out);
	assert_false(fs_exists_nofollow(host_path));
	char *hosts_after = NULL;
	size_t ha_len = 0;
	assert_int_equal(fs_read_file("/etc/hostname", 1 << 16, &hosts_after, &ha_len, &err), RELAY_OK);
	assert_int_equal(hb_len, ha_len);
	assert_memory_equal(hosts_before, hosts_after, hb_len);
	free(hosts_before);
	free(hosts_after);
	/* Guest root holds no power over the guest's mounts or network. */
	assert_int_not_equal(ml_sh(&e, c, "umount /proc", NULL), 0);
	assert_int_not_equal(ml_sh(&e, c, "hostname other", NULL), 0);
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	free(lease);
	assert_false(fs_exists_nofollow(host_path));
	ml_unload(&e, true);
}

typedef struct four_job {
	ml_env *e;
	char guest[32];
	char *lease;
	relay_status status;
	char message[RELAY_ERROR_MESSAGE_BYTES];
} four_job;

static void *acquire_job(void *arg)
{
	four_job *j = arg;
	relay_error err;
	j->lease = ml_acquire_ex(j->e, j->guest, "local", NULL, &j->status, &err);
	snprintf(j->message, sizeof j->message, "%s", err.message);
	return NULL;
}

static void test_four_guests_at_once(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, NULL);
	four_job jobs[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		memset(&jobs[i], 0, sizeof jobs[i]);
		jobs[i].e = &e;
		snprintf(jobs[i].guest, sizeof jobs[i].guest, "four-%d", i + 1);
		assert_int_equal(pthread_create(&t[i], NULL, acquire_job, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		if (jobs[i].status != RELAY_OK)
			fail_msg("acquire of %s failed: %s", jobs[i].guest, jobs[i].message);
	}
	assert_int_equal(count_leases(&e), 4);
	relay_transport_conn *c[4];
	for (int i = 0; i < 4; i++) {
		c[i] = ml_open(&e, jobs[i].lease);
		char script[128];
		snprintf(script, sizeof script, "echo guest-%d > /tmp/mine && hostname", i + 1);
		char *out = NULL;
		assert_int_equal(ml_sh(&e, c[i], script, &out), 0);
		char expect[32];
		snprintf(expect, sizeof expect, "four-%d\n", i + 1);
		assert_string_equal(out, expect);
		free(out);
	}
	/* Each guest sees only its own /tmp and its own processes. */
	for (int i = 0; i < 4; i++) {
		char *out = NULL;
		assert_int_equal(ml_sh(&e, c[i], "cat /tmp/mine; ls /tmp | wc -l", &out), 0);
		char expect[32];
		snprintf(expect, sizeof expect, "guest-%d\n", i + 1);
		assert_non_null(strstr(out, expect));
		free(out);
	}
	for (int i = 0; i < 4; i++) {
		e.p->transport.close(e.p->state, c[i], 0);
		ml_release(&e, jobs[i].lease);
		free(jobs[i].lease);
	}
	assert_int_equal(count_leases(&e), 0);
	ml_unload(&e, true);
}

static void test_bad_input_changes_nothing(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, "{\"maxGuests\":2}");
	relay_error err;
	relay_status s;

	/* unknown image */
	char *lease = ml_acquire_ex(&e, "bad-1", "no-such-image", NULL, &s, &err);
	assert_null(lease);
	assert_int_equal(s, RELAY_E_IMAGE_UNAVAILABLE);
	assert_non_null(strstr(err.message, "no-such-image"));
	assert_non_null(strstr(err.message, "local"));
	assert_int_equal(count_leases(&e), 0);

	/* invalid spec fields */
	char *out = NULL;
	assert_int_equal(e.p->machine.acquire(e.p->state,
	                                      "{\"guest\":\"Bad_Name\",\"purpose\":\"p\",\"image\":\"local\","
	                                      "\"ttlMs\":1000}",
	                                      NULL, 0, &out, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_null(out);
	assert_int_equal(e.p->machine.acquire(e.p->state, "not json", NULL, 0, &out, &err),
	                 RELAY_E_INVALID_ARGUMENT);
	assert_int_equal(e.p->machine.acquire(e.p->state, "{}", NULL, 0x40, &out, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	assert_int_equal(count_leases(&e), 0);

	/* a guest name in use */
	char *first = ml_acquire(&e, "dup-1", NULL);
	lease = ml_acquire_ex(&e, "dup-1", "local", NULL, &s, &err);
	assert_null(lease);
	assert_int_equal(s, RELAY_E_REFUSED);
	assert_non_null(strstr(err.message, "in use"));
	assert_int_equal(count_leases(&e), 1);
	relay_transport_conn *c = ml_open(&e, first);
	assert_int_equal(ml_sh(&e, c, "true", NULL), 0); /* the first guest is untouched */
	e.p->transport.close(e.p->state, c, 0);

	/* capacity */
	char *second = ml_acquire(&e, "cap-2", NULL);
	lease = ml_acquire_ex(&e, "cap-3", "local", NULL, &s, &err);
	assert_null(lease);
	assert_int_equal(s, RELAY_E_CAPACITY);
	assert_non_null(strstr(err.message, "maxGuests"));
	assert_int_equal(count_leases(&e), 2);

	/* bad flags on every other op */
	assert_int_equal(e.p->machine.renew(e.p->state, first, 60000, NULL, 0x8, &out, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	assert_int_equal(e.p->machine.release(e.p->state, first, "released", NULL, 0x8, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	relay_transport_conn *bad = NULL;
	assert_int_equal(e.p->transport.open(e.p->state, first, NULL, 0x8, &bad, &err),
	                 RELAY_E_UNSUPPORTED_FLAGS);
	assert_int_equal(e.p->transport.open(e.p->state, "{\"vm\":\"x\"}", NULL, 0, &bad, &err),
	                 RELAY_E_UNSUPPORTED);
	assert_int_equal(count_leases(&e), 2);

	ml_release(&e, first);
	ml_release(&e, second);
	free(first);
	free(second);
	ml_unload(&e, true);

	/* unknown options are refused by name */
	plugin_registry reg = {0};
	char *path = ml_plugin_path("machine-local");
	loaded_plugin *p = NULL;
	assert_int_not_equal(loader_load(&reg, path, RELAY_KIND_MACHINE,
	                                 "{\"stateDir\":\"/var/tmp/ml-bad\",\"options\":{\"maxGuest\":3}}",
	                                 &p, &err),
	                     RELAY_OK);
	assert_non_null(strstr(err.message, "maxGuest"));
	free(path);
	fs_remove_tree("/var/tmp/ml-bad", &err);
}

static void test_renew_inspect_find(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, NULL);
	char *lease = ml_acquire(&e, "renew-1", "\"deadlineMs\":99999999999999");
	json_object *doc = ml_parse(lease);
	int64_t exp0 = 0;
	jsonx_get_int(doc, "expiresAtMs", &exp0);
	relay_error err;
	char *renewed = NULL;
	assert_int_equal(e.p->machine.renew(e.p->state, lease, 3600000, NULL, 0, &renewed, &err), RELAY_OK);
	json_object *rdoc = ml_parse(renewed);
	free(renewed);
	int64_t exp1 = 0;
	jsonx_get_int(rdoc, "expiresAtMs", &exp1);
	assert_true(exp1 > exp0);
	/* The guest init reads the same expiry from the lease folder. */
	char path[600], *text = NULL;
	size_t len = 0;
	snprintf(path, sizeof path, "%s/expires", jsonx_get_str(jsonx_get_obj(rdoc, "local"), "leaseDir"));
	assert_int_equal(fs_read_file(path, 128, &text, &len, &err), RELAY_OK);
	assert_int_equal(strtoll(text, NULL, 10), exp1);
	free(text);
	char *inspected = NULL;
	assert_int_equal(e.p->machine.inspect(e.p->state, lease, NULL, 0, &inspected, &err), RELAY_OK);
	json_object *idoc = ml_parse(inspected);
	free(inspected);
	assert_string_equal(jsonx_get_str(idoc, "state"), "running");
	char *found = NULL;
	assert_int_equal(
	    e.p->machine.find_by_purpose(e.p->state, jsonx_get_str(doc, "purpose"), NULL, 0, &found, &err),
	    RELAY_OK);
	json_object *arr = ml_parse(found);
	assert_int_equal(json_object_array_length(arr), 1);
	assert_string_equal(jsonx_get_str(json_object_array_get_idx(arr, 0), "vm"), jsonx_get_str(doc, "vm"));
	json_object_put(arr);
	free(found);
	assert_int_equal(
	    e.p->machine.find_by_purpose(e.p->state, "relay-nothing-00000000", NULL, 0, &found, &err),
	    RELAY_OK);
	assert_string_equal(found, "[]");
	free(found);
	char *binding = NULL;
	assert_int_equal(e.p->machine.binding(e.p->state, 0, &binding, &err), RELAY_OK);
	json_object *b = ml_parse(binding);
	assert_string_equal(jsonx_get_str(b, "machine"), "machine-local");
	assert_string_equal(jsonx_get_str(b, "store"), e.state_dir);
	json_object_put(b);
	free(binding);
	ml_release(&e, lease);
	/* After release: renew and inspect say the lease is gone. */
	assert_int_equal(e.p->machine.inspect(e.p->state, lease, NULL, 0, &inspected, &err),
	                 RELAY_E_NOT_FOUND);
	assert_int_equal(e.p->machine.renew(e.p->state, lease, 1000, NULL, 0, &renewed, &err),
	                 RELAY_E_NOT_FOUND);
	json_object_put(doc);
	json_object_put(rdoc);
	json_object_put(idoc);
	free(lease);
	ml_unload(&e, true);
}

static void test_images_catalog_doctor(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	/* A configured image whose tree is missing is listed, unavailable. */
	ml_load(&e, "{\"images\":{\"bookworm\":\"/nonexistent/trees/bookworm\"}}");
	relay_error err;
	char *text = NULL;
	assert_int_equal(e.p->machine.images(e.p->state, NULL, 0, &text, &err), RELAY_OK);
	json_object *inv = ml_parse(text);
	free(text);
	json_object *images = jsonx_get_obj(inv, "images");
	bool b = false;
	assert_true(jsonx_get_bool(jsonx_get_obj(images, "local"), "base_available", &b) && b);
	assert_string_equal(jsonx_get_str(jsonx_get_obj(images, "local"), "kind"), "linux");
	assert_true(jsonx_get_bool(jsonx_get_obj(images, "bookworm"), "base_available", &b) && !b);
	assert_non_null(jsonx_get_obj(inv, "capacity"));
	json_object_put(inv);
	relay_status s;
	char *lease = ml_acquire_ex(&e, "img-1", "bookworm", NULL, &s, &err);
	assert_null(lease);
	assert_int_equal(s, RELAY_E_IMAGE_UNAVAILABLE);
	assert_non_null(strstr(err.message, "/nonexistent/trees/bookworm"));

	assert_int_equal(e.p->machine.catalog(e.p->state, NULL, 0, &text, &err), RELAY_OK);
	json_object *cat = ml_parse(text);
	free(text);
	int64_t version = 0;
	assert_true(jsonx_get_int(cat, "schemaVersion", &version) && version == 1);
	json_object *list = jsonx_get_array(cat, "images");
	assert_int_equal(json_object_array_length(list), 1); /* the missing tree is left out */
	json_object *img = json_object_array_get_idx(list, 0);
	assert_string_equal(jsonx_get_str(img, "image"), "local");
	assert_string_equal(jsonx_get_str(img, "os"), "linux");
	struct utsname un;
	uname(&un);
	assert_string_equal(jsonx_get_str(img, "architecture"),
	                    strcmp(un.machine, "aarch64") == 0 ? "arm64" : un.machine);
	json_object *apps = jsonx_get_array(img, "applications");
	/* as many dpkg entries as dpkg-query -W lists */
	FILE *pq = popen("dpkg-query -W 2>/dev/null | wc -l", "r");
	int dpkg_count = 0;
	if (pq) {
		if (fscanf(pq, "%d", &dpkg_count) != 1)
			dpkg_count = 0;
		pclose(pq);
	}
	int ours = 0;
	bool xvfb = false;
	const char *prev = "";
	for (size_t i = 0; i < json_object_array_length(apps); i++) {
		json_object *a = json_object_array_get_idx(apps, i);
		const char *id = jsonx_get_str(a, "id");
		assert_true(strcmp(prev, id) < 0); /* sorted by id, no duplicates */
		prev = id;
		ours += strncmp(id, "dpkg:", 5) == 0;
		xvfb |= strcmp(id, "dpkg:xvfb") == 0;
		assert_non_null(jsonx_get_array(a, "aliases"));
	}
	if (dpkg_count > 0)
		assert_int_equal(ours, dpkg_count);
	if (access("/usr/bin/Xvfb", X_OK) == 0)
		assert_true(xvfb);
	json_object_put(cat);

	assert_int_equal(e.p->machine.doctor(e.p->state, NULL, 0, &text, &err), RELAY_OK);
	json_object *checks = ml_parse(text);
	free(text);
	bool ns_ok = false;
	for (size_t i = 0; i < json_object_array_length(checks); i++) {
		json_object *ck = json_object_array_get_idx(checks, i);
		if (strcmp(jsonx_get_str(ck, "check"), "namespaces") == 0)
			jsonx_get_bool(ck, "ok", &ns_ok);
	}
	assert_true(ns_ok);
	json_object_put(checks);
	assert_int_equal(e.p->machine.health(e.p->state, NULL, 0, &text, &err), RELAY_OK);
	json_object *h = ml_parse(text);
	assert_string_equal(jsonx_get_str(h, "service"), "machine-local");
	json_object_put(h);
	free(text);
	ml_unload(&e, true);
}

/* A tiny base tree: dash as /bin/sh and a few tools, with their libraries. */
static void make_mini_tree(const char *t)
{
	char cmd[2048];
	snprintf(
	    cmd, sizeof cmd,
	    "set -e; T='%s'; mkdir -p $T/bin $T/etc $T/proc $T/dev $T/sys $T/tmp $T/run $T/var/tmp $T/home "
	    "$T/root; "
	    "for b in dash id hostname ls cat wc; do p=$(command -v $b); cp $p $T/bin/$b; "
	    "for l in $(ldd $p | grep -o '/[^ ]*'); do mkdir -p $T$(dirname $l); cp -n $l $T$l; done; done; "
	    "mv $T/bin/dash $T/bin/sh; echo 'root:x:0:0:root:/root:/bin/sh' > $T/etc/passwd; "
	    "echo 'root:x:0:' > $T/etc/group; echo mini > $T/etc/marker",
	    t);
	assert_int_equal(system(cmd), 0);
}

static void test_configured_tree_image(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	char tree[] = "/var/tmp/ml-tree-XXXXXX";
	assert_non_null(mkdtemp(tree));
	make_mini_tree(tree);
	char options[256];
	snprintf(options, sizeof options, "{\"images\":{\"mini\":\"%s\"}}", tree);
	ml_env e;
	ml_load(&e, options);
	relay_error err;
	relay_status s;
	char *lease = ml_acquire_ex(&e, "tree-1", "mini", NULL, &s, &err);
	if (lease == NULL)
		fail_msg("acquire on the tree image: %s", err.message);
	relay_transport_conn *c = ml_open(&e, lease);
	char *out = NULL;
	/* The guest's root is the tree: its marker, its few programs. */
	assert_int_equal(ml_sh(&e, c, "cat /etc/marker; id -un; hostname; ls /bin | wc -l", &out), 0);
	assert_string_equal(out, "mini\nrelay\ntree-1\n6\n");
	free(out);
	assert_int_equal(ml_sh(&e, c, "echo changed > /tmp/x && cat /tmp/x", &out), 0);
	free(out);
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	free(lease);
	/* The tree itself was not written to. */
	char marker[600], *text = NULL;
	size_t len = 0;
	snprintf(marker, sizeof marker, "%s/etc/passwd", tree);
	assert_int_equal(fs_read_file(marker, 4096, &text, &len, &err), RELAY_OK);
	assert_string_equal(text, "root:x:0:0:root:/root:/bin/sh\n");
	free(text);
	snprintf(marker, sizeof marker, "%s/tmp/x", tree);
	assert_false(fs_exists_nofollow(marker));
	ml_unload(&e, true);
	fs_remove_tree(tree, &err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_release_leaves_nothing, ml_teardown),
	    cmocka_unit_test_teardown(test_guest_cannot_see_host_processes, ml_teardown),
	    cmocka_unit_test_teardown(test_root_writes_stay_in_guest, ml_teardown),
	    cmocka_unit_test_teardown(test_four_guests_at_once, ml_teardown),
	    cmocka_unit_test_teardown(test_bad_input_changes_nothing, ml_teardown),
	    cmocka_unit_test_teardown(test_renew_inspect_find, ml_teardown),
	    cmocka_unit_test_teardown(test_images_catalog_doctor, ml_teardown),
	    cmocka_unit_test_teardown(test_configured_tree_image, ml_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
