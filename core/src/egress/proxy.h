/*
 * egress/proxy.h — the egress proxy process (`mcp-relay egress-proxy`,
 * docs/egress.md): one per guest under `allow` or `internet`, started by
 * the relay (egress/supervisor.h) with listening sockets that live in the
 * guest's network namespace, serving them from the relay's own.
 *
 * Descriptors it is given:
 *   3  TCP listener, the guest's 127.0.0.1:3128: HTTP forward proxy with
 *      CONNECT, and SOCKS5 (told apart by the first byte)
 *   4  UDP socket, the guest's 127.0.0.1:53: the resolver
 *   5  TCP listener, the guest's 127.0.0.1:53: the resolver over TCP
 *   6  the control socket (SOCK_SEQPACKET) to the relay: "step <id>" and
 *      "step -" set the execution the next connections belong to, each
 *      answered "ok"; when it closes the proxy exits.
 * Arguments: --mode allow|internet --rules <MCP_RELAY_EGRESS_ALLOW>
 * --log <file>: every connection is appended to <file> as JSON lines
 * (egress/records.h).
 * Once the log is open it confines itself (egress/confine.h).
 */
#ifndef RELAY_EGRESS_PROXY_H
#define RELAY_EGRESS_PROXY_H

#include <pthread.h>
#include <stdint.h>

#include "egress/policy.h"

#define EGRESS_FD_PROXY   3
#define EGRESS_FD_DNS_UDP 4
#define EGRESS_FD_DNS_TCP 5
#define EGRESS_FD_CONTROL 6
#define EGRESS_PROXY_PORT 3128
#define EGRESS_OWN_MAX    64
#define EGRESS_STEP_MAX   128

/* The proxy's shared state: immutable after start except where marked. */
typedef struct egress_ctx {
	egress_policy policy;
	struct sockaddr_storage own[EGRESS_OWN_MAX]; /* this host's addresses */
	size_t own_count;
	int log_fd;                 /* O_APPEND; one write() per record */
	pthread_mutex_t lock;       /* guards step, next_id and the writes to log_fd */
	char step[EGRESS_STEP_MAX]; /* the current execution id, "" outside a step */
	uint64_t next_id;
} egress_ctx;

/* `mcp-relay egress-proxy ...`: returns the exit status. */
int egress_proxy_main(int argc, char **argv);

/* A new connection id "<pid>-<n>" and the current step, under the lock. */
void egress_ctx_claim(egress_ctx *ctx, char *id, size_t id_len, char *step, size_t step_len);

/* conn.c: serves one accepted proxy connection (takes `fd`). */
void egress_conn_start(egress_ctx *ctx, int fd);

/* dns.c: the resolver threads on the UDP socket and the TCP listener. */
int egress_dns_start(egress_ctx *ctx, int udp_fd, int tcp_fd);

#endif
