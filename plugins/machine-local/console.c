/*
 * console.c — the typed console of machine-local (relay/machine.h
 * `console_ops`, spec/machine-service.md §9): x11vnc on the guest's own Xvfb
 * display, listening on the guest's loopback (127.0.0.1:5900 inside its
 * network namespace), view-only, with a one-time password that x11vnc
 * reads from a file and deletes.
 *
 * open starts x11vnc for the attempt, waits until its port answers an RFB
 * banner, and then starts the viewer named by MCP_RELAY_VNC_VIEWER (run on
 * this host with only its network namespace switched to the guest's, as
 * `<viewer> 127.0.0.1::5900`, with VNC_PASSWORD and
 * MCP_RELAY_VNC_PASSWORD_FILE in its environment). Without that setting it
 * launches nothing, says so in the attempt (status dispatching, reason
 * worker-unavailable) and logs the endpoint to standard error. It never
 * claims a viewer connected, pixels, authentication or a person's
 * confirmation: those read "unverified".
 *
 * The attempt ledger, the report, the refusals and the viewer on this host
 * are the plugin kit's (relay_kit/console.h); this file is the backend:
 * the record under its lock, x11vnc through the guest init, and sockets and
 * viewers in the guest's network namespace (net.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"

#include "relay_kit/console.h"

static const rk_console_backend local_console;

json_object *console_capabilities(local_state *st)
{
	const local_image *local = sandbox_find_image(st, "local");
	bool xvfb = local && st->display_enabled && sandbox_image_has(st, local->tree, "usr/bin/Xvfb");
	bool x11vnc = local && sandbox_image_has(st, local->tree, "usr/bin/x11vnc");
	const char *reason = NULL;
	if (!xvfb)
		reason = "xvfb-missing";
	else if (!x11vnc)
		reason = "x11vnc-missing";
	return rk_console_capabilities(LOCAL_PLUGIN_NAME, reason, "not-offered-by-machine-local");
}

relay_status console_prepare(local_state *st, json_object *record, relay_error *err)
{
	if (lu_get_string(record, "display") == NULL)
		return lu_err(st, err, RELAY_E_REFUSED, 0, "vnc needs the guest's display, and it has none");
	rk_console c = {&local_console, st->host, st};
	rk_console_prepare(&c, record);
	return RELAY_OK;
}

/* Writes the one-time password file into the guest, owned by the guest
 * user, 0600. */
