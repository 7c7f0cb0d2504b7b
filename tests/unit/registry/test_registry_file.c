/*
 * The task registry (spec/lifecycle.md §10, registry/registry.h): the VM-table
 * rules, choosing the file, adding and removing rows with their ownership
 * rules and the file's line endings, refusing to overwrite a change made
 * outside the lock, and several processes updating one file at once under
 * the real flock without losing a row.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "registry/registry.h"
#include "util/fsutil.h"

#define VALID_LF                                                                                             \
	"# Agents\n\n## Using VMs\n\n| Machine | OS | Task Name | Agent | Project | Start Date |\n"          \
	"| --- | :-- | --: | :--: | --- | --- |\n"                                                           \
	"| mini | macos26 | other-task | codex | /p | 2026-01-01 |\n\n## Next\n"

typedef struct fixture {
	char root[256];
	char file[320];
} fixture;

static int setup(void **state)
{
	fixture *fx = calloc(1, sizeof *fx);
	snprintf(fx->root, sizeof fx->root, "/tmp/lifecycle-registry-XXXXXX");
	if (fx == NULL || mkdtemp(fx->root) == NULL)
		return -1;
	snprintf(fx->file, sizeof fx->file, "%s/registry.md", fx->root);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	fixture *fx = *state;
	relay_error err;
	fs_remove_tree(fx->root, &err);
	free(fx);
	return 0;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *read_text(const char *path)
{
	char *data = NULL;
	size_t len = 0;
	relay_error err;
	assert_int_equal(fs_read_file(path, 1 << 20, &data, &len, &err), RELAY_OK);
	return data;
}

static int validate(const char *text, char *why, size_t why_len)
{
	return registry_validate_text(text, strlen(text), why, why_len);
}

static registry_row row_for(const char *task, const char *agent)
{
	registry_row row = {
	    {"localhost (machine-fake x)", "ubuntu2404", task, agent, "/home/p", "2026-09-24-10-11-12-Z"}};
	return row;
}

/* ---- the VM table ----------------------------------------------------------- */

static void test_valid_tables(void **state)
{
	(void)state;
	char why[512];
	assert_int_equal(validate(VALID_LF, why, sizeof why), 0);
	assert_int_equal(validate(registry_managed_template, why, sizeof why), 0);
	/* CRLF, and a section line with trailing spaces. */
	assert_int_equal(
	    validate("## Using VMs  \r\n| Machine | OS | Task Name | Agent | Project | Start Date |\r\n"
	             "| -- | -- | -- | -- | -- | -- |\r\n",
	             why, sizeof why),
	    0);
}

