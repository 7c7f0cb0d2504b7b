/*
 * md_release.c — machine-docker's leases going away: release (remove,
 * then verify at the engine), verify_destroyed, find_by_purpose by the
 * labels, the lease count, and the reaper of expired leases of dead relays.
 */
#include <dirent.h>
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
#include "md_lease.h"
#include "relay_support/json_get.h"

/* ---- release, verify ------------------------------------------------------------------ */

/* Removes what a record describes: a plain container (force, with its
 * anonymous volumes), or a service, its task's container and its network.
 * 1 removed or gone, 0 refused (err filled), -1 unknown. */
int md_remove_guest(md_state *st, json_object *rec, relay_call *call, relay_error *err)
{
	const char *vm = md_str(rec, "vm");
	if (!md_is_service(rec))
		return md_container_remove(st, md_container_of(rec), call, err);
	char path[512] = MD_API_PREFIX "/services/";
	md_url_encode(path, sizeof path, vm);
	md_reply r;
	if (md_api(st, "DELETE", path, NULL, -1, -1, 60000, call, &r, err) != RELAY_OK)
		return -1;
	long code = r.status;
	md_reply_free(&r);
	if (code != 200 && code != 204 && code != 404) {
		md_err(st, err, RELAY_E_REFUSED, 0, "the engine refused to remove the service %s (HTTP %ld)",
		       vm, code);
		return 0;
	}
	/* Swarm stops the task's container on its own time (on its node's
	 * engine); then it is removed. */
	md_state *eng = md_engine_of(st, rec, call);
	json_object *info = NULL;
	for (int i = 0; i < 150 && md_container_get(eng, md_container_of(rec), call, &info) == 1; i++) {
		json_object_put(info);
		info = NULL;
		/* Swarm's own stop waits out the task's grace period; the guest
		 * keeps nothing worth it. */
		if (i == 0 || i == 20)
			md_container_remove(eng, md_container_of(rec), call, err);
		md_sleep_ms(200);
	}
	json_object_put(info);
	const char *net = md_str(rec, "taskNetwork");
	for (int i = 0; net && i < 150; i++) {
		char np[512] = MD_API_PREFIX "/networks/";
		md_url_encode(np, sizeof np, net);
		if (md_api(st, "DELETE", np, NULL, -1, -1, 30000, call, &r, err) != RELAY_OK)
			return -1;
		code = r.status;
		md_reply_free(&r);
		if (code == 204 || code == 200 || code == 404)
			break;
		if (i == 149)
			st->host->log(RELAY_LOG_WARNING, MD_PLUGIN_NAME,
			              "the manager still refuses to remove the network %s (HTTP %ld)", net,
			              code);
		md_sleep_ms(200); /* still in use by the task being torn down */
	}
	return 1;
}

/* One request on volume `name`: its HTTP status, or 0 when no answer came. */
static long volume_request(md_state *st, const char *method, const char *name, relay_call *call)
{
	char path[512] = MD_API_PREFIX "/volumes/";
	md_url_encode(path, sizeof path, name ? name : "");
	md_reply r;
	relay_error e;
	if (md_api(st, method, path, NULL, -1, -1, 20000, call, &r, &e) != RELAY_OK)
		return 0;
	long code = r.status;
	md_reply_free(&r);
	return code;
}

/* Removes the record's volumes by name (those v=1 did not take). */
static void remove_volumes(md_state *st, json_object *rec, relay_call *call)
{
	json_object *vols = rsj_get_array(rec, "volumes");
	for (size_t i = 0; vols && i < json_object_array_length(vols); i++)
		volume_request(st, "DELETE", json_object_get_string(json_object_array_get_idx(vols, i)),
		               call);
}

