/*
 * images/ — saved images as the tools deliver them (spec/images.md):
 * relay_image, the imageDelivery of a recorded run, image identities and
 * the session's private image catalog. Above delivery/ (whose pulls and
 * step downloads it uses) and below runs/ and tools/ (which call it);
 * the bytes and pixels of one image file (container rules, PNG codec,
 * previews) are pixels/, a leaf. Builds no MCP result: tools/tool_image.c
 * and the run result of runs/ turn an image_result into one.
 *
 * The files, one job each:
 *   image_delivery.h / .c   relay_image and the imageDelivery of a run;
 *                           the header the rooms above include
 *   image_result.h / .c     the answer: statuses, diagnostics, limits
 *   image_context.h / .c    one delivery in progress (a dctx)
 *   image_identity.h / .c   receipts, snapshot plans, display identities
 *   image_guest.h / .c      pulls within the budget and the deadline, the
 *                           wait for a step download (delivery/downloads.h)
 *   image_original.h / .c   host first, publication, presentation
 *   image_crosscheck.h / .c recordings, the cross-checks of §1.1
 *   image_selectors.h       display, application and reference
 *                           (image_display.c, image_application.c,
 *                           image_reference.c)
 *   image_publish.h / .c    originals a step download or a run brought
 *                           home; a step download (delivery/, below) calls
 *                           it through session_hooks.publish_step_images
 *   image_catalog.h / .c    canonical JSON, identities, the private
 *                           catalog, publication (host files only)
 * Inside the room, image_result and image_catalog use no other file of
 * it, image_context builds on both, and every other file on image_context.
 *
 * Writes no field of struct guest: a delivery copies what it needs under
 * the manager's lock (image_context.c) and writes files only.
 */
#ifndef RELAY_IMAGES_IMAGES_H
#define RELAY_IMAGES_IMAGES_H

#include "images/image_delivery.h"

#endif
