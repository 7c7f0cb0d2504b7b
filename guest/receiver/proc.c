/*
 * receiver/proc.c — see proc.h.
 */
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

extern char **environ;

const char *signal_name(int sig, char scratch[16])
{
	switch (sig) {
	case SIGHUP: return "SIGHUP";
	case SIGINT: return "SIGINT";
	case SIGQUIT: return "SIGQUIT";
	case SIGILL: return "SIGILL";
	case SIGTRAP: return "SIGTRAP";
	case SIGABRT: return "SIGABRT";
	case SIGBUS: return "SIGBUS";
	case SIGFPE: return "SIGFPE";
	case SIGKILL: return "SIGKILL";
	case SIGUSR1: return "SIGUSR1";
	case SIGSEGV: return "SIGSEGV";
	case SIGUSR2: return "SIGUSR2";
	case SIGPIPE: return "SIGPIPE";
	case SIGALRM: return "SIGALRM";
	case SIGTERM: return "SIGTERM";
	case SIGCHLD: return "SIGCHLD";
	case SIGCONT: return "SIGCONT";
	case SIGSTOP: return "SIGSTOP";
	case SIGTSTP: return "SIGTSTP";
	case SIGTTIN: return "SIGTTIN";
	case SIGTTOU: return "SIGTTOU";
	case SIGXCPU: return "SIGXCPU";
	case SIGXFSZ: return "SIGXFSZ";
	case SIGSYS: return "SIGSYS";
	default: text_format(scratch, 16, "SIG%d", sig); return scratch;
	}
}

