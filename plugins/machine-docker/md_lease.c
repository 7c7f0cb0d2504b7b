/*
 * md_lease.c — machine-docker's leases: one container per guest.
 *
 * Records: <stateDir>/leases/<vm>.json (written durably at every change,
 * serialised by the flock on <vm>.lock). The vm (container name) is the
 * purpose, unique per acquisition; the lease id is drawn before anything
 * is asked of the engine.
 *
 * acquire:
 *   1. the derived image of the base image, with the guest program in it
 *      (md_bake.c: made once per base image, guest program and guest user;
 *      the base pulled by the engine first when missing, as progress);
 *   2. the intent — the record in state "provisioning" with the lease id,
 *      purpose, deadline — is written and fsynced before the create call;
 *   3. POST /containers/create with the labels io.mcp-relay.{plugin, store,
 *      owner, session, guest, purpose, lease-id, deadline-ms, image} and the
 *      isolation: no mounts, network "none", every capability dropped,
 *      no-new-privileges, pids/memory/CPU limits, the guest user; its entry
 *      is the guest program's backstop with the lease's expiry as
 *      arguments; then start (Swarm: a one-replica service, md_swarm.c);
 *   4. with Xvfb in the image, a display :0 of its own (each container has
 *      its own /tmp and network namespace); with vnc, its console report
 *      (md_console.c; x11vnc starts when a viewing attempt opens);
 *   5. the record becomes "running".
 * That is two engine requests (create, start) and two durable writes for a
 * guest without a display.
 * A failure after the create call that leaves the outcome open keeps the
 * record: find_by_purpose reconciles by the labels.
 *
 * release removes the container with its anonymous volumes (force, v=1),
 * then checks the container, each volume and the label query are gone.
 * The reaper removes leases whose expiry (+ grace) passed while the relay
 * that owned them is gone; the backstop inside the container stops it even
 * when no relay is left at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"
#include "md_console.h"
#include "md_egress.h"
#include "md_lease.h"
#include "relay_kit/lease_doc.h"

/* ---- acquire ---------------------------------------------------------------------- */

static json_object *create_body(md_state *st, json_object *rec, const md_image *im, const md_baked *baked,
                                const char *user)
{
	json_object *b = json_object_new_object();
	json_object_object_add(b, "Image", json_object_new_string(baked->ref));
	/* The guest program is in the derived image; its backstop starts with
	 * the expiry of the lease (later ones come in /.mcp-relay/expires). */
	md_backstop_text bt;
	md_backstop_args(st, rec, &bt);
	static const char *const entry[] = {MD_GUEST_INIT, NULL};
	const char *const cmd[] = {"init", bt.expires, bt.grace, bt.backstop, NULL};
	json_object_object_add(b, "Entrypoint", md_str_array(entry));
	json_object_object_add(b, "Cmd", md_str_array(cmd));
	json_object_object_add(b, "User", json_object_new_string(user));
	json_object_object_add(b, "WorkingDir", json_object_new_string("/"));
	json_object_object_add(b, "Hostname", json_object_new_string("guest"));
	json_object_object_add(b, "NetworkDisabled", json_object_new_boolean(true));
	json_object_object_add(b, "AttachStdin", json_object_new_boolean(false));
	json_object_object_add(b, "OpenStdin", json_object_new_boolean(false));
	json_object_object_add(b, "Tty", json_object_new_boolean(false));
	json_object *env = json_object_new_array();
	md_guest_env(st, env, st->display_enabled && baked->xvfb);
	if (md_str(rec, "egress"))
		md_egress_env(env); /* every exec inherits them */
	json_object_object_add(b, "Env", env);
	json_object *labels = json_object_new_object();
	md_make_labels(st, rec, im, labels);
	json_object_object_add(b, "Labels", labels);

	json_object *hc = json_object_new_object();
	json_object_object_add(hc, "NetworkMode", json_object_new_string("none"));
	json_object *binds = json_object_new_array();
	if (md_str(rec, "egress"))
		md_egress_binds(st, binds);
	json_object_object_add(hc, "Binds", binds);
	json_object_object_add(hc, "Mounts", json_object_new_array());
	static const char *const caps[] = {"ALL", NULL};
	json_object_object_add(hc, "CapDrop", md_str_array(caps));
	static const char *const sec[] = {"no-new-privileges", NULL};
	json_object_object_add(hc, "SecurityOpt", md_str_array(sec));
	json_object_object_add(hc, "Privileged", json_object_new_boolean(false));
	json_object_object_add(hc, "ReadonlyRootfs", json_object_new_boolean(false));
	json_object_object_add(hc, "PublishAllPorts", json_object_new_boolean(false));
	json_object_object_add(hc, "IpcMode", json_object_new_string("private"));
	if (st->limit_pids > 0)
		json_object_object_add(hc, "PidsLimit", json_object_new_int64(st->limit_pids));
	if (st->limit_memory_bytes > 0) {
		json_object_object_add(hc, "Memory", json_object_new_int64(st->limit_memory_bytes));
		json_object_object_add(hc, "MemorySwap", json_object_new_int64(st->limit_memory_bytes));
	}
	if (st->limit_nano_cpus > 0)
		json_object_object_add(hc, "NanoCpus", json_object_new_int64(st->limit_nano_cpus));
	json_object_object_add(hc, "Ulimits", md_ulimits_json(st));
	if (st->runtime[0])
		json_object_object_add(hc, "Runtime", json_object_new_string(st->runtime));
	json_object *restart = json_object_new_object();
	json_object_object_add(restart, "Name", json_object_new_string("no"));
	json_object_object_add(hc, "RestartPolicy", restart);
	json_object_object_add(b, "HostConfig", hc);
	return b;
}

