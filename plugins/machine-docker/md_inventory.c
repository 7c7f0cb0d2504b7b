/*
 * md_inventory.c — what machine-docker offers: the configured images (an
 * allow-list from key to reference), what each contains, and the checks of
 * `doctor`.
 *
 * What an image contains is read without running it: a container is
 * created (never started) from the image, and HEAD/GET of the archive API
 * read its files — /var/lib/dpkg/status for the package list, and the
 * runtimes and Xvfb by path — then the container is removed. The answer is
 * kept per image id (guarded by the state lock), so a relay asks once per
 * image.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"
#include "md_console.h"
#include "md_egress.h"
#include "md_lease.h"
#include "relay_kit/guest_facts.h"
#include "relay_support/json_get.h"

const md_image *inventory_find(md_state *st, const char *key)
{
	for (size_t i = 0; key && i < st->image_count; i++)
		if (strcmp(st->images[i].key, key) == 0)
			return &st->images[i];
	return NULL;
}

/* Paths whose presence the catalog reports. */
static const struct {
	const char *path;
	const char *id;
	const char *name;
} probes[] = {
    {"/bin/sh", "runtime:sh", "POSIX shell"},
    {"/usr/bin/python3", "runtime:python3", "Python 3"},
    {"/usr/bin/node", "runtime:node", "Node.js"},
    {"/usr/local/bin/node", "runtime:node", "Node.js"},
    {"/usr/bin/Xvfb", "xvfb", "Xvfb"},
    {"/usr/bin/x11vnc", "x11vnc", "x11vnc"},
};
#define PROBE_COUNT (sizeof probes / sizeof probes[0])

/* The image's id, or NULL when the engine does not have it. */
static char *image_id(md_state *st, const md_image *im, relay_call *call)
{
	md_reply r;
	relay_error e;
	if (md_image_inspect(st, im->ref, call, &r, &e) != RELAY_OK)
		return NULL;
	char *id = r.status == 200 && md_str(r.json, "Id") ? strdup(md_str(r.json, "Id")) : NULL;
	md_reply_free(&r);
	return id;
}

typedef struct image_facts {
	char *image_id;
	json_object *apps; /* array of {"id","name","aliases","version"} */
	bool has[PROBE_COUNT];
	char architecture[32];
} image_facts;

/* The cache of image facts by image id (st->facts, guarded by st->lock). */
struct md_facts_cache {
	image_facts items[MD_MAX_IMAGES];
	size_t count;
};

void inventory_free(md_state *st)
{
	struct md_facts_cache *c = st->facts;
	for (size_t i = 0; c && i < c->count; i++) {
		free(c->items[i].image_id);
		json_object_put(c->items[i].apps);
	}
	free(c);
	st->facts = NULL;
}

/* One installed package as a catalog application (at most 20,000). */
static void add_dpkg_app(void *ctx, const char *id, const char *name, const char *version)
{
	json_object *apps = ctx;
	if (json_object_array_length(apps) >= 20000)
		return;
	json_object *a = json_object_new_object();
	json_object_object_add(a, "id", json_object_new_string(id));
	json_object_object_add(a, "name", json_object_new_string(name));
	json_object_object_add(a, "aliases", json_object_new_array());
	json_object_object_add(a, "version", version ? json_object_new_string(version) : NULL);
	json_object_array_add(apps, a);
}

/* Reads one regular file of a container (at most 32 MiB) through the archive API. */
static char *read_container_file(md_state *st, const char *container, const char *path_in, relay_call *call)
{
	char path[1024] = MD_API_PREFIX "/containers/";
	md_url_encode(path, sizeof path, container);
	strncat(path, "/archive?path=", sizeof path - strlen(path) - 1);
	md_url_encode(path, sizeof path, path_in);
	int fd = md_tmp_file(st);
	if (fd < 0)
		return NULL;
	md_reply r;
	relay_error e;
	char *out = NULL;
	if (md_api(st, "GET", path, NULL, -1, fd, 120000, call, &r, &e) == RELAY_OK && r.status == 200) {
		lseek(fd, 0, SEEK_SET);
		struct archive *a = archive_read_new();
		archive_read_support_format_tar(a);
		struct archive_entry *ent;
		if (archive_read_open_fd(a, fd, 1 << 16) == ARCHIVE_OK &&
		    archive_read_next_header(a, &ent) == ARCHIVE_OK &&
		    archive_entry_filetype(ent) == AE_IFREG && archive_entry_size(ent) < (32 << 20)) {
			size_t n = (size_t)archive_entry_size(ent);
			out = malloc(n + 1);
			if (out && archive_read_data(a, out, n) == (la_ssize_t)n) {
				out[n] = '\0';
			} else {
				free(out);
				out = NULL;
			}
		}
		archive_read_free(a);
	}
	md_reply_free(&r);
	close(fd);
	return out;
}