#if defined(__linux__)
/* Reads /proc/<pid>/stat: the command name and the fields after it. */
static int proc_stat_fields_full(pid_t pid, char *state_out, pid_t *ppid_out, pid_t *pgid_out,
                                 unsigned long long *start_out, char *name_out, size_t name_len)
{
	char path[64], text[1024];
	char *p, *open_paren;
	int fd, i;
	ssize_t n;
	text_format(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	text[n] = '\0';
	open_paren = strchr(text, '(');
	p = strrchr(text, ')');
	if (!p || !open_paren || open_paren > p || p[1] != ' ')
		return -1;
	if (name_out && name_len) {
		size_t len = (size_t)(p - open_paren - 1);
		if (len > name_len - 1)
			len = name_len - 1;
		memcpy(name_out, open_paren + 1, len);
		name_out[len] = '\0';
	}
	p += 2;
	if (state_out)
		*state_out = *p;
	for (i = 3; i <= 22; i++) {
		char *end;
		unsigned long long v;
		while (*p == ' ')
			p++;
		if (i == 3) {
			p++;
			continue;
		}
		v = strtoull(p, &end, 10);
		if (end == p && i > 3)
			return -1;
		if (i == 4 && ppid_out)
			*ppid_out = (pid_t)v;
		if (i == 5 && pgid_out)
			*pgid_out = (pid_t)v;
		if (i == 22 && start_out)
			*start_out = v;
		p = end;
	}
	return 0;
}

static int proc_stat_fields(pid_t pid, char *state_out, pid_t *ppid_out, unsigned long long *start_out)
{
	return proc_stat_fields_full(pid, state_out, ppid_out, NULL, start_out, NULL, 0);
}
#endif

int proc_stat_read(pid_t pid, char *state_out, pid_t *ppid_out, pid_t *pgid_out, char *name_out,
                   size_t name_len)
{
#if defined(__linux__)
	return proc_stat_fields_full(pid, state_out, ppid_out, pgid_out, NULL, name_out, name_len);
#else
	(void)pid;
	(void)state_out;
	(void)ppid_out;
	(void)pgid_out;
	(void)name_out;
	(void)name_len;
	return -1;
#endif
}

int pid_alive(pid_t pid)
{
	if (pid <= 0)
		return 0;
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 0;
#if defined(__linux__)
	{
		char state = 0;
		if (proc_stat_fields(pid, &state, NULL, NULL) == 0 && (state == 'Z' || state == 'X'))
			return 0;
	}
#endif
	return 1;
}

int group_alive(pid_t pgid)
{
	if (pgid <= 1)
		return 0;
	return !(kill(-pgid, 0) != 0 && errno == ESRCH);
}

int proc_start_ticks(pid_t pid, unsigned long long *ticks_out)
{
#if defined(__linux__)
	return proc_stat_fields(pid, NULL, NULL, ticks_out);
#else
	(void)pid;
	(void)ticks_out;
	return -1;
#endif
}

void proc_start_time(pid_t pid, char out[32])
{
#if defined(__linux__)
	unsigned long long ticks = 0, btime = 0;
	char text[4096];
	ssize_t n;
	int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	long hz = sysconf(_SC_CLK_TCK);
	if (fd >= 0 && proc_start_ticks(pid, &ticks) == 0 && hz > 0) {
		n = read(fd, text, sizeof(text) - 1);
		if (n > 0) {
			char *p;
			text[n] = '\0';
			p = strstr(text, "\nbtime ");
			if (p) {
				btime = strtoull(p + 7, NULL, 10);
				close(fd);
				timestamp_from_ms((int64_t)btime * 1000 +
				                      (int64_t)(ticks * 1000ull / (unsigned long long)hz),
				                  out);
				return;
			}
		}
	}
	if (fd >= 0)
		close(fd);
#else
	(void)pid;
#endif
	timestamp_now(out);
}

void boot_identity(char out[64])
{
	out[0] = '\0';
#if defined(__linux__)
	{
		int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
		ssize_t n;
		if (fd < 0)
			return;
		n = read(fd, out, 63);
		close(fd);
		if (n <= 0) {
			out[0] = '\0';
			return;
		}
		out[n] = '\0';
		while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
			out[--n] = '\0';
	}
#endif
}

void proc_become_subreaper(void)
{
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
		fprintf(stderr, "receiver: cannot become a child subreaper: %s\n", strerror(errno));
#endif
}

void proc_stop_subreaping(void)
{
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
	prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
#endif
}

pid_t *proc_children(size_t *count_out)
{
	pid_t *out = NULL;
	size_t n = 0, cap = 0;
	*count_out = 0;
#if defined(__linux__)
	{
		DIR *dir = opendir("/proc");
		struct dirent *de;
		pid_t self = getpid();
		if (!dir)
			return NULL;
		while ((de = readdir(dir)) != NULL) {
			char *end;
			long v = strtol(de->d_name, &end, 10);
			pid_t ppid = 0;
			if (*end || v <= 0 || (pid_t)v == self)
				continue;
			if (proc_stat_fields((pid_t)v, NULL, &ppid, NULL) != 0 || ppid != self)
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 16;
				out = xrealloc(out, cap * sizeof(*out));
			}
			out[n++] = (pid_t)v;
		}
		closedir(dir);
	}
#endif
	*count_out = n;
	return out;
}

static int is_executable_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

char *find_program(const char *name)
{
	const char *path_env, *p;
	if (!name || !*name)
		return NULL;
	if (strchr(name, '/'))
		return is_executable_file(name) ? xstrdup(name) : NULL;
	path_env = getenv("PATH");
	if (!path_env)
		path_env = "/usr/local/bin:/usr/bin:/bin";
	p = path_env;
	for (;;) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char *candidate = n ? xasprintf("%.*s/%s", (int)n, p, name) : xasprintf("./%s", name);
		if (is_executable_file(candidate))
			return candidate;
		free(candidate);
		if (!end)
			return NULL;
		p = end + 1;
	}
}

