/*
 * init_keep.c — `machine-local-init keep-helper PIDFILE PROGRAM ARG...`:
 * starts a network helper that daemonizes (pasta) and keeps it no longer
 * than the guest's init.
 *
 * pasta gets the guest's namespaces as descriptors (net.c), so it holds the
 * network namespace itself and never learns that the init has exited: a
 * guest that dies without a release (an uncertain acquisition, a relay that
 * is gone, a removed state folder) would leave its pasta running for good.
 * slirp4netns has --exit-fd for this; pasta (0.0~git2023) only watches a
 * namespace bound in a folder, which an ordinary user cannot make.
 *
 * The relay starts the keeper before the helper exists, detached (its own
 * session), and the keeper forks once more so that it is not the relay's
 * child; from then on the helper's whole life is the keeper's, so a relay
 * killed at any moment of the start leaves no helper behind. Descriptors:
 *   fd 3     the read end of the init's hold pipe: the init holds the only
 *            write end, so EOF here means the guest's init has exited;
 *   fd 4     the status pipe to the relay: one line, then closed:
 *              "pid <helper pid>"   the helper is configured and running
 *              "exit <status>"      it exited before (its log says why)
 *              "error <errno> <what>"
 *   fd 5, 6  the namespaces the helper joins, passed on to it;
 *   fd 7     <lease>/helper.lock, locked by the relay: the keeper keeps it
 *            and passes it on, so it is free only once neither the keeper
 *            nor any pasta process lives (destroy.c waits for that);
 *   the rest is closed for the helper.
 * PROGRAM's first process must configure, write its daemon's pid to
 * PIDFILE and exit 0 (pasta --pid, without --foreground). The keeper waits
 * KEEP_START_MS for that, then for either the init's EOF or the helper's
 * exit. When the init goes first it sends the helper SIGTERM, then SIGKILL
 * after KEEP_TERM_GRACE_MS.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "init.h"

#include "relay_support/read_small.h"

enum {
	KEEP_HOLD_FD = 3,
	KEEP_STATUS_FD = 4,
	KEEP_NET_NS_FD = 5,
	KEEP_USER_NS_FD = 6,
	KEEP_FIRST_UNPASSED_FD = 9,
	KEEP_START_MS = 10000,
	KEEP_TERM_GRACE_MS = 2000
};

static int pidfd_of(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int send_signal(int pidfd, int sig)
{
	return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (write(KEEP_STATUS_FD, line, (size_t)n) != n) {
		/* The relay is gone: the keeper goes on keeping. */
	}
	close(KEEP_STATUS_FD);
}

/* Waits until `pidfd` is readable (the process exited) or the hold pipe
 * says the init is gone, at most timeout_ms (-1: no bound). Returns 1 when
 * the process exited, 2 when the init is gone, 0 at the timeout. */
static int wait_exit_or_init(int pidfd, long timeout_ms)
{
	long long until = timeout_ms < 0 ? 0 : monotonic_ms() + timeout_ms;
	for (;;) {
		int left = -1;
		if (timeout_ms >= 0) {
			long long rest = until - monotonic_ms();
			if (rest <= 0)
				return 0;
			left = (int)rest;
		}
		struct pollfd pfd[2] = {{pidfd, POLLIN, 0}, {KEEP_HOLD_FD, POLLIN, 0}};
		int rc = poll(pfd, 2, left);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return 2; /* cannot watch: treat as gone rather than keep forever */
		if (pfd[0].revents & POLLNVAL)
			return 2; /* cannot watch: treat as gone rather than keep forever */
		if (pfd[0].revents)
			return 1;
		if (pfd[1].revents) {
			char byte;
			ssize_t n = read(KEEP_HOLD_FD, &byte, 1);
			if (n > 0 || (n < 0 && errno == EINTR))
				continue; /* nobody writes; EOF is the only news */
			return 2;
		}
	}
}

/* Kills and reaps every child of the keeper: as the subreaper it is the
 * parent of a daemon pasta forked, also one forked just before its first
 * process was killed (before its pid reached the pidfile). */
static void end_children(void)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
	for (int round = 0; round < 8; round++) {
		char text[512];
		if (rs_read_small(path, 0, text, sizeof text) <= 0)
			break;
		char *p = text;
		for (;;) {
			char *end = NULL;
			long child = strtol(p, &end, 10);
			if (end == p || child <= 0)
				break;
			kill((pid_t)child, SIGKILL);
			waitpid((pid_t)child, NULL, 0);
			p = end;
		}
	}
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