/* Probe containers older than this were left by a relay that ended during
 * its probe (a probe takes seconds): removed before the next probe. */
#define STALE_PROBE_S 600

static void remove_stale_probes(md_state *st, relay_call *call)
{
	char path[1024] = MD_API_PREFIX "/containers/json?all=1&filters=";
	md_url_encode(path, sizeof path, "{\"label\":[\"" MD_LABEL "probe=1\"]}");
	md_reply r;
	relay_error e;
	if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) != RELAY_OK)
		return;
	int64_t now_s = st->host->now_ms() / 1000;
	for (size_t i = 0; r.status == 200 && r.json && json_object_is_type(r.json, json_type_array) &&
	                   i < json_object_array_length(r.json);
	     i++) {
		json_object *c = json_object_array_get_idx(r.json, i);
		const char *plugin = md_str(md_obj(c, "Labels"), MD_LABEL "plugin");
		int64_t created = md_int(c, "Created", now_s);
		if (plugin == NULL || strcmp(plugin, MD_PLUGIN_NAME) != 0 ||
		    now_s - created < STALE_PROBE_S || md_str(c, "Id") == NULL)
			continue;
		char del[512] = MD_API_PREFIX "/containers/";
		md_url_encode(del, sizeof del, md_str(c, "Id"));
		strncat(del, "?force=1&v=1", sizeof del - strlen(del) - 1);
		md_reply d;
		if (md_api(st, "DELETE", del, NULL, -1, -1, 60000, NULL, &d, &e) == RELAY_OK)
			md_reply_free(&d);
	}
	md_reply_free(&r);
}

/* Looks inside the image through a created, never started, container. */
static bool probe_image(md_state *st, const md_image *im, const char *id, relay_call *call, image_facts *f)
{
	remove_stale_probes(st, call);
	char name[64] = "mcp-relay-probe-";
	md_random_hex(st, name + strlen(name), 16);
	json_object *body = json_object_new_object();
	json_object_object_add(body, "Image", json_object_new_string(im->ref));
	json_object *cmd = json_object_new_array();
	json_object_array_add(cmd, json_object_new_string("/nonexistent"));
	json_object_object_add(body, "Entrypoint", cmd);
	json_object_object_add(body, "NetworkDisabled", json_object_new_boolean(true));
	json_object *labels = json_object_new_object();
	json_object_object_add(labels, MD_LABEL "plugin", json_object_new_string(MD_PLUGIN_NAME));
	json_object_object_add(labels, MD_LABEL "probe", json_object_new_string("1"));
	json_object_object_add(body, "Labels", labels);
	char path[512] = MD_API_PREFIX "/containers/create?name=";
	md_url_encode(path, sizeof path, name);
	md_reply r;
	relay_error e;
	relay_status s = md_api(st, "POST", path, body, -1, -1, 60000, call, &r, &e);
	json_object_put(body);
	bool created = s == RELAY_OK && r.status == 201;
	const char *arch = md_str(r.json, "Architecture");
	(void)arch;
	md_reply_free(&r);
	if (!created)
		return false;
	memset(f, 0, sizeof *f);
	f->image_id = strdup(id);
	f->apps = json_object_new_array();
	snprintf(f->architecture, sizeof f->architecture, "%s", st->arch);
	char *dpkg = read_container_file(st, name, "/var/lib/dpkg/status", call);
	if (dpkg)
		rk_dpkg_installed_each(dpkg, add_dpkg_app, f->apps);
	free(dpkg);
	md_add_package_commands(st, name, f->apps, call);
	for (size_t i = 0; i < PROBE_COUNT; i++)
		f->has[i] = lease_path_exists(st, name, probes[i].path, NULL) == 1;
	for (size_t i = 0; i < PROBE_COUNT; i++) {
		if (!f->has[i])
			continue;
		bool dup = false;
		for (size_t k = 0; k < i; k++)
			dup = dup || (f->has[k] && strcmp(probes[k].id, probes[i].id) == 0);
		if (dup)
			continue;
		json_object *a = json_object_new_object();
		json_object_object_add(a, "id", json_object_new_string(probes[i].id));
		json_object_object_add(a, "name", json_object_new_string(probes[i].name));
		json_object_object_add(a, "aliases", json_object_new_array());
		json_object_object_add(a, "version", NULL);
		json_object_array_add(f->apps, a);
	}
	char del[512] = MD_API_PREFIX "/containers/";
	md_url_encode(del, sizeof del, name);
	strncat(del, "?force=1&v=1", sizeof del - strlen(del) - 1);
	if (md_api(st, "DELETE", del, NULL, -1, -1, 60000, NULL, &r, &e) == RELAY_OK)
		md_reply_free(&r);
	return true;
}

