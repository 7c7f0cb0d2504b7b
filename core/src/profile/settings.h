/*
 * profile/settings.h — every MCP_RELAY_* setting (lifecycle.md §14), read
 * once at startup, validated, never re-read.
 */
#ifndef RELAY_PROFILE_SETTINGS_H
#define RELAY_PROFILE_SETTINGS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum guest_network { GUEST_NETWORK_NAT = 0, GUEST_NETWORK_INTERNET = 1 } guest_network;
typedef enum on_exit_mode { ON_EXIT_PAUSE = 0, ON_EXIT_RELEASE = 1 } on_exit_mode;

struct relay_environment; /* profile/environment.h */

typedef struct relay_settings {
	char *project;                        /* P': the real path of the project folder */
	char *project_given;                  /* P as resolved before realpath (for path rules) */
	char *session_id;                     /* MCP_RELAY_SESSION or a fresh UUID */
	bool session_id_stable;               /* true when MCP_RELAY_SESSION was set */
	char session_key[33];                 /* first 32 hex of SHA-256(session_id) */
	char *backend;                        /* "local", "machine-service" or an absolute .so path */
	char *service_url;                    /* canonical origin, e.g. http://localhost:6240 */
	json_object *machine_service_options; /* parsed MCP_RELAY_MACHINE_SERVICE_OPTIONS or NULL */
	json_object *local_options; /* parsed MCP_RELAY_LOCAL_OPTIONS (machine-local's options) or NULL */
	json_object *transfer_ssh_options; /* parsed MCP_RELAY_TRANSFER_SSH_OPTIONS or NULL */
	json_object *docker_options; /* parsed MCP_RELAY_DOCKER_OPTIONS (machine-docker's options) or NULL */
	guest_network guest_network;
	on_exit_mode on_exit;
	int64_t capacity_wait_s;               /* 0..86400 */
	int max_guests;                        /* 1..64 */
	char *state_root;                      /* absolute, created 0700 */
	char *session_dir;                     /* <state_root>/<session_key> */
	char *registry_path;                   /* MCP_RELAY_REGISTRY, or NULL for the automatic choice */
	int64_t shutdown_grace_ms;             /* 0..3600000 */
	struct relay_environment *environment; /* selected profile or NULL */
} relay_settings;

/* Reads and validates every setting. On failure returns -1 and writes
 * "<NAME> <problem>" into errbuf (the caller prints "mcp-relay: " + it and
 * exits 2). Creates the state root (0700) when missing; creates nothing
 * else. */
int settings_load(relay_settings *out, char *errbuf, size_t errlen);
void settings_free(relay_settings *settings);

/* Validates an MCP_RELAY_URL-style origin; on success writes the canonical
 * form (no trailing slash) to canonical_out. */
bool settings_valid_loopback_origin(const char *url, char *canonical_out, size_t out_len,
                                    const char **why_out);

/* The names of guest_network / on_exit values. */
const char *settings_guest_network_name(guest_network network);
const char *settings_on_exit_name(on_exit_mode mode);

#endif
