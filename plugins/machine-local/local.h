/*
 * local.h — machine-local's shared state and the small helpers its modules
 * use. Internal to plugins/machine-local (nothing here crosses the ABI).
 *
 * Modules:
 *   lutil.c      JSON, time, random, durable files, /proc facts
 *   lease.c      the lease records on disk (one folder per lease)
 *   plugin.c     init, fini, the transport ops and the descriptor
 *   options.c    the options and their defaults
 *   machine_ops.c  the machine ops
 *   sandbox.c    acquire a guest (the record, then each part in order)
 *   upper.c      the new guest's upper layer: private folders, /etc files
 *   launch.c     the guest init, the network helper and the Xvfb display
 *   destroy.c    destroy a guest, and verify that nothing of it is left
 *   cgroup.c     the guests' cgroups (v2, and the v1 pids and memory ones)
 *   uids.c       one guest uid per guest, claimed durably in the store
 *   subids.c     without root: the relay user's subordinate ids
 *   ctl.c        the client of the guest init's control socket
 *   egress.c     the relay's egress proxy sockets in a guest's namespace
 *   net.c        network helpers (slirp4netns, pasta), reject routes,
 *                sockets inside a guest's network namespace
 *   exec.c       transport exec
 *   xfer.c       transport push and pull (tar streams, SHA-256); its parts
 *                xfer_facts.c, xfer_paths.c, xfer_send.c, xfer_receive.c
 *                share xfer_int.h
 *   inventory.c  images, catalog, doctor, health
 *   console.c    the typed console over x11vnc: the backend of the kit's
 *                console (relay_kit/console.h)
 *   reaper.c     the background reaper and the scan at start
 */
#ifndef MACHINE_LOCAL_LOCAL_H
#define MACHINE_LOCAL_LOCAL_H

#include <json-c/json.h>
#include <pthread.h>
#include <spawn.h>
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

#define LOCAL_PLUGIN_NAME    "machine-local"
#define LOCAL_PLUGIN_VERSION "0.1.0"
#define LOCAL_MAX_IMAGES     64
#define LOCAL_MAX_MASKS      32

/* One image: a named base tree. */
typedef struct local_image {
	char *key;  /* "local", "bookworm" */
	char *tree; /* absolute folder; "/" for local */
} local_image;

typedef struct local_user {
	char name[64];
	uid_t uid;
	gid_t gid;
	char home[256];
} local_user;

