/*
 * net.c — a guest's network: the user-mode helper that gives it outbound
 * access (slirp4netns, else pasta), the reject routes that keep it away
 * from the host and private ranges, and sockets or programs placed in its
 * network namespace from the host side.
 *
 * Both helpers give the guest the same picture: tap0 = 10.0.2.100/24,
 * gateway 10.0.2.2 (which never leads to the host: slirp4netns
 * --disable-host-loopback, pasta --no-map-gw), DNS at 10.0.2.3 forwarded to
 * the host's resolver, IPv4 only.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local.h"

#include "relay_kit/netns.h"

extern char **environ;

size_t net_reject_list(char out[][24], size_t max)
{
	static const char *const fixed[] = {
	    "0.0.0.0/8",    "10.0.0.0/8",     "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12",
	    "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4",    "240.0.0.0/4"};
	size_t n = 0;
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < max; i++)
		snprintf(out[n++], 24, "%s", fixed[i]);
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) != 0)
		return n;
	for (struct ifaddrs *p = ifa; p && n + 2 <= max; p = p->ifa_next) {
		if (p->ifa_addr == NULL || p->ifa_addr->sa_family != AF_INET)
			continue;
		uint32_t addr = ntohl(((struct sockaddr_in *)p->ifa_addr)->sin_addr.s_addr);
		if ((addr >> 24) == 127)
			continue;
		uint32_t mask =
		    p->ifa_netmask ? ntohl(((struct sockaddr_in *)p->ifa_netmask)->sin_addr.s_addr) : 0;
		int bits = 0;
		while (bits < 32 && (mask & (0x80000000u >> bits)))
			bits++;
		char text[INET_ADDRSTRLEN];
		struct in_addr a = {htonl(addr)};
		inet_ntop(AF_INET, &a, text, sizeof text);
		snprintf(out[n++], 24, "%s/32", text);
		if (bits >= 8 && bits < 32) {
			struct in_addr net = {htonl(addr & mask)};
			inet_ntop(AF_INET, &net, text, sizeof text);
			snprintf(out[n++], 24, "%s/%d", text, bits);
		}
	}
	freeifaddrs(ifa);
	return n;
}

static int open_log(const char *lease_dir, const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", lease_dir, name);
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
}

static void log_tail(const char *lease_dir, const char *name, char *out, size_t size)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", lease_dir, name);
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > (off_t)size - 1 ? end - (off_t)size + 1 : 0;
	ssize_t n = pread(fd, out, size - 1, from);
	close(fd);
	if (n <= 0)
		return;
	out[n] = '\0';
	for (char *p = out; *p; p++)
		if (*p == '\n' || *p == '\r' || *p == '\t')
			*p = ' ';
}

static pid_t spawn_helper(const char *const *argv, int log_fd, const int *keep, const int *as, int nkeep,
                          int *err_no)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	lu_spawn_detached_init(&fa, &attr, log_fd);
	int lowest_free = 3;
	for (int i = 0; i < nkeep; i++) {
		posix_spawn_file_actions_adddup2(&fa, keep[i], as[i]);
		if (as[i] + 1 > lowest_free)
			lowest_free = as[i] + 1;
	}
	/* The helper gets nothing else of the relay. */
	posix_spawn_file_actions_addclosefrom_np(&fa, lowest_free);
	pid_t pid = -1;
	int rc = posix_spawn(&pid, argv[0], &fa, &attr, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc != 0) {
		*err_no = rc;
		return -1;
	}
	return pid;
}

