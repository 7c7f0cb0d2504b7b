/*
 * relay/machine.h — the machine kind: lease, renew, inspect and release
 * guests; list images, the application catalog and capacity.
 *
 * Shipped implementations: machine-local (Linux namespace sandboxes, the
 * embedded default) and machine-service (HTTP to the loopback machine
 * service). tests/plugins/machine-faultshim wraps any of them and injects faults.
 *
 * THE LEASE DOCUMENT. Every operation that returns a lease returns one JSON
 * object (UTF-8 text, owned by caller, free with host->free) with these keys;
 * the core stores it verbatim in the guest's ownership record and hands it
 * back, borrowed, to every later operation on that guest (machine, transport,
 * capture and console):
 *
 *   "vm"          string, required: the backend's machine name.
 *   "purpose"     string, required: the purpose the lease was acquired for.
 *   "image"       string, required: the image key.
 *   "lease_id"    string or null: the backend's lease identity.
 *   "state"       "pending" | "provisioning" | "running" | "releasing" |
 *                 "failed" | "lost" | "unknown". "lost" (ABI 1.5): the
 *                 guest is gone with its node, or the backend replaced it
 *                 with another machine; the plugin never re-creates it and
 *                 refuses every transport operation on it; release still
 *                 removes what is left. The core records it (guestState
 *                 "lost", a `guest-lost` event) and stops renewing.
 *   "lostReason"  string, with "lost" only: why, in the backend's words.
 *   "expiresAtMs" integer or null: the backend's confirmed expiry, Unix ms.
 *   "console"     object or null: the backend's console record
 *                 ({"console_id", "status", ...}) when acquired with vnc.
 *   "display"     string, false or null: the guest's X display (":0");
 *                 false when the backend knows the guest has none (its
 *                 display is off, or the image has no X server it can
 *                 start): a capture plugin then guesses none; null when
 *                 the backend does not know. With a display, every
 *                 command's environment has DISPLAY set to it (the
 *                 environment contract of every backend with a display).
 *   "ssh"         object or null: {"host", "port", "user", "identityFile",
 *                 "knownHostsFile"} when the guest is reachable over SSH.
 *   "record"      object: the backend's own record, unchanged.
 * A plugin may add keys of its own (machine-local adds "local"); the core
 * keeps and returns them untouched.
 *
 * Errors. Operations return RELAY_OK or a relay_status and fill `err`:
 *   RELAY_E_CAPACITY       acquire refused for capacity (message: reason);
 *   RELAY_E_REFUSED        definite refusal, nothing happened;
 *   RELAY_E_IMAGE_UNAVAILABLE  unknown image or base not available;
 *   RELAY_E_INDETERMINATE  the request may have taken effect;
 *   RELAY_E_UNAVAILABLE    backend unreachable or the wrong service;
 *   RELAY_E_ENVIRONMENT_MISMATCH  the lease belongs to another environment;
 *   RELAY_E_NOT_FOUND      the backend no longer knows the lease;
 *   RELAY_E_UNVERIFIED     destruction could not be confirmed;
 *   RELAY_E_CANCELLED, RELAY_E_TIMEOUT, RELAY_E_UNSUPPORTED_FLAGS, ...
 * After any failure every `char **..._out` is NULL (relay/plugin.h R3):
 * the core frees it anyway (an acquire that failed leaves nothing to
 * adopt), and never reads it.
 *
 * Lifecycle, as `mcp-relay plugin-test --kind machine` checks it: acquire
 * answers a lease whose "purpose" is the spec's; inspect and renew answer
 * the same "vm"; find_by_purpose (when provided) lists it; release
 * "finished" is RELAY_OK; verify_destroyed is then RELAY_OK; inspect is
 * then RELAY_E_NOT_FOUND or a lease whose "state" is not "running"; a
 * second release is RELAY_OK or RELAY_E_NOT_FOUND.
 *
 * Threads: operations may be called concurrently for different leases, and
 * (renew, inspect) concurrently with a long operation on the same lease.
 */
#ifndef RELAY_MACHINE_H
#define RELAY_MACHINE_H

#include <stdint.h>

