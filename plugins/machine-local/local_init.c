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
 *
 * fd 3 is the status pipe to the plugin; stdout and stderr go to the lease's
 * init.log. The launcher
 *   1. joins the guest's cgroups (--cgroup: the v2 one and the v1 pids and
 *      memory ones), so everything below is counted;
 *   2. rootless only: creates a user namespace mapping its own uid to 0;
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

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

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
	long long backstop_ms;
	int hold_fd;
} launch_options;

/* The resource bounds of every command the init starts (0 = none): set by
 * main() before anything runs; single-threaded program, plain globals. */
static struct {
	long long nproc;
	long long data_bytes;
	long long fsize_bytes;
} g_bounds;

/* ---- small helpers ------------------------------------------------------- */

static void die(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* Writes one formatted line to `fd`, cut to 1 KiB. */
static void write_line(int fd, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void write_line(int fd, const char *fmt, va_list ap)
{
	char line[1024];
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	ssize_t w = write(fd, line, (size_t)n);
	(void)w;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	write_line(2, fmt, ap);
	va_end(ap);
}

static void status_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void status_line(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	write_line(STATUS_FD, fmt, ap);
	va_end(ap);
}

/* Reports a setup failure to the plugin and the log, then exits. */
static void die(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int err, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	say("machine-local init: %s: %s", msg, strerror(err));
	status_line("error %d %s", err, msg);
	_exit(1);
}

static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = strlen(text);
	ssize_t w = write(fd, text, len);
	int saved = errno;
	close(fd);
	errno = saved;
	return w == (ssize_t)len ? 0 : -1;
}

static long long realtime_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

static void join_path(char *out, size_t size, const char *a, const char *b)
{
	int n = snprintf(out, size, "%s/%s", a, b[0] == '/' ? b + 1 : b);
	if (n < 0 || (size_t)n >= size)
		die(ENAMETOOLONG, "path too long: %s/%s", a, b);
}

/* ---- mounts ---------------------------------------------------------------- */

static void mount_or_die(const char *src, const char *dst, const char *type, unsigned long flags,
                         const char *data)
{
	if (mount(src, dst, type, flags, data) != 0)
		die(errno, "cannot mount %s on %s", type ? type : (src ? src : "?"), dst);
}

static void make_file(const char *path, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		die(errno, "cannot create %s", path);
	close(fd);
}

/* Bind-mounts `src` onto `dst` and makes it read-only (and nosuid, nodev,
 * noexec unless keep_dev). */
static int bind_readonly(const char *src, const char *dst, int keep_dev)
{
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
		return -1;
	unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID;
	if (!keep_dev)
		flags |= MS_NODEV | MS_NOEXEC;
	return mount(NULL, dst, NULL, flags, NULL);
}

static void setup_dev(const char *root)
{
	char dev[PATH_MAX], path[PATH_MAX];
	join_path(dev, sizeof dev, root, "dev");
	mount_or_die("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=65536");
	static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
	for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
		char host[64];
		snprintf(host, sizeof host, "/dev/%s", nodes[i]);
		join_path(path, sizeof path, dev, nodes[i]);
		make_file(path, 0666);
		if (mount(host, path, NULL, MS_BIND, NULL) != 0)
			die(errno, "cannot bind %s into the guest", host);
	}
	join_path(path, sizeof path, dev, "pts");
	if (mkdir(path, 0755) != 0)
		die(errno, "cannot create %s", path);
	if (mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") !=
	    0)
		say("machine-local init: no private devpts (%s); terminals are unavailable in the guest",
		    strerror(errno));
	join_path(path, sizeof path, dev, "shm");
	if (mkdir(path, 01777) != 0)
		die(errno, "cannot create %s", path);
	mount_or_die("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=01777");
	static const char *const links[][2] = {{"ptmx", "pts/ptmx"},
	                                       {"fd", "/proc/self/fd"},
	                                       {"stdin", "/proc/self/fd/0"},
	                                       {"stdout", "/proc/self/fd/1"},
	                                       {"stderr", "/proc/self/fd/2"}};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		join_path(path, sizeof path, dev, links[i][0]);
		if (symlink(links[i][1], path) != 0)
			die(errno, "cannot create %s", path);
	}
	/* The tmpfs itself becomes read-only: the guest cannot add nodes. */
	if (mount(NULL, dev, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "mode=0755,size=65536") !=
	    0)
		say("machine-local init: /dev stays writable (%s)", strerror(errno));
}

