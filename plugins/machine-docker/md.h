/*
 * md.h — machine-docker's shared state and the helpers its modules use.
 * Internal to plugins/machine-docker (nothing here crosses the ABI).
 *
 * Modules:
 *   md_plugin.c     descriptor, init/fini, the machine and transport ops
 *   md_options.c    the options, checked at init
 *   md_util.c       small helpers (errors, JSON fields, clocks, durable writes)
 *   md_api.c        the Docker Engine API over libcurl (a unix socket):
 *                   JSON requests, archive streams, the hijacked exec stream
 *   md_lease.c      acquire, renew, inspect (md_lease.h: what the lease
 *                   modules share)
 *   md_record.c     lease records and the lease document
 *   md_engine.c     small engine requests (inspect, remove, archive puts)
 *   md_bake.c       the derived image with the guest program, per base image
 *   md_swarm.c      leases as one-replica Swarm services
 *   md_nodes.c      a Swarm of several hosts: each node's engine, the other
 *                   managers (failover), the image on every node, placement
 *   md_release.c    release, verify, find, count, the reaper
 *   md_exec.c       transport exec (demultiplexed stream, stdin, timeouts)
 *   md_xfer.c       transport push and pull (tar through the archive API)
 *   md_applied.c    what the engine really applied (runtime, limits)
 *   md_commands.c   the commands each dpkg package installs (catalog aliases)
 *   md_guestpath.c  the engine's stat header, and no linked folder above a pull
 *   md_inventory.c  images, catalog, doctor
 *   md_console.c    the console: x11vnc in the guest, reached in the
 *                   container's network namespace (md_console.h)
 *   md_guest.c      the static program put into each container (not linked
 *                   here; embedded by md_blob.c)
 */
#ifndef MACHINE_DOCKER_MD_H
#define MACHINE_DOCKER_MD_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay/transport.h"
#include "relay_kit/clock.h"
#include "relay_kit/durable.h"
#include "relay_kit/error.h"
#include "relay_kit/machine.h"
#include "relay_kit/proc.h"
#include "relay_kit/random.h"
#include "relay_kit/reaper.h"
#include "relay_kit/text.h"
#include "relay_support/json_get.h"

#define MD_PLUGIN_NAME    "machine-docker"
#define MD_PLUGIN_VERSION "0.1.0"
#define MD_MAX_IMAGES     64
#define MD_API_PREFIX     "/v1.41"
#define MD_LABEL          "io.mcp-relay."
/* Inside every container: the guest program and the lease's expiry. */
#define MD_GUEST_DIR     "/.mcp-relay"
#define MD_GUEST_INIT    "/.mcp-relay/init"
#define MD_GUEST_RUN_DIR "/.mcp-relay/run"

/* The derived images with the guest program (md_bake.c). */
#define MD_BAKE_REPO "localhost/mcp-relay-guest"

typedef struct md_bake_entry {
	char ref[160];      /* MD_BAKE_REPO ":<24 hex>", "" = not known yet */
	bool xvfb;          /* the image has /usr/bin/Xvfb */
	bool x11vnc;        /* the image has /usr/bin/x11vnc */
	int64_t checked_ms; /* monotonic time the base image's id was last asked */
} md_bake_entry;

typedef struct md_image {
	char *key; /* "ubuntu2404" */
	char *ref; /* "docker.io/library/ubuntu:24.04" */
} md_image;

