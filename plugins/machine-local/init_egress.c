/*
 * init_egress.c — the sockets of the relay's egress proxy, made by the guest
 * init (docs/egress.md). A guest under allow or internet has loopback only;
 * the relay serves its 127.0.0.1:3128 and 127.0.0.1:53 from the relay's own
 * namespace through sockets made in the guest's. A socket belongs to the
 * namespace it was made in, whoever holds it, so the init, which lives in
 * that namespace, makes them on request (LP_EGRESS) and passes them to the
 * plugin over the control socket (SCM_RIGHTS). That works for a relay that
 * is not root too: it cannot enter the guest's namespace, which belongs to
 * the guest's user namespace, but it does not need to.
 *
 * The init keeps no copy: when the relay and its proxy are gone nothing is
 * bound there, and the guest's connections are refused at once (no hang on
 * a backlog nobody accepts). So the init must be able to bind port 53 long
 * after it gave up its capabilities over the namespace (local_init.c step
 * 4): at setup it lowers the namespace's ip_unprivileged_port_start to 53.
 * That lets the guest's own processes bind 53 and up too, in a namespace
 * whose only interface is loopback: it reaches nothing they could not
 * reach already.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "init.h"
#include "relay_support/fds.h"

#define EGRESS_PROXY_PORT 3128
#define EGRESS_DNS_PORT   53

void egress_prepare(void)
{
	/* Per network namespace (the init's: /proc/sys/net follows the writer's). */
	if (write_text("/proc/sys/net/ipv4/ip_unprivileged_port_start", "53\n") != 0)
		die(errno,
		    "cannot let the egress resolver's port 53 be bound in the guest's network namespace "
		    "(/proc/sys/net/ipv4/ip_unprivileged_port_start)");
}

int egress_sockets(int fds[3], char *why, size_t why_size)
{
	static const int types[3] = {SOCK_STREAM, SOCK_DGRAM, SOCK_STREAM};
	static const int ports[3] = {EGRESS_PROXY_PORT, EGRESS_DNS_PORT, EGRESS_DNS_PORT};
	for (int i = 0; i < 3; i++) {
		fds[i] = rs_loopback_socket(types[i], ports[i]);
		if (fds[i] >= 0)
			continue;
		int e = errno;
		snprintf(why, why_size, "cannot bind the egress socket 127.0.0.1:%d (%s) in the guest: %s",
		         ports[i], types[i] == SOCK_DGRAM ? "udp" : "tcp", strerror(e));
		for (int j = 0; j < i; j++) {
			close(fds[j]);
			fds[j] = -1;
		}
		return e;
	}
	return 0;
}
