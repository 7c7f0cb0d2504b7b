/*
 * md_console.c — machine-docker's console passthrough (md_console.h), the
 * same console machine-local serves (plugins/machine-local/console.c), so
 * console-vnc works unchanged:
 *
 *   acquire with vnc: the image must have Xvfb and x11vnc and the engine
 *     must be on this host; the record gets a console report (ready);
 *   open: a one-time password file goes into the guest's /tmp (0600, the
 *     guest user's; x11vnc reads and deletes it: "rm:"), x11vnc starts as
 *     the guest user through the exec API, under the guest program's
 *     "exec" (its process group's id in a pid file, for "kill"), on :0,
 *     -localhost -rfbport 5900 -viewonly; the relay then connects to
 *     127.0.0.1:5900 from a thread of its own switched into the container's
 *     network namespace (/proc/<State.Pid>/ns/net) and reads the RFB
 *     banner. With MCP_RELAY_VNC_VIEWER set, that viewer is started on this
 *     host in the same namespace as `<viewer> 127.0.0.1::5900`, with
 *     VNC_PASSWORD and MCP_RELAY_VNC_PASSWORD_FILE; without it nothing is
 *     launched (status dispatching, reason worker-unavailable);
 *   cancel: the viewer and x11vnc are stopped.
 * Never claimed: a viewer connected, pixels, authentication, a person's
 * confirmation ("unverified"). No password is ever part of a report.
 * Remote engines (ssh://, tcp://) get no console: the container's network
 * namespace is on another host.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "md.h"
#include "md_console.h"
#include "md_lease.h"

extern char **environ;

#define VNC_PORT     5900
#define MAX_ATTEMPTS 64

/* ---- what this endpoint can do ------------------------------------------------------ */

const char *md_console_unreachable(md_state *st, char *why, size_t size)
{
	if (st->ssh.enabled || st->tls.enabled) {
		md_textf(why, size,
		         "the engine at %s is on another host, and a console needs the container's network "
		         "namespace on this one (/proc/<pid>/ns/net); use an engine on this host (a unix:// "
		         "endpoint) for guests with vnc",
		         st->endpoint);
		return "remote-engine";
	}
	if (!st->display_enabled) {
		md_textf(why, size, "options.display is off, and a console shows the guest's display");
		return "display-off";
	}
	/* Entering a container's network namespace needs root, or the user
	 * whose rootless engine made it (the socket's owner). */
	struct stat sb;
	if (geteuid() != 0 && (stat(st->socket_path, &sb) != 0 || sb.st_uid != geteuid())) {
		md_textf(why, size,
		         "the relay runs as uid %u and the engine's socket %s is not its own, so it cannot "
		         "enter a container's network namespace; run the relay as root or use rootless "
		         "Podman as the relay's user",
		         (unsigned)geteuid(), st->socket_path);
		return "namespace-unreachable";
	}
	why[0] = '\0';
	return NULL;
}

static json_object *backend_entry(bool available, const char *reason)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "available", json_object_new_boolean(available));
	json_object_object_add(o, "status", json_object_new_string(available ? "configured" : "unavailable"));
	json_object_object_add(o, "reason", reason ? json_object_new_string(reason) : NULL);
	static const char *const fields[][2] = {{"backend", "x11vnc"},
	                                        {"viewer_location", "service-host"},
	                                        {"authentication", "password"},
	                                        {"guest_readiness", "unverified"},
	                                        {"session_binding", "existing-x11-session"},
	                                        {"server_enforced_view_only", NULL},
	                                        {"pixels", "unverified"},
	                                        {"human_confirmation", "unverified"}};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		json_object *v = !available     ? json_object_new_string("unknown")
		                 : fields[i][1] ? json_object_new_string(fields[i][1])
		                                : json_object_new_boolean(true);
		json_object_object_add(o, fields[i][0], v);
	}
	return o;
}

