#include "evidence/viewer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"

void evidence_html_escape(strbuf *out, const char *text, size_t len)
{
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		const char *rep = NULL;
		switch (text[i]) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&#39;"; break;
		case '\0': rep = "&#xFFFD;"; break;
		default: break;
		}
		if (rep) {
			strbuf_append(out, text + start, i - start);
			strbuf_puts(out, rep);
			start = i + 1;
		}
	}
	strbuf_append(out, text + start, len - start);
}

static void esc(strbuf *out, const char *text)
{
	if (text)
		evidence_html_escape(out, text, strlen(text));
}

void evidence_url_encode_path(strbuf *out, const char *path)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		unsigned char c = *p;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
		    c == '.' || c == '_' || c == '~' || c == '/') {
			strbuf_putc(out, (char)c);
		} else {
			strbuf_putc(out, '%');
			strbuf_putc(out, hex[c >> 4]);
			strbuf_putc(out, hex[c & 15]);
		}
	}
}

static const char *CSS =
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe "
    "UI',sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}"
    "header,section{background:#fff;margin:16px auto;max-width:1400px;padding:16px 24px;border:1px solid "
    "#d8dce1;"
    "border-radius:6px}"
    "h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:0 0 8px}h3{font-size:15px;margin:12px 0 4px}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:8px "
    "0}dt{color:#57606a}dd{margin:0;"
    "overflow-wrap:anywhere}"
    ".verdicts span{display:inline-block;padding:2px "
    "10px;margin-right:8px;border-radius:12px;font-weight:600}"
    ".v-complete,.v-passed,.v-completed{background:#dafbe1;color:#116329}"
    ".v-incomplete,.v-uncertain,.v-incomplete-step{background:#fff8c5;color:#7d4e00}"
    ".v-failed,.v-refused{background:#ffebe9;color:#a40e26}"
    ".pair{display:flex;gap:12px;align-items:flex-start}"
    ".pair figure{flex:1 1 0;margin:0;min-width:0;border:1px solid #d8dce1;border-radius:4px;padding:6px}"
    ".pair figcaption{font-weight:600;margin-bottom:4px}"
    ".pair img{display:block;max-width:100%;height:auto;border:1px solid #eaeef2}"
    ".none{display:flex;align-items:center;justify-content:center;min-height:120px;background:#f6f8fa;"
    "color:#57606a;border:1px dashed #afb8c1}"
    "pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:420px;white-space:pre-wrap;overflow-wrap:"
    "anywhere;"
    "margin:4px 0}"
    ".muted{color:#57606a}code{background:#f6f8fa;padding:0 4px}ul{margin:4px 0}";

static void dl_row(strbuf *out, const char *key, const char *value)
{
	strbuf_puts(out, "<dt>");
	esc(out, key);
	strbuf_puts(out, "</dt><dd>");
	if (value)
		esc(out, value);
	else
		strbuf_puts(out, "<span class=\"muted\">(not recorded)</span>");
	strbuf_puts(out, "</dd>");
}

static void verdict(strbuf *out, const char *label, const char *value)
{
	strbuf_puts(out, "<span class=\"v-");
	esc(out, value ? value : "unknown");
	strbuf_puts(out, "\">");
	esc(out, label);
	strbuf_puts(out, ": ");
	esc(out, value ? value : "unknown");
	strbuf_puts(out, "</span>");
}

static void reasons_list(strbuf *out, const char *title, json_object *arr)
{
	strbuf_puts(out, "<h3>");
	esc(out, title);
	strbuf_puts(out, "</h3>");
	size_t n = arr ? json_object_array_length(arr) : 0;
	if (n == 0) {
		strbuf_puts(out, "<p class=\"muted\">None.</p>");
		return;
	}
	strbuf_puts(out, "<ul>");
	for (size_t i = 0; i < n; i++) {
		json_object *r = json_object_array_get_idx(arr, i);
		strbuf_puts(out, "<li>");
		esc(out, jsonx_get_str(r, "text"));
		const char *action = jsonx_get_str(r, "action");
		if (action) {
			strbuf_puts(out, " <span class=\"muted\">");
			esc(out, action);
			strbuf_puts(out, "</span>");
		}
		strbuf_puts(out, "</li>");
	}
	strbuf_puts(out, "</ul>");
}

