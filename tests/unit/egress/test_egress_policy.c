/*
 * The egress policy (core/src/egress/policy.c, docs/egress.md): rules as
 * MCP_RELAY_EGRESS_ALLOW writes them, a bad rule named, and the decisions
 * for names, resolved addresses and literals (the special space refused,
 * the documentation ranges public).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>

#include "egress/policy.h"

static egress_policy parsed(const char *text, bool internet)
{
	egress_policy p;
	char problem[400];
	assert_int_equal(egress_policy_parse(text, internet, &p, problem, sizeof problem), 0);
	return p;
}

static void bad(const char *text, const char *want)
{
	egress_policy p;
	char problem[400] = "";
	assert_int_equal(egress_policy_parse(text, false, &p, problem, sizeof problem), -1);
	assert_non_null(strstr(problem, want));
	assert_int_equal(p.count, 0);
}

static void test_rules_parse_and_bad_rules_are_named(void **state)
{
	(void)state;
	egress_policy p = parsed(" pypi.org, *.Example.org:8443 ,203.0.113.0/24:22,198.51.100.7", false);
	assert_int_equal(p.count, 4);
	assert_int_equal(p.rules[0].kind, EGRESS_RULE_NAME);
	assert_int_equal(p.rules[1].kind, EGRESS_RULE_SUBDOMAINS);
	assert_string_equal(p.rules[1].name, "example.org");
	assert_int_equal(p.rules[1].port, 8443);
	assert_int_equal(p.rules[2].kind, EGRESS_RULE_CIDR);
	assert_int_equal(p.rules[2].prefix_bits, 24);
	assert_int_equal(p.rules[3].prefix_bits, 32);
	egress_policy_free(&p);
	p = parsed("", false);
	assert_int_equal(p.count, 0);
	egress_policy_free(&p);
	bad("pypi.org,exa mple.org", "rule \"exa mple.org\": not a host name");
	bad("pypi.org:0", "rule \"pypi.org:0\": the port must be");
	bad("pypi.org:70000", "the port must be");
	bad("a.*.org", "rule \"a.*.org\"");
	bad("10.0.0.0/33", "the prefix length must be 0 to 32");
	bad("300.1.2.3", "not an IPv4 address");
	bad("pypi.org,,x.org", "an empty rule");
	bad("[2001:db8::1]:80", "IPv6 rules are not supported");
	bad("-bad.org", "not a host name");
}

static void test_names(void **state)
{
	(void)state;
	egress_policy p = parsed("pypi.org,*.example.org,api.test:8443", false);
	egress_verdict v;
	egress_check_name(&p, "PyPI.org.", 443, &v);
	assert_true(v.allowed);
	assert_string_equal(v.rule, "pypi.org");
	egress_check_name(&p, "pypi.org", 22, &v);
	assert_false(v.allowed);
	assert_non_null(strstr(v.reason, "do not allow port 22"));
	egress_check_name(&p, "files.example.org", 80, &v);
	assert_true(v.allowed);
	egress_check_name(&p, "example.org", 80, &v); /* subdomains only */
	assert_false(v.allowed);
	egress_check_name(&p, "badexample.org", 80, &v);
	assert_false(v.allowed);
	egress_check_name(&p, "api.test", 8443, &v);
	assert_true(v.allowed);
	egress_check_name(&p, "api.test", 443, &v);
	assert_false(v.allowed);
	egress_check_name(&p, "other.org", 443, &v);
	assert_false(v.allowed);
	assert_string_equal(v.reason, "no rule names it");
	egress_policy_free(&p);
	p = parsed("", true);
	egress_check_name(&p, "anything.org", 22, &v);
	assert_true(v.allowed);
	assert_string_equal(v.rule, "internet");
	egress_policy_free(&p);
}

static void address(const egress_policy *p, const char *text, int port, bool literal, egress_verdict *v)
{
	struct sockaddr_storage ss;
	assert_true(egress_parse_literal(text, &ss));
	egress_check_address(p, (struct sockaddr *)&ss, port, literal, NULL, 0, v);
}

static void test_addresses(void **state)
{
	(void)state;
	egress_policy p = parsed("example.org,10.9.0.0/16:5432,203.0.113.9/32:22", false);
	egress_verdict v;
	static const char *const special[] = {"127.0.0.1",       "10.1.2.3",   "172.16.5.5",  "192.168.1.1",
	                                      "169.254.169.254", "100.64.0.1", "224.0.0.251", "0.0.0.0",
	                                      "255.255.255.255", "::1",        "fe80::1",     "fd00::1",
	                                      "::ffff:127.0.0.1"};
	for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
		address(&p, special[i], 443, false, &v);
		assert_false(v.allowed);
		assert_non_null(strstr(v.reason, " is "));
	}
	static const char *const documentation[] = {"192.0.2.10", "198.51.100.2", "203.0.113.200",
	                                            "2001:db8::1"};
	for (size_t i = 0; i < sizeof documentation / sizeof documentation[0]; i++) {
		address(&p, documentation[i], 443, false, &v);
		assert_true(v.allowed);
	}
	address(&p, "10.9.1.1", 5432, false, &v); /* an address rule names private space */
	assert_true(v.allowed);
	assert_string_equal(v.rule, "10.9.0.0/16:5432");
	address(&p, "10.9.1.1", 443, false, &v);
	assert_false(v.allowed);
	address(&p, "192.0.2.10", 80, true, &v); /* a literal needs an address rule */
	assert_false(v.allowed);
	assert_non_null(strstr(v.reason, "an IP literal (192.0.2.10) needs an address rule"));
	address(&p, "203.0.113.9", 22, true, &v);
	assert_true(v.allowed);
	egress_policy_free(&p);
	p = parsed("", true);
	address(&p, "192.0.2.10", 80, true, &v); /* internet: public literals too */
	assert_true(v.allowed);
	address(&p, "127.0.0.1", 80, true, &v);
	assert_false(v.allowed);
	/* The host's own addresses. */
	struct sockaddr_storage own;
	assert_true(egress_parse_literal("198.51.100.1", &own));
	struct sockaddr_storage dest = own;
	egress_check_address(&p, (struct sockaddr *)&dest, 80, false, &own, 1, &v);
	assert_false(v.allowed);
	assert_non_null(strstr(v.reason, "an address of this host"));
	egress_policy_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rules_parse_and_bad_rules_are_named),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_addresses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