static relay_status start_slirp(local_state *st, pid_t init_pid, const char *lease_dir, int exit_fd,
                                pid_t *helper_pid_out, relay_error *err)
{
	relay_status status = RELAY_OK;
	int ready[2] = {-1, -1};
	int hi_exit = -1, hi_ready = -1, log_fd = -1;
	if (pipe2(ready, O_CLOEXEC) != 0)
		return lu_err(st, err, RELAY_E_IO, errno, "cannot create a pipe for slirp4netns");
	hi_exit = fcntl(exit_fd, F_DUPFD_CLOEXEC, 100);
	hi_ready = fcntl(ready[1], F_DUPFD_CLOEXEC, 100);
	log_fd = open_log(lease_dir, "network.log");
	if (hi_exit < 0 || hi_ready < 0 || log_fd < 0) {
		status = lu_err(st, err, RELAY_E_IO, errno, "cannot prepare the descriptors of slirp4netns");
		goto cleanup;
	}
	/* Path mode: slirp4netns joins only the network namespace (pid mode
	 * would also join the init's user namespace, where it has no power
	 * over a network namespace owned by the host's). */
	char pid_text[64], userns[96];
	snprintf(pid_text, sizeof pid_text, "/proc/%d/ns/net", (int)init_pid);
	/* Without root the namespace belongs to the guest's user namespace,
	 * which slirp4netns joins too (the launcher holds the init there until
	 * the helper is ready, launch.c). */
	snprintf(userns, sizeof userns, "--userns-path=/proc/%d/ns/user", (int)init_pid);
	const char *argv[16];
	size_t ac = 0;
	argv[ac++] = st->helper_path;
	argv[ac++] = "--configure";
	argv[ac++] = "--mtu=65520";
	argv[ac++] = "--disable-host-loopback";
	if (st->rootless) {
		/* slirp4netns 1.2 cannot build its sandbox in a user namespace it
		 * joins by path ("setegid(0) parent failed"): without root it
		 * runs unsandboxed, which is why auto prefers pasta then
		 * (plugin.c). */
		argv[ac++] = userns;
	} else {
		argv[ac++] = "--enable-sandbox";
		argv[ac++] = "--enable-seccomp";
	}
	argv[ac++] = "--exit-fd=3";
	argv[ac++] = "--ready-fd=4";
	argv[ac++] = "--netns-type=path";
	argv[ac++] = pid_text;
	argv[ac++] = "tap0";
	argv[ac] = NULL;
	int keep[2] = {hi_exit, hi_ready}, as[2] = {3, 4};
	int e = 0;
	pid_t pid = spawn_helper(argv, log_fd, keep, as, 2, &e);
	if (pid < 0) {
		status = lu_err(st, err, RELAY_E_IO, e, "cannot start %s", st->helper_path);
		goto cleanup;
	}
	*helper_pid_out = pid;
	close(ready[1]);
	ready[1] = -1;
	close(hi_ready);
	hi_ready = -1;
	struct pollfd pfd = {ready[0], POLLIN, 0};
	int64_t until = lu_monotonic_ms() + 10000;
	char c = 0;
	for (;;) {
		int left = (int)(until - lu_monotonic_ms());
		if (left <= 0) {
			status = lu_err(st, err, RELAY_E_TIMEOUT, 0,
			                "slirp4netns did not configure the guest network within 10 s");
			goto cleanup;
		}
		int rc = poll(&pfd, 1, left);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc > 0) {
			ssize_t n = read(ready[0], &c, 1);
			if (n == 1)
				break;
			char tail[200];
			log_tail(lease_dir, "network.log", tail, sizeof tail);
			status = lu_err(st, err, RELAY_E_IO, 0,
			                "slirp4netns exited before the network was ready: %s",
			                tail[0] ? tail : "no output");
			goto cleanup;
		}
	}
cleanup:
	if (ready[0] >= 0)
		close(ready[0]);
	if (ready[1] >= 0)
		close(ready[1]);
	if (hi_exit >= 0)
		close(hi_exit);
	if (hi_ready >= 0)
		close(hi_ready);
	if (log_fd >= 0)
		close(log_fd);
	return status;
}

/* Opens /proc/<pid>/ns/<name> at a descriptor of 100 or more: >= 0, or -1. */
static int open_ns_high(pid_t pid, const char *name)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int hi = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 100) : -1;
	if (fd >= 0)
		close(fd);
	return hi;
}

