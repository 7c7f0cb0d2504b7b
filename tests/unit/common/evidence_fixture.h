/*
 * A realistic recording built on disk for the evidence tests: the files a
 * guest receiver and the host write for each run (spec/guest.md §7-§9, §13;
 * spec/evidence.md §2), with real PNG screenshots made with libpng.
 *
 * Included by tests/unit/evidence/test_evidence_*.c and tests/unit/delivery/test_delivery_*.c only
 * (static helpers).
 */
#ifndef RELAY_TEST_EVIDENCE_FIXTURE_H
#define RELAY_TEST_EVIDENCE_FIXTURE_H

#include <png.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

#define FX_SESSION "rec-5b1e0c9a2f44d781"
#define FX_PURPOSE "relay-login-test-3f9a1c2e"

typedef struct fx_pkg {
	char root[256]; /* mkdtemp: the "project" */
	char dir[512];  /* <root>/relay-evidence/<purpose> */
	strbuf journal;
	int seq;
	int minute; /* advances the fake clock */
} fx_pkg;

typedef struct fx_run {
	const char *exec_id;     /* run-<32 hex> */
	const char *step_id;     /* shell-1 */
	const char *title;       /* shell echo hello */
	int exit_code;           /* 0 passes */
	bool uncertain;          /* completion and receipt uncertain (e.g. timeout) */
	bool before, after;      /* which snapshots were captured */
	const char *group_id;    /* NULL = standalone */
	const char *group_phase; /* first | member | last */
	unsigned rgb_before, rgb_after;
} fx_run;

static __attribute__((unused)) void fx_write(fx_pkg *p, const char *rel, const char *data, size_t len)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", p->dir, rel);
	char *dir = fs_dirname(path);
	fs_mkdir_p(dir, 0700, NULL);
	free(dir);
	if (fs_write_durable(path, data, len, 0600, NULL) != RELAY_OK) {
		fprintf(stderr, "fixture: cannot write %s\n", path);
		abort();
	}
}

static __attribute__((unused)) void fx_write_json(fx_pkg *p, const char *rel, json_object *obj)
{
	char *text = jsonx_to_string(obj, JSONX_PRETTY);
	fx_write(p, rel, text, strlen(text));
	free(text);
	json_object_put(obj);
}

/* A solid-colour 320x200 RGB PNG in memory (malloc'd). */
typedef struct fx_mem {
	unsigned char *data;
	size_t len, cap;
} fx_mem;

static __attribute__((unused)) void fx_png_write(png_structp png, png_bytep data, png_size_t len)
{
	fx_mem *m = png_get_io_ptr(png);
	if (m->len + len > m->cap) {
		m->cap = (m->len + len) * 2;
		m->data = realloc(m->data, m->cap);
	}
	memcpy(m->data + m->len, data, len);
	m->len += len;
}

static __attribute__((unused)) void fx_png_flush(png_structp png)
{
	(void)png;
}

