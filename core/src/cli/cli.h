/*
 * cli/cli.h — the subcommands besides serving MCP.
 */
#ifndef RELAY_CLI_CLI_H
#define RELAY_CLI_CLI_H

/* `mcp-relay doctor`: readiness checks, each line with its fix; acquires
 * nothing. argv[0] is "doctor". Exit 0 when every check passed, 1 when one
 * failed, 2 when the settings are invalid. */
int doctor_main(int argc, char **argv);

/* `mcp-relay review DIR [--html]` (evidence/review). argv[0] is "review". */
int review_main(int argc, char **argv);

/* `mcp-relay plugin-test --kind KIND [options] PLUGIN.so` (cli/plugin_test.h):
 * the conformance checks, one line each. Exit 0 when none failed, 1 when
 * one did, 2 for a usage error. argv[0] is "plugin-test". */
int plugin_test_main(int argc, char **argv);

#endif
