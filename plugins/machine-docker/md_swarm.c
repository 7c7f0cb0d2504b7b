/*
 * md_swarm.c — leases as one-replica Swarm services when the endpoint is a
 * Swarm manager: the service's internal overlay network, the service, and
 * the wait for its task's container (docs/machine-docker.md, "Swarm").
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"
#include "md_lease.h"

/* ---- Swarm ------------------------------------------------------------------------ */

/* True when the endpoint is a Swarm manager (GET /info, asked once per
 * relay: the answer is kept in st->swarm_known under the lock, with the
 * engine's default runtime in st->default_runtime). */
bool md_swarm_manager(md_state *st, relay_call *call)
{
	pthread_mutex_lock(&st->lock);
	int known = st->swarm_known;
	pthread_mutex_unlock(&st->lock);
	if (known)
		return known > 0;
	md_reply r;
	relay_error e;
	if (md_api(st, "GET", MD_API_PREFIX "/info", NULL, -1, -1, 20000, call, &r, &e) != RELAY_OK)
		return false;
	json_object *sw = md_obj(r.json, "Swarm");
	json_object *ctl = NULL;
	bool yes =
	    sw && json_object_object_get_ex(sw, "ControlAvailable", &ctl) && json_object_get_boolean(ctl);
	pthread_mutex_lock(&st->lock);
	if (yes && md_str(sw, "NodeID"))
		snprintf(st->swarm_node, sizeof st->swarm_node, "%s", md_str(sw, "NodeID"));
	if (md_str(r.json, "DefaultRuntime"))
		snprintf(st->default_runtime, sizeof st->default_runtime, "%s",
		         md_str(r.json, "DefaultRuntime"));
	st->swarm_known = r.status == 200 ? (yes ? 1 : -1) : 0;
	pthread_mutex_unlock(&st->lock);
	md_reply_free(&r);
	return yes;
}

/* Waits for the task the manager placed for service vm, and fills rec's
 * container from it. */
static relay_status wait_for_task(md_state *st, json_object *rec, const char *vm, relay_call *call,
                                  relay_error *err)
{
	md_reply r;
	relay_status s;
	char filter[256], path[1024] = MD_API_PREFIX "/tasks?filters=";
	snprintf(filter, sizeof filter, "{\"service\":[\"%s\"]}", vm);
	md_url_encode(path, sizeof path, filter);
	int64_t deadline = md_monotonic_ms() + (int64_t)st->pull_timeout_ms;
	while (md_monotonic_ms() < deadline) {
		if (call && st->host->call_cancelled(call))
			return md_err(st, err, RELAY_E_CANCELLED, 0,
			              "cancelled while the Swarm placed the guest");
		if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, err) != RELAY_OK)
			return RELAY_E_INDETERMINATE;
		json_object *task = r.json && json_object_is_type(r.json, json_type_array)
		                        ? json_object_array_get_idx(r.json, 0)
		                        : NULL;
		json_object *status = md_obj(task, "Status");
		const char *state = md_str(status, "State");
		const char *cid = md_str(md_obj(status, "ContainerStatus"), "ContainerID");
		const char *node = md_str(task, "NodeID");
		if (state && (strcmp(state, "failed") == 0 || strcmp(state, "rejected") == 0)) {
			/* On a node the relay cannot reach, the image could not be put there either. */
			char why[700] = "";
			bool unreachable = md_node_reach(st, node, call, why, sizeof why) == NULL;
			s = md_err(st, err, RELAY_E_REFUSED, 0, "the Swarm task of %s %s: %s%s%s", vm, state,
			           md_str(status, "Err") ? md_str(status, "Err") : "no reason given",
			           unreachable ? "; " : "", unreachable ? why : "");
			md_reply_free(&r);
			return s;
		}
		if (state && strcmp(state, "running") == 0 && cid) {
			/* Exec and copy go to the engine of the node the task runs on. */
			char why[700];
			md_state *eng = md_node_reach(st, node, call, why, sizeof why);
			json_object_object_add(rec, "swarmNode", json_object_new_string(node ? node : ""));
			json_object_object_add(rec, "taskId",
			                       json_object_new_string(md_str(task, "ID") ?: ""));
			if (eng == NULL) {
				s = md_err(
				    st, err, RELAY_E_REFUSED, 0,
				    "the Swarm placed %s on a node the relay cannot reach, so its service "
				    "is removed: %s",
				    vm, why);
				md_reply_free(&r);
				return s;
			}
			json_object_object_add(rec, "container", json_object_new_string(cid));
			json_object_object_add(rec, "containerId", json_object_new_string(cid));
			json_object_object_add(rec, "engine", json_object_new_string(eng->endpoint));
			md_reply_free(&r);
			return RELAY_OK;
		}
		md_reply_free(&r);
		md_sleep_ms(200);
	}
	return md_err(st, err, RELAY_E_TIMEOUT, 0, "the Swarm did not start the task of %s in time", vm);
}

