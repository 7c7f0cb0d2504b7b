/*
 * md_bake.c — the derived image of each base image: the base with the
 * guest program baked in (/.mcp-relay/init 0755 and /.mcp-relay/run/ 0700
 * of the guest user, both under a root-owned /.mcp-relay), so that an
 * acquire is a create and a start with nothing put into the container
 * first.
 *
 * Its tag is MD_BAKE_REPO ":<24 hex>", the hex of the SHA-256 of the base
 * image's id, the guest program's SHA-256 and the guest user: a new base
 * image, a changed guest program or another guest user give another tag,
 * so the image is made again exactly when what is in it would differ. The
 * labels io.mcp-relay.derived.{key, guest-sha256, base-id, base-ref, xvfb,
 * x11vnc}
 * say what it is made of; an image under that tag whose key label differs
 * is not used.
 *
 * Made with the engine's own commit, no build tool and no registry: a
 * container of the base image is created (never started), the entries are
 * put in through the archive API and checked with HEAD, POST /commit makes
 * the image, and the container is removed. One bake at a time per relay
 * (st->bake_lock); the answer is kept per image key and the base image's
 * id asked again at most every MD_BAKE_RECHECK_MS.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md.h"
#include "md_lease.h"

extern const unsigned char machine_docker_guest_start[];
extern const unsigned char machine_docker_guest_end[];

#define MD_BAKE_RECHECK_MS 30000

/* The base image's id: 1 present (id filled), 0 missing, -1 the engine did not answer. */
static int base_image_id(md_state *st, const char *ref, relay_call *call, char *id, size_t size,
                         relay_error *err)
{
	md_reply r;
	if (md_image_inspect(st, ref, call, &r, err) != RELAY_OK)
		return -1;
	int out = r.status == 200 && md_str(r.json, "Id") ? 1 : (r.status == 404 ? 0 : -1);
	if (out == 1)
		snprintf(id, size, "%s", md_str(r.json, "Id"));
	else if (out < 0)
		md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the engine did not describe image %s (HTTP %ld): %s",
		       ref, r.status, md_reply_message(&r));
	md_reply_free(&r);
	return out;
}

static const char *derived_label(json_object *image, const char *name)
{
	char key[96];
	snprintf(key, sizeof key, MD_LABEL "derived.%s", name);
	return md_str(md_obj(md_obj(image, "Config"), "Labels"), key);
}

/* The derived image under `ref`: 1 there with the key label `key`, 0 not (or another key), -1 unknown. */
static int derived_lookup(md_state *st, const char *ref, const char *key, relay_call *call, md_baked *facts)
{
	md_reply r;
	relay_error e;
	if (md_image_inspect(st, ref, call, &r, &e) != RELAY_OK)
		return -1;
	int out = r.status == 404 ? 0 : (r.status == 200 ? 1 : -1);
	if (out == 1) {
		const char *k = derived_label(r.json, "key");
		const char *x = derived_label(r.json, "xvfb");
		const char *v = derived_label(r.json, "x11vnc");
		out = k && strcmp(k, key) == 0 ? 1 : 0;
		facts->xvfb = x && strcmp(x, "1") == 0;
		facts->x11vnc = v && strcmp(v, "1") == 0;
	}
	md_reply_free(&r);
	return out;
}

static void remove_container(md_state *st, const char *name)
{
	md_reply r;
	relay_error e;
	if (md_container_api(st, "DELETE", name, "?force=1&v=1", NULL, 60000, NULL, &r, &e) == RELAY_OK)
		md_reply_free(&r);
}

