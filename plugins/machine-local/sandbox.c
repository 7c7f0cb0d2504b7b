/*
 * sandbox.c — making, destroying and checking one machine-local guest.
 *
 * Acquire: a lease folder, the guest's uid claim and the record first (so
 * a crash at any later point leaves something the reaper finds), then the
 * upper layer's private folders and /etc files (upper.c), the cgroups
 * (cgroup.c), the guest init, the network helper and the Xvfb display
 * (launch.c). Destroying and checking are in destroy.c.
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

bool sandbox_image_has(local_state *st, const char *tree, const char *rel_path)
{
	(void)st;
	char path[PATH_MAX];
	lu_tree_path(path, sizeof path, tree, rel_path);
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0111);
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

/* The record's "bounds": the guest's uid and the rlimits every guest
 * command gets (null = none); cgroup_make adds the cgroup limits. A root
 * guest user gets no RLIMIT_NPROC: the kernel exempts the host's uid 0,
 * and without root the guest's root is the relay's own user, whose other
 * processes the count would include on kernels before 5.14. */
static json_object *bounds_record(local_state *st, const local_user *user)
{
	int64_t data_bytes = local_data_bound(st);
	json_object *b = json_object_new_object();
	json_object_object_add(b, "guestUid", int_obj(user->uid));
	json_object_object_add(
	    b, "processes", st->bound_processes > 0 && user->uid != 0 ? int_obj(st->bound_processes) : NULL);
	json_object_object_add(b, "dataBytes", data_bytes > 0 ? int_obj(data_bytes) : NULL);
	json_object_object_add(b, "fileBytes",
	                       st->bound_file_bytes > 0 ? int_obj(st->bound_file_bytes) : NULL);
	return b;
}

relay_status sandbox_precondition(local_state *st, const local_image *image, relay_error *err)
{
	struct stat sb;
	if (stat(image->tree, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return lu_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, errno,
		              "image %s is not available: its tree %s is missing (fix: create the tree, e.g. "
		              "with debootstrap, or remove it from options.images)",
		              image->key, image->tree);
	if (st->rootless && !st->subids && !st->rootless_map_user)
		return lu_err(st, err, RELAY_E_REFUSED, 0,
		              "without root a guest runs as a subordinate id of the relay's user, and %s; or "
		              "let guests run as the relay's own user (mapped to guest root, so they can "
		              "reach that user's processes and files) with MCP_RELAY_LOCAL_OPTIONS "
		              "{\"rootless\": {\"withoutSubids\": \"map-user\"}}",
		              st->subids_reason);
	return RELAY_OK;
}

/* An acquire spec, checked. */
typedef struct acquire_req {
	const char *guest, *purpose, *task, *network;
	bool vnc, with_helper, display;
	bool egress; /* allow or internet: loopback only, the relay's egress proxy the one way out */
	int64_t ttl_ms, deadline_ms;
	const local_image *image;
} acquire_req;

static relay_status check_spec(local_state *st, json_object *spec, acquire_req *q, relay_error *err)
{
	const char *guest = q->guest = lu_get_string(spec, "guest");
	const char *purpose = q->purpose = lu_get_string(spec, "purpose");
	q->task = lu_get_string(spec, "task");
	const char *image_key = lu_get_string(spec, "image");
	const char *network = lu_get_string(spec, "network");
	bool vnc = q->vnc = lu_get_bool(spec, "vnc", false);
	int64_t ttl_ms = q->ttl_ms = lu_get_int(spec, "ttlMs", 15 * 60 * 1000);
	q->deadline_ms = lu_get_int(spec, "deadlineMs", 0);
	if (!lu_valid_guest_name(guest))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "acquire needs \"guest\" matching ^[a-z0-9][a-z0-9-]{0,47}$");
	if (!lu_valid_token(purpose, 128))
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "acquire needs \"purpose\": 1 to 128 of A-Z, a-z, 0-9, '.', '_' and '-'");
	if (ttl_ms <= 0)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "acquire needs a positive \"ttlMs\"");
	if (network == NULL)
		network = st->kit.default_network;
	q->network = network;
	if (strcmp(network, "nat") != 0 && strcmp(network, "internet") != 0 && strcmp(network, "allow") != 0)
		return lu_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "network must be nat, internet or allow, not %s", network);
	q->egress = strcmp(network, "nat") != 0;
	const local_image *image = q->image = sandbox_find_image(st, image_key);
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
	relay_status ready = sandbox_precondition(st, image, err);
	if (ready != RELAY_OK)
		return ready;
	/* Under allow and internet the guest gets no helper: its namespace has
	 * loopback only, and the relay's egress proxy listens there. */
	q->with_helper = st->helper_path != NULL && !q->egress;
	bool display = q->display = st->display_enabled && sandbox_image_has(st, image->tree, "usr/bin/Xvfb");
	if (vnc && !(display && sandbox_image_has(st, image->tree, "usr/bin/x11vnc")))
		return lu_err(st, err, RELAY_E_REFUSED, 0,
		              "vnc needs Xvfb and x11vnc in image %s (Debian: apt-get install xvfb x11vnc)%s",
		              image->key, st->display_enabled ? "" : ", and options.display must not be off");
	return RELAY_OK;
}