/* Creates the lease's internal overlay network (no route out of it) and a
 * one-replica service on it, then waits for its task's container. Fills
 * rec's "container" and "taskNetwork". *keep_record when the outcome may
 * have taken effect. */
relay_status md_create_service(md_state *st, json_object *rec, const md_image *im, const char *image_ref,
                               const char *user, relay_call *call, bool *keep_record, relay_error *err)
{
	const char *vm = md_str(rec, "vm");
	/* The derived image on every node a task may land on (no registry). */
	relay_status s = md_nodes_spread_image(st, image_ref, call, err);
	if (s != RELAY_OK)
		return s;
	char net[160];
	snprintf(net, sizeof net, "%s-net", vm);
	json_object_object_add(rec, "taskNetwork", json_object_new_string(net));
	json_object *labels = json_object_new_object();
	md_make_labels(st, rec, im, labels);
	md_add_label(labels, "mode", "service");
	md_add_label(labels, "network", net);
	json_object *nb = json_object_new_object();
	json_object_object_add(nb, "Name", json_object_new_string(net));
	json_object_object_add(nb, "Driver", json_object_new_string("overlay"));
	json_object_object_add(nb, "Internal", json_object_new_boolean(true));
	json_object_object_add(nb, "Attachable", json_object_new_boolean(false));
	json_object_object_add(nb, "CheckDuplicate", json_object_new_boolean(true));
	json_object *nl = NULL;
	json_object_deep_copy(labels, &nl, NULL);
	json_object_object_add(nb, "Labels", nl);
	md_reply r;
	s = md_api(st, "POST", MD_API_PREFIX "/networks/create", nb, -1, -1, 60000, call, &r, err);
	json_object_put(nb);
	if (s != RELAY_OK || r.status != 201) {
		if (s == RELAY_OK)
			s = md_err(st, err, RELAY_E_REFUSED, 0,
			           "the Swarm manager refused the guest network (HTTP %ld): %s", r.status,
			           md_reply_message(&r));
		else
			*keep_record = s != RELAY_E_UNAVAILABLE;
		md_reply_free(&r);
		json_object_put(labels);
		return s == RELAY_E_UNAVAILABLE || s == RELAY_E_REFUSED ? s : RELAY_E_INDETERMINATE;
	}
	md_reply_free(&r);
	*keep_record = true; /* from here on, release or the reaper removes what exists */

	json_object *cs = json_object_new_object();
	json_object_object_add(cs, "Image", json_object_new_string(image_ref));
	/* The derived image has the guest program; the backstop starts with the lease's expiry. */
	md_backstop_text bt;
	md_backstop_args(st, rec, &bt);
	static const char *const entry[] = {MD_GUEST_INIT, NULL};
	const char *const args[] = {"init", bt.expires, bt.grace, bt.backstop, NULL};
	json_object_object_add(cs, "Command", md_str_array(entry));
	json_object_object_add(cs, "Args", md_str_array(args));
	json_object_object_add(cs, "User", json_object_new_string(user));
	json_object_object_add(cs, "Hostname", json_object_new_string("guest"));
	json_object *env = json_object_new_array();
	json_object *xvfb = NULL;
	md_guest_env(st, env,
	             st->display_enabled && json_object_object_get_ex(rec, "xvfb", &xvfb) &&
	                 json_object_get_boolean(xvfb));
	json_object_object_add(cs, "Env", env);
	json_object *cl = NULL;
	json_object_deep_copy(labels, &cl, NULL);
	json_object_object_add(cs, "Labels", cl);
	static const char *const caps[] = {"ALL", NULL};
	json_object_object_add(cs, "CapabilityDrop", md_str_array(caps));
	json_object_object_add(cs, "Ulimits", md_ulimits_json(st));
	json_object *limits = json_object_new_object();
	if (st->limit_nano_cpus > 0)
		json_object_object_add(limits, "NanoCPUs", json_object_new_int64(st->limit_nano_cpus));
	if (st->limit_memory_bytes > 0)
		json_object_object_add(limits, "MemoryBytes", json_object_new_int64(st->limit_memory_bytes));
	if (st->limit_pids > 0)
		json_object_object_add(limits, "Pids", json_object_new_int64(st->limit_pids));
	json_object *res = json_object_new_object();
	json_object_object_add(res, "Limits", limits);
	json_object *restart = json_object_new_object();
	json_object_object_add(restart, "Condition", json_object_new_string("none"));
	json_object *nets = json_object_new_array();
	json_object *target = json_object_new_object();
	json_object_object_add(target, "Target", json_object_new_string(net));
	json_object_array_add(nets, target);
	json_object *tt = json_object_new_object();
	json_object_object_add(tt, "ContainerSpec", cs);
	json_object_object_add(tt, "Resources", res);
	json_object_object_add(tt, "RestartPolicy", restart);
	json_object_object_add(tt, "Networks", nets);
	md_nodes_placement(st, tt);
	if (st->runtime[0]) {
		json_object *rt = json_object_new_object();
		json_object_object_add(rt, "Runtime", json_object_new_string(st->runtime));
		(void)rt; /* Swarm has no per-service runtime: the node's default applies */
		json_object_put(rt);
	}
	json_object *replicated = json_object_new_object();
	json_object_object_add(replicated, "Replicas", json_object_new_int64(1));
	json_object *mode = json_object_new_object();
	json_object_object_add(mode, "Replicated", replicated);
	json_object *sb = json_object_new_object();
	json_object_object_add(sb, "Name", json_object_new_string(vm));
	json_object_object_add(sb, "Labels", labels);
	json_object_object_add(sb, "TaskTemplate", tt);
	json_object_object_add(sb, "Mode", mode);
	s = md_api(st, "POST", MD_API_PREFIX "/services/create", sb, -1, -1, 60000, call, &r, err);
	json_object_put(sb);
	if (s != RELAY_OK)
		return s == RELAY_E_UNAVAILABLE ? s : RELAY_E_INDETERMINATE;
	if (r.status != 201) {
		s = md_err(st, err, RELAY_E_REFUSED, 0,
		           "the Swarm manager refused the guest service (HTTP %ld): %s", r.status,
		           md_reply_message(&r));
		md_reply_free(&r);
		return s;
	}
	md_reply_free(&r);
	return wait_for_task(st, rec, vm, call, err);
}

