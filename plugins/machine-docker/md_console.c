/*
 * md_console.c — machine-docker's typed console (md_console.h), the
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
 * The attempt ledger, the report, the refusals and the viewer on this host
 * are the plugin kit's (relay_kit/console.h); this file is the backend.
 * Remote engines (ssh://, tcp://) get no console: the container's network
 * namespace is on another host.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"
#include "md_console.h"
#include "md_lease.h"

#include "relay_kit/console.h"
#include "relay_kit/netns.h"
#include "relay_kit/text.h"
#include "relay_support/read_small.h"

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

static json_object *console_caps(void *ctx, relay_call *call)
{
	md_state *st = ctx;
	char why[512];
	json_object *out = rk_console_capabilities(
	    MD_PLUGIN_NAME, md_console_unreachable(st, why, sizeof why), "not-offered-by-machine-docker");
	/* A Swarm: its nodes, where the manager places each guest (md_nodes.c). */
	json_object *placement = md_nodes_placement_report(st, call);
	if (placement)
		json_object_object_add(json_object_object_get(out, "options"), "placement", placement);
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

/* ---- the container's network namespace ------------------------------------------------- */

/* The kit's way into the namespace (rk_console_in_netns_fn): ctx is the
 * pid; a viewer's output goes to the relay's standard error. */
static int in_container_netns(void *ctx, const char *const *argv, const char *const *envp, int *err_no)
{
	pid_t pid = *(pid_t *)ctx;
	if (argv == NULL)
		return rk_netns_socket(pid, AF_INET, SOCK_STREAM, err_no);
	return (int)rk_netns_spawn(pid, argv, envp, 2, err_no);
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
	ssize_t n = rs_read_small(path, 0, cmd, sizeof cmd);
	if (n <= 0)
		return 0;
	size_t first = strlen(cmd);
	return strcmp(cmd, MD_GUEST_INIT) == 0 && (size_t)n > first + 1 &&
	               strcmp(cmd + first + 1, "init") == 0
	           ? pid
	           : 0;
}

/* ---- attempts ----------------------------------------------------------------------------- */

static const rk_console_backend docker_console;
static void x11vnc_stop(void *ctx, json_object *rec, json_object *a, bool in_guest);

static relay_status x11vnc_open(void *ctx, json_object *rec, const char *attempt_id, json_object *a,
                                pid_t pid, relay_call *call, relay_error *err)
{
	(void)attempt_id;
	md_state *st = ctx;
	const char *vm = md_str(rec, "vm");
	const char *container = md_container_of(rec);
	const char *user = md_str(rec, "user");
	unsigned uid = 0, gid = 0;
	if (user == NULL || sscanf(user, "%u:%u", &uid, &gid) != 2)
		return md_err(st, err, RELAY_E_INTERNAL, 0, "the record of %s names no guest user", vm);
	char token[17], name[64], password[9];
	md_random_hex(st, token, 16);
	json_object_object_add(a, "token", json_object_new_string(token));
	rk_random_password(st->host, password, 8);
	snprintf(name, sizeof name, ".relay-vnc-%s", token);
	char line[16];
	int n = snprintf(line, sizeof line, "%s\n", password);
	relay_status s = lease_put_file(st, container, "/tmp", name, line, (size_t)n, 0600, (uid_t)uid,
	                                (gid_t)gid, call, err);
	if (s != RELAY_OK) {
		rk_console_set(a, "failed", "worker-launch-failed");
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
	                      "5900",        rk_console_control() ? "-nolookup" : "-viewonly",
	                      "-forever",    "-shared",
	                      "-passwdfile", passarg,
	                      "-norc",       "-nocmds",
	                      "-noremote",   "-noxdamage",
	                      "-o",          logarg,
	                      NULL};
	if (!md_exec_detached(st, container, user, argv, call)) {
		rk_console_set(a, "failed", "worker-launch-failed");
		return md_err(st, err, RELAY_E_REFUSED, 0, "x11vnc could not be started in guest %s", vm);
	}
	json_object_object_add(a, "x11vncPidFile", json_object_new_string(pidfile));
	char banner[16];
	int e = 0;
	if (!rk_console_rfb_banner(in_container_netns, &pid, banner, 15000, &e)) {
		x11vnc_stop(st, rec, a, true);
		rk_console_set(a, "failed", "worker-failed");
		return md_err(st, err, RELAY_E_REFUSED, e,
		              "x11vnc did not answer on 127.0.0.1:5900 in the network namespace of guest %s "
		              "(/proc/%d/ns/net) within 15 s%s; its log is %s in the guest",
		              vm, (int)pid, e ? ": the namespace cannot be entered" : "", logarg);
	}
	rk_console_endpoint(a, pid, banner);
	char pwfile[PATH_MAX], events[PATH_MAX];
	snprintf(pwfile, sizeof pwfile, "%s/%s.vnc-%s.passwd", st->kit.leases_dir, vm, token);
	snprintf(events, sizeof events, "%s/%s-console-%s.events.jsonl", st->kit.leases_dir, vm, token);
	rk_console_viewer v = {vm,     "container's",       pid, password,           pwfile,
	                       events, st->kit.libexec_dir, 2,   in_container_netns, &pid};
	rk_console c = {&docker_console, st->host, st};
	s = rk_console_viewer_start(&c, a, &v, err);
	if (s != RELAY_OK)
		x11vnc_stop(st, rec, a, true);
	return s;
}

