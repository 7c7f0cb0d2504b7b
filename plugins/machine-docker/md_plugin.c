/*
 * md_plugin.c — machine-docker: guests are containers of OCI images on a
 * Docker Engine or Podman's Docker-compatible service, reached through the
 * Engine API over a unix socket. One shared object providing the machine
 * kind and the transport kind. docs/machine-docker.md is the user's page.
 *
 * Options (MCP_RELAY_DOCKER_OPTIONS or the profile; unknown keys refused):
 *   "endpoint":   "unix:///run/podman/podman.sock"; default the Docker
 *                 socket when it exists, else the user's Podman socket;
 *                 or ssh://user@host[:port] (md_ssh.c) with "ssh":
 *                 {"identityFile", "knownHostsFile", "remoteSocket"};
 *                 or tcp://host:port, only with "tls":
 *                 {"caFile", "certFile", "keyFile"} (client certificates)
 *   "images":     {"<key>": "<image reference>", ...}  the allow-list
 *   "maxGuests":  1..256, default 8
 *   "graceMs", "backstopMs", "reaperIntervalMs", "pullTimeoutMs"
 *   "runtime":    an OCI runtime the engine knows ("runc", "runsc", "kata")
 *   "guestUser":  {"uid": n, "gid": n} (default 61000:61000) | "root"
 *   "limits":     {"memoryBytes", "pids", "nanoCpus"}
 *   "ulimits":    {"nofile", "nproc"}
 *   "display":    "auto" (Xvfb when the image has it) | "off"
 *   "screen":     "1280x800x24"
 *   "nodes":      {"<node hostname or id>": {"endpoint", "ssh", "tls"}}  each Swarm
 *                 node's engine (md_nodes.c); "managers": [{"endpoint", ...}]
 *                 to fail over to; "discovery": {"ssh": {"user", "port",
 *                 "identityFile", "knownHostsFile", "remoteSocket"}};
 *                 "placement": {"constraints": [...], "preferences": [...]}
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "md.h"
#include "md_console.h"
#include "md_egress.h"
#include "relay_kit/machine_config.h"
#include "relay_kit/xfer.h"

/* ---- init ----------------------------------------------------------------------- */

static const rk_machine_backend machine_backend; /* below, with the descriptor */

static void free_state(md_state *st)
{
	if (st == NULL)
		return;
	for (size_t i = 0; i < st->image_count; i++) {
		free(st->images[i].key);
		free(st->images[i].ref);
	}
	rk_machine_config_free(&st->kit);
	free(st->session_id);
	inventory_free(st);
	md_nodes_free(st);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->ssh_lock);
	pthread_mutex_destroy(&st->bake_lock);
	free(st);
}

