/*
 * bench/mcp/floor.c — the driver's floor for mcp-relay's answers: a server that does no work
 * and replies to each request with the bytes mcp-relay itself gave to the same request
 * (recorded by floor.sh), only the id changed. Whatever bench_mcp.py measures against it is the
 * cost of the driver (reading, splitting and json.loads of answers of this size), not of a
 * server.
 *
 *   floor DIR     DIR holds initialize.json, tools_list.json, status.json, invalid.json: one
 *                 recorded response line each, with the id 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *load(const char *dir, const char *name)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		perror(path);
		exit(2);
	}
	static char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Keep what follows "\"id\":1," : the rest of the response. */
	const char *rest = strstr(buf, "\"id\":1,");
	if (rest == NULL) {
		fprintf(stderr, "%s: no \"id\":1\n", path);
		exit(2);
	}
	return strdup(rest + 7);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: floor DIR\n");
		return 2;
	}
	char *init = load(argv[1], "initialize.json");
	char *list = load(argv[1], "tools_list.json");
	char *status = load(argv[1], "status.json");
	char *invalid = load(argv[1], "invalid.json");
	static char line[1 << 20];
	static char out[1 << 16];
	while (fgets(line, sizeof line, stdin)) {
		const char *id = strstr(line, "\"id\":");
		if (id == NULL)
			continue; /* a notification */
		long n = strtol(id + 5, NULL, 10);
		const char *rest = strstr(line, "\"initialize\"") ? init
		                   : strstr(line, "tools/list")   ? list
		                   : strstr(line, "relay_script") ? invalid
		                                                  : status;
		int len = snprintf(out, sizeof out, "{\"jsonrpc\":\"2.0\",\"id\":%ld,%s", n, rest);
		if (len < 0 || (size_t)len >= sizeof out)
			return 1;
		/* One write per answer, as soon as the request is read. */
		if (write(1, out, (size_t)len) != len)
			return 1;
	}
	return 0;
}
