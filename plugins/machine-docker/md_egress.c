/* machine-docker under allow and internet (see md_egress.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "md_console.h"
#include "md_egress.h"
#include "md_lease.h"
#include "relay_kit/guest_facts.h"
#include "relay_support/fds.h"

static const char resolv_text[] = "# machine-docker: the relay's egress resolver (docs/egress.md)\n"
                                  "nameserver 127.0.0.1\n";

bool md_egress_reachable(md_state *st, char *why, size_t size)
{
	if (st->ssh.enabled || st->tls.enabled) {
		md_textf(why, size,
		         "the engine at %s is on another host, and the relay's egress proxy needs the "
		         "container's network namespace on this one; use an engine on this host (a unix:// "
		         "endpoint), or MCP_RELAY_GUEST_NETWORK=nat",
		         st->endpoint);
		return false;
	}
	return true;
}

void md_egress_env(json_object *env)
{
	for (size_t i = 0; i < RK_EGRESS_PROXY_ENV_COUNT; i++)
		json_object_array_add(env, json_object_new_string(rk_egress_proxy_env[i]));
}

void md_egress_binds(md_state *st, json_object *binds)
{
	char path[1100], bind[1200];
	md_textf(path, sizeof path, "%s/egress-resolv.conf", st->kit.state_dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0) {
		ssize_t n = write(fd, resolv_text, sizeof resolv_text - 1);
		(void)n;
		fchmod(fd, 0644);
		close(fd);
	}
	md_textf(bind, sizeof bind, "%s:/etc/resolv.conf:ro", path);
	json_object_array_add(binds, json_object_new_string(bind));
}

/* What the child of sockets_in reports with its descriptors. */
typedef struct socket_report {
	int err_no; /* 0 when the three sockets follow */
	int port;   /* the socket that failed, 0 for a namespace */
	int step;   /* 1 joining the user namespace, 2 the network namespace, 3 the socket */
} socket_report;

/* The child of sockets_in: joins the namespaces, makes the sockets, sends
 * them with its report; never returns. */
static void socket_child(int user_ns, int net_ns, int back) __attribute__((noreturn));
static void socket_child(int user_ns, int net_ns, int back)
{
	static const int types[3] = {SOCK_STREAM, SOCK_DGRAM, SOCK_STREAM};
	static const int ports[3] = {3128, 53, 53};
	socket_report rep = {0, 0, 1};
	int fds[3] = {-1, -1, -1};
	if (user_ns >= 0 && setns(user_ns, CLONE_NEWUSER) != 0)
		rep.err_no = errno;
	if (rep.err_no == 0) {
		rep.step = 2;
		if (setns(net_ns, CLONE_NEWNET) != 0)
			rep.err_no = errno;
	}
	for (int i = 0; rep.err_no == 0 && i < 3; i++) {
		rep.step = 3;
		rep.port = ports[i];
		if ((fds[i] = rs_loopback_socket(types[i], ports[i])) < 0)
			rep.err_no = errno;
	}
	_exit(rs_send_fds(back, &rep, sizeof rep, fds, rep.err_no == 0 ? 3 : 0, 0) == 0 ? 0 : 1);
}

/* The three sockets of egress_listeners in the network namespace of the
 * container whose init is `pid`. A socket belongs to the namespace it was
 * made in, so a child process joins it, makes them and sends them back
 * (SCM_RIGHTS); a child, since a process with threads cannot join a user
 * namespace. Under a rootless engine the container's namespaces belong to
 * the engine's user namespace: the child joins that first. Its owner, the
 * relay's user, holds every capability in it (the kernel's rule for the
 * creator of a user namespace), so that needs no privilege; a root relay's
 * container shares the relay's user namespace and only the network
 * namespace is joined. 0, or -1 with *err_no and the failing step in why. */
