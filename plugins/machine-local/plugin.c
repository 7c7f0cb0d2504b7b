/*
 * plugin.c — machine-local: the embedded default machine backend. One
 * shared object providing the machine kind (lease, renew, inspect, release
 * Linux namespace sandboxes) and the transport kind (exec, push, pull in
 * them). docs/machine-local.md describes what a local guest is, its
 * isolation, options, lease records and reaping.
 *
 * Options are parsed in options.c, the machine ops are in machine_ops.c;
 * this file holds init and fini, the transport ops and the descriptor.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/machine_config.h"
#include "relay_kit/xfer.h"

/* The guest init program, embedded at build time (init_blob.c). */
extern const unsigned char machine_local_init_start[];
extern const unsigned char machine_local_init_end[];

/* ---- facts of the host -------------------------------------------------------- */

static void detect_helper(local_state *st)
{
	st->slirp_path = lu_find_program("slirp4netns");
	st->pasta_path = lu_find_program("pasta");
	const char *c = st->helper_choice;
	if (strcmp(c, "none") == 0) {
		/* loopback only, by choice */
	} else if (st->rootless && strcmp(c, "auto") == 0 && st->pasta_path) {
		st->helper_path = st->pasta_path;
		/* Without root auto prefers pasta: it joins the guest's user
		 * namespace with its sandbox, slirp4netns only without (net.c). */
		snprintf(st->helper_name, sizeof st->helper_name, "pasta");
	} else if ((strcmp(c, "auto") == 0 || strcmp(c, "slirp4netns") == 0) && st->slirp_path) {
		st->helper_path = st->slirp_path;
		snprintf(st->helper_name, sizeof st->helper_name, "slirp4netns");
	} else if ((strcmp(c, "auto") == 0 || strcmp(c, "pasta") == 0) && st->pasta_path) {
		st->helper_path = st->pasta_path;
		snprintf(st->helper_name, sizeof st->helper_name, "pasta");
	}
	if (st->helper_path == NULL) {
		lu_textf(
		    st->helper_reason, sizeof st->helper_reason, "%s",
		    strcmp(c, "none") == 0
		        ? "options.networkHelper is none (fix: set it to auto, to use slirp4netns or pasta)"
		    : strcmp(c, "auto") == 0
		        ? "neither slirp4netns nor pasta is installed (fix: sudo apt-get install slirp4netns)"
		        : "the chosen helper is not installed (fix: sudo apt-get install slirp4netns "
		          "passt, or set options.networkHelper to auto)");
		return;
	}
	/* Both helpers make the guest's tap0 through /dev/net/tun, which a
	 * user may open only where it is 0666 (the default; some containers
	 * make it root's). */
	int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (tun >= 0) {
		close(tun);
		return;
	}
	struct stat sb;
	bool exists = stat("/dev/net/tun", &sb) == 0;
	lu_textf(st->helper_reason, sizeof st->helper_reason,
	         "%s is installed, but /dev/net/tun %s (fix: %s)", st->helper_name,
	         exists ? "cannot be opened by the relay's user" : "does not exist",
	         exists ? "sudo chmod 0666 /dev/net/tun, the kernel's default mode; a udev rule "
	                  "KERNEL==\"tun\", MODE=\"0666\" keeps it"
	                : "sudo modprobe tun");
	if (exists)
		lu_textf(st->helper_reason + strlen(st->helper_reason),
		         sizeof st->helper_reason - strlen(st->helper_reason), "; it is mode %04o",
		         (unsigned)(sb.st_mode & 07777));
	st->helper_path = NULL;
}