/* Plugin state. Immutable after init except where a field says otherwise. */
typedef struct md_state {
	rk_machine kit; /* first: the kit's machine ops front (relay_kit/machine.h) */
	const relay_host *host;
	char *session_id;      /* config sessionId, may be NULL */
	char endpoint[512];    /* as configured: unix:///path, ssh://user@host[:port], tcp://host:port */
	char socket_path[256]; /* the unix socket libcurl connects to */
	md_image images[MD_MAX_IMAGES];
	size_t image_count;
	struct {
		bool enabled; /* endpoint ssh://user@host[:port] */
		char user[64];
		char host[256];
		int port;
		char identity[512];      /* options.ssh.identityFile */
		char known_hosts[512];   /* options.ssh.knownHostsFile */
		char remote_socket[256]; /* options.ssh.remoteSocket */
	} ssh;
	struct {
		bool enabled; /* endpoint tcp://host:port, always with TLS client certificates */
		char host[256];
		int port;
		char ca[512];   /* options.tls.caFile: the CA the engine's certificate is checked against */
		char cert[512]; /* options.tls.certFile: this relay's client certificate */
		char key[512];  /* options.tls.keyFile */
	} tls;
	pid_t ssh_pid; /* the forwarder (guarded by ssh_lock) */
	pthread_mutex_t ssh_lock;

	/* options */
	int max_guests;
	int64_t grace_ms;
	int64_t backstop_ms;
	int64_t reaper_interval_ms;
	int64_t pull_timeout_ms;
	char runtime[64];     /* "" = the engine's default */
	bool swarm;           /* options.swarm: leases are services when the endpoint is a Swarm manager */
	int swarm_known;      /* 1 the endpoint is a Swarm manager, -1 it is not, 0 not asked yet (lock) */
	char swarm_node[128]; /* the manager's node id (written under lock before swarm_known is set) */
	uid_t guest_uid;      /* 0 = root (only by option) */
	gid_t guest_gid;
	int64_t limit_memory_bytes;
	int64_t limit_pids;
	int64_t limit_nano_cpus;
	int64_t ulimit_nofile;
	int64_t ulimit_nproc;
	bool display_enabled;
	char screen[32];

	/* facts found at init */
	char owner[160]; /* "<boot id>:<pid>:<start time>", the owner label of our leases */
	char boot_id[64];
	pid_t self_pid;
	unsigned long long self_start;
	char arch[16];

	rk_reaper reaper; /* the kit's loop over md_reap_once; a node's engine has none */
	pthread_mutex_t lock;
	size_t acquiring;             /* acquisitions in flight (capacity) */
	struct md_facts_cache *facts; /* md_inventory.c: what each image contains, by image id */
	char default_runtime[64];     /* the engine's DefaultRuntime (/info), "" until asked (lock) */

	/* derived images (guarded by bake_lock, held across the engine requests of a bake) */
	pthread_mutex_t bake_lock;
	md_bake_entry bake[MD_MAX_IMAGES]; /* by index of images[] */
	char guest_sha256[65];             /* of the embedded guest program, "" until computed */

	/* the engine's /version, asked once (health then pings /_ping: Podman
	 * answers /version in ~0.6 s, /_ping in under 1 ms); guarded by lock */
	char engine_version[64]; /* "" until asked */
	char api_version[32];    /* "" until asked */

	/* md_applied.c: the engine's kind and cgroups (/version, /info), asked
	 * once; guarded by lock */
	bool engine_facts_known;
	bool engine_podman;    /* Podman's compatible API (it ignores HostConfig.Runtime) */
	bool engine_rootless;  /* SecurityOptions name=rootless */
	bool engine_cgroup_v1; /* CgroupVersion "1" (v1 or hybrid) */

	/* A Swarm of several hosts (md_nodes.c): options.nodes, managers,
	 * discovery, placement and the engines made from them; NULL without
	 * those options. Node engines are copies of this state with this
	 * pointer NULL. */
	struct md_nodes *nodes;
} md_state;

/* ---- md_options.c ----------------------------------------------------------- */

/* Reads options (a JSON object or NULL) into st; refuses unknown keys and bad values. */
relay_status md_parse_options(md_state *st, json_object *opts, relay_error *err);
/* Sets st's endpoint from `spec` ({"endpoint", "ssh", "tls"}, checked as the
 * plugin's own options are); errors start with `where`. */
relay_status md_parse_endpoint(md_state *st, json_object *spec, const char *where, relay_error *err);

