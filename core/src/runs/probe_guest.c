/* relay_probe with scope "guest" (spec/tools.md §3.2); see probe_guest.h. */
#include "runs/probe_guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guestio/guest_io.h"
#include "runs/capture_plan.h"
#include "runs/receiver_builds.h"
#include "runs/run_state.h"
#include "session/events.h"
#include "session/manager_internal.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define PROBE_TIMEOUT_MS 10000

typedef struct check {
	bool ran;   /* the transport ran the command */
	int code;   /* exit code (-1 signal or unknown) */
	char *out;  /* first non-empty line of stdout, or of stderr when stdout has none */
	char *diag; /* why it failed: last line of stderr, or the transport's reason */
} check;

static void check_free(check *c)
{
	free(c->out);
	free(c->diag);
}

/* The first (or last) non-empty line of a buffer, trimmed, malloc'd. */
static char *line_of(const char *text, size_t len, bool last)
{
	char *best = NULL;
	size_t i = 0;
	while (i < len) {
		size_t j = i;
		while (j < len && text[j] != '\n')
			j++;
		size_t a = i, b = j;
		while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r'))
			a++;
		while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r'))
			b--;
		if (b > a) {
			size_t clean = 0;
			char *s = utf8_sanitize(text + a, b - a > 400 ? 400 : b - a, &clean);
			free(best);
			best = s;
			if (!last)
				return best;
		}
		i = j + 1;
	}
	return best;
}

static void run_check(guest_io *io, bool io_ok, const char *io_why, const char *command, check *c)
{
	memset(c, 0, sizeof *c);
	c->code = -1;
	if (!io_ok) {
		c->diag = strdup(io_why);
		return;
	}
	const char *argv[] = {"/bin/sh", "-c", command, NULL};
	relay_exec_result res;
	relay_error err;
	relay_status st = gio_exec(io, argv, NULL, PROBE_TIMEOUT_MS, 1 << 16, 0, &res, &err);
	if (st != RELAY_OK) {
		c->diag = strdup(err.message);
	} else if (res.timed_out) {
		c->ran = true;
		c->diag = strdup("the check did not finish within 10 s");
	} else {
		c->ran = true;
		c->code = res.exit_code;
		c->out = line_of(res.out, res.out_len, false);
		if (c->out == NULL)
			c->out = line_of(res.err, res.err_len, false);
		if (res.exit_code != 0) {
			c->diag = line_of(res.err, res.err_len, true);
			if (c->diag == NULL) {
				char buf[64];
				snprintf(buf, sizeof buf, "exit status %d", res.exit_code);
				c->diag = strdup(buf);
			}
		}
	}
	gio_exec_result_free(&res);
}

static json_object *runtime_json(const char *command, const check *c, bool with_version)
{
	json_object *o = json_object_new_object();
	jsonx_add_str(o, "command", command);
	bool ready = c->ran && c->code == 0;
	jsonx_add_bool(o, "ready", ready);
	if (c->ran)
		jsonx_add_int(o, "code", c->code);
	if (ready && with_version && c->out)
		jsonx_add_str(o, "version", c->out);
	if (!ready)
		jsonx_add_str(o, "diagnostic", c->diag ? c->diag : "the check failed");
	return o;
}

/* A shell word: as is when it holds only safe characters, else single-quoted. */
static void shell_quote(strbuf *sb, const char *s)
{
	if (s[0] && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-+=:,@%") ==
	                strlen(s)) {
		strbuf_puts(sb, s);
		return;
	}
	strbuf_putc(sb, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			strbuf_puts(sb, "'\\''");
		else
			strbuf_putc(sb, *s);
	}
	strbuf_putc(sb, '\'');
}

/* True when "vMAJOR.MINOR..." is 22.6 or later. */
static bool node_strips_types(const char *version)
{
	if (version == NULL)
		return false;
	const char *p = version[0] == 'v' ? version + 1 : version;
	int major = 0, minor = 0;
	if (sscanf(p, "%d.%d", &major, &minor) != 2)
		return false;
	return major > 22 || (major == 22 && minor >= 6);
}

