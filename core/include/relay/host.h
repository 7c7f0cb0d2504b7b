/*
 * relay/host.h — the services the core lends to plugins.
 *
 * Plugins are opened RTLD_LOCAL and the core exports no symbols: everything a
 * plugin needs from the relay comes through this table, which init() receives
 * and which stays valid until fini() returns. All functions are thread-safe.
 *
 * Ownership words used in every comment of the ABI:
 *   borrowed          the callee may read it during the call only;
 *   owned by caller   the receiver must release it, with host->free unless
 *                     stated otherwise.
 *
 * Memory that crosses the boundary in either direction (a string a plugin
 * returns, a buffer the host returns) is allocated with host->alloc and
 * released with host->free, so core and plugin never mix allocators.
 *
 * JSON crosses the boundary as UTF-8 text (a NUL-terminated char *); no
 * json-c, curl, png or archive type appears in the ABI.
 */
#ifndef RELAY_HOST_H
#define RELAY_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "relay/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One MCP tool call in flight. Opaque; borrowed by every operation that
 * receives it, valid until that operation returns. May be NULL (a background
 * job such as renewal): then it is never cancelled and reports no progress. */
typedef struct relay_call relay_call;

typedef enum relay_log_level {
	RELAY_LOG_ERROR = 0,
	RELAY_LOG_WARNING = 1,
	RELAY_LOG_INFO = 2,
	RELAY_LOG_DEBUG = 3 /* written only when MCP_RELAY_DEBUG is set */
} relay_log_level;

/* ---- HTTP (libcurl inside the core) -------------------------------------- */

/* Flags of relay_host.http_request. */
#define RELAY_HTTP_ALLOW_REDIRECT 0x1u /* follow redirects; default is to fail with RELAY_E_PROTOCOL */

typedef struct relay_http_request {
	uint32_t struct_size;        /* sizeof(relay_http_request) */
	const char *method;          /* "GET" or "POST"; borrowed */
	const char *url;             /* absolute http URL; borrowed */
	const char *const *headers;  /* NULL-terminated "Name: value" lines, or NULL; borrowed */
	const char *body;            /* request body or NULL; sent with Content-Length; borrowed */
	size_t body_len;             /* bytes of body */
	uint32_t timeout_ms;         /* whole-request limit in milliseconds; 0 = 660000 */
	uint32_t connect_timeout_ms; /* 0 = min(timeout_ms, 10000) */
	size_t max_body_bytes;       /* cap on a 2xx body; larger is RELAY_E_TOO_LARGE; 0 = 4 MiB */
	size_t max_error_bytes;      /* bytes kept of a non-2xx body; 0 = 4096 */
} relay_http_request;

typedef struct relay_http_response {
	uint32_t struct_size; /* set by the caller to sizeof(relay_http_response) */
	long status;          /* HTTP status code; 0 when no answer arrived */
	char *body;           /* NUL-terminated body; owned by caller (host->free) */
	size_t body_len;      /* bytes of body, without the NUL */
	int answered;         /* 1 when a complete HTTP answer was received */
} relay_http_response;

/* ---- processes ----------------------------------------------------------- */

/* Flags of relay_host.process_run. */
#define RELAY_PROCESS_MERGE_OUTPUT 0x1u /* stderr goes into the stdout buffer, in arrival order */
#define RELAY_PROCESS_KEEP_TAIL    0x2u /* on overflow keep the last bytes instead of killing */
#define RELAY_PROCESS_NEW_SESSION  0x4u /* setsid() in the child (default: own process group only) */
/* Since ABI 1.2 (a 1.0 or 1.1 host refuses the bits with
 * RELAY_E_UNSUPPORTED_FLAGS: check RELAY_ABI_MINOR(host->abi_version) >= 2):
 * ENV_ADD     envp is added to the relay's environment, an entry whose key
 *             the environment has replacing it (default: envp replaces the
 *             whole environment);
 * SHARED_CAP  max_output_bytes caps stdout and stderr together (default:
 *             each captured stream has its own cap); with KEEP_TAIL the
 *             oldest stdout bytes go first, then the oldest stderr bytes.
 * RELAY_PROCESS_EXEC_RULES is both: exactly the rules of the transport's
 * exec() (relay/transport.h), for a transport that runs its guest's
 * commands with process_run. */
#define RELAY_PROCESS_ENV_ADD    0x8u
#define RELAY_PROCESS_SHARED_CAP 0x10u
#define RELAY_PROCESS_EXEC_RULES (RELAY_PROCESS_ENV_ADD | RELAY_PROCESS_SHARED_CAP)