#include "relay/host.h"
#include "relay/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct relay_machine_ops {
	uint32_t struct_size; /* sizeof(relay_machine_ops) as compiled by the plugin */

	/* --- required ------------------------------------------------------ */

	/*
	 * Leases a fresh guest. `spec_json` (borrowed) is an object:
	 *   {"guest": "login-test-1", "task": "login-test",
	 *    "purpose": "relay-login-test-3f9a1c2e", "image": "ubuntu2404",
	 *    "env": "none" | "<pack>", "network": "nat" | "internet",
	 *    "vnc": bool, "ttlMs": <initial lifetime, ms>,
	 *    "deadlineMs": <Unix ms the lease may never pass>}
	 * On RELAY_OK *lease_json_out is the lease document. Not idempotent:
	 * the core never calls it twice for one purpose except after
	 * RELAY_E_CAPACITY (a definite refusal). RELAY_E_CAPACITY,
	 * RELAY_E_REFUSED and RELAY_E_IMAGE_UNAVAILABLE mean nothing was leased;
	 * RELAY_E_INDETERMINATE means the core must reconcile by purpose.
	 */
	relay_status (*acquire)(relay_plugin_state *state, const char *spec_json, relay_call *call,
	                        unsigned flags, char **lease_json_out, relay_error *err);

	/* Extends the lease to now + ttl_ms (never asked past the deadline given
	 * at acquire). On RELAY_OK *lease_json_out (may be NULL to skip) is the
	 * refreshed lease document with the confirmed "expiresAtMs". */
	relay_status (*renew)(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
	                      relay_call *call, unsigned flags, char **lease_json_out, relay_error *err);

	/* Reads the lease's current state from the backend. RELAY_E_NOT_FOUND
	 * when the backend no longer knows it. *lease_json_out as for renew. */
	relay_status (*inspect)(relay_plugin_state *state, const char *lease_json, relay_call *call,
	                        unsigned flags, char **lease_json_out, relay_error *err);

	/* Asks the backend to destroy the guest. `reason` (borrowed) is
	 * "finished", "released" or "failed". RELAY_OK when the backend confirmed,
	 * RELAY_E_NOT_FOUND when it no longer knew the lease (counts as
	 * released), otherwise a failure; the core then inspects and retries. */
	relay_status (*release)(relay_plugin_state *state, const char *lease_json, const char *reason,
	                        relay_call *call, unsigned flags, relay_error *err);

	/* Checks, independently of release()'s answer, that the guest is gone
	 * (machine-local: no process left, overlay removed; machine-service: the
	 * Tart inventory). RELAY_OK when verified; RELAY_E_UNVERIFIED otherwise.
	 * *check_name_out (owned by caller, may be NULL to skip) names the check
	 * used, e.g. "tart" or "namespace". */
	relay_status (*verify_destroyed)(relay_plugin_state *state, const char *lease_json, relay_call *call,
	                                 unsigned flags, char **check_name_out, relay_error *err);

	/* The image inventory: {"images": {"<key>": {"kind": "linux"|"macos",
	 * "base_available": bool, "base_fetchable": bool (optional), ...}},
	 * "capacity": {...} | null}. "base_fetchable": the base is not here,
	 * and acquire fetches it (an engine's pull), failing with the reason
	 * the source gives; the core then does not refuse the acquisition
	 * before asking. The core passes both objects through to relay_probe
	 * unchanged. */
	relay_status (*images)(relay_plugin_state *state, relay_call *call, unsigned flags,
	                       char **images_json_out, relay_error *err);

	/* --- optional (NULL = unsupported) ---------------------------------- */

	/* Backend identity check before lease operations. RELAY_OK with
	 * *health_json_out (owned, may be NULL to skip) the backend's answer;
	 * RELAY_E_UNAVAILABLE naming what was expected and found. */
	relay_status (*health)(relay_plugin_state *state, relay_call *call, unsigned flags,
	                       char **health_json_out, relay_error *err);

	/* The application catalog, schemaVersion 1 (docs/plugin-abi.md):
	 * {"schemaVersion": 1, "images": [{"image", "os", "architecture",
	 * "applications": [{"id", "name", "aliases", "version"}]}]}. The core
	 * validates it before use. */
	relay_status (*catalog)(relay_plugin_state *state, relay_call *call, unsigned flags,
	                        char **catalog_json_out, relay_error *err);

	/* Every lease the backend holds for `purpose` (borrowed), as a JSON
	 * array of lease documents (owned by caller). Used to reconcile an
	 * indeterminate acquire and at restart. */
	relay_status (*find_by_purpose)(relay_plugin_state *state, const char *purpose, relay_call *call,
	                                unsigned flags, char **leases_json_out, relay_error *err);

	/* What leases of this plugin are bound to, for the ownership record:
	 * {"machine": "<plugin name>", "endpoint": "<origin>"|null,
	 *  "store": "<path>"|null, "environmentFingerprint": "<hex>"|null}.
	 * Owned by caller. When NULL the core records {"machine": name, ...null}. */
	relay_status (*binding)(relay_plugin_state *state, unsigned flags, char **binding_json_out,
	                        relay_error *err);

	/* ABI 1.0-1.6: the console as one string switch. `op` (borrowed) is
	 * "capabilities", "resolve", "open" or "cancel"; `lease_json` is NULL
	 * for "capabilities"; `request_json` (borrowed) the operation's body
	 * ({"lease_id", "console_id", "attempt_id"}). *response_json_out
	 * (owned) is the backend's report, unnormalised. Superseded by
	 * `console_ops` (1.7): a new plugin leaves this NULL. The core keeps an
	 * older plugin that fills it working: the loader turns it into a
	 * relay_machine_console_ops of its own (loader/console_adapt.c), so a
	 * console plugin only ever sees the typed table. A table filling both
	 * this slot and `console_ops` is refused (loader check 8). */
	relay_status (*console)(relay_plugin_state *state, const char *lease_json, const char *op,
	                        const char *request_json, relay_call *call, unsigned flags,
	                        char **response_json_out, relay_error *err);

	/* Readiness checks for `mcp-relay doctor`, without acquiring anything:
	 * a JSON array of {"check", "ok": bool, "detail", "fix"|null}, each
	 * optionally with "level": "warning" for an optional capability the
	 * machine works without ("detail" then says what its absence costs;
	 * doctor prints WARN and still passes). */
	relay_status (*doctor)(relay_plugin_state *state, relay_call *call, unsigned flags,
	                       char **checks_json_out, relay_error *err);

	/* ABI 1.3. The sockets of the relay's egress proxy (docs/egress.md) for a
	 * lease whose network is "allow" or "internet", made in the guest's own
	 * network namespace, where they are the guest's only way out:
	 * fds_out[0] a TCP listener on the guest's 127.0.0.1:3128 (the proxy),
	 * fds_out[1] a UDP socket bound to its 127.0.0.1:53 and fds_out[2] a TCP
	 * listener on its 127.0.0.1:53 (the resolver). Owned by the caller, who
	 * serves them from the relay's namespace and closes them. On failure
	 * every fds_out[i] is -1. NULL = the plugin cannot give a guest egress;
	 * it then refuses "allow" and "internet" at acquire. */
	relay_status (*egress_listeners)(relay_plugin_state *state, const char *lease_json, unsigned flags,
	                                 int fds_out[3], relay_error *err);

	/* ABI 1.7. The console of this backend for console plugins
	 * (relay/console.h), typed (relay_machine_console_ops below; static
	 * storage). NULL = no console: acquire refuses "vnc": true and the
	 * console tools answer that the backend has none. */
	const struct relay_machine_console_ops *console_ops;
} relay_machine_ops;

