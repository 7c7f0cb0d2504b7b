/*
 * local_init.c — the launcher and init process of one machine-local guest.
 *
 * Built as a small static program (libc only) and embedded in
 * machine-local.so, which runs it from a sealed memfd:
 *
 *   machine-local-init launch --lease-dir DIR --lower DIR --hostname NAME
 *       [--id-map "IN OUT COUNT"] [--rootless] [--userxattr] [--cgroup DIR]...
 *       [--mask PATH]... [--reject A.B.C.D/N]... [--backstop-ms N] [--hold-fd N]
 *       [--rlimit-nproc N] [--rlimit-data BYTES] [--rlimit-fsize BYTES]
 *       [--compose-root] [--newuidmap PATH --newgidmap PATH --outer-uid-map MAP
 *        --outer-gid-map MAP] [--id-map-gid MAP] [--guest-home PATH --guest-ids UID:GID]
 *       [--gate-fd N] [--egress]
 *   machine-local-init rmtree NEWUIDMAP NEWGIDMAP UIDMAP GIDMAP PATH
 *
 * fd 3 is the status pipe to the plugin; stdout and stderr go to the lease's
 * init.log. The launcher
 *   1. joins the guest's cgroups (--cgroup: the v2 one and the v1 pids and
 *      memory ones), so everything below is counted;
 *   2. rootless only: creates a user namespace mapping its own uid to 0 and,
 *      with --outer-uid-map, the guest user's uid to a subordinate id of the
 *      relay user (written by newuidmap/newgidmap, init_rootless.c);
 *   3. creates mount, UTS, IPC, network, PID and cgroup namespaces;
 *   4. forks the guest init (PID 1 of the new PID namespace), reports
 *      "pid <host pid>" on fd 3, writes the init's user-namespace maps when
 *      asked, and exits once the init has finished its setup.
 * The guest init
 *   1. mounts the overlay root (lower = the base tree, upper and work in the
 *      lease folder), a fresh /proc, a minimal /dev, a read-only /sys, a
 *      tmpfs /run, read-only empty masks over --mask paths, and hides the
 *      kernel's dangerous /proc files;
 *   2. sets the hostname, brings loopback up and adds "reject" routes for
 *      --reject prefixes (private ranges and the host's own networks);
 *      under --egress lets port 53 be bound later (init_egress.c);
 *   3. binds <lease dir>/control.sock, pivots into the overlay and drops
 *      the host's tree;
 *   4. moves into a user namespace of its own (maps written by the
 *      launcher), so nothing that runs in the guest holds a capability over
 *      its mounts, network or hostname;
 *   5. reports "ready" on fd 3 and serves the control protocol
 *      (local_proto.h): it starts commands (each with the --rlimit-* bounds,
 *      hard and soft, which no guest process can raise), reaps every
 *      orphan, kills process groups on request, and reports exits.
 * It never watches the relay: a guest outlives the relay that made it (the
 * pause rule). It does watch <lease dir>/expires ("<expiresAtMs> <graceMs>"):
 * when that time plus the grace plus --backstop-ms has passed, or the lease
 * folder is gone, it kills the guest. The relay's reaper normally acts
 * first and also removes the files; this is the backstop when no relay
 * runs any more.
 *
 * This file: the launcher, the guest init's start and the arguments. The
 * parts (init.h): init_util.c (helpers), init_setup.c (mounts, network),
 * init_serve.c (the control server), init_egress.c (the egress proxy's
 * sockets), init_rootless.c (without root).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "local_proto.h"

#include "init.h"

/* ---- the guest init -------------------------------------------------------- */

