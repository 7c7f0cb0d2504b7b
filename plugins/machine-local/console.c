/*
 * console.c — the console passthrough of machine-local (relay/machine.h
 * `console`, spec/machine-service.md §9): x11vnc on the guest's own Xvfb
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

extern char **environ;

#define VNC_PORT     5900
#define MAX_ATTEMPTS 64

static json_object *backend_entry(bool available, const char *reason)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "available", json_object_new_boolean(available));
	json_object_object_add(o, "status", json_object_new_string(available ? "configured" : "unavailable"));
	json_object_object_add(o, "reason", reason ? json_object_new_string(reason) : NULL);
	json_object_object_add(o, "backend", json_object_new_string(available ? "x11vnc" : "unknown"));
	json_object_object_add(o, "viewer_location",
	                       json_object_new_string(available ? "service-host" : "unknown"));
	json_object_object_add(o, "authentication",
	                       json_object_new_string(available ? "password" : "unknown"));
	json_object_object_add(o, "guest_readiness",
	                       json_object_new_string(available ? "unverified" : "unknown"));
	json_object_object_add(o, "session_binding",
	                       json_object_new_string(available ? "existing-x11-session" : "unknown"));
	json_object_object_add(o, "server_enforced_view_only",
	                       available ? json_object_new_boolean(true) : json_object_new_string("unknown"));
	json_object_object_add(o, "pixels", json_object_new_string(available ? "unverified" : "unknown"));
	json_object_object_add(o, "human_confirmation",
	                       json_object_new_string(available ? "unverified" : "unknown"));
	return o;
}

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
	json_object *backends = json_object_new_object();
	json_object_object_add(backends, "linux", backend_entry(xvfb && x11vnc, reason));
	json_object_object_add(backends, "macos", backend_entry(false, "not-offered-by-machine-local"));
	json_object *vnc = json_object_new_object();
	json_object_object_add(vnc, "default", json_object_new_boolean(false));
	json_object_object_add(vnc, "backends", backends);
	json_object *options = json_object_new_object();
	json_object_object_add(options, "vnc", vnc);
	json_object *out = json_object_new_object();
	json_object_object_add(out, "schemaVersion", json_object_new_int(1));
	json_object_object_add(out, "service", json_object_new_string(LOCAL_PLUGIN_NAME));
	json_object_object_add(out, "options", options);
	return out;
}

static json_object *private_of(json_object *record)
{
	json_object *p = lu_get_object(record, "consolePrivate");
	if (p == NULL) {
		p = json_object_new_object();
		json_object_object_add(p, "attempts", json_object_new_object());
		json_object_object_add(p, "order", json_object_new_array());
		json_object_object_add(record, "consolePrivate", p);
	}
	return p;
}

static bool terminal_status(const char *s)
{
	return s && (strcmp(s, "cancelled") == 0 || strcmp(s, "closed") == 0 || strcmp(s, "failed") == 0 ||
	             strcmp(s, "expired") == 0);
}

static json_object *public_attempt(json_object *a, const char *id)
{
	if (a == NULL)
		return NULL;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "attempt_id", json_object_new_string(id));
	const char *status = lu_get_string(a, "status");
	const char *reason = lu_get_string(a, "reason");
	json_object_object_add(o, "status", json_object_new_string(status ? status : "failed"));
	json_object_object_add(o, "reason", reason ? json_object_new_string(reason) : NULL);
	json_object *tc = NULL;
	if (json_object_object_get_ex(a, "transport_connected", &tc) && tc)
		json_object_object_add(o, "transport_connected", json_object_get(tc));
	else
		json_object_object_add(o, "transport_connected", json_object_new_boolean(false));
	const char *cleanup = lu_get_string(a, "viewer_cleanup");
	json_object_object_add(o, "viewer_cleanup",
	                       json_object_new_string(cleanup ? cleanup : "not-started"));
	json_object_object_add(o, "authentication", json_object_new_string("required"));
	json_object_object_add(o, "viewer_connected", json_object_new_string("unverified"));
	json_object_object_add(o, "human_confirmation", json_object_new_string("unverified"));
	return o;
}

/* The report of spec/machine-service.md §9.2 for this record. */
static json_object *report(local_state *st, json_object *record, const char *attempt_id)
{
	json_object *console = lu_get_object(record, "console");
	json_object *priv = private_of(record);
	json_object *attempts = lu_get_object(priv, "attempts");
	if (attempt_id == NULL)
		attempt_id = lu_get_string(priv, "current");
	json_object *a = attempt_id ? lu_get_object(attempts, attempt_id) : NULL;

	const char *status = "ready";
	const char *reason = NULL;
	int64_t now = st->host->now_ms();
	int64_t expires = lu_get_int(record, "expiresAtMs", 0);
	int pidfd = sandbox_init_pidfd(record);
	if (pidfd < 0) {
		status = "revoked";
		reason = "released";
	} else if (expires && now > expires) {
		status = "revoked";
		reason = "expired";
	}
	if (pidfd >= 0)
		close(pidfd);
	json_object *r = json_object_new_object();
	json_object_object_add(r, "schemaVersion", json_object_new_int(1));
	json_object_object_add(r, "vm", json_object_new_string(lu_get_string(record, "vm")));
	json_object_object_add(r, "lease_id", json_object_new_string(lu_get_string(record, "lease_id")));
	json_object_object_add(r, "environment_fingerprint", NULL);
	const char *cid = lu_get_string(console, "console_id");
	json_object_object_add(r, "console_id", cid ? json_object_new_string(cid) : NULL);
	json_object_object_add(r, "status", json_object_new_string(status));
	json_object_object_add(r, "reason", reason ? json_object_new_string(reason) : NULL);
	json_object_object_add(r, "backend", json_object_new_string("x11vnc"));
	json_object_object_add(r, "viewer_location", json_object_new_string("service-host"));
	json_object_object_add(r, "source", json_object_new_string(LOCAL_PLUGIN_NAME));
	json_object_object_add(r, "observed_at", json_object_new_double((double)now / 1000.0));
	json_object_object_add(r, "access_expires_at",
	                       expires ? json_object_new_double((double)expires / 1000.0) : NULL);
	json_object_object_add(r, "viewer_connected", json_object_new_string("unverified"));
	json_object_object_add(r, "human_confirmation", json_object_new_string("unverified"));
	json_object_object_add(r, "session_binding", json_object_new_string("existing-x11-session"));
	json_object_object_add(r, "readiness_scope", json_object_new_string("guest-preflight"));
	json_object_object_add(r, "server_enforced_view_only", json_object_new_boolean(true));
	json_object_object_add(r, "authentication_mechanism", json_object_new_string("one-time-password"));
	json_object_object_add(r, "authentication", json_object_new_string("unverified"));
	json_object_object_add(r, "pixels", json_object_new_string("unverified"));
	json_object_object_add(r, "attempt", public_attempt(a, attempt_id));
	/* Where x11vnc listens, for the person who launches a viewer by hand.
	 * No password is ever part of a report. */
	json_object *endpoint = a ? lu_get_object(a, "endpoint") : NULL;
	if (endpoint) {
		json_object *copy = NULL;
		json_object_deep_copy(endpoint, &copy, NULL);
		json_object_object_add(r, "endpoint", copy);
	}
	if (a)
		json_object_object_add(r, "viewer_launched",
		                       json_object_new_boolean(lu_get_int(a, "viewerPid", 0) > 0));
	json_object *live = a ? lu_get_object(a, "liveView") : NULL;
	if (live) {
		json_object *copy = NULL;
		json_object_deep_copy(live, &copy, NULL);
		json_object_object_add(copy, "take_overs", console_web_take_overs(record, attempt_id));
		json_object_object_add(r, "live_view", copy);
	}
	return r;
}

