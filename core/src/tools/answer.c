/*
 * tools/answer.c — the answers every tool handler shares: a per-guest
 * error with the guest's state beside it, and the result of a domain
 * outcome (util/outcome.h).
 */
#include <stdarg.h>
#include <stdlib.h>

#include "tools/tools.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

tool_result *guest_error(session_manager *m, guest *g, json_object *structured, const char *code,
                         const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	tool_result *r = tool_result_error(structured, code, "%s", strbuf_str(&sb));
	strbuf_free(&sb);
	if (r && g) {
		session_lock(m);
		jsonx_add(r->structured, "guestState", guest_status_json(g));
		session_unlock(m);
	}
	return r;
}

tool_result *tools_failure(session_manager *m, guest *g, relay_outcome *o)
{
	json_object *facts = outcome_take_facts(o);
	/* A room that closed the guest on failure may have kept its state at
	 * the failure (lease/acquire.c): that one stands. */
	if (jsonx_get_obj(facts, "guestState") != NULL)
		g = NULL;
	tool_result *r = guest_error(m, g, facts, o->code ? o->code : "internal", "%s",
	                             o->message ? o->message : "the operation failed");
	outcome_free(o);
	return r;
}
