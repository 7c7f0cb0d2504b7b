/*
 * md_nodes.c — a Swarm of several hosts (docs/machine-docker.md, "A Swarm
 * of several hosts"): the engine of every node a task may land on, the
 * other managers to fail over to, and the Swarm's own placement options.
 *
 * A node's engine is an md_state of its own (a copy of the plugin's with
 * the node's endpoint, ssh forwarder and TLS files), so that exec, copy,
 * the display and the console run unchanged against it. Node engines are
 * made at init from options.nodes (keyed by hostname or node id), or when
 * a task first lands on a node: from options.discovery (the node's address
 * as the manager reports it, over ssh), or — for the manager's own node —
 * from the plugin's endpoint. They live until fini.
 *
 * Failover: md_api() asks md_manager_pick() which manager engine to use and
 * md_manager_next() for another when that one cannot be reached; the choice
 * sticks until that manager fails in turn.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "md.h"
#include "md_lease.h"
#include "relay_support/json_get.h"

#define MD_MAX_NODES    64
#define MD_MAX_MANAGERS 8

typedef struct md_node {
	char key[128];      /* the options.nodes key (hostname or id), or the discovered hostname */
	char id[128];       /* the Swarm node id, "" until the manager named it */
	char hostname[128]; /* as the manager reports it, "" until then */
	const char *source; /* how the relay reaches it: "nodes", "discovery" or "endpoint" */
	md_state *eng;      /* the node's engine */
} md_node;

struct md_nodes {
	pthread_mutex_t lock;       /* guards everything below except the options (set before init) */
	pthread_mutex_t image_lock; /* one image distribution at a time */
	json_object *nodes_opt, *managers_opt, *discovery_opt, *placement_opt; /* owned, as given */
	md_node node[MD_MAX_NODES];
	size_t node_count;
	md_state *manager[MD_MAX_MANAGERS]; /* options.managers, in order */
	size_t manager_count;
	size_t preferred;     /* 0: the plugin's own endpoint, k: manager[k - 1] */
	unsigned next_socket; /* for the ssh forwarders' socket names */
};

/* ---- options ------------------------------------------------------------------------- */

/* st->nodes, made on first use: while the options are read (one thread) or
 * by md_nodes_init; afterwards it only returns it. */
static struct md_nodes *nodes_of(md_state *st)
{
	if (st->nodes == NULL) {
		st->nodes = calloc(1, sizeof *st->nodes);
		if (st->nodes) {
			pthread_mutex_init(&st->nodes->lock, NULL);
			pthread_mutex_init(&st->nodes->image_lock, NULL);
		}
	}
	return st->nodes;
}

static relay_status placement_check(md_state *st, json_object *v, relay_error *err)
{
	if (!json_object_is_type(v, json_type_object))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "options.placement must be {\"constraints\": [\"node.role==worker\", ...], "
		              "\"preferences\": [\"node.labels.zone\", ...]}");
	json_object_object_foreach(v, k, list)
	{
		if (strcmp(k, "constraints") != 0 && strcmp(k, "preferences") != 0)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.placement.%s is unknown (constraints, preferences)", k);
		bool ok = json_object_is_type(list, json_type_array);
		for (size_t i = 0; ok && i < json_object_array_length(list); i++) {
			json_object *item = json_object_array_get_idx(list, i);
			ok = json_object_is_type(item, json_type_string) &&
			     json_object_get_string_len(item) > 0 && json_object_get_string_len(item) < 256;
		}
		if (!ok)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "options.placement.%s must be a list of Swarm's own %s strings", k,
			              strcmp(k, "constraints") == 0 ? "constraint (node.hostname==a)"
			                                            : "spread descriptor (node.labels.zone)");
	}
	return RELAY_OK;
}