/* The facts of an image (a copy the caller frees with facts_free), or false. */
static bool facts_of(md_state *st, const md_image *im, relay_call *call, image_facts *out, bool probe)
{
	memset(out, 0, sizeof *out);
	char *id = image_id(st, im, call);
	if (id == NULL)
		return false;
	bool found = false;
	pthread_mutex_lock(&st->lock);
	struct md_facts_cache *cache = st->facts;
	for (size_t i = 0; cache && !found && i < cache->count; i++) {
		if (strcmp(cache->items[i].image_id, id) == 0) {
			*out = cache->items[i];
			out->image_id = strdup(id);
			out->apps = NULL;
			json_object_deep_copy(cache->items[i].apps, &out->apps, NULL);
			found = true;
		}
	}
	pthread_mutex_unlock(&st->lock);
	if (!found && probe && probe_image(st, im, id, call, out)) {
		found = true;
		pthread_mutex_lock(&st->lock);
		if (st->facts == NULL)
			st->facts = calloc(1, sizeof *st->facts);
		if (st->facts && st->facts->count < MD_MAX_IMAGES) {
			image_facts *c = &st->facts->items[st->facts->count++];
			*c = *out;
			c->image_id = strdup(id);
			c->apps = NULL;
			json_object_deep_copy(out->apps, &c->apps, NULL);
		}
		pthread_mutex_unlock(&st->lock);
	}
	if (!found)
		out->image_id = id;
	else
		free(id);
	return true; /* present (facts known when out->apps != NULL) */
}

static void facts_free(image_facts *f)
{
	free(f->image_id);
	json_object_put(f->apps);
	memset(f, 0, sizeof *f);
}

static bool facts_has(const image_facts *f, const char *id)
{
	for (size_t i = 0; i < PROBE_COUNT; i++)
		if (f->has[i] && strcmp(probes[i].id, id) == 0)
			return true;
	return false;
}

