/* The egress proxy's connection records (see egress/records.h). */
#include "egress/records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/jsonx.h"
#include "util/strbuf.h"

#define RECORDS_MAX_BYTES (64u * 1024 * 1024)

int egress_record_append(int fd, json_object *record)
{
	strbuf sb = STRBUF_INIT;
	jsonx_write(&sb, record, 0);
	strbuf_putc(&sb, '\n');
	int rc = -1;
	if (strbuf_ok(&sb) && write(fd, strbuf_str(&sb), sb.len) == (ssize_t)sb.len)
		rc = 0;
	strbuf_free(&sb);
	return rc;
}

static const char *const kept[] = {"id",       "executionId", "time",       "protocol", "name",
                                   "port",     "address",     "decision",   "rule",     "reason",
                                   "bytesOut", "bytesIn",     "durationMs", "error"};

static void copy_fields(json_object *to, json_object *from)
{
	for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
		json_object *v = NULL;
		if (json_object_object_get_ex(from, kept[i], &v))
			jsonx_add(to, kept[i], json_object_get(v));
		else if (!jsonx_has(to, kept[i]))
			jsonx_add_null(to, kept[i]);
	}
}

json_object *egress_records_load(const char *path)
{
	json_object *doc = json_object_new_object();
	json_object *conns = json_object_new_array();
	json_object *stops = json_object_new_array();
	json_object *by_id = json_object_new_object();
	jsonx_add_int(doc, "schemaVersion", 1);
	jsonx_add(doc, "connections", conns);
	jsonx_add(doc, "proxyStops", stops);
	FILE *f = path ? fopen(path, "re") : NULL;
	char *line = NULL;
	size_t cap = 0, total = 0;
	ssize_t n;
	while (f && (n = getline(&line, &cap, f)) > 0 && (total += (size_t)n) < RECORDS_MAX_BYTES) {
		json_object *r = jsonx_parse_str(line, NULL, 0);
		const char *kind = jsonx_get_str(r, "record");
		if (kind && strcmp(kind, "proxy") == 0) {
			json_object_array_add(stops, json_object_get(r));
		} else if (kind && strcmp(kind, "connection") == 0 && jsonx_get_str(r, "id")) {
			json_object *c = jsonx_get_obj(by_id, jsonx_get_str(r, "id"));
			if (c == NULL) {
				c = json_object_new_object();
				json_object_array_add(conns, c);
				jsonx_add(by_id, jsonx_get_str(r, "id"), json_object_get(c));
			}
			copy_fields(c, r);
			jsonx_add_bool(
			    c, "ended",
			    strcmp(jsonx_get_str(r, "phase") ? jsonx_get_str(r, "phase") : "", "end") == 0);
		}
		json_object_put(r);
	}
	free(line);
	if (f)
		fclose(f);
	/* A start without an end: the proxy did not live to finish it. */
	for (size_t i = 0; i < json_object_array_length(conns); i++) {
		json_object *c = json_object_array_get_idx(conns, i);
		bool ended = false;
		jsonx_get_bool(c, "ended", &ended);
		if (!ended && jsonx_get_str(c, "error") == NULL)
			jsonx_add_str(c, "error",
			              "cut: the egress proxy stopped before the connection ended");
		json_object_object_del(c, "ended");
	}
	json_object_put(by_id);
	return doc;
}

static bool same_step(const json_object *c, const char *execution_id)
{
	const char *e = jsonx_get_str(c, "executionId");
	return execution_id == NULL || (e && strcmp(e, execution_id) == 0);
}

void egress_tally_of(const json_object *doc, const char *execution_id, egress_tally *out)
{
	memset(out, 0, sizeof *out);
	json_object *conns = jsonx_get_array(doc, "connections");
	for (size_t i = 0; conns && i < json_object_array_length(conns); i++) {
		json_object *c = json_object_array_get_idx(conns, i);
		if (!same_step(c, execution_id))
			continue;
		const char *decision = jsonx_get_str(c, "decision");
		const char *proto = jsonx_get_str(c, "protocol");
		const char *error = jsonx_get_str(c, "error");
		bool refused = decision && strcmp(decision, "refused") == 0;
		if (proto && strcmp(proto, "dns") == 0) {
			out->lookups_refused += refused;
			continue;
		}
		if (error && strncmp(error, "cut:", 4) == 0)
			out->cut++;
		if (!refused) {
			out->allowed++;
			continue;
		}
		out->refused++;
		if (out->dest_count < sizeof out->dests / sizeof out->dests[0]) {
			int64_t port = 0;
			jsonx_get_int(c, "port", &port);
			const char *name = jsonx_get_str(c, "name");
			strbuf sb = STRBUF_INIT;
			if (name)
				strbuf_printf(&sb, "%s:%lld", name, (long long)port);
			else
				strbuf_puts(&sb, "an unreadable request");
			out->dests[out->dest_count++] = strbuf_detach(&sb, NULL);
		}
	}
	json_object *stops = jsonx_get_array(doc, "proxyStops");
	for (size_t i = 0; stops && i < json_object_array_length(stops); i++) {
		json_object *s = json_object_array_get_idx(stops, i);
		if (!same_step(s, execution_id))
			continue;
		if (out->stops++ == 0 && jsonx_get_str(s, "detail"))
			out->stop_detail = strdup(jsonx_get_str(s, "detail"));
	}
}

void egress_tally_free(egress_tally *tally)
{
	for (size_t i = 0; i < tally->dest_count; i++)
		free(tally->dests[i]);
	free(tally->stop_detail);
	memset(tally, 0, sizeof *tally);
}
