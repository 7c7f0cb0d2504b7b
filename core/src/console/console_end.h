/*
 * console/console_end.h — where a console attempt ends and what it leaves in
 * the guest's evidence: a person's take-overs of the live view
 * (MCP_RELAY_CONSOLE_CONTROL=allow), input no step made, become
 * console-take-over events. An attempt ends by relay_console_cancel, or with
 * its guest: relay_release, relay_finish and the release at the end of the
 * session stop the viewer, so they cancel the attempt first, before the
 * guest's evidence is packaged.
 */
#ifndef RELAY_CONSOLE_CONSOLE_END_H
#define RELAY_CONSOLE_CONSOLE_END_H

#include <json-c/json.h>

#include "session/manager_internal.h"

/* One console-take-over event {console_id, attempt_id, start, end} per
 * entry of `obs`'s live_view.take_overs (a cancel's observation). */
void console_record_take_overs(session_manager *m, guest *g, const json_object *obs, const char *console_id,
                               const char *attempt_id);

/* Cancels g's active or uncertain console attempt before its evidence is
 * sealed (`why`: "released", "finished", recorded with the intent) and
 * records the take-overs the cancel reports. Nothing when no attempt is
 * active. A failed cancel is recorded (console-cancel-uncertain) and never
 * stops the caller: the release that follows stops the viewer either way.
 * `call` may be NULL (an internal call bounded by 30 s is used). On g's
 * queue, without the lock. */
void console_end_with_guest(session_manager *m, guest *g, relay_call *call, const char *why);

#endif
