/* network.json at the package root (see network_evidence.h). */
#include "delivery/network_evidence.h"

#include <stdlib.h>
#include <string.h>

#include "egress/policy.h"
#include "egress/records.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

relay_status network_evidence_write(session_manager *m, guest *g, const char *evidence, relay_error *err)
{
	session_lock(m);
	bool egress = g->network && strcmp(g->network, "nat") != 0;
	char *mode = egress ? strdup(g->network) : NULL;
	strbuf log = STRBUF_INIT, out = STRBUF_INIT;
	strbuf_printf(&log, "%s/network.jsonl", g->dir);
	session_unlock(m);
	strbuf_printf(&out, "%s/network.json", evidence);
	relay_status st = RELAY_OK;
	if (!egress)
		goto cleanup;
	if (mode == NULL || !strbuf_ok(&log) || !strbuf_ok(&out)) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory writing network.json");
		goto cleanup;
	}
	json_object *doc = egress_records_load(strbuf_str(&log));
	json_object *policy = json_object_new_object();
	jsonx_add_str(policy, "guestNetwork", mode);
	json_object *rules = json_object_new_array();
	egress_policy parsed;
	char problem[400];
	if (strcmp(mode, "allow") == 0 &&
	    egress_policy_parse(m->settings->egress_allow, false, &parsed, problem, sizeof problem) == 0) {
		for (size_t i = 0; i < parsed.count; i++)
			json_object_array_add(rules, json_object_new_string(parsed.rules[i].text));
		egress_policy_free(&parsed);
	}
	jsonx_add(policy, "rules", rules);
	jsonx_add(doc, "policy", policy);
	egress_tally t;
	egress_tally_of(doc, NULL, &t);
	json_object *totals = json_object_new_object();
	jsonx_add_int(totals, "allowed", t.allowed);
	jsonx_add_int(totals, "refused", t.refused);
	jsonx_add_int(totals, "lookupsRefused", t.lookups_refused);
	jsonx_add_int(totals, "cut", t.cut);
	jsonx_add_int(totals, "proxyStops", t.stops);
	egress_tally_free(&t);
	jsonx_add(doc, "totals", totals);
	st = fs_write_json_durable(strbuf_str(&out), doc, err);
	json_object_put(doc);
cleanup:
	free(mode);
	strbuf_free(&log);
	strbuf_free(&out);
	return st;
}
