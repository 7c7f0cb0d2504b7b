/*
 * init.h — what the parts of machine-local's guest init program share
 * (local_init.c: the launcher, the guest init, the arguments; init_util.c,
 * init_setup.c, init_serve.c). The program is static (libc only) and
 * single-threaded.
 */
#ifndef MACHINE_LOCAL_INIT_H
#define MACHINE_LOCAL_INIT_H

#include <stddef.h>
#include <sys/types.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define STATUS_FD   3
#define MAX_LIST    64
#define MAX_CONNS   256
#define MAX_TRACKED 1024

typedef struct launch_options {
	const char *lease_dir;
	const char *lower;
	const char *hostname;
	const char *id_map;
	const char *cgroups[8];
	int cgroup_count;
	const char *masks[MAX_LIST];
	int mask_count;
	const char *rejects[MAX_LIST];
	int reject_count;
	int rootless;
	int userxattr;
	int compose_root; /* the lower is the host root: compose it (init_rootless.c) */
	int egress;       /* network allow/internet: the relay's egress proxy listens here (init_egress.c) */
	const char *newuidmap, *newgidmap;
	const char *outer_uid_map; /* "0 <relay uid> 1 <guest uid> <subordinate uid> 1" for newuidmap */
	const char *outer_gid_map;
	const char *id_map_gid; /* the nested namespace's gid map (default: id_map) */
	const char *guest_home; /* made the guest user's (guest_uid, guest_gid) after the mounts */
	unsigned guest_uid, guest_gid;
	long long backstop_ms;
	int hold_fd;
	int gate_fd; /* the launcher waits for a byte (or EOF) here before the nested maps */
} launch_options;

/* The resource bounds of every command the init starts (0 = none): set by
 * main() before anything runs (defined in init_serve.c); single-threaded
 * program, plain globals. */
typedef struct init_bounds {
	long long nproc;
	long long data_bytes;
	long long fsize_bytes;
} init_bounds;
extern init_bounds g_bounds;

/* init_util.c: small helpers. */
/* Writes one line (cut to 1 KiB) to the log (stderr). */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Writes one line to the plugin (the status pipe, fd 3). */
void status_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reports a setup failure to the plugin and the log, then exits. */
void die(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
int write_text(const char *path, const char *text); /* 0, or -1 with errno */
long long realtime_ms(void);
long long monotonic_ms(void);
void sleep_ms(long ms);
void join_path(char *out, size_t size, const char *a, const char *b); /* dies when too long */

/* init_setup.c: the guest's mounts and network. */
/* Mounts the overlay root at `merged` and the guest's /proc, /dev, /sys,
 * /run and masks; dies on failure. */
void setup_root(const launch_options *o, const char *merged);
/* Brings loopback up and adds the reject routes; dies on failure. */
void setup_network(const launch_options *o);

/* init_keep.c: `keep-helper PIDFILE PROGRAM ARG...` (fd 3 the init's hold
 * pipe, fd 4 the status pipe, fds 5-8 the helper's: namespaces, lock): starts the network
 * helper and ends it once the init has exited. Returns the exit status. */
int keep_helper(int argc, char **argv);

/* init_egress.c: the sockets of the relay's egress proxy. */
/* Lets 127.0.0.1:53 be bound in the guest's network namespace by the init
 * after it gave up its capabilities (ip_unprivileged_port_start 53); dies
 * on failure. Called by setup_network under --egress. */
void egress_prepare(void);
/* Makes the three sockets of LP_R_FDS (local_proto.h) in the guest's
 * network namespace. 0, or an errno with `why` naming the socket. */
int egress_sockets(int fds[3], char *why, size_t why_size);

/* init_rootless.c: without root. */
/* Creates a user namespace and has newuidmap/newgidmap (set-uid helpers)
 * write its maps ("inside outside count ..." words); then becomes root of
 * it without supplementary groups. 0, or -1 with errno. */
int enter_mapped_userns(const char *newuidmap, const char *newgidmap, const char *uid_map,
                        const char *gid_map);
/* Mounts at `merged` a tmpfs root with one overlay per top-level folder of
 * the host root (upper and work below lease_dir), the private folders
 * bound from the upper layer; leaves proc, sys, dev and run empty for
 * setup_root. Dies on failure. */
void compose_root(const char *lease_dir, const char *merged);
/* The rmtree command: deletes `path` inside a namespace with those maps.
 * The exit status (0 = removed). */
int remove_tree_mapped(const char *newuidmap, const char *newgidmap, const char *uid_map, const char *gid_map,
                       const char *path);

/* init_serve.c: the control server. */
/* Serves the control protocol (local_proto.h) until the guest stops. */
void serve(const launch_options *o, int listen_fd, int dir_fd) __attribute__((noreturn));

#endif