/* Stops the attempt's viewer (this host) and, when `in_guest`, its x11vnc. */
static void x11vnc_stop(void *ctx, json_object *rec, json_object *a, bool in_guest)
{
	md_state *st = ctx;
	bool confirmed = rk_console_viewer_stop(a);
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
	json_object_object_add(a, "viewer_cleanup",
	                       json_object_new_string(confirmed ? "local-children-stopped" : "unconfirmed"));
}

/* ---- the backend of the kit's ledger --------------------------------------------------- */

static bool container_name_ok(const char *vm)
{
	return md_valid_name(vm);
}

static json_object *record_locked(void *ctx, const char *vm, int *lock_out, int *errno_out)
{
	md_state *st = ctx;
	*lock_out = md_record_lock(st, vm);
	return *lock_out >= 0 ? md_record_read(st, vm, errno_out) : NULL;
}

static void record_unlock(void *ctx, int lock)
{
	(void)ctx;
	close(lock);
}

static int record_save(void *ctx, json_object *rec)
{
	return md_record_write(ctx, rec);
}

/* The container's init on this host (*pid_out), 0 when it no longer runs;
 * an open is refused when the engine's init is not a process of this host. */
static int container_state(void *ctx, json_object *rec, const char *op, relay_call *call, pid_t *pid_out,
                           relay_error *err)
{
	md_state *st = ctx;
	json_object *info = NULL;
	int found = md_container_get(st, md_container_of(rec), call, &info);
	bool running = found == 1 && md_container_running(info);
	*pid_out = running ? md_container_init_pid(info) : 0;
	int state = *pid_out > 0 ? 1 : 0;
	if (running && *pid_out == 0 && strcmp(op, "open") == 0) {
		md_err(st, err, RELAY_E_REFUSED, 0,
		       "the engine names process %lld as the init of %s, and it is not a guest of this host: "
		       "the engine at %s does not run here",
		       (long long)md_int(md_obj(info, "State"), "Pid", 0), md_str(rec, "vm"), st->endpoint);
		state = -1;
	}
	json_object_put(info);
	return state;
}

static const rk_console_backend docker_console = {
    .source = MD_PLUGIN_NAME,
    .valid_name = container_name_ok,
    .lock_read = record_locked,
    .unlock = record_unlock,
    .write = record_save,
    .guest_state = container_state,
    .open = x11vnc_open,
    .stop = x11vnc_stop,
    .capabilities = console_caps,
};

void md_console_prepare(md_state *st, json_object *rec)
{
	json_object_object_add(rec, "vnc", json_object_new_boolean(true));
	rk_console c = {&docker_console, st->host, st};
	rk_console_prepare(&c, rec);
}

void md_console_stop_all(md_state *st, json_object *rec)
{
	rk_console c = {&docker_console, st->host, st};
	rk_console_stop_all(&c, rec); /* x11vnc goes with the container */
}

/* The typed console: a Swarm task's display is on the engine of its node
 * (md_engine_of), any other lease's on this plugin's engine. */
static relay_status route(relay_plugin_state *state, const rk_console_request *q, relay_call *call,
                          char **out, relay_error *err)
{
	md_state *st = state;
	json_object *doc = rk_json_object(q->lease_json);
	json_object *rec = doc ? md_obj(doc, "record") : NULL;
	md_state *eng = rec ? md_engine_of(st, rec, call) : st;
	json_object_put(doc);
	rk_console c = {&docker_console, eng->host, eng};
	return rk_console_ledger(&c, q, call, out, err);
}

RK_CONSOLE_DEFINE_OPS(md_console_ops, route);
