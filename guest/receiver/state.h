/*
 * receiver/state.h — the recording's layout under R/state (spec/guest.md §1):
 * session.json, the journal, records, snapshots, started markers, receipts
 * and groups.json.
 */
#ifndef RECEIVER_STATE_H
#define RECEIVER_STATE_H

#include "fsx.h"
#include "json.h"
#include "util.h"

#define SESSION_REL  "state/session.json"
#define GROUPS_REL   "state/receiver/groups.json"
#define STARTED_DIR  "state/receiver/started"
#define RECEIPTS_DIR "state/receiver/receipts"
#define EXEC_REC_DIR "state/records/execution"
#define ACT_REC_DIR  "state/records/action"

/* Reads the current sessionId from R/state/session.json (malloc'd) or NULL
 * with the reason. */
char *state_session_id(const char *root, rerr *err);

/* Creates the state layout for session_id (receiver init). *created_out
 * tells whether anything was created. */
int state_init(const char *root, const char *session_id, int *created_out, rerr *err);

/* Reads a JSON file under root (rel path) of at most max_bytes; NULL with
 * *missing_out set when it does not exist. */
jv *state_read_json(const char *root, const char *rel, size_t max_bytes, int *missing_out, rerr *err);

/* Writes value pretty-printed (plus a newline) durably to root/rel_dir/name.
 * Optionally returns the SHA-256 and size of what was written. */
int state_write_json(const char *root, const char *rel_dir, const char *name, const jv *value,
                     char sha_out[65], uint64_t *bytes_out, rerr *err);
/* The same for a file written more than once in a run (a pending record,
 * then its final state): later writes go in place (durable_rewrite, fsx.h). */
int state_rewrite_json(const char *root, const char *rel_dir, const char *name, const jv *value,
                       durable_file *f, rerr *err);

#endif