/* Hides the kernel's global /proc files from the guest, as container
 * runtimes do: they are not namespaced. */
static void mask_proc(const char *root)
{
	static const char *const null_masks[] = {"proc/kcore", "proc/keys", "proc/timer_list",
	                                         "proc/sched_debug", "proc/kallsyms"};
	static const char *const ro_paths[] = {"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus",
	                                       "proc/fs",  "proc/acpi"};
	char path[PATH_MAX];
	for (size_t i = 0; i < sizeof null_masks / sizeof null_masks[0]; i++) {
		join_path(path, sizeof path, root, null_masks[i]);
		if (access(path, F_OK) == 0 && mount("/dev/null", path, NULL, MS_BIND, NULL) != 0)
			die(errno, "cannot mask %s", path);
	}
	for (size_t i = 0; i < sizeof ro_paths / sizeof ro_paths[0]; i++) {
		join_path(path, sizeof path, root, ro_paths[i]);
		if (access(path, F_OK) == 0 && bind_readonly(path, path, 0) != 0)
			die(errno, "cannot make %s read-only", path);
	}
}

static void apply_masks(const launch_options *o, const char *root)
{
	char path[PATH_MAX];
	for (int i = 0; i < o->mask_count; i++) {
		join_path(path, sizeof path, root, o->masks[i]);
		struct stat st;
		if (lstat(path, &st) != 0)
			continue; /* nothing to hide */
		if (S_ISDIR(st.st_mode)) {
			if (mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			          "mode=0000,size=4096") != 0)
				die(errno, "cannot hide %s", o->masks[i]);
		} else if (S_ISREG(st.st_mode)) {
			if (mount("/dev/null", path, NULL, MS_BIND, NULL) != 0)
				die(errno, "cannot hide %s", o->masks[i]);
		}
	}
}