/* The runtimes of the four languages (spec/tools.md §3.2); TypeScript is ready
 * through tsx or Node.js's own type stripping. New reference. */
static json_object *runtimes_json(const char *node_cmd, const check *shell, const check *nodev,
                                  const check *tsx, const check *python)
{
	json_object *runtimes = json_object_new_object();
	jsonx_add(runtimes, "shell", runtime_json("exit 0", shell, false));
	jsonx_add(runtimes, "javascript", runtime_json(node_cmd, nodev, true));
	bool node_ready = nodev->ran && nodev->code == 0;
	json_object *ts;
	if (tsx->ran && tsx->code == 0) {
		ts = runtime_json("tsx --version", tsx, true);
	} else if (node_ready && node_strips_types(nodev->out)) {
		ts = json_object_new_object();
		jsonx_add_str(ts, "command", "tsx --version");
		jsonx_add_bool(ts, "ready", true);
		jsonx_add_str(ts, "via", "node-type-stripping");
		jsonx_add_str(ts, "version", nodev->out);
	} else {
		ts = runtime_json("tsx --version", tsx, false);
		strbuf d = STRBUF_INIT;
		if (node_ready)
			strbuf_printf(&d, "tsx not found and Node.js %s lacks type stripping (22.6 or later)",
			              nodev->out ? nodev->out : "(unknown version)");
		else
			strbuf_printf(&d, "tsx not found (%s) and no Node.js for type stripping (%s)",
			              tsx->diag ? tsx->diag : "failed", nodev->diag ? nodev->diag : "failed");
		jsonx_add_str(ts, "diagnostic", strbuf_str(&d));
		strbuf_free(&d);
	}
	jsonx_add(runtimes, "typescript", ts);
	jsonx_add(runtimes, "python", runtime_json("python3 --version", python, true));
	return runtimes;
}

/* The image's catalog and the snapshot verdict, added to `r`; returns the
 * catalog's applications (new reference). */
static json_object *catalog_and_snapshots(session_manager *m, guest *g, relay_call *call, json_object *r,
                                          const char *image, const char *key, const char *cua, bool staged,
                                          int snapshots, json_object *stored_plan)
{
	char diag[320];
	json_object *apps = capture_catalog_applications(m, g, call, diag, sizeof diag);
	json_object *catalog = json_object_new_object();
	jsonx_add_str(catalog, "image", image);
	size_t count = json_object_array_length(apps);
	jsonx_add_int(catalog, "count", (int64_t)count);
	jsonx_add_bool(catalog, "truncated", count > CAPTURE_PROBE_MAX_APPLICATIONS);
	json_object *listed = json_object_new_array();
	for (size_t i = 0; i < count && i < CAPTURE_PROBE_MAX_APPLICATIONS; i++)
		json_object_array_add(listed, json_object_get(json_object_array_get_idx(apps, i)));
	jsonx_add(catalog, "applications", listed);
	if (diag[0])
		jsonx_add_str(catalog, "diagnostic", diag);
	jsonx_add(r, "catalog", catalog);

	json_object *snap = json_object_new_object();
	bool enabled = false;
	const char *plugin = capture_plugin_name(m);
	if (staged && snapshots >= 0) {
		enabled = snapshots == 1;
		jsonx_add_bool(snap, "enabled", enabled);
		jsonx_add_str(snap, "capture", plugin);
		const char *because = jsonx_get_str(stored_plan, "because");
		strbuf sb = STRBUF_INIT;
		strbuf_printf(&sb, "the verdict relay_stage reached: %s",
		              because ? because : "no capture plan");
		jsonx_add_str(snap, "reason", strbuf_str(&sb));
		strbuf_free(&sb);
	} else {
		json_object *plan = capture_plan_for(m, g, apps, key, cua);
		jsonx_get_bool(plan, "enabled", &enabled);
		jsonx_add_bool(snap, "enabled", enabled);
		jsonx_add_str(snap, "capture", plugin);
		jsonx_add_str(snap, "reason", jsonx_get_str(plan, "because"));
		json_object_put(plan);
	}
	jsonx_add(r, "snapshots", snap);
	return apps;
}

