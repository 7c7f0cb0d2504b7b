/* The egress proxy process: arguments, the accept loop, the control socket
 * (see egress/proxy.h). */
#include "egress/proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress/confine.h"

void egress_ctx_claim(egress_ctx *ctx, char *id, size_t id_len, char *step, size_t step_len)
{
	pthread_mutex_lock(&ctx->lock);
	snprintf(id, id_len, "%ld-%llu", (long)getpid(), (unsigned long long)++ctx->next_id);
	snprintf(step, step_len, "%s", ctx->step);
	pthread_mutex_unlock(&ctx->lock);
}

/* One control message; false when the relay has gone. */
static bool control_message(egress_ctx *ctx, int fd)
{
	char msg[EGRESS_STEP_MAX + 8];
	ssize_t n = recv(fd, msg, sizeof msg - 1, 0);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	msg[n] = '\0';
	if (strncmp(msg, "step ", 5) == 0) {
		pthread_mutex_lock(&ctx->lock);
		snprintf(ctx->step, sizeof ctx->step, "%.127s", strcmp(msg + 5, "-") == 0 ? "" : msg + 5);
		pthread_mutex_unlock(&ctx->lock);
	}
	send(fd, "ok", 2, MSG_NOSIGNAL);
	return true;
}

static int usage(const char *why)
{
	fprintf(stderr,
	        "mcp-relay egress-proxy: %s\n"
	        "usage: mcp-relay egress-proxy --mode allow|internet --rules TEXT --log FILE "
	        "(started by the relay with descriptors 3 to 6, docs/egress.md)\n",
	        why);
	return 2;
}

int egress_proxy_main(int argc, char **argv)
{
	const char *mode = NULL, *rules = "", *log_path = NULL;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--mode") == 0)
			mode = argv[i + 1];
		else if (strcmp(argv[i], "--rules") == 0)
			rules = argv[i + 1];
		else if (strcmp(argv[i], "--log") == 0)
			log_path = argv[i + 1];
		else
			return usage("unknown option");
	}
	if (mode == NULL || log_path == NULL || (strcmp(mode, "allow") != 0 && strcmp(mode, "internet") != 0))
		return usage("--mode and --log are required");
	static egress_ctx ctx; /* the process's one context, shared by its threads under ctx.lock */
	pthread_mutex_init(&ctx.lock, NULL);
	char problem[400];
	if (egress_policy_parse(rules, strcmp(mode, "internet") == 0, &ctx.policy, problem, sizeof problem) !=
	    0)
		return usage(problem);
	ctx.own_count = egress_own_addresses(ctx.own, EGRESS_OWN_MAX);
	ctx.log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (ctx.log_fd < 0) {
		fprintf(stderr, "mcp-relay egress-proxy: cannot open %s: %s\n", log_path, strerror(errno));
		return 1;
	}
	if (egress_confine(problem, sizeof problem) != 0) {
		fprintf(stderr, "mcp-relay egress-proxy: %s\n", problem);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	if (egress_dns_start(&ctx, EGRESS_FD_DNS_UDP, EGRESS_FD_DNS_TCP) != 0) {
		fprintf(stderr, "mcp-relay egress-proxy: cannot start the resolver: %s\n", strerror(errno));
		return 1;
	}
	struct pollfd p[2] = {{EGRESS_FD_CONTROL, POLLIN, 0}, {EGRESS_FD_PROXY, POLLIN, 0}};
	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		/* The control socket first: a step named before a connection
		 * arrives is the step of that connection. */
		if (p[0].revents && !control_message(&ctx, EGRESS_FD_CONTROL))
			return 0;
		if (p[1].revents & POLLIN) {
			int fd = accept4(EGRESS_FD_PROXY, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				egress_conn_start(&ctx, fd);
		}
	}
}
