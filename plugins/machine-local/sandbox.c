/*
 * sandbox.c — making, destroying and checking one machine-local guest.
 *
 * Acquire: a lease folder and its record first (so a crash at any later
 * point leaves something the reaper finds), then the upper layer's private
 * folders and /etc files, the cgroup, the guest init (local_init.c, run
 * from the embedded memfd), the network helper, and the Xvfb display.
 * Destroy: SIGKILL to the guest init (the kernel then kills every process
 * of its PID namespace, and the mount namespace with the overlay goes with
 * the last of them), the helper, the cgroup, then the folder with the upper
 * layer; then an independent check that nothing is left.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"

const local_image *sandbox_find_image(local_state *st, const char *key)
{
	for (size_t i = 0; key && i < st->image_count; i++)
		if (strcmp(st->images[i].key, key) == 0)
			return &st->images[i];
	return NULL;
}

static void tree_path(char *out, size_t size, const char *tree, const char *rel)
{
	if (strcmp(tree, "/") == 0)
		snprintf(out, size, "/%s", rel);
	else
		snprintf(out, size, "%s/%s", tree, rel);
}

bool sandbox_image_has(local_state *st, const char *tree, const char *rel_path)
{
	(void)st;
	char path[PATH_MAX];
	tree_path(path, sizeof path, tree, rel_path);
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0111);
}

/* ---- the upper layer ----------------------------------------------------------- */

typedef struct upper_ctx {
	local_state *st;
	const char *tree;
	char upper[PATH_MAX];
	relay_error *err;
} upper_ctx;

/* Creates upper/<rel> as a folder with the attributes of the lower one (or
 * `mode` and root when the lower has none). */
static int upper_dir_like_lower(upper_ctx *u, const char *rel, mode_t fallback_mode)
{
	char lower[PATH_MAX], up[PATH_MAX];
	tree_path(lower, sizeof lower, u->tree, rel);
	lu_textf(up, sizeof up, "%s/%s", u->upper, rel);
	struct stat sb;
	mode_t mode = fallback_mode;
	uid_t uid = 0;
	gid_t gid = 0;
	bool have = lstat(lower, &sb) == 0;
	if (have && !S_ISDIR(sb.st_mode))
		return ENOTDIR; /* a link such as /var -> elsewhere: leave it alone */
	if (have) {
		mode = sb.st_mode & 07777;
		uid = sb.st_uid;
		gid = sb.st_gid;
	}
	if (mkdir(up, 0700) != 0 && errno != EEXIST)
		return errno;
	if (!u->st->rootless && chown(up, uid, gid) != 0)
		return errno;
	if (chmod(up, mode) != 0)
		return errno;
	return 0;
}

/* Creates upper/<rel> as an empty opaque folder: the guest sees none of
 * the lower's entries there, and everything it writes lands in the upper
 * layer, which release deletes. */
static int upper_private_dir(upper_ctx *u, const char *rel, mode_t mode, uid_t uid, gid_t gid)
{
	char up[PATH_MAX];
	lu_textf(up, sizeof up, "%s/%s", u->upper, rel);
	if (mkdir(up, 0700) != 0 && errno != EEXIST)
		return errno;
	if (!u->st->rootless && chown(up, uid, gid) != 0)
		return errno;
	if (chmod(up, mode) != 0)
		return errno;
	const char *name = u->st->rootless ? "user.overlay.opaque" : "trusted.overlay.opaque";
	if (setxattr(up, name, "y", 1, 0) != 0)
		return errno;
	return 0;
}

