/*
 * upper.c — the upper layer of a new machine-local guest: its private
 * folders (/tmp, /var/tmp, /root, /home and the guest user's home, opaque
 * so the guest sees none of the base's entries there), and its /etc files
 * (the guest user in passwd and group, hostname, hosts, resolv.conf).
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

/* ---- the upper layer ----------------------------------------------------------- */

typedef struct upper_ctx {
	local_state *st;
	const char *tree;
	char upper[PATH_MAX];
	relay_error *err;
} upper_ctx;

/* Creates the folder `up` (an existing one is kept) with mode, owner (not
 * without root) and group: 0 or an errno. */
static int upper_dir_make(const upper_ctx *u, const char *up, mode_t mode, uid_t uid, gid_t gid)
{
	if (mkdir(up, 0700) != 0 && errno != EEXIST)
		return errno;
	if (!u->st->rootless && chown(up, uid, gid) != 0)
		return errno;
	if (chmod(up, mode) != 0)
		return errno;
	return 0;
}

/* Creates upper/<rel> as a folder with the attributes of the lower one (or
 * `mode` and root when the lower has none). */
static int upper_dir_like_lower(upper_ctx *u, const char *rel, mode_t fallback_mode)
{
	char lower[PATH_MAX], up[PATH_MAX];
	lu_tree_path(lower, sizeof lower, u->tree, rel);
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
	return upper_dir_make(u, up, mode, uid, gid);
}

/* Creates upper/<rel> as an empty opaque folder: the guest sees none of
 * the lower's entries there, and everything it writes lands in the upper
 * layer, which release deletes. */
static int upper_private_dir(upper_ctx *u, const char *rel, mode_t mode, uid_t uid, gid_t gid)
{
	char up[PATH_MAX];
	lu_textf(up, sizeof up, "%s/%s", u->upper, rel);
	int rc = upper_dir_make(u, up, mode, uid, gid);
	if (rc != 0)
		return rc;
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
	lu_tree_path(lower, sizeof lower, u->tree, rel);
	size_t len = 0;
	char *text = lu_read_small(lower, 4u << 20, &len);
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

relay_status upper_prepare(local_state *st, const char *tree, const char *lease_dir, const char *guest,
                           const local_user *user, bool with_helper, bool egress, relay_error *err)
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
	else if (egress)
		snprintf(
		    line, sizeof line,
		    "# machine-local: the relay's egress resolver (docs/egress.md)\nnameserver 127.0.0.1\n");
	else
		snprintf(line, sizeof line, "# machine-local: this guest has loopback networking only\n");
	STEP("/etc/resolv.conf", upper_file(&u, "etc/resolv.conf", line, strlen(line)));
#undef STEP
	return RELAY_OK;
fail:
	return lu_err(st, err, RELAY_E_IO, rc, "cannot prepare the guest's %s in %s", step, u.upper);
}