/* Commits container `name` as `ref` with the derived labels. */
static relay_status commit(md_state *st, const char *name, const char *ref, const char *key,
                           const char *base_id, const md_image *im, const md_baked *facts, relay_call *call,
                           relay_error *err)
{
	const char *colon = strrchr(ref, ':');
	char path[4096] = MD_API_PREFIX "/commit?pause=false&container=";
	md_url_encode(path, sizeof path, name);
	strncat(path, "&repo=", sizeof path - strlen(path) - 1);
	char repo[256];
	snprintf(repo, sizeof repo, "%.*s", (int)(colon - ref), ref);
	md_url_encode(path, sizeof path, repo);
	strncat(path, "&tag=", sizeof path - strlen(path) - 1);
	md_url_encode(path, sizeof path, colon + 1);
	json_object *body = json_object_new_object();
	json_object *labels = json_object_new_object();
	md_add_label(labels, "derived.key", key);
	md_add_label(labels, "derived.guest-sha256", st->guest_sha256);
	md_add_label(labels, "derived.base-id", base_id);
	md_add_label(labels, "derived.base-ref", im->ref);
	md_add_label(labels, "derived.xvfb", facts->xvfb ? "1" : "0");
	md_add_label(labels, "derived.x11vnc", facts->x11vnc ? "1" : "0");
	/* Docker takes the labels from the body, Podman only from "changes"
	 * (one instruction per value): both are given. */
	json_object_object_foreach(labels, lk, lv)
	{
		char change[600];
		snprintf(change, sizeof change, "LABEL %s=%s", lk, json_object_get_string(lv));
		strncat(path, "&changes=", sizeof path - strlen(path) - 1);
		if (!md_url_encode(path, sizeof path, change)) {
			json_object_put(labels);
			json_object_put(body);
			return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
			              "the image reference %s is too long", im->ref);
		}
	}
	json_object_object_add(body, "Labels", labels);
	static const char *const entry[] = {MD_GUEST_INIT, NULL};
	static const char *const cmd[] = {"init", NULL};
	json_object_object_add(body, "Entrypoint", md_str_array(entry));
	json_object_object_add(body, "Cmd", md_str_array(cmd));
	md_reply r;
	relay_status s = md_api(st, "POST", path, body, -1, -1, MD_CREATE_TIMEOUT_MS, call, &r, err);
	json_object_put(body);
	if (s == RELAY_OK && r.status != 201 && r.status != 200)
		s = md_err(st, err, RELAY_E_REFUSED, 0,
		           "the engine refused to commit the guest image %s from %s (HTTP %ld): %s", ref,
		           im->ref, r.status, md_reply_message(&r));
	md_reply_free(&r);
	return s;
}

/* Puts the guest program into a created container `name` and checks it is
 * there (put again once: Docker 20.10 has answered 200 for an archive it
 * did not keep). */
static relay_status put_guest(md_state *st, const char *name, relay_call *call, relay_error *err)
{
	size_t glen = (size_t)(machine_docker_guest_end - machine_docker_guest_start);
	md_put_entry files[] = {
	    {.name = ".mcp-relay", .dir = true, .mode = 0755},
	    {.name = ".mcp-relay/init", .data = machine_docker_guest_start, .len = glen, .mode = 0755},
	    {.name = ".mcp-relay/run", .dir = true, .mode = 0700, .uid = st->guest_uid, .gid = st->guest_gid},
	};
	relay_status s = RELAY_OK;
	for (int attempt = 0; attempt < 2; attempt++) {
		s = md_put_entries(st, name, "/", files, sizeof files / sizeof files[0], call, err);
		uint32_t mode = 0;
		if (s == RELAY_OK && lease_path_exists(st, name, MD_GUEST_INIT, &mode) == 1 &&
		    (mode & 0755) == 0755)
			return RELAY_OK;
		if (s != RELAY_OK)
			return s;
		md_sleep_ms(200);
	}
	return md_err(st, err, RELAY_E_REFUSED, 0,
	              "the engine accepted the guest program for the guest image but does not have it");
}

/* Makes the derived image `ref` of base image `im`. */
static relay_status build(md_state *st, const md_image *im, const char *ref, const char *key,
                          const char *base_id, relay_call *call, md_baked *out, relay_error *err)
{
	char name[64] = "mcp-relay-bake-";
	md_random_hex(st, name + strlen(name), 16);
	st->host->call_progress(call, 0, -1, "machine-docker is baking its guest program into the image");
	json_object *body = json_object_new_object();
	json_object_object_add(body, "Image", json_object_new_string(base_id));
	static const char *const never[] = {"/nonexistent", NULL};
	json_object_object_add(body, "Entrypoint", md_str_array(never));
	json_object_object_add(body, "NetworkDisabled", json_object_new_boolean(true));
	json_object *labels = json_object_new_object();
	md_add_label(labels, "plugin", MD_PLUGIN_NAME);
	json_object_object_add(body, "Labels", labels);
	char path[512] = MD_API_PREFIX "/containers/create?name=";
	md_url_encode(path, sizeof path, name);
	md_reply r;
	relay_status s = md_api(st, "POST", path, body, -1, -1, MD_CREATE_TIMEOUT_MS, call, &r, err);
	json_object_put(body);
	long code = r.status;
	if (s == RELAY_OK && code != 201)
		s = md_err(
		    st, err, code == 404 ? RELAY_E_IMAGE_UNAVAILABLE : RELAY_E_REFUSED, 0,
		    "the engine refused a container of image %s to bake the guest image in (HTTP %ld): %s",
		    im->ref, code, md_reply_message(&r));
	md_reply_free(&r);
	if (s != RELAY_OK) {
		if (s == RELAY_E_INDETERMINATE || s == RELAY_E_TIMEOUT)
			remove_container(st, name);
		return s;
	}
	s = put_guest(st, name, call, err);
	if (s == RELAY_OK) {
		out->xvfb = lease_path_exists(st, name, "/usr/bin/Xvfb", NULL) == 1;
		out->x11vnc = lease_path_exists(st, name, "/usr/bin/x11vnc", NULL) == 1;
		s = commit(st, name, ref, key, base_id, im, out, call, err);
	}
	remove_container(st, name);
	if (s != RELAY_OK)
		return s;
	md_baked seen;
	memset(&seen, 0, sizeof seen);
	if (derived_lookup(st, ref, key, call, &seen) != 1)
		return md_err(
		    st, err, RELAY_E_REFUSED, 0,
		    "the engine committed the guest image %s but does not describe it with its labels", ref);
	return RELAY_OK;
}

