/* mcp-relay entry point (spine under construction). */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("mcp-relay %s\n", RELAY_VERSION);
		return 0;
	}
	fprintf(stderr, "mcp-relay: not yet serving\n");
	return 2;
}
