/*
 * md_applied.c — what the engine really applies to a guest, never what was
 * asked of it: the OCI runtime the container got (Podman's compatible API
 * ignores HostConfig.Runtime and reports "oci"; its own API says which),
 * and the limits an engine cannot set (rootless on cgroup v1: no pids,
 * memory or CPU limits). Also the remedy for a host whose cgroups crun
 * refuses, in the form the engine in use accepts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md.h"
#include "md_lease.h"
#include "relay_support/json_get.h"

/* The engine's kind and cgroup facts, asked once (/version, /info). */
static void learn_engine(md_state *st, relay_call *call)
{
	pthread_mutex_lock(&st->lock);
	bool known = st->engine_facts_known;
	pthread_mutex_unlock(&st->lock);
	if (known)
		return;
	md_reply r;
	relay_error e;
	bool podman = false, rootless = false, cgroup_v1 = false, answered = false;
	if (md_api(st, "GET", MD_API_PREFIX "/version", NULL, -1, -1, 10000, call, &r, &e) == RELAY_OK) {
		json_object *comps = rsj_get_array(r.json, "Components");
		for (size_t i = 0; comps && i < json_object_array_length(comps); i++) {
			const char *name = md_str(json_object_array_get_idx(comps, i), "Name");
			if (name && strstr(name, "Podman"))
				podman = true;
		}
		md_reply_free(&r);
	}
	if (md_api(st, "GET", MD_API_PREFIX "/info", NULL, -1, -1, 10000, call, &r, &e) == RELAY_OK) {
		answered = r.status == 200 && r.json;
		const char *cgv = md_str(r.json, "CgroupVersion");
		cgroup_v1 = cgv && strcmp(cgv, "1") == 0;
		json_object *so = rsj_get_array(r.json, "SecurityOptions");
		for (size_t i = 0; so && i < json_object_array_length(so); i++) {
			const char *opt = json_object_get_string(json_object_array_get_idx(so, i));
			if (opt && strstr(opt, "rootless"))
				rootless = true; /* Docker: name=rootless */
		}
		json_object *flag = NULL; /* Podman: "Rootless": true (its SecurityOptions do not say) */
		if (json_object_object_get_ex(r.json, "Rootless", &flag) && json_object_get_boolean(flag))
			rootless = true;
		md_reply_free(&r);
	}
	pthread_mutex_lock(&st->lock);
	st->engine_podman = podman;
	st->engine_rootless = rootless;
	st->engine_cgroup_v1 = cgroup_v1;
	st->engine_facts_known = answered;
	pthread_mutex_unlock(&st->lock);
}

bool md_engine_is_podman(md_state *st, relay_call *call)
{
	learn_engine(st, call);
	pthread_mutex_lock(&st->lock);
	bool podman = st->engine_podman;
	pthread_mutex_unlock(&st->lock);
	return podman;
}

const char *md_limits_not_applied(md_state *st, relay_call *call)
{
	learn_engine(st, call);
	pthread_mutex_lock(&st->lock);
	bool cannot = st->engine_rootless && st->engine_cgroup_v1;
	bool podman = st->engine_podman;
	pthread_mutex_unlock(&st->lock);
	if (!cannot)
		return NULL;
	return podman ? "rootless Podman on cgroup v1 cannot set the guests' pids, memory and CPU limits "
	                "(an ordinary user gets no cgroup v1 hierarchy): each guest is bounded only by "
	                "its rlimits (nproc, nofile); a cgroup v2 host (systemd.unified_cgroup_hierarchy=1) "
	                "or a rootful engine applies them"
	              : "a rootless engine on cgroup v1 cannot set the guests' pids, memory and CPU limits: "
	                "each guest is bounded only by its rlimits (nproc, nofile); a cgroup v2 host or a "
	                "rootful engine applies them";
}

const char *md_runtime_remedy(md_state *st, relay_call *call)
{
	learn_engine(st, call);
	pthread_mutex_lock(&st->lock);
	bool podman = st->engine_podman;
	pthread_mutex_unlock(&st->lock);
	return podman ? "start the Podman service with runc: podman --runtime runc system service --time=0 "
	                "<socket> (Podman's compatible API ignores options.runtime)"
	              : "set \"runtime\": \"runc\" in MCP_RELAY_DOCKER_OPTIONS";
}

/* The runtime of container `vm` as the engine reports it; "" when it does
 * not say. Docker: HostConfig.Runtime. Podman: its own inspect's
 * OCIRuntime (the compatible one says "oci" for every container). */
static void actual_runtime(md_state *st, const char *vm, relay_call *call, char *out, size_t size)
{
	out[0] = '\0';
	json_object *info = NULL;
	relay_error e;
	if (md_container_get(st, vm, call, &info) == 1) {
		const char *rt = md_str(md_obj(info, "HostConfig"), "Runtime");
		if (rt && strcmp(rt, "oci") != 0)
			snprintf(out, size, "%s", rt);
		json_object_put(info);
	}
	if (out[0])
		return;
	char path[512] = "/v4.0.0/libpod/containers/"; /* Podman 4 and later */
	md_url_encode(path, sizeof path, vm);
	snprintf(path + strlen(path), sizeof path - strlen(path), "/json");
	md_reply r;
	if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) == RELAY_OK) {
		const char *rt = r.status == 200 ? md_str(r.json, "OCIRuntime") : NULL;
		if (rt)
			snprintf(out, size, "%s", rt);
		md_reply_free(&r);
	}
}

relay_status md_verify_applied(md_state *st, json_object *rec, const char *vm, relay_call *call,
                               relay_error *err)
{
	/* The limits: what cannot be applied is said, in the record (so in the
	 * lease document) and in the log, never dropped silently. */
	const char *unapplied = md_limits_not_applied(st, call);
	if (unapplied) {
		json_object_object_add(rec, "limitsNotApplied", json_object_new_string(unapplied));
		st->host->log(RELAY_LOG_WARNING, MD_PLUGIN_NAME, "%s: %s", vm, unapplied);
	}
	char actual[64];
	actual_runtime(st, vm, call, actual, sizeof actual);
	pthread_mutex_lock(&st->lock);
	char wanted[64];
	snprintf(wanted, sizeof wanted, "%s", st->runtime);
	pthread_mutex_unlock(&st->lock);
	if (actual[0] == '\0') {
		if (wanted[0] == '\0')
			return RELAY_OK; /* nothing asked, nothing said: the record keeps the default */
		return md_err(st, err, RELAY_E_REFUSED, 0,
		              "options.runtime is \"%s\", but the engine does not say which runtime the "
		              "guest got, so it cannot be verified; nothing was kept",
		              wanted);
	}
	json_object_object_add(rec, "runtime", json_object_new_string(actual));
	if (wanted[0] && strcmp(wanted, actual) != 0) {
		learn_engine(st, call);
		pthread_mutex_lock(&st->lock);
		bool podman = st->engine_podman;
		pthread_mutex_unlock(&st->lock);
		return md_err(
		    st, err, RELAY_E_REFUSED, 0,
		    "options.runtime is \"%s\", but the engine runs the guest with %s%s; the "
		    "guest was removed: %s",
		    wanted, actual,
		    podman ? " (Podman's compatible API ignores the runtime a container asks for)" : "",
		    podman ? "start the Podman service with that runtime: podman --runtime <name> "
		             "system service --time=0 <socket>, or remove options.runtime"
		           : "install that runtime in the engine (dockerd --add-runtime), or remove "
		             "options.runtime");
	}
	return RELAY_OK;
}
