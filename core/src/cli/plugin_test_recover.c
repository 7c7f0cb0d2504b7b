/* plugin-test checks 65-67: what the core does after something went wrong
 * (relay/machine.h). A restarted plugin adopts the lease of check 11; a
 * release that failed is inspected and retried until it confirms; an
 * acquire whose outcome is unknown (RELAY_E_INDETERMINATE) is reconciled by
 * its purpose. Checks 66 and 67 need a failure to recover from: a plugin
 * run under tests/plugins/machine-faultshim with a fault script gets one
 * for purposes holding "-retry-" and "-indeterminate-"; without one they
 * say why they were skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plugin_test.h"
#include "util/jsonx.h"

/* Retries of a failed release, as the core's release loop does. */
#define PT_RELEASE_TRIES 3

static bool released(relay_status st)
{
	return st == RELAY_OK || st == RELAY_E_NOT_FOUND;
}

/* How many leases find_by_purpose lists for `purpose`, and whether one of
 * them has the "vm" `vm` (may be NULL); -1 when it failed (err says why).
 * *leases_out (may be NULL to skip) receives the parsed array. */
static int find_count(pt_run *run, const char *purpose, const char *vm, bool *listed,
                      json_object **leases_out, relay_error *err)
{
	char *text = NULL;
	memset(err, 0, sizeof *err);
	relay_status st =
	    run->plugin->machine.find_by_purpose(run->plugin->state, purpose, NULL, 0, &text, err);
	json_object *found = st == RELAY_OK && text ? jsonx_parse_str(text, NULL, 0) : NULL;
	pt_host()->free(text);
	if (!json_object_is_type(found, json_type_array)) {
		if (st == RELAY_OK)
			snprintf(err->message, sizeof err->message, "it answered no JSON array");
		json_object_put(found);
		return -1;
	}
	int count = (int)json_object_array_length(found);
	for (int i = 0; listed && vm && i < count; i++) {
		const char *v = jsonx_get_str(json_object_array_get_idx(found, (size_t)i), "vm");
		*listed |= v && strcmp(v, vm) == 0;
	}
	if (leases_out)
		*leases_out = found;
	else
		json_object_put(found);
	return count;
}

/* After a restart: open the adopted lease and run a command in it. */
static void adopt_connection(pt_run *run)
{
	loaded_plugin *p = run->plugin;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_exec_result res;
	memset(&res, 0, sizeof res);
	run->conn = NULL;
	relay_status st = p->transport.open(p->state, run->lease_json, NULL, 0, &run->conn, &err);
	if (st != RELAY_OK) {
		pt_fail(run, 65, "after fini and init, open of the lease acquired before answered %s: %s",
		        pt_status(st), err.message);
		run->conn = NULL;
		return;
	}
	st = pt_sh(run, "printf adopted", 0, &res, &err);
	if (st != RELAY_OK || res.out == NULL || strcmp(res.out, "adopted") != 0)
		pt_fail(run, 65, "after fini and init, exec in the lease acquired before answered %s: %s",
		        pt_status(st), st == RELAY_OK ? "not the output printed" : err.message);
	pt_host()->free(res.out);
	pt_host()->free(res.err);
	p->transport.close(p->state, run->conn, 0);
	run->conn = NULL;
}

/* Check 65: fini, init again with the same configuration, and the lease
 * of check 11 is still this plugin's: listed by purpose, renewed,
 * inspected, and (for a transport too) opened and run in. */
