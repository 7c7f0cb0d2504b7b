/*
 * userns.c — work in a guest's network namespace for a relay that is not
 * root (net.c falls back here when entering it from a thread gets EPERM).
 *
 * Without root the guest's network namespace belongs to the guest's user
 * namespace, and setns() lets only a single-threaded process join a user
 * namespace; the relay has threads. So a forked child (single-threaded)
 * joins the user namespace that owns the network namespace (NS_GET_USERNS:
 * the init itself has moved on into a nested one), then the network
 * namespace, and there either makes a socket and hands it back over a
 * socket pair (the socket stays in the guest's namespace), or execs a
 * program (the viewer of relay_console_open). Only syscalls run in the
 * child between fork and exec.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local.h"
#include "relay_support/fds.h"

/* The guest's network namespace and the user namespace owning it, opened;
 * 0, or -1 with *err_no set (and nothing left open). */
static int open_guest_namespaces(pid_t init_pid, int *net_out, int *owner_out, int *err_no)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)init_pid);
	int net = open(path, O_RDONLY | O_CLOEXEC);
	int owner = net >= 0 ? ioctl(net, NS_GET_USERNS) : -1;
	if (owner < 0) {
		*err_no = errno;
		if (net >= 0)
			close(net);
		return -1;
	}
	*net_out = net;
	*owner_out = owner;
	return 0;
}

/* In the child: into the owning user namespace, then the network one. */
static int join_guest_namespaces(int net, int owner)
{
	return setns(owner, CLONE_NEWUSER) == 0 && setns(net, CLONE_NEWNET) == 0 ? 0 : -1;
}

static void reap(pid_t child)
{
	while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
	}
}

int net_socket_in_userns(pid_t init_pid, int domain, int type, int *err_no)
{
	int pair[2] = {-1, -1}, fd = -1, net = -1, owner = -1;
	if (open_guest_namespaces(init_pid, &net, &owner, err_no) != 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) != 0) {
		*err_no = errno;
		goto done;
	}
	pid_t child = fork();
	if (child < 0) {
		*err_no = errno;
		goto done;
	}
	if (child == 0) {
		int e = 0;
		int s = -1;
		if (join_guest_namespaces(net, owner) != 0 ||
		    (s = socket(domain, type | SOCK_CLOEXEC, 0)) < 0)
			e = errno;
		char data = (char)e;
		_exit(rs_send_fds(pair[1], &data, 1, &s, s >= 0 ? 1 : 0, 0) == 0 ? 0 : 1);
	}
	close(pair[1]);
	pair[1] = -1;
	char data = 0;
	int got = -1, ngot = 0;
	ssize_t n = rs_recv_fds(pair[0], &data, 1, 0, &got, 1, &ngot, NULL);
	if (n == 1 && ngot == 1)
		fd = got;
	else {
		if (ngot == 1)
			close(got);
		*err_no = n == 1 && data ? data : EIO;
	}
	reap(child);
done:
	close(net);
	close(owner);
	if (pair[0] >= 0)
		close(pair[0]);
	if (pair[1] >= 0)
		close(pair[1]);
	return fd;
}

/* The child's side of net_spawn_in_userns: as net.c's spawn in a thread
 * (a process group of its own, standard input from /dev/null, output to
 * log_fd, no other descriptor), after joining the namespaces. An errno
 * goes back over `report` when anything fails; exec closes it. */
static void exec_in_guest(int net, int owner, const char *program, const char *const *argv,
                          const char *const *envp, int log_fd, int report)
{
	int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int null_out = open("/dev/null", O_WRONLY | O_CLOEXEC);
	int out = log_fd >= 0 ? log_fd : null_out;
	int e = 0;
	if (setpgid(0, 0) != 0 || join_guest_namespaces(net, owner) != 0 || null_in < 0 || out < 0 ||
	    dup2(null_in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0 ||
	    syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
		e = errno;
	else {
		execve(program, (char *const *)argv, (char *const *)envp);
		e = errno;
	}
	(void)!write(report, &e, sizeof e);
	_exit(127);
}

pid_t net_spawn_in_userns(pid_t init_pid, const char *const *argv, const char *const *envp, int log_fd,
                          int *err_no)
{
	int report[2] = {-1, -1}, net = -1, owner = -1;
	pid_t pid = -1;
	char *program = strchr(argv[0], '/') ? strdup(argv[0]) : lu_find_program(argv[0]);
	if (program == NULL) {
		*err_no = ENOENT;
		return -1;
	}
	if (open_guest_namespaces(init_pid, &net, &owner, err_no) != 0) {
		free(program);
		return -1;
	}
	if (pipe2(report, O_CLOEXEC) != 0) {
		*err_no = errno;
		goto done;
	}
	pid = fork();
	if (pid < 0) {
		*err_no = errno;
		goto done;
	}
	if (pid == 0)
		exec_in_guest(net, owner, program, argv, envp ? envp : (const char *const *)environ, log_fd,
		              report[1]);
	close(report[1]);
	report[1] = -1;
	int e = 0;
	ssize_t n;
	while ((n = read(report[0], &e, sizeof e)) < 0 && errno == EINTR) {
	}
	if (n != 0) { /* exec did not happen: the child reported why */
		*err_no = n == (ssize_t)sizeof e && e ? e : EIO;
		reap(pid);
		pid = -1;
	}
done:
	close(net);
	close(owner);
	for (int i = 0; i < 2; i++)
		if (report[i] >= 0)
			close(report[i]);
	free(program);
	return pid;
}