relay_status md_nodes_set_option(md_state *st, const char *key, json_object *v, relay_error *err)
{
	struct md_nodes *ns = nodes_of(st);
	if (ns == NULL)
		return md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	json_object **slot = strcmp(key, "nodes") == 0       ? &ns->nodes_opt
	                     : strcmp(key, "managers") == 0  ? &ns->managers_opt
	                     : strcmp(key, "discovery") == 0 ? &ns->discovery_opt
	                                                     : &ns->placement_opt;
	bool shape = strcmp(key, "managers") == 0 ? json_object_is_type(v, json_type_array)
	                                          : json_object_is_type(v, json_type_object);
	if (!shape)
		return md_err(
		    st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.%s must be %s", key,
		    strcmp(key, "nodes") == 0
		        ? "{\"<node hostname or id>\": {\"endpoint\": ..., \"ssh\": {...}, \"tls\": {...}}}"
		    : strcmp(key, "managers") == 0
		        ? "a list of {\"endpoint\": ..., \"ssh\": {...}, \"tls\": {...}}"
		    : strcmp(key, "discovery") == 0
		        ? "{\"ssh\": {\"user\", \"port\", \"identityFile\", \"knownHostsFile\", "
		          "\"remoteSocket\"}}"
		        : "an object");
	if (strcmp(key, "placement") == 0) {
		relay_status s = placement_check(st, v, err);
		if (s != RELAY_OK)
			return s;
	}
	json_object_put(*slot);
	*slot = json_object_get(v);
	return RELAY_OK;
}

/* ---- node engines ---------------------------------------------------------------------- */

static void engine_free(md_state *eng)
{
	if (eng == NULL)
		return;
	md_ssh_stop(eng);
	pthread_mutex_destroy(&eng->lock);
	pthread_mutex_destroy(&eng->ssh_lock);
	pthread_mutex_destroy(&eng->bake_lock);
	free(eng);
}

/* A copy of the plugin's state for another engine: the endpoint of `spec`
 * ({"endpoint", "ssh", "tls"}, checked as the plugin's own), or the
 * plugin's own endpoint when spec is NULL. Shares the plugin's strings and
 * images (never freed through it); no reaper, no Swarm role of its own. */
static md_state *engine_new(md_state *st, json_object *spec, const char *where, relay_error *err)
{
	md_state *eng = malloc(sizeof *eng);
	if (eng == NULL) {
		md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		return NULL;
	}
	*eng = *st;
	pthread_mutex_init(&eng->lock, NULL);
	pthread_mutex_init(&eng->ssh_lock, NULL);
	pthread_mutex_init(&eng->bake_lock, NULL);
	eng->nodes = NULL;
	eng->facts = NULL;
	eng->ssh_pid = 0;
	memset(&eng->reaper, 0, sizeof eng->reaper);
	eng->acquiring = 0;
	eng->swarm_known = -1; /* a node's engine is never asked to place services */
	eng->engine_version[0] = eng->api_version[0] = '\0'; /* its own engine's, asked anew */
	eng->engine_facts_known = false;
	memset(eng->bake, 0, sizeof eng->bake);
	if (spec) {
		memset(&eng->ssh, 0, sizeof eng->ssh);
		memset(&eng->tls, 0, sizeof eng->tls);
		eng->endpoint[0] = eng->socket_path[0] = '\0';
		relay_status s = md_parse_endpoint(eng, spec, where, err);
		if (s != RELAY_OK) {
			engine_free(eng);
			return NULL;
		}
	}
	if (eng->ssh.enabled) {
		unsigned n;
		pthread_mutex_lock(&st->nodes->lock);
		n = ++st->nodes->next_socket;
		pthread_mutex_unlock(&st->nodes->lock);
		if (snprintf(eng->socket_path, sizeof eng->socket_path, "%s/n%u.sock", st->kit.state_dir,
		             n) >= 100) {
			md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			       "%s: the state folder %s is too long for a unix socket path; use a shorter "
			       "MCP_RELAY_STATE_DIR with ssh:// endpoints",
			       where, st->kit.state_dir);
			engine_free(eng);
			return NULL;
		}
	}
	return eng;
}