static relay_status start_pasta(local_state *st, pid_t init_pid, pid_t launcher_pid, const char *lease_dir,
                                int exit_fd, pid_t *helper_pid_out, relay_error *err)
{
	relay_status status = RELAY_OK;
	int log_fd = -1, user_fd = -1, hi_exit = -1, report[2] = {-1, -1}, hi_report = -1, lock_fd = -1;
	/* pasta drops its privileges before it opens a namespace path, so it
	 * gets the namespaces as inherited descriptors (fd 5 the network, fd 6
	 * the user namespace), and keeps the relay's uid (--runas 0) so it may
	 * join a network namespace the host owns. Without root both come from
	 * the launcher, which stays in the guest's outer user namespace until
	 * pasta is done (the gate, launch.c): the init itself moves on into a
	 * nested user namespace of its own, and pasta opening the init's
	 * namespace by path lost that race under load ("Couldn't switch to
	 * pasta namespaces"). */
	pid_t ns_pid = st->rootless && launcher_pid > 0 ? launcher_pid : init_pid;
	int net_fd = open_ns_high(ns_pid, "net");
	if (net_fd < 0)
		return lu_err(st, err, RELAY_E_IO, errno,
		              "cannot open the guest's network namespace (/proc/%d/ns/net)", (int)ns_pid);
	if (st->rootless && (user_fd = open_ns_high(ns_pid, "user")) < 0) {
		status = lu_err(st, err, RELAY_E_IO, errno,
		                "cannot open the guest's user namespace (/proc/%d/ns/user)", (int)ns_pid);
		goto cleanup;
	}
	/* Held from here by the keeper and pasta as long as either lives:
	 * destroy.c waits for it to be free. */
	char lock_path[PATH_MAX];
	lu_textf(lock_path, sizeof lock_path, "%s/helper.lock", lease_dir);
	int lock_low = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	lock_fd = lock_low >= 0 ? fcntl(lock_low, F_DUPFD_CLOEXEC, 100) : -1;
	if (lock_low >= 0)
		close(lock_low);
	log_fd = open_log(lease_dir, "network.log");
	hi_exit = fcntl(exit_fd, F_DUPFD_CLOEXEC, 100);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0 || log_fd < 0 || hi_exit < 0 ||
	    pipe2(report, O_CLOEXEC) != 0 || (hi_report = fcntl(report[1], F_DUPFD_CLOEXEC, 100)) < 0) {
		status = lu_err(st, err, RELAY_E_IO, errno, "cannot prepare the descriptors of pasta in %s",
		                lease_dir);
		goto cleanup;
	}
	char pidfile[PATH_MAX], logfile[PATH_MAX];
	lu_textf(pidfile, sizeof pidfile, "%s/pasta.pid", lease_dir);
	lu_textf(logfile, sizeof logfile, "%s/network.log", lease_dir);
	/* pasta runs under its keeper (init_keep.c), which ends it once the
	 * guest's init has exited: pasta holds the namespace by descriptor and
	 * would never see the guest go. */
	const char *argv[] = {"/proc/self/fd/9",
	                      "keep-helper",
	                      pidfile,
	                      st->helper_path,
	                      "--runas",
	                      "0",
	                      "--config-net",
	                      "--quiet",
	                      "-4",
	                      "--no-map-gw",
	                      "-I",
	                      "tap0",
	                      "-a",
	                      "10.0.2.100",
	                      "-n",
	                      "24",
	                      "-g",
	                      "10.0.2.2",
	                      "--dns-forward",
	                      "10.0.2.3",
	                      "-t",
	                      "none",
	                      "-u",
	                      "none",
	                      "-T",
	                      "none",
	                      "-U",
	                      "none",
	                      "--pid",
	                      pidfile,
	                      "--log-file",
	                      logfile,
	                      "--netns",
	                      "/proc/self/fd/5",
	                      NULL};
	if (st->rootless) {
		/* Without root there is no uid to change to. */
		argv[4] = "--userns";
		argv[5] = "/proc/self/fd/6";
	}
	int keep[6] = {hi_exit, hi_report, net_fd, lock_fd, st->init_memfd, user_fd},
	    as[6] = {3, 4, 5, 7, 9, 6};
	int e = 0;
	pid_t pid = spawn_helper(argv, log_fd, keep, as, st->rootless ? 6 : 5, &e);
	close(hi_report);
	hi_report = -1;
	close(report[1]);
	report[1] = -1;
	if (pid < 0) {
		status = lu_err(st, err, RELAY_E_IO, e, "cannot start %s", st->helper_path);
		goto cleanup;
	}
	/* The keeper's first process forks the keeper and exits at once. */
	int wst = 0;
	waitpid(pid, &wst, 0);
	char line[256];
	if (lu_read_line_until(report[0], line, sizeof line, lu_monotonic_ms() + 15000) != 0) {
		status =
		    lu_err(st, err, errno == ETIMEDOUT ? RELAY_E_TIMEOUT : RELAY_E_IO, 0, "pasta's keeper %s",
		           errno == ETIMEDOUT ? "did not answer within 15 s" : "exited without an answer");
		goto cleanup;
	}
	if (strncmp(line, "pid ", 4) == 0 && atoi(line + 4) > 0) {
		*helper_pid_out = (pid_t)atoi(line + 4);
		goto cleanup;
	}
	char tail[200];
	log_tail(lease_dir, "network.log", tail, sizeof tail);
	if (strncmp(line, "exit ", 5) == 0)
		status = lu_err(st, err, RELAY_E_IO, 0,
		                "pasta failed to configure the guest network (exit %s): %s", line + 5,
		                tail[0] ? tail : "no output");
	else {
		int keeper_errno = strncmp(line, "error ", 6) == 0 ? atoi(line + 6) : 0;
		const char *what =
		    keeper_errno > 0 && strchr(line + 6, ' ') ? strchr(line + 6, ' ') + 1 : line;
		status =
		    lu_err(st, err, keeper_errno == ETIMEDOUT ? RELAY_E_TIMEOUT : RELAY_E_IO, keeper_errno,
		           "pasta did not start: %s (log: %s)", what, tail[0] ? tail : "no output");
	}