static json_object *capabilities(md_state *st, relay_call *call)
{
	char why[512];
	const char *reason = md_console_unreachable(st, why, sizeof why);
	json_object *backends = json_object_new_object();
	json_object_object_add(backends, "linux", backend_entry(reason == NULL, reason));
	json_object_object_add(backends, "macos", backend_entry(false, "not-offered-by-machine-docker"));
	json_object *vnc = json_object_new_object();
	json_object_object_add(vnc, "default", json_object_new_boolean(false));
	json_object_object_add(vnc, "backends", backends);
	json_object *options = json_object_new_object();
	json_object_object_add(options, "vnc", vnc);
	/* A Swarm: its nodes, where the manager places each guest (md_nodes.c). */
	json_object *placement = md_nodes_placement_report(st, call);
	if (placement)
		json_object_object_add(options, "placement", placement);
	json_object *out = json_object_new_object();
	json_object_object_add(out, "schemaVersion", json_object_new_int(1));
	json_object_object_add(out, "service", json_object_new_string(MD_PLUGIN_NAME));
	json_object_object_add(out, "options", options);
	return out;
}

relay_status md_console_check(md_state *st, const char *key, bool xvfb, bool x11vnc, relay_error *err)
{
	char why[512];
	if (md_console_unreachable(st, why, sizeof why))
		return md_err(st, err, RELAY_E_REFUSED, 0,
		              "machine-docker cannot give guest %s a console: %s", key, why);
	if (!xvfb || !x11vnc)
		return md_err(st, err, RELAY_E_REFUSED, 0,
		              "image %s cannot give a console: a console needs Xvfb and x11vnc in the image "
		              "(%s); acquire without vnc, or use an image with both",
		              key, xvfb ? "it has Xvfb but no /usr/bin/x11vnc" : "it has neither");
	return RELAY_OK;
}

const char *md_console_probe_text(md_state *st, bool known, bool xvfb, bool x11vnc, bool *vnc_out)
{
	char why[512];
	const char *reason = md_console_unreachable(st, why, sizeof why);
	*vnc_out = known && xvfb && x11vnc && reason == NULL;
	if (!known)
		return "off: the image's contents are not known";
	if (!x11vnc)
		return "off: the image has no x11vnc (acquire with vnc is refused)";
	if (!xvfb)
		return "off: the image has x11vnc but no Xvfb (acquire with vnc is refused)";
	if (reason && strcmp(reason, "remote-engine") == 0)
		return "off: the image has x11vnc, but the engine is on another host and a console needs "
		       "the container's network namespace on this one (acquire with vnc is refused)";
	if (reason && strcmp(reason, "display-off") == 0)
		return "off: the image has x11vnc, but options.display is off";
	if (reason)
		return "off: the image has x11vnc, but this relay cannot enter the engine's network "
		       "namespaces (run it as root, or as the user of a rootless engine)";
	return "on: x11vnc on the guest's display, view-only, reached in the container's network "
	       "namespace (acquire with vnc)";
}

/* ---- records and reports -------------------------------------------------------------- */

static json_object *private_of(json_object *rec)
{
	json_object *p = md_obj(rec, "consolePrivate");
	if (p == NULL) {
		p = json_object_new_object();
		json_object_object_add(p, "attempts", json_object_new_object());
		json_object_object_add(p, "order", json_object_new_array());
		json_object_object_add(rec, "consolePrivate", p);
	}
	return p;
}

static bool terminal_status(const char *s)
{
	return s && (strcmp(s, "cancelled") == 0 || strcmp(s, "closed") == 0 || strcmp(s, "failed") == 0 ||
	             strcmp(s, "expired") == 0);
}

static void put_text(json_object *o, const char *key, const char *value)
{
	json_object_object_add(o, key, value ? json_object_new_string(value) : NULL);
}

static json_object *public_attempt(json_object *a, const char *id)
{
	if (a == NULL)
		return NULL;
	json_object *o = json_object_new_object();
	put_text(o, "attempt_id", id);
	const char *status = md_str(a, "status");
	put_text(o, "status", status ? status : "failed");
	put_text(o, "reason", md_str(a, "reason"));
	json_object *tc = NULL;
	if (json_object_object_get_ex(a, "transport_connected", &tc) && tc)
		json_object_object_add(o, "transport_connected", json_object_get(tc));
	else
		json_object_object_add(o, "transport_connected", json_object_new_boolean(false));
	const char *cleanup = md_str(a, "viewer_cleanup");
	put_text(o, "viewer_cleanup", cleanup ? cleanup : "not-started");
	put_text(o, "authentication", "required");
	put_text(o, "viewer_connected", "unverified");
	put_text(o, "human_confirmation", "unverified");
	return o;
}