relay_status md_nodes_init(md_state *st, relay_error *err)
{
	/* Made here, single-threaded, even without the options: node engines
	 * are added later, under its lock, when tasks land on nodes. */
	struct md_nodes *ns = nodes_of(st);
	if (ns == NULL)
		return md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	char where[256];
	if (ns->nodes_opt) {
		json_object_object_foreach(ns->nodes_opt, key, spec)
		{
			if (ns->node_count >= MD_MAX_NODES || strlen(key) == 0 || strlen(key) >= 128)
				return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
				              "options.nodes: at most %d nodes, each named by a hostname or "
				              "node id of 1-127 bytes",
				              MD_MAX_NODES);
			md_textf(where, sizeof where, "options.nodes.%s", key);
			md_state *eng = engine_new(st, spec, where, err);
			if (eng == NULL)
				return err->code;
			md_node *n = &ns->node[ns->node_count++];
			snprintf(n->key, sizeof n->key, "%s", key);
			n->source = "nodes";
			n->eng = eng;
		}
	}
	for (size_t i = 0; ns->managers_opt && i < json_object_array_length(ns->managers_opt); i++) {
		if (i >= MD_MAX_MANAGERS)
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "options.managers: at most %d",
			              MD_MAX_MANAGERS);
		md_textf(where, sizeof where, "options.managers[%zu]", i);
		md_state *eng = engine_new(st, json_object_array_get_idx(ns->managers_opt, i), where, err);
		if (eng == NULL)
			return err->code;
		ns->manager[ns->manager_count++] = eng;
	}
	if (ns->discovery_opt) {
		/* Checked now with a stand-in address: a bad file refuses the start. */
		json_object *probe = md_discovery_spec(st, "127.0.0.1");
		md_state *eng = probe ? engine_new(st, probe, "options.discovery", err) : NULL;
		json_object_put(probe);
		if (eng == NULL)
			return err->code ? err->code
			                 : md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			                          "options.discovery must be {\"ssh\": {\"user\", \"port\", "
			                          "\"identityFile\", \"knownHostsFile\", \"remoteSocket\"}}");
		engine_free(eng);
	}
	return RELAY_OK;
}

void md_nodes_free(md_state *st)
{
	struct md_nodes *ns = st->nodes;
	if (ns == NULL)
		return;
	for (size_t i = 0; i < ns->node_count; i++)
		engine_free(ns->node[i].eng);
	for (size_t i = 0; i < ns->manager_count; i++)
		engine_free(ns->manager[i]);
	json_object_put(ns->nodes_opt);
	json_object_put(ns->managers_opt);
	json_object_put(ns->discovery_opt);
	json_object_put(ns->placement_opt);
	pthread_mutex_destroy(&ns->lock);
	pthread_mutex_destroy(&ns->image_lock);
	free(ns);
	st->nodes = NULL;
}

/* The endpoint spec of a discovered node at `addr` (owned) or NULL. */
json_object *md_discovery_spec(md_state *st, const char *addr)
{
	json_object *ssh = md_obj(st->nodes ? st->nodes->discovery_opt : NULL, "ssh");
	const char *user = md_str(ssh, "user");
	int64_t port = md_int(ssh, "port", 22);
	if (ssh == NULL || user == NULL || port <= 0 || port > 65535)
		return NULL;
	char url[400];
	md_textf(url, sizeof url, "ssh://%s@%s:%lld", user, addr, (long long)port);
	json_object *files = json_object_new_object();
	static const char *const keep[] = {"identityFile", "knownHostsFile", "remoteSocket"};
	for (size_t i = 0; i < 3; i++)
		if (md_str(ssh, keep[i]))
			json_object_object_add(files, keep[i], json_object_new_string(md_str(ssh, keep[i])));
	json_object *spec = json_object_new_object();
	json_object_object_add(spec, "endpoint", json_object_new_string(url));
	json_object_object_add(spec, "ssh", files);
	return spec;
}

