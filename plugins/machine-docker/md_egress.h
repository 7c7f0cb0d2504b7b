/*
 * md_egress.h — machine-docker under allow and internet (docs/egress.md):
 * the container keeps NetworkMode none (loopback only) and the relay's
 * egress proxy listens in its loopback, on sockets this plugin makes in the
 * container's network namespace (relay/machine.h egress_listeners).
 */
#ifndef MACHINE_DOCKER_MD_EGRESS_H
#define MACHINE_DOCKER_MD_EGRESS_H

#include "md.h"

/* True when the relay can make sockets in this engine's containers'
 * namespaces (an engine on this host: a root relay's, or a rootless engine
 * of the relay's user, md_egress.c sockets_in); else false with the reason
 * in `why`. */
bool md_egress_reachable(md_state *st, char *why, size_t size);

/* The proxy variables every command of an egress container gets (added to
 * the container's Env array). */
void md_egress_env(json_object *env);

/* The container's /etc/resolv.conf: the relay's resolver at 127.0.0.1
 * (a read-only bind of a file in the plugin's state folder). */
void md_egress_binds(md_state *st, json_object *binds);

/* relay/machine.h egress_listeners. */
relay_status md_egress_listeners(relay_plugin_state *state, const char *lease_json, unsigned flags,
                                 int fds_out[3], relay_error *err);

#endif