static void figure(strbuf *out, const char *caption, const char *path, const char *at, const char *step_id)
{
	strbuf_puts(out, "<figure><figcaption>");
	esc(out, caption);
	if (at) {
		strbuf_puts(out, " <span class=\"muted\">");
		esc(out, at);
		strbuf_puts(out, "</span>");
	}
	strbuf_puts(out, "</figcaption>");
	if (path) {
		strbuf_puts(out, "<a href=\"");
		evidence_url_encode_path(out, path);
		strbuf_puts(out, "\"><img src=\"");
		evidence_url_encode_path(out, path);
		strbuf_puts(out, "\" alt=\"");
		esc(out, caption);
		strbuf_puts(out, " screenshot of step ");
		esc(out, step_id);
		strbuf_puts(out, "\"></a><div class=\"muted\">");
		esc(out, path);
		strbuf_puts(out, "</div>");
	} else {
		strbuf_puts(out, "<div class=\"none\">No screenshot</div>");
	}
	strbuf_puts(out, "</figure>");
}

/* The step's screen recording (MCP_RELAY_RECORD=video): a plain <video>
 * element on the package's file, no script, nothing fetched. */
static void recording(strbuf *out, const json_object *rec, const char *step_id)
{
	const char *status = jsonx_get_str(rec, "status");
	if (status == NULL)
		return;
	strbuf_puts(out, "<figure class=\"recording\"><figcaption>Screen recording");
	if (strcmp(status, "recorded") != 0) {
		strbuf_puts(out, "</figcaption><div class=\"none\">Recording off: ");
		esc(out, jsonx_get_str(rec, "reason") ? jsonx_get_str(rec, "reason") : "no reason given");
		strbuf_puts(out, "</div></figure>");
		return;
	}
	int64_t ms = 0;
	jsonx_get_int(rec, "durationMs", &ms);
	strbuf_printf(out, " <span class=\"muted\">%lld.%01lld s</span></figcaption>", (long long)(ms / 1000),
	              (long long)(ms % 1000 / 100));
	const char *path = jsonx_get_str(rec, "path");
	strbuf_puts(out, "<video controls preload=\"metadata\" width=\"640\" src=\"");
	evidence_url_encode_path(out, path);
	strbuf_puts(out, "\" title=\"screen recording of step ");
	esc(out, step_id);
	strbuf_puts(out, "\"></video><div class=\"muted\"><a href=\"");
	evidence_url_encode_path(out, path);
	strbuf_puts(out, "\">");
	esc(out, path);
	strbuf_puts(out, "</a></div></figure>");
}

/* "left running: chromium, xeyes" under a step's output (spec/guest.md §16.1
 * item 8): the names of what the step started and left running, each once. */
static void left_running(strbuf *out, const json_object *left)
{
	int64_t count = 0;
	if (!jsonx_get_int(left, "count", &count) || count <= 0)
		return;
	json_object *procs = jsonx_get_array(left, "processes");
	size_t n = procs ? json_object_array_length(procs) : 0;
	strbuf_puts(out, "<p class=\"left-running\">left running: ");
	size_t shown = 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = jsonx_get_str(json_object_array_get_idx(procs, i), "command");
		bool seen = false;
		for (size_t k = 0; k < i && name; k++) {
			const char *other = jsonx_get_str(json_object_array_get_idx(procs, k), "command");
			if (other && strcmp(other, name) == 0)
				seen = true;
		}
		if (name == NULL || seen)
			continue;
		if (shown++)
			strbuf_puts(out, ", ");
		esc(out, name);
	}
	char buf[64];
	snprintf(buf, sizeof buf, " (%lld process%s)", (long long)count, count == 1 ? "" : "es");
	esc(out, buf);
	strbuf_puts(out, "</p>");
}

static void output_block(strbuf *out, const char *label, const char *text)
{
	if (text == NULL || text[0] == '\0') {
		strbuf_printf(out, "<h3>%s</h3><p class=\"muted\">(empty)</p>", label);
		return;
	}
	size_t len = strlen(text);
	size_t shown = utf8_cut(text, len, EVIDENCE_VIEWER_OUTPUT_EXCERPT_BYTES);
	strbuf_printf(out, "<h3>%s</h3><pre>", label);
	evidence_html_escape(out, text, shown);
	strbuf_puts(out, "</pre>");
	if (shown < len)
		strbuf_printf(out, "<p class=\"muted\">%zu more bytes are in the step's receipt.</p>",
		              len - shown);
}