static void set_cloexec(int fd)
{
	int flags = fcntl(fd, F_GETFD);
	if (flags >= 0)
		fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

static void set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static int make_pipe(int fds[2])
{
	if (pipe(fds) != 0)
		return -1;
	set_cloexec(fds[0]);
	set_cloexec(fds[1]);
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* Closes every descriptor from 3 up except `keep`, with Linux's close_range
 * (two calls instead of one close per possible descriptor: the limit here
 * is often 1,048,576, capped at 65,536 by the loop). -1 where the system
 * has no close_range (older kernels, macOS); the caller then loops. */
static int close_fds_from_3_but(int keep)
{
#if defined(__linux__) && defined(SYS_close_range)
	if (keep > 3 && syscall(SYS_close_range, 3u, (unsigned)keep - 1u, 0u) != 0)
		return -1;
	return syscall(SYS_close_range, keep < 3 ? 3u : (unsigned)keep + 1u, ~0u, 0u) == 0 ? 0 : -1;
#else
	(void)keep;
	return -1;
#endif
}

/* The child's side; never returns. */
static void child_exec(const spawn_request *req, int out_w, int err_w, int hs_r, int errpipe_w)
{
	int devnull;
	int code;
	char go = 0;
	long maxfd, fd;
	sigset_t none;
	if (setsid() < 0)
		goto fail;
	devnull = open("/dev/null", O_RDONLY);
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		goto fail;
	if (req->cwd && chdir(req->cwd) != 0)
		goto fail;
	/* Wait until the parent has durably recorded our pid. */
	while (read(hs_r, &go, 1) < 0 && errno == EINTR)
		;
	if (go != 'g')
		_exit(127);
	if (close_fds_from_3_but(errpipe_w) != 0) {
		maxfd = sysconf(_SC_OPEN_MAX);
		if (maxfd < 0 || maxfd > 65536)
			maxfd = 65536;
		for (fd = 3; fd < maxfd; fd++)
			if (fd != errpipe_w)
				close((int)fd);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	execve(req->path, req->argv, req->envp ? req->envp : environ);
fail:
	code = errno;
	{
		ssize_t ignored = write(errpipe_w, &code, sizeof(code));
		(void)ignored;
	}
	_exit(127);
}

/* Reads what is available from *fd into dst within the shared budget.
 * Returns 1 at EOF (fd closed), 0 otherwise. */
static int pump(int *fd, buf *dst, size_t *total, size_t budget, int *truncated)
{
	char chunk[16384];
	for (;;) {
		ssize_t n = read(*fd, chunk, sizeof(chunk));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return 0; /* EAGAIN */
		}
		if (n == 0) {
			close_fd(fd);
			return 1;
		}
		{
			size_t take = (size_t)n;
			if (*total + take > budget) {
				take = budget - *total;
				*truncated = 1;
			}
			buf_append(dst, chunk, take);
			*total += take;
		}
		if (*truncated)
			return 0;
	}
}

static int pid_spared(const spawn_request *req, pid_t pid)
{
	size_t i;
	for (i = 0; i < req->spared_count; i++)
		if (req->spared[i] == pid)
			return 1;
	return 0;
}

/* Polls the open read ends (-1 skipped) for up to wait_ms; 0 when both are
 * closed (nothing was polled). */
static int wait_readable(int out_fd, int err_fd, int wait_ms)
{
	struct pollfd pf[2];
	int nfds = 0;
	if (out_fd >= 0) {
		pf[nfds].fd = out_fd;
		pf[nfds].events = POLLIN;
		nfds++;
	}
	if (err_fd >= 0) {
		pf[nfds].fd = err_fd;
		pf[nfds].events = POLLIN;
		nfds++;
	}
	if (nfds)
		poll(pf, (nfds_t)nfds, wait_ms);
	return nfds;
}

/* Reads what both pipes hold within the shared budget. */
static void pump_both(int out_p[2], int err_p[2], size_t *total, size_t budget, spawn_result *res)
{
	if (out_p[0] >= 0)
		pump(&out_p[0], &res->out, total, budget, &res->output_truncated);
	if (err_p[0] >= 0)
		pump(&err_p[0], &res->err, total, budget, &res->output_truncated);
}

#if defined(__linux__)
/* SIGKILLs every process whose parent is this process (proc_children), except
 * the spared ones (what an earlier script left running). Returns the number
 * found. */
static int kill_adopted_children(const spawn_request *req)
{
	size_t n = 0, i;
	pid_t *kids = proc_children(&n);
	int found = 0;
	for (i = 0; i < n; i++)
		if (!pid_spared(req, kids[i])) {
			kill(kids[i], SIGKILL);
			found++;
		}
	free(kids);
	return found;
}
#endif

/* 1 when every live child of this process is a spared one. */
static int only_spared_left(const spawn_request *req)
{
	size_t n = 0, i;
	pid_t *kids = proc_children(&n);
	int only = 1;
	for (i = 0; i < n; i++)
		if (!pid_spared(req, kids[i]) && pid_alive(kids[i]))
			only = 0;
	free(kids);
	return only;
}

/* Reaps children without blocking; records main_pid's status. Returns 1
 * when no child but the spared ones is left. */
static int reap_all(const spawn_request *req, pid_t main_pid, spawn_result *res)
{
	for (;;) {
		int status;
		pid_t w = waitpid(-1, &status, WNOHANG);
		if (w == 0)
			return req->spared_count ? only_spared_left(req) : 0;
		if (w < 0)
			return errno == ECHILD;
		if (w == main_pid && !res->exited) {
			res->exited = 1;
			if (WIFEXITED(status)) {
				res->exit_code = WEXITSTATUS(status);
				res->signal_no = 0;
			} else if (WIFSIGNALED(status)) {
				res->signal_no = WTERMSIG(status);
			}
		}
	}
}

/* 1 when a child of this process other than the spared ones is alive (an
 * orphan the subreaper adopted). Without spared children one waitpid tells:
 * ECHILD means none at all; no /proc walk is needed then. */
static int has_unspared_children(const spawn_request *req)
{
	int status;
	pid_t w;
	if (req->spared_count == 0) {
		while ((w = waitpid(-1, &status, WNOHANG)) > 0)
			;
		return w == 0;
	}
	return !only_spared_left(req);
}

/* spec/guest.md §16.1: the main process exited on its own. Output is read for
 * at most SURVIVOR_DRAIN_MS more (or to both ends of file); what still holds
 * a pipe keeps it, and its read end goes to the caller. Nothing is killed;
 * the main process is reaped, so termination of the step is confirmed.
 * Returns -1 when that output passed the budget: the output bound then
 * applies as to any step output (the caller kills the group). */
static int leave_running(const spawn_request *req, pid_t pid, int out_p[2], int err_p[2], size_t *total,
                         spawn_result *res)
{
	int64_t until = mono_ms() + SURVIVOR_DRAIN_MS;
	while ((out_p[0] >= 0 || err_p[0] >= 0) && !res->output_truncated) {
		int64_t left = until - mono_ms();
		if (left <= 0)
			break;
		wait_readable(out_p[0], err_p[0], (int)left);
		pump_both(out_p, err_p, total, req->output_budget, res);
	}
	if (res->output_truncated)
		return -1;
	reap_all(req, pid, res);
	res->termination_confirmed = 1;
	res->out_left_fd = out_p[0];
	res->err_left_fd = err_p[0];
	out_p[0] = -1;
	err_p[0] = -1;
	res->left_running =
	    res->out_left_fd >= 0 || res->err_left_fd >= 0 || group_alive(pid) || has_unspared_children(req);
	return 0;
}

/* Lets the child past its handshake and learns whether its exec failed
 * (then res->spawn_failed and spawn_error say so). */
static void release_child(const spawn_request *req, int hs[2], int ep[2], spawn_result *res)
{
	char go = 'g';
	int code = 0;
	ssize_t n;
	ssize_t ignored = write(hs[1], &go, 1);
	(void)ignored;
	close_fd(&hs[1]);
	while ((n = read(ep[0], &code, sizeof(code))) < 0 && errno == EINTR)
		;
	close_fd(&ep[0]);
	if (n > 0) {
		res->spawn_failed = 1;
		text_format(res->spawn_error, sizeof(res->spawn_error), "cannot start %s: %s", req->path,
		            strerror(code));
	}
}

/* Waits up to wait_ms for the child's exit once both its pipes are
 * closed. On Linux a pidfd (opened once, *pidfd) wakes the wait the moment
 * the child ends; a sleep was 1 ms of every run of a script that exits at
 * once (the SIGCHLD of a child that ends during nanosleep does not cut it
 * short). Elsewhere, or without pidfd_open (before Linux 5.3), a sleep
 * backing off from 1 ms to the usual poll interval (*idle_ms). */
static void wait_for_exit(pid_t pid, int *pidfd, int64_t *idle_ms, int wait_ms)
{
#if defined(__linux__) && defined(SYS_pidfd_open)
	if (*pidfd == -1) {
		*pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (*pidfd < 0)
			*pidfd = -2; /* not offered: sleep from now on */
	}
	if (*pidfd >= 0) {
		struct pollfd p = {*pidfd, POLLIN, 0};
		while (poll(&p, 1, wait_ms) < 0 && errno == EINTR)
			;
		return;
	}
#else
	(void)pid;
	(void)pidfd;
#endif
	sleep_ms(*idle_ms < wait_ms ? *idle_ms : wait_ms);
	if (*idle_ms < CONFIRM_POLL_MS)
		*idle_ms *= 2;
}

/* Reads the output until the child exits, the output bound is passed,
 * req->timeout_ms passes or the hooks cancel; res says which. */
static void wait_for_end(const spawn_request *req, const spawn_hooks *hooks, pid_t pid, int out_p[2],
                         int err_p[2], size_t *total, spawn_result *res)
{
	int64_t deadline = mono_ms() + req->timeout_ms;
	int64_t idle_ms = 1;
	int pidfd = -1;
	while (!res->exited && !res->spawn_failed) {
		int64_t now = mono_ms();
		int wait_ms = (int)(deadline - now < CONFIRM_POLL_MS ? deadline - now : CONFIRM_POLL_MS);
		if (wait_ms < 0)
			wait_ms = 0;
		/* Both pipes closed: the end is usually a moment away. */
		if (!wait_readable(out_p[0], err_p[0], wait_ms))
			wait_for_exit(pid, &pidfd, &idle_ms, wait_ms);
		pump_both(out_p, err_p, total, req->output_budget, res);
		if (res->output_truncated)
			break;
		{
			int status;
			pid_t w = waitpid(pid, &status, WNOHANG);
			if (w == pid) {
				res->exited = 1;
				if (WIFEXITED(status))
					res->exit_code = WEXITSTATUS(status);
				else if (WIFSIGNALED(status))
					res->signal_no = WTERMSIG(status);
				break;
			}
		}
		if (mono_ms() >= deadline) {
			res->timed_out = 1;
			break;
		}
		if (hooks && hooks->cancelled && hooks->cancelled(hooks->ctx)) {
			res->cancelled = 1;
			break;
		}
	}
	if (pidfd >= 0)
		close(pidfd);
}

/* Kills the group and the adopted descendants, then waits up to
 * CONFIRM_WAIT_MS for them to be gone (res->termination_confirmed). */
static void kill_and_confirm(const spawn_request *req, pid_t pid, spawn_result *res)
{
	int64_t confirm_until;
	kill(-pid, SIGKILL);
	if (!res->exited)
		kill(pid, SIGKILL);
	confirm_until = mono_ms() + CONFIRM_WAIT_MS;
	for (;;) {
		int none_left;
#if defined(__linux__)
		kill_adopted_children(req);
#endif
		kill(-pid, SIGKILL);
		none_left = reap_all(req, pid, res);
		if (!group_alive(pid) && none_left) {
			res->termination_confirmed = 1;
			break;
		}
		if (mono_ms() >= confirm_until)
			break;
		sleep_ms(CONFIRM_POLL_MS);
	}
}

int proc_run(const spawn_request *req, const spawn_hooks *hooks, spawn_result *res, rerr *err)
{
	int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, hs[2] = {-1, -1}, ep[2] = {-1, -1};
	pid_t pid;
	size_t total = 0;
	int rc = -1;
	memset(res, 0, sizeof(*res));
	buf_init(&res->out);
	buf_init(&res->err);
	res->out_left_fd = -1;
	res->err_left_fd = -1;
	if (make_pipe(out_p) != 0 || make_pipe(err_p) != 0 || make_pipe(hs) != 0 || make_pipe(ep) != 0) {
		err_set(err, "cannot create pipes: %s", strerror(errno));
		goto cleanup;
	}
	if (hooks && hooks->before_fork && hooks->before_fork(hooks->ctx, err) != 0)
		goto cleanup;
	pid = fork();
	if (pid < 0) {
		res->spawn_failed = 1;
		text_format(res->spawn_error, sizeof(res->spawn_error), "fork failed: %s", strerror(errno));
		if (hooks && hooks->after_end)
			hooks->after_end(hooks->ctx, 0, 1, err);
		res->termination_confirmed = 1;
		rc = 0;
		goto cleanup;
	}
	if (pid == 0)
		child_exec(req, out_p[1], err_p[1], hs[0], ep[1]);
	res->pgid = pid;
	close_fd(&out_p[1]);
	close_fd(&err_p[1]);
	close_fd(&hs[0]);
	close_fd(&ep[1]);
	if (hooks && hooks->after_fork && hooks->after_fork(hooks->ctx, pid, err) != 0) {
		/* The child never runs anything: closing the handshake ends it. */
		close_fd(&hs[1]);
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		goto cleanup;
	}
	release_child(req, hs, ep, res);
	set_nonblock(out_p[0]);
	set_nonblock(err_p[0]);
	wait_for_end(req, hooks, pid, out_p, err_p, &total, res);
	/* A cancellation that killed the group itself (receiver cancel) is
	 * seen here, after the process ended. */
	if (!res->cancelled && !res->timed_out && hooks && hooks->cancelled && hooks->cancelled(hooks->ctx))
		res->cancelled = 1;
	/* Output already written before the end belongs to the run. */
	if (!res->output_truncated) {
		pump_both(out_p, err_p, &total, req->output_budget, res);
	}
	if (req->leave_survivors && res->exited && !res->output_truncated && !res->timed_out &&
	    !res->cancelled && leave_running(req, pid, out_p, err_p, &total, res) == 0) {
		if (hooks && hooks->after_end && hooks->after_end(hooks->ctx, pid, 1, err) != 0)
			goto cleanup;
		rc = 0;
		goto cleanup;
	}
	/* A timeout, the output bound or a cancellation: kill the group and the
	 * adopted descendants, then confirm (§12.4). */
	kill_and_confirm(req, pid, res);
	if (!res->output_truncated) {
		pump_both(out_p, err_p, &total, req->output_budget, res);
	}
	if (hooks && hooks->after_end &&
	    hooks->after_end(hooks->ctx, pid, res->termination_confirmed, err) != 0)
		goto cleanup;
	rc = 0;
cleanup:
	close_fd(&out_p[0]);
	close_fd(&out_p[1]);
	close_fd(&err_p[0]);
	close_fd(&err_p[1]);
	close_fd(&hs[0]);
	close_fd(&hs[1]);
	close_fd(&ep[0]);
	close_fd(&ep[1]);
	return rc;
}

void spawn_result_free(spawn_result *res)
{
	buf_free(&res->out);
	buf_free(&res->err);
	close_fd(&res->out_left_fd);
	close_fd(&res->err_left_fd);
}