static int upper_file(upper_ctx *u, const char *rel, const char *text, size_t len)
{
	char up[PATH_MAX];
	lu_textf(up, sizeof up, "%s/%s", u->upper, rel);
	int fd = open(up, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno;
	int rc = 0;
	if (write(fd, text, len) != (ssize_t)len)
		rc = errno ? errno : EIO;
	if (fchmod(fd, 0644) != 0 && rc == 0)
		rc = errno;
	close(fd);
	return rc;
}

static char *read_small(const char *path, size_t max, size_t *len_out)
{
	*len_out = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = malloc(max + 1);
	if (buf == NULL) {
		close(fd);
		return NULL;
	}
	size_t got = 0;
	ssize_t n;
	while (got < max && (n = read(fd, buf + got, max - got)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	*len_out = got;
	return buf;
}

/* Looks for `name` (field 0) or `id` (field 2) in a passwd/group text.
 * Returns 0 when neither is there, 1 when both match one line, -1 on a
 * conflict (the name with another id, or the id with another name). */
static int id_file_lookup(const char *text, const char *name, unsigned id)
{
	int found = 0;
	const char *line = text;
	while (line && *line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char buf[512];
		if (len < sizeof buf) {
			memcpy(buf, line, len);
			buf[len] = '\0';
			char *f0 = buf, *f1 = strchr(f0, ':'), *f2 = f1 ? strchr(f1 + 1, ':') : NULL;
			if (f1 && f2) {
				*f1 = '\0';
				unsigned lid = (unsigned)strtoul(f2 + 1, NULL, 10);
				bool same_name = strcmp(f0, name) == 0;
				bool same_id = lid == id;
				if (same_name && same_id)
					found = 1;
				else if (same_name || same_id)
					return -1;
			}
		}
		line = end ? end + 1 : NULL;
	}
	return found;
}

static int append_id_file(upper_ctx *u, const char *rel, const char *line, const char *name, unsigned id,
                          const char *what)
{
	char lower[PATH_MAX];
	tree_path(lower, sizeof lower, u->tree, rel);
	size_t len = 0;
	char *text = read_small(lower, 4u << 20, &len);
	int look = text ? id_file_lookup(text, name, id) : 0;
	if (look < 0) {
		free(text);
		lu_err(
		    u->st, u->err, RELAY_E_REFUSED, 0,
		    "the image's /%s already has a %s named %s or numbered %u that does not match the guest "
		    "user; set options.guestUser to a free name and id",
		    rel, what, name, id);
		return EEXIST;
	}
	size_t ll = strlen(line);
	char *out = malloc(len + ll + 2);
	if (out == NULL) {
		free(text);
		return ENOMEM;
	}
	size_t n = 0;
	if (text) {
		memcpy(out, text, len);
		n = len;
		if (n > 0 && out[n - 1] != '\n')
			out[n++] = '\n';
	}
	if (look == 0) {
		memcpy(out + n, line, ll);
		n += ll;
	}
	int rc = upper_file(u, rel, out, n);
	free(out);
	free(text);
	return rc;
}

static relay_status prepare_upper(local_state *st, const char *tree, const char *lease_dir, const char *guest,
                                  const local_user *user, bool with_helper, relay_error *err)
{
	upper_ctx u = {st, tree, "", err};
	snprintf(u.upper, sizeof u.upper, "%s/upper", lease_dir);
	char path[PATH_MAX];
	static const char *const subdirs[] = {"upper", "work", "merged"};
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/%s", lease_dir, subdirs[i]);
		if (mkdir(path, 0700) != 0)
			return lu_err(st, err, RELAY_E_IO, errno, "cannot create %s", path);
	}
	if (chmod(u.upper, 0755) != 0)
		return lu_err(st, err, RELAY_E_IO, errno, "cannot set the mode of %s", u.upper);
	int rc = 0;
	const char *step = "";
#define STEP(name, expr)                                                                                     \
	do {                                                                                                 \
		step = name;                                                                                 \
		if ((rc = (expr)) != 0)                                                                      \
			goto fail;                                                                           \
	} while (0)
	STEP("/tmp", upper_private_dir(&u, "tmp", 01777, 0, 0));
	STEP("/tmp/.X11-unix", upper_private_dir(&u, "tmp/.X11-unix", 01777, 0, 0));
	rc = upper_dir_like_lower(&u, "var", 0755);
	if (rc == 0)
		STEP("/var/tmp", upper_private_dir(&u, "var/tmp", 01777, 0, 0));
	else if (rc != ENOTDIR)
		STEP("/var", rc);
	STEP("/root", upper_private_dir(&u, "root", 0700, 0, 0));
	STEP("/home", upper_private_dir(&u, "home", 0755, 0, 0));
	if (user->uid != 0) {
		char rel[300];
		snprintf(rel, sizeof rel, "%s", user->home + 1);
		STEP(user->home, upper_private_dir(&u, rel, 0700, user->uid, user->gid));
	}
	STEP("/etc", upper_dir_like_lower(&u, "etc", 0755));
	char line[512];
	if (user->uid != 0) {
		snprintf(line, sizeof line, "%s:x:%u:%u:mcp-relay guest:%s:/bin/sh\n", user->name,
		         (unsigned)user->uid, (unsigned)user->gid, user->home);
		rc = append_id_file(&u, "etc/passwd", line, user->name, (unsigned)user->uid, "user");
		if (rc == EEXIST)
			return RELAY_E_REFUSED;
		STEP("/etc/passwd", rc);
		snprintf(line, sizeof line, "%s:x:%u:\n", user->name, (unsigned)user->gid);
		rc = append_id_file(&u, "etc/group", line, user->name, (unsigned)user->gid, "group");
		if (rc == EEXIST)
			return RELAY_E_REFUSED;
		STEP("/etc/group", rc);
	}
	snprintf(line, sizeof line, "%s\n", guest);
	STEP("/etc/hostname", upper_file(&u, "etc/hostname", line, strlen(line)));
	snprintf(line, sizeof line,
	         "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n", guest);
	STEP("/etc/hosts", upper_file(&u, "etc/hosts", line, strlen(line)));
	if (with_helper)
		snprintf(line, sizeof line,
		         "# machine-local: DNS through the network helper\nnameserver 10.0.2.3\n");
	else
		snprintf(line, sizeof line, "# machine-local: this guest has loopback networking only\n");
	STEP("/etc/resolv.conf", upper_file(&u, "etc/resolv.conf", line, strlen(line)));
#undef STEP
	return RELAY_OK;
fail:
	return lu_err(st, err, RELAY_E_IO, rc, "cannot prepare the guest's %s in %s", step, u.upper);
}

/* ---- cgroup ---------------------------------------------------------------- */

static int write_file_text(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	ssize_t w = write(fd, text, strlen(text));
	int rc = w == (ssize_t)strlen(text) ? 0 : (errno ? errno : EIO);
	close(fd);
	return rc;
}

static char *make_cgroup(local_state *st, const char *vm, json_object *record)
{
	if (st->cgroup_base == NULL)
		return NULL;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", st->cgroup_base, vm);
	if (mkdir(path, 0755) != 0) {
		st->host->log(RELAY_LOG_WARNING, LOCAL_PLUGIN_NAME,
		              "cannot create the cgroup %s (%s); no limits", path, strerror(errno));
		return NULL;
	}
	json_object *limits = json_object_new_object();
	char text[64];
	if (st->cgroup_memory && st->limit_memory_bytes > 0) {
		snprintf(text, sizeof text, "%lld", (long long)st->limit_memory_bytes);
		if (write_file_text(path, "memory.max", text) == 0)
			json_object_object_add(limits, "memoryBytes",
			                       json_object_new_int64(st->limit_memory_bytes));
	}
	if (st->cgroup_pids && st->limit_pids > 0) {
		snprintf(text, sizeof text, "%lld", (long long)st->limit_pids);
		if (write_file_text(path, "pids.max", text) == 0)
			json_object_object_add(limits, "pids", json_object_new_int64(st->limit_pids));
	}
	if (st->cgroup_cpu && st->limit_cpu_percent > 0) {
		snprintf(text, sizeof text, "%d 100000", st->limit_cpu_percent * 1000);
		if (write_file_text(path, "cpu.max", text) == 0)
			json_object_object_add(limits, "cpuPercent",
			                       json_object_new_int(st->limit_cpu_percent));
	}
	json_object_object_add(record, "limits", limits);
	return strdup(path);
}

static int cgroup_populated(const char *path)
{
	char events[PATH_MAX];
	snprintf(events, sizeof events, "%s/cgroup.events", path);
	size_t len = 0;
	char *text = read_small(events, 4096, &len);
	if (text == NULL)
		return -1;
	int populated = strstr(text, "populated 1") != NULL;
	free(text);
	return populated;
}

static int remove_cgroup(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		return 0;
	write_file_text(path, "cgroup.kill", "1");
	int64_t until = lu_monotonic_ms() + 5000;
	while (cgroup_populated(path) == 1 && lu_monotonic_ms() < until)
		lu_sleep_ms(5);
	for (int i = 0; i < 100; i++) {
		if (rmdir(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return errno;
		lu_sleep_ms(10);
	}
	return EBUSY;
}

/* ---- the guest init ------------------------------------------------------------ */

typedef struct launch_result {
	pid_t launcher;
	pid_t init_pid;
	pid_t helper_pid;
} launch_result;

static int read_status_line(int fd, char *line, size_t size, int64_t until)
{
	size_t n = 0;
	for (;;) {
		int left = (int)(until - lu_monotonic_ms());
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd pfd = {fd, POLLIN, 0};
		int rc = poll(&pfd, 1, left);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			continue;
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			errno = EPIPE;
			return -1;
		}
		if (c == '\n') {
			line[n] = '\0';
			return 0;
		}
		if (n + 1 < size)
			line[n++] = c;
	}
}

static relay_status launch_init(local_state *st, const char *lease_dir, const char *tree, const char *guest,
                                const char *cgroup, bool with_helper, launch_result *lr, relay_error *err)
{
	relay_status status = RELAY_OK;
	int status_pipe[2] = {-1, -1}, hold[2] = {-1, -1};
	int log_fd = -1;
	lr->launcher = lr->init_pid = lr->helper_pid = 0;
	const char *argv[32 + 2 * LOCAL_MAX_MASKS + 2 * 128];
	size_t ac = 0;
	char reject[128][24];
	size_t nreject = with_helper ? net_reject_list(reject, 128) : 0;
	char backstop[32];
	snprintf(backstop, sizeof backstop, "%lld", (long long)st->backstop_ms);
	argv[ac++] = "machine-local-init";
	argv[ac++] = "launch";
	argv[ac++] = "--lease-dir";
	argv[ac++] = lease_dir;
	argv[ac++] = "--lower";
	argv[ac++] = tree;
	argv[ac++] = "--hostname";
	argv[ac++] = guest;
	argv[ac++] = "--id-map";
	argv[ac++] = st->rootless ? "0 0 1" : "0 0 65536";
	argv[ac++] = "--backstop-ms";
	argv[ac++] = backstop;
	if (st->rootless) {
		argv[ac++] = "--rootless";
		argv[ac++] = "--userxattr";
	}
	if (cgroup) {
		argv[ac++] = "--cgroup";
		argv[ac++] = cgroup;
	}
	argv[ac++] = "--mask";
	argv[ac++] = st->state_dir;
	for (size_t i = 0; i < st->mask_count; i++) {
		argv[ac++] = "--mask";
		argv[ac++] = st->masks[i];
	}
	for (size_t i = 0; i < nreject; i++) {
		argv[ac++] = "--reject";
		argv[ac++] = reject[i];
	}
	if (with_helper) {
		argv[ac++] = "--hold-fd";
		argv[ac++] = "4";
	}
	argv[ac] = NULL;

	char log_path[PATH_MAX];
	snprintf(log_path, sizeof log_path, "%s/init.log", lease_dir);
	log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (log_fd < 0 || pipe2(status_pipe, O_CLOEXEC) != 0 ||
	    (with_helper && pipe2(hold, O_CLOEXEC) != 0)) {
		status = lu_err(st, err, RELAY_E_IO, errno,
		                "cannot prepare the guest init's descriptors in %s", lease_dir);
		goto cleanup;
	}
	/* Lift the descriptors out of the way of 0..4 before dup2 in the child. */
	int hi_status = fcntl(status_pipe[1], F_DUPFD_CLOEXEC, 100);
	int hi_hold = with_helper ? fcntl(hold[1], F_DUPFD_CLOEXEC, 100) : -1;
	int hi_log = fcntl(log_fd, F_DUPFD_CLOEXEC, 100);
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	lu_spawn_detached_init(&fa, &attr, hi_log);
	posix_spawn_file_actions_adddup2(&fa, hi_status, 3);
	if (with_helper)
		posix_spawn_file_actions_adddup2(&fa, hi_hold, 4);
	/* The init program runs from its memfd, lent as fd 9; nothing else of
	 * the relay is passed on. */
	posix_spawn_file_actions_adddup2(&fa, st->init_memfd, 9);
	posix_spawn_file_actions_addclosefrom_np(&fa, 10);
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	pid_t pid = -1;
	int rc = posix_spawn(&pid, "/proc/self/fd/9", &fa, &attr, (char *const *)argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(hi_status);
	close(hi_log);
	if (hi_hold >= 0)
		close(hi_hold);
	close(status_pipe[1]);
	status_pipe[1] = -1;
	if (hold[1] >= 0) {
		close(hold[1]);
		hold[1] = -1;
	}
	if (rc != 0) {
		status = lu_err(st, err, RELAY_E_IO, rc, "cannot start the guest init");
		goto cleanup;
	}
	lr->launcher = pid;
	int64_t until = lu_monotonic_ms() + 20000;
	char line[900];
	bool ready = false;
	while (!ready) {
		if (read_status_line(status_pipe[0], line, sizeof line, until) != 0) {
			char tail[300] = "";
			size_t len = 0;
			char *text = read_small(log_path, 64 * 1024, &len);
			if (text) {
				const char *from = len > 250 ? text + len - 250 : text;
				snprintf(tail, sizeof tail, "%s", from);
				for (char *p = tail; *p; p++)
					if (*p == '\n')
						*p = ' ';
				free(text);
			}
			status = lu_err(st, err, errno == ETIMEDOUT ? RELAY_E_TIMEOUT : RELAY_E_IO, errno,
			                "the guest init %s (log: %s)",
			                errno == ETIMEDOUT ? "did not become ready within 20 s"
			                                   : "exited before it was ready",
			                tail[0] ? tail : "empty");
			goto cleanup;
		}
		if (strncmp(line, "pid ", 4) == 0) {
			lr->init_pid = (pid_t)atoi(line + 4);
			if (with_helper) {
				status = net_start_helper(st, lr->init_pid, lease_dir, hold[0],
				                          &lr->helper_pid, err);
				close(hold[0]);
				hold[0] = -1;
				if (status != RELAY_OK)
					goto cleanup;
			}
		} else if (strcmp(line, "ready") == 0) {
			ready = true;
		} else if (strncmp(line, "error ", 6) == 0) {
			char *msg = strchr(line + 6, ' ');
			int e = atoi(line + 6);
			status = lu_err(
			    st, err, e == EPERM || e == EACCES ? RELAY_E_REFUSED : RELAY_E_IO, e,
			    "the guest could not be set up: %s: %s (is the kernel allowing namespaces and "
			    "overlayfs here?)",
			    msg ? msg + 1 : "unknown step", strerror(e));
			goto cleanup;
		}
	}
cleanup:
	if (lr->launcher > 0) {
		int wst;
		if (status == RELAY_OK)
			waitpid(lr->launcher, &wst, 0);
		else {
			kill(lr->launcher, SIGKILL);
			waitpid(lr->launcher, &wst, 0);
		}
	}
	if (status_pipe[0] >= 0)
		close(status_pipe[0]);
	if (status_pipe[1] >= 0)
		close(status_pipe[1]);
	if (hold[0] >= 0)
		close(hold[0]);
	if (hold[1] >= 0)
		close(hold[1]);
	if (log_fd >= 0)
		close(log_fd);
	return status;
}

/* ---- the display ------------------------------------------------------------- */

static relay_status start_display(local_state *st, json_object *record, const char *lease_dir,
                                  relay_error *err)
{
	relay_status status = RELAY_OK;
	int pipefd[2] = {-1, -1}, log_fd = -1, conn = -1;
	char **env = NULL;
	char log_path[PATH_MAX];
	snprintf(log_path, sizeof log_path, "%s/display.log", lease_dir);
	log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (log_fd < 0 || pipe2(pipefd, O_CLOEXEC) != 0) {
		status = lu_err(st, err, RELAY_E_IO, errno, "cannot prepare the display's descriptors");
		goto cleanup;
	}
	conn = ctl_connect(lease_dir);
	if (conn < 0) {
		status = lu_err(st, err, RELAY_E_IO, errno, "cannot reach the guest init in %s", lease_dir);
		goto cleanup;
	}
	env = ctl_guest_env(st, record, NULL);
	const char *argv[] = {"Xvfb",      ":0",  "-screen",    "0", st->screen,
	                      "-nolisten", "tcp", "-displayfd", "1", NULL};
	json_object *user = lu_get_object(record, "guestUser");
	ctl_spawn req = {argv,
	                 (const char *const *)env,
	                 lu_get_string(user, "home"),
	                 (uid_t)lu_get_int(user, "uid", 0),
	                 (gid_t)lu_get_int(user, "gid", 0),
	                 LP_SPAWN_DETACHED | LP_SPAWN_NO_NEW_PRIVS,
	                 pipefd[1],
	                 log_fd,
	                 -1};
	pid_t pid = 0;
	int e = 0;
	char why[256];
	if (ctl_spawn_cmd(conn, &req, &pid, &e, why, sizeof why) != 0) {
		status = lu_err(st, err, RELAY_E_REFUSED, e, "Xvfb could not start in the guest: %s: %s", why,
		                strerror(e));
		goto cleanup;
	}
	close(pipefd[1]);
	pipefd[1] = -1;
	char line[32];
	if (read_status_line(pipefd[0], line, sizeof line, lu_monotonic_ms() + 15000) != 0) {
		status = lu_err(st, err, RELAY_E_REFUSED, errno,
		                "Xvfb did not open the guest's display within 15 s; see %s", log_path);
		goto cleanup;
	}
	char display[40];
	snprintf(display, sizeof display, ":%d", atoi(line));
	json_object_object_add(record, "display", json_object_new_string(display));
	json_object *pids = lu_get_object(record, "pids");
	if (pids)
		json_object_object_add(pids, "xvfb", json_object_new_int64(pid));
cleanup:
	ctl_env_free(env);
	if (conn >= 0)
		close(conn);
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (log_fd >= 0)
		close(log_fd);
	return status;
}

/* ---- acquire --------------------------------------------------------------- */

static bool reserve_name(local_state *st, const char *guest, relay_error *err, relay_status *status)
{
	bool ok = false;
	json_object *all = lease_list(st);
	pthread_mutex_lock(&st->lock);
	size_t active = st->reserved_count;
	for (size_t i = 0; i < st->reserved_count; i++)
		if (strcmp(st->reserved[i], guest) == 0) {
			*status =
			    lu_err(st, err, RELAY_E_REFUSED, 0,
			           "guest name %s is in use: another acquisition for it is running", guest);
			goto done;
		}
	for (size_t i = 0; i < json_object_array_length(all); i++) {
		json_object *rec = json_object_array_get_idx(all, i);
		active++;
		const char *g = lu_get_string(rec, "guest");
		if (g && strcmp(g, guest) == 0) {
			*status =
			    lu_err(st, err, RELAY_E_REFUSED, 0,
			           "guest name %s is in use by lease %s (purpose %s); release it or choose "
			           "another name",
			           guest, lu_get_string(rec, "vm"),
			           lu_get_string(rec, "purpose") ? lu_get_string(rec, "purpose") : "unknown");
			goto done;
		}
	}
	if ((int)active >= st->max_guests) {
		*status = lu_err(st, err, RELAY_E_CAPACITY, 0,
		                 "machine-local already holds %zu of its %d guests; release one or raise "
		                 "options.maxGuests",
		                 active, st->max_guests);
		goto done;
	}
	if (st->reserved_count >= sizeof st->reserved / sizeof st->reserved[0] ||
	    (st->reserved[st->reserved_count] = strdup(guest)) == NULL) {
		*status =
		    lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory reserving guest %s", guest);
		goto done;
	}
	st->reserved_count++;
	ok = true;
done:
	pthread_mutex_unlock(&st->lock);
	json_object_put(all);
	return ok;
}

static void release_name(local_state *st, const char *guest)
{
	pthread_mutex_lock(&st->lock);
	for (size_t i = 0; i < st->reserved_count; i++)
		if (strcmp(st->reserved[i], guest) == 0) {
			free(st->reserved[i]);
			st->reserved[i] = st->reserved[--st->reserved_count];
			break;
		}
	pthread_mutex_unlock(&st->lock);
}

static json_object *int_obj(int64_t v)
{
	return json_object_new_int64(v);
}

relay_status sandbox_acquire(local_state *st, json_object *spec, relay_call *call, json_object **record_out,
                             relay_error *err)
{
	*record_out = NULL;
	const char *guest = lu_get_string(spec, "guest");
	const char *purpose = lu_get_string(spec, "purpose");
	const char *task = lu_get_string(spec, "task");
	const char *image_key = lu_get_string(spec, "image");
	const char *network = lu_get_string(spec, "network");
	bool vnc = lu_get_bool(spec, "vnc", false);
	int64_t ttl_ms = lu_get_int(spec, "ttlMs", 15 * 60 * 1000);
	int64_t deadline_ms = lu_get_int(spec, "deadlineMs", 0);
	if (!lu_valid_guest_name(guest))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "acquire needs \"guest\" matching ^[a-z0-9][a-z0-9-]{0,47}$");
	if (!lu_valid_token(purpose, 128))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "acquire needs \"purpose\": 1 to 128 of A-Z, a-z, 0-9, '.', '_' and '-'");
	if (ttl_ms <= 0)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "acquire needs a positive \"ttlMs\"");
	if (network == NULL)
		network = st->default_network;
	if (strcmp(network, "nat") != 0 && strcmp(network, "internet") != 0)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "network must be nat or internet, not %s",
		              network);
	const local_image *image = sandbox_find_image(st, image_key);
	if (image == NULL) {
		char keys[512] = "";
		size_t used = 0;
		for (size_t i = 0; i < st->image_count && used < sizeof keys - 1; i++)
			used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", i ? ", " : "",
			                         st->images[i].key);
		return lu_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		              "unknown image %s; machine-local offers: %s", image_key ? image_key : "(none)",
		              keys);
	}
	struct stat sb;
	if (stat(image->tree, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return lu_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, errno,
		              "image %s is not available: its tree %s is missing", image->key, image->tree);
	if (st->rootless && strcmp(image->tree, "/") == 0)
		return lu_err(
		    st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		    "image %s (the host root) needs a relay running as root: without root the kernel does "
		    "not "
		    "let an overlay use / (it has mounts below it); configure a base tree in options.images "
		    "instead",
		    image->key);
	bool with_helper = st->helper_path != NULL;
	if (strcmp(network, "internet") == 0 && !with_helper)
		return lu_err(
		    st, err, RELAY_E_REFUSED, 0,
		    "network internet needs a user-mode network helper and none is usable (%s); install "
		    "slirp4netns or passt (pasta), or use nat for loopback only",
		    st->rootless
		        ? "the relay is not root, and helpers are only used when it is"
		        : "neither slirp4netns nor pasta is on PATH, or options.networkHelper is none");
	bool display = st->display_enabled && sandbox_image_has(st, image->tree, "usr/bin/Xvfb");
	if (vnc && !(display && sandbox_image_has(st, image->tree, "usr/bin/x11vnc")))
		return lu_err(st, err, RELAY_E_REFUSED, 0,
		              "vnc needs Xvfb and x11vnc in image %s (Debian: apt-get install xvfb x11vnc)%s",
		              image->key, st->display_enabled ? "" : ", and options.display must not be off");
	if (st->host->call_cancelled(call))
		return lu_err(st, err, RELAY_E_CANCELLED, 0, "acquire cancelled before anything was leased");
	relay_status status = RELAY_E_INTERNAL;
	if (!reserve_name(st, guest, err, &status))
		return status;

	json_object *record = NULL;
	char *lease_dir = NULL, *cgroup = NULL;
	char vm[128], lease_id[33], suffix[7];
	lu_random_hex(st, suffix, 6);
	lu_random_hex(st, lease_id, 32);
	snprintf(vm, sizeof vm, "local-%s-%s", guest, suffix);
	lease_dir = lease_dir_of(st, vm);
	if (lease_dir == NULL) {
		status = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto out;
	}
	if (mkdir(lease_dir, 0700) != 0) {
		status = lu_err(st, err, RELAY_E_IO, errno, "cannot create the lease folder %s", lease_dir);
		goto out;
	}
	int64_t now = st->host->now_ms();
	int64_t expires = now + ttl_ms;
	if (deadline_ms > 0 && expires > deadline_ms)
		expires = deadline_ms;
	local_user user = st->user;
	record = json_object_new_object();
	json_object_object_add(record, "schemaVersion", json_object_new_int(1));
	json_object_object_add(record, "vm", json_object_new_string(vm));
	json_object_object_add(record, "guest", json_object_new_string(guest));
	json_object_object_add(record, "task", task ? json_object_new_string(task) : NULL);
	json_object_object_add(record, "purpose", json_object_new_string(purpose));
	json_object_object_add(record, "image", json_object_new_string(image->key));
	json_object_object_add(record, "lease_id", json_object_new_string(lease_id));
	json_object_object_add(record, "state", json_object_new_string("provisioning"));
	json_object_object_add(record, "createdAtMs", int_obj(now));
	json_object_object_add(record, "expiresAtMs", int_obj(expires));
	json_object_object_add(record, "deadlineMs", deadline_ms > 0 ? int_obj(deadline_ms) : NULL);
	json_object_object_add(record, "ttlMs", int_obj(ttl_ms));
	json_object_object_add(record, "graceMs", int_obj(st->grace_ms));
	json_object *net = json_object_new_object();
	json_object_object_add(net, "mode", json_object_new_string(network));
	json_object_object_add(net, "helper", with_helper ? json_object_new_string(st->helper_name) : NULL);
	json_object_object_add(net, "access", json_object_new_string(with_helper ? "outbound" : "loopback"));
	json_object_object_add(record, "network", net);
	json_object_object_add(record, "vnc", json_object_new_boolean(vnc));
	json_object_object_add(record, "display", NULL);
	json_object_object_add(record, "console", NULL);
	json_object *ju = json_object_new_object();
	json_object_object_add(ju, "name", json_object_new_string(user.name));
	json_object_object_add(ju, "uid", int_obj(user.uid));
	json_object_object_add(ju, "gid", int_obj(user.gid));
	json_object_object_add(ju, "home", json_object_new_string(user.home));
	json_object_object_add(record, "guestUser", ju);
	lease_set_owner(st, record);
	json_object *paths = json_object_new_object();
	char buf[PATH_MAX];
	json_object_object_add(paths, "leaseDir", json_object_new_string(lease_dir));
	snprintf(buf, sizeof buf, "%s/upper", lease_dir);
	json_object_object_add(paths, "upper", json_object_new_string(buf));
	snprintf(buf, sizeof buf, "%s/work", lease_dir);
	json_object_object_add(paths, "work", json_object_new_string(buf));
	snprintf(buf, sizeof buf, "%s/merged", lease_dir);
	json_object_object_add(paths, "merged", json_object_new_string(buf));
	json_object_object_add(paths, "lower", json_object_new_string(image->tree));
	json_object_object_add(paths, "cgroup", NULL);
	json_object_object_add(record, "paths", paths);
	json_object *pids = json_object_new_object();
	json_object_object_add(record, "pids", pids);
	int e = lease_write(st, record, true);
	if (e == 0)
		e = lease_write_expires(st, record);
	if (e != 0) {
		status = lu_err(st, err, RELAY_E_IO, e, "cannot write the lease record in %s", lease_dir);
		lu_remove_tree(lease_dir);
		goto out;
	}

	status = prepare_upper(st, image->tree, lease_dir, guest, &user, with_helper, err);
	if (status != RELAY_OK)
		goto fail;
	cgroup = make_cgroup(st, vm, record);
	if (cgroup)
		json_object_object_add(paths, "cgroup", json_object_new_string(cgroup));
	/* Durable before the init starts: a relay killed during the launch leaves a record whose
	 * cgroup a reaper can empty, even before the init's pid is known (issue 17 defect 6). */
	if (cgroup)
		lease_write(st, record, true);
	launch_result lr;
	status = launch_init(st, lease_dir, image->tree, guest, cgroup, with_helper, &lr, err);
	if (lr.init_pid > 0) {
		json_object *init = json_object_new_object();
		json_object_object_add(init, "pid", int_obj(lr.init_pid));
		json_object_object_add(init, "startTime", int_obj((int64_t)lu_proc_start(lr.init_pid)));
		json_object_object_add(pids, "init", init);
	}
	if (lr.helper_pid > 0) {
		json_object *helper = json_object_new_object();
		json_object_object_add(helper, "pid", int_obj(lr.helper_pid));
		json_object_object_add(helper, "startTime", int_obj((int64_t)lu_proc_start(lr.helper_pid)));
		json_object_object_add(helper, "name", json_object_new_string(st->helper_name));
		json_object_object_add(pids, "helper", helper);
	}
	if (status != RELAY_OK)
		goto fail;
	json_object *ns = json_object_new_object();
	json_object_object_add(ns, "pid", int_obj((int64_t)lu_ns_inode(lr.init_pid, "pid")));
	json_object_object_add(ns, "mnt", int_obj((int64_t)lu_ns_inode(lr.init_pid, "mnt")));
	json_object_object_add(ns, "net", int_obj((int64_t)lu_ns_inode(lr.init_pid, "net")));
	json_object_object_add(ns, "user", int_obj((int64_t)lu_ns_inode(lr.init_pid, "user")));
	json_object_object_add(record, "namespaces", ns);
	if (display) {
		status = start_display(st, record, lease_dir, err);
		if (status != RELAY_OK)
			goto fail;
	}
	if (vnc) {
		status = console_prepare(st, record, err);
		if (status != RELAY_OK)
			goto fail;
	}
	if (st->host->call_cancelled(call)) {
		status = lu_err(st, err, RELAY_E_CANCELLED, 0,
		                "acquire cancelled; the half-made guest was destroyed");
		goto fail;
	}
	json_object_object_add(record, "state", json_object_new_string("running"));
	e = lease_write(st, record, true);
	if (e != 0) {
		status = lu_err(st, err, RELAY_E_IO, e, "cannot write the lease record in %s", lease_dir);
		goto fail;
	}
	*record_out = record;
	record = NULL;
	status = RELAY_OK;
	goto out;
fail : {
	relay_error derr;
	memset(&derr, 0, sizeof derr);
	if (sandbox_destroy(st, record, "failed", &derr) != RELAY_OK) {
		st->host->log(RELAY_LOG_ERROR, LOCAL_PLUGIN_NAME,
		              "a failed acquisition of %s left things behind: %s", vm, derr.message);
		/* The core must reconcile: something of the guest may remain. */
		if (status != RELAY_E_CANCELLED)
			status =
			    lu_err(st, err, RELAY_E_INDETERMINATE, derr.sys_errno, "%s; cleanup failed: %s",
			           err ? err->message : "acquire failed", derr.message);
	} else if (status != RELAY_E_CANCELLED && status != RELAY_E_IMAGE_UNAVAILABLE &&
	           status != RELAY_E_CAPACITY && err) {
		/* Everything was removed again: a definite refusal. */
		err->code = status = RELAY_E_REFUSED;
	}
}
out:
	release_name(st, guest);
	if (record)
		json_object_put(record);
	free(lease_dir);
	free(cgroup);
	return status;
}

