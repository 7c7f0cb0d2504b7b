/*
 * delivery/ — evidence from the guest to the host. Above session/ and
 * guestio/, below images/, lease/, runs/ and tools/: it includes none of
 * those (scripts/layers), builds no MCP result (domain functions fill a
 * util/outcome.h relay_outcome or a result struct of their own; the
 * handlers in tools/ turn them into answers), and the rooms above reach it
 * only through the headers below.
 *
 * The files, one job each:
 *   downloads.h / .c        the per-guest queue of background step
 *                           downloads, its worker and states (spec/evidence.md §5)
 *   download_job.h / .c     one step download: its record and attempts
 *   step_downloads.h        the narrow hooks runs/ calls
 *   evidence_pull.h / .c    verified pulls of guest files (archive, one by one)
 *   extraction.h / .c       declared outputs pulled (relay_extract, finish,
 *                           release)
 *   packaging.h / .c        the recording pulled and merged, packages
 *                           delivered (finish, release, recording reset)
 *   finish.h / .c           relay_finish steps 2-7
 *   network_evidence.h / .c network.json at the package root
 * Saved images (relay_image, the imageDelivery of a run, the catalog) are
 * the room above, images/ (images/images.h). The one call the other way,
 * a step download publishing the step's display originals, goes through
 * the session's hook table (session_hooks.publish_step_images).
 *
 * Fields of struct guest (session/guest.h) this room writes, under the
 * manager's lock: its slice (guest->delivery, delivery_state.h: the
 * download queue and its published counters; the declarations are set at
 * reserve),
 * phase (FINISHING during relay_finish, back to STAGED when it fails before
 * delivery), delivered and last_error (a sealed package), and, through the
 * session's helpers, lastError and the guest's events
 * (guest_set_last_error, guest_event). Everything else it reads only.
 */
#ifndef RELAY_DELIVERY_DELIVERY_H
#define RELAY_DELIVERY_DELIVERY_H

#include "delivery/downloads.h"
#include "delivery/extraction.h"
#include "delivery/finish.h"
#include "delivery/packaging.h"

#endif