/* The report of spec/machine-service.md §9.2, with the fields machine-local
 * reports; `running` says whether the container still runs. */
static json_object *report(md_state *st, json_object *rec, const char *attempt_id, bool running)
{
	json_object *console = md_obj(rec, "console");
	json_object *priv = private_of(rec);
	if (attempt_id == NULL)
		attempt_id = md_str(priv, "current");
	json_object *a = attempt_id ? md_obj(md_obj(priv, "attempts"), attempt_id) : NULL;
	int64_t now = st->host->now_ms();
	int64_t expires = md_int(rec, "expiresAtMs", 0);
	const char *status = "ready", *reason = NULL;
	if (!running) {
		status = "revoked";
		reason = "released";
	} else if (expires && now > expires) {
		status = "revoked";
		reason = "expired";
	}
	json_object *r = json_object_new_object();
	json_object_object_add(r, "schemaVersion", json_object_new_int(1));
	put_text(r, "vm", md_str(rec, "vm"));
	put_text(r, "lease_id", md_str(rec, "lease_id"));
	put_text(r, "environment_fingerprint", NULL);
	put_text(r, "console_id", md_str(console, "console_id"));
	put_text(r, "status", status);
	put_text(r, "reason", reason);
	put_text(r, "backend", "x11vnc");
	put_text(r, "viewer_location", "service-host");
	put_text(r, "source", MD_PLUGIN_NAME);
	json_object_object_add(r, "observed_at", json_object_new_double((double)now / 1000.0));
	json_object_object_add(r, "access_expires_at",
	                       expires ? json_object_new_double((double)expires / 1000.0) : NULL);
	put_text(r, "viewer_connected", "unverified");
	put_text(r, "human_confirmation", "unverified");
	put_text(r, "session_binding", "existing-x11-session");
	put_text(r, "readiness_scope", "guest-preflight");
	json_object_object_add(r, "server_enforced_view_only", json_object_new_boolean(true));
	put_text(r, "authentication_mechanism", "one-time-password");
	put_text(r, "authentication", "unverified");
	put_text(r, "pixels", "unverified");
	json_object_object_add(r, "attempt", public_attempt(a, attempt_id));
	json_object *endpoint = a ? md_obj(a, "endpoint") : NULL;
	if (endpoint) {
		json_object *copy = NULL;
		json_object_deep_copy(endpoint, &copy, NULL);
		json_object_object_add(r, "endpoint", copy);
	}
	if (a)
		json_object_object_add(r, "viewer_launched",
		                       json_object_new_boolean(md_int(a, "viewerPid", 0) > 0));
	md_console_web_report(r, a);
	return r;
}

void md_console_prepare(md_state *st, json_object *rec)
{
	char cid[33];
	md_random_hex(st, cid, 32);
	json_object *console = json_object_new_object();
	json_object_object_add(console, "console_id", json_object_new_string(cid));
	json_object_object_add(rec, "console", console);
	json_object_object_add(rec, "vnc", json_object_new_boolean(true));
	private_of(rec);
	/* The stored console is the full report, as the lease document's
	 * "console" must be (relay/machine.h). */
	json_object_object_add(rec, "console", report(st, rec, NULL, true));
}

/* ---- the container's network namespace ------------------------------------------------- */

typedef struct netns_job {
	pid_t pid;               /* the container's init on this host */
	const char *const *argv; /* NULL: make a TCP socket */
	const char *const *envp;
	int result; /* the socket or the viewer's pid, -1 on failure */
	int err_no;
} netns_job;

/* Runs in a thread of its own: namespaces are per thread, so switching this
 * one never affects another. A socket keeps the namespace it was made in. */