/* ---- md_util.c helpers ---------------------------------------------------- */

/* The kit's error (relay_kit/error.h), under machine-docker's name. */
#define md_err(st, err, code, sys_errno, ...) rk_err((st)->host, (err), (code), (sys_errno), 0, __VA_ARGS__)
/* snprintf for messages whose truncation is acceptable. */
/* The kit's text (relay_kit/text.h) and the getters of
 * relay_support/json_get.h under machine-docker's names: a member of
 * another type is absent (an array member: rsj_get_array). */
#define md_textf                   rk_textf
#define md_json_out(st, obj)       rk_json_text((st)->host, (obj))
#define md_str(obj, key)           rsj_get_str((obj), (key))
#define md_int(obj, key, fallback) rsj_int_or((obj), (key), (fallback))
#define md_obj(obj, key)           rsj_get_obj((obj), (key))
/* The plugin kit's clock, random hex, durable write (0600, synced) and
 * processes (support/kit/relay_kit/) under machine-docker's names. */
#define md_monotonic_ms()                 rk_monotonic_ms()
#define md_sleep_ms(ms)                   rk_sleep_ms(ms)
#define md_random_hex(st, out, digits)    rk_random_hex((st)->host, (out), (digits))
#define md_write_durable(path, data, len) rk_write_durable((path), (data), (len), 0600, RK_DURABLE_SYNC)
#define md_proc_start(pid)                rk_proc_start(pid)
json_object *md_read_json(const char *path, int *errno_out);

/* ---- md_api.c --------------------------------------------------------------- */

typedef struct md_reply {
	long status; /* HTTP status, 0 when no answer */
	char *body;  /* malloc'd, NUL-terminated (may be NULL) */
	size_t body_len;
	json_object *json; /* parsed body when it is JSON, else NULL */
	char *path_stat;   /* X-Docker-Container-Path-Stat header, malloc'd or NULL */
} md_reply;

void md_reply_free(md_reply *r);
/* One request. `body_json` may be NULL. Upload from `upload_fd` (>= 0,
 * Content-Type application/x-tar) or download to `download_fd` (>= 0) stream
 * instead of buffering. Returns RELAY_OK when an answer arrived (any
 * status); RELAY_E_UNAVAILABLE when the endpoint cannot be reached;
 * RELAY_E_TIMEOUT; RELAY_E_INDETERMINATE when the connection broke after the
 * request was sent; RELAY_E_CANCELLED. */
relay_status md_api(md_state *st, const char *method, const char *path, json_object *body_json, int upload_fd,
                    int download_fd, uint32_t timeout_ms, relay_call *call, md_reply *reply,
                    relay_error *err);
/* GET /images/<ref>/json (20 s): md_api's status, and on RELAY_OK the engine's
 * reply (200 with the image, 404 without it) to free with md_reply_free. */
relay_status md_image_inspect(md_state *st, const char *ref, relay_call *call, md_reply *reply,
                              relay_error *err);
/* The engine's message of a failed reply ("message" of its JSON), borrowed. */
const char *md_reply_message(const md_reply *r);
/* Appends the percent-encoded `text` to `out` (size bytes); false when it does not fit. */
bool md_url_encode(char *out, size_t size, const char *text);

/* The hijacked stream of POST /exec/{id}/start. */
typedef struct md_stream md_stream;
relay_status md_stream_open(md_state *st, const char *path, const char *body, uint32_t timeout_ms,
                            md_stream **out, relay_error *err);
/* Waits up to wait_ms for the socket (readable, or writable too when
 * `want_write`): 1 ready, 0 timeout, -1 error. */
int md_stream_wait(md_stream *s, bool want_write, int wait_ms);
/* Nonblocking: bytes moved, 0 on end of stream (recv), -2 when it would block, -1 on error. */
ssize_t md_stream_send(md_stream *s, const void *data, size_t len);
ssize_t md_stream_recv(md_stream *s, void *buf, size_t len);
void md_stream_close_write(md_stream *s);
void md_stream_free(md_stream *s);