static void guest_init(const launch_options *o, int to_launcher, int from_launcher) __attribute__((noreturn));
static void guest_init(const launch_options *o, int to_launcher, int from_launcher)
{
	char merged[PATH_MAX];
	join_path(merged, sizeof merged, o->lease_dir, "merged");
	signal(SIGPIPE, SIG_IGN);
	setsid();
	if (o->hold_fd >= 0)
		fcntl(o->hold_fd, F_SETFD, FD_CLOEXEC);
	if (o->gate_fd >= 0)
		close(o->gate_fd);
	if (unshare(CLONE_NEWNS) != 0)
		die(errno, "cannot create the guest's mount namespace");

	setup_root(o, merged);
	if (sethostname(o->hostname, strlen(o->hostname)) != 0)
		die(errno, "cannot set the hostname %s", o->hostname);
	setup_network(o);

	int dir_fd = open(o->lease_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir_fd < 0)
		die(errno, "cannot open the lease folder %s", o->lease_dir);
	if (chdir(o->lease_dir) != 0)
		die(errno, "cannot enter the lease folder %s", o->lease_dir);
	unlink("control.sock");
	int listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (listen_fd < 0)
		die(errno, "cannot create the control socket");
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof sa.sun_path, "control.sock");
	mode_t old = umask(077);
	if (bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0)
		die(errno, "cannot bind the control socket in %s", o->lease_dir);
	umask(old);
	if (listen(listen_fd, 64) != 0)
		die(errno, "cannot listen on the control socket");

	if (chdir(merged) != 0)
		die(errno, "cannot enter %s", merged);
	if (syscall(SYS_pivot_root, ".", ".") != 0)
		die(errno, "cannot pivot into the guest root");
	if (umount2(".", MNT_DETACH) != 0)
		die(errno, "cannot detach the host's tree");
	if (chdir("/") != 0)
		die(errno, "cannot enter the guest root");

	/* Give up every capability over the namespaces set up above. */
	if (o->id_map) {
		if (unshare(CLONE_NEWUSER) != 0)
			die(errno, "cannot create the guest's user namespace");
		if (write(to_launcher, "userns\n", 7) != 7)
			die(errno, "cannot ask for the user namespace maps");
		char ack[8];
		ssize_t n = read(from_launcher, ack, sizeof ack);
		if (n <= 0 || ack[0] != 'o')
			die(EPERM, "the launcher could not write the user namespace maps");
		if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0)
			die(errno, "cannot become root of the guest's user namespace");
	}
	close(to_launcher);
	close(from_launcher);

	status_line("ready");
	close(STATUS_FD);
	serve(o, listen_fd, dir_fd);
}

/* ---- the launcher ---------------------------------------------------------- */

static int write_map(pid_t pid, const char *name, const char *map)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	return write_text(path, map);
}

