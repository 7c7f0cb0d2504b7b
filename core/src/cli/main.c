/*
 * mcp-relay: the command line (spec/mcp.md §14).
 *
 *   mcp-relay                    serve MCP on stdio
 *   mcp-relay --instructions     print the server instructions
 *   mcp-relay --schema           print the fourteen tool definitions
 *   mcp-relay --version | --help
 *   mcp-relay doctor             readiness checks, acquiring nothing
 *   mcp-relay review DIR [--html]
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/lazy_libs.h"
#include "contract/contract.h"
#include "egress/proxy.h"
#include "mcp/render.h"
#include "mcp/server.h"
#include "profile/backends.h"
#include "profile/settings.h"
#include "session/manager.h"
#include "tools/dispatch.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/http.h"
#include "util/log.h"

static const char usage_text[] =
    "usage: mcp-relay                     serve MCP on standard input and output\n"
    "       mcp-relay doctor              check plugins, settings and the backend; acquires nothing\n"
    "       mcp-relay review DIR [--html] verify an evidence package and print its steps and verdicts\n"
    "       mcp-relay plugin-test --kind KIND PLUGIN.so  check a plugin against the ABI's rules\n"
    "       mcp-relay --instructions      print the server instructions\n"
    "       mcp-relay --schema            print the fourteen tool definitions (JSON)\n"
    "       mcp-relay --version           print the version\n"
    "       mcp-relay --help              print this help\n"
    "\n"
    "Settings are environment variables (MCP_RELAY_PROJECT, MCP_RELAY_SESSION, MCP_RELAY_BACKEND,\n"
    "MCP_RELAY_URL, MCP_RELAY_STATE_DIR, MCP_RELAY_MAX_GUESTS, MCP_RELAY_ON_EXIT, ...); see docs/.\n";

static int write_all_stdout(const char *text, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, text, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 1;
		text += n;
		len -= (size_t)n;
	}
	return 0;
}

/* What the manager is created from, once mcp_serve asks for it. */
typedef struct serve_state {
	relay_settings settings;
	relay_backends backends;
} serve_state;

/* The session answers the server's tools/call (mcp/server.h). */
static void serve_dispatch(void *backend, relay_tool tool, json_object *args, relay_call *call)
{
	session_dispatch(backend, tool, args, call);
}

static int serve_end(void *backend, const char *reason)
{
	return session_end(backend, reason);
}

static void serve_hurry_end(void *backend)
{
	session_hurry_end(backend);
}

static const mcp_handler session_handler = {
    .dispatch = serve_dispatch,
    .end_session = serve_end,
    .hurry_end = serve_hurry_end,
};

static void *start_manager(void *arg, char *errbuf, size_t errlen)
{
	serve_state *st = arg;
	backends_select(&st->backends, &st->settings);
	session_manager *m =
	    session_create(&st->settings, &st->backends, tools_session_hooks(), errbuf, errlen);
	/* The identity, and so the session folder, may have changed (a fresh
	 * one when another live process holds the project's). */
	char *results_dir = m ? fs_path_join(st->settings.session_dir, "results") : NULL;
	if (results_dir)
		render_set_fallback_spill_dir(results_dir);
	free(results_dir);
	return m;
}

static int serve(void)
{
	/* Kept for the life of the process: the manager borrows both. */
	static serve_state st;
	char errbuf[1024];
	if (settings_load(&st.settings, errbuf, sizeof errbuf) != 0) {
		/* An invalid setting does not hide behind "failed to connect"
		 * (spec/lifecycle.md §14): the server answers initialize and
		 * tools/list, and every tool call names the problem and the fix. */
		static char problem[2048];
		settings_problem_text(errbuf, problem, sizeof problem);
		log_error("%s; fix: %s", errbuf, settings_problem_fix(errbuf));
		mcp_server_config broken = {.in_fd = STDIN_FILENO,
		                            .out_fd = STDOUT_FILENO,
		                            .handler = NULL,
		                            .backend = NULL,
		                            .start_backend = NULL,
		                            .start_arg = NULL,
		                            .settings_problem = problem};
		int status = mcp_serve(&broken);
		fflush(NULL);
		_exit(status);
	}
	char *results_dir = fs_path_join(st.settings.session_dir, "results");
	render_set_fallback_spill_dir(results_dir);
	free(results_dir);

	/* The manager (session folder, plugins, reconciliation) starts once the
	 * first answers are written, so it never delays initialize (spec/mcp.md §1). */
	mcp_server_config config = {.in_fd = STDIN_FILENO,
	                            .out_fd = STDOUT_FILENO,
	                            .handler = &session_handler,
	                            .backend = NULL,
	                            .start_backend = start_manager,
	                            .start_arg = &st};
	int status = mcp_serve(&config);
	/* Plugins may still run threads (reapers); the process exits here
	 * without unloading them (never dlclose after init). */
	fflush(NULL);
	_exit(status);
}

int main(int argc, char **argv)
{
	/* libcrypto serves SHA-256 here, and libcurl only plain http to
	 * loopback: the system's openssl.cnf (providers, policies) and the
	 * error strings are never needed. Not loading them saves about half a
	 * millisecond and 700 KiB at every start. */
	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS, NULL);
	clock_init_from_env();
	char errbuf[256];
	if (argc >= 2 && strcmp(argv[1], "--version") == 0 && argc == 2) {
		printf("mcp-relay %s\n", RELAY_VERSION);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "--help") == 0 && argc == 2) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (contract_init(errbuf, sizeof errbuf) != 0) {
		log_error("%s", errbuf);
		return 1;
	}
	if (argc == 2 && strcmp(argv[1], "--instructions") == 0) {
		const char *text = contract_instructions();
		return write_all_stdout(text, strlen(text)) || write_all_stdout("\n", 1);
	}
	if (argc == 2 && strcmp(argv[1], "--schema") == 0) {
		size_t len = 0;
		const char *tools = contract_tools_json(&len);
		return write_all_stdout(tools, len) || write_all_stdout("\n", 1);
	}
	if (argc >= 2 && strcmp(argv[1], "doctor") == 0) {
		http_global_init();
		return doctor_main(argc - 1, argv + 1);
	}
	if (argc >= 2 && strcmp(argv[1], "review") == 0)
		return review_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "plugin-test") == 0)
		return plugin_test_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "egress-proxy") == 0)
		return egress_proxy_main(argc, argv); /* started by the relay (docs/egress.md) */
	if (argc == 1) {
		/* No http_global_init() here: libcurl is initialised when it is
		 * first needed (cli/lazy_libs.h, or on the first request of an
		 * ordinary build), so a session that never talks HTTP never pays
		 * for it, and initialize is not delayed. */
		if (!lazy_libs_enabled())
			http_global_init();
		return serve();
	}
	fputs(usage_text, stderr);
	return 2;
}
