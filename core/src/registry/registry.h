/*
 * registry/registry.h — the task registry (spec/lifecycle.md §10): a Markdown
 * table that tells people and other agents which machines are in use.
 *
 * The file is one of: a selected environment's managed registry.md, the
 * MCP_RELAY_REGISTRY file, ~/AGENTS.md when it holds a valid VM table, or
 * the managed <state root>/registry.md. Every change is one read-modify-
 * write under an flock(2) on the sidecar "<real path>.mcp-relay.lock"
 * (tried every 25 ms for up to 10 s), written to a temporary file beside the
 * registry and renamed over it only if nobody changed the file outside the
 * lock meanwhile. The full six-cell row is the credential: rows of others
 * are never touched.
 *
 * This room knows nothing of guests or the manager (it writes no field of
 * struct guest); it is used by lease/lifecycle.c and by settings
 * validation, and tested on its own. registry.c chooses the file and does
 * the locked read-modify-write; table.c reads, validates and edits the VM
 * table.
 */
#ifndef RELAY_REGISTRY_REGISTRY_H
#define RELAY_REGISTRY_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "util/strbuf.h"

#define REGISTRY_CELLS           6
#define REGISTRY_MAX_BYTES       (16u << 20) /* the largest registry file read */
#define REGISTRY_LOCK_TIMEOUT_MS 10000
#define REGISTRY_LOCK_RETRY_MS   25

/* The six cells in column order: Machine, OS, Task Name, Agent, Project,
 * Start Date. Borrowed strings. */
typedef struct registry_row {
	const char *cells[REGISTRY_CELLS];
} registry_row;

/* The file in use. `managed` files are created on first use (0600 in a
 * private 0700 folder) and their folder must be private. */
typedef struct registry_target {
	char *path; /* owned */
	bool managed;
} registry_target;

typedef enum registry_outcome {
	REGISTRY_CHANGED = 0,   /* the row was added or removed */
	REGISTRY_UNCHANGED = 1, /* the identical row was there already / the row was absent */
	REGISTRY_CONFLICT = -1, /* another owner's row, a duplicate, or an ownership mismatch */
	REGISTRY_LOCK_TIMEOUT = -2,
	REGISTRY_OUTSIDE_CHANGE = -3, /* the file changed outside the lock; nothing written */
	REGISTRY_INVALID = -4,        /* the file holds no valid VM table, or a cell is not acceptable */
	REGISTRY_IO = -5,
} registry_outcome;

/* Checks that text[0..len) holds a valid VM table. 0, or -1 with the rule
 * broken in errbuf ("expected exactly one '## Using VMs' section", ...). */
int registry_validate_text(const char *text, size_t len, char *errbuf, size_t errlen);

/* Read-only check of a registry file named by MCP_RELAY_REGISTRY: a regular
 * file (a link to one is followed) holding a valid VM table. 0, or -1 with
 * what is wrong and how to fix it in errbuf (no variable name, no path). */
int registry_check_file(const char *path, char *errbuf, size_t errlen);

/* Chooses the registry (spec/lifecycle.md §10): `configured` (the environment's
 * managed file when `configured_managed`, else MCP_RELAY_REGISTRY), else
 * <home>/AGENTS.md when it exists and holds a valid VM table, else the
 * managed <state_root>/registry.md. `home` may be NULL. Fills `out`. */
void registry_resolve(const char *configured, bool configured_managed, const char *home,
                      const char *state_root, registry_target *out);
void registry_target_free(registry_target *target);

/* Adds the row: idempotent when the identical row exists; refused
 * (REGISTRY_CONFLICT) when a row with the same Task Name but other cells,
 * or several, exist. errbuf says what happened on any failure. */
registry_outcome registry_add(const registry_target *target, const registry_row *row, char *errbuf,
                              size_t errlen);
/* Removes the row: an absent row is REGISTRY_UNCHANGED; a row with the same
 * Task Name whose cells differ is REGISTRY_CONFLICT ("ownership does not
 * match"). */
registry_outcome registry_remove(const registry_target *target, const registry_row *row, char *errbuf,
                                 size_t errlen);

/* The read-modify-write under the lock, for the two operations above and
 * for tests. `transform` gets the file's text and either writes the new text
 * into `out` and returns REGISTRY_CHANGED, returns REGISTRY_UNCHANGED, or
 * returns a failure with errbuf filled. */
typedef registry_outcome (*registry_transform)(const char *text, size_t len, strbuf *out, void *ctx,
                                               char *errbuf, size_t errlen);
registry_outcome registry_update(const registry_target *target, registry_transform transform, void *ctx,
                                 char *errbuf, size_t errlen);

/* The managed registry's initial content. */
extern const char registry_managed_template[];

#endif
