/*
 * init_rootless.c — what the guest init program does for a relay that is not
 * root:
 *
 *  - enter_mapped_userns: a user namespace whose maps newuidmap and
 *    newgidmap (set-uid helpers of the uidmap package) write from outside,
 *    so the guest's user is one of the relay user's subordinate ids, never
 *    the relay user itself;
 *  - compose_root: the copy-on-write view of the host root without an
 *    overlay of "/" (which the kernel refuses in a user namespace): a tmpfs
 *    root with one unprivileged overlay (userxattr) per top-level folder,
 *    its upper and work folders in the lease folder; a folder whose overlay
 *    the kernel refuses (it has mounts below it) is composed one level
 *    deeper, and at the last level bound read-only; the private folders
 *    (/tmp, /var/tmp, /root, /home) are overlays of an empty folder;
 *  - remove_tree_mapped: the "rmtree" command, which deletes a lease's
 *    upper layer inside such a namespace (its files belong to subordinate
 *    ids the relay user cannot delete from outside).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "init.h"

/* ---- the mapped user namespace ---------------------------------------------- */

/* Starts `prog pid <map words>`; its pid, or -1. */
static pid_t start_map_helper(const char *prog, pid_t target, const char *map)
{
	char words[512];
	snprintf(words, sizeof words, "%s", map);
	char pid_text[24];
	snprintf(pid_text, sizeof pid_text, "%d", (int)target);
	const char *argv[40];
	int ac = 0;
	argv[ac++] = prog;
	argv[ac++] = pid_text;
	char *save = NULL;
	for (char *t = strtok_r(words, " \n", &save); t && ac < 38; t = strtok_r(NULL, " \n", &save))
		argv[ac++] = t;
	argv[ac] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		execv(prog, (char *const *)argv);
		say("machine-local init: cannot run %s: %s", prog, strerror(errno));
		_exit(127);
	}
	return pid;
}

/* 1 when the helper `pid` exited 0. */
static int map_helper_ok(pid_t pid)
{
	int wst = 0;
	if (pid < 0)
		return 0;
	while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
	}
	return WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
}

int enter_mapped_userns(const char *newuidmap, const char *newgidmap, const char *uid_map,
                        const char *gid_map)
{
	int go[2], done[2];
	if (pipe2(go, O_CLOEXEC) != 0 || pipe2(done, O_CLOEXEC) != 0)
		return -1;
	pid_t self = getpid();
	pid_t helper = fork();
	if (helper < 0)
		return -1;
	if (helper == 0) {
		/* Outside the namespace: waits until it exists, then maps it. */
		close(go[1]);
		close(done[0]);
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		/* Both at once: each is a set-uid program that takes a few ms. */
		pid_t u = start_map_helper(newuidmap, self, uid_map);
		pid_t g = start_map_helper(newgidmap, self, gid_map);
		int ok = map_helper_ok(u);
		ok = map_helper_ok(g) && ok;
		_exit(ok ? 0 : 1);
	}
	close(go[0]);
	close(done[1]);
	close(done[0]);
	int rc = unshare(CLONE_NEWUSER);
	int e = errno;
	if (write(go[1], "u", 1) != 1 && rc == 0) {
		rc = -1;
		e = EPIPE;
	}
	close(go[1]);
	int wst = 0;
	while (waitpid(helper, &wst, 0) < 0 && errno == EINTR) {
	}
	if (rc != 0) {
		errno = e;
		return -1;
	}
	if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
		errno = EPERM;
		return -1;
	}
	if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0)
		return -1;
	/* The relay user's supplementary groups are not the guest's. */
	if (setgroups(0, NULL) != 0)
		return -1;
	return 0;
}

/* ---- the composed root ------------------------------------------------------- */

/* Folders of the root the guest gets empty and private: the upper layer's
 * own (opaque) folders, bound in place. */
static int is_private(const char *rel)
{
	static const char *const names[] = {"tmp", "var/tmp", "root", "home"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(rel, names[i]) == 0)
			return 1;
	return 0;
}

/* Made by setup_root after the composition. */
static int is_special(const char *rel)
{
	return strcmp(rel, "proc") == 0 || strcmp(rel, "sys") == 0 || strcmp(rel, "dev") == 0 ||
	       strcmp(rel, "run") == 0;
}

static void mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(buf, mode);
			*p = '/';
		}
	if (mkdir(buf, mode) != 0 && errno != EEXIST)
		die(errno, "cannot create %s", path);
}

static int mount_overlay(const char *lower, const char *upper, const char *work, const char *target)
{
	char data[3 * PATH_MAX + 64];
	snprintf(data, sizeof data, "lowerdir=%s,upperdir=%s,workdir=%s,userxattr,volatile", lower, upper,
	         work);
	if (mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, data) == 0)
		return 0;
	snprintf(data, sizeof data, "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, upper, work);
	return mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, data);
}