/* Plugin state. Immutable after init except where a field says otherwise. */
typedef struct local_state {
	rk_machine kit; /* first: the kit's machine ops front (relay_kit/machine.h) */
	const relay_host *host;
	local_image images[LOCAL_MAX_IMAGES];
	size_t image_count;
	char *masks[LOCAL_MAX_MASKS]; /* extra guest paths hidden by an empty read-only mount */
	size_t mask_count;

	/* options */
	int max_guests;
	int64_t grace_ms;
	int64_t backstop_ms;
	int64_t reaper_interval_ms;
	char helper_choice[16];     /* auto | slirp4netns | pasta | none */
	bool display_enabled;       /* option display: "auto" (true) or "off" */
	char screen[32];            /* "1280x800x24" */
	local_user user;            /* the guest user; uid/gid are the first of the range */
	unsigned user_count;        /* uids (and gids) in the range, one per guest */
	int64_t limit_memory_bytes; /* cgroup memory limit, 0 = none */
	int64_t limit_pids;         /* cgroup pids limit, 0 = none */
	int limit_cpu_percent;      /* 0 = none */
	int64_t bound_processes;    /* RLIMIT_NPROC of guest commands, 0 = none */
	int64_t bound_data_bytes;   /* RLIMIT_DATA of guest commands, 0 = none */
	bool bound_data_bytes_set;  /* options.bounds.dataBytes was given (else: only without a memory cgroup)
	                             */
	int64_t bound_file_bytes;   /* RLIMIT_FSIZE of guest commands, 0 = none */

	bool rootless_map_user; /* options.rootless.withoutSubids "map-user" */

	/* facts found at init */
	bool rootless; /* the relay is not root: a user namespace is created first */
	/* Without root (subids.c): the relay user's subordinate ids. */
	bool subids;     /* a usable range for uids and gids, and newuidmap/newgidmap */
	uid_t relay_uid; /* the relay's own uid and gid */
	gid_t relay_gid;
	char relay_user[64]; /* its name ("" when it has none) */
	uid_t subuid_first;  /* /etc/subuid */
	unsigned long subuid_count;
	gid_t subgid_first; /* /etc/subgid */
	unsigned long subgid_count;
	char *newuidmap_path, *newgidmap_path;
	char subids_reason[400]; /* why subids is false, with the fix */
	char *slirp_path;        /* NULL when not installed */
	char *pasta_path;        /* NULL when not installed */
	char *helper_path;       /* the helper in use, NULL for loopback only */
	char helper_name[16];
	char helper_reason[400]; /* why helper_path is NULL, with the fix */
	char *cgroup_base;       /* <cgroup2>/.../mcp-relay-local, NULL when cgroups are unusable */
	char cgroup_reason[256];
	bool cgroup_memory, cgroup_pids, cgroup_cpu;
	char *cgroup_v1_pids;   /* <v1 pids mount><own>/mcp-relay-local, NULL when absent */
	char *cgroup_v1_memory; /* the same for the v1 memory controller */
	char cgroup_v1_reason[256];
	char platform[32]; /* linux-x86_64 */
	char arch[16];     /* x86_64 | arm64 */
	char boot_id[64];
	pid_t self_pid;
	unsigned long long self_start;
	int init_memfd; /* the embedded guest init program, sealed (lent to launchers as fd 9) */

	rk_reaper reaper; /* the kit's loop over reaper_scan */
	pthread_mutex_t lock;
	/* guest names being acquired right now (guarded by lock) */
	char *reserved[256];
	size_t reserved_count;
} local_state;

/* ---- lutil.c --------------------------------------------------------------- */

/* The kit's error (relay_kit/error.h); a system error is named after the message. */
#define lu_err(st, err, code, sys_errno, ...)                                                                \
	rk_err((st)->host, (err), (code), (sys_errno), RK_ERR_NAME_ERRNO, __VA_ARGS__)
/* The kit's text (relay_kit/text.h) and the typed getters of
 * relay_support/json_get.h (rsj_get_*) under machine-local's names, with a
 * fallback for an absent or mistyped member. */
#define lu_textf                        rk_textf
#define lu_json_out(st, obj)            rk_json_text((st)->host, (obj))
#define lu_get_string(obj, key)         rsj_get_str((obj), (key))
#define lu_get_int(obj, key, fallback)  rsj_int_or((obj), (key), (fallback))
#define lu_get_bool(obj, key, fallback) rsj_bool_or((obj), (key), (fallback))
#define lu_get_object(obj, key)         rsj_get_obj((obj), (key))
/* The plugin kit's clock, random hex, durable write and processes
 * (support/kit/relay_kit/) under machine-local's names. */
#define lu_random_hex(st, out, hex_digits) rk_random_hex((st)->host, (out), (hex_digits))
#define lu_monotonic_ms()                  rk_monotonic_ms()
#define lu_sleep_ms(ms)                    rk_sleep_ms(ms)
/* Durable write: temp file, (fsync,) rename, (fsync of the folder). 0 or errno. */
#define lu_write_durable(path, data, len, mode, sync)                                                        \
	rk_write_durable((path), (data), (len), (mode), (sync) ? RK_DURABLE_SYNC : 0)
int lu_write_json_durable(const char *path, json_object *obj, bool sync);
json_object *lu_read_json(const char *path, size_t max_bytes, int *errno_out);
/* rs_remove_tree and rs_mkdir_p (relay_support/tree.h) returning 0 or errno:
 * removes a tree without following links; creates a folder and its parents. */
