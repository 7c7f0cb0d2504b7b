/*
 * launch.c — starting a machine-local guest: its init (local_init.c, run
 * from the embedded memfd, with the arguments that describe the guest), the
 * network helper once the init reports its pid, and the guest's Xvfb display.
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"

/* ---- the guest init ------------------------------------------------------------ */

/* The launcher's argv and the texts it points to. */
typedef struct init_args {
	const char *argv[80 + 2 * LOCAL_MAX_MASKS + 2 * 128];
	char reject[128][24];
	char backstop[32];
	char rlimits[3][24];
	char outer_uid[128], outer_gid[128], nested_uid[64], nested_gid[64], guest_ids[32];
} init_args;

/* machine-local-init launch ... for this guest (local_init.c, usage). */
static void init_argv(local_state *st, const char *lease_dir, const char *tree, const char *guest,
                      json_object *record, bool with_helper, init_args *a)
{
	const char **argv = a->argv;
	size_t ac = 0;
	size_t nreject = with_helper ? net_reject_list(a->reject, 128) : 0;
	snprintf(a->backstop, sizeof a->backstop, "%lld", (long long)st->backstop_ms);
	argv[ac++] = "machine-local-init";
	argv[ac++] = "launch";
	argv[ac++] = "--lease-dir";
	argv[ac++] = lease_dir;
	argv[ac++] = "--lower";
	argv[ac++] = tree;
	argv[ac++] = "--hostname";
	argv[ac++] = guest;
	json_object *user = lu_get_object(record, "guestUser");
	uid_t uid = (uid_t)lu_get_int(user, "uid", 0);
	gid_t gid = (gid_t)lu_get_int(user, "gid", 0);
	bool mapped = st->rootless && st->subids && uid != 0;
	argv[ac++] = "--id-map";
	argv[ac++] = st->rootless ? "0 0 1" : "0 0 65536";
	argv[ac++] = "--backstop-ms";
	argv[ac++] = a->backstop;
	if (st->rootless) {
		argv[ac++] = "--rootless";
		argv[ac++] = "--userxattr";
	}
	if (mapped) {
		/* The guest user is a subordinate id (subids.c); the init gives it
		 * its home, which the relay's user cannot. */
		subids_maps(st, uid, gid, a->outer_uid, a->outer_gid, a->nested_uid, a->nested_gid);
		snprintf(a->guest_ids, sizeof a->guest_ids, "%u:%u", (unsigned)uid, (unsigned)gid);
		const char *const extra[] = {"--newuidmap",     st->newuidmap_path,
		                             "--newgidmap",     st->newgidmap_path,
		                             "--outer-uid-map", a->outer_uid,
		                             "--outer-gid-map", a->outer_gid,
		                             "--id-map",        a->nested_uid,
		                             "--id-map-gid",    a->nested_gid,
		                             "--guest-home",    lu_get_string(user, "home"),
		                             "--guest-ids",     a->guest_ids};
		for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
			argv[ac++] = extra[i];
	}
	/* Without root the kernel refuses an overlay of "/" (it has mounts
	 * below it): the init composes the view instead (init_rootless.c). */
	if (st->rootless && strcmp(tree, "/") == 0)
		argv[ac++] = "--compose-root";
	/* allow and internet: the init makes the egress proxy's sockets (init_egress.c). */
	const char *access = lu_get_string(lu_get_object(record, "network"), "access");
	if (access && strcmp(access, "egress") == 0)
		argv[ac++] = "--egress";
	const char *cgroups[8];
	size_t ncgroups = cgroup_paths(record, cgroups, 8);
	for (size_t i = 0; i < ncgroups; i++) {
		argv[ac++] = "--cgroup";
		argv[ac++] = cgroups[i];
	}
	static const char *const rlimit_flags[] = {"--rlimit-nproc", "--rlimit-data", "--rlimit-fsize"};
	static const char *const rlimit_keys[] = {"processes", "dataBytes", "fileBytes"};
	json_object *bounds = lu_get_object(record, "bounds");
	for (size_t i = 0; i < 3; i++) {
		int64_t v = lu_get_int(bounds, rlimit_keys[i], 0);
		if (v <= 0)
			continue;
		snprintf(a->rlimits[i], sizeof a->rlimits[i], "%lld", (long long)v);
		argv[ac++] = rlimit_flags[i];
		argv[ac++] = a->rlimits[i];
	}
	argv[ac++] = "--mask";
	argv[ac++] = st->kit.state_dir;
	for (size_t i = 0; i < st->mask_count; i++) {
		argv[ac++] = "--mask";
		argv[ac++] = st->masks[i];
	}
	for (size_t i = 0; i < nreject; i++) {
		argv[ac++] = "--reject";
		argv[ac++] = a->reject[i];
	}
	if (with_helper) {
		argv[ac++] = "--hold-fd";
		argv[ac++] = "4";
	}
	if (with_helper && st->rootless) {
		argv[ac++] = "--gate-fd";
		argv[ac++] = "5";
	}
	argv[ac] = NULL;
}

