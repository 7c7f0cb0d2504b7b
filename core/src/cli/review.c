/* mcp-relay review: delegates to the evidence module's review command. */
#include <stdio.h>

#include "cli/cli.h"

/* evidence/review.c provides it; absent until that module is linked in. */
int review_cli_main(int argc, char **argv) __attribute__((weak));

int review_main(int argc, char **argv)
{
	if (review_cli_main == NULL) {
		fprintf(stderr, "mcp-relay: review is not built into this relay\n");
		return 2;
	}
	return review_cli_main(argc, argv);
}
