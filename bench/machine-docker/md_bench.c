/*
 * md_bench.c — benchmarks of plugins/machine-docker, loaded through the real
 * loader, against the engine's own CLI on the same engine
 * (bench/machine-docker/README.md).
 *
 *   md_bench PLUGIN.so STATE_DIR OPTIONS_JSON DATA_DIR CLI ROUNDS
 *
 * CLI is the engine's command line with its connection flags, e.g.
 * "podman --url unix:///x.sock" or "docker -H unix:///x.sock".
 *
 * 1. acquire -> ready (options.display "off"), ROUNDS*2 guests, alternating
 *    with `CLI run -d` of the same image with the same isolation flags;
 * 2. exec of `true` in one guest, 200 times, alternating with `CLI exec`;
 * 3. push of DATA_DIR (made here when missing: 512 MiB in 10,000 files of
 *    random bytes, 100 folders of 100) into the guest's /var/tmp, against
 *    `tar -C DATA -cf - . | CLI cp - container:/var/tmp/<dest>`,
 *    ROUNDS rounds alternating.
 * Prints every sample, the medians and the ratios. With MD_BENCH_ACQUIRE_ONLY=1
 * in the environment, only the first measure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loader/loader.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

#define FILES       10000
#define TOTAL_BYTES (512ull << 20)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double *c = malloc(sizeof *c * (size_t)n);
	memcpy(c, v, sizeof *c * (size_t)n);
	qsort(c, (size_t)n, sizeof *c, cmp_double);
	double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
	free(c);
	return m;
}

static void die(const char *what, const relay_error *err)
{
	fprintf(stderr, "md_bench: %s: %s\n", what, err ? err->message : strerror(errno));
	exit(1);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[16384];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	return system(cmd);
}

static char *acquire(loaded_plugin *p, const char *guest, double *seconds)
{
	char spec[512];
	snprintf(spec, sizeof spec,
	         "{\"guest\":\"%s\",\"task\":\"bench\",\"purpose\":\"relay-%s\",\"image\":\"bench\",\"env\":"
	         "\"none\","
	         "\"network\":\"nat\",\"vnc\":false,\"ttlMs\":900000}",
	         guest, guest);
	char *lease = NULL;
	relay_error err;
	double t0 = now_s();
	if (p->machine.acquire(p->state, spec, NULL, 0, &lease, &err) != RELAY_OK)
		die("acquire", &err);
	*seconds = now_s() - t0;
	return lease;
}

static void release(loaded_plugin *p, char *lease)
{
	relay_error err;
	if (p->machine.release(p->state, lease, "released", NULL, 0, &err) != RELAY_OK)
		die("release", &err);
	free(lease);
}

static void make_data(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof path, "%s.complete", dir);
	if (access(path, F_OK) == 0)
		return;
	fprintf(stderr, "md_bench: making %s (512 MiB in %d files)\n", dir, FILES);
	relay_error err;
	fs_remove_tree(dir, &err);
	if (fs_mkdir_p(dir, 0755, &err) != RELAY_OK)
		die("mkdir data", &err);
	int rnd = open("/dev/urandom", O_RDONLY);
	size_t base = (size_t)(TOTAL_BYTES / FILES);
	char *buf = malloc(base + 1024);
	for (int i = 0; i < FILES; i++) {
		size_t size = base + (i == FILES - 1 ? (size_t)(TOTAL_BYTES - (uint64_t)base * FILES) : 0);
		if (i % 100 == 0) {
			snprintf(path, sizeof path, "%s/d%03d", dir, i / 100);
			mkdir(path, 0755);
		}
		snprintf(path, sizeof path, "%s/d%03d/f%05d.bin", dir, i / 100, i);
		if (read(rnd, buf, size) != (ssize_t)size)
			die("urandom", NULL);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, buf, size) != (ssize_t)size)
			die(path, NULL);
		close(fd);
	}
	free(buf);
	close(rnd);
	snprintf(path, sizeof path, "%s.complete", dir);
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	close(fd);
}

static void print_samples(const char *name, const double *v, int n, double scale, const char *unit)
{
	printf("%s samples (%s):", name, unit);
	for (int i = 0; i < n; i++)
		printf(" %.2f", v[i] * scale);
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: md_bench PLUGIN.so STATE_DIR OPTIONS_JSON DATA_DIR CLI ROUNDS\n");
		return 2;
	}
	const char *plugin = argv[1], *state_dir = argv[2], *options = argv[3], *data = argv[4],
	           *cli = argv[5];
	int rounds = atoi(argv[6]) > 0 ? atoi(argv[6]) : 5;
	relay_error err;
	fs_mkdir_p(state_dir, 0700, &err);
	json_object *opts = jsonx_parse_str(options, NULL, 0);
	const char *image = jsonx_get_str(jsonx_get_obj(opts, "images"), "bench");
	if (image == NULL)
		die("OPTIONS_JSON needs images.bench", NULL);
	char cfg[8192];
	snprintf(cfg, sizeof cfg, "{\"stateDir\":\"%s\",\"guestNetwork\":\"nat\",\"options\":%s}", state_dir,
	         options);
	plugin_registry reg;
	memset(&reg, 0, sizeof reg);
	loaded_plugin *p = NULL;
	if (loader_load(&reg, plugin, RELAY_KIND_MACHINE, cfg, &p, &err) != RELAY_OK)
		die("load", &err);
	/* The same isolation as the plugin's containers, so both start the same thing. */
	char flags[1024];
	snprintf(
	    flags, sizeof flags,
	    "--network none --cap-drop ALL --security-opt no-new-privileges --pids-limit 1024 "
	    "--memory 2g --cpus 2 --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 --user 61000:61000 "
	    "--label io.mcp-relay.bench=1");

	/* 1. acquire -> ready against CLI run -d, alternating, after one untimed
	 * warm-up of each: the plugin's first acquire of an image bakes its
	 * derived image (printed, not counted), the CLI's first run mounts the
	 * image's layers for the first time. */
	double bake_s = 0;
	release(p, acquire(p, "bench-warm", &bake_s));
	if (sh("%s run -d --name md-bench-run-warm %s %s /bin/sh -c 'exec sleep 600' >/dev/null", cli, flags,
	       image) != 0)
		die("cli run", NULL);
	sh("%s rm -f -v md-bench-run-warm >/dev/null", cli);
	printf("first acquire (bakes the derived image, untimed below): %.1f ms\n", bake_s * 1000);
	int n1 = rounds * 2;
	double *acq = calloc((size_t)n1, sizeof *acq), *run = calloc((size_t)n1, sizeof *run);
	char guest[64];
	for (int i = 0; i < n1; i++) {
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (i % 2 == 0)) {
				snprintf(guest, sizeof guest, "bench-a%d", i);
				release(p, acquire(p, guest, &acq[i]));
			} else {
				double t0 = now_s();
				if (sh("%s run -d --name md-bench-run-%d %s %s /bin/sh -c 'exec sleep 600' "
				       ">/dev/null",
				       cli, i, flags, image) != 0)
					die("cli run", NULL);
				run[i] = now_s() - t0;
				sh("%s rm -f -v md-bench-run-%d >/dev/null", cli, i);
			}
		}
	}

	/* MD_BENCH_ACQUIRE_ONLY=1: only the acquire measure (more rounds of it in the same time). */
	if (getenv("MD_BENCH_ACQUIRE_ONLY")) {
		print_samples("acquire->ready", acq, n1, 1000, "ms");
		print_samples("cli run -d", run, n1, 1000, "ms");
		printf("\n| acquire -> ready against `run -d` (%d each) | %.1f ms | %.1f ms | %.2fx | <= "
		       "1.0x |\n",
		       n1, median(acq, n1) * 1000, median(run, n1) * 1000, median(acq, n1) / median(run, n1));
		loader_shutdown(&reg);
		return 0;
	}

	/* 2. exec of true against CLI exec on one guest each. */
	double ignored;
	char *lease = acquire(p, "bench-exec", &ignored);
	relay_transport_conn *conn = NULL;
	if (p->transport.open(p->state, lease, NULL, 0, &conn, &err) != RELAY_OK)
		die("open", &err);
	json_object *doc = jsonx_parse_str(lease, NULL, 0);
	const char *container = jsonx_get_str(jsonx_get_obj(doc, "docker"), "container");
	int n2 = 200;
	double *ex = calloc((size_t)n2, sizeof *ex), *cex = calloc((size_t)n2, sizeof *cex);
	const char *targv[] = {"true", NULL};
	relay_exec_request req = {.struct_size = sizeof req, .argv = targv, .timeout_ms = 10000};
	for (int i = 0; i < n2 + 10; i++) {
		relay_exec_result res;
		memset(&res, 0, sizeof res);
		res.struct_size = sizeof res;
		double t0 = now_s();
		if (p->transport.exec(p->state, conn, &req, NULL, 0, &res, &err) != RELAY_OK ||
		    res.exit_code != 0)
			die("exec true", &err);
		double dt = now_s() - t0;
		free(res.out);
		free(res.err);
		t0 = now_s();
		if (sh("%s exec %s true", cli, container) != 0)
			die("cli exec", NULL);
		double dc = now_s() - t0;
		if (i >= 10) { /* the first 10 warm up */
			ex[i - 10] = dt;
			cex[i - 10] = dc;
		}
	}

	/* 3. push of a 512 MiB tree against tar c | CLI cp -. */
	make_data(data);
	double *push = calloc((size_t)rounds, sizeof *push), *cp = calloc((size_t)rounds, sizeof *cp);
	char dest[4096];
	for (int i = 0; i < rounds; i++) {
		for (int k = 0; k < 2; k++) {
			bool do_push = (k == 0) == (i % 2 == 0);
			sync();
			double t0 = now_s();
			if (do_push) {
				snprintf(dest, sizeof dest, "/var/tmp/bench-push-%d", i);
				char *facts = NULL;
				if (p->transport.push(p->state, conn, data, dest, NULL, RELAY_XFER_TREE,
				                      &facts, &err) != RELAY_OK)
					die("push", &err);
				push[i] = now_s() - t0;
				free(facts);
			} else {
				/* `cp -` needs the folder to exist; made before the clock starts. */
				sh("%s exec %s mkdir -p /var/tmp/bench-cp-%d", cli, container, i);
				t0 = now_s();
				if (sh("tar -C %s -cf - . | %s cp - %s:/var/tmp/bench-cp-%d", data, cli,
				       container, i) != 0)
					die("cli cp", NULL);
				cp[i] = now_s() - t0;
			}
		}
		/* Each round's copies go, so the container's layer does not grow without end. */
		sh("%s exec %s rm -rf /var/tmp/bench-push-%d /var/tmp/bench-cp-%d", cli, container, i, i);
	}
	json_object_put(doc);
	p->transport.close(p->state, conn, 0);
	release(p, lease);
	loader_shutdown(&reg);
	json_object_put(opts);

	print_samples("acquire->ready", acq, n1, 1000, "ms");
	print_samples("cli run -d", run, n1, 1000, "ms");
	print_samples("push 512 MiB / 10,000 files", push, rounds, 1, "s");
	print_samples("tar c | cli cp -", cp, rounds, 1, "s");
	double ma = median(acq, n1), mr = median(run, n1), me = median(ex, n2), mc = median(cex, n2);
	double mp = median(push, rounds), mt = median(cp, rounds);
	printf("\n| measure | machine-docker | engine CLI | ratio | target |\n|---|---|---|---|---|\n");
	printf("| acquire -> ready against `run -d` (%d each) | %.1f ms | %.1f ms | %.2fx | <= 1.0x |\n", n1,
	       ma * 1000, mr * 1000, ma / mr);
	printf("| exec of `true` against `exec` (%d each) | %.2f ms | %.2f ms | %.2fx | <= 1.0x |\n", n2,
	       me * 1000, mc * 1000, me / mc);
	printf("| push 512 MiB / 10,000 files against `tar c \\| cp -` (%d rounds) | %.3f s | %.3f s | %.2fx "
	       "| <= "
	       "1.25x |\n",
	       rounds, mp, mt, mp / mt);
	free(acq);
	free(run);
	free(ex);
	free(cex);
	free(push);
	free(cp);
	return 0;
}