static relay_status md_verify_gone(md_state *st, const char *vm, json_object *rec, relay_call *call,
                                   char *why, size_t why_size)
{
	json_object *info = NULL;
	const char *ref = md_container_of(rec) ? md_container_of(rec) : vm;
	md_state *eng = md_engine_of(st, rec, call); /* a Swarm task's node */
	int found = md_container_get(eng, ref, call, &info);
	json_object_put(info);
	if (found != 0) {
		md_textf(why, why_size,
		         found == 1 ? "container %s of %s still exists%s%s"
		                    : "the engine cannot say whether %s of %s exists%s%s",
		         ref, vm, eng != st ? " on the engine of its node, " : "",
		         eng != st ? eng->endpoint : "");
		return RELAY_E_UNVERIFIED;
	}
	if (md_is_service(rec)) {
		const char *kinds[] = {"services", "networks"};
		const char *names[] = {vm, md_str(rec, "taskNetwork")};
		for (int i = 0; i < 2; i++) {
			if (names[i] == NULL)
				continue;
			char path[512];
			snprintf(path, sizeof path, MD_API_PREFIX "/%s/", kinds[i]);
			md_url_encode(path, sizeof path, names[i]);
			md_reply r;
			relay_error e;
			bool gone = false;
			/* The managers' store catches up with a removal within moments. */
			for (int k = 0; !gone && k < 50; k++) {
				if (k > 0)
					md_sleep_ms(200);
				gone =
				    md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) == RELAY_OK &&
				    r.status == 404;
				md_reply_free(&r);
			}
			if (!gone) {
				md_textf(why, why_size, "the %s %s of %s is still there",
				         i == 0 ? "service" : "network", names[i], vm);
				return RELAY_E_UNVERIFIED;
			}
		}
	}
	json_object *vols = rsj_get_array(rec, "volumes");
	for (size_t i = 0; vols && i < json_object_array_length(vols); i++) {
		const char *name = json_object_get_string(json_object_array_get_idx(vols, i));
		if (volume_request(eng, "GET", name, call) != 404) {
			md_textf(why, why_size, "volume %s of %s is still there", name ? name : "?", vm);
			return RELAY_E_UNVERIFIED;
		}
	}
	/* And no container at all carries its lease id. */
	const char *lid = md_str(rec, "lease_id");
	if (lid) {
		char filter[256], path[1024] = MD_API_PREFIX "/containers/json?all=1&filters=";
		snprintf(filter, sizeof filter, "{\"label\":[\"" MD_LABEL "lease-id=%s\"]}", lid);
		md_url_encode(path, sizeof path, filter);
		md_reply r;
		relay_error e;
		bool ok = md_api(eng, "GET", path, NULL, -1, -1, 20000, call, &r, &e) == RELAY_OK &&
		          r.status == 200 && r.json && json_object_is_type(r.json, json_type_array) &&
		          json_object_array_length(r.json) == 0;
		md_reply_free(&r);
		if (!ok) {
			md_textf(why, why_size, "a container with lease id %s is still listed", lid);
			return RELAY_E_UNVERIFIED;
		}
	}
	return RELAY_OK;
}

/* The anonymous volumes the engine gave the container (its Mounts of type
 * "volume"), added to the record's "volumes" so that release removes and
 * verifies each by name. */
static void note_volumes(json_object *rec, json_object *info)
{
	json_object *vols = rsj_get_array(rec, "volumes");
	if (vols == NULL || !json_object_is_type(vols, json_type_array)) {
		vols = json_object_new_array();
		json_object_object_add(rec, "volumes", vols);
	}
	json_object *mounts = rsj_get_array(info, "Mounts");
	for (size_t i = 0; mounts && i < json_object_array_length(mounts); i++) {
		json_object *m = json_object_array_get_idx(mounts, i);
		const char *type = md_str(m, "Type");
		const char *name = md_str(m, "Name");
		if (type == NULL || strcmp(type, "volume") != 0 || name == NULL)
			continue;
		bool known = false;
		for (size_t k = 0; !known && k < json_object_array_length(vols); k++)
			known = strcmp(json_object_get_string(json_object_array_get_idx(vols, k)), name) == 0;
		if (!known)
			json_object_array_add(vols, json_object_new_string(name));
	}
}