/* ---- destroy and verify ------------------------------------------------------------ */

int sandbox_init_pidfd(json_object *record)
{
	json_object *init = lu_get_object(lu_get_object(record, "pids"), "init");
	pid_t pid = (pid_t)lu_get_int(init, "pid", 0);
	unsigned long long start = (unsigned long long)lu_get_int(init, "startTime", 0);
	return lu_pidfd_checked(pid, start);
}

int sandbox_root_fd(json_object *record)
{
	json_object *init = lu_get_object(lu_get_object(record, "pids"), "init");
	pid_t pid = (pid_t)lu_get_int(init, "pid", 0);
	unsigned long long start = (unsigned long long)lu_get_int(init, "startTime", 0);
	int pidfd = lu_pidfd_checked(pid, start);
	if (pidfd < 0) {
		errno = ESRCH;
		return -1;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
	int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int e = errno;
	/* The pid could have been reused between the two opens only if the
	 * init died; the pidfd tells. */
	struct pollfd pfd = {pidfd, POLLIN, 0};
	if (fd >= 0 && poll(&pfd, 1, 0) > 0) {
		close(fd);
		fd = -1;
		e = ESRCH;
	}
	close(pidfd);
	errno = e;
	return fd;
}

static bool wait_pidfd_exit(int pidfd, int timeout_ms)
{
	struct pollfd pfd = {pidfd, POLLIN, 0};
	for (;;) {
		int rc = poll(&pfd, 1, timeout_ms);
		if (rc < 0 && errno == EINTR)
			continue;
		return rc > 0;
	}
}

static bool kill_process(pid_t pid, unsigned long long start, int timeout_ms)
{
	int pidfd = lu_pidfd_checked(pid, start);
	if (pidfd < 0)
		return true;
	syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	bool gone = wait_pidfd_exit(pidfd, timeout_ms);
	close(pidfd);
	/* Reap it when it happens to be our child (helpers are). */
	int wst;
	waitpid(pid, &wst, WNOHANG);
	return gone;
}

/* Removes a lease folder with its record last: a folder that cannot be removed keeps the
 * record that names its guest, so the lease is still found (by purpose, by the reaper) and
 * its release is not answered before the folder is gone (issue 17 defect 6). */
static int remove_lease_folder(const char *lease_dir)
{
	int fd = open(lease_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return e == ENOENT ? 0 : e;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    strcmp(de->d_name, "lease.json") == 0)
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", lease_dir, de->d_name);
		int e = lu_remove_tree(path);
		if (e != 0 && rc == 0)
			rc = e;
	}
	closedir(d);
	return rc != 0 ? rc : lu_remove_tree(lease_dir);
}