static relay_status md_init(const relay_host *host, const char *config_json, unsigned flags,
                            relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	md_state *st = calloc(1, sizeof *st);
	if (st == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	st->kit = (rk_machine){.host = host, .backend = &machine_backend};
	st->host = host;
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->ssh_lock, NULL);
	pthread_mutex_init(&st->bake_lock, NULL);
	relay_status s = RELAY_OK;
	json_object *cfg = NULL;
	if (flags) {
		s = md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
		goto fail;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		s = md_err(st, err, RELAY_E_INTERNAL, 0, "libcurl cannot be initialised");
		goto fail;
	}
	cfg = json_tokener_parse(config_json ? config_json : "{}");
	static const rk_machine_config_rules rules = {.state_dir_max_bytes = 1000};
	s = rk_machine_config_read(&st->kit, cfg, &rules, err);
	if (s != RELAY_OK)
		goto fail;
	const char *session = md_str(cfg, "sessionId");
	st->session_id = session ? strdup(session) : NULL;
	if (session && st->session_id == NULL) {
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto fail;
	}
	st->max_guests = 8;
	st->grace_ms = 300000;
	st->backstop_ms = 60000;
	st->reaper_interval_ms = 5000;
	st->pull_timeout_ms = 1800000;
	st->guest_uid = 61000;
	st->guest_gid = 61000;
	st->limit_pids = 1024;
	st->limit_memory_bytes = 2LL << 30;
	st->limit_nano_cpus = 2000000000LL;
	/* An engine running as this user cannot raise limits above the
	 * relay's own; Docker's and Podman's defaults are higher than many
	 * hosts allow, so the guests get explicit ones. */
	struct rlimit rl;
	st->ulimit_nofile =
	    getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max < 65536 ? (int64_t)rl.rlim_max : 65536;
	st->ulimit_nproc =
	    getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_max < 65536 ? (int64_t)rl.rlim_max / 2 : 32768;
	st->display_enabled = true;
	st->swarm = true;
	snprintf(st->screen, sizeof st->screen, "1280x800x24");
	json_object *opts = NULL; /* any type: md_parse_options refuses a non-object */
	json_object_object_get_ex(cfg, "options", &opts);
	s = md_parse_options(st, opts, err);
	st->kit.endpoint = st->endpoint; /* set by the options, kept from now on */
	if (s == RELAY_OK)
		s = md_nodes_init(st, err);
	if (s != RELAY_OK)
		goto fail;
	struct utsname un;
	uname(&un);
	snprintf(st->arch, sizeof st->arch, "%.15s",
	         strcmp(un.machine, "aarch64") == 0
	             ? "arm64"
	             : (strcmp(un.machine, "x86_64") == 0 ? "x86_64" : un.machine));
	rk_read_line("/proc/sys/kernel/random/boot_id", st->boot_id, sizeof st->boot_id);
	st->self_pid = getpid();
	st->self_start = md_proc_start(st->self_pid);
	snprintf(st->owner, sizeof st->owner, "%s:%d:%llu", st->boot_id, (int)st->self_pid, st->self_start);
	if (st->ssh.enabled) {
		/* The forwarded socket lives in the state folder. */
		if (snprintf(st->socket_path, sizeof st->socket_path, "%s/ssh.sock", st->kit.state_dir) >=
		    100) {
			s = md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			           "the state folder %s is too long for a unix socket path; use a shorter "
			           "MCP_RELAY_STATE_DIR with an ssh:// endpoint",
			           st->kit.state_dir);
			goto fail;
		}
		s = md_ssh_ensure(st, err);
		if (s != RELAY_OK)
			goto fail;
	}
	int rc = md_reaper_start(st);
	if (rc != 0) {
		s = md_err(st, err, RELAY_E_IO, rc, "cannot start the reaper thread");
		goto fail;
	}
	json_object_put(cfg);
	*state_out = st;
	return RELAY_OK;
fail:
	json_object_put(cfg);
	free_state(st);
	return s;
}

static void md_fini(relay_plugin_state *state)
{
	md_state *st = state;
	if (st == NULL)
		return;
	/* Guests outlive the relay until released or reaped (the pause rule). */
	md_reaper_stop(st);
	md_ssh_stop(st);
	free_state(st); /* with the node engines and their forwarders */
}

/* ---- machine ops ------------------------------------------------------------------ */