static void *netns_thread(void *arg)
{
	netns_job *job = arg;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)job->pid);
	int guest = open(path, O_RDONLY | O_CLOEXEC);
	job->result = -1;
	if (guest < 0 || setns(guest, CLONE_NEWNET) != 0) {
		job->err_no = errno;
	} else if (job->argv == NULL) {
		job->result = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		job->err_no = job->result < 0 ? errno : 0;
	} else {
		posix_spawn_file_actions_t fa;
		posix_spawnattr_t attr;
		posix_spawn_file_actions_init(&fa);
		posix_spawnattr_init(&attr);
		posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
		posix_spawnattr_setpgroup(&attr, 0);
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
		posix_spawn_file_actions_adddup2(&fa, 2, 1); /* never the MCP stream */
		posix_spawn_file_actions_addclosefrom_np(&fa, 3);
		pid_t pid = -1;
		int rc = posix_spawnp(&pid, job->argv[0], &fa, &attr, (char *const *)job->argv,
		                      (char *const *)job->envp);
		posix_spawn_file_actions_destroy(&fa);
		posix_spawnattr_destroy(&attr);
		job->result = rc == 0 ? pid : -1;
		job->err_no = rc;
	}
	if (guest >= 0)
		close(guest);
	return NULL; /* the thread ends in the guest's namespace; nothing else runs on it */
}

static int netns_run(netns_job *job)
{
	pthread_t t;
	int rc = pthread_create(&t, NULL, netns_thread, job);
	if (rc != 0) {
		job->err_no = rc;
		return -1;
	}
	pthread_join(t, NULL);
	return job->result;
}

/* Connects to 127.0.0.1:5900 in the namespace of `pid` until an RFB banner
 * ("RFB 003.008\n") is read or timeout_ms pass; the banner without its
 * newline in `banner` (16 bytes). */
static bool rfb_banner(pid_t pid, char banner[16], int timeout_ms, int *err_no)
{
	int64_t until = md_monotonic_ms() + timeout_ms;
	while (md_monotonic_ms() < until) {
		netns_job job = {.pid = pid};
		int fd = netns_run(&job);
		*err_no = job.err_no;
		if (fd < 0)
			return false;
		struct sockaddr_in sa;
		memset(&sa, 0, sizeof sa);
		sa.sin_family = AF_INET;
		sa.sin_port = htons(VNC_PORT);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		size_t got = 0;
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
			struct pollfd pfd = {fd, POLLIN, 0};
			while (got < 12 && poll(&pfd, 1, 2000) > 0) {
				ssize_t n = read(fd, banner + got, 12 - got);
				if (n <= 0)
					break;
				got += (size_t)n;
			}
		}
		close(fd);
		if (got == 12) {
			banner[11] = '\0';
			return strncmp(banner, "RFB ", 4) == 0;
		}
		md_sleep_ms(50);
	}
	return false;
}

/* The host pid of the container's init, when the engine's State.Pid is a
 * process of this host running the guest program; else 0. */
pid_t md_container_init_pid(json_object *info)
{
	pid_t pid = (pid_t)md_int(md_obj(info, "State"), "Pid", 0);
	if (pid <= 0)
		return 0;
	char path[64], cmd[64];
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, cmd, sizeof cmd - 1);
	close(fd);
	if (n <= 0)
		return 0;
	cmd[n] = '\0';
	size_t first = strlen(cmd);
	return strcmp(cmd, MD_GUEST_INIT) == 0 && (size_t)n > first + 1 &&
	               strcmp(cmd + first + 1, "init") == 0
	           ? pid
	           : 0;
}

/* ---- attempts ----------------------------------------------------------------------------- */

static void random_password(md_state *st, char out[9])
{
	static const char alphabet[] = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
	unsigned char bytes[8];
	relay_error e;
	if (st->host->random_bytes(bytes, sizeof bytes, &e) != RELAY_OK)
		for (size_t i = 0; i < sizeof bytes; i++)
			bytes[i] = (unsigned char)(md_monotonic_ms() >> i) ^ (unsigned char)rand();
	for (int i = 0; i < 8; i++)
		out[i] = alphabet[bytes[i] % (sizeof alphabet - 1)];
	out[8] = '\0';
}

static void set_state(json_object *a, const char *status, const char *reason)
{
	put_text(a, "status", status);
	put_text(a, "reason", reason);
}

