/*
 * runs/receiver_builds.h — the guest receiver builds this relay ships
 * (spec/guest.md §2): the platform key of a guest's `uname -sm`, where the build
 * for a platform is, and which builds are installed.
 *
 * Builds live in <receivers dir>/<platform>/receiver (loader_receivers_dir():
 * <exe dir>/libexec/mcp-relay/receivers, the installed layout, or
 * MCP_RELAY_RECEIVER_DIR). Pure functions over the file system; strings
 * returned are malloc'd (free()).
 */
#ifndef RELAY_RUNS_RECEIVER_BUILDS_H
#define RELAY_RUNS_RECEIVER_BUILDS_H

/* The platform key of a `uname -sm` answer ("Linux x86_64" ->
 * "linux-x86_64"), or NULL for an unknown answer. Static string. */
const char *receiver_platform_key(const char *uname_sm);

/* The absolute path of the receiver build for `platform`, or NULL when
 * none is installed. */
char *receiver_build_path(const char *platform);

/* The installed platforms, sorted, as "linux-aarch64, linux-x86_64", or
 * "none". Never NULL unless out of memory. */
char *receiver_builds_installed(void);

/* The `unsupported-platform` message of spec/guest.md §2 for a `uname -sm`
 * answer. */
char *receiver_unsupported_message(const char *uname_sm);

#endif