json_object *inventory_images(relay_plugin_state *state, relay_call *call)
{
	md_state *st = state;
	size_t running = lease_count(st);
	json_object *images = json_object_new_object();
	for (size_t i = 0; i < st->image_count; i++) {
		const md_image *im = &st->images[i];
		image_facts f;
		bool present = facts_of(st, im, call, &f, true);
		json_object *o = json_object_new_object();
		json_object_object_add(o, "kind", json_object_new_string("linux"));
		json_object_object_add(o, "base_available", json_object_new_boolean(present));
		/* Not on the engine: acquire asks the engine to pull it (machine.h). */
		json_object_object_add(o, "base_fetchable", json_object_new_boolean(!present));
		json_object_object_add(o, "reference", json_object_new_string(im->ref));
		json_object_object_add(o, "imageId", f.image_id ? json_object_new_string(f.image_id) : NULL);
		bool known = f.apps != NULL;
		bool display = known && st->display_enabled && facts_has(&f, "xvfb");
		json_object_object_add(o, "display", json_object_new_boolean(display));
		bool vnc = false;
		const char *console = md_console_probe_text(st, known, known && facts_has(&f, "xvfb"),
		                                            known && facts_has(&f, "x11vnc"), &vnc);
		json_object_object_add(o, "vnc", json_object_new_boolean(vnc && display));
		json_object_object_add(o, "console", json_object_new_string(console));
		json_object *rt = json_object_new_object();
		json_object_object_add(rt, "shell",
		                       json_object_new_boolean(known && facts_has(&f, "runtime:sh")));
		json_object_object_add(rt, "python",
		                       json_object_new_boolean(known && facts_has(&f, "runtime:python3")));
		json_object_object_add(rt, "node",
		                       json_object_new_boolean(known && facts_has(&f, "runtime:node")));
		json_object_object_add(o, "runtimes", rt);
		json_object_object_add(
		    o, "snapshots",
		    json_object_new_string(display ? "on: Xvfb in the image gives each guest its own display"
		                           : known && facts_has(&f, "xvfb")
		                               ? "off: the image has Xvfb, but options.display is off"
		                               : "off: the image has no Xvfb"));
		if (!present)
			json_object_object_add(
			    o, "diagnostic",
			    json_object_new_string(
			        "the engine does not have this image; it is pulled at the first acquire"));
		json_object *conc = json_object_new_object();
		json_object_object_add(conc, "running", json_object_new_int64((int64_t)running));
		json_object_object_add(conc, "limit", json_object_new_int64(st->max_guests));
		json_object_object_add(conc, "acquirable",
		                       json_object_new_boolean((int)running < st->max_guests));
		json_object_object_add(o, "concurrency", conc);
		json_object_object_add(images, im->key, o);
		facts_free(&f);
	}
	json_object *cap = json_object_new_object();
	json_object_object_add(cap, "docker_running", json_object_new_int64((int64_t)running));
	json_object_object_add(cap, "docker_limit", json_object_new_int64(st->max_guests));
	json_object *net = json_object_new_object();
	json_object_object_add(net, "nat", json_object_new_string("loopback only (network none)"));
	json_object_object_add(net, "internet", json_object_new_boolean(false));
	json_object_object_add(cap, "network", net);
	/* A Swarm: its nodes as the manager reports them (md_nodes.c). */
	json_object *nodes = st->swarm && md_swarm_manager(st, call) ? md_nodes_report(st, call) : NULL;
	if (nodes)
		json_object_object_add(cap, "swarmNodes", nodes);
	json_object *out = json_object_new_object();
	json_object_object_add(out, "images", images);
	json_object_object_add(out, "capacity", cap);
	return out;
}

relay_status inventory_catalog(relay_plugin_state *state, relay_call *call, json_object **out,
                               relay_error *err)
{
	md_state *st = state;
	*out = NULL;
	/* An engine that does not answer is said, not an empty catalog ("no
	 * application matches" would blame the query). */
	md_reply ping;
	relay_status s = md_api(st, "GET", "/_ping", NULL, -1, -1, 10000, call, &ping, err);
	long code = s == RELAY_OK ? ping.status : 0;
	if (s == RELAY_OK)
		md_reply_free(&ping);
	if (s == RELAY_E_CANCELLED)
		return s;
	if (s != RELAY_OK || code != 200) {
		char why[RELAY_ERROR_MESSAGE_BYTES];
		snprintf(why, sizeof why, "%s", s != RELAY_OK ? err->message : "an HTTP error on /_ping");
		return md_err(
		    st, err, RELAY_E_UNAVAILABLE, 0,
		    "the container engine at %s does not answer (%s), so its images' applications "
		    "are unknown: start the engine, or set \"endpoint\" in MCP_RELAY_DOCKER_OPTIONS",
		    st->endpoint, why);
	}
	json_object *images = json_object_new_array();
	for (size_t i = 0; i < st->image_count; i++) {
		image_facts f;
		if (!facts_of(st, &st->images[i], call, &f, true) || f.apps == NULL) {
			facts_free(&f);
			continue;
		}
		json_object *img = json_object_new_object();
		json_object_object_add(img, "image", json_object_new_string(st->images[i].key));
		json_object_object_add(img, "os", json_object_new_string("linux"));
		json_object_object_add(img, "architecture", json_object_new_string(f.architecture));
		json_object_object_add(img, "applications", json_object_get(f.apps));
		json_object_array_add(images, img);
		facts_free(&f);
	}
	json_object *cat = json_object_new_object();
	json_object_object_add(cat, "schemaVersion", json_object_new_int64(1));
	json_object_object_add(cat, "images", images);
	*out = cat;
	return RELAY_OK;
}