static void setup_root(const launch_options *o, const char *merged)
{
	char upper[PATH_MAX], work[PATH_MAX], data[3 * PATH_MAX + 64], path[PATH_MAX];
	join_path(upper, sizeof upper, o->lease_dir, "upper");
	join_path(work, sizeof work, o->lease_dir, "work");

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		die(errno, "cannot make the guest's mounts private");
	/* volatile: the upper layer is thrown away at release, so nothing in
	 * it is ever synced (without it, the unmount at release would write
	 * every dirty page of the guest to disk before the folder is deleted).
	 * Kernels before 5.10 do not know it. */
	snprintf(data, sizeof data, "lowerdir=%s,upperdir=%s,workdir=%s%s,volatile", o->lower, upper, work,
	         o->userxattr ? ",userxattr" : "");
	if (mount("overlay", merged, "overlay", MS_NOSUID | MS_NODEV, data) != 0) {
		/* A refused volatile mount may leave its marker in the work folder. */
		char marker[PATH_MAX];
		join_path(marker, sizeof marker, work, "incompat/volatile");
		rmdir(marker);
		join_path(marker, sizeof marker, work, "incompat");
		rmdir(marker);
		join_path(marker, sizeof marker, work, "work");
		rmdir(marker);
		snprintf(data, sizeof data, "lowerdir=%s,upperdir=%s,workdir=%s%s", o->lower, upper, work,
		         o->userxattr ? ",userxattr" : "");
		mount_or_die("overlay", merged, "overlay", MS_NOSUID | MS_NODEV, data);
	}

	join_path(path, sizeof path, merged, "proc");
	mount_or_die("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	setup_dev(merged);
	join_path(path, sizeof path, merged, "sys");
	if (access(path, F_OK) == 0 &&
	    mount("sysfs", path, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		say("machine-local init: no /sys in the guest (%s)", strerror(errno));
	join_path(path, sizeof path, merged, "run");
	if (access(path, F_OK) == 0)
		mount_or_die("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	apply_masks(o, merged);
	mask_proc(merged);
}

/* ---- network --------------------------------------------------------------- */

static void setup_network(const launch_options *o)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die(errno, "cannot open a socket in the guest's network namespace");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0)
		die(errno, "cannot read the guest's loopback flags");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)
		die(errno, "cannot bring the guest's loopback up");
	for (int i = 0; i < o->reject_count; i++) {
		char addr[64];
		snprintf(addr, sizeof addr, "%s", o->rejects[i]);
		char *slash = strchr(addr, '/');
		int bits = 32;
		if (slash) {
			*slash = '\0';
			bits = atoi(slash + 1);
		}
		if (bits < 0 || bits > 32)
			die(EINVAL, "bad reject prefix %s", o->rejects[i]);
		struct rtentry rt;
		memset(&rt, 0, sizeof rt);
		struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst;
		struct sockaddr_in *mask = (struct sockaddr_in *)&rt.rt_genmask;
		dst->sin_family = AF_INET;
		mask->sin_family = AF_INET;
		if (inet_pton(AF_INET, addr, &dst->sin_addr) != 1)
			die(EINVAL, "bad reject prefix %s", o->rejects[i]);
		uint32_t m = bits == 0 ? 0 : htonl(0xffffffffu << (32 - bits));
		mask->sin_addr.s_addr = m;
		dst->sin_addr.s_addr &= m;
		rt.rt_flags = RTF_UP | RTF_REJECT | (bits == 32 ? RTF_HOST : 0);
		rt.rt_metric = 0;
		if (ioctl(fd, SIOCADDRT, &rt) != 0 && errno != EEXIST)
			die(errno, "cannot add the reject route %s", o->rejects[i]);
	}
	close(fd);
}

/* ---- the control server ---------------------------------------------------- */

typedef struct tracked {
	pid_t pid;
	int conn_fd; /* -1 when detached or the connection closed */
	int exited;
	int status;
} tracked;

static tracked g_tracked[MAX_TRACKED]; /* single-threaded program: plain globals */
static int g_tracked_count;

static tracked *find_tracked(pid_t pid)
{
	for (int i = 0; i < g_tracked_count; i++)
		if (g_tracked[i].pid == pid)
			return &g_tracked[i];
	return NULL;
}

static void drop_tracked(tracked *t)
{
	int i = (int)(t - g_tracked);
	g_tracked[i] = g_tracked[--g_tracked_count];
}

/* Reaps every child that has exited; records the exits of tracked leaders. */
static void reap_all(void)
{
	for (;;) {
		int st = 0;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid <= 0)
			break;
		tracked *t = find_tracked(pid);
		if (t) {
			t->exited = 1;
			t->status = st;
		}
	}
}

static int group_gone(pid_t pgid)
{
	reap_all();
	return kill(-pgid, 0) != 0 && errno == ESRCH;
}

static int send_packet(int fd, uint32_t op, uint32_t a, int32_t c, const char *text)
{
	lp_header h;
	memset(&h, 0, sizeof h);
	h.magic = LP_MAGIC;
	h.op = op;
	h.a = a;
	h.c = c;
	size_t tlen = text ? strlen(text) + 1 : 0;
	h.nstr = text ? 1 : 0;
	h.len = (uint32_t)tlen;
	char buf[sizeof h + 512];
	if (tlen > 512)
		tlen = 512;
	memcpy(buf, &h, sizeof h);
	if (tlen) {
		memcpy(buf + sizeof h, text, tlen);
		buf[sizeof h + tlen - 1] = '\0';
	}
	ssize_t w = send(fd, buf, sizeof h + tlen, MSG_NOSIGNAL | MSG_DONTWAIT);
	return w < 0 ? -1 : 0;
}

