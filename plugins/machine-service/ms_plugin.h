/*
 * ms_plugin.h — the machine-service plugin's state, shared by its modules.
 *
 * One shared object provides two kinds (spec/machine-service.md):
 *   machine    lease, renew, inspect, release and verify guests; images, the
 *              application catalog, find-by-purpose, the binding, the
 *              typed console and doctor checks (ms_lease.c,
 *              ms_inventory.c, ms_console.c, ms_doctor.c);
 *   transport  exec, push and pull through the service's own routes
 *              (ms_transport.c), used whenever a lease carries no SSH
 *              endpoint.
 * ms_http.c speaks HTTP through host->http_request and checks the service's
 * identity.
 *
 * Threads: every operation may run concurrently. The state is read-only
 * after init() except `boot_refusals`, which `lock` guards.
 */
#ifndef MS_PLUGIN_H
#define MS_PLUGIN_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "relay/console.h"
#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay/transport.h"

#define MS_PLUGIN_NAME    "machine-service"
#define MS_PLUGIN_VERSION "0.1.0"

/* Request limits of spec/machine-service.md §1 and §10. */
#define MS_DEFAULT_TIMEOUT_MS         660000u
#define MS_ACQUIRE_TIMEOUT_MS         3600000u
#define MS_LOOKUP_TIMEOUT_MS          10000u /* health before an operation, listing, inspect, heartbeat */
#define MS_GONE_TIMEOUT_MS            5000u  /* GET /machines/<vm> as the service destruction check */
#define MS_RELEASE_TIMEOUT_MS         120000u
#define MS_CONSOLE_RESOLVE_TIMEOUT_MS 10000u
#define MS_CONSOLE_CHANGE_TIMEOUT_MS  30000u
#define MS_EXEC_MARGIN_MS             30000u
#define MS_TART_TIMEOUT_MS            15000u
#define MS_MAX_BODY_BYTES             ((size_t)4 << 20)
#define MS_MAX_ERROR_BYTES            4096u
#define MS_TRANSFER_ATTEMPTS          3

typedef enum ms_destruction_check { MS_CHECK_SERVICE = 0, MS_CHECK_TART = 1 } ms_destruction_check;

/* The options of spec/machine-service.md §11 (config "options"). */
typedef struct ms_options {
	char route_prefix[128];       /* "/machines" */
	char list_key[64];            /* "machines" */
	char name_field[16];          /* "vm" */
	char service_name[128];       /* "machine-service" */
	char acquire_path[128];       /* "/acquire" */
	char fingerprint_header[128]; /* "X-VM-Environment-Fingerprint" */
	int64_t max_exec_timeout_s;   /* 4200 */
	ms_destruction_check destruction_check;
	bool destruction_check_given; /* set explicitly in the options */
	char ssh_field[64];           /* "ssh" */
} ms_options;

/* A boot refusal seen for a purpose (§3.5): the next acquisition for it
 * waits until GET /images shows the image acquirable. */
typedef struct ms_boot_refusal {
	char *purpose;
	char *image;
	char *reason;
	struct ms_boot_refusal *next;
} ms_boot_refusal;
/* Frees one refusal and its strings (NULL strings allowed), not its next. */
void ms_boot_refusal_free(ms_boot_refusal *b);

typedef struct ms_state {
	const relay_host *host; /* borrowed until fini */
	char *origin;           /* canonical http://host[:port], no trailing slash */
	char *state_dir;        /* the plugin's own folder */
	char *transfer_tmp;     /* <state_dir>/transfer-tmp: fresh 0700 folders for pulls */
	ms_options opt;

	/* The selected environment (NULL / "" when none). */
	json_object *identity; /* {id, fingerprint, vmServiceUrl, ...} */
	char fingerprint[65];
	char fingerprint_line[256]; /* "<header>: <fingerprint>" */

	/* Subprocess settings (the exported bundle of §7.7). */
	char **bundle;      /* "K=V" lines, NULL-terminated; may be NULL */
	char *tart_path;    /* resolved Tart binary, or NULL */
	char *tart_home;    /* the Tart store */
	char *machctl_path; /* MACHCTL from the bundle, or NULL */

	pthread_mutex_t lock; /* guards boot_refusals */
	ms_boot_refusal *boot_refusals;
} ms_state;

/* The refusal of flags an operation does not know: RELAY_E_UNSUPPORTED_FLAGS,
 * "machine-service: unknown <op> flags 0x<unknown>" (ms_plugin.c). */
relay_status ms_unknown_flags(const relay_host *host, const char *op, unsigned unknown, relay_error *err);

/* The ops of each kind (defined in their modules). */
relay_status ms_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call, unsigned flags,
                        char **lease_json_out, relay_error *err);
relay_status ms_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms, relay_call *call,
                      unsigned flags, char **lease_json_out, relay_error *err);
relay_status ms_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call, unsigned flags,
                        char **lease_json_out, relay_error *err);
relay_status ms_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                        relay_call *call, unsigned flags, relay_error *err);
relay_status ms_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                 unsigned flags, char **check_name_out, relay_error *err);
relay_status ms_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                unsigned flags, char **leases_json_out, relay_error *err);
relay_status ms_images(relay_plugin_state *state, relay_call *call, unsigned flags, char **images_json_out,
                       relay_error *err);
relay_status ms_catalog(relay_plugin_state *state, relay_call *call, unsigned flags, char **catalog_json_out,
                        relay_error *err);
relay_status ms_health_op(relay_plugin_state *state, relay_call *call, unsigned flags, char **health_json_out,
                          relay_error *err);
relay_status ms_binding(relay_plugin_state *state, unsigned flags, char **binding_json_out, relay_error *err);
/* The typed console (ms_console.c, ABI 1.7). */
extern const relay_machine_console_ops ms_console_ops;
relay_status ms_doctor(relay_plugin_state *state, relay_call *call, unsigned flags, char **checks_json_out,
                       relay_error *err);

relay_status ms_transport_open(relay_plugin_state *state, const char *lease_json, relay_call *call,
                               unsigned flags, relay_transport_conn **conn_out, relay_error *err);
void ms_transport_close(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags);
relay_status ms_transport_exec(relay_plugin_state *state, relay_transport_conn *conn,
                               const relay_exec_request *req, relay_call *call, unsigned flags,
                               relay_exec_result *res, relay_error *err);
relay_status ms_transport_push(relay_plugin_state *state, relay_transport_conn *conn, const char *local_path,
                               const char *remote_path, relay_call *call, unsigned flags,
                               char **facts_json_out, relay_error *err);
relay_status ms_transport_pull(relay_plugin_state *state, relay_transport_conn *conn, const char *remote_path,
                               const char *local_path, relay_call *call, unsigned flags,
                               char **facts_json_out, relay_error *err);

#endif