relay_status sandbox_destroy(local_state *st, json_object *record, const char *reason, relay_error *err)
{
	(void)reason;
	const char *vm = lu_get_string(record, "vm");
	json_object *paths = lu_get_object(record, "paths");
	const char *lease_dir = lu_get_string(paths, "leaseDir");
	const char *cgroup = lu_get_string(paths, "cgroup");
	if (vm == NULL || lease_dir == NULL)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "the lease record has no vm or lease folder");
	struct stat sb;
	if (stat(lease_dir, &sb) == 0) {
		json_object_object_add(record, "state", json_object_new_string("releasing"));
		lease_write(st, record, false);
	}
	console_stop_all(st, record);
	json_object *pids = lu_get_object(record, "pids");
	json_object *init = lu_get_object(pids, "init");
	json_object *helper = lu_get_object(pids, "helper");
	bool init_gone = kill_process((pid_t)lu_get_int(init, "pid", 0),
	                              (unsigned long long)lu_get_int(init, "startTime", 0), 10000);
	bool helper_gone = kill_process((pid_t)lu_get_int(helper, "pid", 0),
	                                (unsigned long long)lu_get_int(helper, "startTime", 0), 5000);
	int cg_rc = cgroup ? remove_cgroup(cgroup) : 0;
	int rm_rc = 0;
	if (init_gone)
		rm_rc = remove_lease_folder(lease_dir);
	char detail[512];
	relay_status vs = sandbox_verify_gone(st, record, detail, sizeof detail);
	if (vs == RELAY_OK)
		return RELAY_OK;
	return lu_err(st, err, RELAY_E_UNVERIFIED, rm_rc ? rm_rc : cg_rc,
	              "destruction of %s is not confirmed: %s%s%s", vm, detail,
	              init_gone ? "" : "; the guest init did not die",
	              helper_gone ? "" : "; the network helper did not die");
}