/* Starts the viewer of MCP_RELAY_VNC_VIEWER in the container's namespace
 * with the password in its environment; its pid, or -1 with *err_no. */
static pid_t start_viewer(md_state *st, json_object *rec, json_object *a, const char *viewer, pid_t pid,
                          const char *password, int *err_no)
{
	char pwfile[PATH_MAX], line[16];
	snprintf(pwfile, sizeof pwfile, "%s/%s.vnc-%s.passwd", st->leases_dir, md_str(rec, "vm"),
	         md_str(a, "token"));
	int n = snprintf(line, sizeof line, "%s\n", password);
	*err_no = md_write_durable(pwfile, line, (size_t)n); /* 0600 */
	if (*err_no != 0)
		return -1;
	put_text(a, "passwordFile", pwfile);
	size_t envc = 0;
	while (environ[envc])
		envc++;
	const char **venv = calloc(envc + 3, sizeof *venv);
	if (venv == NULL) {
		*err_no = ENOMEM;
		return -1;
	}
	char pw_env[64], pwf_env[PATH_MAX + 32];
	snprintf(pw_env, sizeof pw_env, "VNC_PASSWORD=%s", password);
	snprintf(pwf_env, sizeof pwf_env, "MCP_RELAY_VNC_PASSWORD_FILE=%s", pwfile);
	size_t k = 0;
	for (size_t i = 0; i < envc; i++)
		if (strncmp(environ[i], "VNC_PASSWORD=", 13) != 0)
			venv[k++] = environ[i];
	venv[k++] = pw_env;
	venv[k++] = pwf_env;
	const char *vargv[] = {viewer, "127.0.0.1::5900", NULL};
	netns_job job = {.pid = pid, .argv = vargv, .envp = venv};
	pid_t vpid = (pid_t)netns_run(&job);
	*err_no = job.err_no;
	free(venv);
	return vpid;
}

static void stop_attempt(md_state *st, json_object *rec, json_object *a, bool in_guest);

