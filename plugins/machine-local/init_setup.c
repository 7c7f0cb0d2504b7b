/*
 * init_setup.c — the guest init's setup: the overlay root with its /proc, /dev,
 * /sys, /run and masks, and the network (loopback and reject routes).
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

void setup_root(const launch_options *o, const char *merged)
{
	char upper[PATH_MAX], work[PATH_MAX], data[3 * PATH_MAX + 64], path[PATH_MAX];
	join_path(upper, sizeof upper, o->lease_dir, "upper");
	join_path(work, sizeof work, o->lease_dir, "work");

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		die(errno, "cannot make the guest's mounts private");
	if (o->compose_root) {
		compose_root(o->lease_dir, merged);
		goto mounted;
	}
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
mounted:
	if (o->guest_home) {
		/* The relay user cannot give a file to a subordinate id; root of
		 * the namespace can. */
		join_path(path, sizeof path, merged, o->guest_home);
		if (chown(path, o->guest_uid, o->guest_gid) != 0)
			die(errno, "cannot give %s to the guest user", o->guest_home);
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

void setup_network(const launch_options *o)
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
	if (o->egress)
		egress_prepare();
}