/* <lease_dir>/<layer>/<rel>; dies when too long. */
static void layer_path(char *out, size_t size, const char *lease_dir, const char *layer, const char *rel)
{
	char base[PATH_MAX];
	join_path(base, sizeof base, lease_dir, layer);
	join_path(out, size, base, rel);
}

#define COMPOSE_DEPTH 2

typedef struct compose_ctx {
	const char *lease_dir;
	const char *merged;
	int overlays, binds;
	char *mounts; /* the mount points of this namespace, one per line (heap) */
	size_t mounts_len;
} compose_ctx;

/* Every mount point of this mount namespace (/proc/self/mountinfo field 5),
 * one per line, so a folder with mounts below it (which an unprivileged
 * overlay refuses) is known before a mount is tried. */
static void read_mount_points(compose_ctx *c)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	size_t cap = 0;
	while (f && fgets(line, sizeof line, f)) {
		char *save = NULL, *field = strtok_r(line, " ", &save);
		for (int i = 1; field && i < 5; i++)
			field = strtok_r(NULL, " ", &save);
		if (field == NULL)
			continue;
		size_t n = strlen(field);
		if (c->mounts_len + n + 2 > cap) {
			size_t grown = cap ? cap * 2 : 16384;
			while (grown < c->mounts_len + n + 2)
				grown *= 2;
			char *p = realloc(c->mounts, grown);
			if (p == NULL)
				break;
			c->mounts = p;
			cap = grown;
		}
		memcpy(c->mounts + c->mounts_len, field, n);
		c->mounts_len += n;
		c->mounts[c->mounts_len++] = '\n';
		c->mounts[c->mounts_len] = '\0';
	}
	if (f)
		fclose(f);
}

/* 1 when a mount point lies strictly below `dir` (absolute, no trailing /). */
static int has_mounts_below(const compose_ctx *c, const char *dir)
{
	size_t n = strlen(dir);
	for (const char *p = c->mounts; p && *p;) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len > n + 1 && strncmp(p, dir, n) == 0 && p[n] == '/')
			return 1;
		p = end ? end + 1 : p + len;
	}
	return 0;
}

static void compose_dir(compose_ctx *c, const char *rel, int depth);

/* A file of a composed folder: the upper layer's copy when there is one
 * (the guest's /etc/passwd, hosts, ...), writable; else the host's,
 * read-only. */
static void bind_file(compose_ctx *c, const char *rel, const char *host, const char *target)
{
	char upper[PATH_MAX];
	layer_path(upper, sizeof upper, c->lease_dir, "upper", rel);
	struct stat ub;
	bool own = lstat(upper, &ub) == 0 && S_ISREG(ub.st_mode);
	int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0)
		close(fd);
	if (fd < 0 || mount(own ? upper : host, target, NULL, MS_BIND, NULL) != 0 ||
	    (!own &&
	     mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0))
		say("machine-local init: %s is not in the guest (%s)", host, strerror(errno));
}

/* One entry `rel` (relative to /) of a folder being composed. */
static void compose_entry(compose_ctx *c, const char *rel, int depth)
{
	char host[PATH_MAX], target[PATH_MAX], upper[PATH_MAX];
	snprintf(host, sizeof host, "/%s", rel);
	join_path(target, sizeof target, c->merged, rel);
	struct stat sb;
	if (lstat(host, &sb) != 0)
		return;
	if (S_ISLNK(sb.st_mode)) {
		char link[PATH_MAX];
		ssize_t n = readlink(host, link, sizeof link - 1);
		if (n <= 0)
			return;
		link[n] = '\0';
		if (symlink(link, target) != 0)
			die(errno, "cannot create %s", target);
		return;
	}
	if (S_ISREG(sb.st_mode)) {
		bind_file(c, rel, host, target);
		return;
	}
	if (!S_ISDIR(sb.st_mode))
		return; /* sockets, devices, FIFOs of the root: not part of the view */
	if (mkdir(target, sb.st_mode & 07777) != 0 && errno != EEXIST)
		die(errno, "cannot create %s", target);
	if (depth == 0 && is_special(rel))
		return;
	layer_path(upper, sizeof upper, c->lease_dir, "upper", rel);
	if (is_private(rel)) {
		/* An overlay of an empty folder: the guest's files there are
		 * the upper layer's, on an overlay like all others. */
		char work[PATH_MAX], empty[PATH_MAX];
		layer_path(work, sizeof work, c->lease_dir, "work", rel);
		join_path(empty, sizeof empty, c->lease_dir, "empty");
		mkdir_p(upper, 0700);
		mkdir_p(work, 0700);
		mkdir_p(empty, 0755);
		if (mount_overlay(empty, upper, work, target) != 0)
			die(errno, "cannot mount the guest's private %s", host);
		c->overlays++;
		return;
	}
	compose_dir(c, rel, depth);
}

/* `rel` as an overlay of /rel; when the kernel refuses it (mounts below
 * it), a tmpfs with its entries composed one level deeper. */
