/*
 * egress/policy.h — the deployment's egress policy (spec/lifecycle.md §14:
 * MCP_RELAY_GUEST_NETWORK=allow|internet, MCP_RELAY_EGRESS_ALLOW) and the
 * decisions the egress proxy makes with it (docs/egress.md).
 *
 * Rules, comma-separated: `name`, `*.name` (subdomains only, not the name
 * itself), `CIDR` (IPv4 a.b.c.d/n, or a bare address = /32), each with an
 * optional `:PORT` (1..65535). A rule without a port allows 80 and 443.
 *
 * Decisions: a name is allowed when a name rule matches it and the port
 * (under `internet` every name is); an address is then checked after
 * resolution: an address rule that contains it allows it, else an address
 * in the host's, loopback, private, link-local, CGNAT, multicast or other
 * special space is refused (the documentation ranges 192.0.2.0/24,
 * 198.51.100.0/24 and 203.0.113.0/24 count as public); an IP literal asked
 * for directly needs an address rule under `allow`.
 */
#ifndef RELAY_EGRESS_POLICY_H
#define RELAY_EGRESS_POLICY_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define EGRESS_RULE_TEXT_MAX 280
#define EGRESS_NAME_MAX      253

typedef enum egress_rule_kind {
	EGRESS_RULE_NAME = 0,   /* example.org */
	EGRESS_RULE_SUBDOMAINS, /* *.example.org: name holds "example.org" */
	EGRESS_RULE_CIDR,       /* 203.0.113.0/24 */
} egress_rule_kind;

typedef struct egress_rule {
	egress_rule_kind kind;
	char name[EGRESS_NAME_MAX + 1];  /* lower case, no trailing dot */
	uint32_t network;                /* CIDR: host order, masked */
	int prefix_bits;                 /* CIDR: 0..32 */
	int port;                        /* 0 = 80 and 443 */
	char text[EGRESS_RULE_TEXT_MAX]; /* the rule as written, for messages */
} egress_rule;

typedef struct egress_policy {
	bool internet; /* every public destination */
	size_t count;
	egress_rule *rules; /* malloc'd; egress_policy_free */
} egress_policy;

/* Parses `text` (may be NULL or empty: no rules). On failure returns -1 and
 * writes "rule \"<rule>\": <why>" into problem (the policy is empty). */
int egress_policy_parse(const char *text, bool internet, egress_policy *out, char *problem,
                        size_t problem_len);
void egress_policy_free(egress_policy *policy);

/* A decision and its words: `rule` is the rule's text when one decided,
 * `reason` one phrase ("no rule names it", "127.0.0.1 is loopback space"). */
typedef struct egress_verdict {
	bool allowed;
	char rule[EGRESS_RULE_TEXT_MAX];
	char reason[200];
} egress_verdict;

/* The name check: `name` as asked (any case, optional trailing dot). */
void egress_check_name(const egress_policy *policy, const char *name, int port, egress_verdict *out);

/* The address check after resolution (or of a literal, `literal` true).
 * `own` lists the host's own addresses (egress_own_addresses), `own_count`
 * of them. IPv6 addresses are checked against the IPv6 special space. */
void egress_check_address(const egress_policy *policy, const struct sockaddr *addr, int port, bool literal,
                          const struct sockaddr_storage *own, size_t own_count, egress_verdict *out);

/* Fills `out` with up to `max` addresses of this host's interfaces (not
 * loopback: that is refused as a range anyway). Returns the count. */
size_t egress_own_addresses(struct sockaddr_storage *out, size_t max);

/* True when `text` is an IPv4 or IPv6 literal (brackets allowed for v6);
 * fills `addr` (port 0). */
bool egress_parse_literal(const char *text, struct sockaddr_storage *addr);

#endif
