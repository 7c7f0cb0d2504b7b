/*
 * test_machine_local_network — a machine-local guest's network (root):
 *   - without a helper (options.networkHelper "none"): loopback only, no
 *     route anywhere;
 *   - "internet" (and "allow"): loopback only with no helper either, and
 *     the relay's egress sockets made in the guest's namespace
 *     (egress_listeners, docs/egress.md): the guest reaches them on its own
 *     127.0.0.1:3128, and nothing else;
 *   - nat with the user-mode helper (slirp4netns or pasta): outbound access,
 *     but none of the host's loopback services (through the helper's
 *     gateway), none of the host's own addresses, no private range. The
 *     host's listeners must never see a connection.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "machine_local_fixture.h"

/* "open" or "closed" for a TCP connect from inside the guest. */
static bool guest_connects(ml_env *e, relay_transport_conn *c, const char *host, int port)
{
	char script[512], *out = NULL;
	snprintf(script, sizeof script,
	         "timeout 8 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null && echo open || echo closed", host,
	         port);
	ml_sh(e, c, script, &out);
	bool open = strcmp(out, "open\n") == 0;
	free(out);
	return open;
}

static int listen_on(const char *addr, int *port_out)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	inet_pton(AF_INET, addr, &sa.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(fd, 8), 0);
	socklen_t len = sizeof sa;
	getsockname(fd, (struct sockaddr *)&sa, &len);
	*port_out = ntohs(sa.sin_port);
	return fd;
}

static bool accepted_anything(int fd)
{
	int c = accept(fd, NULL, NULL);
	if (c >= 0) {
		close(c);
		return true;
	}
	return false;
}

static bool host_address(char *out, size_t size)
{
	struct ifaddrs *ifa = NULL;
	bool found = false;
	if (getifaddrs(&ifa) != 0)
		return false;
	for (struct ifaddrs *p = ifa; p && !found; p = p->ifa_next) {
		if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET)
			continue;
		struct in_addr a = ((struct sockaddr_in *)p->ifa_addr)->sin_addr;
		if ((ntohl(a.s_addr) >> 24) == 127)
			continue;
		inet_ntop(AF_INET, &a, out, (socklen_t)size);
		found = true;
	}
	freeifaddrs(ifa);
	return found;
}

static void test_loopback_only_without_helper(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, "{\"networkHelper\":\"none\"}");
	relay_error err;
	relay_status s;
	char *lease = ml_acquire_ex(&e, "net-int", "local", "\"network\":\"nat\"", &s, &err);
	assert_non_null(lease);
	ml_release(&e, lease);
	free(lease);

	lease = ml_acquire(&e, "net-lo", NULL);
	json_object *doc = ml_parse(lease);
	json_object *net = jsonx_get_obj(jsonx_get_obj(doc, "local"), "network");
	assert_string_equal(jsonx_get_str(net, "access"), "loopback");
	json_object_put(doc);
	relay_transport_conn *c = ml_open(&e, lease);
	char *out = NULL;
	/* Interfaces: lo only; routes: none. */
	assert_int_equal(
	    ml_sh(&e, c,
	          "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; tail -n +2 /proc/net/route | wc -l",
	          &out),
	    0);
	assert_string_equal(out, "lo\n0\n");
	free(out);
	int port = 0;
	int lfd = listen_on("0.0.0.0", &port);
	char addr[64];
	if (host_address(addr, sizeof addr))
		assert_false(guest_connects(&e, c, addr, port));
	assert_false(guest_connects(&e, c, "10.0.2.2", port));
	assert_false(guest_connects(&e, c, "127.0.0.1", port)); /* the guest's own loopback */
	assert_false(accepted_anything(lfd));
	close(lfd);
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	free(lease);
	ml_unload(&e, true);
}

static void test_internet_is_the_egress_sockets_only(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	ml_env e;
	ml_load(&e, "{}"); /* whatever helper is installed: internet uses none */
	char *lease = ml_acquire(&e, "net-egress", "\"network\":\"internet\"");
	json_object *doc = ml_parse(lease);
	json_object *net = jsonx_get_obj(jsonx_get_obj(doc, "local"), "network");
	assert_string_equal(jsonx_get_str(net, "access"), "egress");
	assert_string_equal(jsonx_get_str(net, "mode"), "internet");
	assert_null(jsonx_get_str(net, "helper"));
	json_object_put(doc);
	relay_transport_conn *c = ml_open(&e, lease);
	char *out = NULL;
	assert_int_equal(
	    ml_sh(&e, c,
	          "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; tail -n +2 /proc/net/route | wc -l; "
	          "grep -c '^nameserver 127.0.0.1$' /etc/resolv.conf; env | grep -c "
	          "'^HTTPS_PROXY=http://127.0.0.1:3128$'",
	          &out),
	    0);
	assert_string_equal(out, "lo\n0\n1\n1\n");
	free(out);
	assert_false(guest_connects(&e, c, "127.0.0.1", 3128)); /* nothing listens yet */
	int fds[3] = {-2, -2, -2};
	relay_error err;
	assert_int_equal(e.p->machine.egress_listeners(e.p->state, lease, 0, fds, &err), RELAY_OK);
	for (int i = 0; i < 3; i++)
		assert_true(fds[i] >= 0);
	assert_true(guest_connects(&e, c, "127.0.0.1", 3128)); /* the relay's socket, in its loopback */
	int port = 0;
	int lfd = listen_on("0.0.0.0", &port);
	assert_false(guest_connects(&e, c, "10.0.2.2", port));
	char addr[64];
	if (host_address(addr, sizeof addr))
		assert_false(guest_connects(&e, c, addr, port));
	assert_false(accepted_anything(lfd));
	close(lfd);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	free(lease);
	ml_unload(&e, true);
}