/* The engine's version and API version, asked once (/version) and kept. */
static relay_status engine_version(md_state *st, relay_call *call, char *version, size_t vlen, char *api,
                                   size_t alen, relay_error *err)
{
	pthread_mutex_lock(&st->lock);
	snprintf(version, vlen, "%s", st->engine_version);
	snprintf(api, alen, "%s", st->api_version);
	pthread_mutex_unlock(&st->lock);
	if (api[0])
		return RELAY_OK;
	md_reply r;
	relay_status s = md_api(st, "GET", MD_API_PREFIX "/version", NULL, -1, -1, 10000, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_CANCELLED ? s
		                              : md_err(st, err, RELAY_E_UNAVAILABLE, 0, "%s", err->message);
	long code = r.status;
	const char *a = r.status == 200 ? md_str(r.json, "ApiVersion") : NULL;
	if (a)
		snprintf(api, alen, "%s", a);
	snprintf(version, vlen, "%s", md_str(r.json, "Version") ? md_str(r.json, "Version") : "");
	md_reply_free(&r);
	if (api[0] == '\0')
		return md_err(
		    st, err, RELAY_E_UNAVAILABLE, 0,
		    "%s answered /version with HTTP %ld and no ApiVersion: it is not a Docker Engine API",
		    st->endpoint, code);
	pthread_mutex_lock(&st->lock);
	snprintf(st->engine_version, sizeof st->engine_version, "%s", version);
	snprintf(st->api_version, sizeof st->api_version, "%s", api);
	pthread_mutex_unlock(&st->lock);
	return RELAY_OK;
}

/* The engine answers /_ping now (every call: acquire step 4); its version
 * is the one asked once. */
static relay_status b_health(relay_plugin_state *state, relay_call *call, json_object *answer,
                             relay_error *err)
{
	md_state *st = state;
	md_reply r;
	relay_status s = md_api(st, "GET", "/_ping", NULL, -1, -1, 10000, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_CANCELLED ? s
		                              : md_err(st, err, RELAY_E_UNAVAILABLE, 0, "%s", err->message);
	long code = r.status;
	md_reply_free(&r);
	if (code != 200)
		return md_err(st, err, RELAY_E_UNAVAILABLE, 0,
		              "%s answered /_ping with HTTP %ld: the engine is not ready", st->endpoint,
		              code);
	char version[64], api[32];
	s = engine_version(st, call, version, sizeof version, api, sizeof api, err);
	if (s != RELAY_OK || answer == NULL)
		return s;
	json_object_object_add(answer, "endpoint", json_object_new_string(st->endpoint));
	json_object_object_add(answer, "engineVersion", version[0] ? json_object_new_string(version) : NULL);
	json_object_object_add(answer, "apiVersion", json_object_new_string(api));
	return RELAY_OK;
}

/* machine-docker's backend of the kit's machine ops front (relay_kit/machine.h). */
static const rk_machine_backend machine_backend = {
    .name = MD_PLUGIN_NAME,
    .destroyed_check = "engine",
    .acquire = lease_acquire,
    .renew = lease_renew,
    .inspect = lease_inspect,
    .release = lease_release,
    .verify_destroyed = lease_verify_gone,
    .images = inventory_images,
    .health = b_health,
    .catalog = inventory_catalog,
    .find_by_purpose = lease_find,
    .doctor = inventory_doctor,
};

/* ---- transport ops ------------------------------------------------------------------- */

static relay_status t_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                           unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	md_state *st = state;
	*conn_out = NULL;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown open flags 0x%x", flags);
	json_object *doc = rk_json_object(lease_json);
	json_object *d = md_obj(doc, "docker");
	const char *container = md_str(d, "container");
	const char *user = md_str(d, "user");
	relay_status s = RELAY_OK;
	md_conn *c = NULL;
	if (container == NULL || user == NULL || strlen(container) >= sizeof c->container ||
	    strlen(user) >= sizeof c->user) {
		s = md_err(st, err, RELAY_E_UNSUPPORTED, 0,
		           "machine-docker's transport only reaches machine-docker leases");
		goto done;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL) {
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	snprintf(c->container, sizeof c->container, "%s", container);
	snprintf(c->user, sizeof c->user, "%s", user);
	/* A Swarm task's container is on the engine of its node. */
	json_object *rec = md_obj(doc, "record");
	c->engine = rec ? md_engine_of(st, rec, call) : st;
	c->service = rec && md_str(rec, "mode") && strcmp(md_str(rec, "mode"), "service") == 0;
	snprintf(c->vm, sizeof c->vm, "%s", md_str(doc, "vm") ? md_str(doc, "vm") : "");
	*conn_out = c;
done:
	json_object_put(doc);
	return s;
}

static void t_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags)
{
	(void)state;
	(void)flags;
	free(conn);
}

/* A failed operation on a Swarm task asks the manager whether the task is
 * gone (its node down or drained): then the error says the guest is lost. */
static relay_status lost_or(md_state *st, md_conn *c, relay_status s, relay_call *call, relay_error *err)
{
	if (s != RELAY_OK && s != RELAY_E_CANCELLED && c->service)
		md_swarm_note_lost(st, c->vm, call, err);
	return s;
}

/* A guest already known lost (md_swarm_watch) is refused at once. */
static relay_status refuse_lost(md_state *st, md_conn *c, relay_error *err)
{
	return c->service ? md_swarm_refuse_lost(st, c->vm, err) : RELAY_OK;
}

static relay_status t_exec(relay_plugin_state *state, relay_transport_conn *conn,
                           const relay_exec_request *req, relay_call *call, unsigned flags,
                           relay_exec_result *res, relay_error *err)
{
	/* exec_run fills a whole result; the caller's may be smaller
	 * (relay/plugin.h R5): copy out within its size, free what did not fit. */
	md_state *st = state;
	md_conn *c = conn;
	relay_exec_result full = {.struct_size = sizeof full};
	relay_status refused = refuse_lost(st, c, err);
	relay_status status =
	    refused != RELAY_OK ? refused : exec_run(c->engine, c, req, call, flags, &full, err);
	relay_exec_result_deliver(st->host, res, &full);
	return refused != RELAY_OK ? refused : lost_or(st, c, status, call, err);
}

/* A push or a pull on the engine of the connection's guest: the kit's first
 * checks, refused at once for a guest known lost, and a failure checked for
 * one lost now. No facts (md_xfer.c). */
static relay_status transfer(md_state *st, md_conn *c, bool push, const char *host_path,
                             const char *guest_path, relay_call *call, unsigned flags, char **facts_out,
                             relay_error *err)
{
	relay_status s =
	    rk_xfer_begin(st->host, push ? "push" : "pull", flags, push ? MD_PUSH_FLAGS : MD_PULL_FLAGS,
	                  host_path, guest_path, facts_out, err);
	if (s == RELAY_OK)
		s = refuse_lost(st, c, err);
	if (s != RELAY_OK)
		return s;
	s = push ? xfer_push(c->engine, c, host_path, guest_path, call, flags, err)
	         : xfer_pull(c->engine, c, guest_path, host_path, call, flags, err);
	return lost_or(st, c, s, call, err);
}

static relay_status t_push(relay_plugin_state *state, relay_transport_conn *conn, const char *local_path,
                           const char *remote_path, relay_call *call, unsigned flags, char **facts_out,
                           relay_error *err)
{
	return transfer(state, conn, true, local_path, remote_path, call, flags, facts_out, err);
}

static relay_status t_pull(relay_plugin_state *state, relay_transport_conn *conn, const char *remote_path,
                           const char *local_path, relay_call *call, unsigned flags, char **facts_out,
                           relay_error *err)
{
	return transfer(state, conn, false, local_path, remote_path, call, flags, facts_out, err);
}

static relay_status t_stream_open(relay_plugin_state *state, relay_transport_conn *conn,
                                  const relay_exec_request *req, relay_call *call, unsigned flags,
                                  relay_transport_stream **out, relay_error *err)
{
	md_conn *c = conn; /* a Swarm task's exec goes to its node's engine */
	*out = NULL;
	relay_status s = refuse_lost(state, c, err);
	return s != RELAY_OK ? s : md_tstream_open(c->engine, c, req, call, flags, out, err);
}

/* ---- descriptor ----------------------------------------------------------------------- */

static const relay_machine_ops machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    RK_MACHINE_FRONT,
    .egress_listeners = md_egress_listeners,
    .console_ops = &md_console_ops, /* md_console.c: x11vnc in the container's network namespace */
};

static const relay_transport_ops transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_STDIO_BYTES | RELAY_TRANSPORT_STREAM,
    .open = t_open,
    .close = t_close,
    .exec = t_exec,
    .stream_open = t_stream_open,
    .stream_write = md_tstream_write,
    .stream_read = md_tstream_read,
    .stream_close = md_tstream_close,
    .push = t_push,
    .pull = t_pull,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = MD_PLUGIN_NAME,
    .version = MD_PLUGIN_VERSION,
    .description =
        "containers of OCI images on Docker or Podman through the Engine API (they share the host kernel)",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .init = md_init,
    .fini = md_fini,
    .machine = &machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