/* Starts Xvfb :0 as the guest user (a detached exec) and waits for its
 * socket inside the guest (the guest program's "wait", one exec: the
 * archive API of Docker 20.10 may not see a file a guest process made). */
static bool start_display(md_state *st, const char *vm, const char *user, relay_call *call)
{
	/* -noreset: see machine-local's launch.c (a reset delays the next capture). */
	const char *argv[] = {"Xvfb", ":0", "-screen", "0", st->screen, "-noreset", "-nolisten", "tcp", NULL};
	if (!md_exec_detached(st, vm, user, argv, call))
		return false;
	relay_error e;
	static const char *const wait_argv[] = {MD_GUEST_INIT, "wait", "/tmp/.X11-unix/X0", "10000", NULL};
	relay_exec_result res;
	memset(&res, 0, sizeof res);
	res.struct_size = sizeof res;
	relay_status s = exec_simple(st, vm, user, wait_argv, 20000, call, &res, &e);
	bool up = s == RELAY_OK && res.exit_code == 0;
	exec_result_free(st, &res);
	return up;
}

/* The refusals of a spec, before anything is asked of the engine. */
static relay_status check_spec(md_state *st, json_object *spec, const md_image **im_out, relay_error *err)
{
	const char *guest = md_str(spec, "guest");
	const char *purpose = md_str(spec, "purpose");
	const char *key = md_str(spec, "image");
	const char *network = md_str(spec, "network");
	if (!md_valid_name(purpose) || guest == NULL || key == NULL)
		return md_err(
		    st, err, RELAY_E_INVALID_ARGUMENT, 0,
		    "the acquire spec needs a purpose of [A-Za-z0-9._-] (at most 120), a guest and an image");
	*im_out = inventory_find(st, key);
	if (*im_out == NULL) {
		char known[1024] = "";
		for (size_t i = 0; i < st->image_count; i++)
			snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
			         st->images[i].key);
		return md_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		              "machine-docker has no image %s (configured: %s); add it to the \"images\" of "
		              "MCP_RELAY_DOCKER_OPTIONS",
		              key, known[0] ? known : "none");
	}
	if (network == NULL)
		network = st->kit.default_network;
	/* allow and internet: the container keeps NetworkMode none, and the
	 * relay's egress proxy listens in its loopback (md_egress.c). That needs
	 * its network namespace on this host. */
	if (strcmp(network, "nat") != 0) {
		char why[600];
		if (!md_egress_reachable(st, why, sizeof why))
			return md_err(st, err, RELAY_E_REFUSED, 0,
			              "machine-docker cannot give network %s here: %s", network, why);
	}
	return RELAY_OK;
}