static void step_section(strbuf *out, json_object *step, json_object *detail)
{
	const char *id = jsonx_get_str(step, "id");
	const char *ex = jsonx_get_str(step, "execution");
	strbuf_puts(out, "<section class=\"step\" id=\"step-");
	evidence_url_encode_path(out, id ? id : "");
	strbuf_puts(out, "\"><h2>");
	esc(out, id);
	strbuf_puts(out, " &mdash; ");
	esc(out, jsonx_get_str(step, "title"));
	strbuf_puts(out, "</h2><p class=\"verdicts\">");
	verdict(out, "Execution", ex);
	strbuf_puts(out, "</p><dl>");
	dl_row(out, "Reason", jsonx_get_str(step, "because"));
	dl_row(out, "Expected", jsonx_get_str(step, "expected"));
	dl_row(out, "Input mode", jsonx_get_str(step, "inputMode"));
	dl_row(out, "Action record", jsonx_get_str(step, "state"));
	dl_row(out, "Execution id", jsonx_get_str(detail, "executionId"));
	dl_row(out, "Started", jsonx_get_str(detail, "at"));
	json_object *snaps = jsonx_get_obj(step, "snapshots");
	if (jsonx_get_str(snaps, "groupId"))
		dl_row(out, "Group", jsonx_get_str(snaps, "groupId"));
	if (jsonx_get_str(detail, "diagnostic"))
		dl_row(out, "Diagnostic", jsonx_get_str(detail, "diagnostic"));
	if (jsonx_get_obj(detail, "network"))
		dl_row(out, "Network", jsonx_get_str(jsonx_get_obj(detail, "network"), "summary"));
	strbuf_puts(out, "</dl>");
	if (jsonx_get_str(step, "observed")) {
		strbuf_puts(out, "<p class=\"muted\">");
		esc(out, jsonx_get_str(step, "observed"));
		strbuf_puts(out, "</p>");
	}
	strbuf_puts(out, "<div class=\"pair\">");
	figure(out, "Before", jsonx_get_str(snaps, "before"), jsonx_get_str(detail, "beforeAt"), id);
	figure(out, "After", jsonx_get_str(snaps, "after"), jsonx_get_str(detail, "afterAt"), id);
	strbuf_puts(out, "</div>");
	recording(out, jsonx_get_obj(detail, "recording"), id);
	json_object *o = jsonx_get_obj(detail, "output");
	strbuf_puts(out, "<h3>Output</h3>");
	if (o == NULL) {
		strbuf_puts(out, "<p class=\"muted\">No receipt with output is in the package.</p>");
	} else {
		int64_t code = 0;
		bool timed_out = false;
		jsonx_get_bool(o, "timedOut", &timed_out);
		strbuf_puts(out, "<dl>");
		char buf[32];
		if (jsonx_get_int(o, "exit", &code)) {
			snprintf(buf, sizeof buf, "%lld", (long long)code);
			dl_row(out, "Exit code", buf);
		} else {
			dl_row(out, "Exit code", NULL);
		}
		dl_row(out, "Signal", jsonx_get_str(o, "signal") ? jsonx_get_str(o, "signal") : "none");
		dl_row(out, "Timed out", timed_out ? "yes" : "no");
		strbuf_puts(out, "</dl>");
		output_block(out, "stdout", jsonx_get_str(o, "stdout"));
		output_block(out, "stderr", jsonx_get_str(o, "stderr"));
		left_running(out, jsonx_get_obj(o, "leftRunning"));
	}
	strbuf_puts(out, "</section>\n");
}

/* JSON inside a <script type="application/json"> data block: "</" becomes
 * "<\/" (as the spec asks) and every other "<" becomes "\u003c", so the block
 * can neither end early nor enter the parser's escaped-script states. Both
 * are plain JSON escapes: the data parses to the same value. */
static void data_block(strbuf *out, const json_object *review)
{
	char *json = jsonx_to_string(review, 0);
	if (json == NULL) {
		out->failed = true;
		return;
	}
	strbuf_puts(out, "<script type=\"application/json\" id=\"relay-review\">");
	for (const char *p = json; *p; p++) {
		if (p[0] == '<' && p[1] == '/') {
			strbuf_puts(out, "<\\/");
			p++;
		} else if (p[0] == '<') {
			strbuf_puts(out, "\\u003c");
		} else {
			strbuf_putc(out, *p);
		}
	}
	strbuf_puts(out, "</script>\n");
	free(json);
}

/* A person's take-overs of the live view (review_takeovers.c): nothing
 * when there were none. */
static void take_overs(strbuf *out, json_object *list)
{
	size_t n = list ? json_object_array_length(list) : 0;
	if (n == 0)
		return;
	strbuf_puts(out, "<section id=\"take-overs\"><h2>Take-overs</h2><p>A person took control of the "
	                 "guest in the live view; input during these times was the person's, not a "
	                 "step's.</p><ul>");
	for (size_t i = 0; i < n; i++) {
		json_object *t = json_object_array_get_idx(list, i);
		const char *end = jsonx_get_str(t, "end");
		strbuf_puts(out, "<li>");
		esc(out, jsonx_get_str(t, "start"));
		strbuf_puts(out, " to ");
		esc(out, end ? end : "the end of the live view (not given back)");
		strbuf_puts(out, " <span class=\"muted\">(attempt ");
		esc(out, jsonx_get_str(t, "attemptId"));
		strbuf_puts(out, ")</span></li>");
	}
	strbuf_puts(out, "</ul></section>\n");
}

