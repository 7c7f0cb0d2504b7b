/*
 * subids.c — a relay that is not root: the relay user's subordinate ids.
 *
 * Without root a guest still must not be the relay's user (it could signal,
 * ptrace or write the user's own processes and files). So, as rootless
 * Podman does, the guest's user namespace maps, through the set-uid helpers
 * newuidmap and newgidmap (package uidmap):
 *
 *   guest 0          -> the relay's own uid (the init, which owns the mounts)
 *   guest uid U      -> <first subordinate uid> + (U - options.guestUser.uid)
 *
 * U is the guest's own uid from uids.c, so every guest runs as another
 * subordinate id. Files of those ids cannot be written or deleted by the
 * relay user from outside; the transfers (xfer.c) therefore run in a child
 * that joined the guest's user namespace, and release deletes the upper
 * layer in a namespace that maps the whole range (the init program's
 * "rmtree").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local.h"
#include "relay_support/fds.h"

/* The first line of `file` for the user (by name or uid): first and count. */
static bool find_range(const char *file, const char *name, unsigned long id, unsigned long *first,
                       unsigned long *count, unsigned long *end_of_all)
{
	FILE *f = fopen(file, "re");
	char line[512];
	bool found = false;
	*end_of_all = 0;
	while (f && fgets(line, sizeof line, f)) {
		char who[256];
		unsigned long a = 0, n = 0;
		if (sscanf(line, "%255[^:]:%lu:%lu", who, &a, &n) != 3)
			continue;
		if (a + n > *end_of_all)
			*end_of_all = a + n;
		char idtext[24];
		snprintf(idtext, sizeof idtext, "%lu", id);
		if (!found && n > 0 && (strcmp(who, name) == 0 || strcmp(who, idtext) == 0)) {
			*first = a;
			*count = n;
			found = true;
		}
	}
	if (f)
		fclose(f);
	return found;
}

void subids_detect(local_state *st)
{
	st->relay_uid = geteuid();
	st->relay_gid = getegid();
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwuid_r(st->relay_uid, &pw, buf, sizeof buf, &res) == 0 && res)
		lu_textf(st->relay_user, sizeof st->relay_user, "%s", pw.pw_name);
	else
		lu_textf(st->relay_user, sizeof st->relay_user, "%u", (unsigned)st->relay_uid);
	st->newuidmap_path = lu_find_program("newuidmap");
	st->newgidmap_path = lu_find_program("newgidmap");
	unsigned long ufirst = 0, ucount = 0, gfirst = 0, gcount = 0, uend = 0, gend = 0;
	bool u = find_range("/etc/subuid", st->relay_user, st->relay_uid, &ufirst, &ucount, &uend);
	bool g = find_range("/etc/subgid", st->relay_user, st->relay_gid, &gfirst, &gcount, &gend);
	unsigned long need = st->user_count ? st->user_count : 1;
	/* A free range for the fix: after every range given out so far. */
	unsigned long start = uend > gend ? uend : gend;
	if (start < 100000)
		start = 100000;
	if (st->newuidmap_path == NULL || st->newgidmap_path == NULL) {
		lu_textf(st->subids_reason, sizeof st->subids_reason,
		         "newuidmap and newgidmap are not installed (fix: sudo apt-get install uidmap)");
	} else if (!u || !g || ucount < need || gcount < need) {
		lu_textf(st->subids_reason, sizeof st->subids_reason,
		         "the relay's user %s has %s in /etc/subuid and /etc/subgid, and guests need %lu of "
		         "each (fix: sudo usermod --add-subuids %lu-%lu --add-subgids %lu-%lu %s)",
		         st->relay_user, u && g ? "too few subordinate ids" : "no subordinate ids", need,
		         start, start + 65535, start, start + 65535, st->relay_user);
	} else {
		st->subids = true;
		st->subuid_first = (uid_t)ufirst;
		st->subuid_count = ucount;
		st->subgid_first = (gid_t)gfirst;
		st->subgid_count = gcount;
	}
}

uid_t subids_host_uid(const local_state *st, uid_t uid)
{
	if (!st->rootless)
		return uid;
	if (uid == 0 || !st->subids)
		return st->relay_uid;
	return st->subuid_first + (uid - st->user.uid);
}

gid_t subids_host_gid(const local_state *st, gid_t gid)
{
	if (!st->rootless)
		return gid;
	if (gid == 0 || !st->subids)
		return st->relay_gid;
	return st->subgid_first + (gid - st->user.gid);
}

void subids_maps(const local_state *st, uid_t uid, gid_t gid, char outer_uid[128], char outer_gid[128],
                 char nested_uid[64], char nested_gid[64])
{
	lu_textf(outer_uid, 128, "0 %u 1 %u %u 1", (unsigned)st->relay_uid, (unsigned)uid,
	         (unsigned)subids_host_uid(st, uid));
	lu_textf(outer_gid, 128, "0 %u 1 %u %u 1", (unsigned)st->relay_gid, (unsigned)gid,
	         (unsigned)subids_host_gid(st, gid));
	lu_textf(nested_uid, 64, "0 0 1\n%u %u 1\n", (unsigned)uid, (unsigned)uid);
	lu_textf(nested_gid, 64, "0 0 1\n%u %u 1\n", (unsigned)gid, (unsigned)gid);
}