static int sockets_in(pid_t pid, int fds[3], int *err_no, char *why, size_t why_size)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
	int user_ns = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
	int net_ns = open(path, O_RDONLY | O_CLOEXEC);
	struct stat theirs, ours;
	int pair[2] = {-1, -1};
	int rc = -1;
	*err_no = errno;
	if (net_ns < 0 || user_ns < 0 || fstat(user_ns, &theirs) != 0 ||
	    stat("/proc/self/ns/user", &ours) != 0) {
		*err_no = errno;
		md_textf(why, why_size, "cannot open the namespaces of the container's process %d", (int)pid);
		goto done;
	}
	if (theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev) {
		close(user_ns); /* the relay's own: joining it would fail */
		user_ns = -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
		*err_no = errno;
		md_textf(why, why_size, "cannot make a socket pair");
		goto done;
	}
	pid_t child = fork();
	if (child < 0) {
		*err_no = errno;
		md_textf(why, why_size, "cannot start a process to enter the container's namespace");
		goto done;
	}
	if (child == 0)
		socket_child(user_ns, net_ns, pair[1]);
	close(pair[1]);
	pair[1] = -1;
	socket_report rep = {EIO, 0, 0};
	int got[3], ngot = 0;
	ssize_t n = rs_recv_fds(pair[0], &rep, sizeof rep, 0, got, 3, &ngot, NULL);
	while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
	}
	if (n == (ssize_t)sizeof rep && rep.err_no == 0 && ngot == 3) {
		memcpy(fds, got, sizeof got);
		rc = 0;
		goto done;
	}
	for (int k = 0; k < ngot; k++)
		close(got[k]);
	*err_no = n == (ssize_t)sizeof rep ? rep.err_no : EIO;
	if (n != (ssize_t)sizeof rep)
		md_textf(why, why_size, "the process that entered the container's namespace did not answer");
	else if (rep.step == 1)
		md_textf(why, why_size, "cannot join the user namespace of the container's process %d",
		         (int)pid);
	else if (rep.step == 2)
		md_textf(why, why_size, "cannot join the network namespace of the container's process %d",
		         (int)pid);
	else
		md_textf(why, why_size, "cannot bind the egress socket 127.0.0.1:%d in the container",
		         rep.port);
done:
	for (int i = 0; i < 2; i++)
		if (pair[i] >= 0)
			close(pair[i]);
	if (user_ns >= 0)
		close(user_ns);
	if (net_ns >= 0)
		close(net_ns);
	return rc;
}

relay_status md_egress_listeners(relay_plugin_state *state, const char *lease_json, unsigned flags,
                                 int fds_out[3], relay_error *err)
{
	md_state *st = (md_state *)state;
	fds_out[0] = fds_out[1] = fds_out[2] = -1;
	if (flags)
		return md_err(st, err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown egress_listeners flags 0x%x",
		              flags);
	json_object *lease = lease_json ? json_tokener_parse(lease_json) : NULL;
	json_object *rec = NULL, *info = NULL;
	relay_status s = RELAY_OK;
	const char *vm = md_str(lease, "vm");
	int e = 0;
	char why[600];
	if (!md_valid_name(vm) || (rec = md_record_read(st, vm, &e)) == NULL) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, e, "machine-docker holds no lease %s",
		           vm ? vm : "(none)");
		goto done;
	}
	if (md_str(rec, "egress") == NULL) {
		s = md_err(st, err, RELAY_E_REFUSED, 0, "lease %s was not made for egress (network nat)", vm);
		goto done;
	}
	if (!md_egress_reachable(st, why, sizeof why)) {
		s = md_err(st, err, RELAY_E_REFUSED, 0, "%s", why);
		goto done;
	}
	int found = md_container_get(st, md_container_of(rec), NULL, &info);
	pid_t pid = found == 1 && md_container_running(info) ? md_container_init_pid(info) : 0;
	if (pid == 0) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, 0,
		           "the container of lease %s is not running here, so its loopback cannot get the "
		           "egress proxy",
		           vm);
		goto done;
	}
	if (sockets_in(pid, fds_out, &e, why, sizeof why) != 0)
		s = md_err(st, err, RELAY_E_IO, e, "%s, so the egress proxy cannot listen in %s", why, vm);
done:
	json_object_put(info);
	json_object_put(rec);
	json_object_put(lease);
	return s;
}
