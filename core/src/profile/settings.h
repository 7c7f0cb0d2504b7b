/*
 * profile/settings.h — every MCP_RELAY_* setting (spec/lifecycle.md §14), read
 * once at startup, validated, never re-read.
 */
#ifndef RELAY_PROFILE_SETTINGS_H
#define RELAY_PROFILE_SETTINGS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum guest_network {
	GUEST_NETWORK_NAT = 0,
	GUEST_NETWORK_INTERNET = 1,
	GUEST_NETWORK_ALLOW = 2, /* MCP_RELAY_EGRESS_ALLOW only (docs/egress.md) */
} guest_network;
typedef enum on_exit_mode { ON_EXIT_PAUSE = 0, ON_EXIT_RELEASE = 1 } on_exit_mode;

/* Where the session identity came from (spec/lifecycle.md §2). */
typedef enum session_source {
	SESSION_FROM_SETTING = 0, /* MCP_RELAY_SESSION */
	SESSION_FROM_PROJECT = 1, /* "project-" + 32 hex of SHA-256(the project's real path) */
	SESSION_FRESH = 2,        /* a random UUID: another live process holds the project's */
} session_source;

struct relay_environment; /* profile/environment.h */

typedef struct relay_settings {
	char *project;                        /* P': the real path of the project folder */
	char *project_given;                  /* P as resolved before realpath (for path rules) */
	char *session_id;                     /* see session_source */
	bool session_id_stable;               /* true unless the identity is a fresh UUID */
	char session_key[33];                 /* first 32 hex of SHA-256(session_id) */
	char *backend;                        /* "local", "machine-service" or an absolute .so path */
	char *service_url;                    /* canonical origin, e.g. http://localhost:6240 */
	json_object *machine_service_options; /* parsed MCP_RELAY_MACHINE_SERVICE_OPTIONS or NULL */
	json_object *local_options; /* parsed MCP_RELAY_LOCAL_OPTIONS (machine-local's options) or NULL */
	json_object *transfer_ssh_options; /* parsed MCP_RELAY_TRANSFER_SSH_OPTIONS or NULL */
	json_object *docker_options; /* parsed MCP_RELAY_DOCKER_OPTIONS (machine-docker's options) or NULL */
	guest_network guest_network;
	char *egress_allow; /* MCP_RELAY_EGRESS_ALLOW as given (validated), "" when unset */
	on_exit_mode on_exit;
	int64_t capacity_wait_s;               /* 0..86400 */
	int max_guests;                        /* 1..64 */
	char *state_root;                      /* absolute, created 0700 */
	char *session_dir;                     /* <state_root>/<session_key> */
	char *registry_path;                   /* MCP_RELAY_REGISTRY, or NULL for the automatic choice */
	int64_t shutdown_grace_ms;             /* 0..3600000 */
	struct relay_environment *environment; /* selected profile or NULL */
	session_source session_source;
	char *session_note; /* why the identity is fresh (SESSION_FRESH), else NULL */
	/* MCP_RELAY_RECORD=video: frames per second of each run's screen
	 * recording (MCP_RELAY_RECORD_FPS, default 8); 0 when off */
	int record_video_fps;
} relay_settings;

/* Reads and validates every setting. On failure returns -1 and writes
 * "<NAME> <problem>" into errbuf (the caller prints "mcp-relay: " + it and
 * exits 2). Creates the state root (0700) when missing; creates nothing
 * else. */
int settings_load(relay_settings *out, char *errbuf, size_t errlen);
void settings_free(relay_settings *settings);

/* Replaces a project identity held by another live process (pid `holder`)
 * with a fresh random one (spec/lifecycle.md §2): session_id, session_key and
 * session_dir change, session_source becomes SESSION_FRESH and session_note
 * says why. -1 when out of memory (the settings are unchanged). */
int settings_use_fresh_identity(relay_settings *settings, long holder);

/* The name of the session identity's origin: "setting", "project" or "fresh". */
const char *settings_session_source_name(session_source source);

/* The text a host shows for an invalid setting (spec/lifecycle.md §14): the
 * variable, the problem (`problem` as settings_load wrote it, "<NAME>
 * <problem>") and the fix, in one paragraph. */
void settings_problem_text(const char *problem, char *out, size_t out_len);

/* Just the fix for `problem` (as settings_load wrote it), one sentence. */
const char *settings_problem_fix(const char *problem);

/* Validates an MCP_RELAY_URL-style origin; on success writes the canonical
 * form (no trailing slash) to canonical_out. */
bool settings_valid_loopback_origin(const char *url, char *canonical_out, size_t out_len,
                                    const char **why_out);

/* The names of guest_network / on_exit values. */
const char *settings_guest_network_name(guest_network network);
const char *settings_on_exit_name(on_exit_mode mode);

#endif
