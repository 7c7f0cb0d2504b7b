/*
 * guest/receiver.c — the mcp-relay guest receiver (guest.md §5).
 *
 * A small static program staged into each guest. It admits, journals,
 * snapshots and runs each recorded script, inventories and archives files,
 * and unpacks host-made archives. Every invocation prints exactly one JSON
 * line (its frame) on standard output; diagnostics go to standard error.
 * C99 + POSIX, libc only.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "receiver/cmds.h"
#include "receiver/frame.h"
#include "receiver/util.h"

typedef struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
} command;

static const command commands[] = {
    {"version", cmd_version}, {"hash", cmd_hash},     {"prepare", cmd_prepare},
    {"init", cmd_init},       {"scan", cmd_scan},     {"archive", cmd_archive},
    {"unpack", cmd_unpack},   {"remove", cmd_remove}, {"capture-test", cmd_capture_test},
    {"run", cmd_run},         {"cancel", cmd_cancel}, {"reset", cmd_reset},
};

int main(int argc, char **argv)
{
	size_t i;
	umask(077);
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2) {
		for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
			if (strcmp(argv[1], commands[i].name) == 0)
				return commands[i].fn(argc - 2, argv + 2);
	}
	return frame_error(EXIT_USAGE,
	                   "usage: receiver version | hash | prepare | init | scan | archive | unpack | "
	                   "remove | capture-test | run | cancel | reset (see docs/receiver.md)");
}
