/*
 * destroy.c — destroying a machine-local guest and checking, independently,
 * that nothing of it is left: SIGKILL to the guest init (the kernel then
 * kills every process of its PID namespace, and the mount namespace with the
 * overlay goes with the last of them), the helper, the cgroups, then the
 * folder with the upper layer; then the check.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"

/* ---- destroy and verify ------------------------------------------------------------ */

int sandbox_init_pidfd(json_object *record)
{
	json_object *init = lu_get_object(lu_get_object(record, "pids"), "init");
	pid_t pid = (pid_t)lu_get_int(init, "pid", 0);
	unsigned long long start = (unsigned long long)lu_get_int(init, "startTime", 0);
	return lu_pidfd_checked(pid, start);
}

int sandbox_root_fd(json_object *record)
{
	json_object *init = lu_get_object(lu_get_object(record, "pids"), "init");
	pid_t pid = (pid_t)lu_get_int(init, "pid", 0);
	unsigned long long start = (unsigned long long)lu_get_int(init, "startTime", 0);
	int pidfd = lu_pidfd_checked(pid, start);
	if (pidfd < 0) {
		errno = ESRCH;
		return -1;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
	int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int e = errno;
	/* The pid could have been reused between the two opens only if the
	 * init died; the pidfd tells. */
	struct pollfd pfd = {pidfd, POLLIN, 0};
	if (fd >= 0 && poll(&pfd, 1, 0) > 0) {
		close(fd);
		fd = -1;
		e = ESRCH;
	}
	close(pidfd);
	errno = e;
	return fd;
}

static bool wait_pidfd_exit(int pidfd, int timeout_ms)
{
	struct pollfd pfd = {pidfd, POLLIN, 0};
	for (;;) {
		int rc = poll(&pfd, 1, timeout_ms);
		if (rc < 0 && errno == EINTR)
			continue;
		return rc > 0;
	}
}

static bool kill_process(pid_t pid, unsigned long long start, int timeout_ms)
{
	int pidfd = lu_pidfd_checked(pid, start);
	if (pidfd < 0)
		return true;
	syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	bool gone = wait_pidfd_exit(pidfd, timeout_ms);
	close(pidfd);
	/* Reap it when it happens to be our child (helpers are). */
	int wst;
	waitpid(pid, &wst, WNOHANG);
	return gone;
}

/* True when argv (n bytes of NUL-ended words) has the word `word`. */
static bool argv_has(const char *buf, ssize_t n, const char *word)
{
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
		if (strcmp(buf + i, word) == 0)
			return true;
	return false;
}

/* A process started for `lease_dir`: one of the guest's init program
 * (launcher, init, or a process it forked: "machine-local-init launch ...
 * --lease-dir <lease_dir> ..."), or the network helper pasta or its keeper
 * (each has the word "<lease_dir>/pasta.pid"). Such a process can run
 * before the record names it (a relay killed during the launch), and
 * without root no cgroup holds it. */
static bool is_launch_of(pid_t pid, const char *lease_dir, bool with_helpers)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	char pidfile[PATH_MAX];
	if (with_helpers &&
	    snprintf(pidfile, sizeof pidfile, "%s/pasta.pid", lease_dir) < (int)sizeof pidfile &&
	    argv_has(buf, n, pidfile))
		return true;
	static const char head[] = "machine-local-init\0launch\0";
	if ((size_t)n < sizeof head - 1 || memcmp(buf, head, sizeof head - 1) != 0)
		return false;
	char want[PATH_MAX + 16];
	int wl = snprintf(want, sizeof want, "--lease-dir%c%s%c", 0, lease_dir, 0);
	for (ssize_t i = 0; wl > 0 && i + wl <= n; i++)
		if (memcmp(buf + i, want, (size_t)wl) == 0)
			return true;
	return false;
}

/* The first live process launched for `lease_dir` (with_helpers: or its
 * network helper or the helper's keeper), or 0. */
static pid_t find_launch_of(const char *lease_dir, bool with_helpers)
{
	DIR *d = opendir("/proc");
	pid_t found = 0;
	struct dirent *de;
	while (d && !found && (de = readdir(d)) != NULL) {
		pid_t pid = (pid_t)atoi(de->d_name);
		unsigned long long start = pid > 0 ? lu_proc_start(pid) : 0;
		if (start && is_launch_of(pid, lease_dir, with_helpers) && lu_proc_alive(pid, start))
			found = pid;
	}
	if (d)
		closedir(d);
	return found;
}

