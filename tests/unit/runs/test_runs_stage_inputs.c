/*
 * relay_stage's host inputs without a session or a guest
 * (runs/stage_inputs.h; spec/tools.md §3.5 step 2, spec/guest.md §3.4 step 1), on
 * real folders under /tmp: the workspace and support files resolved under
 * the project folder and counted, each refusal with its code and sentence
 * (a path outside the project, a link, colliding destinations, the
 * 512 MiB limit, checked before anything is read), and the hashes, with a
 * source that changes after it was walked caught as integrity-failed.
 */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "runs/stage_inputs.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/sha256.h"

typedef struct project {
	char root[128];           /* the temporary folder */
	char dir[PATH_MAX];       /* P′: root/project, real */
	char path[PATH_MAX + 64]; /* scratch */
} project;

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static const char *at(project *p, const char *rel)
{
	snprintf(p->path, sizeof p->path, "%s/%s", p->dir, rel);
	return p->path;
}

/* P′ with ws/a.txt ("alpha\n"), ws/sub/b.txt ("bravo!\n"), tool.sh
 * ("#!/bin/sh\n"), and a folder outside it. */
static void project_make(project *p)
{
	snprintf(p->root, sizeof p->root, "/tmp/relay-unit-stage-XXXXXX");
	assert_non_null(mkdtemp(p->root));
	char dir[sizeof p->root + 16];
	snprintf(dir, sizeof dir, "%s/project", p->root);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_non_null(realpath(dir, p->dir));
	assert_int_equal(mkdir(at(p, "ws"), 0700), 0);
	assert_int_equal(mkdir(at(p, "ws/sub"), 0700), 0);
	write_file(at(p, "ws/a.txt"), "alpha\n");
	write_file(at(p, "ws/sub/b.txt"), "bravo!\n");
	write_file(at(p, "tool.sh"), "#!/bin/sh\n");
	snprintf(dir, sizeof dir, "%s/outside", p->root);
	assert_int_equal(mkdir(dir, 0700), 0);
}

static void project_done(project *p)
{
	relay_error err;
	assert_int_equal(fs_remove_tree(p->root, &err), RELAY_OK);
}

/* Checks `args_text` (relay_stage arguments); returns its rc, with `in`
 * and `o` to look at and free. */
static int check(project *p, const char *args_text, json_object **args, stage_inputs *in, relay_outcome *o)
{
	*args = jsonx_parse_str(args_text, NULL, 0);
	assert_non_null(*args);
	memset(in, 0, sizeof *in);
	*o = (relay_outcome)OUTCOME_INIT;
	return stage_inputs_check(p->dir, p->dir, *args, in, o);
}

static void done(json_object *args, stage_inputs *in, relay_outcome *o)
{
	stage_inputs_free(in);
	outcome_free(o);
	json_object_put(args);
}

static void test_inputs_counted(void **state)
{
	(void)state;
	project p;
	project_make(&p);
	json_object *args;
	stage_inputs in;
	relay_outcome o;
	assert_int_equal(
	    check(&p,
	          "{\"workspace\":\"ws\",\"files\":[{\"local\":\"tool.sh\",\"path\":\"bin/tool\"},"
	          "{\"local\":\"ws/a.txt\",\"path\":\"a.txt\"}]}",
	          &args, &in, &o),
	    0);
	assert_null(o.code);
	assert_true(in.has_workspace);
	assert_int_equal(in.tree.count, 2);
	assert_int_equal(in.tree.total_bytes, 6 + 7);
	assert_int_equal(in.file_count, 2);
	assert_string_equal(in.files[0].path, "bin/tool");
	assert_string_equal(in.files[0].src.rel, "tool.sh");
	assert_int_equal(in.total_bytes, 6 + 7 + 10 + 6);

	/* The hashes: every workspace file and support file, by content. */
	stage_hash_failure failure;
	assert_int_equal(stage_inputs_hash(p.dir, &in, &failure), 0);
	char expected[65];
	sha256_buffer_hex("#!/bin/sh\n", 10, expected);
	assert_string_equal(in.files[0].sha256, expected);
	assert_int_equal(in.files[0].src.bytes, 10);
	sha256_buffer_hex("alpha\n", 6, expected);
	assert_string_equal(in.files[1].sha256, expected);
	for (size_t i = 0; i < in.tree.count; i++) {
		const char *text = strcmp(in.tree.files[i].rel, "a.txt") == 0 ? "alpha\n" : "bravo!\n";
		sha256_buffer_hex(text, strlen(text), expected);
		assert_string_equal(in.tree.files[i].sha256, expected);
	}
	done(args, &in, &o);

	/* No workspace and no files: nothing to stage from the host. */
	assert_int_equal(check(&p, "{}", &args, &in, &o), 0);
	assert_false(in.has_workspace);
	assert_int_equal(in.file_count, 0);
	assert_int_equal(in.total_bytes, 0);
	done(args, &in, &o);
	project_done(&p);
}

static void assert_refusal(project *p, const char *args_text, const char *code, const char *message_start)
{
	json_object *args;
	stage_inputs in;
	relay_outcome o;
	assert_int_equal(check(p, args_text, &args, &in, &o), -1);
	assert_non_null(o.code);
	assert_string_equal(o.code, code);
	assert_non_null(o.message);
	if (strncmp(o.message, message_start, strlen(message_start)) != 0)
		fail_msg("message \"%s\" does not start with \"%s\"", o.message, message_start);
	done(args, &in, &o);
}

