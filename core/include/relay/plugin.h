/*
 * relay/plugin.h — how a plugin presents itself to the mcp-relay core.
 *
 * A plugin is a shared object exporting exactly one symbol:
 *
 *     RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *
 *     relay_plugin_entry_v1(uint32_t host_abi_version);
 *
 * The core dlopen()s the object with RTLD_NOW | RTLD_LOCAL, looks the symbol
 * up and calls it once with RELAY_ABI_VERSION. The entry returns a pointer to
 * a static const descriptor, or NULL to refuse a host it cannot work with
 * (for example a host whose minor version lacks a service the plugin calls).
 * It must not allocate, start threads or print anything: all work happens in
 * init().
 *
 * The loader then checks, in this order, each failure with its own message
 * (docs/plugin-abi.md lists them word for word):
 *   1. the object loads;
 *   2. relay_plugin_entry_v1 exists (an object exporting only another
 *      relay_plugin_entry_vN is reported as built for another major);
 *   3. the entry accepted the host (did not return NULL);
 *   4. RELAY_ABI_MAJOR(descriptor->abi_version) == RELAY_ABI_VERSION_MAJOR;
 *   5. descriptor->struct_size >= RELAY_PLUGIN_DESCRIPTOR_MIN_SIZE;
 *   6. the kinds provided include the profile slot it was chosen for;
 *   7. no plugin already loaded has the same name;
 *   8. the ops table of each kind provided is present, at least as large as
 *      its _MIN_SIZE, and has every required operation; a machine table's
 *      console_ops (1.7), when set, is at least
 *      RELAY_MACHINE_CONSOLE_OPS_MIN_SIZE with all four slots, and is not
 *      set together with the 1.0-1.6 string slot `console`;
 *   9. init() returns RELAY_OK.
 * After a successful init the object is never dlclose()d (its code may be
 * referenced by threads the plugin started); fini() is called at exit.
 *
 * Compatibility (OBS obs_source_info and SQLite sqlite3_vfs are the models):
 *  - Structs only grow at the end and carry their size. A reader copies
 *    min(struct_size, sizeof) bytes into a zeroed copy, so fields a plugin
 *    does not know read as zero/NULL: RELAY_COPY_IN() below.
 *  - A NULL operation slot means "not supported"; the core then answers the
 *    corresponding tool with an error naming the missing capability.
 *  - Every operation takes `unsigned flags` and refuses unknown bits with
 *    RELAY_E_UNSUPPORTED_FLAGS, and a caller-provided relay_error.
 *
 * The rules every operation of every kind follows (`mcp-relay plugin-test
 * --kind KIND plugin.so` checks them, docs/writing-a-plugin.md):
 *  R1 Flags first. An operation refuses a bit it does not know with
 *     RELAY_E_UNSUPPORTED_FLAGS before it does anything else.
 *  R2 Errors. Every failure returns non-zero, sets err->code to the same
 *     value and err->message to one sentence (host->error_set, or
 *     relay_error_put() of relay/status.h where no host table is at hand).
 *  R3 Out-parameters after a failure. The caller sets every `T **x_out` to
 *     NULL before the call (and may pass x_out itself as NULL where the
 *     operation says "may be NULL to skip"). On RELAY_OK the callee stores
 *     an owned value (host->alloc) there; on any failure it leaves NULL there
 *     and frees what it allocated. The core still frees *x_out after a
 *     failure (relay/machine.h acquire: a value left there leaks nothing),
 *     but plugin-test reports it. A result struct the caller sized
 *     (relay_exec_result, relay_process_result, relay_http_response) is
 *     reset by the callee with RELAY_RESULT_RESET() once its arguments are
 *     accepted; after a failure its `out`/`err`/`body` pointers are NULL or
 *     owned by the caller, who frees them whatever the status.
 *  R4 Sized structs in. A request (relay_exec_request, ...) is read only
 *     through RELAY_COPY_IN(): a larger caller's extra fields are ignored, a
 *     smaller caller's missing fields read as zero.
 *  R5 Sized structs out. A result is written only within the caller's
 *     struct_size: RELAY_RESULT_RESET() clears min(caller size, own size)
 *     bytes, never more, and a field past the caller's size is not written
 *     (RELAY_SIZED_HAS()); fill a full local copy and RELAY_COPY_OUT() it.
 *  R6 One size per ops table. An ops table's struct_size, the descriptor's
 *     <kind>_ops_size and sizeof the table are one number: write
 *     `.struct_size = sizeof(relay_X_ops)` in the table and
 *     `.X_ops_size = sizeof(relay_X_ops)` in the descriptor. The loader
 *     reads the descriptor's size (check 8); plugin-test refuses a table
 *     whose own struct_size says otherwise.
 *  R7 Memory. What crosses the boundary is allocated with host->alloc (or
 *     host->strdup) and released with host->free; a plugin frees at fini()
 *     everything it allocated (plugin-test counts every block).
 *
 * Output rule: standard output belongs to the MCP stream. A plugin never
 * writes to file descriptor 1 and never lets a child inherit it (use
 * host->log for diagnostics; they go to standard error).
 */