static int write_guest_secret(json_object *record, const char *rel_name, const char *secret, uid_t uid,
                              gid_t gid, bool chown_it)
{
	int root = sandbox_root_fd(record);
	if (root < 0)
		return errno;
	int tmp = openat(root, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(root);
	if (tmp < 0)
		return errno;
	int fd = openat(tmp, rel_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int e = errno;
	if (fd >= 0) {
		size_t len = strlen(secret);
		e = write(fd, secret, len) == (ssize_t)len && write(fd, "\n", 1) == 1 ? 0 : EIO;
		if (chown_it && fchown(fd, uid, gid) != 0 && e == 0)
			e = errno;
		close(fd);
	}
	close(tmp);
	return e;
}

/* write_guest_secret where the guest user can read it: without root the
 * guest user is a subordinate id, which only a process in the guest's
 * user namespace can give a file to (subids.c). */
typedef struct secret_job {
	json_object *record;
	const char *name, *secret;
	uid_t uid;
	gid_t gid;
} secret_job;

static relay_status secret_job_run(void *arg, char **text_out, relay_error *err)
{
	(void)text_out;
	secret_job *j = arg;
	int e = write_guest_secret(j->record, j->name, j->secret, j->uid, j->gid, true);
	if (e != 0 && err) {
		err->code = RELAY_E_IO;
		err->sys_errno = e;
		snprintf(err->message, sizeof err->message, "%s", strerror(e));
	}
	return e != 0 ? RELAY_E_IO : RELAY_OK;
}

static int give_secret(local_state *st, json_object *record, const char *name, const char *secret, uid_t uid,
                       gid_t gid)
{
	if (!subids_guest_mapped(st, record))
		return write_guest_secret(record, name, secret, uid, gid, !st->rootless);
	secret_job j = {record, name, secret, uid, gid};
	relay_error xe;
	memset(&xe, 0, sizeof xe);
	pid_t init_pid = (pid_t)lu_get_int(lu_get_object(lu_get_object(record, "pids"), "init"), "pid", 0);
	if (subids_run_in_guest_userns(st, init_pid, NULL, secret_job_run, &j, NULL, &xe) == RELAY_OK)
		return 0;
	return xe.sys_errno ? xe.sys_errno : EIO;
}

/* A socket, or a viewer started, in the guest's network namespace (net.c). */
typedef struct netns_target {
	pid_t init_pid;
	int log_fd;
} netns_target;

static int in_guest_netns(void *ctx, const char *const *argv, const char *const *envp, int *err_no)
{
	netns_target *t = ctx;
	if (argv == NULL)
		return net_socket_in(t->init_pid, AF_INET, SOCK_STREAM, err_no);
	return (int)net_spawn_in(t->init_pid, argv, envp, t->log_fd, err_no);
}

/* Starts x11vnc in the guest through its init; its pid in *vnc_pid. */
static relay_status start_x11vnc(local_state *st, json_object *record, const char *passarg, int log_fd,
                                 pid_t *vnc_pid, relay_error *err)
{
	const char *lease_dir = lu_get_string(lu_get_object(record, "paths"), "leaseDir");
	const char *display = lu_get_string(record, "display");
	const char *input = rk_console_control() ? "-nolookup" : "-viewonly"; /* take-over: the live view */
	const char *argv[] = {"x11vnc",      "-display",  display ? display : ":0",
	                      "-localhost",  "-rfbport",  "5900",
	                      input,         "-forever",  "-shared",
	                      "-passwdfile", passarg,     "-norc",
	                      "-nocmds",     "-noremote", "-noxdamage",
	                      NULL};
	char **env = ctl_guest_env(st, record, NULL);
	int conn = ctl_connect(lease_dir);
	relay_status status = RELAY_OK;
	int e = 0;
	char why[256] = "";
	if (conn < 0) {
		status = lu_err(st, err, RELAY_E_INDETERMINATE, errno, "cannot reach the init of guest %s",
		                lu_get_string(record, "vm"));
		goto done;
	}
	ctl_spawn req = ctl_guest_daemon(record, argv, env, log_fd, log_fd);
	if (ctl_spawn_cmd(conn, &req, vnc_pid, &e, why, sizeof why) != 0)
		status = lu_err(st, err, RELAY_E_REFUSED, e, "x11vnc did not start in the guest: %s: %s", why,
		                strerror(e));
done:
	ctl_env_free(env);
	if (conn >= 0)
		close(conn);
	return status;
}

static relay_status open_attempt(void *ctx, json_object *record, const char *attempt_id, json_object *attempt,
                                 pid_t init_pid, relay_call *call, relay_error *err)
{
	(void)call;
	local_state *st = ctx;
	const char *lease_dir = lu_get_string(lu_get_object(record, "paths"), "leaseDir");
	json_object *user = lu_get_object(record, "guestUser");
	char password[9], name[64], rnd[17];
	rk_random_password(st->host, password, 8);
	lu_random_hex(st, rnd, 16);
	snprintf(name, sizeof name, ".relay-vnc-%s", rnd);
	int e = give_secret(st, record, name, password, (uid_t)lu_get_int(user, "uid", 0),
	                    (gid_t)lu_get_int(user, "gid", 0));
	if (e != 0) {
		rk_console_set(attempt, "failed", "worker-launch-failed");
		return lu_err(st, err, RELAY_E_IO, e, "cannot give x11vnc its one-time password in guest %s",
		              lu_get_string(record, "vm"));
	}
	char passarg[128], log_path[PATH_MAX], pwfile[PATH_MAX], events[PATH_MAX];
	snprintf(passarg, sizeof passarg, "rm:/tmp/%s", name);
	snprintf(log_path, sizeof log_path, "%s/console.log", lease_dir);
	int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	pid_t vnc_pid = 0;
	relay_status status = start_x11vnc(st, record, passarg, log_fd, &vnc_pid, err);
	if (status != RELAY_OK) {
		rk_console_set(attempt, "failed", "worker-launch-failed");
		goto done;
	}
	json_object_object_add(attempt, "x11vncPid", json_object_new_int64(vnc_pid));
	netns_target target = {init_pid, log_fd};
	char banner[16];
	if (!rk_console_rfb_banner(in_guest_netns, &target, banner, 15000, &e)) {
		ctl_killpid(lease_dir, vnc_pid);
		rk_console_set(attempt, "failed", "worker-failed");
		status = lu_err(st, err, RELAY_E_REFUSED, 0,
		                "x11vnc did not answer on the guest's 127.0.0.1:5900 within 15 s; see %s",
		                log_path);
		goto done;
	}
	rk_console_endpoint(attempt, init_pid, banner);
	snprintf(pwfile, sizeof pwfile, "%s/console-%s.passwd", lease_dir, attempt_id);
	snprintf(events, sizeof events, "%s/console-%s.events.jsonl", lease_dir, attempt_id);
	rk_console_viewer v = {
	    lu_get_string(record, "vm"), "guest's", init_pid,       password, pwfile, events,
	    st->kit.libexec_dir,         log_fd,    in_guest_netns, &target};
	rk_console c = {&local_console, st->host, st};
	status = rk_console_viewer_start(&c, attempt, &v, err);
	if (status != RELAY_OK)
		ctl_killpid(lease_dir, vnc_pid);
done:
	if (log_fd >= 0)
		close(log_fd);
	return status;
}

static void stop_attempt(void *ctx, json_object *record, json_object *attempt, bool guest_runs)
{
	(void)ctx;
	(void)guest_runs; /* asked of the init itself: release stops x11vnc too while the init runs */
	const char *lease_dir = lu_get_string(lu_get_object(record, "paths"), "leaseDir");
	bool confirmed = rk_console_viewer_stop(attempt);
	pid_t xpid = (pid_t)lu_get_int(attempt, "x11vncPid", 0);
	if (xpid > 0 && lease_dir) {
		int pidfd = sandbox_init_pidfd(record);
		if (pidfd >= 0) {
			close(pidfd);
			if (!ctl_killpid(lease_dir, xpid))
				confirmed = false;
		}
	}
	json_object_object_add(attempt, "viewer_cleanup",
	                       json_object_new_string(confirmed ? "local-children-stopped" : "unconfirmed"));
}

/* ---- the backend of the kit's ledger ------------------------------------------------- */

static json_object *lock_read(void *ctx, const char *vm, int *lock_out, int *errno_out)
{
	*lock_out = lease_lock(ctx, vm, true);
	return *lock_out >= 0 ? lease_read(ctx, vm, errno_out) : NULL;
}

static void unlock(void *ctx, int lock)
{
	(void)ctx;
	lease_unlock(lock);
}

static int write_record(void *ctx, json_object *record)
{
	return lease_write(ctx, record, true);
}

static int guest_state(void *ctx, json_object *record, const char *op, relay_call *call, pid_t *init_pid_out,
                       relay_error *err)
{
	(void)ctx;
	(void)op;
	(void)call;
	(void)err;
	int pidfd = sandbox_init_pidfd(record);
	if (pidfd < 0)
		return 0;
	close(pidfd);
	*init_pid_out = (pid_t)lu_get_int(lu_get_object(lu_get_object(record, "pids"), "init"), "pid", 0);
	return 1;
}

static json_object *capabilities(void *ctx, relay_call *call)
{
	(void)call;
	return console_capabilities(ctx);
}

static const rk_console_backend local_console = {
    .source = LOCAL_PLUGIN_NAME,
    .lock_read = lock_read,
    .unlock = unlock,
    .write = write_record,
    .guest_state = guest_state,
    .open = open_attempt,
    .stop = stop_attempt,
    .capabilities = capabilities,
};

void console_stop_all(local_state *st, json_object *record)
{
	rk_console c = {&local_console, st->host, st};
	rk_console_stop_all(&c, record);
}

/* The typed console: every lease of this plugin is its own. */
static relay_status route(relay_plugin_state *state, const rk_console_request *q, relay_call *call,
                          char **out, relay_error *err)
{
	local_state *st = state;
	rk_console c = {&local_console, st->host, st};
	return rk_console_ledger(&c, q, call, out, err);
}

RK_CONSOLE_DEFINE_OPS(local_console_ops, route);
