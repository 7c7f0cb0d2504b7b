/*
 * ssh_conn.h — transfer-ssh's plugin state, one connection per guest, the
 * OpenSSH client command lines, and how ssh's failures map to relay_status.
 *
 * Every ssh started by the plugin gets the same options (docs/transfer-ssh.md
 * lists them): no configuration file, BatchMode, strict host key checking
 * against the lease's knownHostsFile only, the lease's identity file only,
 * no agent, no X11 or port forwarding, no pty, and connection multiplexing
 * through a control socket under the plugin's state folder.
 */
#ifndef TRANSFER_SSH_CONN_H
#define TRANSFER_SSH_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/host.h"

#define SSH_PLUGIN_NAME "transfer-ssh"

typedef struct ssh_plugin {
	const relay_host *host;     /* borrowed from init() */
	char *socket_dir;           /* folder of control sockets; owned */
	bool socket_dir_owned;      /* created under /tmp by us: removed at fini */
	char *ssh_program;          /* "ssh" or the "ssh" option; owned */
	unsigned connect_timeout_s; /* ConnectTimeout */
	unsigned control_persist_s; /* ControlPersist: idle seconds a master stays */
	unsigned spare_sessions;    /* warm sessions kept per connection (ssh_session.h) */
} ssh_plugin;

struct ssh_spares;

/* One guest. Immutable after open, so operations may share it across
 * threads (RELAY_TRANSPORT_CONCURRENT); the warm sessions it points to
 * have a lock of their own. */
typedef struct ssh_conn {
	ssh_plugin *plugin;
	char *host;             /* owned */
	char *user;             /* owned */
	char *identity_file;    /* owned */
	char *known_hosts_file; /* owned */
	unsigned port;
	char *control_path;        /* owned */
	struct ssh_spares *spares; /* warm sessions (ssh_session.h); owned */
} ssh_conn;

/* How ssh is started. */
typedef enum ssh_mode {
	SSH_MODE_MASTER,  /* ssh -M -N -f: authenticate, then keep the master in the background */
	SSH_MODE_SESSION, /* run a remote command through the master (started again if gone) */
	SSH_MODE_EXIT     /* ssh -O exit: stop the master */
} ssh_mode;

/* Reads the init config ({"stateDir", "options": {"ssh", "connectTimeoutSeconds",
 * "controlPersistSeconds", "spareSessions"}}) and prepares the socket folder. */
relay_status ssh_plugin_create(const relay_host *host, const char *config_json, ssh_plugin **out,
                               relay_error *err);
void ssh_plugin_destroy(ssh_plugin *plugin);

/* Builds a connection from the lease document's "ssh" object (no network
 * yet). RELAY_E_UNSUPPORTED when the lease has no "ssh" object,
 * RELAY_E_INVALID_ARGUMENT naming a missing or unusable field. */
relay_status ssh_conn_from_lease(ssh_plugin *plugin, const char *lease_json, ssh_conn **out,
                                 relay_error *err);
void ssh_conn_free(ssh_conn *conn);

/* The argv (NULL-terminated, malloc'd, free with ssh_argv_free) for one ssh
 * run; `remote_command` is the single command string for SESSION mode. */
char **ssh_argv(const ssh_conn *conn, ssh_mode mode, const char *remote_command);
void ssh_argv_free(char **argv);

/* `exec /bin/sh -c '<parts joined>' relay-ssh '<arg>'...` (malloc'd);
 * `script` is a NULL-terminated list of parts (ssh_scripts.h). */
char *ssh_script_command(const char *const *script, const char *const *args);

/* Runs a guest script to completion through host->process_run (no stdin).
 * Fills `res` (buffers owned by the caller: host->free). Returns what
 * process_run returns. */
relay_status ssh_run_script(const ssh_conn *conn, const char *const *script, const char *const *args,
                            uint64_t timeout_ms, size_t max_output_bytes, relay_call *call,
                            relay_process_result *res, relay_error *err);

/* True when the first `len` bytes of `text` (may be NULL when len is 0)
 * hold `needle`; for ssh's standard error, which is not NUL-terminated. */
bool ssh_text_contains(const char *text, size_t len, const char *needle);

/* Maps a failed ssh run to a status and message. `what` names the
 * operation ("opening the connection", "pushing X"). `exit_code` is ssh's
 * (255: ssh itself failed; 2..5: a transfer script's codes). `err_text`
 * is ssh's standard error (may hold guest chatter; only ssh's own and the
 * scripts' "relay-ssh:" lines are quoted). */
relay_status ssh_failure(const ssh_conn *conn, const char *what, int exit_code, const char *err_text,
                         size_t err_len, relay_error *err);

/* Starts the master connection (ssh -M -N -f) and waits until it is up. */
relay_status ssh_master_start(const ssh_conn *conn, relay_call *call, relay_error *err);
/* Stops the master (ssh -O exit) and removes its socket. */
void ssh_master_stop(const ssh_conn *conn);

/* A fresh random token of 32 lowercase hex digits (plus NUL). */
relay_status ssh_token(const relay_host *host, char out[33], relay_error *err);

#endif