#ifndef RELAY_PLUGIN_H
#define RELAY_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "relay/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version: major in the high 16 bits, minor in the low 16 bits. A major
 * change breaks binary compatibility; a minor change only appends. */
#define RELAY_ABI_VERSION_MAJOR 1u
/* 1.1: RELAY_TRANSPORT_STDIO_BYTES; 1.2: RELAY_PROCESS_EXEC_RULES; 1.3: machine
 * egress_listeners; 1.4: RELAY_TRANSPORT_STREAM; 1.5: host->lease_changed and
 * the lease state "lost"; 1.6: the host's remove_tree and write_durable;
 * 1.7: the machine's typed console_ops and the machine link's console
 * (docs/plugin-abi.md) */
#define RELAY_ABI_VERSION_MINOR      7u
#define RELAY_ABI_MAKE(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define RELAY_ABI_VERSION            RELAY_ABI_MAKE(RELAY_ABI_VERSION_MAJOR, RELAY_ABI_VERSION_MINOR)
#define RELAY_ABI_MAJOR(v)           ((uint32_t)(v) >> 16)
#define RELAY_ABI_MINOR(v)           ((uint32_t)(v)&0xffffu)

/* The exported entry's name, for dlsym(). */
#define RELAY_PLUGIN_ENTRY_SYMBOL "relay_plugin_entry_v1"

#if defined(__GNUC__)
#define RELAY_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define RELAY_PLUGIN_EXPORT
#endif

/* The kinds of plugin; a descriptor's `kinds` is a bit set of them. */
typedef enum relay_plugin_kind {
	RELAY_KIND_MACHINE = 1u << 0,   /* leases guests: relay/machine.h */
	RELAY_KIND_TRANSPORT = 1u << 1, /* exec and file transfer: relay/transport.h */
	RELAY_KIND_CAPTURE = 1u << 2,   /* the snapshot command: relay/capture.h */
	RELAY_KIND_CONSOLE = 1u << 3    /* console viewing: relay/console.h */
} relay_plugin_kind;
#define RELAY_KIND_ALL_ (RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT | RELAY_KIND_CAPTURE | RELAY_KIND_CONSOLE)

struct relay_host;
struct relay_machine_ops;
struct relay_transport_ops;
struct relay_capture_ops;
struct relay_console_ops;

/* Per-plugin state returned by init() and passed back, borrowed, to every
 * operation of that plugin. Opaque to the core. */
typedef void relay_plugin_state;

typedef struct relay_plugin_descriptor {
	/* RELAY_ABI_VERSION the plugin was compiled against. */
	uint32_t abi_version;
	/* sizeof(relay_plugin_descriptor) as the plugin was compiled. */
	uint32_t struct_size;

	/* Unique plugin name, [a-z0-9-]{1,63}, e.g. "machine-local". Static. */
	const char *name;
	/* Plugin version, free text such as "0.1.0". Static. */
	const char *version;
	/* One line for `mcp-relay doctor`. Static; may be NULL. */
	const char *description;
	/* Bit set of relay_plugin_kind. */
	uint32_t kinds;
	/* Reserved capability bits; 0 for now. */
	uint64_t capabilities;

	/*
	 * Called once after the checks pass. `host` is borrowed and valid until
	 * fini() returns. `config_json` (borrowed, UTF-8 JSON object, never NULL)
	 * carries the relay's settings for plugins:
	 *   {"stateDir": "<absolute folder owned by this plugin>",
	 *    "libexecDir": "<folder with receiver builds and guest programs>",
	 *    "guestNetwork": "nat"|"internet"|"allow" (1.3: "allow"; outside
	 *        "nat" the guest's only way out is the relay's egress proxy,
	 *        reached through machine egress_listeners),
	 *    "serviceUrl": "<origin>"|null,
	 *    "environment": {...}|null,
	 *    "options": {...}   (plugin-specific, from the profile or settings)}
	 * Unknown keys must be ignored. On success *state_out receives the
	 * plugin's state (may be NULL). On failure the plugin fills `err`,
	 * releases what it took and returns non-zero; it is then not used.
	 */
	relay_status (*init)(const struct relay_host *host, const char *config_json, unsigned flags,
	                     relay_plugin_state **state_out, relay_error *err);
	/* Called once at exit, after every operation has returned. May be NULL. */
	void (*fini)(relay_plugin_state *state);

	/* Ops tables for each kind in `kinds` (NULL for kinds not provided),
	 * each with the sizeof() the plugin compiled, the same number as the
	 * table's own struct_size (rule R6). Static storage. */
	const struct relay_machine_ops *machine;
	uint32_t machine_ops_size;
	const struct relay_transport_ops *transport;
	uint32_t transport_ops_size;
	const struct relay_capture_ops *capture;
	uint32_t capture_ops_size;
	const struct relay_console_ops *console;
	uint32_t console_ops_size;
} relay_plugin_descriptor;