/* The record of a new lease in state "provisioning" (the lease id drawn here). */
static json_object *new_record(md_state *st, json_object *spec, const md_image *im, const md_baked *baked,
                               const char *user)
{
	int64_t ttl = md_int(spec, "ttlMs", 900000);
	int64_t deadline = md_int(spec, "deadlineMs", 0);
	char lease_id[40] = "mdl-";
	md_random_hex(st, lease_id + 4, 24);
	int64_t now = st->host->now_ms();
	int64_t expires = now + (ttl > 0 ? ttl : 900000);
	if (deadline > 0 && expires > deadline)
		expires = deadline;
	pthread_mutex_lock(&st->lock);
	const char *runtime = st->runtime[0] ? st->runtime : st->default_runtime;
	json_object *rt = runtime[0] ? json_object_new_string(runtime) : NULL;
	pthread_mutex_unlock(&st->lock);
	json_object *rec = json_object_new_object();
	json_object_object_add(rec, "schemaVersion", json_object_new_int64(1));
	json_object_object_add(rec, "vm", json_object_new_string(md_str(spec, "purpose")));
	json_object_object_add(rec, "purpose", json_object_new_string(md_str(spec, "purpose")));
	json_object_object_add(rec, "guest", json_object_new_string(md_str(spec, "guest")));
	json_object_object_add(rec, "image", json_object_new_string(im->key));
	json_object_object_add(rec, "imageRef", json_object_new_string(im->ref));
	json_object_object_add(rec, "guestImage", json_object_new_string(baked->ref));
	json_object_object_add(rec, "lease_id", json_object_new_string(lease_id));
	json_object_object_add(rec, "state", json_object_new_string("provisioning"));
	json_object_object_add(rec, "createdAtMs", json_object_new_int64(now));
	json_object_object_add(rec, "expiresAtMs", json_object_new_int64(expires));
	json_object_object_add(rec, "deadlineMs", json_object_new_int64(deadline));
	json_object_object_add(rec, "graceMs", json_object_new_int64(st->grace_ms));
	json_object_object_add(rec, "user", json_object_new_string(user));
	json_object_object_add(rec, "network", json_object_new_string("none"));
	const char *egress = md_str(spec, "network") ? md_str(spec, "network") : st->kit.default_network;
	json_object_object_add(rec, "egress",
	                       strcmp(egress, "nat") != 0 ? json_object_new_string(egress) : NULL);
	json_object_object_add(rec, "endpoint", json_object_new_string(st->endpoint));
	json_object_object_add(rec, "runtime", rt);
	json_object_object_add(rec, "volumes", json_object_new_array());
	json_object_object_add(rec, "display", NULL);
	json_object_object_add(rec, "xvfb", json_object_new_boolean(baked->xvfb)); /* the image has it */
	md_set_owner(st, rec);
	return rec;
}

/* POST /containers/create of the derived image; once more after a new
 * bake when the engine no longer has it. */