static void launch(const launch_options *o) __attribute__((noreturn));
static void launch(const launch_options *o)
{
	/* Nothing of the relay but fds 0-3 (and the held fd 4) reaches the
	 * guest: a descriptor it forgot to mark close-on-exec would otherwise
	 * live as long as the guest. */
	syscall(SYS_close_range, o->gate_fd >= 0 ? 6u : o->hold_fd >= 0 ? 5u : 4u, ~0u, 0u);
	for (int i = 0; i < o->cgroup_count; i++) {
		char path[PATH_MAX];
		join_path(path, sizeof path, o->cgroups[i], "cgroup.procs");
		if (write_text(path, "0\n") != 0)
			die(errno, "cannot join the guest cgroup %s", o->cgroups[i]);
	}
	if (o->outer_uid_map) {
		if (enter_mapped_userns(o->newuidmap, o->newgidmap, o->outer_uid_map, o->outer_gid_map) != 0)
			die(errno,
			    "cannot create the guest's user namespace with the subordinate ids %s (%s)",
			    o->outer_uid_map, o->newuidmap);
	} else if (o->rootless) {
		uid_t uid = geteuid();
		gid_t gid = getegid();
		if (unshare(CLONE_NEWUSER) != 0)
			die(errno,
			    "cannot create a user namespace (are unprivileged user namespaces enabled?)");
		char map[64];
		if (write_text("/proc/self/setgroups", "deny") != 0)
			die(errno, "cannot deny setgroups in the user namespace");
		snprintf(map, sizeof map, "0 %u 1\n", (unsigned)uid);
		if (write_text("/proc/self/uid_map", map) != 0)
			die(errno, "cannot write the uid map");
		snprintf(map, sizeof map, "0 %u 1\n", (unsigned)gid);
		if (write_text("/proc/self/gid_map", map) != 0)
			die(errno, "cannot write the gid map");
	}
	/* The network namespace is made here, before the init's pid is
	 * reported, so a network helper attached to /proc/<pid>/ns/net can
	 * never reach the host's. The mount namespace is the init's own. */
	if (unshare(CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWCGROUP) != 0)
		die(errno, "cannot create the guest's namespaces");
	int up[2], down[2];
	if (pipe2(up, O_CLOEXEC) != 0 || pipe2(down, O_CLOEXEC) != 0)
		die(errno, "pipe");
	pid_t child = fork();
	if (child < 0)
		die(errno, "cannot start the guest init");
	if (child == 0) {
		close(up[0]);
		close(down[1]);
		guest_init(o, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	status_line("pid %d", (int)child);
	if (o->hold_fd >= 0)
		close(o->hold_fd);
	if (o->gate_fd >= 0)
		fcntl(o->gate_fd, F_SETFD, FD_CLOEXEC);
	for (;;) {
		char msg[16];
		ssize_t n = read(up[0], msg, sizeof msg);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (strncmp(msg, "userns", 6) == 0) {
			/* The network helper joins the namespaces the init is in
			 * now: they stay until the plugin says it is ready. */
			if (o->gate_fd >= 0) {
				char go;
				while (read(o->gate_fd, &go, 1) < 0 && errno == EINTR) {
				}
				close(o->gate_fd);
			}
			const char *map = o->id_map;
			const char *gmap = o->id_map_gid ? o->id_map_gid : map;
			int ok =
			    write_map(child, "uid_map", map) == 0 && write_map(child, "gid_map", gmap) == 0;
			if (!ok)
				say("machine-local init: cannot write the guest's user namespace maps: %s",
				    strerror(errno));
			if (write(down[1], ok ? "ok\n" : "no\n", 3) != 3)
				break;
		}
	}
	_exit(0);
}

/* ---- arguments ------------------------------------------------------------- */

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	say("usage: machine-local-init launch --lease-dir DIR --lower DIR --hostname NAME [--id-map MAP] "
	    "[--rootless] [--userxattr] [--cgroup DIR]... [--mask PATH]... [--reject CIDR]... "
	    "[--backstop-ms N] [--hold-fd N] [--rlimit-nproc N] [--rlimit-data BYTES] "
	    "[--rlimit-fsize BYTES]");
	status_line("error %d bad arguments", EINVAL);
	_exit(2);
}

int main(int argc, char **argv)
{
	launch_options o;
	memset(&o, 0, sizeof o);
	o.hold_fd = -1;
	o.gate_fd = -1;
	o.backstop_ms = 60000;
	if (argc == 7 && strcmp(argv[1], "rmtree") == 0)
		return remove_tree_mapped(argv[2], argv[3], argv[4], argv[5], argv[6]);
	if (argc >= 4 && strcmp(argv[1], "keep-helper") == 0)
		return keep_helper(argc, argv);
	if (argc < 2 || strcmp(argv[1], "launch") != 0)
		usage();
	for (int i = 2; i < argc; i++) {
		const char *k = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(k, "--rootless") == 0) {
			o.rootless = 1;
			continue;
		}
		if (strcmp(k, "--userxattr") == 0) {
			o.userxattr = 1;
			continue;
		}
		if (strcmp(k, "--compose-root") == 0) {
			o.compose_root = 1;
			continue;
		}
		if (strcmp(k, "--egress") == 0) {
			o.egress = 1;
			continue;
		}
		if (v == NULL)
			usage();
		i++;
		if (strcmp(k, "--lease-dir") == 0)
			o.lease_dir = v;
		else if (strcmp(k, "--lower") == 0)
			o.lower = v;
		else if (strcmp(k, "--hostname") == 0)
			o.hostname = v;
		else if (strcmp(k, "--id-map") == 0)
			o.id_map = v;
		else if (strcmp(k, "--cgroup") == 0 && o.cgroup_count < 8)
			o.cgroups[o.cgroup_count++] = v;
		else if (strcmp(k, "--rlimit-nproc") == 0)
			g_bounds.nproc = atoll(v);
		else if (strcmp(k, "--rlimit-data") == 0)
			g_bounds.data_bytes = atoll(v);
		else if (strcmp(k, "--rlimit-fsize") == 0)
			g_bounds.fsize_bytes = atoll(v);
		else if (strcmp(k, "--mask") == 0 && o.mask_count < MAX_LIST)
			o.masks[o.mask_count++] = v;
		else if (strcmp(k, "--reject") == 0 && o.reject_count < MAX_LIST)
			o.rejects[o.reject_count++] = v;
		else if (strcmp(k, "--backstop-ms") == 0)
			o.backstop_ms = atoll(v);
		else if (strcmp(k, "--hold-fd") == 0)
			o.hold_fd = atoi(v);
		else if (strcmp(k, "--gate-fd") == 0)
			o.gate_fd = atoi(v);
		else if (strcmp(k, "--newuidmap") == 0)
			o.newuidmap = v;
		else if (strcmp(k, "--newgidmap") == 0)
			o.newgidmap = v;
		else if (strcmp(k, "--outer-uid-map") == 0)
			o.outer_uid_map = v;
		else if (strcmp(k, "--outer-gid-map") == 0)
			o.outer_gid_map = v;
		else if (strcmp(k, "--id-map-gid") == 0)
			o.id_map_gid = v;
		else if (strcmp(k, "--guest-home") == 0)
			o.guest_home = v;
		else if (strcmp(k, "--guest-ids") == 0 && sscanf(v, "%u:%u", &o.guest_uid, &o.guest_gid) == 2)
			continue;
		else
			usage();
	}
	if (!o.lease_dir || !o.lower || !o.hostname || o.lease_dir[0] != '/' || o.lower[0] != '/' ||
	    (o.outer_uid_map && (!o.outer_gid_map || !o.newuidmap || !o.newgidmap)))
		usage();
	launch(&o);
}