int lu_remove_tree(const char *path);
int lu_mkdir_p(const char *path, mode_t mode);
/* The first line of a small file, without its newline ("" when unreadable). */
#define lu_read_line(path, out, size) rk_read_line((path), (out), (size))
/* At most `max` bytes of a file, NUL-terminated (malloc'd), or NULL. */
char *lu_read_small(const char *path, size_t max, size_t *len_out);
/* <tree>/<rel> ("/<rel>" for the tree "/"), cut to `size`. */
void lu_tree_path(char *out, size_t size, const char *tree, const char *rel);
/* Start time of a process (field 22 of /proc/<pid>/stat), 0 when gone. */
#define lu_proc_start(pid) rk_proc_start(pid)
/* 1 when pid is alive (not a zombie) and started at `start`. */
#define lu_proc_alive(pid, start) rk_proc_alive((pid), (start))
/* pidfd of pid verified to have started at `start`, or -1. */
int lu_pidfd_checked(pid_t pid, unsigned long long start);
/* Inode of /proc/<pid>/ns/<name>, 0 when unreadable. */
unsigned long long lu_ns_inode(pid_t pid, const char *name);
char *lu_find_program(const char *name); /* rs_which on PATH (or sbin and bin); malloc'd or NULL */
/* Starts a spawn of a helper detached from the relay: a new session, every
 * signal default and unblocked, stdin from /dev/null, stdout and stderr to
 * `log_fd` (never the relay's standard output). The caller adds its own
 * descriptors, spawns, and destroys both. */
void lu_spawn_detached_init(posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr, int log_fd);
/* Reads one line (without its newline, cut to size - 1) from `fd` until the
 * monotonic time `until` (ms): 0, or -1 with errno ETIMEDOUT (no line by
 * then) or EPIPE (the writer closed first). */
int lu_read_line_until(int fd, char *line, size_t size, int64_t until);
bool lu_valid_guest_name(const char *name);
bool lu_valid_token(const char *text, size_t max); /* [A-Za-z0-9][A-Za-z0-9._-]* */

/* ---- lease.c --------------------------------------------------------------- */

/* The lease folder of `vm`: <leases_dir>/<vm> (malloc'd). */
char *lease_dir_of(local_state *st, const char *vm);
/* Reads the record of `vm`; NULL with *errno_out set when missing. */
json_object *lease_read(local_state *st, const char *vm, int *errno_out);
int lease_write(local_state *st, json_object *record, bool sync);
int lease_write_expires(local_state *st, json_object *record);
/* Exclusive flock on the lease's lock file; returns the fd or -1. */
int lease_lock(local_state *st, const char *vm, bool wait);
void lease_unlock(int fd);
/* Every lease record in the store (array, caller puts). */
json_object *lease_list(local_state *st);
/* The lease document for a record (relay/machine.h). */
json_object *lease_document(local_state *st, json_object *record);
/* The "local" facts of a lease document (borrowed) or NULL. */
json_object *lease_local_facts(json_object *lease_doc);
/* 1 when the record's owner relay is alive. */
bool lease_owner_alive(local_state *st, json_object *record);
void lease_set_owner(local_state *st, json_object *record);

/* ---- sandbox.c, upper.c, launch.c, destroy.c ------------------------------------ */

relay_status sandbox_acquire(local_state *st, json_object *spec, relay_call *call, json_object **record_out,
                             relay_error *err);
/* Makes <lease_dir>/{upper,work,merged} and fills the upper layer; a
 * conflict of the guest user with the image's passwd/group is
 * RELAY_E_REFUSED with the reason. */
relay_status upper_prepare(local_state *st, const char *tree, const char *lease_dir, const char *guest,
                           const local_user *user, bool with_helper, bool egress, relay_error *err);

/* Host pids of a launch (0 = not started). */
typedef struct launch_result {
	pid_t launcher;
	pid_t init_pid;
	pid_t helper_pid;
} launch_result;

/* Starts the guest init for `record` (its cgroups and bounds) and, with a
 * helper, the network helper; waits until the init is ready (20 s). *lr is
 * set even on failure, for the cleanup. */
relay_status launch_init(local_state *st, const char *lease_dir, const char *tree, const char *guest,
                         json_object *record, bool with_helper, launch_result *lr, relay_error *err);
/* Starts Xvfb in the guest as the guest user; adds "display" and
 * pids.xvfb to the record. */