typedef struct relay_process_request {
	uint32_t struct_size;    /* sizeof(relay_process_request) */
	const char *const *argv; /* NULL-terminated, argv[0] looked up on PATH; borrowed */
	const char *const *envp; /* NULL-terminated "K=V", or NULL to inherit the relay's
	                            environment unchanged; without RELAY_PROCESS_ENV_ADD it
	                            is the whole environment, with it entries added to the
	                            relay's; borrowed */
	const char *cwd;         /* working folder or NULL; borrowed */
	const void *stdin_data;  /* bytes written to the child's stdin, or NULL for /dev/null; borrowed */
	size_t stdin_len;        /* bytes of stdin_data */
	int stdin_fd;            /* used instead of stdin_data when >= 0 (borrowed, not closed) */
	int stdout_fd;           /* child's stdout goes to this fd when >= 0 (not captured) */
	uint64_t timeout_ms;     /* 0 = no limit; at expiry the process group gets SIGKILL */
	size_t max_output_bytes; /* cap per captured stream, or on both together with
	                            RELAY_PROCESS_SHARED_CAP; 0 = 65536. Past it the group is
	                            killed (unless KEEP_TAIL) and output_truncated set */
} relay_process_request;

typedef struct relay_process_result {
	uint32_t struct_size;      /* set by the caller to sizeof(relay_process_result) */
	int exit_code;             /* exit status, or -1 when killed by a signal or not started */
	int signal;                /* terminating signal number, 0 if none */
	int timed_out;             /* 1 when timeout_ms expired */
	int output_truncated;      /* 1 when output passed max_output_bytes */
	int termination_confirmed; /* 1 when no member of the process group survives */
	char *out;                 /* captured stdout (NUL-terminated); owned by caller (host->free) */
	size_t out_len;
	char *err; /* captured stderr, or NULL with MERGE_OUTPUT; owned by caller */
	size_t err_len;
} relay_process_result;

/* ---- archives ------------------------------------------------------------ */

/* Flags of relay_host.archive_write. */
#define RELAY_ARCHIVE_PRESENT 0x1u /* skip listed paths that do not exist instead of failing */

/* ---- the table ----------------------------------------------------------- */

