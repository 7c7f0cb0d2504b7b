/*
 * ml_bench.c — benchmarks of plugins/machine-local, loaded through the real
 * loader (bench/machine-local/README.md).
 *
 *   ml_bench PLUGIN.so STATE_DIR DATA_DIR [ROUNDS]
 *
 * 1. acquire -> ready without a display (options.display "off"), ROUNDS*4 guests;
 * 2. acquire -> ready with an Xvfb display, ROUNDS*2 guests;
 * 3. exec of `true` in one guest, 500 times;
 * 4. push of DATA_DIR (made here when missing: 512 MiB in 10,000 files of
 *    random bytes, 100 folders of 100) into the guest's /var/tmp, against
 *    `tar -C DATA -cf - . | tar -C <upper>/var/tmp/<dest> -xf -` into the same
 *    upper layer, ROUNDS rounds alternating.
 * Prints every sample, the medians and the ratios.
 */
#include <errno.h>
#include <fcntl.h>
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

static double median(double *v, int n)
{
	double *c = malloc(sizeof *c * (size_t)n);
	memcpy(c, v, sizeof *c * (size_t)n);
	qsort(c, (size_t)n, sizeof *c, cmp_double);
	double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
	free(c);
	return m;
}

static double percentile(double *v, int n, double p)
{
	double *c = malloc(sizeof *c * (size_t)n);
	memcpy(c, v, sizeof *c * (size_t)n);
	qsort(c, (size_t)n, sizeof *c, cmp_double);
	double r = c[(int)((n - 1) * p)];
	free(c);
	return r;
}

static void die(const char *what, const relay_error *err)
{
	fprintf(stderr, "ml_bench: %s: %s\n", what, err ? err->message : strerror(errno));
	exit(1);
}

static loaded_plugin *load(plugin_registry *reg, const char *plugin, const char *state_dir,
                           const char *options)
{
	char cfg[2048];
	snprintf(cfg, sizeof cfg, "{\"stateDir\":\"%s\",\"guestNetwork\":\"nat\",\"options\":%s}", state_dir,
	         options);
	loaded_plugin *p = NULL;
	relay_error err;
	memset(reg, 0, sizeof *reg);
	if (loader_load(reg, plugin, RELAY_KIND_MACHINE, cfg, &p, &err) != RELAY_OK)
		die("load", &err);
	return p;
}