relay_status launch_display(local_state *st, json_object *record, const char *lease_dir, relay_error *err);
/* Kills every process, unmounts, deletes the upper layer and the lease
 * folder, and verifies. `record` is borrowed. */
relay_status sandbox_destroy(local_state *st, json_object *record, const char *reason, relay_error *err);
/* Independent check that nothing of the lease is left. */
relay_status sandbox_verify_gone(local_state *st, json_object *record, char *detail, size_t detail_size);
/* pidfd of the guest init if it is alive, else -1. */
int sandbox_init_pidfd(json_object *record);
/* O_PATH fd of the guest's root (via /proc/<init>/root), verified; -1 with errno. */
int sandbox_root_fd(json_object *record);
bool sandbox_image_has(local_state *st, const char *tree, const char *rel_path);
/* What acquire checks of an image before it makes anything, and doctor
 * shows: the image's tree and, without root, the subordinate ids (or the
 * option that allows going without). RELAY_OK or the refusal with its fix. */
relay_status sandbox_precondition(local_state *st, const local_image *image, relay_error *err);
const local_image *sandbox_find_image(local_state *st, const char *key);

/* ---- cgroup.c -------------------------------------------------------------- */

/* Finds the cgroup v2 folder and the writable v1 pids and memory ones. */
void cgroup_detect(local_state *st);
bool cgroup_limits_pids(const local_state *st);
bool cgroup_limits_memory(const local_state *st);
/* Makes the guest's cgroups and sets the limits: adds paths.cgroup,
 * paths.cgroupsV1, "limits", and the cgroup entries of "bounds" (which
 * must exist) to the record. What cannot be made is logged and left out. */
void cgroup_make(local_state *st, const char *vm, json_object *record);
/* The cgroup folders a record names (borrowed); the count. */
size_t cgroup_paths(json_object *record, const char **out, size_t max);
/* Kills what is left in the record's cgroups and removes them; 0 or errno. */
int cgroup_remove_all(json_object *record);
/* A cgroup of the record that still exists (borrowed), or NULL. */
const char *cgroup_left(json_object *record);
void cgroup_remove_orphans(local_state *st);

/* ---- uids.c ----------------------------------------------------------------- */

/* true when guests get uids from the range (not root, not rootless). */
bool uids_in_use(const local_state *st);
/* Claims a free uid of the range for `vm` and sets user->uid and ->gid;
 * RELAY_E_CAPACITY when every one is in use. No-op without a range. */
relay_status uids_claim(local_state *st, const char *vm, local_user *user, relay_error *err);
/* Gives the claim of `uid` back when it is `vm`'s. */
void uids_release(local_state *st, const char *vm, uid_t uid);
/* Removes stale claims (lease folder gone, no process of the uid left). */
void uids_reconcile(local_state *st);

/* ---- subids.c ------------------------------------------------------------- */

/* Finds the relay user's subordinate ids and newuidmap/newgidmap (rootless). */
void subids_detect(local_state *st);
/* The host uid (gid) of guest uid `uid` (gid): the relay's own for 0, a
 * subordinate id for the guest user's range; the id itself with root. */
uid_t subids_host_uid(const local_state *st, uid_t uid);
gid_t subids_host_gid(const local_state *st, gid_t gid);
/* Fills the launcher's maps for a guest whose user is uid/gid: the outer
 * namespace (newuidmap words) and the nested one (uid_map lines). */
void subids_maps(const local_state *st, uid_t uid, gid_t gid, char outer_uid[128], char outer_gid[128],
                 char nested_uid[64], char nested_gid[64]);
/* Deletes `path` (a lease's upper or work folder) in a user namespace where
 * the relay user and its subordinate ids are mapped; 0 or errno. */
int subids_remove_tree(local_state *st, const char *path);
/* Runs fn(arg) in a child process that joined the user namespace of the
 * guest init `init_pid`, so files of the guest user's subordinate id can be
 * made and read; the child's result (status, *err, an optional text in
 * *text_out, host-allocated) comes back through a pipe. Polls `call` for
 * cancellation (the child is then killed). */
