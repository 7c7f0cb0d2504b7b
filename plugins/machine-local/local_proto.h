/*
 * local_proto.h — the control protocol between the machine-local plugin and
 * a guest's init process (local_init.c). Header only; shared by both.
 *
 * Transport: a SOCK_SEQPACKET Unix socket bound by the guest init at
 * <lease dir>/control.sock before it pivots into the guest root. Only the
 * relay's user can reach it (the lease folder is 0700 and hidden inside the
 * guest). Each message is one packet: a fixed header, then `len` bytes of
 * `nstr` NUL-terminated strings. File descriptors travel as SCM_RIGHTS.
 *
 * One connection carries at most one attached command: SPAWN, then the
 * client may send KILL or QUERY; the init sends EXIT when it reaps the
 * command's leader. Detached spawns (Xvfb, x11vnc) only get STARTED; they
 * are stopped later with KILLPID. Closing a connection never kills anything:
 * commands outlive the relay exactly as the guest does.
 */
#ifndef MACHINE_LOCAL_PROTO_H
#define MACHINE_LOCAL_PROTO_H

#include <stdint.h>

#define LP_MAGIC      0x4c524c31u /* "LRL1" */
#define LP_MAX_PACKET (1024u * 1024u + 4096u)

/* Requests (client -> init). */
enum lp_request {
	LP_SPAWN = 1,   /* a=uid b=gid c=flags d=argc; strings: cwd, argv..., env...; fds: out[, err] */
	LP_KILL = 2,    /* SIGKILL the process group of this connection's command; answers GROUP */
	LP_QUERY = 3,   /* is this connection's process group gone? answers GROUP */
	LP_KILLPID = 4, /* a=pid of a detached spawn: SIGKILL its group; answers GROUP */
	LP_PING = 5,    /* answers PONG */
	LP_EGRESS = 6   /* the egress proxy's sockets (docs/egress.md): answers FDS, FAILED or ERROR */
};

/* Replies (init -> client). */
enum lp_reply {
	LP_R_STARTED = 101, /* a=guest pid of the leader (also its process group) */
	LP_R_FAILED = 102,  /* c=errno, strings: one message */
	LP_R_EXIT = 103,    /* c=wait status of the leader, a=1 when its group is gone */
	LP_R_GROUP = 104,   /* a=1 when the group is gone */
	LP_R_PONG = 105,    /* a=number of processes the init is tracking */
	LP_R_ERROR = 106,   /* c=errno, strings: one message (a malformed request) */
	LP_R_FDS = 107      /* a=count; fds (SCM_RIGHTS): for EGRESS, TCP 127.0.0.1:3128 (listening),
	                     * UDP 127.0.0.1:53, TCP 127.0.0.1:53 (listening), made in the guest's
	                     * network namespace; the init keeps no copy */
};

/* SPAWN flags (field c). */
#define LP_SPAWN_MERGE        0x1u /* one fd for stdout and stderr */
#define LP_SPAWN_DETACHED     0x2u /* no EXIT will be read; stdout/stderr default to /dev/null */
#define LP_SPAWN_NO_NEW_PRIVS 0x4u
#define LP_SPAWN_STDIN        0x8u /* the last fd is the command's standard input (else /dev/null) */

typedef struct lp_header {
	uint32_t magic;
	uint32_t op;
	uint32_t a;
	uint32_t b;
	int32_t c;
	int32_t d;
	uint32_t nstr;
	uint32_t len;
} lp_header;

/* Messages from init to the launcher's relay (status fd): text lines
 *   "pid <host pid of the guest init>\n"   from the launcher
 *   "ready\n"                              from the guest init, setup done
 *   "error <errno> <message>\n"            from either, setup failed */

#endif
