/* The egress policy: rules and decisions (see egress/policy.h). */
#include "egress/policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing -------------------------------------------------------------------- */

static bool valid_name(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > EGRESS_NAME_MAX)
		return false;
	size_t label = 0;
	for (size_t i = 0; i <= len; i++) {
		char c = name[i];
		if (c == '.' || c == '\0') {
			if (label == 0 || label > 63 || name[i - 1] == '-' || name[i - label] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!(isalnum((unsigned char)c) || c == '-' || c == '_'))
			return false;
		label++;
	}
	return true;
}

static bool all_digits_and_dots(const char *s)
{
	for (; *s; s++)
		if (!isdigit((unsigned char)*s) && *s != '.')
			return false;
	return true;
}

static bool parse_port(const char *text, int *port)
{
	if (*text == '\0' || strlen(text) > 5)
		return false;
	long v = 0;
	for (const char *p = text; *p; p++) {
		if (!isdigit((unsigned char)*p))
			return false;
		v = v * 10 + (*p - '0');
	}
	if (v < 1 || v > 65535)
		return false;
	*port = (int)v;
	return true;
}

static void lower_copy(char *out, size_t size, const char *in, size_t len)
{
	size_t n = len < size - 1 ? len : size - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = (char)tolower((unsigned char)in[i]);
	out[n] = '\0';
}

/* One rule of `len` bytes at `text`; 0, or -1 with `why`. */
static int parse_rule(const char *text, size_t len, egress_rule *r, const char **why)
{
	memset(r, 0, sizeof *r);
	lower_copy(r->text, sizeof r->text, text, len);
	if (len == 0 || len >= sizeof r->text) {
		*why = len == 0 ? "an empty rule (two commas, or a comma at an end)"
		                : "longer than 253 characters";
		return -1;
	}
	char body[EGRESS_RULE_TEXT_MAX];
	snprintf(body, sizeof body, "%s", r->text);
	if (strchr(body, '[') || strchr(body, ']') || strchr(body, ':') != strrchr(body, ':')) {
		*why = "IPv6 rules are not supported (guests have no IPv6 route)";
		return -1;
	}
	char *colon = strrchr(body, ':');
	if (colon) {
		*colon = '\0';
		if (!parse_port(colon + 1, &r->port)) {
			*why = "the port must be a whole number 1 to 65535";
			return -1;
		}
	}
	char *slash = strchr(body, '/');
	if (slash || all_digits_and_dots(body)) {
		r->kind = EGRESS_RULE_CIDR;
		r->prefix_bits = 32;
		if (slash) {
			*slash = '\0';
			int bits = 0;
			if (!parse_port(slash + 1, &bits) && strcmp(slash + 1, "0") != 0) {
				*why = "the prefix length must be 0 to 32";
				return -1;
			}
			if (bits > 32) {
				*why = "the prefix length must be 0 to 32";
				return -1;
			}
			r->prefix_bits = bits;
		}
		struct in_addr a;
		if (inet_pton(AF_INET, body, &a) != 1) {
			*why = "not an IPv4 address (a.b.c.d or a.b.c.d/n)";
			return -1;
		}
		uint32_t mask = r->prefix_bits == 0 ? 0 : 0xffffffffu << (32 - r->prefix_bits);
		r->network = ntohl(a.s_addr) & mask;
		return 0;
	}
	const char *name = body;
	if (strncmp(body, "*.", 2) == 0) {
		r->kind = EGRESS_RULE_SUBDOMAINS;
		name = body + 2;
	} else {
		r->kind = EGRESS_RULE_NAME;
	}
	size_t nlen = strlen(name);
	if (nlen > 0 && name[nlen - 1] == '.')
		nlen--;
	lower_copy(r->name, sizeof r->name, name, nlen);
	if (strchr(r->name, '*') || !valid_name(r->name)) {
		*why =
		    "not a host name (letters, digits, '-' in dot-separated labels; '*.' only as the whole "
		    "first label)";
		return -1;
	}
	return 0;
}