static relay_status open_attempt(md_state *st, json_object *rec, json_object *a, pid_t pid, relay_call *call,
                                 relay_error *err)
{
	const char *vm = md_str(rec, "vm");
	const char *container = md_container_of(rec);
	const char *user = md_str(rec, "user");
	unsigned uid = 0, gid = 0;
	if (user == NULL || sscanf(user, "%u:%u", &uid, &gid) != 2)
		return md_err(st, err, RELAY_E_INTERNAL, 0, "the record of %s names no guest user", vm);
	char token[17], name[64], password[9];
	md_random_hex(st, token, 16);
	put_text(a, "token", token);
	random_password(st, password);
	snprintf(name, sizeof name, ".relay-vnc-%s", token);
	char line[16];
	int n = snprintf(line, sizeof line, "%s\n", password);
	relay_status s = lease_put_file(st, container, "/tmp", name, line, (size_t)n, 0600, (uid_t)uid,
	                                (gid_t)gid, call, err);
	if (s != RELAY_OK) {
		set_state(a, "failed", "worker-launch-failed");
		return s;
	}
	char passarg[96], logarg[96], pidfile[128];
	snprintf(passarg, sizeof passarg, "rm:/tmp/%s", name);
	snprintf(logarg, sizeof logarg, "/tmp/%s.log", name);
	snprintf(pidfile, sizeof pidfile, MD_GUEST_RUN_DIR "/vnc-%s", token);
	const char *display = md_str(rec, "display");
	const char *argv[] = {MD_GUEST_INIT, "exec",
	                      pidfile,       "x11vnc",
	                      "-display",    display ? display : ":0",
	                      "-localhost",  "-rfbport",
	                      "5900",        md_console_web_control() ? "-nolookup" : "-viewonly",
	                      "-forever",    "-shared",
	                      "-passwdfile", passarg,
	                      "-norc",       "-nocmds",
	                      "-noremote",   "-noxdamage",
	                      "-o",          logarg,
	                      NULL};
	if (!md_exec_detached(st, container, user, argv, call)) {
		set_state(a, "failed", "worker-launch-failed");
		return md_err(st, err, RELAY_E_REFUSED, 0, "x11vnc could not be started in guest %s", vm);
	}
	put_text(a, "x11vncPidFile", pidfile);
	char banner[16];
	int e = 0;
	if (!rfb_banner(pid, banner, 15000, &e)) {
		stop_attempt(st, rec, a, true);
		set_state(a, "failed", "worker-failed");
		return md_err(st, err, RELAY_E_REFUSED, e,
		              "x11vnc did not answer on 127.0.0.1:5900 in the network namespace of guest %s "
		              "(/proc/%d/ns/net) within 15 s%s; its log is %s in the guest",
		              vm, (int)pid, e ? ": the namespace cannot be entered" : "", logarg);
	}
	json_object *endpoint = json_object_new_object();
	put_text(endpoint, "address", "127.0.0.1");
	json_object_object_add(endpoint, "port", json_object_new_int(VNC_PORT));
	char nspath[64];
	snprintf(nspath, sizeof nspath, "/proc/%d/ns/net", (int)pid);
	put_text(endpoint, "networkNamespace", nspath);
	put_text(endpoint, "banner", banner);
	json_object_object_add(a, "endpoint", endpoint);
	const char *viewer = getenv("MCP_RELAY_VNC_VIEWER");
	if (viewer == NULL || viewer[0] == '\0') {
		set_state(a, "dispatching", "worker-unavailable");
		json_object_object_add(a, "transport_connected", json_object_new_boolean(false));
		put_text(a, "viewer_cleanup", "not-started");
		st->host->log(RELAY_LOG_INFO, MD_PLUGIN_NAME,
		              "console of %s: x11vnc (view-only, one-time password) listens on 127.0.0.1:%d "
		              "inside the container's network namespace %s; no viewer was launched because "
		              "MCP_RELAY_VNC_VIEWER is not set",
		              vm, VNC_PORT, nspath);
		return RELAY_OK;
	}
	if (strcmp(viewer, "browser") == 0) {
		relay_status ws = md_console_web_start(st, rec, a, pid, password, err);
		if (ws != RELAY_OK)
			stop_attempt(st, rec, a, true);
		set_state(a, ws == RELAY_OK ? "launched" : "failed",
		          ws == RELAY_OK ? NULL : "worker-launch-failed");
		put_text(a, "transport_connected", ws == RELAY_OK ? "unknown" : NULL);
		put_text(a, "viewer_cleanup", ws == RELAY_OK ? "pending" : "not-started");
		return ws;
	}
	pid_t vpid = start_viewer(st, rec, a, viewer, pid, password, &e);
	if (vpid <= 0) {
		set_state(a, "failed", "worker-launch-failed");
		put_text(a, "viewer_cleanup", "not-started");
		return md_err(st, err, RELAY_E_REFUSED, e, "the viewer %s could not be started: %s", viewer,
		              strerror(e));
	}
	json_object_object_add(a, "viewerPid", json_object_new_int64(vpid));
	json_object_object_add(a, "viewerStart", json_object_new_int64((int64_t)md_proc_start(vpid)));
	set_state(a, "launched", NULL);
	put_text(a, "transport_connected", "unknown");
	put_text(a, "viewer_cleanup", "pending");
	return RELAY_OK;
}

/* Stops the attempt's viewer (this host) and, when `in_guest`, its x11vnc. */
static void stop_attempt(md_state *st, json_object *rec, json_object *a, bool in_guest)
{
	bool confirmed = true;
	pid_t vpid = (pid_t)md_int(a, "viewerPid", 0);
	unsigned long long vstart = (unsigned long long)md_int(a, "viewerStart", 0);
	if (vpid > 0 && md_proc_start(vpid) == vstart) {
		kill(-vpid, SIGKILL);
		kill(vpid, SIGKILL);
		for (int64_t until = md_monotonic_ms() + 2000;
		     md_proc_start(vpid) == vstart && md_monotonic_ms() < until;) {
			if (waitpid(vpid, NULL, WNOHANG) == vpid)
				break;
			md_sleep_ms(10);
		}
		confirmed = md_proc_start(vpid) != vstart;
	}
	const char *pwfile = md_str(a, "passwordFile");
	if (pwfile)
		unlink(pwfile);
	const char *pidfile = md_str(a, "x11vncPidFile");
	if (in_guest && pidfile) {
		const char *const argv[] = {MD_GUEST_INIT, "kill", pidfile, NULL};
		relay_exec_result res;
		memset(&res, 0, sizeof res);
		res.struct_size = sizeof res;
		relay_error e;
		relay_status s =
		    exec_simple(st, md_container_of(rec), md_str(rec, "user"), argv, 15000, NULL, &res, &e);
		if (s != RELAY_OK || res.exit_code != 0)
			confirmed = false;
		exec_result_free(st, &res);
	}
	put_text(a, "viewer_cleanup", confirmed ? "local-children-stopped" : "unconfirmed");
}

