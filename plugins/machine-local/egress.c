/*
 * egress.c — the sockets of the relay's egress proxy in a guest's network
 * namespace (relay/machine.h egress_listeners, docs/egress.md). A guest
 * under allow or internet has loopback only: no helper, no route. The
 * guest's init, which lives in that namespace, makes the sockets bound to
 * its 127.0.0.1:3128 and 127.0.0.1:53 on request and passes them over the
 * control socket (LP_EGRESS, init_egress.c), with or without root; the
 * relay serves them from its own namespace: they are the guest's only way
 * out.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"

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
	const char *lease_dir = lu_get_string(lu_get_object(rec, "paths"), "leaseDir");
	int conn = lease_dir ? ctl_connect(lease_dir) : -1;
	if (conn < 0) {
		s = lu_err(st, err, RELAY_E_IO, errno, "cannot reach the init of lease %s", vm);
		goto done;
	}
	char why[256];
	int nfds = 0;
	int rc = ctl_request_fds(conn, LP_EGRESS, fds_out, 3, &nfds, &e, why, sizeof why);
	close(conn);
	if (rc != 0 || nfds != 3) {
		for (int i = 0; i < nfds; i++) {
			close(fds_out[i]);
			fds_out[i] = -1;
		}
		bool old_init = rc != 0 && e == EINVAL && strcmp(why, "unknown request") == 0;
		s = lu_err(st, err, RELAY_E_IO, rc != 0 ? e : EPROTO,
		           "the init of lease %s did not give the egress sockets: %s%s", vm,
		           rc != 0 ? why : "it sent fewer than three",
		           old_init
		               ? " (the guest was made by an older machine-local; release it and acquire "
		                 "again)"
		               : "");
		goto done;
	}
done:
	if (rec)
		json_object_put(rec);
	if (doc)
		json_object_put(doc);
	return s;
}
