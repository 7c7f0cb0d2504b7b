/*
 * guest/receiver.c — the mcp-relay guest receiver (spec/guest.md §5).
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
#include "receiver/serve.h"
#include "receiver/util.h"

typedef struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
} command;

static const command commands[] = {
    {RECEIVER_CMD_VERSION, cmd_version},
    {RECEIVER_CMD_HASH, cmd_hash},
    {RECEIVER_CMD_PREPARE, cmd_prepare},
    {RECEIVER_CMD_INIT, cmd_init},
    {RECEIVER_CMD_SCAN, cmd_scan},
    {RECEIVER_CMD_ARCHIVE, cmd_archive},
    {RECEIVER_CMD_UNPACK, cmd_unpack},
    {RECEIVER_CMD_REMOVE, cmd_remove},
    {RECEIVER_CMD_CAPTURE_TEST, cmd_capture_test},
    {RECEIVER_CMD_RUN, cmd_run},
    {RECEIVER_CMD_CANCEL, cmd_cancel},
    {RECEIVER_CMD_RESET, cmd_reset},
    {RECEIVER_CMD_SERVE, cmd_serve},
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
	                   "remove | capture-test | run | cancel | reset | serve (see docs/receiver.md)");
}