relay_status lease_release(relay_plugin_state *state, json_object *doc, const char *reason, relay_call *call,
                           relay_error *err)
{
	(void)reason;
	md_state *st = state;
	const char *vm = md_str(doc, "vm");
	if (!md_valid_name(vm))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "release needs a lease document");
	int lock = md_record_lock(st, vm);
	json_object *rec = md_record_read(st, vm, NULL);
	relay_status s = RELAY_OK;
	bool known = rec != NULL;
	if (rec == NULL) {
		json_object *described = md_obj(doc, "record");
		if (described == NULL || json_object_deep_copy(described, &rec, NULL) != 0 || rec == NULL) {
			s = md_err(st, err, RELAY_E_NOT_FOUND, 0, "machine-docker no longer holds lease %s",
			           vm);
			goto done;
		}
	} else {
		json_object_object_add(rec, "state", json_object_new_string("releasing"));
		md_console_stop_all(st, rec);
		md_record_write(st, rec);
	}
	json_object *info = NULL;
	int found = md_container_get(md_engine_of(st, rec, call), md_container_of(rec), call, &info);
	if (found != 1 && md_is_service(rec))
		found = 1; /* the service and its network may still be there, its node down or not */
	if (found == 1 && info) {
		const char *lid = md_label_of(info, "lease-id");
		const char *want = md_str(rec, "lease_id");
		if (lid == NULL || want == NULL || strcmp(lid, want) != 0) {
			json_object_put(info);
			s = md_err(st, err, RELAY_E_REFUSED, 0,
			           "container %s carries lease id %s, not %s: it is not removed", vm,
			           lid ? lid : "none", want ? want : "none");
			goto done;
		}
		note_volumes(rec, info);
	}
	json_object_put(info);
	if (found < 0) {
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the container engine at %s does not answer",
		           st->endpoint);
		goto done;
	}
	if (found == 1 && md_remove_guest(st, rec, call, err) != 1) {
		if (err->message[0] == '\0')
			md_err(st, err, RELAY_E_INDETERMINATE, 0, "the removal of %s was not confirmed", vm);
		s = err->code ? err->code : RELAY_E_INDETERMINATE;
		goto done;
	}
	/* Anonymous volumes go with v=1; any left are removed by name. */
	remove_volumes(md_engine_of(st, rec, call), rec, call);
	char why[512];
	if (md_verify_gone(st, vm, rec, call, why, sizeof why) != RELAY_OK) {
		s = md_err(st, err, RELAY_E_UNVERIFIED, 0, "%s", why);
		goto done;
	}
	if (known)
		md_record_remove(st, vm);
	if (found == 0 && !known)
		s = md_err(st, err, RELAY_E_NOT_FOUND, 0, "machine-docker no longer holds lease %s", vm);
done:
	if (lock >= 0)
		close(lock);
	json_object_put(rec);
	return s;
}

relay_status lease_verify_gone(relay_plugin_state *state, json_object *doc, relay_call *call,
                               relay_error *err)
{
	md_state *st = state;
	const char *vm = md_str(doc, "vm");
	json_object *rec = md_obj(doc, "record");
	if (!md_valid_name(vm) || rec == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "verify needs a machine-docker lease document");
	char why[512];
	if (md_verify_gone(st, vm, rec, call, why, sizeof why) != RELAY_OK)
		return md_err(st, err, RELAY_E_UNVERIFIED, 0, "%s", why);
	return RELAY_OK;
}

/* ---- find, count ---------------------------------------------------------------------- */

/* Services listed as the containers the callers read: Id (the service's
 * name, which its records use), Labels, State "running". */