static __attribute__((unused)) fx_mem fx_png(unsigned rgb)
{
	fx_mem m = {0};
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	png_set_write_fn(png, &m, fx_png_write, fx_png_flush);
	png_set_IHDR(png, info, 320, 200, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
	             PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	unsigned char row[320 * 3];
	for (int x = 0; x < 320; x++) {
		row[3 * x] = (unsigned char)(rgb >> 16);
		row[3 * x + 1] = (unsigned char)(rgb >> 8);
		row[3 * x + 2] = (unsigned char)rgb;
	}
	for (int y = 0; y < 200; y++)
		png_write_row(png, row);
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	return m;
}

static __attribute__((unused)) void fx_time(fx_pkg *p, int offset_ms, char out[32])
{
	int ms = p->minute * 60000 + offset_ms;
	snprintf(out, 32, "2026-09-24T10:%02d:%02d.%03dZ", 10 + ms / 60000, (ms / 1000) % 60, ms % 1000);
}

/* Appends a journal line: `fields` is a JSON object text without braces. */
static __attribute__((unused)) void fx_line(fx_pkg *p, const char *type, int offset_ms, const char *fields)
{
	char at[32];
	fx_time(p, offset_ms, at);
	strbuf_printf(&p->journal, "{\"seq\":%d,\"at\":\"%s\",\"type\":\"%s\",\"sessionId\":\"%s\"%s%s}\n",
	              ++p->seq, at, type, FX_SESSION, fields[0] ? "," : "", fields);
}

static __attribute__((unused)) void fx_init(fx_pkg *p)
{
	memset(p, 0, sizeof *p);
	snprintf(p->root, sizeof p->root, "/tmp/evidence-pkg-XXXXXX");
	if (mkdtemp(p->root) == NULL)
		abort();
	snprintf(p->dir, sizeof p->dir, "%s/relay-evidence/%s", p->root, FX_PURPOSE);
	fs_mkdir_p(p->dir, 0700, NULL);
	strbuf_init(&p->journal);
	const char *session = "{\"sessionId\":\"" FX_SESSION "\",\"createdAt\":\"2026-09-24T10:11:12.000Z\","
	                      "\"receiverVersion\":\"0.1.0\",\"platform\":\"linux-x86_64\"}\n";
	fx_write(p, "state/session.json", session, strlen(session));
	fx_line(p, "session-start", 0, "\"receiverVersion\":\"0.1.0\",\"platform\":\"linux-x86_64\"");
	const char *acquire =
	    "{\"kind\":\"acquire\",\"because\":\"Test the sign-in page\","
	    "\"at\":\"2026-09-24T10:11:10.000Z\",\"details\":{\"image\":\"debian-12-desktop\"}}\n";
	fx_write(p, "host/events/1790000000000-a1b2c3d4.json", acquire, strlen(acquire));
	fx_write(p, "state/receiver/groups.json", "{\"active\":null,\"used\":[]}\n", 26);
}

static __attribute__((unused)) json_object *fx_snapshot_desc(fx_pkg *p, const fx_run *r, const char *phase,
                                                             const char *sha, size_t bytes, const char *at)
{
	json_object *d = json_object_new_object();
	char name[256], aid[256];
	snprintf(name, sizeof name, "%s-%s.png", r->exec_id, phase);
	snprintf(aid, sizeof aid, "action-%s", r->exec_id);
	(void)p;
	jsonx_add_str(d, "sessionId", FX_SESSION);
	jsonx_add_str(d, "attemptId", "att-3c9d01e2aa17");
	jsonx_add_str(d, "executionId", r->exec_id);
	jsonx_add_str(d, "actionId", aid);
	jsonx_add_str(d, "stepId", r->step_id);
	jsonx_add_str(d, "phase", phase);
	jsonx_add_str(d, "capturedAt", at);
	jsonx_add_str(d, "sha256", sha);
	jsonx_add_int(d, "bytes", (int64_t)bytes);
	jsonx_add_str(d, "mimeType", "image/png");
	if (strcmp(phase, "after") == 0)
		jsonx_add_int(d, "declaredAfterIntervalMs", 500);
	jsonx_add_str(d, "fileName", name);
	if (r->group_id)
		jsonx_add_str(d, "groupId", r->group_id);
	return d;
}

/* One recorded run: journal lines, records, receipt, snapshots, host files. */
static __attribute__((unused)) void fx_add_run(fx_pkg *p, const fx_run *r)
{
	p->minute++;
	char aid[256], buf[4096], rel[512], at_start[32], at_before[32], at_after[32], at_end[32];
	snprintf(aid, sizeof aid, "action-%s", r->exec_id);
	fx_time(p, 1000, at_start);
	fx_time(p, 1100, at_before);
	fx_time(p, 3800, at_after);
	fx_time(p, 3900, at_end);
	const char *gp = r->group_phase;
	bool plan_before = r->group_id ? strcmp(gp, "first") == 0 : true;
	bool plan_after = r->group_id ? strcmp(gp, "last") == 0 : true;
	char group[256] = "null";
	if (r->group_id)
		snprintf(group, sizeof group, "{\"groupId\":\"%s\",\"phase\":\"%s\"}", r->group_id, gp);
	snprintf(buf, sizeof buf, "\"name\":\"routing-decision\",\"executionId\":\"%s\",\"details\":{}",
	         r->exec_id);
	fx_line(p, "annotation", 990, buf);
	if (r->group_id && strcmp(gp, "first") == 0) {
		snprintf(buf, sizeof buf,
		         "\"name\":\"group-open\",\"executionId\":\"%s\",\"details\":{\"groupId\":\"%s\"}",
		         r->exec_id, r->group_id);
		fx_line(p, "annotation", 995, buf);
	}
	snprintf(buf, sizeof buf,
	         "\"executionId\":\"%s\",\"argv\":[\"/bin/sh\",\"/var/tmp/R/streamed/%s.sh\"],\"cwd\":\"/var/"
	         "tmp/R/"
	         "workspace\",\"step\":{\"id\":\"%s\"},\"evidenceMode\":\"recorded\",\"timeoutMs\":120000,"
	         "\"scriptIdentity\":{\"sha256\":\"0d9b\",\"language\":\"shell\",\"remotePath\":\"/var/tmp/R/"
	         "streamed/%s.sh\"}",
	         r->exec_id, r->exec_id, r->step_id, r->exec_id);
	fx_line(p, "execution-start", 1000, buf);
	snprintf(
	    buf, sizeof buf,
	    "\"actionId\":\"%s\",\"attemptId\":\"att-3c9d01e2aa17\",\"executionId\":\"%s\",\"stepId\":\"%s\","
	    "\"title\":\"%s\",\"inputMode\":\"ordinary\",\"snapshotPlan\":{\"capturesBefore\":%s,"
	    "\"capturesAfter\":%s,"
	    "\"group\":%s,\"role\":\"%s\",\"captureOff\":false}",
	    aid, r->exec_id, r->step_id, r->title, plan_before ? "true" : "false",
	    plan_after ? "{\"afterIntervalMs\":500}" : "false", group, r->group_id ? gp : "single");
	fx_line(p, "action-start", 1000, buf);

	json_object *descs = json_object_new_array();
	json_object *refs = json_object_new_array();
	const char *phases[2] = {"before", "after"};
	bool want[2] = {r->before && plan_before, r->after && plan_after};
	unsigned colours[2] = {r->rgb_before ? r->rgb_before : 0xd03030,
	                       r->rgb_after ? r->rgb_after : 0x3050d0};
	const char *ats[2] = {at_before, at_after};
	for (int i = 0; i < 2; i++) {
		if (!want[i])
			continue;
		fx_mem png = fx_png(colours[i]);
		char sha[65];
		sha256_buffer_hex(png.data, png.len, sha);
		snprintf(rel, sizeof rel, "state/snapshots/%s/%s-%s.png", FX_SESSION, r->exec_id, phases[i]);
		fx_write(p, rel, (const char *)png.data, png.len);
		char extra[256] = "";
		if (i == 1)
			snprintf(extra, sizeof extra, ",\"declaredAfterIntervalMs\":500");
		if (r->group_id)
			snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",\"groupId\":\"%s\"",
			         r->group_id);
		snprintf(
		    buf, sizeof buf,
		    "\"executionId\":\"%s\",\"actionId\":\"%s\",\"phase\":\"%s\",\"fileName\":\"%s-%s.png\","
		    "\"sha256\":\"%s\",\"bytes\":%zu,\"capturedAt\":\"%s\",\"mimeType\":\"image/png\"%s",
		    r->exec_id, aid, phases[i], r->exec_id, phases[i], sha, png.len, ats[i], extra);
		fx_line(p, "snapshot-captured", i ? 3800 : 1100, buf);
		json_object_array_add(descs, fx_snapshot_desc(p, r, phases[i], sha, png.len, ats[i]));
		json_object *ref = json_object_new_object();
		jsonx_add_str(ref, "phase", phases[i]);
		jsonx_add_str(ref, "path", rel);
		jsonx_add_str(ref, "sha256", sha);
		jsonx_add_int(ref, "bytes", (int64_t)png.len);
		json_object_array_add(refs, ref);
		free(png.data);
	}
	bool evidence_ok = (!plan_before || r->before) && (!plan_after || r->after);
	bool uncertain = r->uncertain || !evidence_ok;
	const char *state = uncertain ? "uncertain" : "recorded";
	const char *kind = r->exit_code == 0 && !uncertain ? "success" : "failure";
	snprintf(buf, sizeof buf,
	         "\"executionId\":\"%s\",\"actionId\":\"%s\",\"status\":\"%s\",\"fileNames\":[]", r->exec_id,
	         aid, evidence_ok ? "available" : "capture-failed");
	fx_line(p, "snapshot-evidence", 3850, buf);
	snprintf(buf, sizeof buf,
	         "\"executionId\":\"%s\",\"actionId\":\"%s\",\"state\":\"%s\",\"toolOutcome\":{\"kind\":\"%"
	         "s\",\"value\":"
	         "{\"exitStatus\":{\"code\":%d,\"signal\":null},\"timedOut\":%s,\"outputTruncated\":false,"
	         "\"terminationConfirmed\":true}}",
	         r->exec_id, aid, state, kind, r->exit_code, r->uncertain ? "true" : "false");
	fx_line(p, "action-completion", 3860, buf);

	/* Records. */
	json_object *arec = json_object_new_object();
	jsonx_add_str(arec, "actionId", aid);
	jsonx_add_str(arec, "executionId", r->exec_id);
	jsonx_add_str(arec, "sessionId", FX_SESSION);
	jsonx_add_str(arec, "attemptId", "att-3c9d01e2aa17");
	jsonx_add_str(arec, "stepId", r->step_id);
	jsonx_add_str(arec, "title", r->title);
	jsonx_add_str(arec, "expected", "Exits with status 0");
	jsonx_add_str(arec, "inputMode", "ordinary");
	jsonx_add_str(arec, "snapshotRole", r->group_id ? gp : "single");
	jsonx_add_str(arec, "groupId", r->group_id);
	jsonx_add_str(arec, "state", state);
	jsonx_add(arec, "snapshots", refs);
	snprintf(rel, sizeof rel, "state/records/action/%s.json", aid);
	fx_write_json(p, rel, arec);
	json_object *erec = json_object_new_object();
	jsonx_add_str(erec, "executionId", r->exec_id);
	jsonx_add_str(erec, "sessionId", FX_SESSION);
	jsonx_add_str(erec, "attemptId", "att-3c9d01e2aa17");
	jsonx_add_str(erec, "state", uncertain ? "uncertain" : "completed");
	json_object *argv = json_object_new_array();
	json_object_array_add(argv, json_object_new_string("/bin/sh"));
	snprintf(buf, sizeof buf, "/var/tmp/R/streamed/%s.sh", r->exec_id);
	json_object_array_add(argv, json_object_new_string(buf));
	jsonx_add(erec, "argv", argv);
	jsonx_add_str(erec, "startedAt", at_start);
	jsonx_add_str(erec, "endedAt", at_end);
	snprintf(rel, sizeof rel, "state/records/execution/%s.json", r->exec_id);
	fx_write_json(p, rel, erec);

	/* Receipt. */
	json_object *rc = json_object_new_object();
	jsonx_add_int(rc, "receiptVersion", 1);
	jsonx_add_str(rc, "executionId", r->exec_id);
	jsonx_add_str(rc, "sessionId", FX_SESSION);
	jsonx_add_str(rc, "attemptId", "att-3c9d01e2aa17");
	jsonx_add_str(rc, "startedAt", at_start);
	jsonx_add_str(rc, "endedAt", at_end);
	jsonx_add_str(rc, "evidenceMode", "recorded");
	jsonx_add_str(rc, "language", "shell");
	json_object *oc = json_object_new_object();
	jsonx_add_str(oc, "kind", uncertain ? "uncertain" : "completed");
	json_object *es = json_object_new_object();
	jsonx_add_int(es, "code", r->exit_code);
	jsonx_add_null(es, "signal");
	jsonx_add(oc, "exitStatus", es);
	if (uncertain)
		jsonx_add_str(oc, "diagnostic",
		              r->uncertain ? "the script timed out after 120000 ms"
		                           : "a planned capture failed");
	jsonx_add(rc, "outcome", oc);
	jsonx_add_bool(rc, "timedOut", r->uncertain);
	jsonx_add_bool(rc, "outputTruncated", false);
	jsonx_add_bool(rc, "terminationConfirmed", true);
	snprintf(buf, sizeof buf, "output of %s: <b>not bold</b> & done\n", r->step_id);
	jsonx_add_str(rc, "stdout", buf);
	jsonx_add_str(rc, "stderr", r->exit_code ? "error: sign-in button not found\n" : "");
	json_object *ie = json_object_new_object();
	jsonx_add_str(ie, "status", evidence_ok ? "available" : "capture-failed");
	jsonx_add(ie, "snapshots", descs);
	jsonx_add(rc, "imageEvidence", ie);
	char *rtext = jsonx_to_string(rc, JSONX_PRETTY);
	char rsha[65];
	sha256_buffer_hex(rtext, strlen(rtext), rsha);
	snprintf(rel, sizeof rel, "state/receiver/receipts/%s.json", r->exec_id);
	fx_write(p, rel, rtext, strlen(rtext));
	snprintf(rel, sizeof rel, "host/receiver-receipts/%s.json", r->exec_id);
	fx_write(p, rel, rtext, strlen(rtext));
	snprintf(buf, sizeof buf,
	         "\"executionId\":\"%s\",\"outcome\":{\"kind\":\"%s\",\"exitStatus\":{\"code\":%d,\"signal\":"
	         "null}},"
	         "\"receipt\":{\"path\":\"state/receiver/receipts/%s.json\",\"sha256\":\"%s\",\"bytes\":%zu}",
	         r->exec_id, uncertain ? "uncertain" : "completed", r->exit_code, r->exec_id, rsha,
	         strlen(rtext));
	fx_line(p, "execution-completion", 3950, buf);
	free(rtext);
	json_object_put(rc);
	snprintf(rel, sizeof rel, "state/receiver/started/%s.json", r->exec_id);
	snprintf(buf, sizeof buf, "{\"executionId\":\"%s\",\"requestSha256\":\"a41f\"}\n", r->exec_id);
	fx_write(p, rel, buf, strlen(buf));

	/* Host side: request, submission, script, host receipt. */
	json_object *req = json_object_new_object();
	jsonx_add_int(req, "protocol", 1);
	jsonx_add_str(req, "executionId", r->exec_id);
	jsonx_add_str(req, "sessionId", FX_SESSION);
	snprintf(buf, sizeof buf, "Check step %s of the sign-in flow <script>alert(1)</script>", r->step_id);
	jsonx_add_str(req, "because", buf);
	json_object *step = json_object_new_object();
	jsonx_add_str(step, "id", r->step_id);
	jsonx_add_str(step, "title", r->title);
	jsonx_add_str(step, "expected", "Exits with status 0");
	jsonx_add_str(step, "inputMode", "ordinary");
	jsonx_add(req, "step", step);
	snprintf(rel, sizeof rel, "host/requests/%s.json", r->exec_id);
	fx_write_json(p, rel, req);
	snprintf(rel, sizeof rel, "host/scripts/%s.sh", r->exec_id);
	fx_write(p, rel, "echo hello\n", 11);
	snprintf(rel, sizeof rel, "host/receipts/%s.json", r->exec_id);
	snprintf(buf, sizeof buf,
	         "{\"executionId\":\"%s\",\"outcome\":{\"kind\":\"%s\",\"exitStatus\":{\"code\":%d,"
	         "\"signal\":null}%s}}\n",
	         r->exec_id, uncertain ? "uncertain" : "completed", r->exit_code,
	         uncertain ? ",\"diagnostic\":\"the run did not end cleanly\"" : "");
	fx_write(p, rel, buf, strlen(buf));
	if (r->group_id && strcmp(gp, "last") == 0 && !uncertain) {
		snprintf(buf, sizeof buf,
		         "\"name\":\"group-close\",\"executionId\":\"%s\",\"details\":{\"groupId\":\"%s\"}",
		         r->exec_id, r->group_id);
		fx_line(p, "annotation", 3955, buf);
	}
}

