/* plugin-test checks 10-18: images and the lease lifecycle of a machine
 * plugin (relay/machine.h "Lifecycle"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plugin_test.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/randx.h"

#define PT_TTL_MS 600000

/* Parses what the plugin returned and frees it with the counting host. */
static json_object *take_json(char *text)
{
	json_object *obj = text ? jsonx_parse_str(text, NULL, 0) : NULL;
	pt_host()->free(text);
	return obj;
}

/* Check 10: the inventory, and the image the lease checks use. */
static char *pick_image(pt_run *run)
{
	const relay_machine_ops *m = &run->plugin->machine;
	relay_error err;
	memset(&err, 0, sizeof err);
	char *text = NULL;
	relay_status st = m->images(run->plugin->state, NULL, 0, &text, &err);
	json_object *inventory = take_json(text);
	json_object *images = jsonx_get_obj(inventory, "images");
	char *chosen = NULL;
	if (st != RELAY_OK)
		pt_fail(run, 10, "images answered %s: %s", pt_status(st), err.message);
	else if (!json_object_is_type(images, json_type_object))
		pt_fail(run, 10, "images did not answer {\"images\": {\"<key>\": {...}}, \"capacity\": ...}");
	else {
		pt_ran(run, 10);
		json_object_object_foreach(images, key, entry)
		{
			bool base = false;
			if (chosen == NULL && jsonx_get_bool(entry, "base_available", &base) && base)
				chosen = strdup(key);
		}
	}
	json_object_put(inventory);
	if (run->image) {
		free(chosen);
		chosen = strdup(run->image);
	}
	if (chosen == NULL && !run->failed[10])
		pt_fail(run, 10,
		        "images offers no image with \"base_available\": true; name one with --image");
	return chosen;
}

/* The rules of the lease document (relay/machine.h) that check 11 holds. */
static bool lease_ok(pt_run *run, json_object *lease, const char *purpose)
{
	static const char *const states[] = {"pending",   "provisioning", "running",
	                                     "releasing", "failed",       "unknown"};
	const char *keys[] = {"vm", "purpose", "image"};
	for (size_t i = 0; i < 3; i++)
		if (jsonx_get_str(lease, keys[i]) == NULL) {
			pt_fail(run, 11, "the lease document has no string \"%s\" (relay/machine.h)",
			        keys[i]);
			return false;
		}
	if (strcmp(jsonx_get_str(lease, "purpose"), purpose) != 0) {
		pt_fail(run, 11, "the lease's \"purpose\" is %s, not the spec's %s",
		        jsonx_get_str(lease, "purpose"), purpose);
		return false;
	}
	const char *state = jsonx_get_str(lease, "state");
	bool known = state == NULL && !jsonx_has(lease, "state");
	for (size_t i = 0; state && i < sizeof states / sizeof states[0]; i++)
		known |= strcmp(state, states[i]) == 0;
	if (!known) {
		pt_fail(run, 11,
		        "the lease's \"state\" is not one of pending, provisioning, running, releasing, "
		        "failed, unknown");
		return false;
	}
	return true;
}

void pt_purpose(const char *what, char *out, size_t out_len)
{
	char hex[17];
	random_hex(hex, 16);
	snprintf(out, out_len, "relay-plugin-test-%s-%s", what, hex);
}

char *pt_acquire_spec(const char *guest, const char *image, const char *purpose)
{
	json_object *spec = json_object_new_object();
	jsonx_add_str(spec, "guest", guest);
	jsonx_add_str(spec, "task", "plugin-test");
	jsonx_add_str(spec, "purpose", purpose);
	jsonx_add_str(spec, "image", image);
	jsonx_add_str(spec, "env", "none");
	jsonx_add_str(spec, "network", "nat");
	jsonx_add_bool(spec, "vnc", false);
	jsonx_add_int(spec, "ttlMs", PT_TTL_MS);
	jsonx_add_int(spec, "deadlineMs", clock_now_ms() + 3600000);
	char *text = jsonx_to_string(spec, 0);
	json_object_put(spec);
	return text;
}

void pt_machine_acquire(pt_run *run)
{
	char *image = pick_image(run);
	if (image == NULL) {
		pt_skip(run, 11, "no image to acquire");
		return;
	}
	char purpose[64];
	pt_purpose("lease", purpose, sizeof purpose);
	snprintf(run->image_key, sizeof run->image_key, "%s", image);
	char *spec_text = pt_acquire_spec("plugin-test", image, purpose);
	free(image);
	relay_error err;
	memset(&err, 0, sizeof err);
	char *text = NULL;
	relay_status st = run->plugin->machine.acquire(run->plugin->state, spec_text, NULL, 0, &text, &err);
	free(spec_text);
	if (st != RELAY_OK) {
		pt_fail(run, 11, "acquire answered %s: %s", pt_status(st), err.message);
		pt_host()->free(text);
		return;
	}
	run->lease_json = text ? strdup(text) : NULL;
	run->lease_acquired = true;
	json_object *lease = take_json(text);
	if (lease == NULL)
		pt_fail(run, 11, "acquire answered RELAY_OK without a JSON object in *lease_json_out");
	else if (lease_ok(run, lease, purpose))
		pt_ran(run, 11);
	json_object_put(lease);
}