static relay_status create_container(md_state *st, json_object *rec, const md_image *im, md_baked *baked,
                                     const char *user, relay_call *call, bool *keep_record, relay_error *err)
{
	const char *purpose = md_str(rec, "vm");
	char path[512] = MD_API_PREFIX "/containers/create?name=";
	md_url_encode(path, sizeof path, purpose);
	json_object *body = create_body(st, rec, im, baked, user);
	md_reply r;
	relay_status s = md_api(st, "POST", path, body, -1, -1, MD_CREATE_TIMEOUT_MS, call, &r, err);
	json_object_put(body);
	if (s == RELAY_OK && r.status == 404) {
		md_reply_free(&r);
		s = md_bake(st, im, true, call, baked, err);
		if (s != RELAY_OK)
			return s;
		json_object_object_add(rec, "guestImage", json_object_new_string(baked->ref));
		body = create_body(st, rec, im, baked, user);
		s = md_api(st, "POST", path, body, -1, -1, MD_CREATE_TIMEOUT_MS, call, &r, err);
		json_object_put(body);
	}
	if (s == RELAY_E_UNAVAILABLE)
		return s; /* never connected: nothing happened */
	if (s != RELAY_OK) {
		*keep_record = true;
		return md_err(st, err, RELAY_E_INDETERMINATE, 0,
		              "the create call for %s may or may not have taken effect: %s", purpose,
		              err->message);
	}
	long code = r.status;
	char text[256];
	md_textf(text, sizeof text, "%.200s", md_reply_message(&r));
	if (code == 201 && md_str(r.json, "Id"))
		json_object_object_add(rec, "containerId", json_object_new_string(md_str(r.json, "Id")));
	md_reply_free(&r);
	if (code == 201) {
		json_object_object_add(rec, "container", json_object_new_string(purpose));
		return RELAY_OK;
	}
	json_object *info = NULL;
	int found = md_container_get(st, purpose, call, &info);
	json_object_put(info);
	if (found != 0) {
		*keep_record = true;
		return md_err(st, err, RELAY_E_INDETERMINATE, 0,
		              "the engine answered HTTP %ld to the create of %s (%s), and the container %s",
		              code, purpose, text, found == 1 ? "exists" : "cannot be looked up");
	}
	return md_err(st, err, code == 404 ? RELAY_E_IMAGE_UNAVAILABLE : RELAY_E_REFUSED, 0,
	              "the engine refused to create the guest container (HTTP %ld): %s", code, text);
}

static relay_status start_container(md_state *st, const char *vm, relay_call *call, relay_error *err)
{
	md_reply r;
	relay_status s =
	    md_container_api(st, "POST", vm, "/start", NULL, MD_CREATE_TIMEOUT_MS, call, &r, err);
	if (s == RELAY_OK && r.status != 204 && r.status != 304)
		s = md_err(st, err, RELAY_E_REFUSED, 0,
		           "the engine could not start the guest container (HTTP %ld): %.600s%s%s", r.status,
		           md_reply_message(&r),
		           strstr(md_reply_message(&r), "hybrid") ? "; this host mixes cgroup v1 and v2: "
		                                                  : "",
		           strstr(md_reply_message(&r), "hybrid") ? md_runtime_remedy(st, call) : "");
	md_reply_free(&r);
	return s;
}

