/*
 * receiver/capture.h — capture commands (spec/guest.md §11): the argv a capture
 * plugin supplies, its single @OUT@ replaced by the output path, run without
 * a shell under the process rules, then checked ("cua-driver-json" or
 * "png-file").
 */
#ifndef RECEIVER_CAPTURE_H
#define RECEIVER_CAPTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "json.h"
#include "proc.h"
#include "util.h"

#define CAPTURE_TIMEOUT_MAX_MS 60000
#define CAPTURE_ARGV_MAX       256

typedef struct capture_spec {
	char *plugin;
	char **argv; /* NULL-terminated */
	size_t argc;
	char *check;
	int64_t timeout_ms;
} capture_spec;

/* Parses {plugin, argv, check, timeoutMs}; -1 means "invalid capture
 * command" (err holds the detail). */
int capture_spec_parse(const jv *obj, capture_spec *out, rerr *err);
void capture_spec_free(capture_spec *spec);

typedef struct capture_outcome {
	int ok;
	int unknown; /* termination of the capture's group not confirmed */
	char diagnostic[1024];
	char sha256[65];
	uint64_t bytes;
	char captured_at[32];
} capture_outcome;

/* The check of spec/guest.md §11 for a capture that ended well: `text`
 * (its standard output) a JSON object whose screenshot_file_path is
 * out_path, the file a regular PNG of 1 byte to 64 MiB; res->ok and its
 * sha256 and bytes set. -1 with res->diagnostic otherwise. */
int capture_check_answer(const char *text, size_t len, const char *out_path, capture_outcome *res);

/* Runs one capture to out_path, limited to min(spec timeout, limit_ms).
 * A failed capture's file is removed. hooks may be NULL. `spared` (may be
 * NULL) lists children of the receiver the capture's cleanup must not kill:
 * what the step's script left running (spec/guest.md §16.1). */
void capture_take(const capture_spec *spec, const char *out_path, int64_t limit_ms, const spawn_hooks *hooks,
                  const pid_t *spared, size_t spared_count, capture_outcome *res);

#endif
