/*
 * images/image_guest.h — reaching the guest for an image delivery
 * (spec/images.md §5, §6): the identity check before the first pull, byte
 * transfers within the delivery's budget of attempts and its deadline,
 * metadata pulls, and the wait for a step's background download
 * (downloads.h), which a delivery reaching the guest also un-pauses.
 */
#ifndef RELAY_IMAGES_IMAGE_GUEST_H
#define RELAY_IMAGES_IMAGE_GUEST_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "images/image_context.h"

/* spec/images.md §5 last item: before a guest pull, the guest must still be the
 * one the image belongs to. Then the transport is opened. */
bool idl_confirm_guest(dctx *c);

/* One byte transfer from the guest within the budget and the deadline
 * (spec/images.md §6): transient failures are tried again at once while
 * attempts are left; lasting ones end the delivery with their status.
 * `local` must not exist; on failure nothing is left there. */
bool idl_guest_pull(dctx *c, const char *remote, const char *local, const char *what, uint64_t max_bytes);

/* A scratch path for pulled metadata (malloc'd). */
char *idl_scratch_path(dctx *c, const char *prefix, const char *suffix);

/* Pulls a guest metadata file (receipt, action record, journal) of at most
 * 4 MiB and parses it (`jsonl`: returns the raw text in *text_out instead). */
bool idl_guest_metadata(dctx *c, const char *remote, const char *what, json_object **obj_out,
                        char **text_out);

/* Waits for the execution's step download when it is queued or running
 * (spec/images.md §7 step 4). False (status set) when the deadline passed or the
 * call was cancelled first. */
bool idl_wait_for_step(dctx *c, const char *execution_id);

#endif