int egress_policy_parse(const char *text, bool internet, egress_policy *out, char *problem,
                        size_t problem_len)
{
	memset(out, 0, sizeof *out);
	out->internet = internet;
	if (text == NULL)
		return 0;
	while (*text == ' ')
		text++;
	if (*text == '\0')
		return 0;
	size_t cap = 1;
	for (const char *p = text; *p; p++)
		cap += *p == ',';
	out->rules = calloc(cap, sizeof *out->rules);
	if (out->rules == NULL) {
		snprintf(problem, problem_len, "out of memory");
		return -1;
	}
	const char *p = text;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		while (len > 0 && *p == ' ')
			p++, len--;
		while (len > 0 && p[len - 1] == ' ')
			len--;
		const char *why = NULL;
		if (parse_rule(p, len, &out->rules[out->count], &why) != 0) {
			snprintf(problem, problem_len, "rule \"%.*s\": %s", (int)(len > 200 ? 200 : len), p,
			         why);
			egress_policy_free(out);
			return -1;
		}
		out->count++;
		if (end == NULL)
			break;
		p = end + 1;
	}
	return 0;
}

void egress_policy_free(egress_policy *policy)
{
	free(policy->rules);
	policy->rules = NULL;
	policy->count = 0;
}

/* ---- decisions ------------------------------------------------------------------ */

static bool port_matches(const egress_rule *r, int port)
{
	return r->port == 0 ? (port == 80 || port == 443) : r->port == port;
}

static void verdict(egress_verdict *out, bool allowed, const char *rule, const char *reason)
{
	out->allowed = allowed;
	snprintf(out->rule, sizeof out->rule, "%s", rule ? rule : "");
	snprintf(out->reason, sizeof out->reason, "%s", reason ? reason : "");
}

void egress_check_name(const egress_policy *policy, const char *name, int port, egress_verdict *out)
{
	char lower[EGRESS_NAME_MAX + 2];
	size_t len = strlen(name);
	if (len > 0 && name[len - 1] == '.')
		len--;
	lower_copy(lower, sizeof lower, name, len);
	if (!valid_name(lower)) {
		verdict(out, false, NULL, "not a valid host name");
		return;
	}
	bool name_listed = false;
	for (size_t i = 0; i < policy->count; i++) {
		const egress_rule *r = &policy->rules[i];
		bool match = false;
		if (r->kind == EGRESS_RULE_NAME)
			match = strcmp(lower, r->name) == 0;
		else if (r->kind == EGRESS_RULE_SUBDOMAINS) {
			size_t rl = strlen(r->name), nl = strlen(lower);
			match =
			    nl > rl + 1 && lower[nl - rl - 1] == '.' && strcmp(lower + nl - rl, r->name) == 0;
		}
		if (!match)
			continue;
		name_listed = true;
		if (port_matches(r, port)) {
			verdict(out, true, r->text, NULL);
			return;
		}
	}
	if (policy->internet) {
		verdict(out, true, "internet", NULL);
		return;
	}
	char why[200];
	snprintf(why, sizeof why, name_listed ? "the name's rules do not allow port %d" : "no rule names it",
	         port);
	verdict(out, false, NULL, why);
}

/* The IPv4 special space: refused after resolution unless an address rule
 * names the address. The documentation ranges are public on purpose. */
static const struct {
	uint32_t net;
	int bits;
	const char *what;
} special_v4[] = {
    {0x00000000u, 8, "\"this network\" space (0.0.0.0/8)"},
    {0x0a000000u, 8, "private space (10.0.0.0/8)"},
    {0x64400000u, 10, "CGNAT space (100.64.0.0/10)"},
    {0x7f000000u, 8, "loopback space (127.0.0.0/8)"},
    {0xa9fe0000u, 16, "link-local space (169.254.0.0/16)"},
    {0xac100000u, 12, "private space (172.16.0.0/12)"},
    {0xc0000000u, 24, "IETF protocol space (192.0.0.0/24)"},
    {0xc0a80000u, 16, "private space (192.168.0.0/16)"},
    {0xc6120000u, 15, "benchmarking space (198.18.0.0/15)"},
    {0xe0000000u, 4, "multicast space (224.0.0.0/4)"},
    {0xf0000000u, 4, "reserved space (240.0.0.0/4)"},
};

static const char *v4_special(uint32_t a)
{
	for (size_t i = 0; i < sizeof special_v4 / sizeof special_v4[0]; i++) {
		uint32_t mask = 0xffffffffu << (32 - special_v4[i].bits);
		if ((a & mask) == special_v4[i].net)
			return special_v4[i].what;
	}
	return NULL;
}

