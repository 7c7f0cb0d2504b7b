/*
 * bench/manifest/hash_bench.c — times the manifest hashing of
 * core/src/evidence/package.c (evidence_hash_files: link-safe opens, 4 MiB
 * reads, OpenSSL EVP SHA-256, N worker threads) over every regular file
 * below DIR. Prints one line: seconds, files, bytes, MiB/s.
 *
 *   hash_bench DIR [THREADS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "evidence/fswalk.h"
#include "evidence/package.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: hash_bench DIR [THREADS]\n");
		return 2;
	}
	unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
	fw_tree tree;
	relay_error err = {0};
	if (fw_walk(argv[1], false, NULL, &tree, &err) != RELAY_OK) {
		fprintf(stderr, "hash_bench: %s\n", err.message);
		return 1;
	}
	evidence_file_hash *items = calloc(tree.count ? tree.count : 1, sizeof *items);
	size_t n = 0;
	for (size_t i = 0; i < tree.count; i++)
		if (tree.items[i].kind == FW_FILE)
			items[n++].path = tree.items[i].path;
	double t0 = now_s();
	if (evidence_hash_files(argv[1], items, n, threads, &err) != RELAY_OK) {
		fprintf(stderr, "hash_bench: %s\n", err.message);
		return 1;
	}
	double t1 = now_s();
	unsigned long long bytes = 0;
	for (size_t i = 0; i < n; i++) {
		if (items[i].status != RELAY_OK) {
			fprintf(stderr, "hash_bench: %s: %s\n", items[i].path, items[i].error);
			return 1;
		}
		bytes += items[i].bytes;
	}
	printf("%.3f s %zu files %llu bytes %.1f MiB/s\n", t1 - t0, n, bytes,
	       (double)bytes / (1 << 20) / (t1 - t0));
	free(items);
	fw_tree_free(&tree);
	return 0;
}