static void test_invalid_tables(void **state)
{
	(void)state;
	char why[512];
	static const struct {
		const char *text;
		const char *reason;
	} cases[] = {
	    {"# nothing\n", "exactly one '## Using VMs' section"},
	    {"## Using VMs\n## Using VMs\n", "exactly one '## Using VMs' section"},
	    {"## Using VMs\n\nno table\n", "header row"},
	    /* The header lies after the next heading: outside the section. */
	    {"## Using VMs\n## Other\n| Machine | OS | Task Name | Agent | Project | Start Date |\n| -- | -- "
	     "| -- "
	     "| -- | -- | -- |\n",
	     "header row"},
	    {"## Using VMs\n| Machine | OS | Task Name | Agent | Project | Start Date |\n| Machine | OS | "
	     "Task Name "
	     "| Agent | Project | Start Date |\n",
	     "header row"},
	    {"## Using VMs\n| Machine | OS | Task Name | Agent | Project | Start Date |\n| - | - | - | - | - "
	     "| - |\n",
	     "separator"},
	    {"## Using VMs\n| Machine | OS | Task Name | Agent | Project | Start Date |\n| -- | -- | -- | -- "
	     "| -- |\n",
	     "separator"},
	    {"## Using VMs\n| Machine | OS | Task Name | Agent | Project | Start Date |\n| -- | -- | -- | -- "
	     "| -- | -- "
	     "|\n| a | b | c |\n",
	     "exactly six cells"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		why[0] = '\0';
		assert_int_equal(validate(cases[i].text, why, sizeof why), -1);
		if (strstr(why, cases[i].reason) == NULL)
			fail_msg("case %zu: '%s' does not mention '%s'", i, why, cases[i].reason);
	}
}

static void test_rows_end_at_the_first_line_without_a_pipe(void **state)
{
	fixture *fx = *state;
	/* The table after the blank line is not part of the VM table. */
	write_text(fx->file,
	           "## Using VMs\n| Machine | OS | Task Name | Agent | Project | Start Date |\n"
	           "| -- | -- | -- | -- | -- | -- |\n| a | b | c | d | e | f |\n\n| not | a | row |\n");
	registry_target t = {fx->file, false};
	char why[512];
	registry_row row = row_for("relay-x-1", "mcp-relay s");
	assert_int_equal(registry_add(&t, &row, why, sizeof why), REGISTRY_CHANGED);
	char *text = read_text(fx->file);
	assert_non_null(strstr(
	    text, "| a | b | c | d | e | f |\n| localhost (machine-fake x) | ubuntu2404 | "
	          "relay-x-1 | mcp-relay s | /home/p | 2026-09-24-10-11-12-Z |\n\n| not | a | row |\n"));
	free(text);
}

static void test_check_file(void **state)
{
	fixture *fx = *state;
	char why[1024];
	assert_int_equal(registry_check_file(fx->root, why, sizeof why), -1);
	assert_non_null(strstr(why, "regular file"));
	write_text(fx->file, "# no table\n");
	assert_int_equal(registry_check_file(fx->file, why, sizeof why), -1);
	assert_non_null(strstr(why, "must hold a valid VM table"));
	write_text(fx->file, VALID_LF);
	assert_int_equal(registry_check_file(fx->file, why, sizeof why), 0);
	/* A link to a valid file is followed. */
	char link[400];
	snprintf(link, sizeof link, "%s/link.md", fx->root);
	assert_int_equal(symlink(fx->file, link), 0);
	assert_int_equal(registry_check_file(link, why, sizeof why), 0);
}

static void test_resolve(void **state)
{
	fixture *fx = *state;
	registry_target t;
	registry_resolve("/etc/team.md", false, fx->root, "/state", &t);
	assert_string_equal(t.path, "/etc/team.md");
	assert_false(t.managed);
	registry_target_free(&t);
	/* No AGENTS.md: the managed file under the state root. */
	registry_resolve(NULL, false, fx->root, "/state", &t);
	assert_string_equal(t.path, "/state/registry.md");
	assert_true(t.managed);
	registry_target_free(&t);
	char agents[400];
	snprintf(agents, sizeof agents, "%s/AGENTS.md", fx->root);
	write_text(agents, "# Agents\n\nno table\n");
	registry_resolve(NULL, false, fx->root, "/state", &t);
	assert_true(t.managed);
	registry_target_free(&t);
	write_text(agents, VALID_LF);
	registry_resolve(NULL, false, fx->root, "/state", &t);
	assert_string_equal(t.path, agents);
	assert_false(t.managed);
	registry_target_free(&t);
}

/* ---- rows ------------------------------------------------------------------ */

static void test_managed_add_remove_and_ownership(void **state)
{
	fixture *fx = *state;
	char managed_dir[400], why[512];
	snprintf(managed_dir, sizeof managed_dir, "%s/state", fx->root);
	char path[500];
	snprintf(path, sizeof path, "%s/registry.md", managed_dir);
	registry_target t = {path, true};
	registry_row mine = row_for("relay-demo-1a2b3c4d", "mcp-relay s1");
	assert_int_equal(registry_add(&t, &mine, why, sizeof why), REGISTRY_CHANGED);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(stat(managed_dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	char *after_add = read_text(path);
	assert_int_equal(strncmp(after_add, registry_managed_template, strlen(registry_managed_template)), 0);
	/* Adding the identical row again changes nothing. */
	assert_int_equal(registry_add(&t, &mine, why, sizeof why), REGISTRY_UNCHANGED);
	char *again = read_text(path);
	assert_string_equal(after_add, again);
	/* The same task with other cells: another owner. */
	registry_row theirs = row_for("relay-demo-1a2b3c4d", "mcp-relay other-session");
	assert_int_equal(registry_add(&t, &theirs, why, sizeof why), REGISTRY_CONFLICT);
	assert_non_null(strstr(why, "already registered by a different owner or duplicated"));
	assert_int_equal(registry_remove(&t, &theirs, why, sizeof why), REGISTRY_CONFLICT);
	assert_non_null(strstr(why, "ownership does not match"));
	/* An absent row is not an error. */
	registry_row absent = row_for("relay-none-00000000", "mcp-relay s1");
	assert_int_equal(registry_remove(&t, &absent, why, sizeof why), REGISTRY_UNCHANGED);
	assert_int_equal(registry_remove(&t, &mine, why, sizeof why), REGISTRY_CHANGED);
	char *after_remove = read_text(path);
	assert_string_equal(after_remove, registry_managed_template);
	/* The lock sidecar stays. */
	char lock[600];
	snprintf(lock, sizeof lock, "%s.mcp-relay.lock", path);
	assert_int_equal(access(lock, F_OK), 0);
	free(after_add);
	free(again);
	free(after_remove);
}

static void test_duplicate_rows_are_a_conflict(void **state)
{
	fixture *fx = *state;
	write_text(
	    fx->file,
	    "## Using VMs\n| Machine | OS | Task Name | Agent | Project | Start Date |\n"
	    "| -- | -- | -- | -- | -- | -- |\n| a | b | dup | d | e | f |\n| a | b | dup | d | e | f |\n");
	registry_target t = {fx->file, false};
	registry_row row = {{"a", "b", "dup", "d", "e", "f"}};
	char why[512];
	assert_int_equal(registry_add(&t, &row, why, sizeof why), REGISTRY_CONFLICT);
	assert_int_equal(registry_remove(&t, &row, why, sizeof why), REGISTRY_CONFLICT);
}

static void test_line_endings_and_missing_final_newline(void **state)
{
	fixture *fx = *state;
	char why[512];
	registry_target t = {fx->file, false};
	registry_row row = row_for("relay-crlf-00000001", "mcp-relay s");
	write_text(fx->file, "## Using VMs\r\n| Machine | OS | Task Name | Agent | Project | Start Date |\r\n"
	                     "| -- | -- | -- | -- | -- | -- |\r\n| a | b | c | d | e | f |");
	assert_int_equal(registry_add(&t, &row, why, sizeof why), REGISTRY_CHANGED);
	char *text = read_text(fx->file);
	assert_string_equal(
	    text, "## Using VMs\r\n| Machine | OS | Task Name | Agent | Project | Start Date |\r\n"
	          "| -- | -- | -- | -- | -- | -- |\r\n| a | b | c | d | e | f |\r\n"
	          "| localhost (machine-fake x) | ubuntu2404 | relay-crlf-00000001 | mcp-relay s | /home/p | "
	          "2026-09-24-10-11-12-Z |\r\n");
	free(text);
	assert_int_equal(registry_remove(&t, &row, why, sizeof why), REGISTRY_CHANGED);
	text = read_text(fx->file);
	assert_string_equal(text,
	                    "## Using VMs\r\n| Machine | OS | Task Name | Agent | Project | Start Date |\r\n"
	                    "| -- | -- | -- | -- | -- | -- |\r\n| a | b | c | d | e | f |\r\n");
	free(text);
}

static void test_cells_are_checked(void **state)
{
	fixture *fx = *state;
	write_text(fx->file, VALID_LF);
	registry_target t = {fx->file, false};
	char why[512];
	const char *bad[] = {"", " padded", "pipe|inside", "line\nbreak", "tab\tinside"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		registry_row row = row_for("relay-ok-00000000", bad[i]);
		assert_int_equal(registry_add(&t, &row, why, sizeof why), REGISTRY_INVALID);
		assert_non_null(strstr(why, "Agent"));
	}
	char *text = read_text(fx->file);
	assert_string_equal(text, VALID_LF);
	free(text);
}

static void test_link_is_updated_at_its_target(void **state)
{
	fixture *fx = *state;
	write_text(fx->file, VALID_LF);
	char link[400], why[512];
	snprintf(link, sizeof link, "%s/link.md", fx->root);
	assert_int_equal(symlink(fx->file, link), 0);
	registry_target t = {link, false};
	registry_row row = row_for("relay-link-00000000", "mcp-relay s");
	assert_int_equal(registry_add(&t, &row, why, sizeof why), REGISTRY_CHANGED);
	struct stat st;
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	char *text = read_text(fx->file);
	assert_non_null(strstr(text, "relay-link-00000000"));
	free(text);
}

/* A transform that lets an editor change the file behind the lock's back. */
static registry_outcome meddling_transform(const char *text, size_t len, strbuf *out, void *ctx, char *errbuf,
                                           size_t errlen)
{
	(void)errbuf;
	(void)errlen;
	const char *path = ctx;
	FILE *f = fopen(path, "a");
	fputs("| x | y | edited-outside | w | v | u |\n", f);
	fclose(f);
	strbuf_append(out, text, len);
	strbuf_puts(out, "| our | change | t | a | p | s |\n");
	return REGISTRY_CHANGED;
}

static void test_outside_change_is_never_overwritten(void **state)
{
	fixture *fx = *state;
	write_text(fx->file, VALID_LF);
	registry_target t = {fx->file, false};
	char why[512];
	assert_int_equal(registry_update(&t, meddling_transform, fx->file, why, sizeof why),
	                 REGISTRY_OUTSIDE_CHANGE);
	assert_non_null(strstr(why, "changed outside its lock; retry without overwriting those changes"));
	char *text = read_text(fx->file);
	assert_non_null(strstr(text, "edited-outside"));
	assert_null(strstr(text, "| our | change |"));
	free(text);
	/* No temporary file is left behind. */
	char cmd[600];
	snprintf(cmd, sizeof cmd, "ls -a %s | grep -q '\\.tmp$'", fx->root);
	assert_int_not_equal(system(cmd), 0);
}

/* ---- several processes at once ---------------------------------------------------- */

#define WRITERS   4
#define ROWS_EACH 20

static void test_processes_fighting_over_the_registry_lose_no_row(void **state)
{
	fixture *fx = *state;
	write_text(fx->file, VALID_LF);
	pid_t pids[WRITERS];
	for (int w = 0; w < WRITERS; w++) {
		pids[w] = fork();
		assert_true(pids[w] >= 0);
		if (pids[w] == 0) {
			registry_target t = {fx->file, false};
			char why[512];
			int failures = 0;
			for (int i = 0; i < ROWS_EACH; i++) {
				char task[64], agent[64];
				snprintf(task, sizeof task, "relay-w%d-%08d", w, i);
				snprintf(agent, sizeof agent, "mcp-relay writer-%d", w);
				registry_row row = row_for(task, agent);
				if (registry_add(&t, &row, why, sizeof why) != REGISTRY_CHANGED)
					failures++;
				/* Every odd row is removed again right away. */
				if (i % 2 == 1 &&
				    registry_remove(&t, &row, why, sizeof why) != REGISTRY_CHANGED)
					failures++;
			}
			_exit(failures == 0 ? 0 : 1);
		}
	}
	for (int w = 0; w < WRITERS; w++) {
		int status = 0;
		assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	char *text = read_text(fx->file);
	char why[512];
	assert_int_equal(registry_validate_text(text, strlen(text), why, sizeof why), 0);
	for (int w = 0; w < WRITERS; w++) {
		for (int i = 0; i < ROWS_EACH; i++) {
			char needle[80];
			snprintf(needle, sizeof needle, "| relay-w%d-%08d |", w, i);
			if (i % 2 == 0 && strstr(text, needle) == NULL)
				fail_msg("row %s was lost", needle);
			if (i % 2 == 1 && strstr(text, needle) != NULL)
				fail_msg("row %s was not removed", needle);
		}
	}
	assert_non_null(strstr(text, "| mini | macos26 | other-task | codex | /p | 2026-01-01 |\n"));
	assert_non_null(strstr(text, "\n\n## Next\n"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_valid_tables),
	    cmocka_unit_test(test_invalid_tables),
	    cmocka_unit_test_setup_teardown(test_rows_end_at_the_first_line_without_a_pipe, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_check_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_resolve, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_managed_add_remove_and_ownership, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_duplicate_rows_are_a_conflict, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_line_endings_and_missing_final_newline, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cells_are_checked, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_link_is_updated_at_its_target, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_outside_change_is_never_overwritten, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_processes_fighting_over_the_registry_lose_no_row, setup,
	                                    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
