/* mcp-relay review: the evidence module's review command (evidence/review.h). */
#include "cli/cli.h"
#include "evidence/review.h"

int review_main(int argc, char **argv)
{
	return review_cli_main(argc, argv);
}