static relay_status make_init_memfd(local_state *st, relay_error *err)
{
	size_t len = (size_t)(machine_local_init_end - machine_local_init_start);
	int fd = memfd_create("machine-local-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return lu_err(st, err, RELAY_E_IO, errno, "cannot create the memfd for the guest init");
	const unsigned char *p = machine_local_init_start;
	size_t left = len;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			close(fd);
			return lu_err(st, err, RELAY_E_IO, e, "cannot write the guest init into its memfd");
		}
		p += w;
		left -= (size_t)w;
	}
	fchmod(fd, 0500);
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	/* Keep it far from 0..4, which the launcher's spawn rewires. */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 64);
	if (high < 0) {
		int e = errno;
		close(fd);
		return lu_err(st, err, RELAY_E_IO, e, "cannot move the guest init's memfd");
	}
	close(fd);
	fd = high;
	st->init_memfd = fd;
	return RELAY_OK;
}

static void free_state(local_state *st)
{
	if (st == NULL)
		return;
	for (size_t i = 0; i < st->image_count; i++) {
		free(st->images[i].key);
		free(st->images[i].tree);
	}
	for (size_t i = 0; i < st->mask_count; i++)
		free(st->masks[i]);
	for (size_t i = 0; i < st->reserved_count; i++)
		free(st->reserved[i]);
	rk_machine_config_free(&st->kit);
	free(st->slirp_path);
	free(st->pasta_path);
	free(st->newuidmap_path);
	free(st->newgidmap_path);
	free(st->cgroup_base);
	free(st->cgroup_v1_pids);
	free(st->cgroup_v1_memory);
	if (st->init_memfd >= 0)
		close(st->init_memfd);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

static relay_status local_init(const relay_host *host, const char *config_json, unsigned flags,
                               relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	local_state *st = calloc(1, sizeof *st);
	if (st == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	st->kit = (rk_machine){.host = host, .backend = &local_machine_backend};
	st->host = host;
	st->init_memfd = -1;
	pthread_mutex_init(&st->lock, NULL);
	relay_status status = RELAY_OK;
	json_object *cfg = NULL;
	if (flags != 0) {
		status = lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown init flags 0x%x", flags);
		goto fail;
	}
	cfg = json_tokener_parse(config_json ? config_json : "{}");
	/* The state folder goes into the mount options of overlays and into
	 * the helpers' command lines, where ',' and ':' separate. */
	static const rk_machine_config_rules rules = {.state_dir_max_bytes = 512,
	                                              .state_dir_refused = ",:\n"};
	status = rk_machine_config_read(&st->kit, cfg, &rules, err);
	if (status != RELAY_OK)
		goto fail;
	options_defaults(st);
	status = options_parse(st, lu_get_object(cfg, "options"), err);
	if (status != RELAY_OK)
		goto fail;
	st->rootless = geteuid() != 0;
	if (st->rootless)
		subids_detect(st);
	if (st->rootless && !st->subids) {
		/* Without subordinate ids the only id a guest can have is the
		 * relay user's own, as root of the guest; acquire refuses that
		 * unless options.rootless allows it (sandbox.c). */
		snprintf(st->user.name, sizeof st->user.name, "root");
		st->user.uid = 0;
		st->user.gid = 0;
		snprintf(st->user.home, sizeof st->user.home, "/root");
	}
	struct utsname un;
	uname(&un);
	if (strcmp(un.machine, "aarch64") == 0 || strcmp(un.machine, "arm64") == 0) {
		snprintf(st->arch, sizeof st->arch, "arm64");
		snprintf(st->platform, sizeof st->platform, "linux-aarch64");
	} else {
		lu_textf(st->arch, sizeof st->arch, "%s", un.machine);
		lu_textf(st->platform, sizeof st->platform, "linux-%s", un.machine);
	}
	lu_read_line("/proc/sys/kernel/random/boot_id", st->boot_id, sizeof st->boot_id);
	st->self_pid = getpid();
	st->self_start = lu_proc_start(st->self_pid);
	detect_helper(st);
	cgroup_detect(st);
	status = make_init_memfd(st, err);
	if (status != RELAY_OK)
		goto fail;
	reaper_scan(st, true);
	int rc = reaper_start(st);
	if (rc != 0) {
		status = lu_err(st, err, RELAY_E_IO, rc, "cannot start the reaper thread");
		goto fail;
	}
	json_object_put(cfg);
	*state_out = st;
	return RELAY_OK;
fail:
	if (cfg)
		json_object_put(cfg);
	free_state(st);
	return status;
}

static void local_fini(relay_plugin_state *state)
{
	local_state *st = state;
	if (st == NULL)
		return;
	/* Guests are left running: they outlive the relay until released or
	 * reaped (the pause rule). */
	reaper_stop(st);
	free_state(st);
}

/* ---- transport ops ------------------------------------------------------------ */

static void conn_free(local_conn *c)
{
	if (c == NULL)
		return;
	free(c->vm);
	free(c->lease_dir);
	if (c->record)
		json_object_put(c->record);
	free(c);
}

static relay_status t_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                           unsigned flags, relay_transport_conn **conn_out, relay_error *err)
{
	(void)call;
	local_state *st = state;
	*conn_out = NULL;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown open flags 0x%x", flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	relay_status s = RELAY_OK;
	json_object *rec = NULL;
	local_conn *c = NULL;
	const char *vm = lu_get_string(doc, "vm");
	if (doc == NULL || lease_local_facts(doc) == NULL || vm == NULL) {
		s = lu_err(st, err, RELAY_E_UNSUPPORTED, 0,
		           "machine-local's transport only reaches machine-local leases");
		goto done;
	}
	int e = 0;
	rec = lease_read(st, vm, &e);
	if (rec == NULL) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local no longer holds lease %s", vm);
		goto done;
	}
	c = calloc(1, sizeof *c);
	json_object *init = lu_get_object(lu_get_object(rec, "pids"), "init");
	json_object *user = lu_get_object(rec, "guestUser");
	const char *dir = lu_get_string(lu_get_object(rec, "paths"), "leaseDir");
	const char *home = lu_get_string(user, "home");
	if (c == NULL || dir == NULL) {
		s = lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	c->vm = strdup(vm);
	c->lease_dir = strdup(dir);
	c->init_pid = (pid_t)lu_get_int(init, "pid", 0);
	c->init_start = (unsigned long long)lu_get_int(init, "startTime", 0);
	c->uid = (uid_t)lu_get_int(user, "uid", 0);
	c->gid = (gid_t)lu_get_int(user, "gid", 0);
	snprintf(c->home, sizeof c->home, "%s", home ? home : "/");
	if (!lu_proc_alive(c->init_pid, c->init_start)) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, ESRCH, "guest %s is not running (its init is gone)",
		           vm);
		goto done;
	}
	c->record = rec;
	rec = NULL;
	*conn_out = c;
	c = NULL;