/* Scans /proc for any process still in the guest's PID or mount namespace. */
static pid_t find_ns_member(unsigned long long pid_ns, unsigned long long mnt_ns)
{
	DIR *d = opendir("/proc");
	if (d == NULL)
		return 0;
	pid_t found = 0;
	struct dirent *de;
	while (!found && (de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		pid_t pid = (pid_t)atoi(de->d_name);
		if ((pid_ns && lu_ns_inode(pid, "pid") == pid_ns) ||
		    (mnt_ns && lu_ns_inode(pid, "mnt") == mnt_ns)) {
			unsigned long long start = lu_proc_start(pid);
			if (start && lu_proc_alive(pid, start))
				found = pid;
		}
	}
	closedir(d);
	return found;
}

static bool mounted_under(const char *dir)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f == NULL)
		return false;
	char line[4096];
	size_t dl = strlen(dir);
	bool found = false;
	while (!found && fgets(line, sizeof line, f)) {
		/* field 5 is the mount point */
		char *p = line;
		for (int i = 0; i < 4 && p; i++) {
			p = strchr(p, ' ');
			if (p)
				p++;
		}
		if (p && strncmp(p, dir, dl) == 0 && (p[dl] == ' ' || p[dl] == '/'))
			found = true;
	}
	fclose(f);
	return found;
}

