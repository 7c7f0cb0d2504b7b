/*
 * receiver/survivors.c — see survivors.h.
 */
#include "survivors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "fsx.h"
#include "proc.h"
#include "relay_support/fds.h"

/* Room kept below the cap for the notes the drainer writes itself. */
#define NOTE_RESERVE_BYTES 256u

/* The drainer's side; never returns. Only async-signal-safe-ish work and
 * no allocation: it is a fork of the receiver, whose allocator may print a
 * frame on failure. */
static void drain_main(int log_fd, int out_fd, int err_fd)
{
	static char chunk[65536];
	int fds[2] = {out_fd, err_fd};
	size_t written = 0;
	unsigned long long discarded = 0;
	int cap_noted = 0;
	const size_t keep = BACKGROUND_LOG_MAX_BYTES - NOTE_RESERVE_BYTES;
	for (;;) {
		struct pollfd pf[2];
		int slot[2];
		nfds_t n = 0, k;
		int i;
		for (i = 0; i < 2; i++) {
			if (fds[i] >= 0) {
				pf[n].fd = fds[i];
				pf[n].events = POLLIN;
				pf[n].revents = 0;
				slot[n] = i;
				n++;
			}
		}
		if (n == 0)
			break;
		if (poll(pf, n, -1) < 0 && errno != EINTR)
			break;
		for (k = 0; k < n; k++) {
			ssize_t got;
			i = slot[k];
			if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			got = read(fds[i], chunk, sizeof(chunk));
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got <= 0) {
				close(fds[i]);
				fds[i] = -1;
				continue;
			}
			{
				size_t take = (size_t)got;
				if (written + take > keep)
					take = keep > written ? keep - written : 0;
				if (take) {
					rs_write_all(log_fd, chunk, take);
					written += take;
				}
				discarded += (unsigned long long)((size_t)got - take);
				if (discarded && !cap_noted) {
					static const char note[] =
					    "\n[mcp-relay: this log reached its limit of 1 MiB; "
					    "later output is discarded and counted at the end]\n";
					rs_write_all(log_fd, note, sizeof note - 1);
					cap_noted = 1;
				}
			}
		}
	}
	if (discarded) {
		char note[128];
		text_format(note, sizeof(note), "[mcp-relay: %llu bytes of later output were discarded]\n",
		            discarded);
		rs_write_all(log_fd, note, strlen(note));
	}
	close(log_fd);
	_exit(0);
}

int survivors_start_drain(const char *root, const char *execution_id, int out_fd, int err_fd, pid_t *pid_out,
                          rerr *err)
{
	char *dir = NULL, *path = NULL;
	int log_fd = -1, rc = -1;
	pid_t pid;
	*pid_out = 0;
	if (out_fd < 0 && err_fd < 0)
		return 0;
	if (dir_ensure(root, BACKGROUND_DIR, err) != 0)
		goto cleanup;
	dir = path_join(root, BACKGROUND_DIR);
	path = xasprintf("%s/%s.log", dir, execution_id);
	log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (log_fd < 0) {
		err_set(err, "cannot open %s: %s", path, strerror(errno));
		goto cleanup;
	}
	pid = fork();
	if (pid < 0) {
		err_set(err, "cannot start the background output drainer: %s", strerror(errno));
		goto cleanup;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		int keep[3];
		int fd;
		long maxfd;
		sigset_t none;
		setsid();
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		/* Move the three kept descriptors above 2, then close the rest. */
		keep[0] = fcntl(log_fd, F_DUPFD, 3);
		keep[1] = out_fd >= 0 ? fcntl(out_fd, F_DUPFD, 3) : -1;
		keep[2] = err_fd >= 0 ? fcntl(err_fd, F_DUPFD, 3) : -1;
		maxfd = sysconf(_SC_OPEN_MAX);
		if (maxfd < 0 || maxfd > 65536)
			maxfd = 65536;
		for (fd = 3; fd < maxfd; fd++)
			if (fd != keep[0] && fd != keep[1] && fd != keep[2])
				close(fd);
		for (fd = 0; fd < 3; fd++)
			if (keep[fd] >= 0)
				fcntl(keep[fd], F_SETFL, fcntl(keep[fd], F_GETFL) & ~O_NONBLOCK);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		drain_main(keep[0], keep[1], keep[2]);
	}
	*pid_out = pid;
	rc = 0;
cleanup:
	if (log_fd >= 0)
		close(log_fd);
	if (out_fd >= 0)
		close(out_fd);
	if (err_fd >= 0)
		close(err_fd);
	free(dir);
	free(path);
	return rc;
}

