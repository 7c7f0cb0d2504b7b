/* machine-docker under allow and internet (see md_egress.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md_console.h"
#include "md_egress.h"
#include "md_lease.h"

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
	if (geteuid() != 0) {
		md_textf(why, size,
		         "a relay that is not root cannot make the egress proxy's sockets in a container's "
		         "network namespace yet (docs/egress.md); run the relay as root, or use nat");
		return false;
	}
	return true;
}

void md_egress_env(json_object *env)
{
	static const char *const vars[] = {
	    "HTTP_PROXY=http://127.0.0.1:3128",   "HTTPS_PROXY=http://127.0.0.1:3128",
	    "ALL_PROXY=socks5h://127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1,::1",
	    "http_proxy=http://127.0.0.1:3128",   "https_proxy=http://127.0.0.1:3128",
	    "all_proxy=socks5h://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1"};
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
		json_object_array_add(env, json_object_new_string(vars[i]));
}

void md_egress_binds(md_state *st, json_object *binds)
{
	char path[1100], bind[1200];
	md_textf(path, sizeof path, "%s/egress-resolv.conf", st->state_dir);
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

typedef struct socket_job {
	pid_t pid;
	int type, port;
	int result, err_no;
} socket_job;

/* Runs in a thread of its own (namespaces are per thread): a socket made in
 * the container's namespace keeps it, bound to its 127.0.0.1:port. */
static void *socket_thread(void *arg)
{
	socket_job *job = arg;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)job->pid);
	int ns = open(path, O_RDONLY | O_CLOEXEC);
	job->result = -1;
	if (ns < 0 || setns(ns, CLONE_NEWNET) != 0 ||
	    (job->result = socket(AF_INET, job->type | SOCK_CLOEXEC, 0)) < 0) {
		job->err_no = errno;
		goto done;
	}
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)job->port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	setsockopt(job->result, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(job->result, (struct sockaddr *)&a, sizeof a) != 0 ||
	    (job->type == SOCK_STREAM && listen(job->result, 1024) != 0)) {
		job->err_no = errno;
		close(job->result);
		job->result = -1;
	}
done:
	if (ns >= 0)
		close(ns);
	return NULL; /* the thread ends in the container's namespace; nothing else runs on it */
}

static int socket_in(pid_t pid, int type, int port, int *err_no)
{
	socket_job job = {pid, type, port, -1, 0};
	pthread_t t;
	int rc = pthread_create(&t, NULL, socket_thread, &job);
	if (rc != 0) {
		*err_no = rc;
		return -1;
	}
	pthread_join(t, NULL);
	*err_no = job.err_no;
	return job.result;
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
	static const int types[3] = {SOCK_STREAM, SOCK_DGRAM, SOCK_STREAM};
	static const int ports[3] = {3128, 53, 53};
	for (int i = 0; i < 3; i++) {
		fds_out[i] = socket_in(pid, types[i], ports[i], &e);
		if (fds_out[i] < 0) {
			s = md_err(
			    st, err, RELAY_E_IO, e,
			    "cannot make the egress socket 127.0.0.1:%d in the network namespace of %s",
			    ports[i], vm);
			for (int j = 0; j < i; j++) {
				close(fds_out[j]);
				fds_out[j] = -1;
			}
			goto done;
		}
	}
done:
	json_object_put(info);
	json_object_put(rec);
	json_object_put(lease);
	return s;
}