relay_status console_prepare(local_state *st, json_object *record, relay_error *err)
{
	if (lu_get_string(record, "display") == NULL)
		return lu_err(st, err, RELAY_E_REFUSED, 0, "vnc needs the guest's display, and it has none");
	char cid[33];
	lu_random_hex(st, cid, 32);
	json_object *console = json_object_new_object();
	json_object_object_add(console, "console_id", json_object_new_string(cid));
	json_object_object_add(console, "status", json_object_new_string("ready"));
	json_object_object_add(record, "console", console);
	private_of(record);
	/* The stored console is the full report, as the lease document's
	 * "console" must be (relay/machine.h). */
	json_object *full = report(st, record, NULL);
	json_object_object_add(record, "console", full);
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

/* Connects to the guest's 127.0.0.1:5900 and reads the RFB banner. */
static bool rfb_banner(pid_t init_pid, char *banner, size_t size, int timeout_ms)
{
	int64_t until = lu_monotonic_ms() + timeout_ms;
	while (lu_monotonic_ms() < until) {
		int e = 0;
		int fd = net_socket_in(init_pid, AF_INET, SOCK_STREAM, &e);
		if (fd < 0)
			return false;
		struct sockaddr_in sa;
		memset(&sa, 0, sizeof sa);
		sa.sin_family = AF_INET;
		sa.sin_port = htons(VNC_PORT);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
			struct pollfd pfd = {fd, POLLIN, 0};
			size_t got = 0;
			while (got < 12 && poll(&pfd, 1, 2000) > 0) {
				ssize_t n = read(fd, banner + got, 12 - got);
				if (n <= 0)
					break;
				got += (size_t)n;
			}
			close(fd);
			if (got == 12) {
				size_t n = size - 1 < 12 ? size - 1 : 12;
				banner[n] = '\0';
				return strncmp(banner, "RFB ", 4) == 0;
			}
		} else
			close(fd);
		lu_sleep_ms(25);
	}
	return false;
}