static json_object *services_as_containers(json_object *list)
{
	json_object *out = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *spec = md_obj(json_object_array_get_idx(list, i), "Spec");
		json_object *item = json_object_new_object();
		json_object_object_add(item, "Id", json_object_new_string(md_str(spec, "Name") ?: ""));
		json_object_object_add(item, "Labels", json_object_get(md_obj(spec, "Labels")));
		json_object_object_add(item, "State", json_object_new_string("running"));
		json_object_array_add(out, item);
	}
	return out;
}

/* Containers of this store, optionally of one purpose (array, owned). */
static json_object *md_list_ours(md_state *st, const char *purpose, relay_call *call, relay_error *err)
{
	json_object *filters = json_object_new_object();
	json_object *labels = json_object_new_array();
	char text[1200];
	snprintf(text, sizeof text, MD_LABEL "store=%s", st->kit.state_dir);
	json_object_array_add(labels, json_object_new_string(text));
	if (purpose) {
		snprintf(text, sizeof text, MD_LABEL "purpose=%s", purpose);
		json_object_array_add(labels, json_object_new_string(text));
	}
	json_object_object_add(filters, "label", labels);
	/* On a Swarm manager the leases are services, whose tasks run on any node. */
	bool services = st->swarm && md_swarm_manager(st, call);
	char path[4096];
	snprintf(path, sizeof path, MD_API_PREFIX "%s",
	         services ? "/services?filters=" : "/containers/json?all=1&filters=");
	md_url_encode(path, sizeof path, json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN));
	json_object_put(filters);
	md_reply r;
	if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, err) != RELAY_OK)
		return NULL;
	json_object *out = NULL;
	if (r.status == 200 && r.json && json_object_is_type(r.json, json_type_array)) {
		out = services ? services_as_containers(r.json) : json_object_get(r.json);
	} else {
		md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the engine did not list containers (HTTP %ld)",
		       r.status);
	}
	md_reply_free(&r);
	return out;
}

static const char *md_list_label(json_object *item, const char *name)
{
	char key[96];
	snprintf(key, sizeof key, MD_LABEL "%s", name);
	return md_str(md_obj(item, "Labels"), key);
}

relay_status lease_find(relay_plugin_state *state, const char *purpose, relay_call *call,
                        json_object **arr_out, relay_error *err)
{
	md_state *st = state;
	*arr_out = NULL;
	json_object *list = md_list_ours(st, purpose, call, err);
	if (list == NULL)
		return err->code ? err->code : RELAY_E_UNAVAILABLE;
	json_object *found = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *item = json_object_array_get_idx(list, i);
		const char *name = md_list_label(item, "purpose");
		const char *engine_state = md_str(item, "State");
		json_object *rec = name ? md_record_read(st, name, NULL) : NULL;
		if (rec == NULL) {
			/* Our store's label but no record: rebuild what the labels say. */
			rec = json_object_new_object();
			json_object_object_add(rec, "vm", json_object_new_string(name ? name : ""));
			json_object_object_add(rec, "container",
			                       json_object_new_string(md_str(item, "Id") ?: ""));
			if (md_list_label(item, "mode") &&
			    strcmp(md_list_label(item, "mode"), "service") == 0)
				json_object_object_add(rec, "mode", json_object_new_string("service"));
			json_object_object_add(rec, "purpose",
			                       json_object_new_string(md_list_label(item, "purpose") ?: ""));
			json_object_object_add(rec, "guest",
			                       json_object_new_string(md_list_label(item, "guest") ?: ""));
			json_object_object_add(rec, "image",
			                       json_object_new_string(md_list_label(item, "image") ?: ""));
			json_object_object_add(rec, "lease_id",
			                       json_object_new_string(md_list_label(item, "lease-id") ?: ""));
			json_object_object_add(
			    rec, "deadlineMs",
			    json_object_new_int64(atoll(md_list_label(item, "deadline-ms") ?: "0")));
			json_object_object_add(rec, "expiresAtMs", NULL);
			json_object_object_add(rec, "state", json_object_new_string("running"));
			char user[32];
			snprintf(user, sizeof user, "%u:%u", (unsigned)st->guest_uid,
			         (unsigned)st->guest_gid);
			json_object_object_add(rec, "user", json_object_new_string(user));
		}
		const char *rs = md_str(rec, "state");
		bool running = engine_state && strcmp(engine_state, "running") == 0;
		json_object_array_add(found,
		                      md_document(st, rec,
		                                  rs && strcmp(rs, "provisioning") == 0 && running ? "running"
		                                  : running                                        ? rs
		                                            : "failed"));
		json_object_put(rec);
	}
	json_object_put(list);
	*arr_out = found;
	return RELAY_OK;
}