static const char *v6_special(const struct in6_addr *a)
{
	const uint8_t *b = a->s6_addr;
	static const uint8_t zero[16];
	if (memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1))
		return b[15] ? "loopback space (::1)" : "the unspecified address (::)";
	if ((b[0] & 0xfe) == 0xfc)
		return "private space (fc00::/7)";
	if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
		return "link-local space (fe80::/10)";
	if (b[0] == 0xff)
		return "multicast space (ff00::/8)";
	if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_V4COMPAT(a))
		return "IPv4-mapped space (::ffff:0:0/96)";
	if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b)
		return "NAT64 space (64:ff9b::/96)";
	return NULL;
}

static bool same_address(const struct sockaddr *a, const struct sockaddr_storage *b)
{
	if (a->sa_family != b->ss_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
	              &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

void egress_check_address(const egress_policy *policy, const struct sockaddr *addr, int port, bool literal,
                          const struct sockaddr_storage *own, size_t own_count, egress_verdict *out)
{
	char text[INET6_ADDRSTRLEN] = "?";
	const void *raw = addr->sa_family == AF_INET
	                      ? (const void *)&((const struct sockaddr_in *)addr)->sin_addr
	                      : (const void *)&((const struct sockaddr_in6 *)addr)->sin6_addr;
	inet_ntop(addr->sa_family, raw, text, sizeof text);
	if (addr->sa_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr);
		bool listed = false;
		for (size_t i = 0; i < policy->count; i++) {
			const egress_rule *r = &policy->rules[i];
			if (r->kind != EGRESS_RULE_CIDR)
				continue;
			uint32_t mask = r->prefix_bits == 0 ? 0 : 0xffffffffu << (32 - r->prefix_bits);
			if ((a & mask) != r->network)
				continue;
			listed = true;
			if (port_matches(r, port)) {
				verdict(out, true, r->text, NULL);
				return;
			}
		}
		char why[200];
		if (listed) {
			snprintf(why, sizeof why, "the address rules of %s do not allow port %d", text, port);
			verdict(out, false, NULL, why);
			return;
		}
	}
	char why[200];
	const char *space = addr->sa_family == AF_INET
	                        ? v4_special(ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr))
	                        : v6_special(&((const struct sockaddr_in6 *)addr)->sin6_addr);
	for (size_t i = 0; space == NULL && i < own_count; i++)
		if (same_address(addr, &own[i]))
			space = "an address of this host";
	if (space) {
		snprintf(why, sizeof why, "%s is %s", text, space);
		verdict(out, false, NULL, why);
		return;
	}
	if (literal && !policy->internet) {
		snprintf(why, sizeof why, "an IP literal (%s) needs an address rule", text);
		verdict(out, false, NULL, why);
		return;
	}
	verdict(out, true, literal ? "internet" : NULL, NULL);
}

size_t egress_own_addresses(struct sockaddr_storage *out, size_t max)
{
	struct ifaddrs *ifa = NULL;
	size_t n = 0;
	if (getifaddrs(&ifa) != 0)
		return 0;
	for (struct ifaddrs *p = ifa; p && n < max; p = p->ifa_next) {
		if (p->ifa_addr == NULL)
			continue;
		if (p->ifa_addr->sa_family == AF_INET)
			memcpy(&out[n++], p->ifa_addr, sizeof(struct sockaddr_in));
		else if (p->ifa_addr->sa_family == AF_INET6)
			memcpy(&out[n++], p->ifa_addr, sizeof(struct sockaddr_in6));
	}
	freeifaddrs(ifa);
	return n;
}

bool egress_parse_literal(const char *text, struct sockaddr_storage *addr)
{
	memset(addr, 0, sizeof *addr);
	struct sockaddr_in *v4 = (struct sockaddr_in *)addr;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)addr;
	if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		return true;
	}
	char inner[INET6_ADDRSTRLEN + 2];
	size_t len = strlen(text);
	if (len >= 2 && text[0] == '[' && text[len - 1] == ']' && len - 2 < sizeof inner) {
		memcpy(inner, text + 1, len - 2);
		inner[len - 2] = '\0';
		text = inner;
	}
	if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		return true;
	}
	return false;
}
