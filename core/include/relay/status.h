/*
 * relay/status.h — status codes and the error record shared by the core and
 * every plugin.
 *
 * Rules (curl's CURLcode and OpenSSL's reason codes are the models):
 *  - relay_status is APPEND-ONLY. A value, once released, keeps its number and
 *    meaning forever; new values are added before RELAY_STATUS_COUNT_.
 *  - RELAY_OK is 0; every failure is non-zero.
 *  - relay_status_str() never returns NULL: unknown values (a newer plugin
 *    talking to an older host) read "unknown status".
 *  - Every operation that can fail fills a caller-provided relay_error. The
 *    message is one plain sentence, NUL-terminated, never a credential, never
 *    guest output, never a stack trace.
 */
#ifndef RELAY_STATUS_H
#define RELAY_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum relay_status {
	RELAY_OK = 0,
	/* A parameter broke its documented rule (NULL where not allowed, bad
	 * JSON, out-of-range number). Nothing was done. */
	RELAY_E_INVALID_ARGUMENT = 1,
	/* `flags` held a bit this implementation does not know. Nothing was done. */
	RELAY_E_UNSUPPORTED_FLAGS = 2,
	/* The operation or option is not provided by this implementation. */
	RELAY_E_UNSUPPORTED = 3,
	/* Memory could not be obtained. */
	RELAY_E_NO_MEMORY = 4,
	/* A local system call failed; sys_errno says which errno. */
	RELAY_E_IO = 5,
	/* A time limit ran out. For operations with effects the outcome is
	 * indeterminate unless the operation says otherwise. */
	RELAY_E_TIMEOUT = 6,
	/* The caller cancelled the call (host->call_cancelled() became true). */
	RELAY_E_CANCELLED = 7,
	/* The backend definitely refused; nothing happened. The message carries
	 * the backend's reason. */
	RELAY_E_REFUSED = 8,
	/* A definite refusal because the backend is at capacity; asking again
	 * later may succeed. The message carries the backend's reason. */
	RELAY_E_CAPACITY = 9,
	/* The request may or may not have taken effect (a 5xx, a dropped
	 * connection, a timeout after sending). Never retry blindly. */
	RELAY_E_INDETERMINATE = 10,
	/* The backend cannot be reached or is not the expected service. */
	RELAY_E_UNAVAILABLE = 11,
	/* The named lease, machine, image or path does not exist. */
	RELAY_E_NOT_FOUND = 12,
	/* A SHA-256, size or inventory check failed. */
	RELAY_E_INTEGRITY = 13,
	/* A path escaped its root, crossed a symbolic link or named a special
	 * file. Nothing was written outside the destination. */
	RELAY_E_UNSAFE_PATH = 14,
	/* A transfer failed in a way that may succeed when tried again
	 * (connection reset, timeout before sending, server error). */
	RELAY_E_TRANSIENT = 15,
	/* The image is unknown to the backend or cannot be started now. */
	RELAY_E_IMAGE_UNAVAILABLE = 16,
	/* The lease or backend belongs to another environment. */
	RELAY_E_ENVIRONMENT_MISMATCH = 17,
	/* Input or output exceeded a documented bound. */
	RELAY_E_TOO_LARGE = 18,
	/* The peer answered something that breaks its protocol (malformed JSON,
	 * wrong schema, a redirect). */
	RELAY_E_PROTOCOL = 19,
	/* The machine's destruction could not be confirmed. */
	RELAY_E_UNVERIFIED = 20,
	/* A bug or an impossible state inside the implementation. */
	RELAY_E_INTERNAL = 21,
	/* Not enough free space for what must be written. */
	RELAY_E_NO_SPACE = 22,

	RELAY_STATUS_COUNT_ /* not a status; keep last */
} relay_status;

/* Bytes of relay_error.message, NUL included: a backend's reason travels to
 * the agent cut to 4,096 bytes (spec spec/tools.md §2.4), so the record holds
 * that much. */