/* ---- a task that is gone ------------------------------------------------------------ */

/* What the manager says of node `id`: its hostname, state and availability
 * into the buffers (64 bytes each); false when it cannot say. */
static bool node_status(md_state *st, const char *id, relay_call *call, char *host, char *state, char *avail)
{
	char path[256];
	md_textf(path, sizeof path, MD_API_PREFIX "/nodes/%s", id);
	md_reply r;
	relay_error e;
	if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) != RELAY_OK || r.status != 200) {
		if (r.status)
			md_reply_free(&r);
		return false;
	}
	md_textf(host, 64, "%s", md_str(md_obj(r.json, "Description"), "Hostname") ?: id);
	md_textf(state, 64, "%s", md_str(md_obj(r.json, "Status"), "State") ?: "unknown");
	md_textf(avail, 64, "%s", md_str(md_obj(r.json, "Spec"), "Availability") ?: "unknown");
	md_reply_free(&r);
	return true;
}

int md_swarm_task_check(md_state *st, json_object *rec, relay_call *call, char *why, size_t why_size)
{
	const char *vm = md_str(rec, "vm"), *task_id = md_str(rec, "taskId");
	if (!md_is_service(rec) || vm == NULL || task_id == NULL)
		return 1;
	char filter[256], path[1024] = MD_API_PREFIX "/tasks?filters=";
	snprintf(filter, sizeof filter, "{\"service\":[\"%s\"]}", vm);
	md_url_encode(path, sizeof path, filter);
	md_reply r;
	relay_error e;
	if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) != RELAY_OK)
		return -1;
	int verdict = r.status == 200 && r.json && json_object_is_type(r.json, json_type_array) ? 1 : -1;
	json_object *ours = NULL;
	for (size_t i = 0; verdict == 1 && i < json_object_array_length(r.json); i++) {
		json_object *task = json_object_array_get_idx(r.json, i);
		const char *id = md_str(task, "ID");
		if (id && strcmp(id, task_id) == 0) {
			ours = task;
		} else if (id && md_str(task, "DesiredState") &&
		           strcmp(md_str(task, "DesiredState"), "running") == 0) {
			md_textf(why, why_size,
			         "the Swarm started another task (%s) for %s: a new container is a different "
			         "machine, so the relay does not use it",
			         id, vm);
			verdict = 0;
		}
	}
	if (verdict == 1 && ours == NULL) {
		md_textf(why, why_size, "the Swarm no longer lists the task %s of %s", task_id, vm);
		verdict = 0;
	}
	if (verdict == 1) {
		json_object *status = md_obj(ours, "Status");
		const char *state = md_str(status, "State") ?: "unknown";
		const char *desired = md_str(ours, "DesiredState") ?: "unknown";
		const char *node = md_str(ours, "NodeID") ?: "";
		char host[64] = "", nstate[64] = "", avail[64] = "";
		bool known = node_status(st, node, call, host, nstate, avail);
		/* Only "down" or a drain says the node lost its task: a manager that
		 * was just elected reads every node "unknown" (and a node can read
		 * "disconnected") for a while, which proves nothing. */
		const char *why_node = !known                        ? NULL
		                       : strcmp(nstate, "down") == 0 ? "down"
		                       : strcmp(avail, "drain") == 0 ? "drained"
		                                                     : NULL;
		bool task_gone = strcmp(state, "running") != 0 || strcmp(desired, "running") != 0;
		if (!why_node && !task_gone && known && strcmp(nstate, "ready") != 0)
			verdict = -1;
		else if (why_node || task_gone) {
			md_textf(why, why_size, "node %s %s, Swarm task %s (desired %s)%s%s [task %s]",
			         known ? host : node,
			         why_node ? why_node
			         : known  ? nstate
			                  : "not known",
			         state, desired, md_str(status, "Err") ? ": " : "",
			         md_str(status, "Err") ?: "", task_id);
			verdict = 0;
		}
	}
	md_reply_free(&r);
	return verdict;
}