/* The SHA-256 of "<base id>\n<guest program sha256>\n<uid>:<gid>\n" names the derived image. */
static void derived_key(md_state *st, const char *base_id, char key[65])
{
	if (st->guest_sha256[0] == '\0') {
		size_t glen = (size_t)(machine_docker_guest_end - machine_docker_guest_start);
		st->host->sha256_buffer(machine_docker_guest_start, glen, st->guest_sha256);
	}
	char text[512];
	int n = snprintf(text, sizeof text, "mcp-relay derived image v2\n%s\n%s\n%u:%u\n", base_id,
	                 st->guest_sha256, (unsigned)st->guest_uid, (unsigned)st->guest_gid);
	st->host->sha256_buffer(text, (size_t)n, key);
}

relay_status md_bake(md_state *st, const md_image *im, bool refresh, relay_call *call, md_baked *out,
                     relay_error *err)
{
	memset(out, 0, sizeof *out);
	size_t idx = (size_t)(im - st->images);
	if (idx >= st->image_count)
		return md_err(st, err, RELAY_E_INTERNAL, 0, "md_bake: not a configured image");
	pthread_mutex_lock(&st->bake_lock);
	md_bake_entry *c = &st->bake[idx];
	int64_t now = md_monotonic_ms();
	relay_status s = RELAY_OK;
	if (!refresh && c->ref[0] && now - c->checked_ms < MD_BAKE_RECHECK_MS)
		goto found;
	char base_id[160] = "";
	int present = base_image_id(st, im->ref, call, base_id, sizeof base_id, err);
	if (present == 0) {
		/* Not present: the engine pulls it (its own job), reported as progress. */
		s = md_ensure_image(st, im, call, err);
		if (s == RELAY_OK)
			present = base_image_id(st, im->ref, call, base_id, sizeof base_id, err);
		if (s == RELAY_OK && present != 1)
			s = md_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
			           "image %s (%s) was pulled but the engine does not describe it", im->key,
			           im->ref);
	} else if (present < 0) {
		s = err->code ? err->code : RELAY_E_UNAVAILABLE;
	}
	if (s != RELAY_OK)
		goto done;
	char key[65], ref[sizeof c->ref];
	derived_key(st, base_id, key);
	snprintf(ref, sizeof ref, MD_BAKE_REPO ":%.24s", key);
	if (!refresh && strcmp(c->ref, ref) == 0) {
		c->checked_ms = now;
		goto found;
	}
	md_baked facts;
	memset(&facts, 0, sizeof facts);
	int there = derived_lookup(st, ref, key, call, &facts);
	if (there != 1) {
		s = build(st, im, ref, key, base_id, call, &facts, err);
		if (s != RELAY_OK)
			goto done;
	}
	snprintf(c->ref, sizeof c->ref, "%s", ref);
	c->xvfb = facts.xvfb;
	c->x11vnc = facts.x11vnc;
	c->checked_ms = now;
found:
	snprintf(out->ref, sizeof out->ref, "%s", c->ref);
	out->xvfb = c->xvfb;
	out->x11vnc = c->x11vnc;
done:
	pthread_mutex_unlock(&st->bake_lock);
	return s;
}
