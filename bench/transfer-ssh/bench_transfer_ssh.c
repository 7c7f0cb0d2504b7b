/*
 * bench_transfer_ssh — the driver of bench/transfer-ssh/run.sh.
 *
 * Loads plugins/transfer-ssh through the relay's real loader (linked from
 * librelay_core.a), opens the lease in LEASE_FILE, and times operations:
 *
 *   bench_transfer_ssh gen DIR FILES BYTES        write a deterministic tree
 *   bench_transfer_ssh push LEASE LOCAL REMOTE    one tree push; prints "push_ms N files N"
 *   bench_transfer_ssh exec LEASE COUNT           COUNT execs of `true`; prints "exec_ms N" each
 *   bench_transfer_ssh port                       a free TCP port on 127.0.0.1
 *   bench_transfer_ssh time COUNT ARGV...         runs ARGV COUNT times (output to
 *                                                 /dev/null); prints "run_ms N" each
 *
 * It writes results to standard output, one line per measurement.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loader/loader.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return NULL;
	static char buf[8192];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

/* 100 folders; sizes jitter around BYTES/FILES in +/- pairs so the total is exact. */
static int generate(const char *dir, long files, long long total)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return -1;
	long long base = total / files, rest = total % files;
	unsigned x = 12345u;
	char *buf = malloc((size_t)(base * 2 + 2));
	if (buf == NULL)
		return -1;
	for (long i = 0; i < files; i++) {
		char sub[600], path[700];
		snprintf(sub, sizeof sub, "%s/d%03ld", dir, i % 100);
		mkdir(sub, 0755);
		long long pair_jitter = (long long)(((i - i % 2) * 7919L) % (base / 2 + 1));
		long long size = base + (i % 2 == 0 ? pair_jitter : -pair_jitter);
		if (i % 2 == 0 && i == files - 1)
			size = base; /* an unpaired last file */
		if (i == files - 1)
			size += rest;
		snprintf(path, sizeof path, "%s/f%05ld.bin", sub, i);
		for (long long k = 0; k < size; k++) {
			x = x * 1103515245u + 12345u;
			buf[k] = (char)(x >> 16);
		}
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, buf, (size_t)size) != (ssize_t)size) {
			free(buf);
			return -1;
		}
		close(fd);
	}
	free(buf);
	return 0;
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof sa;
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		return 1;
	printf("%d\n", ntohs(sa.sin_port));
	close(fd);
	return 0;
}

/* Runs argv `count` times with stdout and stdin on /dev/null. */
static int time_command(long count, char **argv)
{
	for (long i = 0; i < count; i++) {
		double start = now_ms();
		pid_t pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_RDWR);
			dup2(null, 0);
			dup2(null, 1);
			execvp(argv[0], argv);
			_exit(127);
		}
		int status = 0;
		waitpid(pid, &status, 0);
		double ms = now_ms() - start;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "%s failed (status %d)\n", argv[0], status);
			return 1;
		}
		printf("run_ms %.2f\n", ms);
		fflush(stdout);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && strcmp(argv[1], "gen") == 0)
		return generate(argv[2], atol(argv[3]), atoll(argv[4])) == 0 ? 0 : 1;
	if (argc >= 2 && strcmp(argv[1], "port") == 0)
		return free_port();
	if (argc >= 4 && strcmp(argv[1], "time") == 0)
		return time_command(atol(argv[2]), argv + 3);
	if (argc < 4) {
		fprintf(stderr,
		        "usage: %s gen DIR FILES BYTES | push LEASE LOCAL REMOTE | exec LEASE COUNT | port | "
		        "time COUNT ARGV...\n",
		        argv[0]);
		return 2;
	}
	const char *lease = read_text(argv[2]);
	if (lease == NULL) {
		fprintf(stderr, "cannot read %s\n", argv[2]);
		return 1;
	}
	char state_dir[] = "/tmp/relay-bench-state-XXXXXX";
	if (mkdtemp(state_dir) == NULL)
		return 1;
	char config[256];
	snprintf(config, sizeof config, "{\"stateDir\":\"%s\",\"options\":{}}", state_dir);
	plugin_registry registry = {0};
	loaded_plugin *plugin = NULL;
	relay_error err = {0};
	char *path = loader_find_plugin("transfer-ssh", &err);
	if (path == NULL ||
	    loader_load(&registry, path, RELAY_KIND_TRANSPORT, config, &plugin, &err) != RELAY_OK) {
		fprintf(stderr, "cannot load transfer-ssh: %s\n", err.message);
		return 1;
	}
	free(path);
	const relay_transport_ops *t = &plugin->transport;
	relay_transport_conn *conn = NULL;
	if (t->open(plugin->state, lease, NULL, 0, &conn, &err) != RELAY_OK) {
		fprintf(stderr, "open: %s\n", err.message);
		return 1;
	}
	int rc = 0;
	if (strcmp(argv[1], "push") == 0 && argc >= 5) {
		char *facts = NULL;
		double start = now_ms();
		relay_status st =
		    t->push(plugin->state, conn, argv[3], argv[4], NULL, RELAY_XFER_TREE, &facts, &err);
		double ms = now_ms() - start;
		if (st != RELAY_OK) {
			fprintf(stderr, "push: %s\n", err.message);
			rc = 1;
		} else {
			long files = 0;
			for (const char *p = facts; p && (p = strstr(p, "\"sha256\"")) != NULL; p++)
				files++;
			printf("push_ms %.1f files %ld\n", ms, files);
		}
		free(facts);
	} else if (strcmp(argv[1], "exec") == 0) {
		long count = atol(argv[3]);
		const char *const cmd[] = {"true", NULL};
		for (long i = 0; i < count && rc == 0; i++) {
			relay_exec_request req = {
			    .struct_size = sizeof req, .argv = cmd, .timeout_ms = 60000};
			relay_exec_result res = {.struct_size = sizeof res};
			double start = now_ms();
			relay_status st = t->exec(plugin->state, conn, &req, NULL, 0, &res, &err);
			double ms = now_ms() - start;
			if (st != RELAY_OK || res.exit_code != 0) {
				fprintf(stderr, "exec: %s (exit %d)\n", err.message, res.exit_code);
				rc = 1;
			} else {
				printf("exec_ms %.2f\n", ms);
			}
			free(res.out);
			free(res.err);
		}
	} else {
		fprintf(stderr, "unknown command %s\n", argv[1]);
		rc = 2;
	}
	t->close(plugin->state, conn, 0);
	loader_shutdown(&registry);
	rmdir(state_dir);
	return rc;
}