typedef relay_status (*subids_fn)(void *arg, char **text_out, relay_error *err);
relay_status subids_run_in_guest_userns(local_state *st, pid_t init_pid, relay_call *call, subids_fn fn,
                                        void *arg, char **text_out, relay_error *err);
/* true when transfers into this guest must run in its user namespace. */
bool subids_guest_mapped(const local_state *st, json_object *record);

/* ---- ctl.c ----------------------------------------------------------------- */

typedef struct ctl_spawn {
	const char *const *argv;
	const char *const *envp;
	const char *cwd; /* NULL or "" = the init's choice (/) */
	uid_t uid;
	gid_t gid;
	unsigned flags; /* LP_SPAWN_* */
	int out_fd;     /* -1 = /dev/null */
	int err_fd;     /* -1 = /dev/null, or with LP_SPAWN_MERGE unused */
	int in_fd;      /* -1 = /dev/null; otherwise sent with LP_SPAWN_STDIN */
} ctl_spawn;

/* The request of a program the guest's own services run detached as the
 * record's guest user ("guestUser"), in its home, without new privileges
 * (Xvfb, x11vnc); standard input /dev/null. */
ctl_spawn ctl_guest_daemon(json_object *record, const char *const *argv, char **env, int out_fd, int err_fd);
/* Connects to the control socket in `lease_dir`. fd or -1 with errno. */
int ctl_connect(const char *lease_dir);
/* Sends SPAWN and reads STARTED. 0 and *pid_out; or -1 with *err_no and a
 * message in why (FAILED: the command could not start). */
int ctl_spawn_cmd(int conn, const ctl_spawn *req, pid_t *pid_out, int *err_no, char *why, size_t why_size);
int ctl_send(int conn, uint32_t op, uint32_t a);
/* Reads one reply; 0, or -1 on EOF/error. */
int ctl_recv(int conn, uint32_t *op, uint32_t *a, int32_t *c, char *text, size_t text_size, int timeout_ms);
/* Sends `op` and reads its FDS reply (local_proto.h): 0 with up to `max`
 * descriptors in fds (owned by the caller) and their count in *nfds; or -1
 * with *err_no and the init's message in why. */
int ctl_request_fds(int conn, uint32_t op, int *fds, int max, int *nfds, int *err_no, char *why,
                    size_t why_size);
/* Kills a detached command's group; 1 when confirmed gone. */
int ctl_killpid(const char *lease_dir, pid_t pid);
/* The default environment of guest commands (NULL-terminated, malloc'd
 * strings in one malloc'd array; free with ctl_env_free). `extra` may be NULL. */
char **ctl_guest_env(local_state *st, json_object *record, const char *const *extra);
void ctl_env_free(char **env);

/* ---- net.c ----------------------------------------------------------------- */

/* The reject prefixes for a guest with outbound access: private ranges and
 * every network of the host. Returns a count; fills up to max entries. */
size_t net_reject_list(char out[][24], size_t max);
/* Starts the network helper for the guest init `init_pid` (whose launcher,
 * `launcher_pid`, still holds the guest's outer namespaces: without root
 * the helper joins those); *helper_pid_out. `exit_fd` is the read end of
 * the init's hold pipe (borrowed): EOF there means the init has exited.
 * slirp4netns gets it as --exit-fd; pasta, which cannot take one, gets a
 * keeper that ends it then (init_keep.c). On failure a helper already
 * running is in *helper_pid_out (0 = none), for the cleanup. */
relay_status net_start_helper(local_state *st, pid_t init_pid, pid_t launcher_pid, const char *lease_dir,
                              int exit_fd, pid_t *helper_pid_out, relay_error *err);
/* ---- egress.c ---------------------------------------------------------------- */

/* relay/machine.h egress_listeners. */
relay_status local_egress_listeners(relay_plugin_state *state, const char *lease_json, unsigned flags,
                                    int fds_out[3], relay_error *err);

/* A socket created in the network namespace of `init_pid`. */
int net_socket_in(pid_t init_pid, int domain, int type, int *err_no);
/* Spawns argv (host side) with its network namespace switched to the
 * guest's; stdout/stderr to log_fd. pid or -1. */