/* ---- doctor -------------------------------------------------------------------------- */

static void check(json_object *arr, const char *name, bool ok, const char *detail, const char *fix)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "check", json_object_new_string(name));
	json_object_object_add(o, "ok", json_object_new_boolean(ok));
	json_object_object_add(o, "detail", json_object_new_string(detail));
	json_object_object_add(o, "fix", fix ? json_object_new_string(fix) : NULL);
	json_object_array_add(arr, o);
}

json_object *inventory_doctor(relay_plugin_state *state, relay_call *call)
{
	md_state *st = state;
	json_object *arr = json_object_new_array();
	char detail[1024], fix[512];
	md_reply r;
	relay_error e;
	memset(&e, 0, sizeof e);
	relay_status s = md_api(st, "GET", MD_API_PREFIX "/version", NULL, -1, -1, 10000, call, &r, &e);
	bool up = s == RELAY_OK && r.status == 200 && r.json;
	if (up) {
		const char *ver = md_str(r.json, "Version"), *api = md_str(r.json, "ApiVersion");
		json_object *comps = rsj_get_array(r.json, "Components");
		const char *engine = comps ? md_str(json_object_array_get_idx(comps, 0), "Name") : NULL;
		md_textf(detail, sizeof detail, "%s answers: %s %s, API %s", st->endpoint,
		         engine ? engine : "engine", ver ? ver : "?", api ? api : "?");
	} else {
		md_textf(detail, sizeof detail, "%s: %s", st->endpoint,
		         e.message[0] ? e.message : "no answer");
		md_textf(fix, sizeof fix,
		         "start the engine (Docker: systemctl start docker; Podman: podman system service "
		         "--time=0 %s) "
		         "or set \"endpoint\" in MCP_RELAY_DOCKER_OPTIONS",
		         st->endpoint);
	}
	check(arr, "endpoint", up, detail, up ? NULL : fix);
	md_reply_free(&r);
	if (!up)
		return arr;
	s = md_api(st, "GET", MD_API_PREFIX "/info", NULL, -1, -1, 10000, call, &r, &e);
	if (s == RELAY_OK && r.status == 200 && r.json) {
		const char *driver = md_str(r.json, "CgroupDriver"), *cgv = md_str(r.json, "CgroupVersion");
		const char *def_rt = md_str(r.json, "DefaultRuntime");
		json_object *rts = md_obj(r.json, "Runtimes");
		char names[512] = "";
		/* An engine on this host lists the runtimes it is configured with,
		 * installed or not (Podman lists kata, krun, runsc...): only those
		 * whose program exists are named. */
		bool local = strncmp(st->endpoint, "unix://", 7) == 0;
		bool wanted_installed = st->runtime[0] == '\0';
		if (rts && json_object_is_type(rts, json_type_object)) {
			json_object_object_foreach(rts, k, v)
			{
				const char *prog = md_str(v, "path");
				bool installed = !local || prog == NULL || access(prog, X_OK) == 0;
				if (!installed)
					continue;
				if (strcmp(k, st->runtime) == 0)
					wanted_installed = true;
				snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
				         names[0] ? ", " : "", k);
			}
		}
		bool rootless = false;
		json_object *so = rsj_get_array(r.json, "SecurityOptions");
		for (size_t i = 0; so && i < json_object_array_length(so); i++)
			if (strstr(json_object_get_string(json_object_array_get_idx(so, i)), "rootless"))
				rootless = true; /* Docker: name=rootless */
		json_object *flag = NULL; /* Podman: "Rootless": true (its SecurityOptions do not say) */
		if (json_object_object_get_ex(r.json, "Rootless", &flag) && json_object_get_boolean(flag))
			rootless = true;
		md_textf(detail, sizeof detail, "the engine runs %s",
		         rootless ? "rootless" : "as root (rootful)");
		check(arr, "rootless", true, detail, NULL);
		bool rt_ok = wanted_installed;
		md_textf(detail, sizeof detail, "runtimes: %s; default %s; guests use %s",
		         names[0] ? names : "none listed", def_rt ? def_rt : "?",
		         st->runtime[0] ? st->runtime : "the default");
		check(arr, "runtimes", rt_ok, detail,
		      rt_ok ? NULL : "install the runtime named in options.runtime, or remove the option");
		bool hybrid = cgv && strcmp(cgv, "1") == 0;
		md_textf(detail, sizeof detail,
		         "cgroup driver %s, cgroup v%s: the engine enforces the guests' pids, memory "
		         "and CPU limits",
		         driver ? driver : "?", cgv ? cgv : "?");
		md_textf(fix, sizeof fix, "on a cgroup v1 or hybrid host crun cannot start containers: %s",
		         md_runtime_remedy(st, call));
		const char *unapplied = md_limits_not_applied(st, call);
		if (unapplied)
			md_textf(detail, sizeof detail, "cgroup driver %s, cgroup v%s: %s",
			         driver ? driver : "?", cgv ? cgv : "?", unapplied);
		check(arr, "cgroups", driver != NULL && unapplied == NULL, detail, hybrid ? fix : NULL);
		if (unapplied) /* a warning: guests still work, bounded by their rlimits only */
			json_object_object_add(
			    json_object_array_get_idx(arr, json_object_array_length(arr) - 1), "level",
			    json_object_new_string("warning"));
		json_object *swarm = md_obj(r.json, "Swarm");
		const char *ls = md_str(swarm, "LocalNodeState");
		md_textf(detail, sizeof detail, "swarm: %s; machine-docker places each guest on this engine",
		         ls && ls[0] ? ls : "not available");
		check(arr, "swarm", true, detail, NULL);
	}
	md_reply_free(&r);
	for (size_t i = 0; i < st->image_count; i++) {
		char *id = image_id(st, &st->images[i], call);
		md_textf(detail, sizeof detail, "image %s: %s %s", st->images[i].key, st->images[i].ref,
		         id ? "is present" : "is not present on the engine");
		md_textf(fix, sizeof fix,
		         "pull or build %s on the engine (it is pulled at the first acquire if a "
		         "registry has it)",
		         st->images[i].ref);
		check(arr, "image", id != NULL, detail, id ? NULL : fix);
		free(id);
	}
	if (st->image_count == 0)
		check(arr, "image", false, "no image is configured",
		      "add \"images\": {\"<key>\": \"<reference>\"} to MCP_RELAY_DOCKER_OPTIONS");
	/* The guest network as acquire takes it (md_lease.c check_spec): allow
	 * and internet need the egress proxy in the container's namespace. */
	char why[600] = "";
	bool nat = strcmp(st->kit.default_network, "nat") == 0;
	bool net_ok = nat || md_egress_reachable(st, why, sizeof why);
	md_textf(detail, sizeof detail, "guest network %s: %s", st->kit.default_network,
	         nat      ? "the guest's own loopback only"
	         : net_ok ? "through the relay's egress proxy in the guest's namespace"
	                  : why);
	check(arr, "network", net_ok, detail,
	      net_ok ? NULL
	             : "set MCP_RELAY_GUEST_NETWORK=nat, or use an engine on this host the relay can enter");
	bool writable = access(st->kit.leases_dir, W_OK) == 0;
	md_textf(detail, sizeof detail, "lease records go to %s", st->kit.leases_dir);
	check(arr, "state folder", writable, detail,
	      writable ? NULL : "make the relay's state folder writable");
	return arr;
}