/* Sends EXIT for every tracked leader that has exited and has a connection. */
static void dispatch_exits(void)
{
	for (int i = 0; i < g_tracked_count;) {
		tracked *t = &g_tracked[i];
		if (!t->exited) {
			i++;
			continue;
		}
		if (t->conn_fd >= 0) {
			int gone = kill(-t->pid, 0) != 0 && errno == ESRCH;
			send_packet(t->conn_fd, LP_R_EXIT, (uint32_t)gone, t->status, NULL);
		}
		drop_tracked(t);
	}
}

/* Polls group_gone every `step_ms` for at most `limit_ms`; 1 once gone. */
static int group_gone_within(pid_t pgid, long long limit_ms, int step_ms)
{
	long long until = monotonic_ms() + limit_ms;
	for (;;) {
		if (group_gone(pgid))
			return 1;
		if (monotonic_ms() >= until)
			return 0;
		sleep_ms(step_ms);
	}
}

/* A member that has closed its descriptors may not have become a zombie
 * yet, so "gone" right after the last output is polled for a short while
 * (5 ms steps, 250 ms at most) before the group is reported alive. */
static int settled_group_gone(pid_t pgid)
{
	return group_gone_within(pgid, 250, 5);
}

/* Kills a process group and waits up to one second for it to be gone. */
static int kill_group(pid_t pgid)
{
	kill(-pgid, SIGKILL);
	kill(pgid, SIGKILL);
	return group_gone_within(pgid, 1000, 20);
}

typedef struct spawn_request {
	uid_t uid;
	gid_t gid;
	unsigned flags;
	const char *cwd;
	char *argv[4096];
	char *envp[4096];
} spawn_request;

static int parse_spawn(const lp_header *h, char *body, spawn_request *sr)
{
	uint32_t argc = (uint32_t)h->d;
	if (h->nstr < 1 + argc || argc < 1 || argc >= 4096 || h->nstr - 1 - argc >= 4096)
		return -1;
	char *p = body, *end = body + h->len;
	char *strs[8193];
	if (h->nstr > 8192)
		return -1;
	for (uint32_t i = 0; i < h->nstr; i++) {
		char *nul = memchr(p, '\0', (size_t)(end - p));
		if (nul == NULL)
			return -1;
		strs[i] = p;
		p = nul + 1;
	}
	sr->uid = h->a;
	sr->gid = h->b;
	sr->flags = (unsigned)h->c;
	sr->cwd = strs[0];
	for (uint32_t i = 0; i < argc; i++)
		sr->argv[i] = strs[1 + i];
	sr->argv[argc] = NULL;
	uint32_t envc = h->nstr - 1 - argc;
	for (uint32_t i = 0; i < envc; i++)
		sr->envp[i] = strs[1 + argc + i];
	sr->envp[envc] = NULL;
	return 0;
}