pid_t net_spawn_in(pid_t init_pid, const char *const *argv, const char *const *envp, int log_fd, int *err_no);
/* userns.c: the same from a forked child that joins the user namespace
 * owning the guest's network namespace first (a relay that is not root,
 * whose threads setns() refuses). */
int net_socket_in_userns(pid_t init_pid, int domain, int type, int *err_no);
pid_t net_spawn_in_userns(pid_t init_pid, const char *const *argv, const char *const *envp, int log_fd,
                          int *err_no);

/* ---- exec.c, xfer.c ---------------------------------------------------------- */

typedef struct local_conn {
	char *vm;
	char *lease_dir;
	json_object *record; /* snapshot at open */
	pid_t init_pid;
	unsigned long long init_start;
	uid_t uid;
	gid_t gid;
	char home[256];
} local_conn;

relay_status exec_run(local_state *st, local_conn *conn, const relay_exec_request *req, relay_call *call,
                      unsigned flags, relay_exec_result *res, relay_error *err);
/* stream.c: the long-lived stream of relay/transport.h (RELAY_TRANSPORT_STREAM). */
relay_status stream_open(local_state *st, local_conn *conn, const relay_exec_request *req, relay_call *call,
                         unsigned flags, relay_transport_stream **out, relay_error *err);
relay_status stream_write(local_state *st, relay_transport_stream *stream, const void *data, size_t len,
                          uint64_t timeout_ms, unsigned flags, relay_error *err);
relay_status stream_read(local_state *st, relay_transport_stream *stream, void *buf, size_t cap,
                         uint64_t timeout_ms, unsigned flags, size_t *got_out, relay_error *err);
void stream_close(local_state *st, relay_transport_stream *stream, unsigned flags);
/* A push or pull (xfer.c) after the kit's first checks (relay_kit/xfer.h, plugin.c). */
relay_status xfer_push(local_state *st, local_conn *conn, const char *local_path, const char *remote_path,
                       relay_call *call, unsigned flags, char **facts_out, relay_error *err);
relay_status xfer_pull(local_state *st, local_conn *conn, const char *remote_path, const char *local_path,
                       relay_call *call, unsigned flags, char **facts_out, relay_error *err);

/* ---- inventory.c ------------------------------------------------------------- */

/* The backend's images, catalog and doctor (relay_kit/machine.h) on a local_state. */
json_object *inventory_images(relay_plugin_state *state, relay_call *call);
relay_status inventory_catalog(relay_plugin_state *state, relay_call *call, json_object **out,
                               relay_error *err);
/* The doctor's checks; each image is acquired and released for real. */
json_object *inventory_doctor(relay_plugin_state *state, relay_call *call);

/* ---- console.c --------------------------------------------------------------- */

json_object *console_capabilities(local_state *st);
/* The console record made at acquire with vnc: true (ready or an error). */
relay_status console_prepare(local_state *st, json_object *record, relay_error *err);
/* The typed console of relay/machine.h (ABI 1.7) over the kit's ledger. */
extern const relay_machine_console_ops local_console_ops;
/* Stops whatever console attempt runs (release). */
void console_stop_all(local_state *st, json_object *record);

/* ---- options.c, machine_ops.c ------------------------------------------------- */

/* Sets every option's default (and the image "local"). */
void options_defaults(local_state *st);
/* Applies the config's "options" object; refuses a bad key or value by name. */
relay_status options_parse(local_state *st, json_object *opts, relay_error *err);
/* The machine ops of the descriptor (plugin.c), and the backend of the kit's
 * front they serve (st->kit). */
extern const relay_machine_ops local_machine_ops;
extern const rk_machine_backend local_machine_backend;

/* ---- reaper.c ---------------------------------------------------------------- */

void reaper_scan(local_state *st, bool at_start);
int reaper_start(local_state *st);
void reaper_stop(local_state *st);

/* The RLIMIT_DATA a new guest gets (options.c): bounds.dataBytes when it was
 * given or no memory cgroup bounds the guest, else 0 (none). */
int64_t local_data_bound(const local_state *st);

#endif