/* Kills every process launched for `lease_dir` (at most a few rounds). */
static void kill_launches_of(const char *lease_dir, bool with_helpers)
{
	for (int round = 0; round < 8; round++) {
		pid_t pid = find_launch_of(lease_dir, with_helpers);
		if (pid == 0)
			return;
		kill_process(pid, lu_proc_start(pid), 2000);
	}
}

/* Waits until no process holds <lease_dir>/helper.lock (net.c): the relay
 * takes it before pasta's keeper exists, and the keeper and pasta hold it
 * for as long as either lives, so a free lock proves that no helper of the
 * guest is left, which a scan of /proc (racing forks) cannot. True when it
 * is free or was never made. */
static bool helper_lock_free_within(const char *lease_dir, int timeout_ms)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/helper.lock", lease_dir) >= (int)sizeof path)
		return false;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT;
	int64_t until = lu_monotonic_ms() + timeout_ms;
	bool free_now = false;
	while (!(free_now = flock(fd, LOCK_EX | LOCK_NB) == 0) && lu_monotonic_ms() < until)
		lu_sleep_ms(5);
	close(fd);
	return free_now;
}

/* The network helper's end: the keeper ends pasta once the init is gone
 * (init_keep.c); a keeper that was itself killed leaves pasta to be killed
 * here. Killing the keeper first could orphan a pasta it was starting. */
static bool end_helpers_of(const char *lease_dir)
{
	if (helper_lock_free_within(lease_dir, 5000))
		return true;
	kill_launches_of(lease_dir, true);
	return helper_lock_free_within(lease_dir, 2000);
}

/* Removes a lease folder with its record last: a folder that cannot be
 * removed keeps the record that names its guest, so the lease is still
 * found (by purpose, by the reaper) and its release is not answered before
 * the folder is gone (issue 17 defect 6). */
static int remove_lease_folder(local_state *st, const char *lease_dir)
{
	int fd = open(lease_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return e == ENOENT ? 0 : e;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    strcmp(de->d_name, "lease.json") == 0)
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", lease_dir, de->d_name);
		/* The upper layer holds files of the guest user's subordinate
		 * id without root: removed in a namespace that maps it. */
		bool layer = strcmp(de->d_name, "upper") == 0 || strcmp(de->d_name, "work") == 0;
		int e = layer ? subids_remove_tree(st, path) : lu_remove_tree(path);
		if (e != 0 && rc == 0)
			rc = e;
	}
	closedir(d);
	return rc != 0 ? rc : lu_remove_tree(lease_dir);
}

relay_status sandbox_destroy(local_state *st, json_object *record, const char *reason, relay_error *err)
{
	(void)reason;
	const char *vm = lu_get_string(record, "vm");
	json_object *paths = lu_get_object(record, "paths");
	const char *lease_dir = lu_get_string(paths, "leaseDir");
	if (vm == NULL || lease_dir == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "the lease record has no vm or lease folder");
	struct stat sb;
	if (stat(lease_dir, &sb) == 0) {
		json_object_object_add(record, "state", json_object_new_string("releasing"));
		lease_write(st, record, false);
	}
	console_stop_all(st, record);
	json_object *pids = lu_get_object(record, "pids");
	json_object *init = lu_get_object(pids, "init");
	json_object *helper = lu_get_object(pids, "helper");
	bool init_gone = kill_process((pid_t)lu_get_int(init, "pid", 0),
	                              (unsigned long long)lu_get_int(init, "startTime", 0), 10000);
	bool helper_gone = kill_process((pid_t)lu_get_int(helper, "pid", 0),
	                                (unsigned long long)lu_get_int(helper, "startTime", 0), 5000);
	int cg_rc = cgroup_remove_all(record);
	if (lease_dir) {
		kill_launches_of(lease_dir, false);
		if (init_gone && !end_helpers_of(lease_dir))
			helper_gone = false;
	}
	int rm_rc = 0;
	if (init_gone)
		rm_rc = remove_lease_folder(st, lease_dir);
	char detail[512];
	relay_status vs = sandbox_verify_gone(st, record, detail, sizeof detail);
	if (vs == RELAY_OK) {
		/* Only now is no process of the guest's uid left: the uid is free. */
		uids_release(st, vm, (uid_t)lu_get_int(lu_get_object(record, "guestUser"), "uid", 0));
		return RELAY_OK;
	}
	return lu_err(st, err, RELAY_E_UNVERIFIED, rm_rc ? rm_rc : cg_rc,
	              "destruction of %s is not confirmed: %s%s%s", vm, detail,
	              init_gone ? "" : "; the guest init did not die",
	              helper_gone ? "" : "; the network helper did not die");
}

