/*
 * md_console.h — machine-docker's console (relay/machine.h `console_ops`,
 * spec/machine-service.md §9): x11vnc on the guest's own Xvfb display,
 * view-only with a one-time password, listening on 127.0.0.1:5900 inside
 * the container's network namespace, which this host reaches as
 * /proc/<container init pid>/ns/net — so only for an engine on this host
 * (a unix:// endpoint). Internal to plugins/machine-docker.
 */
#ifndef MACHINE_DOCKER_MD_CONSOLE_H
#define MACHINE_DOCKER_MD_CONSOLE_H

#include "md.h"

/* Why this relay cannot serve consoles with its endpoint: NULL when it can;
 * else a reason token (static), with a sentence for people in `why`. */
const char *md_console_unreachable(md_state *st, char *why, size_t size);

/* The host pid of the container's init, when the engine's State.Pid is a
 * process of this host running the guest program; else 0. */
pid_t md_container_init_pid(json_object *info);

/* The acquire-time check of a spec with vnc for image `key` with what the
 * image has: RELAY_OK, or RELAY_E_REFUSED saying what is missing. */
relay_status md_console_check(md_state *st, const char *key, bool xvfb, bool x11vnc, relay_error *err);

/* Gives a new record (with its display) its console: "console" is the
 * console report (status ready) and "vnc" true. */
void md_console_prepare(md_state *st, json_object *rec);

/* relay_probe's per-image console text (static) and whether vnc is offered. */
const char *md_console_probe_text(md_state *st, bool known, bool xvfb, bool x11vnc, bool *vnc_out);

/* Stops what console attempts of `rec` started on this host (viewers) and
 * removes their password files; x11vnc goes with the container. */
void md_console_stop_all(md_state *st, json_object *rec);

/* Starts argv in the container as `user` ("uid:gid"), detached (the exec
 * API: create, then start with Detach); true when the engine started it. */
bool md_exec_detached(md_state *st, const char *vm, const char *user, const char *const *argv,
                      relay_call *call);

/* The typed console of relay/machine.h (ABI 1.7) over the kit's ledger. */
extern const relay_machine_console_ops md_console_ops;

#endif
