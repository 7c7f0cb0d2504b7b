/*
 * guest/receiver_records.h — what the core's evidence/ room reads of the
 * receiver's records inside a recording or a package: the receipt's video
 * evidence and where its file lies. A part of the host ⇄ receiver protocol
 * (receiver_protocol.h includes it, so the receiver and guestio/ compile
 * against the same names), kept apart so that evidence/ needs only these
 * and scripts/layers can keep receiver_protocol.h to guestio/ and runs/.
 * Plain C99 macros, no includes.
 */
#ifndef RELAY_RECEIVER_RECORDS_H
#define RELAY_RECEIVER_RECORDS_H

/* The receipt's key for a screen recording of the run (a request's
 * RECEIVER_REQ_VIDEO): {status: "recorded", sessionId, fileName, sha256,
 * bytes, mimeType, startedAt, stoppedAt, durationMs, fps} or {status: "off",
 * reason}; absent when the request asked for none. The file is
 * RECEIVER_VIDEOS_DIR "/" sessionId "/" fileName. */
#define RECEIVER_RECEIPT_VIDEO   "videoEvidence"
#define RECEIVER_VIDEOS_DIR      "state/videos"
#define RECEIVER_VIDEO_FPS_MAX   30
#define RECEIVER_VIDEO_MAX_BYTES (512u * 1024u * 1024u)

#endif