relay_status lease_acquire(relay_plugin_state *state, json_object *spec, relay_call *call,
                           json_object **doc_out, relay_error *err)
{
	md_state *st = state;
	*doc_out = NULL;
	const md_image *im = NULL;
	relay_status s = check_spec(st, spec, &im, err);
	if (s != RELAY_OK)
		return s;
	pthread_mutex_lock(&st->lock);
	size_t held = lease_count(st) + st->acquiring;
	bool room = held < (size_t)st->max_guests;
	if (room)
		st->acquiring++;
	pthread_mutex_unlock(&st->lock);
	if (!room)
		return md_err(
		    st, err, RELAY_E_CAPACITY, 0,
		    "machine-docker holds %zu guests, its limit (options.maxGuests %d); release one first",
		    held, st->max_guests);

	const char *purpose = md_str(spec, "purpose");
	json_object *rec = NULL;
	bool keep_record = false;
	int lock = -1;
	char user[32];
	snprintf(user, sizeof user, "%u:%u", (unsigned)st->guest_uid, (unsigned)st->guest_gid);
	/* 1. The derived image with the guest program (made once per base image). */
	bool service = md_swarm_manager(st, call) && st->swarm;
	const char *network = md_str(spec, "network") ? md_str(spec, "network") : st->kit.default_network;
	if (service && strcmp(network, "nat") != 0) {
		s = md_err(
		    st, err, RELAY_E_REFUSED, 0,
		    "machine-docker cannot give network %s to a Swarm service: its task may run on another "
		    "node, where the relay's egress proxy cannot reach the container's namespace "
		    "(docs/egress.md); use nat",
		    network);
		goto done;
	}
	md_baked baked;
	s = md_bake(st, im, false, call, &baked, err);
	if (s != RELAY_OK)
		goto done;
	json_object *vnc = NULL;
	bool want_vnc = json_object_object_get_ex(spec, "vnc", &vnc) && json_object_get_boolean(vnc);
	if (want_vnc) {
		s = md_console_check(st, im->key, baked.xvfb, baked.x11vnc, err);
		if (s != RELAY_OK)
			goto done;
	}
	/* 2. The intent, durable before the engine hears of the guest. */
	rec = new_record(st, spec, im, &baked, user);
	lock = md_record_lock(st, purpose);
	int e = lock >= 0 ? md_record_write(st, rec) : errno;
	if (e != 0) {
		s = md_err(st, err, RELAY_E_IO, e, "cannot write the lease record under %s",
		           st->kit.leases_dir);
		goto done;
	}
	/* 3. Create and start: a one-replica service the Swarm manager places, or a container. */
	if (service) {
		json_object_object_add(rec, "mode", json_object_new_string("service"));
		s = md_create_service(st, rec, im, baked.ref, user, call, &keep_record, err);
	} else {
		s = create_container(st, rec, im, &baked, user, call, &keep_record, err);
		if (s != RELAY_OK)
			goto done; /* nothing was created, or keep_record says it may have been */
		s = md_verify_applied(st, rec, purpose, call, err);
		if (s == RELAY_OK)
			s = start_container(st, purpose, call, err);
	}
	if (s != RELAY_OK) {
		relay_error e2;
		if (md_remove_guest(st, rec, NULL, &e2) != 1)
			keep_record = true; /* the reaper or release settles it */
		goto done;
	}
	/* 4. The display. */
	if (st->display_enabled && baked.xvfb) {
		if (start_display(md_engine_of(st, rec, call), md_container_of(rec), user, call))
			json_object_object_add(rec, "display", json_object_new_string(":0"));
		else
			st->host->log(RELAY_LOG_WARNING, MD_PLUGIN_NAME,
			              "%s: Xvfb is in the image but did not start; the guest has no display",
			              purpose);
	}
	if (md_str(rec, "display") == NULL) /* known: no display (machine.h) */
		json_object_object_add(rec, "display", json_object_new_boolean(false));
	/* With vnc, the console of that display (x11vnc starts at open). */
	if (want_vnc && md_str(rec, "display") == NULL) {
		s = md_err(st, err, RELAY_E_REFUSED, 0,
		           "%s: vnc needs the guest's display, and Xvfb did not start", purpose);
		relay_error e2;
		if (md_remove_guest(st, rec, NULL, &e2) != 1)
			keep_record = true;
		goto done;
	}
	if (want_vnc)
		md_console_prepare(st, rec);
	/* 5. Running. */
	json_object_object_add(rec, "state", json_object_new_string("running"));
	e = md_record_write(st, rec);
	keep_record = true;
	if (e != 0) {
		s = md_err(st, err, RELAY_E_INDETERMINATE, e,
		           "guest %s runs but its record cannot be written", purpose);
		goto done;
	}
	*doc_out = md_document(st, rec, "running");
done:
	if (rec && !keep_record)
		md_record_remove(st, purpose);
	if (lock >= 0)
		close(lock);
	pthread_mutex_lock(&st->lock);
	st->acquiring--;
	pthread_mutex_unlock(&st->lock);
	json_object_put(rec);
	return s;
}

/* ---- renew, inspect ---------------------------------------------------------------- */