/* Ends the process of `pidfd`: SIGTERM, then SIGKILL after the grace. */
static void end_process(int pidfd)
{
	if (send_signal(pidfd, SIGTERM) != 0) {
		if (errno != ESRCH)
			say("machine-local keep-helper: cannot signal the network helper: %s",
			    strerror(errno));
		return;
	}
	struct pollfd pfd = {pidfd, POLLIN, 0};
	long long until = monotonic_ms() + KEEP_TERM_GRACE_MS;
	while (monotonic_ms() < until) {
		int rc = poll(&pfd, 1, (int)(until - monotonic_ms()));
		if (rc > 0)
			return;
		if (rc < 0 && errno != EINTR)
			break;
	}
	if (send_signal(pidfd, SIGKILL) != 0 && errno != ESRCH)
		say("machine-local keep-helper: cannot kill the network helper: %s", strerror(errno));
}

static pid_t read_pidfile(const char *path)
{
	char text[32];
	if (rs_read_small(path, O_NOFOLLOW, text, sizeof text) <= 0)
		return 0;
	long pid = strtol(text, NULL, 10);
	return pid > 0 && pid < 0x7fffffff ? (pid_t)pid : 0;
}

/* Starts the helper's first process and waits for it to configure and
 * daemonize. Returns a pidfd of the daemon, or -1 after reporting why. */
static int start_helper(const char *pidfile, char **argv)
{
	pid_t first = fork();
	if (first < 0) {
		report("error %d fork", errno);
		return -1;
	}
	if (first == 0) {
		/* As the relay would start it: pasta (0.0~git2023) takes an
		 * inherited ignored SIGPIPE for a failure to set its handlers. */
		signal(SIGPIPE, SIG_DFL);
		execv(argv[0], argv);
		say("machine-local keep-helper: cannot run %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	int first_fd = pidfd_of(first);
	if (first_fd < 0) {
		report("error %d pidfd_open", errno);
		return -1;
	}
	int why = wait_exit_or_init(first_fd, KEEP_START_MS);
	close(first_fd);
	if (why != 1) {
		kill(first, SIGKILL);
		waitpid(first, NULL, 0);
		end_children();
		report(why == 0 ? "error %d the helper did not configure within 10 s"
		                : "error %d the guest's init exited while its helper started",
		       why == 0 ? ETIMEDOUT : ESRCH);
		return -1;
	}
	int wst = 0;
	if (waitpid(first, &wst, 0) != first || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
		end_children();
		report("exit %d", WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst));
		return -1;
	}
	pid_t daemon_pid = read_pidfile(pidfile);
	int daemon_fd = daemon_pid > 0 ? pidfd_of(daemon_pid) : -1;
	if (daemon_fd < 0) {
		end_children();
		report("error %d the helper wrote no running pid to %s", daemon_pid > 0 ? errno : ENOENT,
		       pidfile);
		return -1;
	}
	report("pid %d", (int)daemon_pid);
	return daemon_fd;
}

int keep_helper(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	/* Not the relay's child for the guest's whole life: the relay reaps
	 * this first process at once, the keeper goes on in the second. */
	pid_t keeper = fork();
	if (keeper < 0) {
		report("error %d fork", errno);
		return 1;
	}
	if (keeper > 0)
		_exit(0);
	/* The daemon pasta forks becomes the keeper's child, not init's. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	fcntl(KEEP_HOLD_FD, F_SETFD, FD_CLOEXEC);
	fcntl(KEEP_STATUS_FD, F_SETFD, FD_CLOEXEC);
	syscall(SYS_close_range, (unsigned)KEEP_FIRST_UNPASSED_FD, ~0u, CLOSE_RANGE_CLOEXEC);
	int first_fd = start_helper(argv[2], argv + 3);
	if (first_fd < 0)
		return 1;
	/* The helper's namespaces are its own now; the lock (fd 7) stays. */
	int helper_fd = fcntl(first_fd, F_DUPFD_CLOEXEC, KEEP_FIRST_UNPASSED_FD);
	close(first_fd);
	if (helper_fd < 0) {
		say("machine-local keep-helper: cannot keep the helper's pidfd: %s", strerror(errno));
		return 1;
	}
	close(KEEP_NET_NS_FD);
	close(KEEP_USER_NS_FD);
	if (wait_exit_or_init(helper_fd, -1) == 2)
		end_process(helper_fd);
	end_children();
	return 0;
}
