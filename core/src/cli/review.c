/*
 * `mcp-relay review [--html] [--output FILE] DIR` (cli.h): the review data
 * of a package (evidence/review.h) as JSON, or a freshly derived viewer
 * page (evidence/viewer.h).
 *   review DIR               prints the review data as JSON (two-space indent)
 *   review --html DIR        prints a freshly derived viewer page instead
 *   review --html --output FILE DIR
 *                            writes the page to FILE (created, never inside DIR)
 * Never writes into DIR: a sealed package's index.html is covered by its
 * manifest. Exit status: 0 verified and derived; 1 verification failed (the
 * JSON is still printed, verification.ok false); 2 usage error or unreadable
 * folder. Output goes to standard output, diagnostics to standard error.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "evidence/review.h"
#include "evidence/viewer.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

static void review_usage(FILE *to)
{
	fputs("usage: mcp-relay review [--html [--output FILE]] DIR\n"
	      "  Verifies the evidence package DIR against its manifest, derives its steps and\n"
	      "  verdicts under the current rules, and prints them as JSON.\n"
	      "  --html           print a freshly derived viewer page instead of JSON\n"
	      "  --output FILE    with --html: write the page to FILE (outside DIR) instead\n"
	      "Exit status: 0 verified and derived; 1 verification failed (the review is still\n"
	      "printed, with verification.ok false); 2 usage error or unreadable folder.\n"
	      "DIR is never written to.\n",
	      to);
}

static bool write_stdout(const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		data += n;
		len -= (size_t)n;
	}
	return true;
}

int review_main(int argc, char **argv)
{
	bool html = false;
	const char *output = NULL, *dir = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--html") == 0) {
			html = true;
		} else if (strcmp(argv[i], "--output") == 0 && i + 1 < argc) {
			output = argv[++i];
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			review_usage(stdout);
			return 0;
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			fprintf(stderr, "mcp-relay review: unknown option %s\n", argv[i]);
			review_usage(stderr);
			return 2;
		} else if (dir == NULL) {
			dir = argv[i];
		} else {
			fprintf(stderr, "mcp-relay review: only one folder can be reviewed at a time\n");
			review_usage(stderr);
			return 2;
		}
	}
	if (dir == NULL || (output != NULL && !html)) {
		if (dir == NULL)
			fprintf(stderr, "mcp-relay review: name the evidence package folder to review\n");
		else
			fprintf(stderr, "mcp-relay review: --output needs --html\n");
		review_usage(stderr);
		return 2;
	}
	char real[PATH_MAX];
	struct stat st;
	if (realpath(dir, real) == NULL || stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "mcp-relay review: cannot read the folder %s: %s\n", dir,
		        errno ? strerror(errno) : "not a folder");
		return 2;
	}
	/* Verify the folder as named (a link given on the command line is
	 * resolved; links inside the package are refused by verification). */
	json_object *review = NULL;
	relay_error err = {0};
	evidence_review_options opts = {.verify = true};
	if (evidence_review_derive(real, &opts, &review, &err) != RELAY_OK) {
		fprintf(stderr, "mcp-relay review: %s\n", err.message);
		return 2;
	}
	int rc = evidence_review_verified(review) ? 0 : 1;
	strbuf out = STRBUF_INIT;
	if (html)
		evidence_viewer_render(review, &out);
	else {
		jsonx_write(&out, review, JSONX_PRETTY);
		strbuf_putc(&out, '\n');
	}
	if (!strbuf_ok(&out)) {
		fprintf(stderr, "mcp-relay review: out of memory\n");
		rc = 2;
	} else if (output != NULL) {
		char *parent = fs_dirname(output);
		char rp[PATH_MAX];
		size_t rl = strlen(real);
		if (parent == NULL || realpath(parent, rp) == NULL) {
			fprintf(stderr, "mcp-relay review: cannot write %s: its folder does not exist\n",
			        output);
			rc = 2;
		} else if (strncmp(rp, real, rl) == 0 && (rp[rl] == '/' || rp[rl] == '\0')) {
			fprintf(
			    stderr,
			    "mcp-relay review: refusing to write %s inside the package (its manifest covers "
			    "index.html); choose a file outside it\n",
			    output);
			rc = 2;
		} else if (fs_write_durable(output, out.data, out.len, 0600, &err) != RELAY_OK) {
			fprintf(stderr, "mcp-relay review: %s\n", err.message);
			rc = 2;
		}
		free(parent);
	} else if (!write_stdout(out.data, out.len)) {
		fprintf(stderr, "mcp-relay review: cannot write to standard output: %s\n", strerror(errno));
		rc = 2;
	}
	if (rc == 1) {
		json_object *errs = jsonx_get_array(jsonx_get_obj(review, "verification"), "errors");
		for (size_t i = 0; errs && i < json_object_array_length(errs); i++)
			fprintf(stderr, "mcp-relay review: %s\n",
			        json_object_get_string(json_object_array_get_idx(errs, i)));
	}
	strbuf_free(&out);
	json_object_put(review);
	return rc;
}
