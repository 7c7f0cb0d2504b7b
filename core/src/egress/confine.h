/*
 * egress/confine.h — what the egress proxy gives up once its sockets and its
 * log are open (docs/egress.md, "The proxy's privileges"): it parses what
 * guests send, so it keeps as little as it can.
 */
#ifndef RELAY_EGRESS_CONFINE_H
#define RELAY_EGRESS_CONFINE_H

#include <stddef.h>

/* The user a proxy started as root runs as; its ids when the name is unknown. */
#define EGRESS_PROXY_USER        "nobody"
#define EGRESS_PROXY_FALLBACK_ID 65534u

/* no_new_privs; started as root, EGRESS_PROXY_USER without groups (a root
 * whose user namespace maps no such id keeps it, with a warning on stderr);
 * not dumpable; and a seccomp filter that answers EPERM to what a proxy
 * never does (exec, ptrace, namespaces, mounts, modules, BPF, keys, ...).
 * 0, or -1 with the reason in `why`. */
int egress_confine(char *why, size_t size);

#endif