static void check_outbound_but_not_host(const char *helper)
{
	char program[64], options[128];
	snprintf(program, sizeof program, "/usr/bin/%s", helper);
	if (access(program, X_OK) != 0) {
		fprintf(stderr, "skipped: %s is not installed\n", helper);
		skip();
	}
	snprintf(options, sizeof options, "{\"networkHelper\":\"%s\"}", helper);
	ml_env e;
	ml_load(&e, options);
	char *lease = ml_acquire(&e, "net-out", "\"network\":\"nat\"");
	json_object *doc = ml_parse(lease);
	json_object *net = jsonx_get_obj(jsonx_get_obj(doc, "local"), "network");
	assert_string_equal(jsonx_get_str(net, "access"), "outbound");
	assert_string_equal(jsonx_get_str(net, "mode"), "nat");
	assert_string_equal(jsonx_get_str(net, "helper"), helper);
	json_object_put(doc);
	relay_transport_conn *c = ml_open(&e, lease);
	char *out = NULL;
	/* tap0 with a default route: outbound access is configured. */
	assert_int_equal(ml_sh(&e, c,
	                       "grep -c 'tap0:' /proc/net/dev; awk '$2 == \"00000000\" && $8 == \"00000000\" "
	                       "{print $1}' /proc/net/route",
	                       &out),
	                 0);
	assert_string_equal(out, "1\ntap0\n");
	free(out);

	int lo_port = 0, any_port = 0;
	int lo_fd = listen_on("127.0.0.1", &lo_port);
	int any_fd = listen_on("0.0.0.0", &any_port);
	/* The host's loopback, through the helper's gateway and the DNS address. */
	assert_false(guest_connects(&e, c, "10.0.2.2", lo_port));
	assert_false(guest_connects(&e, c, "10.0.2.2", any_port));
	assert_false(guest_connects(&e, c, "10.0.2.3", any_port));
	/* The host's own address, and the private ranges. */
	char addr[64];
	if (host_address(addr, sizeof addr))
		assert_false(guest_connects(&e, c, addr, any_port));
	assert_false(guest_connects(&e, c, "10.1.2.3", any_port));
	assert_false(guest_connects(&e, c, "192.168.1.1", any_port));
	assert_false(guest_connects(&e, c, "172.16.0.1", any_port));
	assert_false(guest_connects(&e, c, "169.254.169.254", 80));
	assert_false(guest_connects(&e, c, "127.0.0.1", lo_port)); /* the guest's own loopback is its own */
	assert_false(accepted_anything(lo_fd));
	assert_false(accepted_anything(any_fd));
	close(lo_fd);
	close(any_fd);

	/* The guest's own loopback works. */
	if (access("/usr/bin/python3", X_OK) == 0) {
		assert_int_equal(
		    ml_sh(&e, c,
		          "python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\",8765)); "
		          "s.listen(); time.sleep(30)' >/dev/null 2>&1 & sleep 1; echo started",
		          NULL),
		    0);
		assert_true(guest_connects(&e, c, "127.0.0.1", 8765));
		ml_sh(&e, c, "pkill -f 'bind..\"127.0.0.1\",8765' || true", NULL);
	}
	/* Outbound: when the host itself reaches a public service (this
	 * machine's package mirror), the guest does too, through the helper's
	 * DNS and NAT. */
	FILE *p = popen("getent hosts deb.debian.org | awk '{print $1}' | head -1", "r");
	char mirror[64] = "";
	if (p) {
		if (fgets(mirror, sizeof mirror, p) == NULL)
			mirror[0] = '\0';
		pclose(p);
	}
	mirror[strcspn(mirror, "\n")] = '\0';
	bool host_reaches = false;
	if (mirror[0]) {
		char cmd[256];
		snprintf(cmd, sizeof cmd, "timeout 8 bash -c 'exec 3<>/dev/tcp/%s/80' 2>/dev/null", mirror);
		host_reaches = system(cmd) == 0;
	}
	struct in_addr ma;
	bool public_mirror = mirror[0] && inet_pton(AF_INET, mirror, &ma) == 1 &&
	                     (ntohl(ma.s_addr) >> 24) != 10 && (ntohl(ma.s_addr) >> 20) != 0xac1 &&
	                     (ntohl(ma.s_addr) >> 16) != 0xc0a8;
	if (host_reaches && public_mirror) {
		assert_true(guest_connects(&e, c, mirror, 80));
		assert_int_equal(
		    ml_sh(&e, c, "getent hosts deb.debian.org >/dev/null && echo resolved", &out), 0);
		assert_string_equal(out, "resolved\n");
		free(out);
	} else {
		fprintf(stderr,
		        "note: the host reaches no public service here; outbound success is not checked\n");
	}
	e.p->transport.close(e.p->state, c, 0);
	ml_release(&e, lease);
	free(lease);
	ml_unload(&e, true);
}

static void test_slirp4netns_outbound_but_not_host(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	check_outbound_but_not_host("slirp4netns");
}

static void test_pasta_outbound_but_not_host(void **state)
{
	(void)state;
	ML_SKIP_UNLESS_READY();
	check_outbound_but_not_host("pasta");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_loopback_only_without_helper, ml_teardown),
	    cmocka_unit_test_teardown(test_internet_is_the_egress_sockets_only, ml_teardown),
	    cmocka_unit_test_teardown(test_slirp4netns_outbound_but_not_host, ml_teardown),
	    cmocka_unit_test_teardown(test_pasta_outbound_but_not_host, ml_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