/*
 * ABI 1.7: the console sub-table (spec/machine-service.md §9). Every slot is
 * required when the table is given; each refuses an unknown bit of `flags`
 * (none is defined) with RELAY_E_UNSUPPORTED_FLAGS before anything else,
 * and fills the caller's `err` on every failure. Reports and capabilities
 * are JSON objects (UTF-8, owned by caller, free with host->free) as the
 * backend wrote them; the console plugin and the core normalise them. After
 * a failure *..._out is NULL. `lease_json` is the lease document (borrowed);
 * its "lease_id" is the identity the backend checks ("Console lease identity
 * mismatch" when it is not the backend's). `console_id` is the lease's
 * "console"."console_id" and `attempt_id` the caller's attempt (both
 * borrowed, 1 to 120 of [A-Za-z0-9_.-], starting with a letter or digit;
 * RELAY_E_INVALID_ARGUMENT otherwise, "Invalid console request identity or
 * fields"). No slot takes a time: a slot answers within the backend's own
 * bounds (machine-local and machine-docker wait at most 15 s for x11vnc's
 * banner) and `call` cancels it.
 */
typedef struct relay_machine_console_ops {
	uint32_t struct_size; /* sizeof(relay_machine_console_ops) as compiled by the plugin */

	/* Acquisition capabilities (spec/machine-service.md §3.2):
	 * {"schemaVersion": 1, "options": {"vnc": {"default": false,
	 * "backends": {"linux": {...}, "macos": {...}}}}}. No lease. */
	relay_status (*capabilities)(relay_plugin_state *state, relay_call *call, unsigned flags,
	                             char **capabilities_json_out, relay_error *err);

	/* The console report of the lease (§9.2). No side effect.
	 * RELAY_E_NOT_FOUND when the lease is not held or has no console
	 * ("Console unavailable after restart or for this lease; ..."). */
	relay_status (*resolve)(relay_plugin_state *state, const char *lease_json, relay_call *call,
	                        unsigned flags, char **report_json_out, relay_error *err);

	/* Opens viewing for attempt `attempt_id` of console `console_id`:
	 * called only on an explicit user request. An attempt id seen before
	 * answers its existing report and launches nothing. RELAY_E_REFUSED
	 * with the spec's sentence when the console is revoked, another attempt
	 * is active or the attempt limit is reached; RELAY_E_INDETERMINATE when
	 * the outcome is unknown (resolve before another open). */
	relay_status (*open)(relay_plugin_state *state, const char *lease_json, const char *console_id,
	                     const char *attempt_id, relay_call *call, unsigned flags, char **report_json_out,
	                     relay_error *err);

	/* Stops what attempt `attempt_id` started (an attempt never opened is
	 * recorded as cancelled). Never releases the guest. */
	relay_status (*cancel)(relay_plugin_state *state, const char *lease_json, const char *console_id,
	                       const char *attempt_id, relay_call *call, unsigned flags,
	                       char **report_json_out, relay_error *err);
} relay_machine_console_ops;

/* Smallest console sub-table the loader accepts (all four slots). */
#define RELAY_MACHINE_CONSOLE_OPS_MIN_SIZE (offsetof(relay_machine_console_ops, cancel) + sizeof(void *))

/* Smallest machine ops table the 1.x loader accepts. */
#define RELAY_MACHINE_OPS_MIN_SIZE (offsetof(relay_machine_ops, images) + sizeof(void *))

#ifdef __cplusplus
}
#endif

#endif /* RELAY_MACHINE_H */
