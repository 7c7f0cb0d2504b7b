/*
 * images/image_crosscheck.h — whose image it is and whether to trust
 * it: the guest's recordings (current and previous) and the other guests
 * of the session that own one, the host-first reading of metadata, and
 * the cross-check of spec/images.md §1.1 (action record, reverse references,
 * journal).
 */
#ifndef RELAY_IMAGES_IMAGE_CROSSCHECK_H
#define RELAY_IMAGES_IMAGE_CROSSCHECK_H

#include <json-c/json.h>
#include <stdbool.h>

#include "images/image_context.h"

/* The evidence folder of recording `session_id` of this guest (current or
 * previous), malloc'd, or NULL. *current says which. */
char *idl_recording_of(dctx *c, const char *session_id, bool *current);

/* True when `path` is one of this guest's recordings; *current says which. */
bool idl_own_recording(dctx *c, const char *path, bool *current);

/* The other guest of this session that owns recording `session_id`
 * (malloc'd name), or NULL. */
char *idl_recording_owner_elsewhere(dctx *c, const char *session_id);

/* The refusal of what another guest of this session owns (spec/images.md
 * §2.3): with `owner` (taken, freed) not NULL, sets unauthorized-reference
 * "<prefix><id> belongs to guest <owner> of this session, not to <this>"
 * and returns true; false, the status untouched, when `owner` is NULL. */
bool idl_refuse_owned_elsewhere(dctx *c, const char *prefix, const char *id, char *owner);

/* The guest of this session whose purpose is `purpose` (malloc'd name). */
char *idl_guest_of_purpose(dctx *c, const char *purpose);

/* Reads the first existing candidate as a JSON object. NULL when none
 * exists; on a damaged one the status is set and *failed true. */
json_object *idl_host_json(dctx *c, const char *const *paths, const char *what, bool *failed);

/* spec/images.md §1.1: the action record must match the receipt's descriptor in
 * identity, group and step, with snapshotRole the group's phase (or
 * single), and its reverse references (or else the journal) must name the
 * same image. */
bool idl_cross_check(dctx *c, const char *recording, bool live, const json_object *snap,
                     const char *group_phase);

#endif