relay_status launch_init(local_state *st, const char *lease_dir, const char *tree, const char *guest,
                         json_object *record, bool with_helper, launch_result *lr, relay_error *err)
{
	relay_status status = RELAY_OK;
	int status_pipe[2] = {-1, -1}, hold[2] = {-1, -1}, gate[2] = {-1, -1};
	const bool gated = with_helper && st->rootless;
	int log_fd = -1;
	lr->launcher = lr->init_pid = lr->helper_pid = 0;
	init_args args;
	init_argv(st, lease_dir, tree, guest, record, with_helper, &args);

	char log_path[PATH_MAX];
	snprintf(log_path, sizeof log_path, "%s/init.log", lease_dir);
	log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (log_fd < 0 || pipe2(status_pipe, O_CLOEXEC) != 0 ||
	    (with_helper && pipe2(hold, O_CLOEXEC) != 0) || (gated && pipe2(gate, O_CLOEXEC) != 0)) {
		status = lu_err(st, err, RELAY_E_IO, errno,
		                "cannot prepare the guest init's descriptors in %s", lease_dir);
		goto cleanup;
	}
	/* Lift the descriptors out of the way of 0..4 before dup2 in the child. */
	int hi_status = fcntl(status_pipe[1], F_DUPFD_CLOEXEC, 100);
	int hi_hold = with_helper ? fcntl(hold[1], F_DUPFD_CLOEXEC, 100) : -1;
	int hi_log = fcntl(log_fd, F_DUPFD_CLOEXEC, 100);
	int hi_gate = gated ? fcntl(gate[0], F_DUPFD_CLOEXEC, 100) : -1;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	lu_spawn_detached_init(&fa, &attr, hi_log);
	posix_spawn_file_actions_adddup2(&fa, hi_status, 3);
	if (with_helper)
		posix_spawn_file_actions_adddup2(&fa, hi_hold, 4);
	if (gated)
		posix_spawn_file_actions_adddup2(&fa, hi_gate, 5);
	/* The init program runs from its memfd, lent as fd 9; nothing else of
	 * the relay is passed on. */
	posix_spawn_file_actions_adddup2(&fa, st->init_memfd, 9);
	posix_spawn_file_actions_addclosefrom_np(&fa, 10);
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	pid_t pid = -1;
	int rc = posix_spawn(&pid, "/proc/self/fd/9", &fa, &attr, (char *const *)args.argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(hi_status);
	close(hi_log);
	if (hi_hold >= 0)
		close(hi_hold);
	if (hi_gate >= 0)
		close(hi_gate);
	if (gate[0] >= 0) {
		close(gate[0]);
		gate[0] = -1;
	}
	close(status_pipe[1]);
	status_pipe[1] = -1;
	if (hold[1] >= 0) {
		close(hold[1]);
		hold[1] = -1;
	}
	if (rc != 0) {
		status = lu_err(st, err, RELAY_E_IO, rc, "cannot start the guest init");
		goto cleanup;
	}
	lr->launcher = pid;
	int64_t until = lu_monotonic_ms() + 20000;
	char line[900];
	bool ready = false;
	while (!ready) {
		if (lu_read_line_until(status_pipe[0], line, sizeof line, until) != 0) {
			char tail[300] = "";
			size_t len = 0;
			char *text = lu_read_small(log_path, 64 * 1024, &len);
			if (text) {
				const char *from = len > 250 ? text + len - 250 : text;
				snprintf(tail, sizeof tail, "%s", from);
				for (char *p = tail; *p; p++)
					if (*p == '\n')
						*p = ' ';
				free(text);
			}
			status = lu_err(st, err, errno == ETIMEDOUT ? RELAY_E_TIMEOUT : RELAY_E_IO, errno,
			                "the guest init %s (log: %s)",
			                errno == ETIMEDOUT ? "did not become ready within 20 s"
			                                   : "exited before it was ready",
			                tail[0] ? tail : "empty");
			goto cleanup;
		}
		if (strncmp(line, "pid ", 4) == 0) {
			lr->init_pid = (pid_t)atoi(line + 4);
			if (with_helper) {
				status = net_start_helper(st, lr->init_pid, lr->launcher, lease_dir, hold[0],
				                          &lr->helper_pid, err);
				close(hold[0]);
				hold[0] = -1;
				if (status != RELAY_OK)
					goto cleanup;
				if (gate[1] >= 0) {
					if (write(gate[1], "g", 1) != 1) {
						/* EOF below opens the gate as well. */
					}
					close(gate[1]);
					gate[1] = -1;
				}
			}
		} else if (strcmp(line, "ready") == 0) {
			ready = true;
		} else if (strncmp(line, "error ", 6) == 0) {
			char *msg = strchr(line + 6, ' ');
			int e = atoi(line + 6);
			status = lu_err(
			    st, err, e == EPERM || e == EACCES ? RELAY_E_REFUSED : RELAY_E_IO, e,
			    "the guest could not be set up: %s: %s (is the kernel allowing namespaces and "
			    "overlayfs here?)",
			    msg ? msg + 1 : "unknown step", strerror(e));
			goto cleanup;
		}
	}
cleanup:
	if (lr->launcher > 0) {
		int wst;
		if (status == RELAY_OK)
			waitpid(lr->launcher, &wst, 0);
		else {
			kill(lr->launcher, SIGKILL);
			waitpid(lr->launcher, &wst, 0);
		}
	}
	if (status_pipe[0] >= 0)
		close(status_pipe[0]);
	if (status_pipe[1] >= 0)
		close(status_pipe[1]);
	if (hold[0] >= 0)
		close(hold[0]);
	if (hold[1] >= 0)
		close(hold[1]);
	if (gate[1] >= 0)
		close(gate[1]);
	if (log_fd >= 0)
		close(log_fd);
	return status;
}

/* ---- the display ------------------------------------------------------------- */

relay_status launch_display(local_state *st, json_object *record, const char *lease_dir, relay_error *err)
{
	relay_status status = RELAY_OK;
	int pipefd[2] = {-1, -1}, log_fd = -1, conn = -1;
	char **env = NULL;
	char log_path[PATH_MAX];
	snprintf(log_path, sizeof log_path, "%s/display.log", lease_dir);
	log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (log_fd < 0 || pipe2(pipefd, O_CLOEXEC) != 0) {
		status = lu_err(st, err, RELAY_E_IO, errno, "cannot prepare the display's descriptors");
		goto cleanup;
	}
	conn = ctl_connect(lease_dir);
	if (conn < 0) {
		status = lu_err(st, err, RELAY_E_IO, errno, "cannot reach the guest init in %s", lease_dir);
		goto cleanup;
	}
	env = ctl_guest_env(st, record, NULL);
	/* -noreset: a server whose last client leaves resets itself, and the next
	 * connection (a one-shot capture, spec/guest.md §11) waits 100+ ms for it
	 * (bench/x11shot/README.md). */
	const char *argv[] = {"Xvfb",      ":0",  "-screen",    "0", st->screen, "-noreset",
	                      "-nolisten", "tcp", "-displayfd", "1", NULL};
	ctl_spawn req = ctl_guest_daemon(record, argv, env, pipefd[1], log_fd);
	pid_t pid = 0;
	int e = 0;
	char why[256];
	if (ctl_spawn_cmd(conn, &req, &pid, &e, why, sizeof why) != 0) {
		status = lu_err(st, err, RELAY_E_REFUSED, e, "Xvfb could not start in the guest: %s: %s", why,
		                strerror(e));
		goto cleanup;
	}
	close(pipefd[1]);
	pipefd[1] = -1;
	char line[32];
	if (lu_read_line_until(pipefd[0], line, sizeof line, lu_monotonic_ms() + 15000) != 0) {
		status = lu_err(st, err, RELAY_E_REFUSED, errno,
		                "Xvfb did not open the guest's display within 15 s; see %s", log_path);
		goto cleanup;
	}
	char display[40];
	snprintf(display, sizeof display, ":%d", atoi(line));
	json_object_object_add(record, "display", json_object_new_string(display));
	json_object *pids = lu_get_object(record, "pids");
	if (pids)
		json_object_object_add(pids, "xvfb", json_object_new_int64(pid));
cleanup:
	ctl_env_free(env);
	if (conn >= 0)
		close(conn);
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (log_fd >= 0)
		close(log_fd);
	return status;
}