/* ---- sized copies (rules R4, R5) ----------------------------------------- */

/* Copies min(src_size, dst_size) bytes of `src` (may be NULL) into `dst`
 * after zeroing all dst_size bytes of it: a reader's view of a struct that a
 * writer of another minor version sized. */
static inline void relay_sized_copy(void *dst, size_t dst_size, const void *src, size_t src_size)
{
	memset(dst, 0, dst_size);
	if (src != NULL)
		memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
}

/* `local` (a struct variable) becomes the caller's `*in` as this plugin
 * knows it; `in` points to a struct whose first member is its struct_size:
 *     relay_exec_request req;
 *     RELAY_COPY_IN(req, req_in);   then read req.argv, req.stdin_data, ... */
#define RELAY_COPY_IN(local, in) relay_sized_copy(&(local), sizeof(local), (in), (in)->struct_size)

/* Clears the caller's result `res` within min(res->struct_size, sizeof
 * *res) bytes and keeps its struct_size: the first write to any result. */
#define RELAY_RESULT_RESET(res)                                                                              \
	do {                                                                                                 \
		uint32_t relay_caller_size_ = (res)->struct_size;                                            \
		memset((res), 0, relay_caller_size_ < sizeof *(res) ? relay_caller_size_ : sizeof *(res));   \
		(res)->struct_size = relay_caller_size_;                                                     \
	} while (0)

/* 1 when the caller's struct `*ptr` is large enough to hold `field`. */
#define RELAY_SIZED_HAS(ptr, field)                                                                          \
	((size_t)((const char *)&(ptr)->field - (const char *)(ptr)) + sizeof((ptr)->field) <=               \
	 (size_t)(ptr)->struct_size)

/* Copies the full local result `*local` into the caller's `*res` within the
 * caller's struct_size, keeping it. Owned pointers of `*local` past that
 * size did not reach the caller: free them (RELAY_SIZED_HAS(res, field) is 0). */
#define RELAY_COPY_OUT(res, local)                                                                           \
	do {                                                                                                 \
		uint32_t relay_caller_size_ = (res)->struct_size;                                            \
		memcpy((res), (local),                                                                       \
		       relay_caller_size_ < sizeof *(local) ? relay_caller_size_ : sizeof *(local));         \
		(res)->struct_size = relay_caller_size_;                                                     \
	} while (0)

/* Smallest descriptor the 1.x loader accepts (everything up to console_ops_size). */
#define RELAY_PLUGIN_DESCRIPTOR_MIN_SIZE                                                                     \
	(offsetof(relay_plugin_descriptor, console_ops_size) + sizeof(uint32_t))

/* The entry every plugin exports. `host_abi_version` is the host's
 * RELAY_ABI_VERSION. Returns a static descriptor, or NULL to refuse the host. */
typedef const relay_plugin_descriptor *(*relay_plugin_entry_fn)(uint32_t host_abi_version);

/* Defines the exported entry of a plugin that works with every 1.x host:
 * it returns &descriptor (a static const relay_plugin_descriptor) to a host
 * of the same major version and refuses (NULL) any other. A plugin that
 * needs services of a later minor uses RELAY_PLUGIN_DEFINE_ENTRY_SINCE below,
 * or writes its own entry and refuses older hosts there
 * (plugins/reference/capture_reference.c spells the entry out). Use once,
 * at file scope:
 *
 *     RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
 */
#define RELAY_PLUGIN_DEFINE_ENTRY(descriptor)                                                                \
	RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version); \
	RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)  \
	{                                                                                                    \
		return RELAY_ABI_MAJOR(host_abi_version) == RELAY_ABI_VERSION_MAJOR ? &(descriptor) : NULL;  \
	}

/* The entry of a plugin that needs the services of minor `min_minor` or
 * later: it refuses (NULL) a host of another major or of an older minor,
 * which the loader reports as check 3. Use once, at file scope:
 *
 *     RELAY_PLUGIN_DEFINE_ENTRY_SINCE(descriptor, 7)
 */
#define RELAY_PLUGIN_DEFINE_ENTRY_SINCE(descriptor, min_minor)                                               \
	RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version); \
	RELAY_PLUGIN_EXPORT const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version)  \
	{                                                                                                    \
		return RELAY_ABI_MAJOR(host_abi_version) == RELAY_ABI_VERSION_MAJOR &&                       \
		               RELAY_ABI_MINOR(host_abi_version) >= (min_minor)                              \
		           ? &(descriptor)                                                                   \
		           : NULL;                                                                           \
	}

#ifdef __cplusplus
}
#endif

#endif /* RELAY_PLUGIN_H */