/* ---- md_ssh.c ------------------------------------------------------------------ */

/* Starts the ssh forwarder of an ssh:// endpoint when it is not running
 * (no-op for unix://). RELAY_E_UNAVAILABLE with ssh's own message. */
relay_status md_ssh_ensure(md_state *st, relay_error *err);
void md_ssh_stop(md_state *st);

/* ---- md_lease.c --------------------------------------------------------------- */

/* The backend of the kit's machine ops front (relay_kit/machine.h), each on an md_state. */
relay_status lease_acquire(relay_plugin_state *state, json_object *spec, relay_call *call,
                           json_object **doc_out, relay_error *err);
relay_status lease_renew(relay_plugin_state *state, json_object *doc, uint64_t ttl_ms, relay_call *call,
                         json_object **doc_out, relay_error *err);
relay_status lease_inspect(relay_plugin_state *state, json_object *doc, relay_call *call,
                           json_object **doc_out, relay_error *err);
relay_status lease_release(relay_plugin_state *state, json_object *doc, const char *reason, relay_call *call,
                           relay_error *err);
relay_status lease_verify_gone(relay_plugin_state *state, json_object *doc, relay_call *call,
                               relay_error *err);
relay_status lease_find(relay_plugin_state *state, const char *purpose, relay_call *call,
                        json_object **arr_out, relay_error *err);
size_t lease_count(md_state *st);
/* Writes `text` as file `name` (mode 0644, root) into folder `dir` of the container. */
relay_status lease_put_file(md_state *st, const char *container, const char *dir, const char *name,
                            const void *data, size_t len, unsigned mode, uid_t uid, gid_t gid,
                            relay_call *call, relay_error *err);
/* HEAD of a container path: 1 exists, 0 missing, -1 error; *mode_out (may be NULL) its mode bits. */
int lease_path_exists(md_state *st, const char *container, const char *path, uint32_t *mode_out);
int md_reaper_start(md_state *st);
void md_reaper_stop(md_state *st);
void md_reap_once(md_state *st);

/* ---- md_exec.c, md_xfer.c ------------------------------------------------------ */

typedef struct md_conn {
	char container[128]; /* the container name (the lease's vm) */
	char user[32];       /* "uid:gid" the commands run as */
	md_state *engine;    /* the engine of the node the container runs on (borrowed) */
	bool service;        /* a Swarm service's task: a failure asks the manager why */
	char vm[128];        /* the lease's vm (the service's name) */
} md_conn;

/* What one exec runs and how (md_exec.c; md_stream.c's stream too). */
typedef struct exec_plan {
	const char *container;
	const char *user;
	const char *const *argv;
	const char *const *envp;
	const char *cwd;
	uint64_t timeout_ms;
	const void *stdin_data;
	size_t stdin_len;
	bool attach_stdin;
	bool wrap; /* run under the guest program (group kill on timeout) */
	bool merge, keep_tail, stdio_bytes;
	size_t max_output; /* stdout+stderr (stderr only with stdio_bytes) */
	size_t max_stdout; /* stdio_bytes only */
} exec_plan;
/* POST /containers/{id}/exec for plan `p` (wrapped: under the guest
 * program with `pidfile`); the exec's id in id_out. RELAY_E_TRANSIENT
 * when nothing was created, RELAY_E_NOT_FOUND for a container that
 * cannot run commands. */
relay_status exec_create(md_state *st, const exec_plan *p, const char *pidfile, relay_call *call,
                         char *id_out, size_t id_size, relay_error *err);
relay_status exec_run(md_state *st, md_conn *conn, const relay_exec_request *req, relay_call *call,
                      unsigned flags, relay_exec_result *res, relay_error *err);
/* A short command as root-less guest user with no stdin; output capped at 64 KiB. */
relay_status exec_simple(md_state *st, const char *container, const char *user, const char *const *argv,
                         uint64_t timeout_ms, relay_call *call, relay_exec_result *res, relay_error *err);