int probe_guest(session_manager *m, guest *g, relay_call *call, relay_outcome *o)
{
	char observed[21];
	time_format_iso_seconds(clock_now_ms(), observed);
	session_lock(m);
	bool staged = g->staged;
	char *image = g->image ? strdup(g->image) : NULL;
	session_unlock(m);
	slice_lock(g->run);
	char *node = strdup(g->run->node_path ? g->run->node_path : "node");
	char *cua = g->run->cua_driver ? strdup(g->run->cua_driver) : NULL;
	int snapshots = g->run->snapshots;
	json_object *stored_plan = g->run->capture_plan ? json_object_get(g->run->capture_plan) : NULL;
	slice_unlock(g->run);

	guest_io io;
	relay_error err;
	memset(&err, 0, sizeof err);
	bool io_ok = gio_begin(&io, m, g, call, &err) == RELAY_OK;
	char io_why[RELAY_ERROR_MESSAGE_BYTES + 320];
	snprintf(io_why, sizeof io_why, "the guest's transport is not available: %s", err.message);

	check uname, shell, nodev, tsx, python;
	run_check(&io, io_ok, io_why, "uname -sm", &uname);
	run_check(&io, io_ok, io_why, "exit 0", &shell);
	strbuf cmd = STRBUF_INIT;
	shell_quote(&cmd, node);
	strbuf_puts(&cmd, " --version");
	char *node_cmd = strbuf_detach(&cmd, NULL);
	run_check(&io, io_ok, io_why, node_cmd, &nodev);
	run_check(&io, io_ok, io_why, "tsx --version", &tsx);
	run_check(&io, io_ok, io_why, "python3 --version", &python);
	if (io_ok)
		gio_end(&io);

	json_object *r = json_object_new_object();
	jsonx_add_str(r, "scope", "guest");
	jsonx_add_str(r, "guest", g->name);
	jsonx_add_str(r, "observedAt", observed);
	json_object *platform = json_object_new_object();
	const char *uname_text = uname.ran && uname.code == 0 ? uname.out : NULL;
	const char *key = receiver_platform_key(uname_text);
	char *build = key ? receiver_build_path(key) : NULL;
	jsonx_add_str(platform, "uname", uname_text);
	jsonx_add_str(platform, "receiverBuild", key);
	bool receiver_available = build != NULL;
	jsonx_add_bool(platform, "receiverAvailable", receiver_available);
	if (uname_text == NULL)
		jsonx_add_str(platform, "diagnostic", uname.diag ? uname.diag : "uname -sm failed");
	else if (build == NULL) {
		char *msg = receiver_unsupported_message(uname_text);
		jsonx_add_str(platform, "diagnostic", msg);
		free(msg);
	}
	free(build);
	jsonx_add(r, "platform", platform);

	jsonx_add(r, "runtimes", runtimes_json(node_cmd, &shell, &nodev, &tsx, &python));

	json_object *apps =
	    catalog_and_snapshots(m, g, call, r, image, key, cua, staged, snapshots, stored_plan);
	jsonx_add_bool(r, "captureVerified", false);
	jsonx_add_bool(r, "staged", staged);
	guest_event(m, g, "guest-readiness", "relay_probe scope guest", json_object_get(r));

	json_object_put(o->facts);
	o->facts = r;
	check_free(&uname);
	check_free(&shell);
	check_free(&nodev);
	check_free(&tsx);
	check_free(&python);
	json_object_put(apps);
	json_object_put(stored_plan);
	free(node_cmd);
	free(node);
	free(cua);
	free(image);
	return 0;
}
