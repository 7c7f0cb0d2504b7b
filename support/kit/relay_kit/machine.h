/*
 * relay_kit/machine.h — the machine ops' front (relay/machine.h), curl's
 * vtls.c way: every slot checks its flags (unknown bits refused, naming the
 * operation), clears its out-parameter, parses the spec or the lease
 * document, calls the backend with JSON objects and hands the answer back
 * as text allocated by the host. The backend says only what its machines
 * do differently.
 *
 * A plugin state that uses the front begins with an rk_machine (the host,
 * the backend's table, its store and endpoint, and the configuration every
 * machine plugin reads, relay_kit/machine_config.h); the plugin's
 * relay_machine_ops lists RK_MACHINE_FRONT and adds the slots the front does
 * not serve (console_ops, egress_listeners). The front answers binding itself.
 */
#ifndef RELAY_KIT_MACHINE_H
#define RELAY_KIT_MACHINE_H

#include <json-c/json.h>

#include "relay/machine.h"

/* A backend's operations, each on the plugin's own state. A document is the
 * lease document parsed (NULL when it is absent or not a JSON object: the
 * backend refuses it in its own words); an answer *_out is owned by the
 * caller (json_object_put) and set only on RELAY_OK. */
typedef struct rk_machine_backend {
	const char *name;            /* the plugin's: health's "service", binding's "machine" */
	const char *destroyed_check; /* verify_destroyed's check name ("namespace", "engine") */
	relay_status (*acquire)(relay_plugin_state *state, json_object *spec, relay_call *call,
	                        json_object **doc_out, relay_error *err);
	/* doc_out NULL: the renewed document is not wanted. */
	relay_status (*renew)(relay_plugin_state *state, json_object *doc, uint64_t ttl_ms, relay_call *call,
	                      json_object **doc_out, relay_error *err);
	relay_status (*inspect)(relay_plugin_state *state, json_object *doc, relay_call *call,
	                        json_object **doc_out, relay_error *err);
	relay_status (*release)(relay_plugin_state *state, json_object *doc, const char *reason,
	                        relay_call *call, relay_error *err);
	/* RELAY_OK when nothing the document names survives. */
	relay_status (*verify_destroyed)(relay_plugin_state *state, json_object *doc, relay_call *call,
	                                 relay_error *err);
	/* The answers of images and doctor cannot fail (NULL: out of memory). */
	json_object *(*images)(relay_plugin_state *state, relay_call *call);
	/* Whether the backend is healthy; `answer` (NULL: only the check) holds
	 * {"ok": true, "service": name}, to which the backend adds its facts. */
	relay_status (*health)(relay_plugin_state *state, relay_call *call, json_object *answer,
	                       relay_error *err);
	relay_status (*catalog)(relay_plugin_state *state, relay_call *call, json_object **out,
	                        relay_error *err);
	/* purpose is never NULL (the front refuses that). */
	relay_status (*find_by_purpose)(relay_plugin_state *state, const char *purpose, relay_call *call,
	                                json_object **out, relay_error *err);
	json_object *(*doctor)(relay_plugin_state *state, relay_call *call);
} rk_machine_backend;

/* The first member of a plugin state that uses the front. */
typedef struct rk_machine {
	const relay_host *host;
	const rk_machine_backend *backend;
	/* Borrowed from the plugin's state, set by its init: its state folder
	 * and its endpoint (NULL: none), binding's "store" and "endpoint". */
	const char *store;
	const char *endpoint;
	/* The configuration's common members, owned, filled by
	 * rk_machine_config_read (relay_kit/machine_config.h); NULL until then. */
	char *state_dir;       /* "stateDir", also the store */
	char *leases_dir;      /* <stateDir>/leases */
	char *libexec_dir;     /* "libexecDir", may be NULL */
	char *default_network; /* "guestNetwork": nat | internet | allow */
} rk_machine;

relay_status rk_machine_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call,
                                unsigned flags, char **lease_json_out, relay_error *err);
relay_status rk_machine_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
                              relay_call *call, unsigned flags, char **lease_json_out, relay_error *err);
relay_status rk_machine_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                unsigned flags, char **lease_json_out, relay_error *err);
relay_status rk_machine_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                                relay_call *call, unsigned flags, relay_error *err);
relay_status rk_machine_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                         unsigned flags, char **check_name_out, relay_error *err);
relay_status rk_machine_images(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                               relay_error *err);
relay_status rk_machine_health(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                               relay_error *err);
relay_status rk_machine_catalog(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                                relay_error *err);
relay_status rk_machine_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                        unsigned flags, char **out, relay_error *err);
relay_status rk_machine_binding(relay_plugin_state *state, unsigned flags, char **out, relay_error *err);
relay_status rk_machine_doctor(relay_plugin_state *state, relay_call *call, unsigned flags, char **out,
                               relay_error *err);

/* The slots of relay_machine_ops the front serves, for a designated initialiser. */
#define RK_MACHINE_FRONT                                                                                     \
	.acquire = rk_machine_acquire, .renew = rk_machine_renew, .inspect = rk_machine_inspect,             \
	.release = rk_machine_release, .verify_destroyed = rk_machine_verify_destroyed,                      \
	.images = rk_machine_images, .health = rk_machine_health, .catalog = rk_machine_catalog,             \
	.find_by_purpose = rk_machine_find_by_purpose, .binding = rk_machine_binding,                        \
	.doctor = rk_machine_doctor

#endif