void exec_result_free(md_state *st, relay_exec_result *res);

/* ---- md_stream.c: the long-lived stream (relay/transport.h RELAY_TRANSPORT_STREAM) ---- */

relay_status md_tstream_open(md_state *st, md_conn *conn, const relay_exec_request *req, relay_call *call,
                             unsigned flags, relay_transport_stream **out, relay_error *err);
/* The transport's stream_write, stream_read and stream_close (relay/transport.h) on an md_state. */
relay_status md_tstream_write(relay_plugin_state *state, relay_transport_stream *stream, const void *data,
                              size_t len, uint64_t timeout_ms, unsigned flags, relay_error *err);
relay_status md_tstream_read(relay_plugin_state *state, relay_transport_stream *stream, void *buf, size_t cap,
                             uint64_t timeout_ms, unsigned flags, size_t *got_out, relay_error *err);
void md_tstream_close(relay_plugin_state *state, relay_transport_stream *stream, unsigned flags);

/* An unlinked temporary file under <stateDir>/tmp (O_TMPFILE), or -1 with errno. */
int md_tmp_file(md_state *st);
/* libarchive's write callback into the file descriptor at *(int *)user. */
struct archive;
ssize_t md_tar_write_cb(struct archive *a, void *user, const void *buf, size_t len);
/* md_commands.c. Adds to each dpkg application of `apps` (read from the
 * probe container `container`) the commands its package installs, as
 * aliases (at most 16). Nothing on failure: the catalog keeps the names. */
void md_add_package_commands(md_state *st, const char *container, json_object *apps, relay_call *call);
/* md_applied.c. True when the engine is Podman's compatible API (asked once). */
bool md_engine_is_podman(md_state *st, relay_call *call);
/* The reason the engine cannot apply the guests' pids, memory
 * and CPU limits (static text), or NULL when it applies them. */
const char *md_limits_not_applied(md_state *st, relay_call *call);
/* The remedy for a host whose cgroups crun refuses, as the engine in use
 * takes it (static text). */
const char *md_runtime_remedy(md_state *st, relay_call *call);
/* After create: records the runtime the engine gave container `vm` in
 * rec["runtime"] and the limits it cannot apply in rec["limitsNotApplied"];
 * RELAY_E_REFUSED naming both runtimes when options.runtime asks for
 * another one, or when it cannot be verified. */
relay_status md_verify_applied(md_state *st, json_object *rec, const char *vm, relay_call *call,
                               relay_error *err);
/* Adds the guest's environment to the array `env` (every command inherits
 * it): HOME, LANG=C.UTF-8, MCP_RELAY_GUEST=1 and, when the guest gets its
 * Xvfb :0, DISPLAY=:0 (machine.h: the contract of every backend with a
 * display; the same as machine-local's). */
void md_guest_env(const md_state *st, json_object *env, bool display);
/* Decodes base64 text of either alphabet, padded or not (malloc'd,
 * NUL-terminated) or NULL (md_guestpath.c). */
char *md_b64_decode(const char *in);
/* RELAY_OK when `remote_path` can be pulled as named: every folder above it
 * in the container is a folder and no link (the engine's own stat of
 * each), and on Podman it has none of [ ] * ? (which Podman expands); else
 * RELAY_E_UNSAFE_PATH, RELAY_E_INVALID_ARGUMENT, RELAY_E_NOT_FOUND or
 * RELAY_E_TRANSIENT naming it. */
relay_status md_check_pull_path(md_state *st, const char *container, const char *remote_path,
                                relay_error *err);
/* The flags push and pull accept. */
#define MD_PUSH_FLAGS (RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES)
#define MD_PULL_FLAGS RELAY_XFER_TREE
/* A push or pull (md_xfer.c) after the kit's first checks (relay_kit/xfer.h,
 * md_plugin.c); neither answers facts. */