/* In the child: becomes the command. Never returns. */
static void run_child(const spawn_request *sr, int in_fd, int out_fd, int err_fd, int status_w)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	setsid();
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	const char *stage = "stdio";
	if (null_fd < 0)
		goto fail;
	if (out_fd < 0)
		out_fd = null_fd;
	if (err_fd < 0)
		err_fd = (sr->flags & LP_SPAWN_MERGE) ? out_fd : null_fd;
	if (dup2(in_fd >= 0 ? in_fd : null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
		goto fail;
	syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
	/* Hard and soft: raising a hard limit needs CAP_SYS_RESOURCE in the
	 * host's user namespace, which no guest process has. RLIMIT_NPROC is
	 * counted per uid in the guest's own user namespace (and the kernel
	 * exempts uid 0 of the host, so it bounds only a non-root guest user). */
	stage = "limits";
	const struct {
		int resource;
		long long value;
	} bounds[] = {{RLIMIT_NPROC, g_bounds.nproc},
	              {RLIMIT_DATA, g_bounds.data_bytes},
	              {RLIMIT_FSIZE, g_bounds.fsize_bytes}};
	for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
		struct rlimit rl = {(rlim_t)bounds[i].value, (rlim_t)bounds[i].value};
		if (bounds[i].value > 0 && setrlimit(bounds[i].resource, &rl) != 0)
			goto fail;
	}
	stage = "user";
	if (sr->uid != 0 || sr->gid != 0) {
		if (setgroups(0, NULL) != 0 && errno != EPERM)
			goto fail;
		if (setresgid(sr->gid, sr->gid, sr->gid) != 0 || setresuid(sr->uid, sr->uid, sr->uid) != 0)
			goto fail;
	}
	if (sr->flags & LP_SPAWN_NO_NEW_PRIVS)
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	stage = "cwd";
	if (sr->cwd[0] && chdir(sr->cwd) != 0)
		goto fail;
	stage = "exec";
	environ = (char **)sr->envp;
	execvp(sr->argv[0], (char *const *)sr->argv);
fail:;
	int e = errno;
	char msg[64];
	int n = snprintf(msg, sizeof msg, "%d %s", e, stage);
	ssize_t w = write(status_w, msg, (size_t)n);
	(void)w;
	_exit(127);
}

static void handle_spawn(int conn, const lp_header *h, char *body, const int *fds, int nfds)
{
	static spawn_request sr; /* large; single-threaded */
	const int with_stdin = ((unsigned)h->c & LP_SPAWN_STDIN) != 0 && nfds > 0;
	const int out_count = with_stdin ? nfds - 1 : nfds;
	int in_fd = with_stdin ? fds[nfds - 1] : -1;
	int out_fd = out_count > 0 ? fds[0] : -1;
	int err_fd = out_count > 1 ? fds[1] : -1;
	if (parse_spawn(h, body, &sr) != 0) {
		send_packet(conn, LP_R_ERROR, 0, EINVAL, "malformed spawn request");
		goto done;
	}
	if (!(sr.flags & LP_SPAWN_DETACHED)) {
		for (int i = 0; i < g_tracked_count; i++)
			if (g_tracked[i].conn_fd == conn) {
				send_packet(conn, LP_R_ERROR, 0, EBUSY,
				            "this connection already runs a command");
				goto done;
			}
	}
	if (g_tracked_count >= MAX_TRACKED) {
		send_packet(conn, LP_R_FAILED, 0, EAGAIN, "too many commands are running in the guest");
		goto done;
	}
	int sp[2];
	if (pipe2(sp, O_CLOEXEC) != 0) {
		send_packet(conn, LP_R_FAILED, 0, errno, "pipe");
		goto done;
	}
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(sp[0]);
		close(sp[1]);
		send_packet(conn, LP_R_FAILED, 0, e, "fork");
		goto done;
	}
	if (pid == 0) {
		close(sp[0]);
		run_child(&sr, in_fd, out_fd, err_fd, sp[1]);
	}
	close(sp[1]);
	char msg[64] = "";
	ssize_t n;
	do
		n = read(sp[0], msg, sizeof msg - 1);
	while (n < 0 && errno == EINTR);
	close(sp[0]);
	if (n > 0) {
		msg[n] = '\0';
		int e = atoi(msg);
		const char *stage = strchr(msg, ' ');
		int st = 0;
		waitpid(pid, &st, 0);
		send_packet(conn, LP_R_FAILED, 0, e ? e : EIO, stage ? stage + 1 : "exec");
		goto done;
	}
	tracked *t = &g_tracked[g_tracked_count++];
	t->pid = pid;
	t->conn_fd = (sr.flags & LP_SPAWN_DETACHED) ? -1 : conn;
	t->exited = 0;
	t->status = 0;
	send_packet(conn, LP_R_STARTED, (uint32_t)pid, 0, NULL);
done:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
}

static void handle_request(int conn, char *buf, size_t n, const int *fds, int nfds)
{
	lp_header h;
	if (n < sizeof h) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		send_packet(conn, LP_R_ERROR, 0, EINVAL, "short request");
		return;
	}
	memcpy(&h, buf, sizeof h);
	if (h.magic != LP_MAGIC || h.len != n - sizeof h) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		send_packet(conn, LP_R_ERROR, 0, EINVAL, "bad request header");
		return;
	}
	if (h.op == LP_SPAWN) {
		handle_spawn(conn, &h, buf + sizeof h, fds, nfds);
		return;
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	switch (h.op) {
	case LP_KILL:
	case LP_QUERY: {
		pid_t pgid = 0;
		for (int i = 0; i < g_tracked_count; i++)
			if (g_tracked[i].conn_fd == conn)
				pgid = g_tracked[i].pid;
		if (pgid == 0) {
			/* Already reaped and reported: answer from the group itself. */
			pgid = (pid_t)h.a;
		}
		if (pgid <= 1) {
			send_packet(conn, LP_R_ERROR, 0, ESRCH, "no command on this connection");
			return;
		}
		int gone = h.op == LP_KILL ? kill_group(pgid) : settled_group_gone(pgid);
		send_packet(conn, LP_R_GROUP, (uint32_t)gone, 0, NULL);
		return;
	}
	case LP_KILLPID: {
		pid_t pid = (pid_t)h.a;
		if (pid <= 1) {
			send_packet(conn, LP_R_ERROR, 0, EINVAL, "bad pid");
			return;
		}
		int gone = kill_group(pid);
		send_packet(conn, LP_R_GROUP, (uint32_t)gone, 0, NULL);
		return;
	}
	case LP_PING: send_packet(conn, LP_R_PONG, (uint32_t)g_tracked_count, 0, NULL); return;
	default: send_packet(conn, LP_R_ERROR, 0, EINVAL, "unknown request"); return;
	}
}

/* Reads <lease dir>/expires; returns 0 and the deadline after which the
 * backstop acts, 1 when the lease folder is gone, -1 when unreadable. */