done:
	conn_free(c);
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}

static void t_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags)
{
	(void)state;
	(void)flags;
	conn_free(conn);
}

static relay_status t_exec(relay_plugin_state *state, relay_transport_conn *conn,
                           const relay_exec_request *req, relay_call *call, unsigned flags,
                           relay_exec_result *res, relay_error *err)
{
	/* exec_run fills a whole result; the caller's may be smaller
	 * (relay/plugin.h R5): copy out within its size, free what did not fit. */
	local_state *st = state;
	relay_exec_result full = {.struct_size = sizeof full};
	relay_status status = exec_run(st, conn, req, call, flags, &full, err);
	relay_exec_result_deliver(st->host, res, &full);
	return status;
}

/* A push or pull, run where the guest user's files can be reached: here,
 * or in a child in the guest's user namespace when the guest user is a
 * subordinate id of the relay's user (subids.c). */
typedef struct xfer_job {
	local_state *st;
	local_conn *conn;
	bool push;
	const char *local_path, *remote_path;
	relay_call *call;
	unsigned flags;
} xfer_job;

static relay_status xfer_job_run(void *arg, char **text_out, relay_error *err)
{
	xfer_job *j = arg;
	if (j->push)
		return xfer_push(j->st, j->conn, j->local_path, j->remote_path, j->call, j->flags, text_out,
		                 err);
	return xfer_pull(j->st, j->conn, j->remote_path, j->local_path, j->call, j->flags, text_out, err);
}

