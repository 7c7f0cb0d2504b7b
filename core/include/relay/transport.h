/*
 * relay/transport.h — the transport kind: run commands in a guest and move
 * files and trees in and out of it, with SHA-256 verification.
 *
 * Shipped implementations: transfer-ssh (OpenSSH with connection
 * multiplexing and tar streams), the namespace transport inside
 * machine-local, and the service-mediated transport inside machine-service.
 *
 * A connection is opened per guest from its lease document (relay/machine.h)
 * and closed when the guest is closed or the relay exits. Operations on one
 * connection may be called from several threads at once when the ops table
 * sets RELAY_TRANSPORT_CONCURRENT in `traits` (the core then runs
 * `receiver cancel` beside a running script); otherwise the core serialises
 * them.
 *
 * PATHS. Guest paths are absolute ("/" first; a relative path or one with a
 * ".." component is RELAY_E_INVALID_ARGUMENT or RELAY_E_UNSAFE_PATH, and
 * nothing is done). The transport refuses to write outside the folder it
 * was asked to write into and never follows a symbolic link out of the
 * guest when pulling (RELAY_E_UNSAFE_PATH).
 *
 * THE GUEST ROOT. The core keeps everything it puts in a guest under one
 * folder R = /var/tmp/<UTC stamp>-mcp-relay-<purpose> (the lease's purpose,
 * relay/machine.h; the tool results call it guestRoot). So a guest must give
 * its user:
 *   - a writable /var/tmp, where R is made with `/bin/mkdir -p -m 0700 R`
 *     through exec() (and later folders below R by the receiver);
 *   - /bin/sh, /bin/mkdir, /bin/rm, `uname -sm`, and the permission to run a
 *     file the core pushed there (R/receiver, chmod 0700): noexec /var/tmp
 *     is not a guest;
 *   - push() into R and its subfolders, pull() from them, exec() with cwd R
 *     or NULL; files pushed keep their bytes exactly (the receiver checks
 *     their SHA-256).
 * The core never writes outside R; a transport may refuse writes outside R
 * (and the guest user's home) with RELAY_E_UNSAFE_PATH. Release removes R
 * with the guest: a backend whose guest folders outlive the lease (a guest
 * that is a folder of this host, plugins/reference-machine/) removes every
 * /var/tmp/<stamp>-mcp-relay-<purpose> of the lease itself in release().
 *
 * FACTS. push() and pull() can return what arrived as a JSON array (UTF-8,
 * owned by caller, free with host->free) of {"path", "bytes", "sha256"}:
 * `path` relative to the transferred root ("" for a single file), `bytes` an
 * integer, `sha256` 64 lowercase hex digits, sorted by path in byte order.
 * For push the facts are computed on the guest side after writing; for pull
 * on the guest side before sending, and the transport has already checked
 * the local copy against them (a difference is RELAY_E_INTEGRITY). A
 * transport that cannot compute guest-side facts returns NULL and the core
 * verifies through the guest receiver instead.
 */
#ifndef RELAY_TRANSPORT_H
#define RELAY_TRANSPORT_H

#include <stdint.h>

#include "relay/host.h"
#include "relay/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque per-guest connection of a transport. */
typedef void relay_transport_conn;
/* Opaque long-lived byte stream to one guest command (ABI 1.4). */
typedef void relay_transport_stream;

/* Bits of relay_transport_ops.traits. */
#define RELAY_TRANSPORT_CONCURRENT  0x1u /* exec/push/pull may run concurrently on one conn */
#define RELAY_TRANSPORT_GUEST_FACTS 0x2u /* push/pull return guest-side facts */
/* Since ABI 1.1: exec() sends relay_exec_request.stdin_data on the command's
 * standard input (then end of file) and returns its standard output as bytes,
 * exactly as written (NUL bytes included, never merged with stderr, never
 * re-encoded), capped by max_stdout_bytes instead of max_output_bytes. The
 * core sets the stdin fields and RELAY_EXEC_STDIO_BYTES only for a transport
 * with this trait; a 1.0 plugin never sees them (it copies the request by
 * its own size). spec/guest.md §16.2: a run in one round trip. */