/* Scans /proc for any process still in the guest's PID or mount namespace. */
static pid_t find_ns_member(unsigned long long pid_ns, unsigned long long mnt_ns)
{
	DIR *d = opendir("/proc");
	if (d == NULL)
		return 0;
	pid_t found = 0;
	struct dirent *de;
	while (!found && (de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		pid_t pid = (pid_t)atoi(de->d_name);
		if ((pid_ns && lu_ns_inode(pid, "pid") == pid_ns) ||
		    (mnt_ns && lu_ns_inode(pid, "mnt") == mnt_ns)) {
			unsigned long long start = lu_proc_start(pid);
			if (start && lu_proc_alive(pid, start))
				found = pid;
		}
	}
	closedir(d);
	return found;
}

static bool mounted_under(const char *dir)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f == NULL)
		return false;
	char line[4096];
	size_t dl = strlen(dir);
	bool found = false;
	while (!found && fgets(line, sizeof line, f)) {
		/* field 5 is the mount point */
		char *p = line;
		for (int i = 0; i < 4 && p; i++) {
			p = strchr(p, ' ');
			if (p)
				p++;
		}
		if (p && strncmp(p, dir, dl) == 0 && (p[dl] == ' ' || p[dl] == '/'))
			found = true;
	}
	fclose(f);
	return found;
}

relay_status sandbox_verify_gone(local_state *st, json_object *record, char *detail, size_t detail_size)
{
	(void)st;
	detail[0] = '\0';
	json_object *pids = lu_get_object(record, "pids");
	json_object *init = lu_get_object(pids, "init");
	json_object *helper = lu_get_object(pids, "helper");
	json_object *ns = lu_get_object(record, "namespaces");
	json_object *paths = lu_get_object(record, "paths");
	const char *lease_dir = lu_get_string(paths, "leaseDir");
	const char *cgroup = cgroup_left(record);
	pid_t ip = (pid_t)lu_get_int(init, "pid", 0);
	if (lu_proc_alive(ip, (unsigned long long)lu_get_int(init, "startTime", 0))) {
		snprintf(detail, detail_size, "the guest init (pid %d) is still running", (int)ip);
		return RELAY_E_UNVERIFIED;
	}
	pid_t hp = (pid_t)lu_get_int(helper, "pid", 0);
	if (lu_proc_alive(hp, (unsigned long long)lu_get_int(helper, "startTime", 0))) {
		snprintf(detail, detail_size, "the network helper (pid %d) is still running", (int)hp);
		return RELAY_E_UNVERIFIED;
	}
	pid_t member = find_ns_member((unsigned long long)lu_get_int(ns, "pid", 0),
	                              (unsigned long long)lu_get_int(ns, "mnt", 0));
	if (member) {
		snprintf(detail, detail_size, "process %d is still in the guest's namespaces", (int)member);
		return RELAY_E_UNVERIFIED;
	}
	pid_t launched = lease_dir ? find_launch_of(lease_dir, true) : 0;
	if (launched) {
		snprintf(detail, detail_size, "process %d of the guest's launch is still running",
		         (int)launched);
		return RELAY_E_UNVERIFIED;
	}
	struct stat sb;
	if (lease_dir && lstat(lease_dir, &sb) == 0) {
		snprintf(detail, detail_size, "the lease folder %s (with the upper layer) still exists",
		         lease_dir);
		return RELAY_E_UNVERIFIED;
	}
	if (lease_dir && mounted_under(lease_dir)) {
		snprintf(detail, detail_size, "something is still mounted under %s", lease_dir);
		return RELAY_E_UNVERIFIED;
	}
	if (cgroup) {
		snprintf(detail, detail_size, "the cgroup %s still exists", cgroup);
		return RELAY_E_UNVERIFIED;
	}
	snprintf(detail, detail_size,
	         "no process, namespace member, mount, folder or cgroup of the guest is left");
	return RELAY_OK;
}
