/*
 * evidence/review_state.h — the state of one review derivation (review.h),
 * shared by its files and by nothing else:
 *   review_scan.c      pass 1: the journal, the records, the receipts and
 *                      the snapshot files read into the state
 *   review_verdicts.c  pass 2: each action's execution, groups, pairs and
 *                      defects
 *   review_output.c    the review data's steps, findings and reasons
 *   review.c           evidence_review_derive(): the passes in order and
 *                      the review object
 */
#ifndef RELAY_EVIDENCE_REVIEW_STATE_H
#define RELAY_EVIDENCE_REVIEW_STATE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evidence/fswalk.h"
#include "evidence/review.h"

enum { MAX_JSON_FILE_BYTES = 32 << 20 };

typedef struct rv_action {
	const char *action_id;
	const char *execution_id;
	json_object *start, *refusal, *completion; /* journal lines (borrowed from the journal) */
	size_t start_idx, completion_idx, first_idx;
	json_object *before, *after; /* snapshot-captured lines */
	bool before_ok, after_ok;    /* the file is present and matches */
	json_object *record;         /* action record (borrowed from the map) */
	const char *group_id, *group_phase;
	bool captures_before, captures_after, capture_off, has_plan;
	int64_t after_interval_ms;
	bool has_after_interval;
	/* derived */
	const char *execution;
	char *why;                      /* diagnostic for the reasons; owned */
	bool lacks_before, lacks_after; /* standalone planned pair missing */
	bool group_incomplete;
} rv_action;

typedef struct rv {
	const char *dir;
	int root;
	char *session_id;
	json_object *manifest, *journal;
	json_object *exec_starts, *exec_completions; /* id -> line (references taken) */
	json_object *action_records, *exec_records;  /* id -> record */
	json_object *guest_receipts, *pulled_receipts, *host_receipts, *diag_receipts, *diag_requests;
	json_object *requests, *submissions;
	json_object *closed_groups;
	rv_action *actions;
	size_t n_actions, cap_actions;
	fw_strlist hard;     /* hard errors */
	fw_strlist findings; /* all findings, in order */
	fw_strlist snap_findings, exec_findings, defect_findings;
	json_object *reasons_snap, *reasons_exec, *reasons_def;
	fw_strlist failure_exec_ids; /* evidence-failure / resource-stop */
	bool evidence_failure, partial_files;
	fw_tree files;
	json_object *network; /* network.json at the package root, NULL when absent (docs/egress.md) */
} rv;

/* review_takeovers.c: [{attemptId, start, end}] of the package's
 * console-take-over events, by start time (end null: still in force when
 * the attempt ended). A new array. */
json_object *rv_take_overs(rv *r);

/* review_video.c: the receipt's videoEvidence as the review shows it
 * ({status, path, durationMs, bytes, sha256, ...} or {status: "off",
 * reason}), checked against the package's file (a hard error when it is
 * missing or differs); NULL when the receipt names none. New reference. */
json_object *rv_recording(rv *r, const json_object *receipt);

/* review_scan.c */
bool rv_str_eq(const char *a, const char *b);

bool rv_has_prefix(const char *s, const char *p);

bool rv_has_suffix(const char *s, const char *x);

bool rv_list_has(const fw_strlist *l, const char *s);

void rv_list_add_unique(fw_strlist *l, const char *s);

const char *rv_get_str_path(const json_object *o, const char *k1, const char *k2);

void rv_hard(rv *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void rv_add_finding(rv *r, fw_strlist *cls, const char *text);

rv_action *rv_find_action(rv *r, const char *action_id);

/* Loads every "<dir>/<stem><suffix>" file directly in `dir` into map[stem]. */
void rv_load_json_dir(rv *r, const char *dir, const char *suffix, json_object *map);

json_object *rv_map_get(json_object *map, const char *key);

/* "refused", "failed", "uncertain" or "completed" for a receipt or outcome. */
const char *rv_outcome_status(const json_object *outcome);

const char *rv_receipt_status(const json_object *receipt);

const char *rv_receipt_diagnostic(const json_object *receipt);

/* The guest's receipt for an execution: the pulled state's, else the copy
 * pulled right after the run. */
json_object *rv_guest_receipt(rv *r, const char *id);

/* Statuses of every receipt of one execution after superseding (§12.4):
 * fills seen[0..3] = refused, failed, uncertain, completed. */
void rv_receipts_of(rv *r, const char *id, bool seen[4], const char **diag);

char *rv_snapshot_path(const rv *r, const json_object *line);

void rv_scan_journal(rv *r);

/* Every file under state/snapshots/ must be a snapshot of this recording
 * named by a snapshot-captured line, or a .partial-* leftover. */
void rv_scan_snapshot_files(rv *r);

void rv_check_records_and_receipts(rv *r);

/* review_verdicts.c */
void rv_derive_execution(rv *r, rv_action *a);

/* Group analysis: a group is complete when its first has a before, its last
 * an after, it was closed, and no unrelated action started inside it. */
void rv_derive_groups(rv *r);

void rv_derive_pairs_and_defects(rv *r);

/* review_output.c */
json_object *rv_build_steps(rv *r, json_object *details, size_t *recorded_steps, bool *any_not_completed,
                            bool *any_failed);

/* Findings from receipts and requests (execution class). */
void rv_receipt_findings(rv *r, bool *receipt_failed, bool *receipt_uncertain);

void rv_lost_requests(rv *r, fw_strlist *lost);

json_object *rv_list_to_json(const fw_strlist *l);

void rv_build_reasons(rv *r, const char *completeness, const char *execution, json_object *steps,
                      const fw_strlist *lost, size_t recorded_steps);

#endif