static void restart_adopts(pt_run *run)
{
	loaded_plugin *p = run->plugin;
	relay_error err;
	memset(&err, 0, sizeof err);
	if (p->descriptor.fini)
		p->descriptor.fini(p->state);
	p->state = NULL;
	relay_status st = p->descriptor.init(pt_host(), run->config, 0, &p->state, &err);
	if (st != RELAY_OK) {
		p->initialised = false; /* nothing for loader_shutdown to fini */
		run->lease_acquired = false;
		pt_fail(run, 65, "init after fini, with the same configuration, answered %s: %s",
		        pt_status(st), err.message);
		return;
	}
	json_object *lease = jsonx_parse_str(run->lease_json, NULL, 0);
	const char *purpose = jsonx_get_str(lease, "purpose"), *vm = jsonx_get_str(lease, "vm");
	bool listed = false;
	char *text = NULL;
	int count = p->machine.find_by_purpose ? find_count(run, purpose, vm, &listed, NULL, &err) : 0;
	if (count < 0)
		pt_fail(run, 65, "after fini and init, find_by_purpose answered: %s", err.message);
	else if (p->machine.find_by_purpose && !listed)
		pt_fail(run, 65,
		        "after fini and init, find_by_purpose does not list the lease acquired before: "
		        "the backend's leases outlive the plugin's state (relay/machine.h)");
	else if ((st = p->machine.renew(p->state, run->lease_json, 600000, NULL, 0, &text, &err)) != RELAY_OK)
		pt_fail(run, 65, "after fini and init, renew of the lease acquired before answered %s: %s",
		        pt_status(st), err.message);
	pt_host()->free(text);
	text = NULL;
	if (!run->failed[65] &&
	    (st = p->machine.inspect(p->state, run->lease_json, NULL, 0, &text, &err)) != RELAY_OK)
		pt_fail(run, 65, "after fini and init, inspect of the lease acquired before answered %s: %s",
		        pt_status(st), err.message);
	pt_host()->free(text);
	if (!run->failed[65] && (p->descriptor.kinds & RELAY_KIND_TRANSPORT))
		adopt_connection(run);
	json_object_put(lease);
	pt_ran(run, 65);
}

/* A lease of our own for `what` (check 66 or 67): the lease text, or NULL
 * with *status the acquire's answer. */
static char *acquire_for(pt_run *run, const char *guest, const char *purpose, relay_status *status,
                         relay_error *err)
{
	char *spec = pt_acquire_spec(guest, run->image_key, purpose);
	char *text = NULL;
	memset(err, 0, sizeof *err);
	*status = run->plugin->machine.acquire(run->plugin->state, spec, NULL, 0, &text, err);
	free(spec);
	if (*status != RELAY_OK) {
		bool left = text != NULL;
		pt_host()->free(text);
		return left ? strdup("") : NULL; /* "" = it broke R3 */
	}
	char *copy = text ? strdup(text) : NULL;
	pt_host()->free(text);
	return copy;
}

/* Releases `lease` as the core does after a failure: inspect, then release
 * again, up to PT_RELEASE_TRIES times. The last answer. */
static relay_status release_retrying(pt_run *run, const char *lease, relay_status first, relay_error *err)
{
	const relay_machine_ops *m = &run->plugin->machine;
	relay_status st = first;
	for (int i = 0; i < PT_RELEASE_TRIES && !released(st); i++) {
		char *text = NULL;
		relay_error inspect_err;
		m->inspect(run->plugin->state, lease, NULL, 0, &text, &inspect_err);
		pt_host()->free(text);
		memset(err, 0, sizeof *err);
		st = m->release(run->plugin->state, lease, "failed", NULL, 0, err);
	}
	return st;
}

/* The guest of `lease` is destroyed: verify_destroyed confirms. */
static bool destroyed(pt_run *run, const char *lease, relay_error *err)
{
	char *text = NULL;
	memset(err, 0, sizeof *err);
	relay_status st =
	    run->plugin->machine.verify_destroyed(run->plugin->state, lease, NULL, 0, &text, err);
	pt_host()->free(text);
	return st == RELAY_OK;
}

/* Check 66: a release that failed (or whose answer was lost after the
 * backend destroyed the guest) is retried until it confirms. */
static void release_after_failure(pt_run *run)
{
	char purpose[64];
	pt_purpose("retry", purpose, sizeof purpose);
	relay_error err;
	relay_status st;
	char *lease = acquire_for(run, "plugin-test-retry", purpose, &st, &err);
	if (lease == NULL || lease[0] == '\0') {
		pt_fail(run, 66, "acquire of a second lease (for %s) answered %s: %s", purpose, pt_status(st),
		        err.message);
		free(lease);
		return;
	}
	memset(&err, 0, sizeof err);
	relay_status first =
	    run->plugin->machine.release(run->plugin->state, lease, "finished", NULL, 0, &err);
	char first_why[300];
	snprintf(first_why, sizeof first_why, "%.250s", err.message);
	st = release_retrying(run, lease, first, &err);
	if (released(first))
		pt_skip(run, 66,
		        "the first release confirmed, so there was nothing to retry (run the plugin under "
		        "tests/plugins/machine-faultshim with a fault for \"-retry-\")");
	else if (!released(st))
		pt_fail(run, 66,
		        "release after a failed release (%s: %s) answered %s %d times: a retried release "
		        "answers RELAY_OK, or RELAY_E_NOT_FOUND for a lease the first one destroyed "
		        "(relay/machine.h release)",
		        pt_status(first), first_why, pt_status(st), PT_RELEASE_TRIES);
	else if (!destroyed(run, lease, &err))
		pt_fail(run, 66, "verify_destroyed after a retried release answered: %s", err.message);
	else
		pt_ran(run, 66);
	free(lease);
}

