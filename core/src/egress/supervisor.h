/*
 * egress/supervisor.h — the relay's side of a guest's egress proxy
 * (docs/egress.md): starts `mcp-relay egress-proxy` with the listening
 * sockets the machine plugin made in the guest's network namespace, tells
 * it which step is running, and when it ends unasked records the stop in
 * the guest's network.jsonl and starts it again on the same sockets (the
 * relay keeps them, so the guest's 127.0.0.1:3128 and :53 never go away
 * while the relay lives; connections of a killed proxy are cut, nothing
 * recorded before is lost).
 */
#ifndef RELAY_EGRESS_SUPERVISOR_H
#define RELAY_EGRESS_SUPERVISOR_H

#include <sys/types.h>

#include "relay/status.h"

typedef struct egress_proxy egress_proxy;

/* Starts the proxy. `listeners` = {proxy TCP, DNS UDP, DNS TCP}: taken (closed
 * by egress_proxy_stop, and on failure). `mode` "allow" or "internet",
 * `rules` the MCP_RELAY_EGRESS_ALLOW text, `log_path` the guest's
 * network.jsonl. */
relay_status egress_proxy_start(const char *mode, const char *rules, const char *log_path, int listeners[3],
                                egress_proxy **out, relay_error *err);

/* The execution the next connections belong to (NULL: none). Waits for the
 * proxy's acknowledgement (up to 2 s). */
void egress_proxy_step(egress_proxy *proxy, const char *execution_id);

/* The proxy's current pid (0 when none runs). */
pid_t egress_proxy_pid(egress_proxy *proxy);

/* Stops the proxy, closes the sockets, frees. NULL is accepted. */
void egress_proxy_stop(egress_proxy *proxy);

#endif