typedef struct relay_host {
	uint32_t abi_version; /* RELAY_ABI_VERSION of the core */
	uint32_t struct_size; /* sizeof(relay_host) of the core; check before using late fields */

	/* Writes one line "mcp-relay: <plugin>: <message>" to standard error.
	 * `plugin` and `fmt` are borrowed. Never writes to standard output. */
	void (*log)(relay_log_level level, const char *plugin, const char *fmt, ...)
	    __attribute__((format(printf, 3, 4)));

	/* Allocation shared by core and plugins. alloc() returns NULL on
	 * failure; free(NULL) is a no-op. strdup() returns an owned copy or NULL. */
	void *(*alloc)(size_t bytes);
	void (*free)(void *ptr);
	char *(*strdup)(const char *text);

	/* Fills `err` (may be NULL) and returns `code`, for one-line failures:
	 *     return host->error_set(err, RELAY_E_IO, errno, "cannot open %s", p); */
	relay_status (*error_set)(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
	    __attribute__((format(printf, 4, 5)));

	/* The relay's clock, in milliseconds since the Unix epoch. Tests drive
	 * it; plugins that keep lease deadlines must read time here. */
	int64_t (*now_ms)(void);

	/* 1 when the call was cancelled (notifications/cancelled or session
	 * end); operations check it at safe points and return RELAY_E_CANCELLED.
	 * `call` may be NULL (never cancelled). */
	int (*call_cancelled)(const relay_call *call);
	/* Reports progress of the call to the MCP client (rate-limited by the
	 * core). `progress` must grow; `total` < 0 means unknown; `message`
	 * (borrowed, may be NULL) is one plain sentence. No-op for NULL call. */
	void (*call_progress)(relay_call *call, double progress, double total, const char *message);

	/* One HTTP request through libcurl. Fills `resp` (bodies owned by the
	 * caller). Returns RELAY_OK whenever a complete answer arrived, whatever
	 * its status code; RELAY_E_TIMEOUT, RELAY_E_TRANSIENT (connection failed
	 * or reset), RELAY_E_TOO_LARGE, RELAY_E_PROTOCOL (a redirect without
	 * RELAY_HTTP_ALLOW_REDIRECT), RELAY_E_CANCELLED otherwise. */
	relay_status (*http_request)(const relay_http_request *req, relay_call *call, unsigned flags,
	                             relay_http_response *resp, relay_error *err);

	/* SHA-256 of a buffer as 64 lowercase hex digits plus NUL in hex_out. */
	void (*sha256_buffer)(const void *data, size_t len, char hex_out[65]);
	/* SHA-256 and size of a regular file (opened O_NOFOLLOW; a symbolic
	 * link or special file is RELAY_E_UNSAFE_PATH). `path` borrowed. */
	relay_status (*sha256_file)(const char *path, unsigned flags, char hex_out[65], uint64_t *bytes_out,
	                            relay_error *err);

	/* Runs a program to completion: its own process group, stdin from
	 * stdin_data / stdin_fd / /dev/null, stdout and stderr captured (never
	 * the relay's own stdout), a timeout that kills the whole group, and a
	 * check that the group is gone. Returns RELAY_OK when the program ran
	 * (whatever its exit code; read `res`), RELAY_E_NOT_FOUND when argv[0]
	 * cannot be executed, RELAY_E_CANCELLED when the call was cancelled (the
	 * group is killed). `req` is read by its struct_size and `res` written
	 * within its struct_size (relay/plugin.h R4, R5). `res` buffers are owned
	 * by the caller and, after a failure, NULL or owned too: free them
	 * whatever the status. Environment and caps: see envp and
	 * max_output_bytes; RELAY_PROCESS_EXEC_RULES gives the exec() rules. */
	relay_status (*process_run)(const relay_process_request *req, relay_call *call, unsigned flags,
	                            relay_process_result *res, relay_error *err);

	/* Writes an evidence archive (docs/evidence-format.md: uncompressed
	 * POSIX tar whose first member .relay-index.json lists {path, bytes,
	 * sha256} of every member) to `archive_path` (created O_EXCL, 0600) from
	 * the regular files `rel_paths` (NULL-terminated, relative, no "..")
	 * under `base_dir`. Symbolic links and special files are refused
	 * (RELAY_E_UNSAFE_PATH). With RELAY_ARCHIVE_PRESENT missing files are
	 * skipped. On success *index_json_out (owned by caller, may be NULL to
	 * skip) is the index array. */
	relay_status (*archive_write)(const char *archive_path, const char *base_dir,
	                              const char *const *rel_paths, unsigned flags, char **index_json_out,
	                              relay_error *err);

	/* Unpacks an evidence archive written by an untrusted peer into
	 * `dest_dir` (an existing folder). Refuses absolute names, "..", links,
	 * devices, FIFOs, duplicate names, any entry not in the archive's index
	 * or whose size or SHA-256 differs from it, and, when `expected_json`
	 * (borrowed, a JSON array of {path, bytes, sha256}, may be NULL) is
	 * given, any entry not listed there or differing from it. Files are
	 * created O_EXCL | O_NOFOLLOW, 0600, folders 0700; nothing is written
	 * outside dest_dir. On failure every file this call created is removed.
	 * On success *facts_json_out (owned by caller, may be NULL to skip) is
	 * the array of {path, bytes, sha256} written. */
	relay_status (*archive_extract)(const char *archive_path, const char *dest_dir,
	                                const char *expected_json, unsigned flags, char **facts_json_out,
	                                relay_error *err);

	/* Fills `out` with `len` cryptographically random bytes. */
	relay_status (*random_bytes)(void *out, size_t len, relay_error *err);

	/* ABI 1.5 (check RELAY_ABI_MINOR(abi_version) >= 5 and struct_size
	 * before calling). A machine plugin says that lease `vm` (borrowed: the
	 * lease document's "vm") changed at the backend on its own, between the
	 * core's requests — its guest lost with its node, say. The core then
	 * inspects the lease in the guest's queue (relay_machine_ops.inspect;
	 * never from within this call) and records what inspect answers, so a
	 * lost guest is seen without waiting for the next renewal beat. Returns
	 * at once; callable from any thread the plugin owns, with none of the
	 * plugin's locks that its inspect takes held. A vm the core does not
	 * hold is ignored. `flags` must be 0. */
	void (*lease_changed)(const char *vm, unsigned flags);

	/* Since ABI 1.6 (check RELAY_SIZED_HAS(host, remove_tree) first). */

	/* Removes `path` (borrowed): a file, a link or a whole folder tree,
	 * never following a link (a link is removed, never what it points
	 * to); a missing path is RELAY_OK. On failure it goes on removing what
	 * it can and reports the first failure (RELAY_E_IO naming the path).
	 * No flags are defined. */
	relay_status (*remove_tree)(const char *path, unsigned flags, relay_error *err);
	/* Replaces the file `path` (borrowed) whole with `len` bytes of `data`:
	 * a reader sees the old contents or the new, never a part, and the new
	 * survive a crash of the machine (temporary file, fsync, rename, fsync
	 * of the folder). The file is 0600. No flags are defined. */
	relay_status (*write_durable)(const char *path, const void *data, size_t len, unsigned flags,
	                              relay_error *err);
} relay_host;

#ifdef __cplusplus
}
#endif

#endif /* RELAY_HOST_H */
