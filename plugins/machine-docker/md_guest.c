/*
 * md_guest.c — the small static program machine-docker puts into every
 * container as /.mcp-relay/init before starting it. The image needs no
 * shell tool of its own for what the relay must control; this program is
 * three commands in one:
 *
 *   init [EXPIRES_MS GRACE_MS BACKSTOP_MS]
 *           the container's entry (PID 1): reaps orphans, and is the
 *           backstop of the lease: it starts with the expiry of its
 *           arguments (the lease's at create), and every second reads
 *           /.mcp-relay/expires ("<expiresAtMs> <graceMs> <backstopMs>",
 *           written by the relay at every renewal) when it is there; it
 *           exits once the wall clock passes their sum, which stops the
 *           container and every process in it. SIGTERM ends it at once.
 *   exec PIDFILE ARGV...
 *           runs ARGV in a new session (its own process group), writes the
 *           group's id to PIDFILE first, waits for it and exits with its
 *           status (128 + signal when it was killed). Standard input is
 *           inherited; standard output and error are forwarded through
 *           pipes until the command ends, then for at most 250 ms, and what
 *           the command left running keeps writing into a drainer that
 *           discards it: the step ends with its main process, and what it
 *           started is never blocked or killed by SIGPIPE (spec/guest.md §16.1).
 *   kill PIDFILE
 *           SIGKILLs the process group named in PIDFILE and waits up to 5 s
 *           for it to be gone: exit 0 when gone, 1 when not, 2 when
 *           PIDFILE is unreadable.
 *   wait PATH MS
 *           waits up to MS milliseconds for PATH to exist: exit 0 when it
 *           does, 1 when not (the relay waits for Xvfb's socket with it).
 *
 * Every mode first sets no_new_privs for itself and all it starts.
 * Static, C99 + POSIX (and Linux's prctl), no allocation.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "relay_support/numfile.h"

#define EXPIRES_PATH "/.mcp-relay/expires"

static volatile sig_atomic_t g_stop;

static void on_term(int sig)
{
	(void)sig;
	g_stop = 1;
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* 0 and the time after which the backstop acts, or -1 when unreadable. */
static int read_expiry(long long *stop_at_ms)
{
	int fd = open(EXPIRES_PATH, O_RDONLY | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	long long v[3]; /* expires, grace, backstop */
	int rc = rs_read_numbers(fd, v, 3);
	close(fd);
	if (rc == 0)
		*stop_at_ms = v[0] + v[1] + v[2];
	return rc;
}

static int run_init(int argc, char **argv)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	long long stop_at = 0;
	int known = read_expiry(&stop_at) == 0;
	if (!known && argc == 5) {
		char *end1 = NULL, *end2 = NULL, *end3 = NULL;
		long long expires = strtoll(argv[2], &end1, 10);
		long long grace = strtoll(argv[3], &end2, 10);
		long long backstop = strtoll(argv[4], &end3, 10);
		if (*end1 == '\0' && *end2 == '\0' && *end3 == '\0' && expires > 0) {
			stop_at = expires + grace + backstop;
			known = 1;
		}
	}
	while (!g_stop) {
		while (waitpid(-1, NULL, WNOHANG) > 0) {
		}
		long long t = 0;
		if (read_expiry(&t) == 0) {
			stop_at = t;
			known = 1;
		}
		/* An unreadable file keeps the last deadline read; one never read
		 * keeps the guest until the relay writes it. */
		if (known && now_ms() > stop_at) {
			fprintf(stderr,
			        "mcp-relay init: the lease expired and no relay renewed it; stopping\n");
			return 0;
		}
		sleep_ms(1000);
	}
	return 0;
}

static int write_pid(const char *path, pid_t pid)
{
	char text[32];
	int n = snprintf(text, sizeof text, "%d\n", (int)pid);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, text, (size_t)n);
	close(fd);
	return w == n ? 0 : -1;
}

/* Copies what is readable on `from` to `to`; 0 at end of file or error. */
static int pump(int from, int to)
{
	char buf[65536];
	ssize_t n = read(from, buf, sizeof buf);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 1;
	if (n <= 0)
		return 0;
	for (ssize_t off = 0; to >= 0 && off < n;) {
		ssize_t w = write(to, buf + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* the reader left: what follows is dropped */
		off += w;
	}
	return 1;
}

/* Keeps reading what survivors of a step write, so they never block on a
 * full pipe or die of SIGPIPE (spec/guest.md §16.1), until they close it. */
static void leave_drainer(int out_fd, int err_fd)
{
	pid_t pid = fork();
	if (pid != 0)
		return;
	if (fork() != 0)
		_exit(0); /* reparented to the container's init */
	setsid();
	/* Not the exec's own streams: those end with the step. */
	int null_fd = open("/dev/null", O_RDWR);
	for (int fd = 0; null_fd >= 0 && fd < 3; fd++)
		dup2(null_fd, fd);
	if (null_fd > 2)
		close(null_fd);
	int open_fds[2] = {out_fd, err_fd};
	while (open_fds[0] >= 0 || open_fds[1] >= 0) {
		struct pollfd p[2];
		int n = 0;
		for (int i = 0; i < 2; i++)
			if (open_fds[i] >= 0)
				p[n++] = (struct pollfd){.fd = open_fds[i], .events = POLLIN};
		if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (!pump(p[i].fd, -1)) {
				close(p[i].fd);
				for (int k = 0; k < 2; k++)
					if (open_fds[k] == p[i].fd)
						open_fds[k] = -1;
			}
		}
	}
	_exit(0);
}