void evidence_viewer_render(const json_object *review, strbuf *out)
{
	const char *task = jsonx_get_str(review, "taskId");
	strbuf_puts(
	    out,
	    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
	    "style-src 'unsafe-inline'; img-src 'self' file: data:; media-src 'self' file:\">\n"
	    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>Evidence: ");
	esc(out, task);
	strbuf_printf(
	    out,
	    "</title>\n<style>%s</style>\n</head>\n<body>\n<header><h1>mcp-relay evidence package</h1><dl>",
	    CSS);
	dl_row(out, "Task", task);
	dl_row(out, "Guest", jsonx_get_str(review, "guest"));
	dl_row(out, "Image", jsonx_get_str(review, "image"));
	dl_row(out, "Recording", jsonx_get_str(review, "sessionId"));
	dl_row(out, "Package", jsonx_get_str(review, "packageId"));
	dl_row(out, "Acquired", jsonx_get_str(review, "acquiredAt"));
	dl_row(out, "Delivered", jsonx_get_str(review, "deliveredAt"));
	dl_row(out, "Derived", jsonx_get_str(review, "derivedAt"));
	strbuf_puts(out, "</dl><p class=\"verdicts\">");
	verdict(out, "Snapshots", jsonx_get_str(review, "completeness"));
	verdict(out, "Execution", jsonx_get_str(review, "execution"));
	strbuf_puts(out,
	            "</p><p>These verdicts are the ones derived when this page was written (at delivery). "
	            "<code>mcp-relay review &lt;this folder&gt;</code> checks every file against "
	            "manifest.json and re-derives them under the current rules; its answer is authoritative. "
	            "A verified package proves the evidence is intact, not that the task succeeded: a person "
	            "still has to look.</p>");
	json_object *ver = jsonx_get_obj(review, "verification");
	json_object *verrs = jsonx_get_array(ver, "errors");
	if (verrs && json_object_array_length(verrs) > 0) {
		strbuf_puts(out, "<h3>Verification problems</h3><ul>");
		for (size_t i = 0; i < json_object_array_length(verrs); i++) {
			strbuf_puts(out, "<li>");
			esc(out, json_object_get_string(json_object_array_get_idx(verrs, i)));
			strbuf_puts(out, "</li>");
		}
		strbuf_puts(out, "</ul>");
	}
	strbuf_puts(out, "</header>\n<section id=\"reasons\"><h2>Reasons</h2>");
	json_object *reasons = jsonx_get_obj(review, "reasons");
	reasons_list(out, "Snapshots", jsonx_get_array(reasons, "snapshots"));
	reasons_list(out, "Execution", jsonx_get_array(reasons, "execution"));
	reasons_list(out, "Defects", jsonx_get_array(reasons, "defects"));
	strbuf_puts(out, "</section>\n");
	take_overs(out, jsonx_get_array(review, "takeOvers"));
	json_object *steps = jsonx_get_array(review, "steps");
	json_object *details = jsonx_get_obj(review, "details");
	size_t n = steps ? json_object_array_length(steps) : 0;
	if (n == 0)
		strbuf_puts(
		    out,
		    "<section><h2>Steps</h2><p class=\"muted\">The recording has no steps.</p></section>\n");
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(steps, i);
		step_section(out, s, jsonx_get_obj(details, jsonx_get_str(s, "id")));
	}
	strbuf_puts(out, "<section id=\"outputs\"><h2>Outputs</h2>");
	json_object *outputs = jsonx_get_array(review, "outputs");
	size_t m = outputs ? json_object_array_length(outputs) : 0;
	if (m == 0) {
		strbuf_puts(out, "<p class=\"muted\">No declared outputs were extracted.</p>");
	} else {
		strbuf_puts(out, "<ul>");
		for (size_t i = 0; i < m; i++) {
			json_object *o = json_object_array_get_idx(outputs, i);
			const char *p = jsonx_get_str(o, "path");
			int64_t bytes = 0;
			jsonx_get_int(o, "bytes", &bytes);
			strbuf_puts(out, "<li><a href=\"");
			evidence_url_encode_path(out, p ? p : "");
			strbuf_puts(out, "\">");
			esc(out, p);
			strbuf_printf(out, "</a> <span class=\"muted\">(%lld bytes)</span></li>",
			              (long long)bytes);
		}
		strbuf_puts(out, "</ul>");
	}
	strbuf_puts(out, "</section>\n");
	data_block(out, review);
	strbuf_puts(out, "</body></html>\n");
}
