/*
 * egress.c — the sockets of the relay's egress proxy in a guest's network
 * namespace (relay/machine.h egress_listeners, docs/egress.md). A guest
 * under allow or internet has loopback only: no helper, no route. These
 * sockets, bound to its 127.0.0.1:3128 and 127.0.0.1:53, are made from the
 * host side (net_socket_in) and handed to the relay, which serves them
 * from its own namespace; they are the guest's only way out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "local.h"

/* A socket of `type` in the guest's namespace bound to 127.0.0.1:port (and
 * listening for TCP); the fd or -1 with *err_no. */
static int bound_in(pid_t init_pid, int type, int port, int *err_no)
{
	int fd = net_socket_in(init_pid, AF_INET, type, err_no);
	if (fd < 0)
		return -1;
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    (type == SOCK_STREAM && listen(fd, 1024) != 0)) {
		*err_no = errno;
		close(fd);
		return -1;
	}
	return fd;
}

relay_status local_egress_listeners(relay_plugin_state *state, const char *lease_json, unsigned flags,
                                    int fds_out[3], relay_error *err)
{
	local_state *st = (local_state *)state;
	fds_out[0] = fds_out[1] = fds_out[2] = -1;
	if (flags)
		return lu_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown egress_listeners flags 0x%x",
		              flags);
	json_object *doc = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = lu_get_string(doc, "vm");
	relay_status s = RELAY_OK;
	int e = 0;
	json_object *rec = vm && lu_valid_token(vm, 200) ? lease_read(st, vm, &e) : NULL;
	json_object *init = lu_get_object(lu_get_object(rec, "pids"), "init");
	pid_t pid = (pid_t)lu_get_int(init, "pid", 0);
	unsigned long long start = (unsigned long long)lu_get_int(init, "startTime", 0);
	const char *access = lu_get_string(lu_get_object(rec, "network"), "access");
	if (rec == NULL) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, e, "machine-local holds no lease %s",
		           vm ? vm : "(none)");
		goto done;
	}
	if (access == NULL || strcmp(access, "egress") != 0) {
		s = lu_err(st, err, RELAY_E_REFUSED, 0,
		           "lease %s was not made for egress (its network is %s)", vm,
		           lu_get_string(lu_get_object(rec, "network"), "mode"));
		goto done;
	}
	if (pid <= 0 || !lu_proc_alive(pid, start)) {
		s = lu_err(st, err, RELAY_E_NOT_FOUND, 0, "the init of lease %s is not running", vm);
		goto done;
	}
	static const int types[3] = {SOCK_STREAM, SOCK_DGRAM, SOCK_STREAM};
	static const int ports[3] = {3128, 53, 53};
	for (int i = 0; i < 3; i++) {
		fds_out[i] = bound_in(pid, types[i], ports[i], &e);
		if (fds_out[i] < 0) {
			s = lu_err(st, err, RELAY_E_IO, e,
			           "cannot make the egress socket 127.0.0.1:%d in the network namespace of "
			           "lease %s%s",
			           ports[i], vm,
			           st->rootless
			               ? " (without root the relay cannot enter the guest's namespace)"
			               : "");
			for (int j = 0; j < i; j++) {
				close(fds_out[j]);
				fds_out[j] = -1;
			}
			goto done;
		}
	}
done:
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}