int subids_remove_tree(local_state *st, const char *path)
{
	if (!st->rootless || !st->subids)
		return lu_remove_tree(path);
	char umap[96], gmap[96];
	lu_textf(umap, sizeof umap, "0 %u 1 1 %u %lu", (unsigned)st->relay_uid, (unsigned)st->subuid_first,
	         st->subuid_count);
	lu_textf(gmap, sizeof gmap, "0 %u 1 1 %u %lu", (unsigned)st->relay_gid, (unsigned)st->subgid_first,
	         st->subgid_count);
	const char *argv[] = {
	    "machine-local-init", "rmtree", st->newuidmap_path, st->newgidmap_path, umap, gmap, path, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	lu_spawn_detached_init(&fa, &attr, STDERR_FILENO);
	posix_spawn_file_actions_adddup2(&fa, st->init_memfd, 9);
	posix_spawn_file_actions_addclosefrom_np(&fa, 10);
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	pid_t pid = -1;
	int rc = posix_spawn(&pid, "/proc/self/fd/9", &fa, &attr, (char *const *)argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc != 0)
		return rc;
	int wst = 0;
	while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
	}
	if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0)
		return 0;
	/* What the namespace could not remove (nothing, normally) is tried as
	 * the relay's user, which reports the reason. */
	int e = lu_remove_tree(path);
	return e != 0 ? e : 0;
}

bool subids_guest_mapped(const local_state *st, json_object *record)
{
	if (!st->rootless || !st->subids)
		return false;
	json_object *user = lu_get_object(record, "guestUser");
	return lu_get_int(user, "hostUid", (int64_t)st->relay_uid) != (int64_t)st->relay_uid;
}

/* ---- work inside a guest's user namespace -------------------------------------- */

/* The child: joins the namespace, runs fn, sends status, error, text. */
static void child_run(local_state *st, pid_t init_pid, int out, subids_fn fn, void *arg)
{
	relay_error cerr;
	memset(&cerr, 0, sizeof cerr);
	char *text = NULL;
	relay_status status;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/user", (int)init_pid);
	int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0 || setns(ns, CLONE_NEWUSER) != 0)
		status = lu_err(st, &cerr, RELAY_E_TRANSIENT, errno,
		                "cannot join the user namespace of the guest init %d", (int)init_pid);
	else
		status = fn(arg, &text, &cerr);
	uint32_t len = text ? (uint32_t)strlen(text) : 0;
	int32_t code = (int32_t)status;
	bool ok = rs_write_all(out, &code, sizeof code) == 0 && rs_write_all(out, &cerr, sizeof cerr) == 0 &&
	          rs_write_all(out, &len, sizeof len) == 0 && (len == 0 || rs_write_all(out, text, len) == 0);
	_exit(ok ? 0 : 1);
}

/* Reads exactly len bytes, polling `call`; 0, -1 on EOF/error, 1 when cancelled. */
static int read_exact(local_state *st, relay_call *call, int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len > 0) {
		struct pollfd pfd = {fd, POLLIN, 0};
		int rc = poll(&pfd, 1, 100);
		if (rc < 0 && errno != EINTR)
			return -1;
		if (rc <= 0) {
			if (call && st->host->call_cancelled(call))
				return 1;
			continue;
		}
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

relay_status subids_run_in_guest_userns(local_state *st, pid_t init_pid, relay_call *call, subids_fn fn,
                                        void *arg, char **text_out, relay_error *err)
{
	if (text_out)
		*text_out = NULL;
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return lu_err(st, err, RELAY_E_IO, errno, "cannot create a pipe");
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return lu_err(st, err, RELAY_E_IO, e, "cannot fork for the guest's user namespace");
	}
	if (pid == 0) {
		close(p[0]);
		child_run(st, init_pid, p[1], fn, arg);
	}
	close(p[1]);
	relay_status status = RELAY_OK;
	int32_t code = 0;
	uint32_t len = 0;
	relay_error cerr;
	int rc = read_exact(st, call, p[0], &code, sizeof code);
	if (rc == 0)
		rc = read_exact(st, call, p[0], &cerr, sizeof cerr);
	if (rc == 0)
		rc = read_exact(st, call, p[0], &len, sizeof len);
	char *text = NULL;
	if (rc == 0 && len > 0) {
		text = st->host->alloc((size_t)len + 1);
		rc = text ? read_exact(st, call, p[0], text, len) : -1;
		if (text)
			text[rc == 0 ? len : 0] = '\0';
	}
	if (rc != 0)
		kill(pid, SIGKILL);
	int wst = 0;
	while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
	}
	close(p[0]);
	if (rc == 1)
		status = lu_err(st, err, RELAY_E_CANCELLED, 0, "cancelled; the transfer was stopped");
	else if (rc != 0)
		status =
		    lu_err(st, err, RELAY_E_INDETERMINATE, 0,
		           "the transfer's process in the guest's user namespace ended without an answer");
	else {
		status = (relay_status)code;
		if (status != RELAY_OK && err)
			*err = cerr;
	}
	if (status == RELAY_OK && text_out) {
		*text_out = text;
		text = NULL;
	}
	if (text)
		st->host->free(text);
	return status;
}