relay_status lease_renew(relay_plugin_state *state, json_object *doc, uint64_t ttl_ms, relay_call *call,
                         json_object **doc_out, relay_error *err)
{
	(void)call;
	md_state *st = state;
	const char *vm = md_str(doc, "vm");
	if (!md_valid_name(vm) || ttl_ms == 0)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "renew needs a lease md_document and a positive ttl");
	int lock = md_record_lock(st, vm);
	int e = 0;
	json_object *rec = lock >= 0 ? md_record_read(st, vm, &e) : NULL;
	json_object *info = NULL;
	relay_status s = RELAY_OK;
	if (rec == NULL) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, e, "machine-docker no longer holds lease %s", vm);
		goto done;
	}
	s = rk_lease_check_renewable(st->host, rec, err);
	if (s != RELAY_OK)
		goto done;
	/* A Swarm task: on its node's engine, and only while the task runs there. */
	md_state *eng = md_engine_of(st, rec, NULL);
	char lost[800];
	if (md_swarm_task_check(st, rec, NULL, lost, sizeof lost) == 0) {
		json_object_object_add(rec, "lost", json_object_new_string(lost));
		md_record_write(st, rec);
		s = md_err(st, err, RELAY_E_REFUSED, 0,
		           "guest %s is lost: %s. The relay does not re-create it elsewhere; release it", vm,
		           lost);
		goto done;
	}
	int found = md_container_get(eng, md_container_of(rec), NULL, &info);
	if (found == 0) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, 0, "the container of %s is gone", vm);
		goto done;
	}
	if (found < 0) {
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the container engine at %s does not answer",
		           st->endpoint);
		goto done;
	}
	if (!md_container_running(info)) {
		s = md_err(
		    st, err, RELAY_E_REFUSED, 0,
		    "%s is not running (its backstop stopped it, or it failed); release it and acquire a new "
		    "lease",
		    vm);
		goto done;
	}
	int64_t now = st->host->now_ms();
	rk_lease_renew_record(rec, now, ttl_ms);
	md_set_owner(st, rec);
	char line[96];
	int n = md_expires_text(st, rec, line, sizeof line);
	s = lease_put_file(eng, md_container_of(rec), MD_GUEST_DIR, "expires", line, (size_t)n, 0644, 0, 0,
	                   NULL, err);
	if (s != RELAY_OK)
		goto done;
	e = md_record_write(st, rec);
	if (e != 0) {
		s = md_err(st, err, RELAY_E_IO, e, "cannot write the renewed lease %s", vm);
		goto done;
	}
	if (doc_out)
		*doc_out = md_document(st, rec, "running");
done:
	if (lock >= 0)
		close(lock);
	json_object_put(rec);
	json_object_put(info);
	return s;
}

relay_status lease_inspect(relay_plugin_state *state, json_object *doc, relay_call *call,
                           json_object **doc_out, relay_error *err)
{
	md_state *st = state;
	const char *vm = md_str(doc, "vm");
	if (!md_valid_name(vm))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "inspect needs a lease document");
	int e = 0;
	json_object *rec = md_record_read(st, vm, &e);
	json_object *info = NULL;
	int found =
	    rec ? md_container_get(md_engine_of(st, rec, call), md_container_of(rec), call, &info) : 0;
	relay_status s = RELAY_OK;
	char lost[800] = "";
	if (rec && md_str(rec, "lost"))
		md_textf(lost, sizeof lost, "%s", md_str(rec, "lost"));
	else if (rec && md_swarm_task_check(st, rec, call, lost, sizeof lost) == 0)
		json_object_object_add(rec, "lost", json_object_new_string(lost));
	else
		lost[0] = '\0';
	if (lost[0] && found != 1 && rec) {
		/* Its node is down or drained: the record answers, as lost. */
		if (doc_out)
			*doc_out = md_document(st, rec, "lost");
	} else if (found < 0) {
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the container engine at %s does not answer",
		           st->endpoint);
	} else if (found == 0 || rec == NULL) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, e, "machine-docker no longer holds lease %s", vm);
	} else {
		const char *lid = md_label_of(info, "lease-id");
		const char *want = md_str(rec, "lease_id");
		const char *rec_state = md_str(rec, "state");
		if (lid == NULL || want == NULL || strcmp(lid, want) != 0)
			s = md_err(
			    st, err, RELAY_E_NOT_FOUND, 0,
			    "container %s carries another lease id than lease %s; it is not this lease", vm,
			    want);
		else if (doc_out)
			*doc_out = md_document(
			    st, rec,
			    rec_state && strcmp(rec_state, "running") == 0 && lost[0] ? "lost"
			    : rec_state && strcmp(rec_state, "running") == 0 && !md_container_running(info)
			        ? "failed"
			        : rec_state);
	}
	json_object_put(rec);
	json_object_put(info);
	return s;
}