void md_console_stop_all(md_state *st, json_object *rec)
{
	json_object *attempts = md_obj(md_obj(rec, "consolePrivate"), "attempts");
	if (attempts == NULL)
		return;
	json_object_object_foreach(attempts, id, a)
	{
		(void)id;
		if (!terminal_status(md_str(a, "status"))) {
			stop_attempt(st, rec, a, false); /* x11vnc goes with the container */
			set_state(a, "closed", "released");
		}
	}
}

/* ---- the passthrough ----------------------------------------------------------------------- */

/* Opens attempt `attempt_id` (new) when the console is ready. */
static relay_status op_open(md_state *st, json_object *rec, const char *attempt_id, pid_t pid,
                            relay_call *call, relay_error *err)
{
	json_object *priv = private_of(rec);
	json_object *attempts = md_obj(priv, "attempts");
	json_object *order = NULL;
	json_object_object_get_ex(priv, "order", &order);
	json_object *cur = report(st, rec, NULL, pid > 0);
	bool ready = strcmp(md_str(cur, "status"), "ready") == 0;
	json_object_put(cur);
	if (!ready)
		return md_err(st, err, RELAY_E_REFUSED, 0, "Console access revoked or lease is releasing");
	json_object_object_foreach(attempts, aid, a)
	{
		(void)aid;
		if (!terminal_status(md_str(a, "status")))
			return md_err(st, err, RELAY_E_REFUSED, 0,
			              "Another console attempt is active; cancel it first");
	}
	if (json_object_array_length(order) >= MAX_ATTEMPTS)
		return md_err(st, err, RELAY_E_REFUSED, 0, "Console attempt limit reached");
	json_object *attempt = json_object_new_object();
	set_state(attempt, "preparing", NULL);
	json_object_object_add(attempts, attempt_id, attempt);
	json_object_array_add(order, json_object_new_string(attempt_id));
	put_text(priv, "current", attempt_id);
	relay_status s = open_attempt(st, rec, attempt, pid, call, err);
	json_object_object_add(rec, "console", report(st, rec, NULL, pid > 0));
	if (md_record_write(st, rec) != 0 && s == RELAY_OK)
		s = md_err(st, err, RELAY_E_INDETERMINATE, errno,
		           "the console attempt could not be recorded");
	return s;
}

static relay_status op_cancel(md_state *st, json_object *rec, const char *attempt_id, pid_t pid,
                              relay_error *err)
{
	json_object *priv = private_of(rec);
	json_object *attempts = md_obj(priv, "attempts");
	json_object *existing = md_obj(attempts, attempt_id);
	if (existing == NULL) {
		/* An attempt never opened is recorded as a terminal cancel. */
		json_object *attempt = json_object_new_object();
		set_state(attempt, "cancelled", "cancelled");
		json_object_object_add(attempts, attempt_id, attempt);
		json_object *order = NULL;
		json_object_object_get_ex(priv, "order", &order);
		json_object_array_add(order, json_object_new_string(attempt_id));
	} else if (!terminal_status(md_str(existing, "status"))) {
		stop_attempt(st, rec, existing, pid > 0);
		set_state(existing, "cancelled", "cancelled");
	}
	put_text(priv, "current", attempt_id);
	json_object_object_add(rec, "console", report(st, rec, NULL, pid > 0));
	if (md_record_write(st, rec) != 0)
		return md_err(st, err, RELAY_E_INDETERMINATE, errno,
		              "the console cancel could not be recorded");
	return RELAY_OK;
}

static bool token_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n < 1 || n > 120)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