relay_status sandbox_verify_gone(local_state *st, json_object *record, char *detail, size_t detail_size)
{
	(void)st;
	detail[0] = '\0';
	json_object *pids = lu_get_object(record, "pids");
	json_object *init = lu_get_object(pids, "init");
	json_object *helper = lu_get_object(pids, "helper");
	json_object *ns = lu_get_object(record, "namespaces");
	json_object *paths = lu_get_object(record, "paths");
	const char *lease_dir = lu_get_string(paths, "leaseDir");
	const char *cgroup = lu_get_string(paths, "cgroup");
	pid_t ip = (pid_t)lu_get_int(init, "pid", 0);
	if (lu_proc_alive(ip, (unsigned long long)lu_get_int(init, "startTime", 0))) {
		snprintf(detail, detail_size, "the guest init (pid %d) is still running", (int)ip);
		return RELAY_E_UNVERIFIED;
	}
	pid_t hp = (pid_t)lu_get_int(helper, "pid", 0);
	if (lu_proc_alive(hp, (unsigned long long)lu_get_int(helper, "startTime", 0))) {
		snprintf(detail, detail_size, "the network helper (pid %d) is still running", (int)hp);
		return RELAY_E_UNVERIFIED;
	}
	pid_t member = find_ns_member((unsigned long long)lu_get_int(ns, "pid", 0),
	                              (unsigned long long)lu_get_int(ns, "mnt", 0));
	if (member) {
		snprintf(detail, detail_size, "process %d is still in the guest's namespaces", (int)member);
		return RELAY_E_UNVERIFIED;
	}
	struct stat sb;
	if (lease_dir && lstat(lease_dir, &sb) == 0) {
		snprintf(detail, detail_size, "the lease folder %s (with the upper layer) still exists",
		         lease_dir);
		return RELAY_E_UNVERIFIED;
	}
	if (lease_dir && mounted_under(lease_dir)) {
		snprintf(detail, detail_size, "something is still mounted under %s", lease_dir);
		return RELAY_E_UNVERIFIED;
	}
	if (cgroup && lstat(cgroup, &sb) == 0) {
		snprintf(detail, detail_size, "the cgroup %s still exists", cgroup);
		return RELAY_E_UNVERIFIED;
	}
	snprintf(detail, detail_size,
	         "no process, namespace member, mount, folder or cgroup of the guest is left");
	return RELAY_OK;
}
