/*
 * xfer.c — transport push and pull for machine-local guests.
 *
 * Both directions are pax tar streams (libarchive) between two threads of
 * the relay, through a queue in memory (stream_queue: the sender's read
 * buffers are lent to the receiver, not copied). SHA-256 is checked on both
 * sides and the two lists of {path, bytes, sha256} must be equal
 * (RELAY_E_INTEGRITY otherwise):
 *   push: the host hashes each file as it reads it; the guest side reads
 *         each file it wrote back through the guest's own view (the
 *         overlay) and hashes it, in a verifier thread beside the writing;
 *   pull: the guest side hashes each file as it reads it; the host hashes
 *         what it writes; on any failure nothing is left at local_path.
 *
 * Guest paths are opened relative to the guest's root (/proc/<init>/root),
 * one component at a time with O_NOFOLLOW: a path through a symbolic link,
 * "." or "..", or into anything but the guest's overlay or tmpfs is
 * refused, so nothing is ever read or written outside the guest; a pull
 * also refuses links, devices, FIFOs and sockets anywhere in the tree.
 * A tree pushed into a new folder is written straight into the upper layer
 * (see direct_upper_dir).
 *
 * This file: push and pull. xfer_facts.c, xfer_paths.c, xfer_send.c and
 * xfer_receive.c hold the parts (xfer_int.h).
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "local.h"
#include "xfer_int.h"

/* ---- push -------------------------------------------------------------------- */

/* When a tree goes into a folder that did not exist (it was just made
 * through the guest's overlay), its files are written straight into the
 * upper layer's copy of that folder: the overlay has never looked inside
 * it, so it finds them there as it would have made them, and the tree is
 * written at the speed of the underlying file system. The verifier reads
 * every file back through the overlay (the guest's view). Returns the upper
 * folder's fd, or -1 to write through the overlay.
 * Both folders must be the same inode (same-file-system layers report the
 * real inode number). */
static int direct_upper_dir(guest_ctx *g, int over_fd, char **comps, int ncomp)
{
	const char *upper = lu_get_string(lu_get_object(g->conn->record, "paths"), "upper");
	struct statfs sf;
	if (upper == NULL || fstatfs(over_fd, &sf) != 0 || sf.f_type != OVERLAYFS_MAGIC)
		return -1;
	int root = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0)
		return -1;
	guest_ctx plain = {g->st, g->conn, -1, false};
	int fd = open_dirs(&plain, root, comps, ncomp, false);
	close(root);
	if (fd < 0)
		return -1;
	struct stat a, b;
	struct statfs uf;
	if (fstat(fd, &a) != 0 || fstat(over_fd, &b) != 0 || a.st_ino != b.st_ino || fstatfs(fd, &uf) != 0 ||
	    uf.f_type == OVERLAYFS_MAGIC) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Opens the host side of a push: a folder (tree) or the folder holding a
 * regular file; sets s->base_fd and s->leaf. *src_fd and *src_copy belong
 * to the caller, also on failure. */
