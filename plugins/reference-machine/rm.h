/*
 * reference-machine — the machine + transport plugin to copy when you write
 * a backend (docs/writing-a-plugin.md, "A backend in an afternoon").
 *
 * A guest is a folder of this host: <root>/<vm>/ holds the lease document
 * (lease.json) and the guest user's home (home/). Commands run on this host
 * as the relay's user through host->process_run with the exec() rules
 * (RELAY_PROCESS_EXEC_RULES), HOME set to the guest's home. push() and
 * pull() copy files and trees with the ABI's path rules and return
 * guest-side SHA-256 facts. Nothing isolates such a guest from this host:
 * a real backend puts a machine behind the same calls.
 *
 *   rm_machine.c    init/fini, the lease operations, the descriptor
 *   rm_transport.c  open/close/exec/push/pull
 *   rm_tree.c       the tree walk, copies, facts and removal they share
 *
 * Options ("options" of the init configuration): {"root": "<absolute
 * folder>"}; without it <stateDir>/guests.
 */
#ifndef REFERENCE_MACHINE_RM_H
#define REFERENCE_MACHINE_RM_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay/transport.h"

#define RM_NAME     "reference-machine"
#define RM_VERSION  "0.1.0"
#define RM_IMAGE    "folder" /* the one image this backend offers */
#define RM_PATH_MAX 4096

typedef struct rm_state {
	const relay_host *host; /* borrowed; valid until fini() returns */
	char *root;             /* the folder holding one folder per guest; host->alloc */
} rm_state;

/* One file of a transferred tree: its path relative to the root of the
 * transfer ("" for a single file) and, once hashed, its facts. */
typedef struct rm_file {
	char *rel; /* host->alloc */
	uint64_t bytes;
	char sha256[65];
} rm_file;

typedef struct rm_list {
	rm_file *files; /* host->alloc */
	size_t count, cap;
	char **dirs; /* relative folders, parents first; host->alloc */
	size_t dir_count, dir_cap;
} rm_list;

/* ---- rm_tree.c ---- */

/* Fills `err` like host->error_set, with the plugin's name first. */
relay_status rm_err(const rm_state *st, relay_error *err, relay_status code, int sys_errno, const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));

/* RELAY_OK for an absolute path without a ".." component, else
 * RELAY_E_INVALID_ARGUMENT naming `what`. */
relay_status rm_check_path(const rm_state *st, const char *path, const char *what, relay_error *err);

/* `path` and every folder above it created (mode 0700) when missing. */
relay_status rm_mkdir_p(const rm_state *st, const char *path, relay_error *err);

/* Walks `root`: with `tree` a folder (every regular file and folder below,
 * never following a link), else one regular file. A symbolic link or a
 * special file anywhere is RELAY_E_UNSAFE_PATH; a missing root
 * RELAY_E_NOT_FOUND. */
relay_status rm_walk(const rm_state *st, const char *root, int tree, rm_list *list, relay_error *err);

/* Hashes every file of `list` below `root` (host->sha256_file) and sorts
 * the list by path in byte order. */
relay_status rm_hash(const rm_state *st, const char *root, rm_list *list, relay_error *err);

/* Copies the files and folders of `list` from `src` to `dst`. `exclusive`:
 * files created O_EXCL (pull: nothing may be there) instead of replaced
 * through a temporary file and rename (push). RELAY_E_CANCELLED once
 * `call` (may be NULL) is cancelled, asked per file and per MiB; the file
 * being copied is then removed (a push's temporary, a pull's target). */
relay_status rm_copy(const rm_state *st, const char *src, const char *dst, const rm_list *list, int exclusive,
                     relay_call *call, relay_error *err);

/* The facts array of `list` (host->alloc'd JSON text), or NULL. */
char *rm_facts_json(const rm_state *st, const rm_list *list);

/* Removes `path` and everything below it without following links; a
 * missing path is fine. 0 on success. */

void rm_list_free(const rm_state *st, rm_list *list);

/* An owned (host->alloc) copy of a json-c serialisation. */
char *rm_owned_json(const rm_state *st, json_object *obj);

/* ---- rm_machine.c ---- */

/* <root>/<vm> of a lease document's "vm" (checked: [a-z0-9-]), into out.
 * RELAY_E_INVALID_ARGUMENT for a document without a valid vm. */
relay_status rm_guest_dir(const rm_state *st, const char *lease_json, char *out, size_t out_len, char *vm_out,
                          size_t vm_len, relay_error *err);

/* ---- rm_transport.c ---- */

extern const relay_transport_ops rm_transport_ops;

#endif