size_t lease_count(md_state *st)
{
	DIR *d = opendir(st->kit.leases_dir);
	size_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);
		if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0 && de->d_name[0] != '.')
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* ---- the reaper ------------------------------------------------------------------------ */

void md_reap_once(md_state *st)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	json_object *list = md_list_ours(st, NULL, NULL, &err);
	if (list == NULL)
		return;
	int64_t now = st->host->now_ms();
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *item = json_object_array_get_idx(list, i);
		const char *name = md_list_label(item, "purpose");
		if (!md_valid_name(name))
			continue;
		int lock = md_record_lock(st, name);
		json_object *rec = md_record_read(st, name, NULL);
		int64_t expires =
		    rec ? md_int(rec, "expiresAtMs", 0) : atoll(md_list_label(item, "deadline-ms") ?: "0");
		int64_t grace = rec ? md_int(rec, "graceMs", st->grace_ms) : st->grace_ms;
		const char *rs = md_str(rec, "state");
		bool provisioning = rs && strcmp(rs, "provisioning") == 0;
		bool alive = rec && md_owner_alive(st, rec);
		/* An acquisition in flight in this relay is never reaped. */
		bool due = expires > 0 && now > expires + grace && !alive && !provisioning;
		if (due) {
			st->host->log(RELAY_LOG_INFO, MD_PLUGIN_NAME,
			              "reaping %s: its lease expired and the relay that held it is gone",
			              name);
			relay_error e2;
			memset(&e2, 0, sizeof e2);
			json_object *what = rec;
			json_object *fallback = NULL;
			if (what == NULL) {
				fallback = json_object_new_object();
				json_object_object_add(fallback, "vm", json_object_new_string(name));
				json_object_object_add(fallback, "container",
				                       json_object_new_string(md_str(item, "Id") ?: name));
				if (md_list_label(item, "mode") &&
				    strcmp(md_list_label(item, "mode"), "service") == 0) {
					json_object_object_add(fallback, "mode",
					                       json_object_new_string("service"));
					json_object_object_add(
					    fallback, "taskNetwork",
					    json_object_new_string(md_list_label(item, "network") ?: ""));
				}
				what = fallback;
			}
			if (rec)
				md_console_stop_all(st, rec); /* a dead relay's viewers, password files */
			int removed = md_remove_guest(st, what, NULL, &e2);
			json_object_put(fallback);
			if (removed == 1) {
				remove_volumes(rec ? md_engine_of(st, rec, NULL) : st, rec, NULL);
				if (rec)
					md_record_remove(st, name);
			}
		}
		json_object_put(rec);
		if (lock >= 0)
			close(lock);
	}
	json_object_put(list);
}

static void reap_periodically(void *arg)
{
	md_reap_once(arg);
	md_swarm_watch(arg); /* a guest lost with its node is seen within a beat */
}

int md_reaper_start(md_state *st)
{
	return rk_reaper_start(&st->reaper, st->reaper_interval_ms, reap_periodically, st);
}

void md_reaper_stop(md_state *st)
{
	rk_reaper_stop(&st->reaper);
}
