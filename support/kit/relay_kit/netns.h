/*
 * relay_kit/netns.h — work inside a guest's network namespace
 * (/proc/<pid>/ns/net of its init on this host), from a thread of its own:
 * namespaces are per thread, so switching that one never affects another,
 * and a socket keeps the namespace it was made in. machine-local (its
 * guests' namespaces; without root it falls back to its user namespace,
 * userns.c) and machine-docker (a container's) use it for the console's
 * RFB probe and the viewer.
 */
#ifndef RELAY_KIT_NETNS_H
#define RELAY_KIT_NETNS_H

#include <sys/types.h>

/* A socket(domain, type | SOCK_CLOEXEC) made in the namespace of `pid`, or
 * -1 with *err_no (EPERM: this process may not enter it). */
int rk_netns_socket(pid_t pid, int domain, int type, int *err_no);

/* Starts argv (PATH searched; envp NULL: this process's environment) in
 * the namespace of `pid`, in a process group of its own, with /dev/null as
 * standard input and `log_fd` as standard output and error (-1:
 * /dev/null; never the MCP stream), no other descriptor. Its pid, or -1
 * with *err_no. */
pid_t rk_netns_spawn(pid_t pid, const char *const *argv, const char *const *envp, int log_fd, int *err_no);

#endif