/* RELAY_XFER_CALLER_VERIFIES is accepted and changes nothing: both sides
 * are hashed anyway (the direct copy's check is cheap next to the file
 * creation it guards). */
static relay_status xfer_dispatch(xfer_job *j, char **facts_out, relay_error *err)
{
	relay_status begun =
	    rk_xfer_begin(j->st->host, j->push ? "push" : "pull", j->flags,
	                  j->push ? RELAY_XFER_TREE | RELAY_XFER_CALLER_VERIFIES : RELAY_XFER_TREE,
	                  j->local_path, j->remote_path, facts_out, err);
	if (begun != RELAY_OK)
		return begun;
	if (!subids_guest_mapped(j->st, j->conn->record))
		return xfer_job_run(j, facts_out, err);
	return subids_run_in_guest_userns(j->st, j->conn->init_pid, j->call, xfer_job_run, j, facts_out, err);
}

static relay_status t_push(relay_plugin_state *state, relay_transport_conn *conn, const char *local_path,
                           const char *remote_path, relay_call *call, unsigned flags, char **facts_out,
                           relay_error *err)
{
	xfer_job j = {state, (local_conn *)conn, true, local_path, remote_path, call, flags};
	return xfer_dispatch(&j, facts_out, err);
}

static relay_status t_pull(relay_plugin_state *state, relay_transport_conn *conn, const char *remote_path,
                           const char *local_path, relay_call *call, unsigned flags, char **facts_out,
                           relay_error *err)
{
	xfer_job j = {state, (local_conn *)conn, false, local_path, remote_path, call, flags};
	return xfer_dispatch(&j, facts_out, err);
}

static relay_status t_stream_open(relay_plugin_state *state, relay_transport_conn *conn,
                                  const relay_exec_request *req, relay_call *call, unsigned flags,
                                  relay_transport_stream **out, relay_error *err)
{
	return stream_open(state, conn, req, call, flags, out, err);
}

static relay_status t_stream_write(relay_plugin_state *state, relay_transport_stream *stream,
                                   const void *data, size_t len, uint64_t timeout_ms, unsigned flags,
                                   relay_error *err)
{
	return stream_write(state, stream, data, len, timeout_ms, flags, err);
}

static relay_status t_stream_read(relay_plugin_state *state, relay_transport_stream *stream, void *buf,
                                  size_t cap, uint64_t timeout_ms, unsigned flags, size_t *got_out,
                                  relay_error *err)
{
	return stream_read(state, stream, buf, cap, timeout_ms, flags, got_out, err);
}

static void t_stream_close(relay_plugin_state *state, relay_transport_stream *stream, unsigned flags)
{
	stream_close(state, stream, flags);
}

/* ---- descriptor ------------------------------------------------------------------ */

static const relay_transport_ops transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    .traits = RELAY_TRANSPORT_CONCURRENT | RELAY_TRANSPORT_GUEST_FACTS | RELAY_TRANSPORT_STDIO_BYTES |
              RELAY_TRANSPORT_STREAM,
    .open = t_open,
    .close = t_close,
    .exec = t_exec,
    .push = t_push,
    .pull = t_pull,
    .stream_open = t_stream_open,
    .stream_write = t_stream_write,
    .stream_read = t_stream_read,
    .stream_close = t_stream_close,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = LOCAL_PLUGIN_NAME,
    .version = LOCAL_PLUGIN_VERSION,
    .description = "Linux namespace sandboxes over an overlay of a base tree (a sandbox, not a VM)",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .capabilities = 0,
    .init = local_init,
    .fini = local_fini,
    .machine = &local_machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
