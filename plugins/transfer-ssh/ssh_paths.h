/*
 * ssh_paths.h — path rules of transfer-ssh: guest paths as the scripts get
 * them, names a transferred file may have, and removal of a host folder
 * the plugin created (for cleanup after a failed pull).
 */
#ifndef TRANSFER_SSH_PATHS_H
#define TRANSFER_SSH_PATHS_H

#include <stdbool.h>

#include "relay/host.h"

/* Normalises an absolute guest path: collapses "//", drops a trailing "/".
 * Refuses relative paths, "." and ".." segments, control characters and
 * the root folder itself (RELAY_E_INVALID_ARGUMENT). *out is malloc'd. */
relay_status ssh_guest_path(const relay_host *host, const char *path, char **out, relay_error *err);

/* True when a file name (one path segment) can travel through the facts
 * format: no control characters, no backslash, not "." or "..". */
bool ssh_name_ok(const char *name);

#endif