/* The record's identity checks of a request; RELAY_OK or the refusal. */
static relay_status check_request(md_state *st, json_object *rec, json_object *body, const char *op,
                                  relay_error *err)
{
	const char *lease_id = md_str(body, "lease_id");
	if (lease_id == NULL || strcmp(lease_id, md_str(rec, "lease_id")) != 0)
		return md_err(st, err, RELAY_E_REFUSED, 0, "Console lease identity mismatch");
	json_object *console = md_obj(rec, "console");
	if (console == NULL)
		return md_err(st, err, RELAY_E_NOT_FOUND, 0,
		              "this guest was acquired without a console; console sharing is never added to "
		              "an existing lease");
	if (strcmp(op, "resolve") == 0)
		return RELAY_OK;
	const char *console_id = md_str(body, "console_id");
	if (console_id == NULL || strcmp(console_id, md_str(console, "console_id")) != 0)
		return md_err(st, err, RELAY_E_REFUSED, 0, "Console identity mismatch");
	if (!token_ok(md_str(body, "attempt_id")))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "Invalid console request identity or fields");
	return RELAY_OK;
}

relay_status md_console_op(md_state *st, const char *lease_json, const char *op, const char *request_json,
                           relay_call *call, char **response_out, relay_error *err)
{
	*response_out = NULL;
	if (op == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "console needs an operation");
	if (strcmp(op, "capabilities") == 0) {
		json_object *caps = capabilities(st, call);
		*response_out = md_json_out(st, caps);
		json_object_put(caps);
		return *response_out ? RELAY_OK : md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	if (strcmp(op, "resolve") != 0 && strcmp(op, "open") != 0 && strcmp(op, "cancel") != 0)
		return md_err(st, err, RELAY_E_UNSUPPORTED, 0, "unknown console operation %s", op);
	json_object *lease = lease_json ? json_tokener_parse(lease_json) : NULL;
	json_object *body = request_json ? json_tokener_parse(request_json) : NULL;
	json_object *rec = NULL, *info = NULL, *out = NULL;
	relay_status s = RELAY_OK;
	int lock = -1;
	const char *vm = md_str(lease, "vm");
	if (!md_valid_name(vm) || body == NULL) {
		s = md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		           "console needs a lease document and a request body");
		goto done;
	}
	lock = md_record_lock(st, vm);
	int e = 0;
	rec = lock >= 0 ? md_record_read(st, vm, &e) : NULL;
	if (rec == NULL) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, e,
		           "Console unavailable after restart or for this lease; no automatic recovery "
		           "(lease %s is not held)",
		           vm);
		goto done;
	}
	s = check_request(st, rec, body, op, err);
	if (s != RELAY_OK)
		goto done;
	/* The container's init on this host: 0 when it no longer runs. */
	int found = md_container_get(st, md_container_of(rec), call, &info);
	pid_t pid = found == 1 && md_container_running(info) ? md_container_init_pid(info) : 0;
	if (found == 1 && md_container_running(info) && pid == 0 && strcmp(op, "open") == 0) {
		s = md_err(st, err, RELAY_E_REFUSED, 0,
		           "the engine names process %lld as the init of %s, and it is not a guest of this "
		           "host: the engine at %s does not run here",
		           (long long)md_int(md_obj(info, "State"), "Pid", 0), vm, st->endpoint);
		goto done;
	}
	const char *attempt_id = md_str(body, "attempt_id");
	if (strcmp(op, "open") == 0 && md_obj(md_obj(private_of(rec), "attempts"), attempt_id) == NULL)
		s = op_open(st, rec, attempt_id, pid, call, err);
	else if (strcmp(op, "cancel") == 0)
		s = op_cancel(st, rec, attempt_id, pid, err);
	if (s != RELAY_OK)
		goto done;
	out = report(st, rec, strcmp(op, "resolve") == 0 ? NULL : attempt_id, pid > 0);
	*response_out = md_json_out(st, out);
	if (*response_out == NULL)
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
done:
	if (lock >= 0)
		close(lock);
	json_object_put(out);
	json_object_put(info);
	json_object_put(rec);
	json_object_put(lease);
	json_object_put(body);
	return s;
}