/* Under the record's lock: asks the manager whether lease `vm`'s task is
 * gone and, when it is, notes "lost" (with Swarm's reason) in its record.
 * True when it is lost (`why` says why), now or before. */
static bool mark_lost(md_state *st, const char *vm, relay_call *call, char *why, size_t why_size)
{
	if (!md_valid_name(vm))
		return false;
	int lock = md_record_lock(st, vm); /* read, note and write under the record's lock */
	json_object *rec = md_record_read(st, vm, NULL);
	bool lost = false;
	if (rec && md_str(rec, "lost")) {
		md_textf(why, why_size, "%s", md_str(rec, "lost"));
		lost = true;
	} else if (rec && md_str(rec, "state") && strcmp(md_str(rec, "state"), "running") == 0 &&
	           md_swarm_task_check(st, rec, call, why, why_size) == 0) {
		json_object_object_add(rec, "lost", json_object_new_string(why));
		json_object_object_add(rec, "lostAtMs", json_object_new_int64(st->host->now_ms()));
		md_record_write(st, rec);
		lost = true;
		st->host->log(RELAY_LOG_WARNING, MD_PLUGIN_NAME,
		              "guest %s is lost: %s; the relay does not re-create it", vm, why);
	}
	if (lock >= 0)
		close(lock);
	json_object_put(rec);
	return lost;
}