static void random_password(local_state *st, char out[9])
{
	static const char alphabet[] = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
	unsigned char bytes[8];
	relay_error e;
	if (st->host->random_bytes(bytes, sizeof bytes, &e) != RELAY_OK)
		syscall(SYS_getrandom, bytes, sizeof bytes, 0);
	for (int i = 0; i < 8; i++)
		out[i] = alphabet[bytes[i] % (sizeof alphabet - 1)];
	out[8] = '\0';
}

static relay_status open_attempt(local_state *st, json_object *record, const char *attempt_id,
                                 json_object *attempt, relay_error *err)
{
	json_object *paths = lu_get_object(record, "paths");
	const char *lease_dir = lu_get_string(paths, "leaseDir");
	json_object *init = lu_get_object(lu_get_object(record, "pids"), "init");
	pid_t init_pid = (pid_t)lu_get_int(init, "pid", 0);
	json_object *user = lu_get_object(record, "guestUser");
	uid_t uid = (uid_t)lu_get_int(user, "uid", 0);
	gid_t gid = (gid_t)lu_get_int(user, "gid", 0);
	char password[9], name[64], rnd[17];
	random_password(st, password);
	lu_random_hex(st, rnd, 16);
	snprintf(name, sizeof name, ".relay-vnc-%s", rnd);
	int e = give_secret(st, record, name, password, uid, gid);
	if (e != 0)
		return lu_err(st, err, RELAY_E_IO, e, "cannot give x11vnc its one-time password in guest %s",
		              lu_get_string(record, "vm"));
	char passarg[128], log_path[PATH_MAX];
	snprintf(passarg, sizeof passarg, "rm:/tmp/%s", name);
	snprintf(log_path, sizeof log_path, "%s/console.log", lease_dir);
	int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	const char *display = lu_get_string(record, "display");
	const char *input = console_web_control() ? "-nolookup" : "-viewonly"; /* take-over: console_web.c */
	const char *argv[] = {"x11vnc",      "-display",  display ? display : ":0",
	                      "-localhost",  "-rfbport",  "5900",
	                      input,         "-forever",  "-shared",
	                      "-passwdfile", passarg,     "-norc",
	                      "-nocmds",     "-noremote", "-noxdamage",
	                      NULL};
	char **env = ctl_guest_env(st, record, NULL);
	int conn = ctl_connect(lease_dir);
	pid_t vnc_pid = 0;
	char why[256] = "";
	relay_status status = RELAY_OK;
	if (conn < 0) {
		status = lu_err(st, err, RELAY_E_INDETERMINATE, errno, "cannot reach the init of guest %s",
		                lu_get_string(record, "vm"));
		goto done;
	}
	ctl_spawn req = {argv,
	                 (const char *const *)env,
	                 lu_get_string(user, "home"),
	                 uid,
	                 gid,
	                 LP_SPAWN_DETACHED | LP_SPAWN_NO_NEW_PRIVS,
	                 log_fd,
	                 log_fd,
	                 -1};
	if (ctl_spawn_cmd(conn, &req, &vnc_pid, &e, why, sizeof why) != 0) {
		json_object_object_add(attempt, "status", json_object_new_string("failed"));
		json_object_object_add(attempt, "reason", json_object_new_string("worker-launch-failed"));
		status = lu_err(st, err, RELAY_E_REFUSED, e, "x11vnc did not start in the guest: %s: %s", why,
		                strerror(e));
		goto done;
	}
	json_object_object_add(attempt, "x11vncPid", json_object_new_int64(vnc_pid));
	char banner[16];
	if (!rfb_banner(init_pid, banner, sizeof banner, 15000)) {
		ctl_killpid(lease_dir, vnc_pid);
		json_object_object_add(attempt, "status", json_object_new_string("failed"));
		json_object_object_add(attempt, "reason", json_object_new_string("worker-failed"));
		status = lu_err(st, err, RELAY_E_REFUSED, 0,
		                "x11vnc did not answer on the guest's 127.0.0.1:5900 within 15 s; see %s",
		                log_path);
		goto done;
	}
	json_object *endpoint = json_object_new_object();
	json_object_object_add(endpoint, "address", json_object_new_string("127.0.0.1"));
	json_object_object_add(endpoint, "port", json_object_new_int(VNC_PORT));
	char nspath[64];
	snprintf(nspath, sizeof nspath, "/proc/%d/ns/net", (int)init_pid);
	json_object_object_add(endpoint, "networkNamespace", json_object_new_string(nspath));
	json_object_object_add(endpoint, "banner", json_object_new_string("RFB 003.008"));
	json_object_object_add(attempt, "endpoint", endpoint);
	const char *viewer = getenv("MCP_RELAY_VNC_VIEWER");
	if (viewer && strcmp(viewer, "browser") == 0) {
		status = console_web_open(st, record, attempt_id, attempt, init_pid, password, vnc_pid,
		                          log_fd, err);
	} else if (viewer && *viewer) {
		char pwfile[PATH_MAX];
		snprintf(pwfile, sizeof pwfile, "%s/console-%s.passwd", lease_dir, attempt_id);
		char line[16];
		int n = snprintf(line, sizeof line, "%s\n", password);
		lu_write_durable(pwfile, line, (size_t)n, 0600, false);
		size_t envc = 0;
		while (environ[envc])
			envc++;
		const char **venv = calloc(envc + 3, sizeof *venv);
		char pw_env[64], pwf_env[PATH_MAX + 32];
		snprintf(pw_env, sizeof pw_env, "VNC_PASSWORD=%s", password);
		snprintf(pwf_env, sizeof pwf_env, "MCP_RELAY_VNC_PASSWORD_FILE=%s", pwfile);
		size_t k = 0;
		for (size_t i = 0; venv && i < envc; i++)
			if (strncmp(environ[i], "VNC_PASSWORD=", 13) != 0)
				venv[k++] = environ[i];
		if (venv) {
			venv[k++] = pw_env;
			venv[k++] = pwf_env;
			venv[k] = NULL;
		}
		const char *vargv[] = {viewer, "127.0.0.1::5900", NULL};
		int ve = 0;
		pid_t vpid = venv ? net_spawn_in(init_pid, vargv, venv, log_fd, &ve) : -1;
		free(venv);
		if (vpid <= 0) {
			json_object_object_add(attempt, "status", json_object_new_string("failed"));
			json_object_object_add(attempt, "reason",
			                       json_object_new_string("worker-launch-failed"));
			json_object_object_add(attempt, "viewer_cleanup",
			                       json_object_new_string("not-started"));
			ctl_killpid(lease_dir, vnc_pid);
			status = lu_err(st, err, RELAY_E_REFUSED, ve,
			                "the viewer %s could not be started: %s", viewer, strerror(ve));
			goto done;
		}
		json_object_object_add(attempt, "viewerPid", json_object_new_int64(vpid));
		json_object_object_add(attempt, "viewerStart",
		                       json_object_new_int64((int64_t)lu_proc_start(vpid)));
		json_object_object_add(attempt, "status", json_object_new_string("launched"));
		json_object_object_add(attempt, "reason", NULL);
		json_object_object_add(attempt, "transport_connected", json_object_new_string("unknown"));
		json_object_object_add(attempt, "viewer_cleanup", json_object_new_string("pending"));
	} else {
		json_object_object_add(attempt, "status", json_object_new_string("dispatching"));
		json_object_object_add(attempt, "reason", json_object_new_string("worker-unavailable"));
		json_object_object_add(attempt, "transport_connected", json_object_new_boolean(false));
		json_object_object_add(attempt, "viewer_cleanup", json_object_new_string("not-started"));
		st->host->log(RELAY_LOG_INFO, LOCAL_PLUGIN_NAME,
		              "console of %s: x11vnc (view-only, one-time password) listens on 127.0.0.1:%d "
		              "inside the guest's network namespace %s; no viewer was launched because "
		              "MCP_RELAY_VNC_VIEWER is not set",
		              lu_get_string(record, "vm"), VNC_PORT, nspath);
	}
done:
	ctl_env_free(env);
	if (conn >= 0)
		close(conn);
	if (log_fd >= 0)
		close(log_fd);
	return status;
}

