/* A run's connections through the guest's egress proxy (see run_network.h). */
#include "runs/run_network.h"

#include <stdlib.h>
#include <string.h>

#include "egress/records.h"
#include "egress/supervisor.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

void run_network_step(session_manager *m, guest *g, const char *execution_id)
{
	session_lock(m);
	struct egress_proxy *proxy = g->egress;
	session_unlock(m);
	/* The proxy lives until guest_close, which no run overlaps. */
	egress_proxy_step(proxy, execution_id);
}

json_object *run_network_facts(session_manager *m, guest *g, const char *execution_id)
{
	session_lock(m);
	bool egress = g->network && strcmp(g->network, "nat") != 0;
	char *mode = egress ? strdup(g->network) : NULL;
	strbuf path = STRBUF_INIT;
	strbuf_printf(&path, "%s/network.jsonl", g->dir);
	session_unlock(m);
	json_object *out = NULL;
	if (!egress || mode == NULL || !strbuf_ok(&path))
		goto cleanup;
	json_object *doc = egress_records_load(strbuf_str(&path));
	egress_tally t;
	egress_tally_of(doc, execution_id, &t);
	json_object_put(doc);
	out = json_object_new_object();
	jsonx_add_str(out, "mode", mode);
	jsonx_add_int(out, "allowed", t.allowed);
	jsonx_add_int(out, "refused", t.refused);
	json_object *dests = json_object_new_array();
	for (size_t i = 0; i < t.dest_count; i++)
		json_object_array_add(dests, json_object_new_string(t.dests[i]));
	jsonx_add(out, "refusedDestinations", dests);
	jsonx_add_int(out, "lookupsRefused", t.lookups_refused);
	jsonx_add_str(out, "proxyStopped",
	              t.stops ? (t.stop_detail ? t.stop_detail : "the egress proxy stopped") : NULL);
	jsonx_add_int(out, "cut", t.cut);
	egress_tally_free(&t);
cleanup:
	free(mode);
	strbuf_free(&path);
	return out;
}