/* ---- managers ---------------------------------------------------------------------------- */

md_state *md_manager_pick(md_state *st)
{
	struct md_nodes *ns = st->nodes;
	if (ns == NULL || ns->manager_count == 0)
		return st;
	pthread_mutex_lock(&ns->lock);
	md_state *eng = ns->preferred == 0 ? st : ns->manager[ns->preferred - 1];
	pthread_mutex_unlock(&ns->lock);
	return eng;
}

md_state *md_manager_next(md_state *st, md_state *failed, size_t *tried)
{
	struct md_nodes *ns = st->nodes;
	if (ns == NULL || ns->manager_count == 0 || ++*tried > ns->manager_count)
		return NULL;
	pthread_mutex_lock(&ns->lock);
	md_state *cur = ns->preferred == 0 ? st : ns->manager[ns->preferred - 1];
	if (cur == failed) /* another thread may have moved on already */
		ns->preferred = (ns->preferred + 1) % (ns->manager_count + 1);
	md_state *eng = ns->preferred == 0 ? st : ns->manager[ns->preferred - 1];
	pthread_mutex_unlock(&ns->lock);
	if (eng != failed)
		st->host->log(RELAY_LOG_WARNING, MD_PLUGIN_NAME,
		              "the Swarm manager at %s cannot be reached; trying %s", failed->endpoint,
		              eng->endpoint);
	return eng;
}

/* ---- which engine a task's container is on ------------------------------------------------- */

static md_state *known_engine(struct md_nodes *ns, const char *id)
{
	md_state *eng = NULL;
	pthread_mutex_lock(&ns->lock);
	for (size_t i = 0; eng == NULL && i < ns->node_count; i++)
		if (strcmp(ns->node[i].id, id) == 0)
			eng = ns->node[i].eng;
	pthread_mutex_unlock(&ns->lock);
	return eng;
}

/* Adds or names a node: the entry keyed by hostname or id gets the id, or
 * `eng` (when not NULL) becomes a new entry. Returns the node's engine. */
static md_state *name_node(struct md_nodes *ns, const char *id, const char *hostname, md_state *eng,
                           const char *source)
{
	md_state *found = NULL;
	pthread_mutex_lock(&ns->lock);
	for (size_t i = 0; found == NULL && i < ns->node_count; i++) {
		md_node *n = &ns->node[i];
		if (strcmp(n->id, id) == 0 || strcmp(n->key, id) == 0 ||
		    (hostname[0] && strcmp(n->key, hostname) == 0)) {
			snprintf(n->id, sizeof n->id, "%s", id);
			snprintf(n->hostname, sizeof n->hostname, "%s", hostname);
			found = n->eng;
		}
	}
	if (found == NULL && eng && ns->node_count < MD_MAX_NODES) {
		md_node *n = &ns->node[ns->node_count++];
		snprintf(n->key, sizeof n->key, "%s", hostname[0] ? hostname : id);
		snprintf(n->id, sizeof n->id, "%s", id);
		snprintf(n->hostname, sizeof n->hostname, "%s", hostname);
		n->source = source;
		n->eng = found = eng;
		eng = NULL;
	}
	pthread_mutex_unlock(&ns->lock);
	engine_free(eng); /* lost a race, or no room */
	return found;
}