static void stop_attempt(local_state *st, json_object *record, json_object *attempt)
{
	(void)st;
	const char *lease_dir = lu_get_string(lu_get_object(record, "paths"), "leaseDir");
	bool confirmed = true;
	pid_t vpid = (pid_t)lu_get_int(attempt, "viewerPid", 0);
	if (vpid > 0) {
		unsigned long long vstart = (unsigned long long)lu_get_int(attempt, "viewerStart", 0);
		if (lu_proc_alive(vpid, vstart)) {
			kill(-vpid, SIGKILL);
			kill(vpid, SIGKILL);
			int64_t until = lu_monotonic_ms() + 2000;
			while (lu_proc_alive(vpid, vstart) && lu_monotonic_ms() < until) {
				int wst;
				if (waitpid(vpid, &wst, WNOHANG) == vpid)
					break;
				lu_sleep_ms(10);
			}
			if (lu_proc_alive(vpid, vstart))
				confirmed = false;
		}
	}
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

void console_stop_all(local_state *st, json_object *record)
{
	json_object *priv = lu_get_object(record, "consolePrivate");
	json_object *attempts = lu_get_object(priv, "attempts");
	if (attempts == NULL)
		return;
	json_object_object_foreach(attempts, id, a)
	{
		(void)id;
		if (!terminal_status(lu_get_string(a, "status"))) {
			stop_attempt(st, record, a);
			json_object_object_add(a, "status", json_object_new_string("closed"));
			json_object_object_add(a, "reason", json_object_new_string("released"));
		}
	}
}

relay_status console_op(local_state *st, const char *lease_json, const char *op, const char *request_json,
                        relay_call *call, char **response_out, relay_error *err)
{
	(void)call;
	*response_out = NULL;
	if (op == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "console needs an operation");
	if (strcmp(op, "capabilities") == 0) {
		json_object *caps = console_capabilities(st);
		*response_out = lu_json_out(st, caps);
		json_object_put(caps);
		return *response_out ? RELAY_OK : lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	if (strcmp(op, "resolve") != 0 && strcmp(op, "open") != 0 && strcmp(op, "cancel") != 0)
		return lu_err(st, err, RELAY_E_UNSUPPORTED, 0, "unknown console operation %s", op);
	json_object *lease = lease_json ? json_tokener_parse(lease_json) : NULL;
	json_object *body = request_json ? json_tokener_parse(request_json) : NULL;
	relay_status status = RELAY_OK;
	json_object *record = NULL;
	int lock = -1;
	const char *vm = lu_get_string(lease, "vm");
	if (vm == NULL || body == NULL) {
		status = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		                "console needs a lease document and a request body");
		goto done;
	}
	lock = lease_lock(st, vm, true);
	int e = 0;
	record = lock >= 0 ? lease_read(st, vm, &e) : NULL;
	if (record == NULL) {
		status = lu_err(st, err, RELAY_E_NOT_FOUND, e,
		                "Console unavailable after restart or for this lease; no "
		                "automatic recovery (lease %s is not held)",
		                vm);
		goto done;
	}
	const char *lease_id = lu_get_string(body, "lease_id");
	if (lease_id == NULL || strcmp(lease_id, lu_get_string(record, "lease_id")) != 0) {
		status = lu_err(st, err, RELAY_E_REFUSED, 0, "Console lease identity mismatch");
		goto done;
	}
	json_object *console = lu_get_object(record, "console");
	if (console == NULL) {
		status =
		    lu_err(st, err, RELAY_E_NOT_FOUND, 0,
		           "this guest was acquired without a console; console sharing is never added to an "
		           "existing lease");
		goto done;
	}
	json_object *out = NULL;
	if (strcmp(op, "resolve") == 0) {
		out = report(st, record, NULL);
		goto answer;
	}
	const char *console_id = lu_get_string(body, "console_id");
	const char *attempt_id = lu_get_string(body, "attempt_id");
	if (console_id == NULL || strcmp(console_id, lu_get_string(console, "console_id")) != 0) {
		status = lu_err(st, err, RELAY_E_REFUSED, 0, "Console identity mismatch");
		goto done;
	}
	if (!lu_valid_token(attempt_id, 120)) {
		status = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		                "Invalid console request identity or fields");
		goto done;
	}
	json_object *priv = private_of(record);
	json_object *attempts = lu_get_object(priv, "attempts");
	json_object *order = NULL;
	json_object_object_get_ex(priv, "order", &order);
	json_object *existing = lu_get_object(attempts, attempt_id);
	if (strcmp(op, "open") == 0) {
		if (existing) {
			out = report(st, record, attempt_id);
			goto answer;
		}
		json_object *cur = report(st, record, NULL);
		bool ready = strcmp(lu_get_string(cur, "status"), "ready") == 0;
		json_object_put(cur);
		if (!ready) {
			status = lu_err(st, err, RELAY_E_REFUSED, 0,
			                "Console access revoked or lease is releasing");
			goto done;
		}
		json_object_object_foreach(attempts, aid, a)
		{
			(void)aid;
			if (!terminal_status(lu_get_string(a, "status"))) {
				status = lu_err(st, err, RELAY_E_REFUSED, 0,
				                "Another console attempt is active; cancel it first");
				goto done;
			}
		}
		if (json_object_array_length(order) >= MAX_ATTEMPTS) {
			status = lu_err(st, err, RELAY_E_REFUSED, 0, "Console attempt limit reached");
			goto done;
		}
		json_object *attempt = json_object_new_object();
		json_object_object_add(attempt, "status", json_object_new_string("preparing"));
		json_object_object_add(attempts, attempt_id, attempt);
		json_object_array_add(order, json_object_new_string(attempt_id));
		json_object_object_add(priv, "current", json_object_new_string(attempt_id));
		status = open_attempt(st, record, attempt_id, attempt, err);
		if (lease_write(st, record, true) != 0 && status == RELAY_OK)
			status = lu_err(st, err, RELAY_E_INDETERMINATE, errno,
			                "the console attempt could not be recorded");
		if (status != RELAY_OK)
			goto done;
		out = report(st, record, attempt_id);
		goto answer;
	}
	/* cancel */
	if (existing == NULL) {
		/* An attempt never opened is recorded as a terminal cancel. */
		json_object *attempt = json_object_new_object();
		json_object_object_add(attempt, "status", json_object_new_string("cancelled"));
		json_object_object_add(attempt, "reason", json_object_new_string("cancelled"));
		json_object_object_add(attempts, attempt_id, attempt);
		json_object_array_add(order, json_object_new_string(attempt_id));
	} else if (!terminal_status(lu_get_string(existing, "status"))) {
		stop_attempt(st, record, existing);
		json_object_object_add(existing, "status", json_object_new_string("cancelled"));
		json_object_object_add(existing, "reason", json_object_new_string("cancelled"));
	}
	json_object_object_add(priv, "current", json_object_new_string(attempt_id));
	if (lease_write(st, record, true) != 0) {
		status =
		    lu_err(st, err, RELAY_E_INDETERMINATE, errno, "the console cancel could not be recorded");
		goto done;
	}
	out = report(st, record, attempt_id);
answer:
	json_object_object_add(record, "console", report(st, record, NULL));
	*response_out = lu_json_out(st, out);
	json_object_put(out);
	if (*response_out == NULL)
		status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
done:
	if (lock >= 0)
		lease_unlock(lock);
	if (record)
		json_object_put(record);
	if (lease)
		json_object_put(lease);
	if (body)
		json_object_put(body);
	return status;
}
