/*
 * receiver/journal.h — state/journal/events.jsonl (spec/guest.md §8): one JSON
 * object per line, seq 1, 2, … without gaps, each append one write plus
 * fsync. A damaged tail is never repaired; the recording must be reset.
 */
#ifndef RECEIVER_JOURNAL_H
#define RECEIVER_JOURNAL_H

#include <stdint.h>

#include "json.h"
#include "util.h"

#define JOURNAL_LINE_MAX (64u * 1024u)
#define JOURNAL_REL      "state/journal/events.jsonl"

typedef struct journal {
	char *path;
	char *session_id;
	int64_t next_seq;
} journal;

/* Opens the journal of root for session_id and reads its last line.
 * Returns 0; -1 with *damaged_out set for a damaged tail (err says why), or
 * with it clear for an I/O error. */
int journal_open(journal *j, const char *root, const char *session_id, int *damaged_out, rerr *err);
void journal_close(journal *j);
/* Appends {seq, at, type, sessionId, <fields…>}; takes ownership of fields
 * (an object, may be NULL). Lines over 64 KiB have their strings cut. */
int journal_append(journal *j, const char *type, jv *fields, rerr *err);
/* Looks for an `execution-completion` line of execution_id. */
int journal_has_completion(const journal *j, const char *execution_id, int *found_out, rerr *err);

#endif