md_state *md_node_engine(md_state *st, const char *node_id, relay_call *call, char *why, size_t why_size)
{
	if (node_id == NULL || node_id[0] == '\0' || strpbrk(node_id, "/?#%") != NULL) {
		md_textf(why, why_size, "the Swarm did not say which node runs the task");
		return NULL;
	}
	struct md_nodes *ns = nodes_of(st);
	if (ns == NULL) {
		md_textf(why, why_size, "out of memory");
		return NULL;
	}
	md_state *eng = known_engine(ns, node_id);
	if (eng)
		return eng;
	/* Ask the manager what the node is called and where it is. */
	char path[256];
	md_textf(path, sizeof path, MD_API_PREFIX "/nodes/%s", node_id);
	md_reply r;
	relay_error e;
	char hostname[128] = "", addr[128] = "";
	if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) == RELAY_OK && r.status == 200) {
		const char *h = md_str(md_obj(r.json, "Description"), "Hostname");
		const char *a = md_str(md_obj(r.json, "Status"), "Addr");
		snprintf(hostname, sizeof hostname, "%s", h ? h : "");
		snprintf(addr, sizeof addr, "%s", a ? a : "");
	}
	md_reply_free(&r);
	eng = name_node(ns, node_id, hostname, NULL, NULL);
	if (eng)
		return eng;
	md_state *made = NULL;
	const char *source = "endpoint";
	relay_error me;
	memset(&me, 0, sizeof me);
	if (md_swarm_manager(st, call) && strcmp(node_id, st->swarm_node) == 0) {
		made = engine_new(st, NULL, "the manager's own node", &me); /* the plugin's own endpoint */
	} else if (ns->discovery_opt && addr[0] && strcmp(addr, "0.0.0.0") != 0) {
		source = "discovery";
		json_object *spec = md_discovery_spec(st, addr);
		char where[200];
		md_textf(where, sizeof where, "options.discovery for node %s", hostname);
		made = spec ? engine_new(st, spec, where, &me) : NULL;
		json_object_put(spec);
	}
	if (made)
		return name_node(ns, node_id, hostname, made, source);
	md_textf(why, why_size,
	         "the relay has no endpoint for node %s (id %s, address %s): add options.nodes.\"%s\" "
	         "= {\"endpoint\": \"ssh://user@%s\", \"ssh\": {...}} (or tcp:// with \"tls\"), or "
	         "options.discovery%s%s",
	         hostname[0] ? hostname : "?", node_id, addr[0] ? addr : "unknown",
	         hostname[0] ? hostname : node_id, addr[0] ? addr : "host", me.message[0] ? ": " : "",
	         me.message);
	return NULL;
}

md_state *md_engine_of(md_state *st, json_object *rec, relay_call *call)
{
	const char *node = md_str(rec, "swarmNode");
	if (!md_is_service(rec) || node == NULL || node[0] == '\0')
		return st;
	char why[512];
	md_state *eng = md_node_engine(st, node, call, why, sizeof why);
	return eng ? eng : st;
}

/* How the relay reaches known node `id` ("nodes", "discovery",
 * "endpoint", or "none" when it has no engine for it), and its hostname
 * into `host` (128 bytes, "?" when not known). */
static const char *node_source(struct md_nodes *ns, const char *id, char *host)
{
	const char *source = "none";
	if (host)
		snprintf(host, 128, "?");
	pthread_mutex_lock(&ns->lock);
	for (size_t i = 0; i < ns->node_count; i++)
		if (strcmp(ns->node[i].id, id) == 0) {
			source = ns->node[i].source ? ns->node[i].source : source;
			if (host && ns->node[i].hostname[0])
				snprintf(host, 128, "%s", ns->node[i].hostname);
		}
	pthread_mutex_unlock(&ns->lock);
	return source;
}

md_state *md_node_reach(md_state *st, const char *node_id, relay_call *call, char *why, size_t why_size)
{
	md_state *eng = md_node_engine(st, node_id, call, why, why_size);
	if (eng == NULL)
		return NULL;
	md_reply r;
	relay_error e;
	memset(&e, 0, sizeof e);
	relay_status s = md_api(eng, "GET", MD_API_PREFIX "/_ping", NULL, -1, -1, 10000, call, &r, &e);
	long code = s == RELAY_OK ? r.status : 0;
	if (s == RELAY_OK)
		md_reply_free(&r);
	if (code == 200)
		return eng;
	if (s == RELAY_OK)
		md_textf(e.message, sizeof e.message, "it answered HTTP %ld to /_ping", code);
	char host[128];
	const char *source = node_source(st->nodes, node_id, host);
	md_textf(why, why_size, "the relay cannot reach the engine of node %s (id %s) at %s, from %s: %s",
	         host, node_id, eng->endpoint,
	         strcmp(source, "discovery") == 0 ? "options.discovery"
	         : strcmp(source, "nodes") == 0   ? "options.nodes"
	                                          : "the plugin's endpoint",
	         e.message[0] ? e.message : relay_status_str(s));
	return NULL;
}

