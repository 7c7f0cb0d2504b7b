/*
 * xfer_facts.c — the {path, bytes, sha256} facts of a transfer and the SHA-256 of a file.
 * Part of the transfers of xfer.c (see there).
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "local.h"
#include "relay_kit/xfer.h"
#include "xfer_int.h"

/* ---- facts ---------------------------------------------------------------- */

int facts_add(fact_list *l, const char *path, uint64_t bytes, const char *sha)
{
	if (l->count == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		fact *p = realloc(l->items, cap * sizeof *p);
		if (p == NULL)
			return -1;
		l->items = p;
		l->cap = cap;
	}
	fact *f = &l->items[l->count];
	f->path = strdup(path);
	if (f->path == NULL)
		return -1;
	f->bytes = bytes;
	memcpy(f->sha256, sha, 65);
	l->count++;
	return 0;
}

void facts_free(fact_list *l)
{
	for (size_t i = 0; i < l->count; i++)
		free(l->items[i].path);
	free(l->items);
	memset(l, 0, sizeof *l);
}

static int fact_cmp(const void *a, const void *b)
{
	return strcmp(((const fact *)a)->path, ((const fact *)b)->path);
}

static void facts_sort(fact_list *l)
{
	if (l->count > 1)
		qsort(l->items, l->count, sizeof *l->items, fact_cmp);
}

/* Compares two sorted lists; on a difference writes the first one to why. */
static bool facts_equal(const fact_list *a, const fact_list *b, char *why, size_t why_size)
{
	size_t i = 0;
	for (; i < a->count && i < b->count; i++) {
		const fact *x = &a->items[i], *y = &b->items[i];
		if (strcmp(x->path, y->path) != 0) {
			snprintf(why, why_size, "file lists differ at %s / %s", x->path, y->path);
			return false;
		}
		if (x->bytes != y->bytes || strcmp(x->sha256, y->sha256) != 0) {
			snprintf(why, why_size,
			         "%s: %llu bytes sha256 %.12s... against %llu bytes sha256 %.12s...",
			         x->path[0] ? x->path : "(the file)", (unsigned long long)x->bytes, x->sha256,
			         (unsigned long long)y->bytes, y->sha256);
			return false;
		}
	}
	if (a->count != b->count) {
		snprintf(why, why_size, "%zu files against %zu", a->count, b->count);
		return false;
	}
	return true;
}

static char *facts_json(local_state *st, const fact_list *l)
{
	json_object *arr = json_object_new_array();
	if (arr == NULL)
		return NULL;
	char *text = NULL;
	for (size_t i = 0; i < l->count; i++)
		if (rk_xfer_fact_add(arr, l->items[i].path, l->items[i].bytes, l->items[i].sha256) != 0)
			goto done;
	text = lu_json_out(st, arr);
done:
	json_object_put(arr);
	return text;
}

relay_status facts_settle(local_state *st, fact_list *sent, fact_list *arrived, const char *from,
                          const char *to, char **facts_out, relay_error *err)
{
	facts_sort(sent);
	facts_sort(arrived);
	char why[256];
	if (!facts_equal(sent, arrived, why, sizeof why))
		return to ? lu_err(st, err, RELAY_E_INTEGRITY, 0,
		                   "push of %s to %s failed its SHA-256 check: %s", from, to, why)
		          : lu_err(st, err, RELAY_E_INTEGRITY, 0, "pull of %s failed its SHA-256 check: %s",
		                   from, why);
	if (facts_out == NULL)
		return RELAY_OK;
	*facts_out = facts_json(st, arrived);
	return *facts_out ? RELAY_OK : lu_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

/* SHA-256 of what remains readable from fd (from offset 0). */
int hash_fd(int fd, char *buf, size_t bufsize, char out[65], uint64_t *bytes)
{
	rk_sha256 hash;
	if (!rk_sha256_begin(&hash))
		return ENOMEM;
	uint64_t total = 0;
	off_t off = 0;
	int rc = 0;
	for (;;) {
		ssize_t n = pread(fd, buf, bufsize, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = errno;
			break;
		}
		if (n == 0)
			break;
		rk_sha256_update(&hash, buf, (size_t)n);
		total += (uint64_t)n;
		off += n;
	}
	if (rc == 0)
		rk_sha256_end(&hash, out);
	rk_sha256_discard(&hash);
	*bytes = total;
	return rc;
}