typedef struct proc_entry {
	pid_t pid, ppid, pgid;
	char name[LEFT_RUNNING_COMMAND_MAX + 1];
} proc_entry;

static int entry_by_pid(const void *a, const void *b)
{
	const proc_entry *x = a, *y = b;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

static const proc_entry *find_entry(const proc_entry *all, size_t n, pid_t pid)
{
	proc_entry key;
	key.pid = pid;
	return bsearch(&key, all, n, sizeof(*all), entry_by_pid);
}

/* 1 when pid descends from `ancestor` (walking parents, bounded). */
static int descends_from(const proc_entry *all, size_t n, pid_t pid, pid_t ancestor)
{
	int hops;
	for (hops = 0; hops < 4096 && pid > 1; hops++) {
		const proc_entry *e = find_entry(all, n, pid);
		if (!e)
			return 0;
		if (e->ppid == ancestor)
			return 1;
		pid = e->ppid;
	}
	return 0;
}

jv *survivors_list(pid_t pgid, const pid_t *excluded, size_t excluded_count)
{
	jv *out = jv_object();
	jv *list = jv_array();
	size_t count = 0;
#if defined(__linux__)
	proc_entry *all = NULL;
	size_t n = 0, cap = 0, i, k;
	pid_t self = getpid();
	DIR *dir = opendir("/proc");
	struct dirent *de;
	while (dir && (de = readdir(dir)) != NULL) {
		char *end;
		long v = strtol(de->d_name, &end, 10);
		char state = 0;
		proc_entry e;
		if (*end || v <= 0)
			continue;
		memset(&e, 0, sizeof(e));
		e.pid = (pid_t)v;
		if (proc_stat_read(e.pid, &state, &e.ppid, &e.pgid, e.name, sizeof(e.name)) != 0 ||
		    state == 'Z' || state == 'X')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			all = xrealloc(all, cap * sizeof(*all));
		}
		all[n++] = e;
	}
	if (dir)
		closedir(dir);
	if (n)
		qsort(all, n, sizeof(*all), entry_by_pid);
	for (i = 0; i < n; i++) {
		int skip = all[i].pid == self;
		for (k = 0; k < excluded_count && !skip; k++)
			if (excluded[k] > 0 &&
			    (all[i].pid == excluded[k] || descends_from(all, n, all[i].pid, excluded[k])))
				skip = 1;
		if (skip)
			continue;
		if (!((pgid > 1 && all[i].pgid == pgid) || descends_from(all, n, all[i].pid, self)))
			continue;
		count++;
		if (list->count < LEFT_RUNNING_MAX_LISTED) {
			jv *p = jv_object();
			buf name;
			buf_init(&name);
			utf8_sanitize(&name, all[i].name, strlen(all[i].name), 1);
			jv_set_int(p, "pid", all[i].pid);
			jv_set_int(p, "pgid", all[i].pgid);
			jv_set(p, "command", jv_strn(name.data ? name.data : "", name.len));
			buf_free(&name);
			jv_push(list, p);
		}
	}
	free(all);
#else
	(void)pgid;
	(void)excluded;
	(void)excluded_count;
#endif
	jv_set_int(out, "count", (int64_t)count);
	jv_set(out, "processes", list);
	return out;
}