static int run_exec(const char *pidfile, char **argv)
{
	/* session_pipe: closed by the child once it leads its own session, so the
	 * group id is written only when a kill of that group reaches it. */
	int sync_pipe[2], session_pipe[2], out_pipe[2], err_pipe[2];
	if (pipe(sync_pipe) != 0 || pipe(session_pipe) != 0 || pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
		perror("mcp-relay exec: pipe");
		return 126;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("mcp-relay exec: fork");
		return 126;
	}
	if (pid == 0) {
		close(sync_pipe[1]);
		close(session_pipe[0]);
		close(out_pipe[0]);
		close(err_pipe[0]);
		dup2(out_pipe[1], 1);
		dup2(err_pipe[1], 2);
		close(out_pipe[1]);
		close(err_pipe[1]);
		setsid();
		close(session_pipe[1]);
		char go;
		/* Wait until the parent has written the group id. */
		while (read(sync_pipe[0], &go, 1) < 0 && errno == EINTR) {
		}
		close(sync_pipe[0]);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		int e = errno;
		fprintf(stderr, "mcp-relay exec: cannot run %s: %s\n", argv[0], strerror(e));
		_exit(e == ENOENT ? 127 : 126);
	}
	close(sync_pipe[0]);
	close(session_pipe[1]);
	close(out_pipe[1]);
	close(err_pipe[1]);
	char none;
	while (read(session_pipe[0], &none, 1) < 0 && errno == EINTR) {
	}
	close(session_pipe[0]);
	int wrote = write_pid(pidfile, pid);
	ssize_t ignored = write(sync_pipe[1], "g", 1);
	(void)ignored;
	close(sync_pipe[1]);
	if (wrote != 0)
		fprintf(stderr, "mcp-relay exec: cannot write %s: %s\n", pidfile, strerror(errno));
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	/* Forward the command's output until it ends; then at most 250 ms more
	 * of what is still coming (spec/guest.md §16.1), and a drainer for the rest. */
	int fds[2] = {out_pipe[0], err_pipe[0]};
	int status = 0;
	bool ended = false;
	long long stop_at = 0;
	while (fds[0] >= 0 || fds[1] >= 0) {
		if (!ended) {
			pid_t r = waitpid(pid, &status, WNOHANG);
			if (r == pid || (r < 0 && errno == ECHILD)) {
				ended = true;
				stop_at = now_ms() + 250;
			}
		}
		if (ended && now_ms() >= stop_at)
			break;
		struct pollfd p[2];
		int n = 0;
		for (int i = 0; i < 2; i++)
			if (fds[i] >= 0)
				p[n++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
		int timeout = ended ? (int)(stop_at - now_ms() > 0 ? stop_at - now_ms() : 0) : 50;
		if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			int to = p[i].fd == out_pipe[0] ? 1 : 2;
			if (!pump(p[i].fd, to)) {
				close(p[i].fd);
				for (int k = 0; k < 2; k++)
					if (fds[k] == p[i].fd)
						fds[k] = -1;
			}
		}
	}
	if (fds[0] >= 0 || fds[1] >= 0) {
		leave_drainer(fds[0], fds[1]);
		if (fds[0] >= 0)
			close(fds[0]);
		if (fds[1] >= 0)
			close(fds[1]);
	}
	while (!ended) {
		if (waitpid(pid, &status, 0) == pid || errno != EINTR)
			ended = true;
	}
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
	unlink(pidfile);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 126;
}

static int run_kill(const char *pidfile)
{
	char buf[32];
	int fd = open(pidfile, O_RDONLY | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 0 : 2; /* the exec already ended and removed it */
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 2;
	buf[n] = '\0';
	long pgid = strtol(buf, NULL, 10);
	if (pgid <= 1)
		return 2;
	kill(-(pid_t)pgid, SIGKILL);
	for (int i = 0; i < 500; i++) {
		if (kill(-(pid_t)pgid, 0) != 0 && errno == ESRCH)
			return 0;
		sleep_ms(10);
	}
	return 1;
}

static int run_wait(const char *path, const char *ms_text)
{
	long ms = strtol(ms_text, NULL, 10);
	for (long waited = 0;; waited += 20) {
		struct stat sb;
		if (lstat(path, &sb) == 0)
			return 0;
		if (waited >= ms)
			return 1;
		sleep_ms(20);
	}
}

int main(int argc, char **argv)
{
	/* Whatever the engine was asked (a Swarm service cannot ask for
	 * no-new-privileges), nothing under this program gains privileges
	 * through set-uid files. */
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	if (argc >= 2 && strcmp(argv[1], "init") == 0)
		return run_init(argc, argv);
	if (argc >= 4 && strcmp(argv[1], "exec") == 0)
		return run_exec(argv[2], argv + 3);
	if (argc >= 3 && strcmp(argv[1], "run") == 0) {
		/* argv[2..] with no new privileges and nothing else: the
		 * resident receiver's stream, whose bytes must not be copied. */
		execvp(argv[2], argv + 2);
		fprintf(stderr, "mcp-relay run: cannot run %s: %s\n", argv[2], strerror(errno));
		return errno == ENOENT ? 127 : 126;
	}
	if (argc == 3 && strcmp(argv[1], "kill") == 0)
		return run_kill(argv[2]);
	if (argc == 4 && strcmp(argv[1], "wait") == 0)
		return run_wait(argv[2], argv[3]);
	fprintf(stderr, "usage: init [EXPIRES_MS GRACE_MS BACKSTOP_MS] | exec PIDFILE ARGV... | run ARGV... "
	                "| kill PIDFILE | "
	                "wait PATH MS\n");
	return 2;
}
