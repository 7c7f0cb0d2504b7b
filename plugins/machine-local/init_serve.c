/*
 * init_serve.c — the guest init's control server (local_proto.h): it starts
 * commands with the guest's bounds, reaps every orphan, kills process groups
 * on request, reports exits, and stops the guest when its lease folder is
 * gone or the lease expired past its grace and backstop.
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
#include "relay_support/fds.h"
#include "relay_support/numfile.h"

#include "init.h"

init_bounds g_bounds;

extern char **environ;

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

/* One reply packet, with `nfds` descriptors (SCM_RIGHTS) when nfds > 0. */
static int send_packet_fds(int fd, uint32_t op, uint32_t a, int32_t c, const char *text, const int *fds,
                           int nfds)
{
	size_t tlen = text ? strlen(text) + 1 : 0;
	/* All 32-bit members: no padding for the designated initialiser to leave unset. */
	const lp_header h = {
	    .magic = LP_MAGIC, .op = op, .a = a, .c = c, .nstr = text ? 1 : 0, .len = (uint32_t)tlen};
	char buf[sizeof h + 512];
	if (tlen > 512)
		tlen = 512;
	memcpy(buf, &h, sizeof h);
	if (tlen) {
		memcpy(buf + sizeof h, text, tlen);
		buf[sizeof h + tlen - 1] = '\0';
	}
	return rs_send_fds(fd, buf, sizeof h + tlen, fds, nfds, MSG_DONTWAIT);
}

static int send_packet(int fd, uint32_t op, uint32_t a, int32_t c, const char *text)
{
	return send_packet_fds(fd, op, a, c, text, NULL, 0);
}

/* EGRESS: the egress proxy's sockets, made now, passed on and not kept. */
static void handle_egress(int conn, const launch_options *o)
{
	if (!o->egress) {
		send_packet(conn, LP_R_ERROR, 0, EPERM,
		            "this guest was not made for egress (its network is not allow or internet)");
		return;
	}
	int fds[3];
	char why[200];
	int e = egress_sockets(fds, why, sizeof why);
	if (e != 0) {
		send_packet(conn, LP_R_FAILED, 0, e, why);
		return;
	}
	if (send_packet_fds(conn, LP_R_FDS, 3, 0, NULL, fds, 3) != 0)
		say("machine-local init: cannot pass the egress sockets: %s", strerror(errno));
	for (int i = 0; i < 3; i++)
		close(fds[i]);
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

static void handle_request(const launch_options *o, int conn, char *buf, size_t n, const int *fds, int nfds)
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
	case LP_EGRESS: handle_egress(conn, o); return;
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
		/* Both files are only ever replaced by a rename, never missing
		 * while the lease lives: gone together, the folder is being
		 * deleted (without root a plain rm -r leaves the upper layer's
		 * files of subordinate ids behind, and the folder with them). */
		if (errno == ENOENT && fstatat(dir_fd, "lease.json", &st, AT_SYMLINK_NOFOLLOW) != 0 &&
		    errno == ENOENT)
			return 1;
		return -1;
	}
	long long v[2]; /* expires, grace */
	int rc = rs_read_numbers(fd, v, 2);
	close(fd);
	if (rc == 0)
		*kill_at_ms = v[0] + v[1] + backstop_ms;
	return rc;
}

void serve(const launch_options *o, int listen_fd, int dir_fd)
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
				int fds[4], nfds = 0, truncated = 0;
				ssize_t n = rs_recv_fds(fd, buf, LP_MAX_PACKET, MSG_DONTWAIT, fds, 4, &nfds,
				                        &truncated);
				if (n > 0 && !truncated)
					handle_request(o, fd, buf, (size_t)n, fds, nfds);
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
