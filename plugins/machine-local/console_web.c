/*
 * console_web.c — machine-local's browser live view (MCP_RELAY_VNC_VIEWER=
 * browser, relay_support/liveview.h): after x11vnc answers in the guest,
 * relay-vncweb listens on this host's 127.0.0.1 and reaches x11vnc through
 * the guest's network namespace; the one-time URL goes to the user's
 * browser and to standard error, never into a report. The bridge is the
 * attempt's "viewer" (viewerPid): cancel and release stop it as they stop a
 * viewer. With MCP_RELAY_CONSOLE_CONTROL=allow, x11vnc takes input
 * (console_x11vnc_viewonly) and the bridge passes it only after the person
 * clicks "take control"; the take-over's start and end are appended to
 * console-<attempt>.events.jsonl in the lease folder.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "local.h"
#include "relay_support/liveview.h"

bool console_web_control(void)
{
	const char *v = getenv("MCP_RELAY_CONSOLE_CONTROL");
	return rs_liveview_wanted(getenv("MCP_RELAY_VNC_VIEWER")) && v && strcmp(v, "allow") == 0;
}

static void events_path(json_object *record, const char *attempt_id, char *out, size_t size)
{
	snprintf(out, size, "%s/console-%s.events.jsonl",
	         lu_get_string(lu_get_object(record, "paths"), "leaseDir"), attempt_id);
}

json_object *console_web_take_overs(json_object *record, const char *attempt_id)
{
	char path[PATH_MAX];
	events_path(record, attempt_id, path, sizeof path);
	char *text = rs_liveview_take_overs(path);
	json_object *list = text ? json_tokener_parse(text) : NULL;
	free(text);
	return list ? list : json_object_new_array();
}

static void set_attempt(json_object *attempt, const char *status, const char *reason, const char *cleanup)
{
	json_object_object_add(attempt, "status", json_object_new_string(status));
	json_object_object_add(attempt, "reason", reason ? json_object_new_string(reason) : NULL);
	json_object_object_add(attempt, "viewer_cleanup", json_object_new_string(cleanup));
}

relay_status console_web_open(local_state *st, json_object *record, const char *attempt_id,
                              json_object *attempt, pid_t init_pid, const char *password, pid_t vnc_pid,
                              int log_fd, relay_error *err)
{
	const char *lease_dir = lu_get_string(lu_get_object(record, "paths"), "leaseDir");
	char netns[64], events[PATH_MAX];
	snprintf(netns, sizeof netns, "/proc/%d/ns/net", (int)init_pid);
	events_path(record, attempt_id, events, sizeof events);
	rs_liveview_request req = {st->libexec_dir,       netns,  5900,  password,
	                           console_web_control(), events, log_fd};
	rs_liveview lv;
	rs_error e;
	if (rs_liveview_start(&req, &lv, &e) != 0) {
		set_attempt(attempt, "failed", "worker-launch-failed", "not-started");
		ctl_killpid(lease_dir, vnc_pid);
		return lu_err(st, err, RELAY_E_REFUSED, e.errnum, "%s", e.message);
	}
	set_attempt(attempt, "launched", NULL, "pending");
	json_object_object_add(attempt, "transport_connected", json_object_new_string("unknown"));
	json_object_object_add(attempt, "viewerPid", json_object_new_int64(lv.bridge_pid));
	json_object_object_add(attempt, "viewerStart",
	                       json_object_new_int64((int64_t)lu_proc_start(lv.bridge_pid)));
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
	json_object_object_add(attempt, "liveView", live);
	st->host->log(RELAY_LOG_INFO, LOCAL_PLUGIN_NAME,
	              "console of %s: live view at %s (one-time link, loopback only%s); %s",
	              lu_get_string(record, "vm"), lv.url,
	              req.control ? ", take-over offered" : ", view-only",
	              lv.browser_pid > 0 ? "opened with the browser" : lv.browser_reason);
	return RELAY_OK;
}