static relay_status open_push_source(local_state *st, const char *local_path, bool tree, sender *s,
                                     int *src_fd, char **src_copy, relay_error *err)
{
	relay_status status = RELAY_OK;
	if (tree) {
		*src_fd = open(local_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (*src_fd < 0) {
			status = lu_err(st, err, errno == ENOENT ? RELAY_E_NOT_FOUND : RELAY_E_UNSAFE_PATH,
			                errno, "push source %s is not a folder (or is a symbolic link): %s",
			                local_path, strerror(errno));
			return status;
		}
		s->leaf = NULL;
		s->base_fd = *src_fd;
	} else {
		*src_copy = strdup(local_path);
		char *slash = *src_copy ? strrchr(*src_copy, '/') : NULL;
		const char *dir = ".";
		if (slash == *src_copy)
			dir = "/";
		else if (slash) {
			*slash = '\0';
			dir = *src_copy;
		}
		*src_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		s->leaf = slash ? slash + 1 : *src_copy;
		struct stat sb;
		if (*src_fd < 0 || s->leaf == NULL ||
		    fstatat(*src_fd, s->leaf, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			status = lu_err(st, err, RELAY_E_NOT_FOUND, errno,
			                "push source %s cannot be read: %s", local_path, strerror(errno));
			return status;
		}
		if (!S_ISREG(sb.st_mode)) {
			status =
			    lu_err(st, err, RELAY_E_UNSAFE_PATH, 0,
			           "push source %s is not a regular file (use RELAY_XFER_TREE for folders)",
			           local_path);
			return status;
		}
		s->base_fd = *src_fd;
	}
	return status;
}

relay_status xfer_push(local_state *st, local_conn *conn, const char *local_path, const char *remote_path,
                       relay_call *call, unsigned flags, char **facts_out, relay_error *err)
{
	/* A call cancelled before the first byte moves (plugin-test check 61);
	 * the sender and the receiver ask again between tree entries and per
	 * chunk of a file (checks 68 and 69). */
	if (st->host->call_cancelled(call))
		return lu_err(st, err, RELAY_E_CANCELLED, 0, "push cancelled before it began");
	const bool tree = (flags & RELAY_XFER_TREE) != 0;
	relay_status status = RELAY_OK;
	guest_ctx g = {st, conn, -1, !st->rootless || subids_guest_mapped(st, conn->record)};
	sender s;
	receiver r;
	memset(&s, 0, sizeof s);
	memset(&r, 0, sizeof r);
	int src_fd = -1, parent_fd = -1, dest_fd = -1, upper_fd = -1;
	char pathbuf[PATH_MAX];
	char *comps[PATH_MAX / 2];
	int ncomp = 0;
	char *src_copy = NULL;

	int e = split_guest_path(remote_path, pathbuf, sizeof pathbuf, comps, PATH_MAX / 2, &ncomp);
	if (e != 0 || ncomp == 0) {
		status = lu_err(
		    st, err, RELAY_E_UNSAFE_PATH, e ? e : EINVAL,
		    "push destination %s refused: it must be an absolute guest path below / without \".\" "
		    "or \"..\"",
		    remote_path);
		goto cleanup;
	}
	/* The host side: a regular file, or a folder for a tree. */
	status = open_push_source(st, local_path, tree, &s, &src_fd, &src_copy, err);
	if (status != RELAY_OK)
		goto cleanup;
	/* The guest side: the folder holding the destination, made as needed. */
	g.root_fd = sandbox_root_fd(conn->record);
	if (g.root_fd < 0) {
		status = lu_err(st, err, RELAY_E_TRANSIENT, errno,
		                "guest %s is not running (its init is gone)", conn->vm);
		goto cleanup;
	}
	parent_fd = open_dirs(&g, g.root_fd, comps, ncomp - 1, true);
	if (parent_fd < 0) {
		status = path_error(&g, err, errno, "push destination", remote_path);
		goto cleanup;
	}
	if (!writable_fs(parent_fd)) {
		status = lu_err(
		    st, err, RELAY_E_UNSAFE_PATH, 0,
		    "push destination %s refused: only the guest's own files (overlay or tmpfs) are written",
		    remote_path);
		goto cleanup;
	}
	const char *leaf = comps[ncomp - 1];
	if (tree) {
		bool fresh = mkdirat(parent_fd, leaf, 0700) == 0;
		if (fresh && g.chown_files)
			fchownat(parent_fd, leaf, conn->uid, conn->gid, AT_SYMLINK_NOFOLLOW);
		dest_fd = openat(parent_fd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dest_fd < 0) {
			status = path_error(&g, err, errno == ELOOP ? ELOOP : errno, "push destination",
			                    remote_path);
			goto cleanup;
		}
		if (!writable_fs(dest_fd)) {
			status = lu_err(
			    st, err, RELAY_E_UNSAFE_PATH, 0,
			    "push destination %s refused: only the guest's own files (overlay or tmpfs) are "
			    "written",
			    remote_path);
			goto cleanup;
		}
		upper_fd = fresh ? direct_upper_dir(&g, dest_fd, comps, ncomp) : -1;
		r.direct = upper_fd >= 0;
		st->host->log(RELAY_LOG_DEBUG, LOCAL_PLUGIN_NAME, "push of %s into %s: %s", local_path,
		              remote_path,
		              r.direct ? "a new folder, written into the upper layer directly"
		                       : "an existing folder, written through the overlay");
		r.base_fd = r.direct ? upper_fd : dest_fd;
		r.single_name = NULL;
	} else {
		r.base_fd = parent_fd;
		r.single_name = leaf;
	}
	s.st = st;
	s.call = call;
	r.st = st;
	r.g = &g;
	r.dest_label = conn->vm;
	r.call = call;
	verifier v;
	int vrc = verifier_start(&v, &r, tree ? dest_fd : parent_fd);
	if (vrc != 0) {
		status = lu_err(st, err, RELAY_E_IO, vrc, "cannot start the read-back thread");
		goto cleanup;
	}
	r.verifier = &v;
	status = run_transfer(&s, &r, err);
	verifier_finish(&v, status != RELAY_OK);
	if (status == RELAY_OK && v.status != RELAY_OK)
		status = lu_err(st, err, v.status, 0, "%s", v.message);
	/* The guest side's facts are the verifier's. */
	facts_free(&r.facts);
	r.facts = v.facts;
	if (status != RELAY_OK)
		goto cleanup;
	status = facts_settle(st, &s.facts, &r.facts, local_path, remote_path, facts_out, err);
cleanup:
	facts_free(&s.facts);
	facts_free(&r.facts);
	free(src_copy);
	if (src_fd >= 0)
		close(src_fd);
	if (parent_fd >= 0)
		close(parent_fd);
	if (dest_fd >= 0)
		close(dest_fd);
	if (upper_fd >= 0)
		close(upper_fd);
	if (g.root_fd >= 0)
		close(g.root_fd);
	return status;
}

/* ---- pull -------------------------------------------------------------------- */

/* Opens the guest side of a pull: the folder holding comps[ncomp - 1],
 * which must be a regular file (a folder with `tree`) on the guest's own
 * file system. *parent_fd belongs to the caller, also on failure. */
static relay_status open_pull_source(guest_ctx *g, char **comps, int ncomp, const char *remote_path,
                                     bool tree, int *parent_fd, relay_error *err)
{
	relay_status status = RELAY_OK;
	g->root_fd = sandbox_root_fd(g->conn->record);
	if (g->root_fd < 0) {
		status = lu_err(g->st, err, RELAY_E_TRANSIENT, errno,
		                "guest %s is not running (its init is gone)", g->conn->vm);
		return status;
	}
	*parent_fd = open_dirs(g, g->root_fd, comps, ncomp - 1, false);
	if (*parent_fd < 0) {
		status = path_error(g, err, errno, "pull source", remote_path);
		return status;
	}
	if (!writable_fs(*parent_fd)) {
		status =
		    lu_err(g->st, err, RELAY_E_UNSAFE_PATH, 0,
		           "pull source %s refused: only the guest's own files (overlay or tmpfs) are read",
		           remote_path);
		return status;
	}
	struct stat sb;
	if (fstatat(*parent_fd, comps[ncomp - 1], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
		status = path_error(g, err, errno, "pull source", remote_path);
		return status;
	}
	if (S_ISLNK(sb.st_mode) || !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode))) {
		status = lu_err(g->st, err, RELAY_E_UNSAFE_PATH, 0,
		                "pull source %s is %s; only regular files and folders are pulled",
		                remote_path, S_ISLNK(sb.st_mode) ? "a symbolic link" : "a special file");
		return status;
	}
	if (tree != S_ISDIR(sb.st_mode)) {
		status = lu_err(g->st, err, RELAY_E_INVALID_ARGUMENT, 0, "pull source %s is a %s; pull it %s",
		                remote_path, S_ISDIR(sb.st_mode) ? "folder" : "file",
		                S_ISDIR(sb.st_mode) ? "with RELAY_XFER_TREE" : "without RELAY_XFER_TREE");
		return status;
	}
	return status;
}

relay_status xfer_pull(local_state *st, local_conn *conn, const char *remote_path, const char *local_path,
                       relay_call *call, unsigned flags, char **facts_out, relay_error *err)
{
	if (st->host->call_cancelled(call)) /* as push (plugin-test check 62) */
		return lu_err(st, err, RELAY_E_CANCELLED, 0, "pull cancelled before it began");
	const bool tree = (flags & RELAY_XFER_TREE) != 0;
	relay_status status = RELAY_OK;
	guest_ctx g = {st, conn, -1, false};
	sender s;
	receiver r;
	memset(&s, 0, sizeof s);
	memset(&r, 0, sizeof r);
	int parent_fd = -1, src_fd = -1, host_parent = -1, dest_fd = -1;
	bool created = false;
	char pathbuf[PATH_MAX];
	char *comps[PATH_MAX / 2];
	int ncomp = 0;
	char *local_copy = strdup(local_path);
	const char *local_leaf = NULL;

	int e = split_guest_path(remote_path, pathbuf, sizeof pathbuf, comps, PATH_MAX / 2, &ncomp);
	if (e != 0 || ncomp == 0 || local_copy == NULL) {
		status = lu_err(
		    st, err, RELAY_E_UNSAFE_PATH, e ? e : EINVAL,
		    "pull source %s refused: it must be an absolute guest path without \".\" or \"..\"",
		    remote_path);
		goto cleanup;
	}
	status = open_pull_source(&g, comps, ncomp, remote_path, tree, &parent_fd, err);
	if (status != RELAY_OK)
		goto cleanup;
	/* The host side: local_path must not exist. */
	char *slash = strrchr(local_copy, '/');
	const char *hdir = ".";
	if (slash == local_copy)
		hdir = "/";
	else if (slash) {
		*slash = '\0';
		hdir = local_copy;
	}
	local_leaf = slash ? slash + 1 : local_copy;
	host_parent = open(hdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (host_parent < 0 || local_leaf[0] == '\0' || strcmp(local_leaf, ".") == 0 ||
	    strcmp(local_leaf, "..") == 0) {
		status = lu_err(st, err, RELAY_E_NOT_FOUND, errno,
		                "pull destination %s: its folder cannot be opened", local_path);
		goto cleanup;
	}
	if (tree) {
		if (mkdirat(host_parent, local_leaf, 0700) != 0) {
			status =
			    lu_err(st, err, errno == EEXIST ? RELAY_E_INVALID_ARGUMENT : RELAY_E_IO, errno,
			           "pull destination %s %s", local_path,
			           errno == EEXIST ? "already exists; it must not" : "cannot be created");
			goto cleanup;
		}
		created = true;
		dest_fd = openat(host_parent, local_leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		src_fd = openat(parent_fd, comps[ncomp - 1], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dest_fd < 0 || src_fd < 0) {
			status = lu_err(st, err, RELAY_E_IO, errno,
			                "cannot open the folders of the pull of %s", remote_path);
			goto cleanup;
		}
		s.base_fd = src_fd;
		s.leaf = NULL;
		r.base_fd = dest_fd;
		r.single_name = NULL;
	} else {
		struct stat hs;
		if (fstatat(host_parent, local_leaf, &hs, AT_SYMLINK_NOFOLLOW) == 0) {
			status = lu_err(st, err, RELAY_E_INVALID_ARGUMENT, EEXIST,
			                "pull destination %s already exists; it must not", local_path);
			goto cleanup;
		}
		s.base_fd = parent_fd;
		s.leaf = comps[ncomp - 1];
		r.base_fd = host_parent;
		r.single_name = local_leaf;
		created = true; /* receive_file creates it O_EXCL */
	}
	s.st = st;
	s.call = call;
	s.refuse_links_are_unsafe = true;
	r.st = st;
	r.g = NULL;
	r.dest_label = local_path;
	r.call = call;
	status = run_transfer(&s, &r, err);
	if (status != RELAY_OK)
		goto cleanup;
	status = facts_settle(st, &s.facts, &r.facts, remote_path, NULL, facts_out, err);
cleanup:
	if (status != RELAY_OK && created && host_parent >= 0 && local_leaf) {
		char full[PATH_MAX];
		if (local_path[0] == '/' || strcmp(local_copy, local_path) != 0)
			snprintf(full, sizeof full, "%s", local_path);
		else
			snprintf(full, sizeof full, "./%s", local_path);
		lu_remove_tree(full);
	}
	facts_free(&s.facts);
	facts_free(&r.facts);
	free(local_copy);
	if (parent_fd >= 0)
		close(parent_fd);
	if (src_fd >= 0)
		close(src_fd);
	if (host_parent >= 0)
		close(host_parent);
	if (dest_fd >= 0)
		close(dest_fd);
	if (g.root_fd >= 0)
		close(g.root_fd);
	return status;
}