relay_status xfer_push(md_state *st, md_conn *conn, const char *local_path, const char *remote_path,
                       relay_call *call, unsigned flags, relay_error *err);
relay_status xfer_pull(md_state *st, md_conn *conn, const char *remote_path, const char *local_path,
                       relay_call *call, unsigned flags, relay_error *err);

/* ---- md_inventory.c ------------------------------------------------------------ */

const md_image *inventory_find(md_state *st, const char *key);
/* The backend's images, catalog and doctor (relay_kit/machine.h) on an md_state. */
json_object *inventory_images(relay_plugin_state *state, relay_call *call);
relay_status inventory_catalog(relay_plugin_state *state, relay_call *call, json_object **out,
                               relay_error *err);
json_object *inventory_doctor(relay_plugin_state *state, relay_call *call);
void inventory_free(md_state *st);

/* ---- md_nodes.c ---------------------------------------------------------------- */

/* options.nodes, .managers, .discovery, .placement (kept until md_nodes_init). */
relay_status md_nodes_set_option(md_state *st, const char *key, json_object *v, relay_error *err);
/* After all options: makes the configured node and manager engines. */
relay_status md_nodes_init(md_state *st, relay_error *err);
void md_nodes_free(md_state *st);
/* The endpoint spec of a node found at `addr` by options.discovery (owned), or NULL. */
json_object *md_discovery_spec(md_state *st, const char *addr);
/* The manager engine requests go to (st itself unless a failover moved on). */
md_state *md_manager_pick(md_state *st);
/* After `failed` could not be reached: the next manager to try, or NULL when
 * every one was tried (*tried counts, start it at 0). */
md_state *md_manager_next(md_state *st, md_state *failed, size_t *tried);
/* The engine of Swarm node `node_id` (borrowed, lives until fini), or NULL
 * with `why` naming the node and the option that would reach it. */
md_state *md_node_engine(md_state *st, const char *node_id, relay_call *call, char *why, size_t why_size);
/* The engine a lease record's container is on: its node's for a service
 * task, else st (and st when its node cannot be reached). */
md_state *md_engine_of(md_state *st, json_object *rec, relay_call *call);
/* Image `ref` (on the manager's engine) copied to every ready, active node
 * that lacks it, engine to engine (save, then load): no registry needed. */
relay_status md_nodes_spread_image(md_state *st, const char *ref, relay_call *call, relay_error *err);
/* The engine of Swarm node `node_id` when it answers GET /_ping now, or
 * NULL with `why` naming the node, the endpoint, the option it came from
 * and what failed (ssh's own message). */
md_state *md_node_reach(md_state *st, const char *node_id, relay_call *call, char *why, size_t why_size);
/* After a failed transport operation on lease `vm`: when the manager says
 * its task is gone (md_swarm.c), the record notes it "lost" and err says why. */
void md_swarm_note_lost(md_state *st, const char *vm, relay_call *call, relay_error *err);
/* RELAY_E_REFUSED saying why when lease `vm`'s record says it is lost
 * (nothing is asked of any engine), else RELAY_OK. */
relay_status md_swarm_refuse_lost(md_state *st, const char *vm, relay_error *err);
/* One look of the reaper's beat at this relay's Swarm leases: a task gone
 * with its node (down, drained) or replaced is noted "lost" in its record
 * at once, and the core is told (host->lease_changed, ABI 1.5). */
void md_swarm_watch(md_state *st);
/* options.placement into a service's TaskTemplate. */
void md_nodes_placement(md_state *st, json_object *task_template);
/* The Swarm's nodes as the manager reports them (owned array) or NULL. */
json_object *md_nodes_report(md_state *st, relay_call *call);
/* options.placement of the acquisition capabilities (relay/console.h):
 * {"scheduler": "swarm", "nodes": [...]} (owned), or NULL when the
 * endpoint is no Swarm manager. */
json_object *md_nodes_placement_report(md_state *st, relay_call *call);

#endif