/* The error of an operation on lost guest `vm`: why, and what to do;
 * `engine_said` (may be "") what the failed request got. */
static relay_status lost_error(md_state *st, relay_error *err, relay_status code, const char *vm,
                               const char *why, const char *engine_said)
{
	return md_err(st, err, code, 0,
	              "lost: %s. The relay does not re-create guest %s elsewhere; release it (its "
	              "evidence so far is kept)%s%s",
	              why, vm, engine_said[0] ? ". The engine said: " : "", engine_said);
}

void md_swarm_note_lost(md_state *st, const char *vm, relay_call *call, relay_error *err)
{
	char why[800];
	if (!mark_lost(st, vm, call, why, sizeof why))
		return;
	char was[RELAY_ERROR_MESSAGE_BYTES];
	snprintf(was, sizeof was, "%s", err->message);
	lost_error(st, err, err->code ? err->code : RELAY_E_UNAVAILABLE, vm, why, was);
}

relay_status md_swarm_refuse_lost(md_state *st, const char *vm, relay_error *err)
{
	json_object *rec = md_valid_name(vm) ? md_record_read(st, vm, NULL) : NULL;
	const char *why = md_str(rec, "lost");
	relay_status s = why ? lost_error(st, err, RELAY_E_REFUSED, vm, why, "") : RELAY_OK;
	json_object_put(rec);
	return s;
}

/* The host's lease_changed (relay/host.h, ABI 1.5) when the core has it. */
static void tell_core(md_state *st, const char *vm)
{
	const relay_host *h = st->host;
	if (RELAY_ABI_MINOR(h->abi_version) >= 5 &&
	    h->struct_size >= offsetof(relay_host, lease_changed) + sizeof h->lease_changed &&
	    h->lease_changed)
		h->lease_changed(vm, 0);
}

void md_swarm_watch(md_state *st)
{
	pthread_mutex_lock(&st->lock);
	bool swarm = st->swarm_known > 0;
	pthread_mutex_unlock(&st->lock);
	DIR *d = swarm ? opendir(st->kit.leases_dir) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		char vm[128];
		size_t l = strlen(de->d_name);
		if (l <= 5 || l - 5 >= sizeof vm || strcmp(de->d_name + l - 5, ".json") != 0)
			continue;
		md_textf(vm, sizeof vm, "%.*s", (int)(l - 5), de->d_name);
		json_object *rec = md_record_read(st, vm, NULL);
		const char *state = md_str(rec, "state");
		/* This relay's running service leases not yet known lost. */
		json_object *owner = md_obj(rec, "owner");
		bool watch = rec && md_is_service(rec) && md_str(rec, "taskId") && !md_str(rec, "lost") &&
		             state && strcmp(state, "running") == 0 && md_owner_alive(st, rec) &&
		             md_int(owner, "pid", 0) == st->self_pid;
		json_object_put(rec);
		char why[800];
		if (watch && mark_lost(st, vm, NULL, why, sizeof why))
			tell_core(st, vm);
	}
	if (d)
		closedir(d);
}