#define RELAY_TRANSPORT_STDIO_BYTES 0x4u
/* Since ABI 1.2, a statement only: this transport cannot keep standard error
 * apart. Without RELAY_EXEC_MERGE_OUTPUT res->out holds both streams as the
 * guest side joined them and res->err is empty (machine-service: the
 * service's exec answers one "output"). The core reads receiver frames from
 * standard output either way; plugin-test checks the joined output. */
#define RELAY_TRANSPORT_MERGED_OUTPUT 0x8u
/* Since ABI 1.4: stream_open/stream_write/stream_read/stream_close (below)
 * keep one guest command running with a long-lived byte stream: bytes
 * written go to its standard input, bytes read come from its standard
 * output, exactly as sent, until either side closes. The core sets nothing
 * new for a transport without it (a 1.0-1.3 ops table is shorter, so the
 * four slots read as NULL). spec/guest.md §17: the resident receiver. */
#define RELAY_TRANSPORT_STREAM 0x10u
/* A statement only (any ABI version; a core that does not know the bit
 * ignores it): this transport cannot stop a running command when its call
 * is cancelled. exec() still answers RELAY_E_CANCELLED promptly, but the
 * command may run on to its end in the guest (machine-service: the
 * service's POST /machines/<vm>/exec has no cancellation; dropping the
 * request leaves the command running). plugin-test check 60 names it. */
#define RELAY_TRANSPORT_EXEC_UNCANCELLABLE 0x20u

/* Flags of exec(). The rules without flags, the same as host->process_run
 * with RELAY_PROCESS_EXEC_RULES (relay/host.h): envp is added to the guest
 * user's environment (an entry with a key the environment has replaces
 * it); max_output_bytes caps stdout and stderr together; past the cap the
 * command's process group is killed and output_truncated set. */
#define RELAY_EXEC_MERGE_OUTPUT 0x1u /* stderr is appended to stdout in arrival order */
#define RELAY_EXEC_KEEP_TAIL    0x2u /* on overflow keep the last max_output_bytes, do not kill */
/* Since ABI 1.1, only for a transport with RELAY_TRANSPORT_STDIO_BYTES:
 * stdin_data/stdin_len go to the command's standard input and its standard
 * output comes back as raw bytes in res->out, out_len of them. Caps:
 * max_stdout_bytes on standard output and max_output_bytes on standard
 * error; a transport that keeps both streams in one buffer may instead apply
 * their sum to both together (transfer-ssh does). Past a cap the group is
 * killed and output_truncated set, as without the flag. Refused with
 * RELAY_EXEC_MERGE_OUTPUT (RELAY_E_INVALID_ARGUMENT). */
#define RELAY_EXEC_STDIO_BYTES 0x4u

/* Flags of push() and pull(). */
#define RELAY_XFER_TREE 0x1u /* the path is a folder: move its whole tree */
/* push() only: the caller checks the copy itself (the receiver's scan
 * against the host inventory, spec/guest.md §3.4), so the transport may skip its
 * own hashing on either side and return no facts (*facts_json_out NULL).
 * It still refuses links and special files, and still fails on a broken or
 * truncated stream. A transport that ignores the flag and verifies anyway
 * is correct too. The core passes it only where it scans afterwards, and
 * retries without it when a transport answers RELAY_E_UNSUPPORTED_FLAGS. */
#define RELAY_XFER_CALLER_VERIFIES 0x2u

typedef struct relay_exec_request {
	uint32_t struct_size;    /* sizeof(relay_exec_request) */
	const char *const *argv; /* NULL-terminated; argv[0] looked up on the guest user's PATH;
	                            each element passed unchanged (quoted when a remote shell is in
	                            the way); borrowed */
	const char *cwd;         /* guest working folder, or NULL for the guest user's default; borrowed */
	const char *const *envp; /* NULL-terminated "K=V" added to the guest user's environment (same
	                            key: replaced), or NULL for that environment unchanged; borrowed */
	uint64_t timeout_ms;     /* > 0; at expiry the guest process group is killed */
	size_t max_output_bytes; /* cap on stdout + stderr together; 0 = 65536 */
	/* ---- ABI 1.1 (read only with RELAY_EXEC_STDIO_BYTES) ---- */
	const void *stdin_data;  /* bytes for the command's standard input, or NULL for none
	                            (end of file at once); borrowed until exec() returns */
	size_t stdin_len;        /* bytes at stdin_data */
	size_t max_stdout_bytes; /* cap on standard output alone; 0 = 64 MiB */
} relay_exec_request;