/* Releases every lease of `found` (an array); false when one did not. */
static bool release_found(pt_run *run, json_object *found, relay_error *err)
{
	for (size_t i = 0; i < json_object_array_length(found); i++) {
		const char *text = json_object_to_json_string_ext(json_object_array_get_idx(found, i), 0);
		memset(err, 0, sizeof *err);
		relay_status st =
		    run->plugin->machine.release(run->plugin->state, text, "failed", NULL, 0, err);
		if (!released(release_retrying(run, text, st, err)) || !destroyed(run, text, err))
			return false;
	}
	return true;
}

/* Check 67: an acquire that answered RELAY_E_INDETERMINATE left nothing
 * in its out-parameter, and find_by_purpose then finds what it made (0 or
 * 1 leases), which release clears. */
static void indeterminate_acquire(pt_run *run)
{
	if (run->plugin->machine.find_by_purpose == NULL) {
		pt_skip(run, 67,
		        "the plugin does not provide find_by_purpose, so the core cannot reconcile an "
		        "indeterminate acquire (it then never retries one)");
		return;
	}
	char purpose[64];
	pt_purpose("indeterminate", purpose, sizeof purpose);
	relay_error err;
	relay_status st;
	char *lease = acquire_for(run, "plugin-test-indeterminate", purpose, &st, &err);
	json_object *found = NULL;
	int count = 0;
	if (st == RELAY_OK) {
		pt_skip(run, 67,
		        "acquire answered RELAY_OK (run the plugin under tests/plugins/machine-faultshim "
		        "with a fault for \"-indeterminate-\")");
		relay_status rs =
		    run->plugin->machine.release(run->plugin->state, lease, "released", NULL, 0, &err);
		if (!released(release_retrying(run, lease, rs, &err)))
			pt_fail(run, 67, "release of the lease acquired for %s answered: %s", purpose,
			        err.message);
	} else if (st != RELAY_E_INDETERMINATE) {
		pt_skip(run, 67, "acquire answered a definite failure, not RELAY_E_INDETERMINATE");
	} else if (lease != NULL) {
		pt_fail(run, 67,
		        "acquire answered RELAY_E_INDETERMINATE but left a value in *lease_json_out "
		        "(relay/plugin.h R3)");
	} else if ((count = find_count(run, purpose, NULL, NULL, &found, &err)) < 0) {
		pt_fail(run, 67, "find_by_purpose after an indeterminate acquire answered: %s", err.message);
	} else if (count > 1) {
		pt_fail(run, 67,
		        "find_by_purpose lists %d leases for the purpose of one indeterminate acquire: "
		        "acquire makes at most one",
		        count);
	} else if (!release_found(run, found, &err)) {
		pt_fail(run, 67,
		        "release of the lease find_by_purpose found after an indeterminate acquire did "
		        "not confirm: %s",
		        err.message);
	} else if (find_count(run, purpose, NULL, NULL, NULL, &err) != 0) {
		pt_fail(run, 67,
		        "find_by_purpose still lists a lease of the indeterminate acquire after its "
		        "release");
	} else {
		pt_ran(run, 67);
	}
	json_object_put(found);
	free(lease);
}

void pt_machine_recover(pt_run *run)
{
	if (run->lease_json == NULL) {
		for (int n = 65; n <= 67; n++)
			pt_skip(run, n, "no lease was acquired (check 11)");
		return;
	}
	restart_adopts(run);
	if (run->plugin->state == NULL && !run->plugin->initialised) {
		pt_skip(run, 66, "the plugin did not start again (check 65)");
		pt_skip(run, 67, "the plugin did not start again (check 65)");
		return;
	}
	release_after_failure(run);
	indeterminate_acquire(run);
}
