/*
 * egress/records.h — the connection records of the egress proxy
 * (docs/egress.md, docs/evidence-format.md network.json).
 *
 * The proxy appends JSON lines to <guest dir>/network.jsonl:
 *   {"record":"connection","phase":"start"|"end", "id", "executionId",
 *    "time", "protocol", "name", "port", "address", "decision", "rule",
 *    "reason", ...; "end" adds "bytesOut", "bytesIn", "durationMs",
 *    "error"}
 * A refusal is one "end" line. An allowed connection has a "start" line
 * when it is connected and an "end" line when it closes; a start without
 * an end is a connection the proxy did not live to finish. The relay adds
 *   {"record":"proxy","event":"stopped","time","executionId","detail"}
 * when the proxy ends unasked. egress_records_load merges them.
 */
#ifndef RELAY_EGRESS_RECORDS_H
#define RELAY_EGRESS_RECORDS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Appends one record (json text + newline) with a single write(). 0 or -1. */
int egress_record_append(int fd, json_object *record);

/* Reads `path` (absent = no connections) and merges it into the document of
 * network.json: {"schemaVersion":1, "connections":[...], "proxyStops":[...]},
 * each connection {id, executionId, time, name, port, address, decision,
 * rule, reason, bytesOut, bytesIn, durationMs, protocol, error}. NULL when
 * out of memory. */
json_object *egress_records_load(const char *path);

/* The counts of one execution (NULL: all): allowed, refused connections
 * (DNS lookups are not connections), the refused destinations
 * "name:port" (up to `max_dest`, in `dests`, caller frees each), and the
 * proxy stops during it (the first one's detail in *stop_detail, caller
 * frees). */
typedef struct egress_tally {
	int64_t allowed, refused, lookups_refused, stops, cut;
	char *dests[8];
	size_t dest_count;
	char *stop_detail;
} egress_tally;
void egress_tally_of(const json_object *doc, const char *execution_id, egress_tally *out);
void egress_tally_free(egress_tally *tally);

#endif