/* Size of the 1.0 request: a 1.0 transport copies this much. */
#define RELAY_EXEC_REQUEST_V1_0_SIZE (offsetof(relay_exec_request, max_output_bytes) + sizeof(size_t))

typedef struct relay_exec_result {
	uint32_t struct_size;      /* set by the caller to sizeof(relay_exec_result) */
	int exit_code;             /* exit status; -1 when killed by a signal or unknown */
	int signal;                /* terminating signal number, 0 if none */
	int timed_out;             /* 1 when timeout_ms expired and the group was killed */
	int output_truncated;      /* 1 when output passed max_output_bytes */
	int termination_confirmed; /* 1 when no process of the command survives in the guest */
	char *out;                 /* stdout (or merged output), NUL-terminated; owned by caller */
	size_t out_len;
	char *err; /* stderr, NULL with RELAY_EXEC_MERGE_OUTPUT; owned by caller */
	size_t err_len;
} relay_exec_result;

typedef struct relay_transport_ops {
	uint32_t struct_size; /* sizeof(relay_transport_ops) as compiled by the plugin */
	uint32_t traits;      /* RELAY_TRANSPORT_* bits */

	/* Opens a connection to the guest described by `lease_json` (borrowed,
	 * the lease document). *conn_out receives it (released with close()).
	 * RELAY_E_UNSUPPORTED when this transport cannot reach that lease (for
	 * example transfer-ssh for a lease without "ssh"). */
	relay_status (*open)(relay_plugin_state *state, const char *lease_json, relay_call *call,
	                     unsigned flags, relay_transport_conn **conn_out, relay_error *err);

	/* Closes a connection; no operation on it may be running. */
	void (*close)(relay_plugin_state *state, relay_transport_conn *conn, unsigned flags);

	/* Runs a command in the guest. RELAY_OK when it ran to an end the
	 * transport observed (exit, signal, or the timeout kill): read `res`.
	 * RELAY_E_TRANSIENT when the transport failed before the command started
	 * (safe to retry for idempotent commands), RELAY_E_INDETERMINATE when it
	 * failed after (the command may still be running), RELAY_E_CANCELLED.
	 * `req` is read with RELAY_COPY_IN and `res` written
	 * within its struct_size (relay/plugin.h R4, R5); after a failure
	 * res->out and res->err are NULL or owned by the caller. */
	relay_status (*exec)(relay_plugin_state *state, relay_transport_conn *conn,
	                     const relay_exec_request *req, relay_call *call, unsigned flags,
	                     relay_exec_result *res, relay_error *err);

	/* Copies host `local_path` (borrowed; a regular file, or with
	 * RELAY_XFER_TREE a folder whose contents are copied) to guest
	 * `remote_path` (borrowed; the file, or the folder to fill, created with
	 * its parents, mode 0700). Existing files are replaced. *facts_json_out
	 * (may be NULL to skip) as described above: `path` relative to
	 * remote_path, the bytes the guest holds after the write. On failure
	 * *facts_json_out stays NULL (relay/plugin.h R3). */
	relay_status (*push)(relay_plugin_state *state, relay_transport_conn *conn, const char *local_path,
	                     const char *remote_path, relay_call *call, unsigned flags, char **facts_json_out,
	                     relay_error *err);

	/* Copies guest `remote_path` to host `local_path`, which must not exist
	 * (created O_EXCL, 0600; folders 0700). Refuses links, devices and FIFOs
	 * in the guest. On failure nothing is left at local_path. */
	relay_status (*pull)(relay_plugin_state *state, relay_transport_conn *conn, const char *remote_path,
	                     const char *local_path, relay_call *call, unsigned flags, char **facts_json_out,
	                     relay_error *err);

	/* ---- ABI 1.4, with RELAY_TRANSPORT_STREAM (NULL slots otherwise) ----
	 *
	 * A stream is one guest command whose standard input and standard
	 * output are a byte pipe to the core for as long as it runs. Its
	 * standard error is the transport's (logged through host->log, at
	 * most one line per read, or discarded); it is never mixed into the
	 * stream. The command runs as exec() would run it (argv, cwd, envp
	 * of `req`; timeout_ms bounds only the start), but outlives every
	 * call: nothing kills it except stream_close or its own exit. What the
	 * command starts in its own session is never tied to the stream:
	 * closing the stream ends the command's input, not its descendants.
	 * Operations on one stream are called by one thread at a time; other
	 * operations of the same connection (exec of `receiver cancel`) may
	 * run beside them when RELAY_TRANSPORT_CONCURRENT is set. */

	/* Starts req->argv with the stream as its standard input and output.
	 * RELAY_OK with *stream_out (released with stream_close; the conn
	 * must outlive it). RELAY_E_TRANSIENT when nothing was started (safe
	 * to try again), RELAY_E_INDETERMINATE when the command may have
	 * started but the stream could not be set up (the command then sees
	 * end of file on its input). req is read with RELAY_COPY_IN;
	 * req->stdin_data and the output caps are ignored. *stream_out stays
	 * NULL after a failure. */
	relay_status (*stream_open)(relay_plugin_state *state, relay_transport_conn *conn,
	                            const relay_exec_request *req, relay_call *call, unsigned flags,
	                            relay_transport_stream **stream_out, relay_error *err);

	/* Writes all `len` bytes of `data` (borrowed) to the command's standard
	 * input, waiting at most timeout_ms (> 0) for the pipe to take them.
	 * RELAY_OK: every byte was handed to the transport (not a proof the
	 * command read them). RELAY_E_TIMEOUT or RELAY_E_INDETERMINATE (the
	 * command ended, or the connection broke): not every byte was handed
	 * over (some may have reached the command, never all of them: the
	 * core relies on it, a request cut short never runs); the stream is
	 * broken and may only be closed. Never raises SIGPIPE in the relay. */
	relay_status (*stream_write)(relay_plugin_state *state, relay_transport_stream *stream,
	                             const void *data, size_t len, uint64_t timeout_ms, unsigned flags,
	                             relay_error *err);

	/* Reads what the command wrote to its standard output: waits up to
	 * timeout_ms (0 = do not wait) for at least one byte, then stores
	 * 1 to `cap` bytes in `buf` (caller-owned) and their count in *got_out.
	 * RELAY_OK with *got_out 0 is end of file: the command closed its
	 * output or ended; the stream may only be closed. RELAY_E_TIMEOUT:
	 * nothing arrived in time; the stream stays usable. RELAY_E_INDETERMINATE:
	 * the transport broke; only close. *got_out is 0 after every failure. */
	relay_status (*stream_read)(relay_plugin_state *state, relay_transport_stream *stream, void *buf,
	                            size_t cap, uint64_t timeout_ms, unsigned flags, size_t *got_out,
	                            relay_error *err);

	/* Ends the stream: closes the command's standard input (it sees end of
	 * file), waits at most 2 s for it to end on its own, then stops the
	 * transport's side of it (the local client process, the exec) and
	 * frees the stream. Kills nothing the command started in a session of
	 * its own. Safe on a broken stream; `stream` is invalid afterwards. */
	void (*stream_close)(relay_plugin_state *state, relay_transport_stream *stream, unsigned flags);
} relay_transport_ops;

/* Hands `*full` (a whole result the transport filled, struct_size its own)
 * to the caller's `*res` within res->struct_size (relay/plugin.h R5), and
 * frees with host->free the buffers whose fields lie past the caller's
 * size: the last line of an exec() that fills a local result. */
static inline void relay_exec_result_deliver(const relay_host *host, relay_exec_result *res,
                                             relay_exec_result *full)
{
	RELAY_COPY_OUT(res, full);
	if (!RELAY_SIZED_HAS(res, out))
		host->free(full->out);
	if (!RELAY_SIZED_HAS(res, err))
		host->free(full->err);
}

/* Smallest transport ops table the 1.x loader accepts (all five operations required). */
#define RELAY_TRANSPORT_OPS_MIN_SIZE (offsetof(relay_transport_ops, pull) + sizeof(void *))

#ifdef __cplusplus
}
#endif

#endif /* RELAY_TRANSPORT_H */
