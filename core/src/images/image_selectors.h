/*
 * images/image_selectors.h — the three selectors of relay_image
 * (spec/images.md §7): display (a run's before/after snapshot, by recording,
 * execution and phase), application (a declared output's image file) and
 * reference (an imageId of this guest's catalog). Each resolves the
 * target, cross-checks it, and delivers the original through
 * image_original.h; each sets exactly one status in the delivery.
 */
#ifndef RELAY_IMAGES_IMAGE_SELECTORS_H
#define RELAY_IMAGES_IMAGE_SELECTORS_H

#include <json-c/json.h>
#include <stdbool.h>

#include "images/image_context.h"

/* image_display.c */
void idl_resolve_display(dctx *c, const json_object *target);

/* Obtains and presents a display image whose catalog entry is `entry`. */
void idl_deliver_display_image(dctx *c, const char *recording, bool live, const json_object *entry);

/* image_application.c */
void idl_resolve_application(dctx *c, const json_object *target);

/* image_reference.c */
/* Reads and checks this guest's catalog entry for `image_id`: sets the
 * status and returns NULL when it is missing, foreign or damaged. */
json_object *idl_reference_entry(dctx *c, const char *image_id);

void idl_resolve_reference(dctx *c, const json_object *target);

#endif