static char *acquire(loaded_plugin *p, const char *guest, double *seconds)
{
	char spec[512];
	snprintf(spec, sizeof spec,
	         "{\"guest\":\"%s\",\"task\":\"bench\",\"purpose\":\"relay-%s\",\"image\":\"local\",\"env\":"
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
	fprintf(stderr, "ml_bench: making %s (512 MiB in %d files)\n", dir, FILES);
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
	/* The marker sits beside the data, never in it. */
	snprintf(path, sizeof path, "%s.complete", dir);
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	close(fd);
}

static void print_samples(const char *name, double *v, int n, double scale, const char *unit)
{
	printf("%s samples (%s):", name, unit);
	for (int i = 0; i < n; i++)
		printf(" %.2f", v[i] * scale);
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: ml_bench PLUGIN.so STATE_DIR DATA_DIR [ROUNDS]\n");
		return 2;
	}
	const char *plugin = argv[1], *state_dir = argv[2], *data = argv[3];
	int rounds = argc > 4 ? atoi(argv[4]) : 5;
	if (rounds < 1)
		rounds = 1;
	relay_error err;
	fs_mkdir_p(state_dir, 0700, &err);

	/* 1. acquire without a display */
	plugin_registry r1;
	/* ML_BENCH_OPTIONS: other options for the no-display acquisitions
	 * (to take one part out, e.g. {"display":"off","networkHelper":"none"}). */
	const char *opts1 = getenv("ML_BENCH_OPTIONS") ? getenv("ML_BENCH_OPTIONS") : "{\"display\":\"off\"}";
	loaded_plugin *p = load(&r1, plugin, state_dir, opts1);
	int n1 = rounds * 4;
	double *acq = calloc((size_t)n1, sizeof *acq);
	char guest[64];
	for (int i = 0; i < n1; i++) {
		snprintf(guest, sizeof guest, "bench-a%d", i);
		char *lease = acquire(p, guest, &acq[i]);
		release(p, lease);
	}

	/* ML_BENCH_ACQUIRE_ONLY=1 (rootless.sh): the two acquire figures only,
	 * so a root and an ordinary user's run can alternate in one sitting. */
	bool acquire_only =
	    getenv("ML_BENCH_ACQUIRE_ONLY") && strcmp(getenv("ML_BENCH_ACQUIRE_ONLY"), "1") == 0;
	if (acquire_only) {
		loader_shutdown(&r1);
		plugin_registry rx;
		p = load(&rx, plugin, state_dir, "{\"display\":\"auto\"}");
		int nx = rounds * 2;
		double *ax = calloc((size_t)nx, sizeof *ax);
		for (int i = 0; i < nx; i++) {
			snprintf(guest, sizeof guest, "bench-x%d", i);
			char *l = acquire(p, guest, &ax[i]);
			release(p, l);
		}
		loader_shutdown(&rx);
		print_samples("acquire->ready, no display", acq, n1, 1000, "ms");
		print_samples("acquire->ready, Xvfb", ax, nx, 1000, "ms");
		free(acq);
		free(ax);
		return 0;
	}

	/* 3. exec of true */
	double ignored;
	char *lease = acquire(p, "bench-exec", &ignored);
	relay_transport_conn *conn = NULL;
	if (p->transport.open(p->state, lease, NULL, 0, &conn, &err) != RELAY_OK)
		die("open", &err);
	int n3 = 500;
	double *ex = calloc((size_t)n3, sizeof *ex);
	const char *targv[] = {"true", NULL};
	relay_exec_request req = {.struct_size = sizeof req,
	                          .argv = targv,
	                          .cwd = NULL,
	                          .envp = NULL,
	                          .timeout_ms = 10000,
	                          .max_output_bytes = 0};
	for (int i = 0; i < n3 + 20; i++) {
		relay_exec_result res;
		memset(&res, 0, sizeof res);
		res.struct_size = sizeof res;
		double t0 = now_s();
		if (p->transport.exec(p->state, conn, &req, NULL, 0, &res, &err) != RELAY_OK ||
		    res.exit_code != 0)
			die("exec true", &err);
		double dt = now_s() - t0;
		if (i >= 20)
			ex[i - 20] = dt; /* the first 20 warm up */
		free(res.out);
		free(res.err);
	}

	/* 4. push of a 512 MiB tree against tar c | tar x into the same upper layer */
	make_data(data);
	json_object *doc = jsonx_parse_str(lease, NULL, 0);
	const char *upper = jsonx_get_str(jsonx_get_obj(doc, "local"), "upper");
	double *push = calloc((size_t)rounds, sizeof *push), *tar = calloc((size_t)rounds, sizeof *tar);
	char cmd[8192], dest[4096];
	/* Nothing is deleted between rounds: ext4 (without a journal) slows
	 * inode allocation for a while after many deletions, which would
	 * penalise whichever contender runs next. Both trees of every round
	 * stay until the end; a pause first lets the deletions of the earlier
	 * phases age out. */
	sleep(40);
	for (int i = 0; i < rounds; i++) {
		/* Alternate which contender goes first. */
		for (int k = 0; k < 2; k++) {
			bool do_push = (k == 0) == (i % 2 == 0);
			/* Start each contender with no dirty data of the other
			 * waiting to be written back. */
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
				snprintf(cmd, sizeof cmd,
				         "mkdir -p %s/var/tmp/bench-tar-%d && tar -C %s -cf - . | tar -C "
				         "%s/var/tmp/bench-tar-%d -xf -",
				         upper, i, data, upper, i);
				if (system(cmd) != 0)
					die("tar", NULL);
				tar[i] = now_s() - t0;
			}
		}
	}
	json_object_put(doc);
	p->transport.close(p->state, conn, 0);
	release(p, lease);
	loader_shutdown(&r1);

	/* 2. acquire with an Xvfb display */
	plugin_registry r2;
	p = load(&r2, plugin, state_dir, "{\"display\":\"auto\"}");
	int n2 = rounds * 2;
	double *acqx = calloc((size_t)n2, sizeof *acqx);
	for (int i = 0; i < n2; i++) {
		snprintf(guest, sizeof guest, "bench-x%d", i);
		char *l = acquire(p, guest, &acqx[i]);
		release(p, l);
	}
	loader_shutdown(&r2);

	print_samples("acquire->ready, no display", acq, n1, 1000, "ms");
	print_samples("acquire->ready, Xvfb", acqx, n2, 1000, "ms");
	print_samples("push 512 MiB / 10,000 files", push, rounds, 1, "s");
	print_samples("tar c | tar x, same upper layer", tar, rounds, 1, "s");
	double ma = median(acq, n1) * 1000, mx = median(acqx, n2) * 1000, me = median(ex, n3) * 1000;
	double mp = median(push, rounds), mt = median(tar, rounds);
	printf("\n| measure | median | budget | ratio to budget |\n|---|---|---|---|\n");
	printf("| acquire -> ready, no display (%d guests) | %.1f ms | 50 ms | %.2f |\n", n1, ma, ma / 50);
	printf("| acquire -> ready, Xvfb 1280x800x24 (%d guests) | %.1f ms | 500 ms | %.2f |\n", n2, mx,
	       mx / 500);
	printf("| exec `true` (%d runs; p90 %.2f ms) | %.2f ms | 2 ms | %.2f |\n", n3,
	       percentile(ex, n3, 0.9) * 1000, me, me / 2);
	printf("| push 512 MiB in 10,000 files (%d rounds) | %.3f s | 1.25 x tar (%.3f s) | %.2f x tar |\n",
	       rounds, mp, mt * 1.25, mp / mt);
	printf("| tar c \\| tar x into the same upper layer | %.3f s | | |\n", mt);
	free(acq);
	free(acqx);
	free(ex);
	free(push);
	free(tar);
	return 0;
}