cleanup:
	close(net_fd);
	if (user_fd >= 0)
		close(user_fd);
	if (lock_fd >= 0)
		close(lock_fd);
	if (hi_exit >= 0)
		close(hi_exit);
	if (hi_report >= 0)
		close(hi_report);
	if (report[0] >= 0)
		close(report[0]);
	if (report[1] >= 0)
		close(report[1]);
	if (log_fd >= 0)
		close(log_fd);
	return status;
}

relay_status net_start_helper(local_state *st, pid_t init_pid, pid_t launcher_pid, const char *lease_dir,
                              int exit_fd, pid_t *helper_pid_out, relay_error *err)
{
	*helper_pid_out = 0;
	if (st->helper_path == NULL)
		return RELAY_OK;
	if (strcmp(st->helper_name, "slirp4netns") == 0)
		return start_slirp(st, init_pid, lease_dir, exit_fd, helper_pid_out, err);
	return start_pasta(st, init_pid, launcher_pid, lease_dir, exit_fd, helper_pid_out, err);
}

/* ---- work inside a guest's network namespace --------------------------------- */

int net_socket_in(pid_t init_pid, int domain, int type, int *err_no)
{
	int fd = rk_netns_socket(init_pid, domain, type, err_no);
	if (fd < 0 && *err_no == EPERM && geteuid() != 0)
		fd = net_socket_in_userns(init_pid, domain, type, err_no); /* userns.c */
	return fd;
}

pid_t net_spawn_in(pid_t init_pid, const char *const *argv, const char *const *envp, int log_fd, int *err_no)
{
	pid_t pid = rk_netns_spawn(init_pid, argv, envp, log_fd, err_no);
	if (pid < 0 && *err_no == EPERM && geteuid() != 0)
		pid = net_spawn_in_userns(init_pid, argv, envp, log_fd, err_no); /* userns.c */
	return pid;
}
