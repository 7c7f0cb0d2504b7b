/*
 * receiver/record.h — the screen recording of one run (MCP_RELAY_RECORD=
 * video; the request's "video" key, receiver_protocol.h): ffmpeg's x11grab
 * of the guest's display, VP9 in WebM, from just before the script (started
 * when the run is admitted) and
 * stopped (a "q" on its standard input) right after the after-image. The
 * file lands in state/videos/<sessionId>/<executionId>.webm and the receipt
 * names it with its size, SHA-256 and length ("videoEvidence"). When the
 * guest cannot record (no ffmpeg, no display, ffmpeg failing), the receipt
 * says {status: "off", reason} and the run goes on: a recording never
 * changes a run's outcome.
 */
#ifndef RECEIVER_RECORD_H
#define RECEIVER_RECORD_H

#include <stdint.h>
#include <sys/types.h>

#include "json.h"

struct run_ctx;

typedef struct run_video {
	int requested;      /* the request asked for a recording */
	pid_t pid;          /* ffmpeg, 0 when not running */
	int stdin_fd;       /* its standard input ("q" stops it), -1 */
	int64_t fps;        /* frames per second */
	char *partial_path; /* where ffmpeg writes */
	char *final_path;   /* where the finished file goes */
	char *file_name;    /* <executionId>.webm */
	char started_at[32], stopped_at[32];
	int64_t started_mono_ms, stopped_mono_ms;
	char sha256[65];
	uint64_t bytes;
	int recorded;     /* the file is final, hashed */
	char reason[512]; /* why not, when requested and not recorded */
} run_video;

/* Reads the request's "video" key; NULL when valid (absent counts), else
 * the refusal diagnostic. */
const char *record_parse(struct run_ctx *ctx);

/* Starts ffmpeg when requested, as soon as the run is admitted (before the
 * journal's execution start and the before-snapshot, so that its start
 * overlaps them; never fails the run: a failure is the reason of an "off"
 * recording). Its pid joins ctx->spared so the captures' and the script's
 * cleanup leave it running. */
void record_begin(struct run_ctx *ctx);

/* Just before the script: waits until ffmpeg grabbed its first frame (its
 * output file exists; at most 3 s), so that the recording covers the
 * script's start; the recording's clock starts here. ffmpeg having ended
 * turns the recording off with its last message. */
void record_await(struct run_ctx *ctx);

/* Asks ffmpeg to stop (a "q"): the recording ends here. ffmpeg finishes
 * the file while the run writes its records. */
void record_stop(struct run_ctx *ctx);

/* Waits for ffmpeg to end (then SIGINT, then SIGKILL), moves the file into
 * place and hashes it. Does nothing when nothing runs. */
void record_finish(struct run_ctx *ctx);

/* The receipt's "videoEvidence" object, or NULL when none was requested. */
jv *record_receipt_json(const struct run_ctx *ctx);

/* ffmpeg's pid while it runs, else 0: never part of what a step left
 * running. */
pid_t record_pid(const struct run_ctx *ctx);

void record_free(struct run_ctx *ctx);

#endif