/* The record of a new lease (state "provisioning"). */
static json_object *new_record(local_state *st, const acquire_req *q, const char *vm, const char *lease_id,
                               const char *lease_dir, const local_user *user)
{
	int64_t now = st->host->now_ms();
	int64_t expires = now + q->ttl_ms;
	if (q->deadline_ms > 0 && expires > q->deadline_ms)
		expires = q->deadline_ms;
	json_object *record = json_object_new_object();
	json_object_object_add(record, "schemaVersion", json_object_new_int(1));
	json_object_object_add(record, "vm", json_object_new_string(vm));
	json_object_object_add(record, "guest", json_object_new_string(q->guest));
	json_object_object_add(record, "task", q->task ? json_object_new_string(q->task) : NULL);
	json_object_object_add(record, "purpose", json_object_new_string(q->purpose));
	json_object_object_add(record, "image", json_object_new_string(q->image->key));
	json_object_object_add(record, "lease_id", json_object_new_string(lease_id));
	json_object_object_add(record, "state", json_object_new_string("provisioning"));
	json_object_object_add(record, "createdAtMs", int_obj(now));
	json_object_object_add(record, "expiresAtMs", int_obj(expires));
	json_object_object_add(record, "deadlineMs", q->deadline_ms > 0 ? int_obj(q->deadline_ms) : NULL);
	json_object_object_add(record, "ttlMs", int_obj(q->ttl_ms));
	json_object_object_add(record, "graceMs", int_obj(st->grace_ms));
	json_object *net = json_object_new_object();
	json_object_object_add(net, "mode", json_object_new_string(q->network));
	json_object_object_add(net, "helper",
	                       q->with_helper ? json_object_new_string(st->helper_name) : NULL);
	json_object_object_add(net, "access",
	                       json_object_new_string(q->with_helper ? "outbound"
	                                              : q->egress    ? "egress"
	                                                             : "loopback"));
	json_object_object_add(record, "network", net);
	json_object_object_add(record, "vnc", json_object_new_boolean(q->vnc));
	json_object_object_add(record, "display", NULL);
	json_object_object_add(record, "console", NULL);
	json_object *ju = json_object_new_object();
	json_object_object_add(ju, "name", json_object_new_string(user->name));
	json_object_object_add(ju, "uid", int_obj(user->uid));
	json_object_object_add(ju, "gid", int_obj(user->gid));
	json_object_object_add(ju, "home", json_object_new_string(user->home));
	/* Who the guest user is on the host (a subordinate id without root). */
	json_object_object_add(ju, "hostUid", int_obj(subids_host_uid(st, user->uid)));
	json_object_object_add(ju, "hostGid", int_obj(subids_host_gid(st, user->gid)));
	json_object_object_add(record, "guestUser", ju);
	json_object_object_add(record, "bounds", bounds_record(st, user));
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
	json_object_object_add(paths, "lower", json_object_new_string(q->image->tree));
	json_object_object_add(paths, "cgroup", NULL);
	json_object_object_add(record, "paths", paths);
	json_object *pids = json_object_new_object();
	json_object_object_add(record, "pids", pids);
	return record;
}