static void test_refusals(void **state)
{
	(void)state;
	project p;
	project_make(&p);
	char outside[PATH_MAX + 64];
	snprintf(outside, sizeof outside, "{\"workspace\":\"%s/outside\"}", p.root);
	assert_refusal(&p, outside, "path-refused", "workspace refused: ");
	assert_refusal(&p, "{\"workspace\":\"ws/../..\"}", "path-refused", "workspace refused: ");
	assert_refusal(&p, "{\"workspace\":\"tool.sh\"}", "path-refused", "workspace refused: ");
	assert_refusal(&p, "{\"files\":[{\"local\":\"ws\",\"path\":\"x\"}]}", "path-refused",
	               "files[0].local refused: ");
	/* A link inside the workspace is refused with the workspace. */
	assert_int_equal(symlink("/etc/passwd", at(&p, "ws/link")), 0);
	assert_refusal(&p, "{\"workspace\":\"ws\"}", "path-refused", "workspace refused: ");
	assert_int_equal(unlink(at(&p, "ws/link")), 0);
	/* A link as a support file: the second file names it. */
	assert_int_equal(symlink("tool.sh", at(&p, "tool-link")), 0);
	assert_refusal(&p,
	               "{\"files\":[{\"local\":\"tool.sh\",\"path\":\"t\"},{\"local\":\"tool-link\","
	               "\"path\":\"u\"}]}",
	               "path-refused", "files[1].local refused: ");

	/* Two files for one destination, or a file and a folder of it. */
	assert_refusal(&p,
	               "{\"files\":[{\"local\":\"tool.sh\",\"path\":\"bin/t\"},{\"local\":\"ws/a.txt\","
	               "\"path\":\"bin/t\"}]}",
	               "invalid-input",
	               "Invalid relay_stage input: /files names support/bin/t and support/bin/t, which "
	               "collide; give each file its own destination");
	assert_refusal(&p,
	               "{\"files\":[{\"local\":\"tool.sh\",\"path\":\"bin/t/x\"},{\"local\":\"ws/a.txt\","
	               "\"path\":\"bin/t\"}]}",
	               "invalid-input",
	               "Invalid relay_stage input: /files names support/bin/t and support/bin/t/x, which "
	               "collide");
	/* Siblings that only share a prefix do not collide ("bin/t" and "bin/t-2"). */
	json_object *args;
	stage_inputs in;
	relay_outcome o;
	assert_int_equal(
	    check(&p,
	          "{\"files\":[{\"local\":\"tool.sh\",\"path\":\"bin/t\"},{\"local\":\"ws/a.txt\","
	          "\"path\":\"bin/t-2\"}]}",
	          &args, &in, &o),
	    0);
	done(args, &in, &o);

	/* Over 512 MiB in all (a sparse file: its size counts, nothing is read). */
	int fd = open(at(&p, "ws/big.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)STAGE_MAX_BYTES - 12), 0);
	assert_int_equal(close(fd), 0);
	assert_refusal(&p, "{\"workspace\":\"ws\"}", "staging-limit",
	               "the staging request holds 3 files and 536870913 bytes (workspace 3 files, 536870913 "
	               "bytes; support files 0); at most 10000 files and 536870912 bytes (512 MiB) are "
	               "accepted; nothing was sent");
	/* Exactly the limit passes. */
	assert_int_equal(truncate(at(&p, "ws/big.bin"), (off_t)STAGE_MAX_BYTES - 13), 0);
	assert_int_equal(check(&p, "{\"workspace\":\"ws\"}", &args, &in, &o), 0);
	assert_int_equal(in.total_bytes, STAGE_MAX_BYTES);
	done(args, &in, &o);
	project_done(&p);
}

static void test_a_source_changed_after_the_walk(void **state)
{
	(void)state;
	project p;
	project_make(&p);
	json_object *args;
	stage_inputs in;
	relay_outcome o;
	assert_int_equal(check(&p, "{\"workspace\":\"ws\"}", &args, &in, &o), 0);
	/* Grown after it was walked: the hash sees other bytes. */
	write_file(at(&p, "ws/sub/b.txt"), "bravo, longer now\n");
	stage_hash_failure failure;
	assert_int_equal(stage_inputs_hash(p.dir, &in, &failure), -1);
	assert_true(failure.changed);
	assert_true(failure.is_workspace);
	assert_non_null(strstr(failure.why, "b.txt"));
	done(args, &in, &o);

	/* A support file replaced by another file after the check: refused
	 * though its bytes are the same (host_paths.h rule 6). */
	assert_int_equal(check(&p, "{\"files\":[{\"local\":\"tool.sh\",\"path\":\"t\"}]}", &args, &in, &o),
	                 0);
	/* The same bytes in another file (made while the old one still exists,
	 * so it cannot reuse its inode), renamed over it. */
	char replaced[sizeof p.path];
	snprintf(replaced, sizeof replaced, "%s", at(&p, "tool.sh"));
	write_file(at(&p, "tool.sh.new"), "#!/bin/sh\n");
	assert_int_equal(rename(p.path, replaced), 0);
	assert_int_equal(stage_inputs_hash(p.dir, &in, &failure), -1);
	assert_false(failure.is_workspace);
	assert_non_null(strstr(failure.why, "tool.sh"));
	done(args, &in, &o);
	project_done(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_inputs_counted),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_a_source_changed_after_the_walk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