/* ---- the derived image on every node that may run a task ------------------------------------ */

/* 1 when the engine has image `ref`, 0 when not, -1 when it cannot tell. */
static int engine_has_image(md_state *eng, const char *ref, relay_call *call)
{
	md_reply r;
	relay_error e;
	if (md_image_inspect(eng, ref, call, &r, &e) != RELAY_OK)
		return -1;
	int has = r.status == 200 ? 1 : (r.status == 404 ? 0 : -1);
	md_reply_free(&r);
	return has;
}

/* Copies image `ref` from the manager's engine to `eng`: GET /images/{ref}/get
 * into *saved_fd once (a temporary file), then POST /images/load. */
static relay_status copy_image(md_state *st, md_state *eng, const char *ref, int *saved_fd, relay_call *call,
                               relay_error *err)
{
	md_reply r;
	relay_status s;
	if (*saved_fd < 0) {
		*saved_fd = md_tmp_file(st);
		if (*saved_fd < 0)
			return md_err(st, err, RELAY_E_IO, errno, "cannot make a temporary file under %s/tmp",
			              st->kit.state_dir);
		char path[512] = MD_API_PREFIX "/images/";
		md_url_encode(path, sizeof path, ref);
		strncat(path, "/get", sizeof path - strlen(path) - 1);
		s = md_api(st, "GET", path, NULL, -1, *saved_fd, (uint32_t)st->pull_timeout_ms, call, &r,
		           err);
		long code = r.status;
		if (s == RELAY_OK)
			md_reply_free(&r);
		if (s != RELAY_OK || code != 200) {
			close(*saved_fd);
			*saved_fd = -1;
			return s != RELAY_OK ? s
			                     : md_err(st, err, RELAY_E_UNAVAILABLE, 0,
			                              "the Swarm manager could not save the image %s (HTTP "
			                              "%ld)",
			                              ref, code);
		}
	}
	if (lseek(*saved_fd, 0, SEEK_SET) != 0)
		return md_err(st, err, RELAY_E_IO, errno, "cannot read the saved image back");
	s = md_api(eng, "POST", MD_API_PREFIX "/images/load?quiet=1", NULL, *saved_fd, -1,
	           (uint32_t)st->pull_timeout_ms, call, &r, err);
	if (s != RELAY_OK)
		return s;
	bool ok = r.status == 200 && (r.body == NULL || strstr(r.body, "\"error") == NULL);
	if (!ok)
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0,
		           "the engine at %s could not load the image %s "
		           "(HTTP %ld): %.300s",
		           eng->endpoint, ref, r.status, r.body ? r.body : "");
	md_reply_free(&r);
	return s;
}