/* A diagnostic shell script (spec/guest.md §13). */
static __attribute__((unused)) void fx_add_diagnostic(fx_pkg *p, const char *id, int code)
{
	p->minute++;
	char rel[512], buf[2048], at[32];
	fx_time(p, 500, at);
	snprintf(rel, sizeof rel, "host/diagnostics/%s.request.json", id);
	snprintf(buf, sizeof buf,
	         "{\"executionId\":\"%s\",\"because\":\"Check the kernel\",\"code\":\"#!/bin/sh\\n\\n  uname "
	         "-a  \\n\","
	         "\"at\":\"%s\"}\n",
	         id, at);
	fx_write(p, rel, buf, strlen(buf));
	snprintf(rel, sizeof rel, "host/diagnostics/%s.receipt.json", id);
	snprintf(
	    buf, sizeof buf,
	    "{\"executionId\":\"%s\",\"evidenceMode\":\"diagnostic\",\"startedAt\":\"%s\",\"outcome\":{"
	    "\"kind\":"
	    "\"completed\",\"exitStatus\":{\"code\":%d,\"signal\":null}},\"output\":\"Linux guest 6.8.0\\n\","
	    "\"outputTruncated\":false}\n",
	    id, at, code);
	fx_write(p, rel, buf, strlen(buf));
}

static __attribute__((unused)) void fx_add_extraction(fx_pkg *p)
{
	fx_mem png = fx_png(0x20a040);
	fx_write(p, "extractions/screens/6f0c1e9a-3b2d-4c5e-8f7a-1b2c3d4e5f60/login/step-1.png",
	         (const char *)png.data, png.len);
	free(png.data);
	const char *facts = "{\"extractions\":[{\"name\":\"screens\",\"path\":\"out/screens\"}]}\n";
	fx_write(p, "host/extractions/6f0c1e9a-3b2d-4c5e-8f7a-1b2c3d4e5f60.json", facts, strlen(facts));
}

static __attribute__((unused)) void fx_finish(fx_pkg *p)
{
	fx_write(p, "state/journal/events.jsonl", p->journal.data, p->journal.len);
}

static __attribute__((unused)) void fx_free(fx_pkg *p)
{
	strbuf_free(&p->journal);
	fs_remove_tree(p->root, NULL);
}

#endif