static int read_expiry(int dir_fd, long long backstop_ms, long long *kill_at_ms)
{
	int fd = openat(dir_fd, "expires", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		struct stat st;
		if (errno == ENOENT && fstatat(dir_fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_nlink == 0)
			return 1;
		return -1;
	}
	char buf[128];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	long long expires = 0, grace = 0;
	if (sscanf(buf, "%lld %lld", &expires, &grace) != 2)
		return -1;
	*kill_at_ms = expires + grace + backstop_ms;
	return 0;
}

static void serve(const launch_options *o, int listen_fd, int dir_fd) __attribute__((noreturn));
static void serve(const launch_options *o, int listen_fd, int dir_fd)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		die(errno, "signalfd");
	static int conns[MAX_CONNS];
	int nconns = 0;
	char *buf = malloc(LP_MAX_PACKET);
	if (buf == NULL)
		die(ENOMEM, "cannot allocate the request buffer");
	long long next_check = 0;
	for (;;) {
		struct pollfd pfd[MAX_CONNS + 2];
		pfd[0].fd = sfd;
		pfd[0].events = POLLIN;
		pfd[1].fd = listen_fd;
		pfd[1].events = nconns < MAX_CONNS ? POLLIN : 0;
		for (int i = 0; i < nconns; i++) {
			pfd[2 + i].fd = conns[i];
			pfd[2 + i].events = POLLIN;
		}
		int rc = poll(pfd, (nfds_t)(2 + nconns), 1000);
		if (rc < 0 && errno != EINTR)
			die(errno, "poll");
		long long now = monotonic_ms();
		if (now >= next_check) {
			next_check = now + 1000;
			long long kill_at = 0;
			int e = read_expiry(dir_fd, o->backstop_ms, &kill_at);
			if (e == 1 || (e == 0 && realtime_ms() > kill_at)) {
				say("machine-local init: %s; stopping the guest",
				    e == 1 ? "the lease folder is gone"
				           : "the lease expired and its grace ran out");
				kill(-1, SIGKILL);
				_exit(0);
			}
		}
		if (rc <= 0)
			continue;
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
				if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT ||
				    si.ssi_signo == SIGHUP) {
					say("machine-local init: signal %u; stopping the guest",
					    si.ssi_signo);
					kill(-1, SIGKILL);
					_exit(0);
				}
			}
			reap_all();
			dispatch_exits();
		}
		for (int i = 0; i < nconns; i++) {
			short re = pfd[2 + i].revents;
			if (!re)
				continue;
			int fd = conns[i];
			int closed = 0;
			if (re & POLLIN) {
				struct iovec iov = {buf, LP_MAX_PACKET};
				char cbuf[CMSG_SPACE(sizeof(int) * 4)];
				struct msghdr mh;
				memset(&mh, 0, sizeof mh);
				mh.msg_iov = &iov;
				mh.msg_iovlen = 1;
				mh.msg_control = cbuf;
				mh.msg_controllen = sizeof cbuf;
				ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
				int fds[4];
				int nfds = 0;
				for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
					if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
						int cnt = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
						for (int k = 0; k < cnt && nfds < 4; k++)
							memcpy(&fds[nfds++], CMSG_DATA(c) + k * sizeof(int),
							       sizeof(int));
					}
				}
				if (n > 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
					handle_request(fd, buf, (size_t)n, fds, nfds);
				else {
					for (int k = 0; k < nfds; k++)
						close(fds[k]);
					if (n > 0)
						send_packet(fd, LP_R_ERROR, 0, EMSGSIZE, "request too large");
					else if (n == 0 || (errno != EAGAIN && errno != EINTR))
						closed = 1;
				}
			} else if (re & (POLLHUP | POLLERR | POLLNVAL))
				closed = 1;
			if (closed) {
				for (int k = 0; k < g_tracked_count; k++)
					if (g_tracked[k].conn_fd == fd)
						g_tracked[k].conn_fd = -1;
				close(fd);
				conns[i] = conns[--nconns];
				pfd[2 + i] = pfd[2 + nconns];
				i--;
			}
		}
		if (pfd[1].revents & POLLIN) {
			for (;;) {
				int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
				if (c < 0)
					break;
				if (nconns >= MAX_CONNS) {
					close(c);
					break;
				}
				conns[nconns++] = c;
			}
		}
		reap_all();
		dispatch_exits();
	}
}

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
	syscall(SYS_close_range, o->hold_fd >= 0 ? 5u : 4u, ~0u, 0u);
	for (int i = 0; i < o->cgroup_count; i++) {
		char path[PATH_MAX];
		join_path(path, sizeof path, o->cgroups[i], "cgroup.procs");
		if (write_text(path, "0\n") != 0)
			die(errno, "cannot join the guest cgroup %s", o->cgroups[i]);
	}
	if (o->rootless) {
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
	for (;;) {
		char msg[16];
		ssize_t n = read(up[0], msg, sizeof msg);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (strncmp(msg, "userns", 6) == 0) {
			const char *map = o->id_map;
			int ok =
			    write_map(child, "uid_map", map) == 0 && write_map(child, "gid_map", map) == 0;
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
	o.backstop_ms = 60000;
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
		else
			usage();
	}
	if (!o.lease_dir || !o.lower || !o.hostname || o.lease_dir[0] != '/' || o.lower[0] != '/')
		usage();
	launch(&o);
}