static void compose_dir(compose_ctx *c, const char *rel, int depth)
{
	char host[PATH_MAX], target[PATH_MAX], upper[PATH_MAX], work[PATH_MAX];
	snprintf(host, sizeof host, "/%s", rel);
	join_path(target, sizeof target, c->merged, rel);
	layer_path(upper, sizeof upper, c->lease_dir, "upper", rel);
	layer_path(work, sizeof work, c->lease_dir, "work", rel);
	struct stat sb;
	if (stat(host, &sb) != 0)
		return;
	struct stat ub;
	if (stat(upper, &ub) != 0) {
		mkdir_p(upper, 0700);
		chmod(upper, sb.st_mode & 07777);
	}
	mkdir_p(work, 0700);
	/* The kernel refuses an unprivileged overlay whose lower folder has
	 * mounts below it; such a folder is composed a level deeper. */
	int below = has_mounts_below(c, host);
	if (!below && mount_overlay(host, upper, work, target) == 0) {
		c->overlays++;
		return;
	}
	int e = below ? EBUSY : errno;
	if (depth + 1 >= COMPOSE_DEPTH) {
		/* The last level: the host's folder with what is mounted below
		 * it, read-only (the guest's private folders go on top). */
		if (mount(host, target, NULL, MS_BIND | MS_REC, NULL) != 0 ||
		    mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
		          NULL) != 0)
			die(errno, "cannot bind %s read-only into the guest (no overlay: %s)", host,
			    strerror(e));
		say("machine-local init: %s is read-only in the guest (%s)", host,
		    below ? "it has mounts below it" : strerror(e));
		c->binds++;
		return;
	}
	char opts[64];
	snprintf(opts, sizeof opts, "mode=%o,size=1m", (unsigned)(sb.st_mode & 07777));
	if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
		die(errno, "cannot compose %s", host);
	DIR *d = opendir(host);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char child[PATH_MAX];
		snprintf(child, sizeof child, "%s/%s", rel, de->d_name);
		compose_entry(c, child, depth + 1);
	}
	if (d)
		closedir(d);
	/* Files only the upper layer has (made by the relay, upper.c). */
	d = opendir(upper);
	while (d && (de = readdir(d)) != NULL) {
		char child[PATH_MAX], child_target[PATH_MAX];
		snprintf(child, sizeof child, "%s/%s", rel, de->d_name);
		join_path(child_target, sizeof child_target, c->merged, child);
		struct stat tb;
		if (de->d_type == DT_REG && lstat(child_target, &tb) != 0)
			bind_file(c, child, child, child_target);
	}
	if (d)
		closedir(d);
}

#define COMPOSE_WORKERS 3
#define COMPOSE_MAX     512

void compose_root(const char *lease_dir, const char *merged)
{
	compose_ctx c = {lease_dir, merged, 0, 0, NULL, 0};
	read_mount_points(&c);
	if (mount("tmpfs", merged, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") != 0)
		die(errno, "cannot mount the guest's root tmpfs on %s", merged);
	DIR *d = opendir("/");
	if (d == NULL)
		die(errno, "cannot read the host root");
	static char names[COMPOSE_MAX][256];
	int count = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL && count < COMPOSE_MAX) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(names[count++], sizeof names[0], "%s", de->d_name);
	}
	closedir(d);
	/* The overlays are made by a few processes at once (they share this
	 * mount namespace): each mount waits on the disk for its work folder,
	 * so doing them one by one leaves the CPUs idle. */
	pid_t workers[COMPOSE_WORKERS];
	for (int w = 0; w < COMPOSE_WORKERS; w++) {
		workers[w] = fork();
		if (workers[w] < 0)
			die(errno, "cannot start a process to compose the guest root");
		if (workers[w] == 0) {
			for (int i = w; i < count; i += COMPOSE_WORKERS)
				compose_entry(&c, names[i], 0);
			_exit(0);
		}
	}
	int failed = 0;
	for (int w = 0; w < COMPOSE_WORKERS; w++) {
		int wst = 0;
		while (waitpid(workers[w], &wst, 0) < 0 && errno == EINTR) {
		}
		failed |= !WIFEXITED(wst) || WEXITSTATUS(wst) != 0;
	}
	free(c.mounts);
	if (failed)
		die(EIO, "the guest root could not be composed (see init.log)");
	say("machine-local init: the guest root is composed of the %d entries of /", count);
}

/* ---- rmtree ---------------------------------------------------------------- */

static int remove_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (type == FTW_DP)
		return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
	return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

int remove_tree_mapped(const char *newuidmap, const char *newgidmap, const char *uid_map, const char *gid_map,
                       const char *path)
{
	if (enter_mapped_userns(newuidmap, newgidmap, uid_map, gid_map) != 0) {
		say("machine-local init: cannot enter the relay user's id map: %s", strerror(errno));
		return 1;
	}
	/* Root of this namespace reads and deletes whatever a guest left,
	 * whichever of the mapped ids owns it and whatever its mode. */
	if (nftw(path, remove_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0 && errno != ENOENT) {
		say("machine-local init: cannot remove %s: %s", path, strerror(errno));
		return 1;
	}
	return 0;
}