#define RELAY_ERROR_MESSAGE_BYTES 4096

/* The caller-provided error record. `code` repeats the returned status,
 * `sys_errno` is the errno behind RELAY_E_IO (0 otherwise), `message` is one
 * sentence for a person (may be empty): UTF-8, NUL-terminated, a longer text
 * cut at a character boundary. A plugin fills it with host->error_set()
 * (printf-style, relay/host.h) or, where no host table is at hand (the
 * entry, a helper without state), with relay_error_put() below; the core's
 * own relay_error_set() is not exported to plugins. Code that writes
 * `message` itself must stay within sizeof message. About 4 KiB: fine on a
 * thread's stack, not in large arrays. */
typedef struct relay_error {
	relay_status code;
	int sys_errno;
	char message[RELAY_ERROR_MESSAGE_BYTES];
} relay_error;

/* A short, stable, lowercase name for a status ("ok", "timeout", ...).
 * Never NULL. Static storage; do not free. */
static inline const char *relay_status_str(relay_status status)
{
	switch (status) {
	case RELAY_OK: return "ok";
	case RELAY_E_INVALID_ARGUMENT: return "invalid argument";
	case RELAY_E_UNSUPPORTED_FLAGS: return "unsupported flags";
	case RELAY_E_UNSUPPORTED: return "unsupported";
	case RELAY_E_NO_MEMORY: return "out of memory";
	case RELAY_E_IO: return "i/o error";
	case RELAY_E_TIMEOUT: return "timeout";
	case RELAY_E_CANCELLED: return "cancelled";
	case RELAY_E_REFUSED: return "refused";
	case RELAY_E_CAPACITY: return "at capacity";
	case RELAY_E_INDETERMINATE: return "outcome indeterminate";
	case RELAY_E_UNAVAILABLE: return "unavailable";
	case RELAY_E_NOT_FOUND: return "not found";
	case RELAY_E_INTEGRITY: return "integrity check failed";
	case RELAY_E_UNSAFE_PATH: return "unsafe path";
	case RELAY_E_TRANSIENT: return "transient failure";
	case RELAY_E_IMAGE_UNAVAILABLE: return "image unavailable";
	case RELAY_E_ENVIRONMENT_MISMATCH: return "environment mismatch";
	case RELAY_E_TOO_LARGE: return "too large";
	case RELAY_E_PROTOCOL: return "protocol error";
	case RELAY_E_UNVERIFIED: return "unverified";
	case RELAY_E_INTERNAL: return "internal error";
	case RELAY_E_NO_SPACE: return "no space";
	case RELAY_STATUS_COUNT_: break;
	}
	return "unknown status";
}

/* Fills `err` (may be NULL) with `code`, `sys_errno` and a copy of
 * `message` (may be NULL for none), cut at a UTF-8 character boundary to fit,
 * and returns `code`: the plugin-side twin of host->error_set without the
 * formatting, for code that has no host table:
 *     return relay_error_put(err, RELAY_E_INVALID_ARGUMENT, 0, "argv is empty"); */
static inline relay_status relay_error_put(relay_error *err, relay_status code, int sys_errno,
                                           const char *message)
{
	if (err == NULL)
		return code;
	err->code = code;
	err->sys_errno = sys_errno;
	unsigned long n = 0;
	while (message != NULL && message[n] != '\0' && n < sizeof err->message - 1)
		n++;
	if (message != NULL && message[n] != '\0') {
		/* Cut: step back over an incomplete UTF-8 sequence. */
		unsigned long lead = n;
		while (lead > 0 && ((unsigned char)message[lead] & 0xC0) == 0x80)
			lead--;
		n = lead;
	}
	for (unsigned long i = 0; i < n; i++)
		err->message[i] = message[i];
	err->message[n] = '\0';
	return code;
}

#ifdef __cplusplus
}
#endif

#endif /* RELAY_STATUS_H */