relay_status md_nodes_spread_image(md_state *st, const char *ref, relay_call *call, relay_error *err)
{
	md_reply r;
	relay_status s = md_api(st, "GET", MD_API_PREFIX "/nodes", NULL, -1, -1, 20000, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_UNAVAILABLE ? s : RELAY_E_UNAVAILABLE;
	json_object *list = r.json && json_object_is_type(r.json, json_type_array) ? r.json : NULL;
	struct md_nodes *ns = nodes_of(st);
	int saved_fd = -1;
	if (ns)
		pthread_mutex_lock(&ns->image_lock);
	for (size_t i = 0; ns && list && s == RELAY_OK && i < json_object_array_length(list); i++) {
		json_object *node = json_object_array_get_idx(list, i);
		const char *state = md_str(md_obj(node, "Status"), "State");
		const char *avail = md_str(md_obj(node, "Spec"), "Availability");
		if (!state || strcmp(state, "ready") != 0 || !avail || strcmp(avail, "active") != 0)
			continue; /* no new task goes there */
		char why[512];
		md_state *eng = md_node_engine(st, md_str(node, "ID"), call, why, sizeof why);
		if (eng == NULL)
			continue; /* a task placed there is refused with `why` */
		int has = engine_has_image(eng, ref, call);
		if (has == 0) {
			st->host->log(RELAY_LOG_INFO, MD_PLUGIN_NAME, "copying %s to the engine at %s", ref,
			              eng->endpoint);
			s = copy_image(st, eng, ref, &saved_fd, call, err);
		}
	}
	if (ns)
		pthread_mutex_unlock(&ns->image_lock);
	if (saved_fd >= 0)
		close(saved_fd);
	md_reply_free(&r);
	return s;
}

/* ---- placement, and what the Swarm has ------------------------------------------------------ */

void md_nodes_placement(md_state *st, json_object *task_template)
{
	json_object *opt = st->nodes ? st->nodes->placement_opt : NULL;
	if (opt == NULL)
		return;
	json_object *placement = json_object_new_object();
	json_object *constraints = rsj_get_array(opt, "constraints");
	if (constraints)
		json_object_object_add(placement, "Constraints", json_object_get(constraints));
	json_object *prefs = rsj_get_array(opt, "preferences");
	json_object *out = json_object_new_array();
	for (size_t i = 0; prefs && i < json_object_array_length(prefs); i++) {
		json_object *spread = json_object_new_object();
		json_object_object_add(spread, "SpreadDescriptor",
		                       json_object_get(json_object_array_get_idx(prefs, i)));
		json_object *pref = json_object_new_object();
		json_object_object_add(pref, "Spread", spread);
		json_object_array_add(out, pref);
	}
	json_object_object_add(placement, "Preferences", out);
	json_object_object_add(task_template, "Placement", placement);
}

/* The running tasks of this store's services (labels on their container
 * spec) on node `node_id`. */
static int64_t guests_on(md_state *st, json_object *tasks, const char *node_id)
{
	int64_t n = 0;
	char key[64];
	md_textf(key, sizeof key, MD_LABEL "store");
	for (size_t i = 0; tasks && i < json_object_array_length(tasks); i++) {
		json_object *task = json_object_array_get_idx(tasks, i);
		const char *id = md_str(task, "NodeID");
		const char *store =
		    md_str(md_obj(md_obj(md_obj(task, "Spec"), "ContainerSpec"), "Labels"), key);
		if (id && strcmp(id, node_id) == 0 && store && strcmp(store, st->kit.state_dir) == 0)
			n++;
	}
	return n;
}

/* "unix", "ssh" or "tcp": the scheme of an engine's endpoint. */
static json_object *scheme_of(const md_state *eng)
{
	const char *end = strstr(eng->endpoint, "://");
	return json_object_new_string_len(eng->endpoint, end ? (int)(end - eng->endpoint) : 0);
}

json_object *md_nodes_report(md_state *st, relay_call *call)
{
	md_reply r, t;
	relay_error e;
	if (md_api(st, "GET", MD_API_PREFIX "/nodes", NULL, -1, -1, 5000, call, &r, &e) != RELAY_OK)
		return NULL;
	char path[256] = MD_API_PREFIX "/tasks?filters=";
	md_url_encode(path, sizeof path, "{\"desired-state\":[\"running\"]}");
	bool have_tasks = md_api(st, "GET", path, NULL, -1, -1, 5000, call, &t, &e) == RELAY_OK;
	json_object *tasks =
	    have_tasks && t.json && json_object_is_type(t.json, json_type_array) ? t.json : NULL;
	json_object *out = json_object_new_array();
	for (size_t i = 0;
	     r.json && json_object_is_type(r.json, json_type_array) && i < json_object_array_length(r.json);
	     i++) {
		json_object *node = json_object_array_get_idx(r.json, i);
		json_object *status = md_obj(node, "Status"), *spec = md_obj(node, "Spec");
		json_object *res = md_obj(md_obj(node, "Description"), "Resources");
		const char *id = md_str(node, "ID") ?: "";
		const char *state = md_str(status, "State"), *avail = md_str(spec, "Availability");
		const char *host = md_str(md_obj(node, "Description"), "Hostname") ?: "";
		json_object *o = json_object_new_object();
		json_object_object_add(o, "id", json_object_new_string(id));
		json_object_object_add(o, "hostname", json_object_new_string(host));
		json_object_object_add(o, "role", json_object_new_string(md_str(spec, "Role") ?: ""));
		json_object_object_add(o, "address", json_object_new_string(md_str(status, "Addr") ?: ""));
		json_object_object_add(o, "state", json_object_new_string(state ? state : "unknown"));
		json_object_object_add(o, "ready", json_object_new_boolean(state && !strcmp(state, "ready")));
		json_object_object_add(o, "drained",
		                       json_object_new_boolean(avail && !strcmp(avail, "drain")));
		json_object_object_add(o, "availability", json_object_new_string(avail ? avail : ""));
		json_object_object_add(o, "guests", json_object_new_int64(guests_on(st, tasks, id)));
		/* What the manager reports: the node's memory, less what tasks reserved. */
		json_object_object_add(o, "memoryBytes",
		                       json_object_new_int64(md_int(res, "MemoryBytes", 0)));
		json_object_object_add(o, "nanoCpus", json_object_new_int64(md_int(res, "NanoCPUs", 0)));
		/* Reachable: its engine answers /_ping now (a node that is down is not asked). */
		char why[700] = "";
		md_state *eng = NULL;
		if (state && !strcmp(state, "ready"))
			eng = md_node_reach(st, id, call, why, sizeof why);
		else
			md_textf(why, sizeof why, "node %s is %s", host, state ? state : "unknown");
		char none[8];
		md_state *known = eng ? eng : md_node_engine(st, id, call, none, sizeof none);
		json_object_object_add(o, "engine",
		                       known ? scheme_of(known) : json_object_new_string("none"));
		json_object_object_add(o, "engineSource",
		                       json_object_new_string(node_source(st->nodes, id, NULL)));
		json_object_object_add(o, "reachable", json_object_new_boolean(eng != NULL));
		json_object_object_add(o, "unreachableReason", eng ? NULL : json_object_new_string(why));
		json_object_array_add(out, o);
	}
	md_reply_free(&r);
	if (have_tasks)
		md_reply_free(&t);
	return out;
}

json_object *md_nodes_placement_report(md_state *st, relay_call *call)
{
	if (!st->swarm || !md_swarm_manager(st, call))
		return NULL;
	json_object *nodes = md_nodes_report(st, call);
	if (nodes == NULL)
		return NULL;
	/* relay/console.h's options.placement: the core keeps these fields. */
	static const char *const fields[][2] = {{"hostname", "name"},
	                                        {"id", "id"},
	                                        {"role", "role"},
	                                        {"state", "state"},
	                                        {"availability", "availability"},
	                                        {"engine", "engine"},
	                                        {"engineSource", "engine_source"},
	                                        {"reachable", "reachable"},
	                                        {"guests", "guests"},
	                                        {"memoryBytes", "memory_bytes"},
	                                        {"nanoCpus", "nano_cpus"}};
	json_object *list = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(nodes); i++) {
		json_object *in = json_object_array_get_idx(nodes, i), *o = json_object_new_object();
		for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
			json_object *v = NULL;
			json_object_object_get_ex(in, fields[f][0], &v);
			json_object_object_add(o, fields[f][1], json_object_get(v));
		}
		json_object_array_add(list, o);
	}
	json_object_put(nodes);
	json_object *out = json_object_new_object();
	json_object_object_add(out, "scheduler", json_object_new_string("swarm"));
	json_object_object_add(out, "nodes", list);
	return out;
}
