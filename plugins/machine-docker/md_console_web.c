/*
 * md_console_web.c — machine-docker's browser live view (MCP_RELAY_VNC_VIEWER=
 * browser, relay_support/liveview.h), as machine-local's console_web.c: the
 * bridge listens on this host's 127.0.0.1 and reaches x11vnc through the
 * container's network namespace (/proc/<State.Pid>/ns/net); the one-time
 * URL goes to the browser and to standard error, never into a report. The
 * bridge is the attempt's viewer (viewerPid): cancel and release stop it.
 * Take-over events: <leases>/<vm>-console-<token>.events.jsonl.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md.h"
#include "md_console.h"
#include "relay_support/liveview.h"

bool md_console_web_control(void)
{
	const char *v = getenv("MCP_RELAY_CONSOLE_CONTROL");
	return rs_liveview_wanted(getenv("MCP_RELAY_VNC_VIEWER")) && v && strcmp(v, "allow") == 0;
}

relay_status md_console_web_start(md_state *st, json_object *rec, json_object *a, pid_t pid,
                                  const char *password, relay_error *err)
{
	char netns[64], events[PATH_MAX];
	snprintf(netns, sizeof netns, "/proc/%d/ns/net", (int)pid);
	snprintf(events, sizeof events, "%s/%s-console-%s.events.jsonl", st->leases_dir, md_str(rec, "vm"),
	         md_str(a, "token") ? md_str(a, "token") : "attempt");
	rs_liveview_request req = {st->libexec_dir,          netns,  5900, password,
	                           md_console_web_control(), events, 2};
	rs_liveview lv;
	rs_error e;
	if (rs_liveview_start(&req, &lv, &e) != 0)
		return md_err(st, err, RELAY_E_REFUSED, e.errnum, "%s", e.message);
	json_object_object_add(a, "viewerPid", json_object_new_int64(lv.bridge_pid));
	json_object_object_add(a, "viewerStart",
	                       json_object_new_int64((int64_t)md_proc_start(lv.bridge_pid)));
	json_object *live = json_object_new_object();
	json_object_object_add(live, "origin", json_object_new_string(lv.origin));
	json_object_object_add(live, "browser_opened", json_object_new_boolean(lv.browser_pid > 0));
	json_object_object_add(live, "launcher", lv.launcher[0] ? json_object_new_string(lv.launcher) : NULL);
	json_object_object_add(live, "browser_reason",
	                       lv.browser_reason[0] ? json_object_new_string(lv.browser_reason) : NULL);
	json_object_object_add(live, "control",
	                       json_object_new_string(req.control ? "on-take-over" : "view-only"));
	json_object_object_add(live, "token",
	                       json_object_new_string("one-time, in the URL logged on standard error"));
	json_object_object_add(live, "events", json_object_new_string(events));
	json_object_object_add(a, "liveView", live);
	st->host->log(RELAY_LOG_INFO, MD_PLUGIN_NAME,
	              "console of %s: live view at %s (one-time link, loopback only%s); %s",
	              md_str(rec, "vm"), lv.url, req.control ? ", take-over offered" : ", view-only",
	              lv.browser_pid > 0 ? "opened with the browser" : lv.browser_reason);
	return RELAY_OK;
}

void md_console_web_report(json_object *r, json_object *a)
{
	json_object *live = a ? md_obj(a, "liveView") : NULL;
	if (live == NULL)
		return;
	json_object *copy = NULL;
	json_object_deep_copy(live, &copy, NULL);
	char *text = rs_liveview_take_overs(md_str(live, "events"));
	json_object *list = text ? json_tokener_parse(text) : NULL;
	free(text);
	json_object_object_add(copy, "take_overs", list ? list : json_object_new_array());
	json_object_object_del(copy, "events");
	json_object_object_add(r, "live_view", copy);
}