/* 1 when `text` (freed here) is a lease document of the same "vm". */
static bool same_vm(const pt_run *run, char *text)
{
	json_object *a = jsonx_parse_str(run->lease_json, NULL, 0), *b = take_json(text);
	const char *va = jsonx_get_str(a, "vm"), *vb = jsonx_get_str(b, "vm");
	bool same = va && vb && strcmp(va, vb) == 0;
	json_object_put(a);
	json_object_put(b);
	return same;
}

void pt_machine_lifecycle(pt_run *run)
{
	if (run->lease_json == NULL) {
		for (int n = 12; n <= 18; n++)
			pt_skip(run, n, "no lease was acquired (check 11)");
		return;
	}
	const relay_machine_ops *m = &run->plugin->machine;
	relay_plugin_state *state = run->plugin->state;
	relay_error err;
	memset(&err, 0, sizeof err);
	char *text = NULL;
	relay_status st = m->inspect(state, run->lease_json, NULL, 0, &text, &err);
	if (st != RELAY_OK)
		pt_fail(run, 12, "inspect of the new lease answered %s: %s", pt_status(st), err.message);
	else if (!same_vm(run, text))
		pt_fail(run, 12, "inspect answered a lease document of another \"vm\"");
	else
		pt_ran(run, 12);
	text = NULL;
	st = m->renew(state, run->lease_json, PT_TTL_MS, NULL, 0, &text, &err);
	if (st != RELAY_OK)
		pt_fail(run, 13, "renew answered %s: %s", pt_status(st), err.message);
	else if (text != NULL && !same_vm(run, text))
		pt_fail(run, 13, "renew answered a lease document of another \"vm\"");
	else
		pt_ran(run, 13);
	if (m->find_by_purpose == NULL) {
		pt_skip(run, 14, "the plugin does not provide find_by_purpose");
		return;
	}
	json_object *lease = jsonx_parse_str(run->lease_json, NULL, 0);
	text = NULL;
	st = m->find_by_purpose(state, jsonx_get_str(lease, "purpose"), NULL, 0, &text, &err);
	json_object *found = st == RELAY_OK ? take_json(text) : NULL;
	bool listed = false;
	for (size_t i = 0; json_object_is_type(found, json_type_array) && i < json_object_array_length(found);
	     i++) {
		const char *vm = jsonx_get_str(json_object_array_get_idx(found, i), "vm");
		listed |= vm && strcmp(vm, jsonx_get_str(lease, "vm")) == 0;
	}
	if (st != RELAY_OK)
		pt_fail(run, 14, "find_by_purpose answered %s: %s", pt_status(st), err.message);
	else if (!listed)
		pt_fail(run, 14,
		        "find_by_purpose does not list the lease it was just asked for by its purpose");
	else
		pt_ran(run, 14);
	json_object_put(found);
	json_object_put(lease);
}

void pt_machine_release(pt_run *run)
{
	const relay_machine_ops *m = &run->plugin->machine;
	relay_plugin_state *state = run->plugin->state;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = m->release(state, run->lease_json, "finished", NULL, 0, &err);
	if (st != RELAY_OK) {
		pt_fail(run, 15, "release \"finished\" answered %s: %s", pt_status(st), err.message);
		return;
	}
	pt_ran(run, 15);
	char *text = NULL;
	st = m->verify_destroyed(state, run->lease_json, NULL, 0, &text, &err);
	pt_host()->free(text);
	if (st != RELAY_OK)
		pt_fail(run, 16, "verify_destroyed after release answered %s: %s", pt_status(st),
		        err.message);
	else
		pt_ran(run, 16);
	text = NULL;
	st = m->inspect(state, run->lease_json, NULL, 0, &text, &err);
	json_object *after = st == RELAY_OK ? take_json(text) : NULL;
	const char *lease_state = jsonx_get_str(after, "state");
	if (st == RELAY_OK && (lease_state == NULL || strcmp(lease_state, "running") == 0))
		pt_fail(run, 17,
		        "inspect after release answered a lease still \"running\": answer RELAY_E_NOT_FOUND");
	else if (st != RELAY_OK && st != RELAY_E_NOT_FOUND)
		pt_fail(run, 17, "inspect after release answered %s: answer RELAY_E_NOT_FOUND",
		        pt_status(st));
	else
		pt_ran(run, 17);
	json_object_put(after);
	st = m->release(state, run->lease_json, "released", NULL, 0, &err);
	if (st != RELAY_OK && st != RELAY_E_NOT_FOUND)
		pt_fail(run, 18, "a second release answered %s: answer RELAY_OK or RELAY_E_NOT_FOUND",
		        pt_status(st));
	else
		pt_ran(run, 18);
	run->lease_acquired = false;
}