/* Makes the guest's parts in order: the upper layer, the cgroups, the init
 * (and helper), the display, the console. Records what was started in
 * `record` as it goes, so a failure can destroy exactly that. */
static relay_status start_parts(local_state *st, const acquire_req *q, const char *vm, const char *lease_dir,
                                const local_user *user, json_object *record, relay_error *err)
{
	json_object *pids = lu_get_object(record, "pids");
	relay_status status;
	status = upper_prepare(st, q->image->tree, lease_dir, q->guest, user, q->with_helper, q->egress, err);
	if (status != RELAY_OK)
		return status;
	cgroup_make(st, vm, record);
	/* Durable before the init starts: a relay killed during the launch
	 * leaves a record whose cgroups a reaper can empty, even before the
	 * init's pid is known (issue 17 defect 6). */
	const char *cgroups[8];
	if (cgroup_paths(record, cgroups, 8) > 0)
		lease_write(st, record, true);
	launch_result lr;
	status = launch_init(st, lease_dir, q->image->tree, q->guest, record, q->with_helper, &lr, err);
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
		return status;
	json_object *ns = json_object_new_object();
	json_object_object_add(ns, "pid", int_obj((int64_t)lu_ns_inode(lr.init_pid, "pid")));
	json_object_object_add(ns, "mnt", int_obj((int64_t)lu_ns_inode(lr.init_pid, "mnt")));
	json_object_object_add(ns, "net", int_obj((int64_t)lu_ns_inode(lr.init_pid, "net")));
	json_object_object_add(ns, "user", int_obj((int64_t)lu_ns_inode(lr.init_pid, "user")));
	json_object_object_add(record, "namespaces", ns);
	if (q->display) {
		status = launch_display(st, record, lease_dir, err);
		if (status != RELAY_OK)
			return status;
	}
	if (q->vnc) {
		status = console_prepare(st, record, err);
		if (status != RELAY_OK)
			return status;
	}
	return RELAY_OK;
}

relay_status sandbox_acquire(local_state *st, json_object *spec, relay_call *call, json_object **record_out,
                             relay_error *err)
{
	*record_out = NULL;
	acquire_req q = {0};
	relay_status status = check_spec(st, spec, &q, err);
	if (status != RELAY_OK)
		return status;
	const char *guest = q.guest;
	if (st->host->call_cancelled(call))
		return lu_err(st, err, RELAY_E_CANCELLED, 0, "acquire cancelled before anything was leased");
	status = RELAY_E_INTERNAL;
	if (!reserve_name(st, guest, err, &status))
		return status;

	json_object *record = NULL;
	char *lease_dir = NULL;
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
	local_user user = st->user;
	status = uids_claim(st, vm, &user, err);
	if (status != RELAY_OK) {
		rmdir(lease_dir);
		goto out;
	}
	record = new_record(st, &q, vm, lease_id, lease_dir, &user);
	int e = lease_write(st, record, true);
	if (e == 0)
		e = lease_write_expires(st, record);
	if (e != 0) {
		status = lu_err(st, err, RELAY_E_IO, e, "cannot write the lease record in %s", lease_dir);
		lu_remove_tree(lease_dir);
		uids_release(st, vm, user.uid);
		goto out;
	}

	status = start_parts(st, &q, vm, lease_dir, &user, record, err);
	if (status != RELAY_OK)
		goto fail;
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
	return status;
}
