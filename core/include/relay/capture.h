/*
 * relay/capture.h — the capture kind: which command the guest receiver runs
 * to take one display snapshot, and when snapshots are on at all.
 *
 * Shipped implementations: capture-cua (cua-driver's get_desktop_state) and
 * capture-x11 (relay-x11shot, a small program the relay stages into the
 * guest). The receiver, not the plugin, runs the command (spec: spec/guest.md
 * §11); the plugin only plans it.
 */
#ifndef RELAY_CAPTURE_H
#define RELAY_CAPTURE_H

#include <stdint.h>

#include "relay/host.h"
#include "relay/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct relay_capture_ops {
	uint32_t struct_size; /* sizeof(relay_capture_ops) as compiled by the plugin */

	/*
	 * Decides whether runs on a guest take snapshots and how.
	 * `context_json` (borrowed) is:
	 *   {"lease": <lease document>,
	 *    "applications": [{"id", "name", "version"}...]  (the image's catalog
	 *                     entries; [] when the backend has no catalog),
	 *    "platform": "linux-x86_64" | ... | null   (null before staging),
	 *    "guestRoot": "/var/tmp/...",
	 *    "cuaDriver": "<corrected path>" | null}
	 * On RELAY_OK *plan_json_out (owned by caller) is:
	 *   {"enabled": bool,
	 *    "because": "the image lists dpkg:cua-driver",   (one phrase)
	 *    "capture": {"plugin": "<name>", "argv": [...one "@OUT@"...],
	 *                "check": "cua-driver-json" | "png-file",
	 *                "timeoutMs": 60000} | null,
	 *    "stage": [{"local": "<absolute host file>",
	 *               "remote": "bin/relay-x11shot"}],  (relative to the guest
	 *               root; files the receiver needs to capture; may be [])
	 *    "cuaDriver": "<path>" | null}
	 * "capture" is null exactly when "enabled" is false.
	 */
	relay_status (*plan)(relay_plugin_state *state, const char *context_json, unsigned flags,
	                     char **plan_json_out, relay_error *err);
} relay_capture_ops;

#define RELAY_CAPTURE_OPS_MIN_SIZE (offsetof(relay_capture_ops, plan) + sizeof(void *))

#ifdef __cplusplus
}
#endif

#endif /* RELAY_CAPTURE_H */
