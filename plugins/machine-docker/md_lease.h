/*
 * md_lease.h — what the lease modules of machine-docker share (internal:
 * md_record.c, md_engine.c, md_swarm.c, md_bake.c, md_lease.c,
 * md_release.c). The entry points the plugin calls are in md.h.
 */
#ifndef MACHINE_DOCKER_MD_LEASE_H
#define MACHINE_DOCKER_MD_LEASE_H

#include "md.h"

#define MD_CREATE_TIMEOUT_MS 120000u

/* ---- md_record.c: records, owner, the lease document ------------------------- */

/* A purpose/vm name: [A-Za-z0-9][A-Za-z0-9._-]*, at most 120 bytes. */
bool md_valid_name(const char *s);
/* <leases>/<vm>.json (owned) or NULL with *errno_out (may be NULL). */
json_object *md_record_read(md_state *st, const char *vm, int *errno_out);
/* Durable write of the record named by its "vm": 0 or an errno. */
int md_record_write(md_state *st, json_object *rec);
void md_record_remove(md_state *st, const char *vm);
/* The flock of <vm>.lock (a descriptor to close), or -1. */
int md_record_lock(md_state *st, const char *vm);
/* Makes this relay the record's owner. */
void md_set_owner(md_state *st, json_object *rec);
/* True when the relay named as the record's owner still runs. */
bool md_owner_alive(md_state *st, json_object *rec);
/* The name or id the container API knows the guest's container by (borrowed). */
const char *md_container_of(json_object *rec);
bool md_is_service(json_object *rec);
/* The lease document (relay/machine.h) of a record, with `state` (owned). */
json_object *md_document(md_state *st, json_object *rec, const char *state);

/* ---- md_engine.c: small engine requests ----------------------------------------- */

/* MD_API_PREFIX/containers/<vm><suffix> (malloc'd, 1024 bytes) or NULL. */
char *md_container_path(const char *vm, const char *suffix);
/* md_api on md_container_path(vm, suffix), with no upload or download:
 * md_api's status, or RELAY_E_NO_MEMORY when the path cannot be made. */
relay_status md_container_api(md_state *st, const char *method, const char *vm, const char *suffix,
                              json_object *body, uint32_t timeout_ms, relay_call *call, md_reply *reply,
                              relay_error *err);
/* GET /containers/{vm}/json: 1 found (*out owned), 0 gone, -1 cannot tell. */
int md_container_get(md_state *st, const char *vm, relay_call *call, json_object **out);
bool md_container_running(json_object *info);
/* An io.mcp-relay.<name> label of an inspect answer (borrowed) or NULL. */
const char *md_label_of(json_object *info, const char *name);

typedef struct md_put_entry {
	const char *name;
	bool dir;
	const void *data;
	size_t len;
	unsigned mode;
	uid_t uid;
	gid_t gid;
} md_put_entry;

/* Puts small entries into folder `dir` of the container (one archive PUT). */
relay_status md_put_entries(md_state *st, const char *container, const char *dir, const md_put_entry *entries,
                            size_t count, relay_call *call, relay_error *err);
/* "<expiresAtMs> <graceMs> <backstopMs>\n" of a record; its length. */
int md_expires_text(md_state *st, json_object *rec, char *out, size_t size);
/* The backstop's arguments of a record: `init <expires> <grace> <backstop>`. */
typedef struct md_backstop_text {
	char expires[32], grace[32], backstop[32];
} md_backstop_text;
void md_backstop_args(md_state *st, json_object *rec, md_backstop_text *out);
/* DELETE with force and its anonymous volumes: 1 removed or gone, 0 refused, -1 unknown. */
int md_container_remove(md_state *st, const char *vm, relay_call *call, relay_error *err);
/* The image present on the engine, pulled (as progress) when it is not. */
relay_status md_ensure_image(md_state *st, const md_image *im, relay_call *call, relay_error *err);
json_object *md_str_array(const char *const *items);
void md_add_label(json_object *labels, const char *name, const char *value);
/* The io.mcp-relay.* labels of a lease (plugin, store, owner, session, ...). */
void md_make_labels(md_state *st, json_object *rec, const md_image *im, json_object *labels);
json_object *md_ulimits_json(md_state *st);

/* ---- md_swarm.c ------------------------------------------------------------------ */

/* True when the endpoint is a Swarm manager (asked once per relay, with
 * the engine's DefaultRuntime kept in st->default_runtime). */
bool md_swarm_manager(md_state *st, relay_call *call);
/* The lease's internal overlay network and a one-replica service on it,
 * then its task's container. *keep_record when the outcome may have
 * taken effect. */
relay_status md_create_service(md_state *st, json_object *rec, const md_image *im, const char *image_ref,
                               const char *user, relay_call *call, bool *keep_record, relay_error *err);

/* Whether a service record's task still runs where it was placed: 1 yes,
 * 0 lost (`why` gives Swarm's task state, the node's state, or the other
 * task Swarm started), -1 the manager cannot tell. 1 for a plain container. */
int md_swarm_task_check(md_state *st, json_object *rec, relay_call *call, char *why, size_t why_size);

/* ---- md_bake.c ------------------------------------------------------------------- */

typedef struct md_baked {
	char ref[160]; /* the derived image to create guests from */
	bool xvfb;     /* it has /usr/bin/Xvfb */
	bool x11vnc;   /* it has /usr/bin/x11vnc */
} md_baked;

/* The derived image of `im` with the guest program in it, made when
 * missing (the base pulled first when the engine lacks it); `refresh`
 * asks the engine again instead of trusting what this relay knows. */
relay_status md_bake(md_state *st, const md_image *im, bool refresh, relay_call *call, md_baked *out,
                     relay_error *err);

/* ---- md_release.c ----------------------------------------------------------------- */

/* Removes what a record describes (container, or service + task + network):
 * 1 removed or gone, 0 refused (err filled), -1 unknown. */
int md_remove_guest(md_state *st, json_object *rec, relay_call *call, relay_error *err);

#endif
