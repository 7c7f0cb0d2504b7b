/*
 * receiver/cmds.c — see cmds.h.
 */
#include "cmds.h"

#include "../receiver_protocol.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture.h"
#include "failpoint.h"
#include "frame.h"
#include "fsx.h"
#include "json.h"
#include "lock.h"
#include "proc.h"
#include "run.h"
#include "scan.h"
#include "sha256.h"
#include "state.h"
#include "tar.h"

typedef struct opts {
	const char *root, *base, *session, *out, *capture, *execution, *id, *wait_ms, *every_ms;
	int present, image;
	char **pos;
	size_t npos;
} opts;

static const char *const value_options[] = {"root",    "base",     "session",   "out", "capture",
                                            "wait-ms", "every-ms", "execution", "id"};

static const char **opt_slot(opts *o, const char *name)
{
	if (!strcmp(name, "root"))
		return &o->root;
	if (!strcmp(name, "base"))
		return &o->base;
	if (!strcmp(name, "session"))
		return &o->session;
	if (!strcmp(name, "out"))
		return &o->out;
	if (!strcmp(name, "capture"))
		return &o->capture;
	if (!strcmp(name, "wait-ms"))
		return &o->wait_ms;
	if (!strcmp(name, "every-ms"))
		return &o->every_ms;
	if (!strcmp(name, "execution"))
		return &o->execution;
	return &o->id;
}

/* allowed: space-separated option names (without dashes). */
static int parse_opts(int argc, char **argv, const char *allowed, opts *o, char *msg, size_t msg_len)
{
	int i, rest = 0;
	memset(o, 0, sizeof(*o));
	o->pos = xcalloc((size_t)argc + 1, sizeof(char *));
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!rest && strcmp(a, "--") == 0) {
			rest = 1;
			continue;
		}
		if (!rest && strncmp(a, "--", 2) == 0) {
			const char *name = a + 2;
			char pattern[64];
			size_t k;
			int takes_value = 0;
			text_format(pattern, sizeof(pattern), " %s ", name);
			{
				char padded[256];
				text_format(padded, sizeof(padded), " %s ", allowed);
				if (!strstr(padded, pattern)) {
					text_format(msg, msg_len, "unknown option %s", a);
					return -1;
				}
			}
			for (k = 0; k < sizeof(value_options) / sizeof(value_options[0]); k++)
				if (strcmp(name, value_options[k]) == 0)
					takes_value = 1;
			if (takes_value) {
				if (i + 1 >= argc) {
					text_format(msg, msg_len, "option %s needs a value", a);
					return -1;
				}
				*opt_slot(o, name) = argv[++i];
			} else if (strcmp(name, "present") == 0) {
				o->present = 1;
			} else if (strcmp(name, "image") == 0) {
				o->image = 1;
			}
			continue;
		}
		o->pos[o->npos++] = argv[i];
	}
	return 0;
}

static int usage(const char *text)
{
	return frame_error(EXIT_USAGE, text);
}

/* EXIT_DONE when `root` is a usable guest root (root_check); otherwise the
 * usage error frame naming what is wrong with it, and its status. */
static int root_usable(const char *root)
{
	rerr err;
	if (root_check(root, &err) != 0)
		return usage(err.msg);
	return EXIT_DONE;
}

/* What a subcommand takes: its options (as parse_opts), the value options
 * it needs, how many positional arguments (min to max) and its usage line. */
typedef struct cmd_shape {
	const char *allowed, *needed;
	size_t min_pos, max_pos;
	const char *usage;
} cmd_shape;

#define ANY_POS ((size_t)-1)

/* Parses argv into o as `shape` says and checks its root: EXIT_DONE, or the
 * status of the usage error it reported. o->pos is the caller's to free
 * either way. */
static int cmd_begin(int argc, char **argv, const cmd_shape *shape, opts *o)
{
	char msg[256], needed[128], *name, *save = NULL;
	int ok = parse_opts(argc, argv, shape->allowed, o, msg, sizeof(msg)) == 0 &&
	         o->npos >= shape->min_pos && o->npos <= shape->max_pos;
	text_format(needed, sizeof(needed), "%s", shape->needed);
	for (name = strtok_r(needed, " ", &save); ok && name; name = strtok_r(NULL, " ", &save))
		ok = *opt_slot(o, name) != NULL;
	return ok ? root_usable(o->root) : usage(shape->usage);
}

static int parse_ms(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	long long v;
	if (!text || !*text)
		return -1;
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* ---- version, hash -------------------------------------------------------- */

int cmd_version(int argc, char **argv)
{
	jv *f = jv_object();
	(void)argv;
	if (argc != 0) {
		jv_free(f);
		return usage("usage: receiver version");
	}
	jv_set_str(f, RECEIVER_FRAME_RECEIVER, RECEIVER_NAME);
	jv_set_str(f, RECEIVER_FRAME_VERSION, RECEIVER_VERSION);
	jv_set_int(f, RECEIVER_FRAME_PROTOCOL, RECEIVER_PROTOCOL);
	jv_set_str(f, "platform", RECEIVER_PLATFORM);
	frame_emit(f);
	return EXIT_DONE;
}

int cmd_hash(int argc, char **argv)
{
	char hex[65];
	uint64_t bytes = 0;
	rerr err;
	jv *f;
	if (argc != 1 || argv[0][0] != '/')
		return usage("usage: receiver hash FILE (an absolute path)");
	if (hash_regular_file(argv[0], NULL, hex, &bytes, &err) != 0)
		return frame_error(EXIT_INTERNAL, err.msg);
	f = jv_object();
	jv_set_str(f, "path", argv[0]);
	jv_set_str(f, "sha256", hex);
	jv_set_int(f, "bytes", (int64_t)bytes);
	frame_emit(f);
	return EXIT_DONE;
}

/* ---- prepare, init -------------------------------------------------------- */

int cmd_prepare(int argc, char **argv)
{
	opts o;
	char msg[256];
	rerr err;
	jv *list;
	size_t i;
	int status = EXIT_DONE;
	static const cmd_shape shape = {"root", "root", 1, ANY_POS,
	                                "usage: receiver prepare --root R REL..."};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	for (i = 0; i < o.npos; i++) {
		if (!rel_path_ok(o.pos[i])) {
			text_format(msg, sizeof(msg),
			            "invalid directory '%s': relative, no empty, '.' or '..' segment",
			            o.pos[i]);
			status = usage(msg);
			goto cleanup;
		}
	}
	list = jv_array();
	for (i = 0; i < o.npos; i++) {
		if (dir_ensure(o.root, o.pos[i], &err) != 0) {
			jv_free(list);
			status = frame_error(EXIT_INTERNAL, err.msg);
			goto cleanup;
		}
		jv_push(list, jv_str(o.pos[i]));
	}
	{
		jv *f = jv_object();
		jv_set(f, "prepared", list);
		frame_emit(f);
	}
cleanup:
	free(o.pos);
	return status;
}

int cmd_init(int argc, char **argv)
{
	opts o;
	rerr err;
	int created = 0, status = EXIT_DONE;
	static const cmd_shape shape = {"root session", "root session", 0, 0,
	                                "usage: receiver init --root R --session ID"};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	if (!id_valid(o.session)) {
		status = usage("--session must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,119}$");
		goto cleanup;
	}
	if (RECEIVER_FAILPOINT_ERROR("receiver.init.before-write", &err) != 0 ||
	    state_init(o.root, o.session, &created, &err) != 0) {
		status = frame_error(EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	{
		jv *f = jv_object();
		jv_set_str(f, "sessionId", o.session);
		jv_set_bool(f, "created", created);
		frame_emit(f);
	}
cleanup:
	free(o.pos);
	return status;
}

/* ---- scan, archive, unpack, remove ---------------------------------------- */

int cmd_scan(int argc, char **argv)
{
	opts o;
	char rnd[17], hex[65];
	rerr err;
	fact_list facts = {0};
	jv *arr = NULL;
	char *text = NULL, *name = NULL, *path = NULL;
	int status = EXIT_DONE;
	static const cmd_shape shape = {"root base present image", "root base", 1, 1,
	                                "usage: receiver scan --root R --base DIR [--present] [--image] REL"};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	if (scan_collect(o.root, o.base, o.pos[0], o.present, o.image, &facts, &err) != 0) {
		status = frame_error(EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	arr = facts_to_json(&facts);
	{
		buf b;
		buf_init(&b);
		jv_write(&b, arr, 0);
		buf_putc(&b, '\n');
		text = buf_steal(&b);
	}
	if (random_hex(rnd, 8, &err) != 0) {
		status = frame_error(EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	name = xasprintf(".inventory-%s.json", rnd);
	if (durable_write_new(o.root, name, text, strlen(text), NULL, &err) != 0) {
		status = frame_error(EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	path = path_join(o.root, name);
	sha256_hex_of(text, strlen(text), hex);
	{
		jv *f = jv_object();
		jv_set_str(f, "path", path);
		jv_set_str(f, "sha256", hex);
		jv_set_int(f, "bytes", (int64_t)strlen(text));
		frame_emit(f);
	}
cleanup:
	fact_list_free(&facts);
	jv_free(arr);
	free(text);
	free(name);
	free(path);
	free(o.pos);
	return status;
}

int cmd_archive(int argc, char **argv)
{
	opts o;
	rerr err;
	archive_result res;
	int usage_err = 0, status = EXIT_DONE;
	static const cmd_shape shape = {
	    "root base present out", "root base out", 1, ANY_POS,
	    "usage: receiver archive --root R --base DIR [--present] --out R/.archive-<random>.tar "
	    "-- REL..."};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	if (tar_write_archive(o.root, o.base, o.pos, o.npos, o.present, o.out, &res, &usage_err, &err) != 0) {
		status = frame_error(usage_err ? EXIT_USAGE : EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	{
		jv *f = jv_object();
		jv_set_str(f, "path", o.out);
		jv_set_str(f, "sha256", res.sha256);
		jv_set_int(f, "bytes", (int64_t)res.bytes);
		jv_set_int(f, "entries", (int64_t)res.entries);
		frame_emit(f);
	}
cleanup:
	free(o.pos);
	return status;
}

int cmd_unpack(int argc, char **argv)
{
	opts o;
	rerr err;
	unpack_result res;
	int usage_err = 0, status = EXIT_DONE;
	static const cmd_shape shape = {"root base", "root base", 1, 1,
	                                "usage: receiver unpack --root R --base DIR ARCHIVE"};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	if (tar_unpack(o.root, o.base, o.pos[0], &res, &usage_err, &err) != 0) {
		status = frame_error(usage_err ? EXIT_USAGE : EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	{
		jv *f = jv_object();
		jv_set_int(f, "unpacked", (int64_t)res.unpacked);
		jv_set_int(f, "bytes", (int64_t)res.bytes);
		frame_emit(f);
	}
cleanup:
	free(o.pos);
	return status;
}

static int transient_name_ok(const char *name)
{
	static const char *const prefixes[] = {RECEIVER_TRANSIENT_INVENTORY, RECEIVER_TRANSIENT_ARCHIVE,
	                                       RECEIVER_TRANSIENT_PUSH, RECEIVER_TRANSIENT_CAPTURE_PROBE};
	size_t i;
	if (strchr(name, '/') || !rel_path_ok(name))
		return 0;
	for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0 &&
		    strlen(name) > strlen(prefixes[i]))
			return 1;
	return 0;
}

int cmd_remove(int argc, char **argv)
{
	opts o;
	char msg[512];
	rerr err;
	jv *removed = NULL;
	size_t i;
	int status = EXIT_DONE;
	static const cmd_shape shape = {"root", "root", 1, ANY_POS,
	                                "usage: receiver remove --root R NAME..."};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	for (i = 0; i < o.npos; i++) {
		if (!transient_name_ok(o.pos[i])) {
			text_format(
			    msg, sizeof(msg),
			    "refusing to remove '%s': only names starting .inventory-, .archive-, .push- or "
			    ".capture-probe- directly in the guest root",
			    o.pos[i]);
			status = usage(msg);
			goto cleanup;
		}
	}
	removed = jv_array();
	for (i = 0; i < o.npos; i++) {
		char *path = path_join(o.root, o.pos[i]);
		struct stat st;
		if (lstat(path, &st) == 0) {
			if (!S_ISREG(st.st_mode)) {
				text_format(msg, sizeof(msg), "%s is not a regular file; not removed",
				            o.pos[i]);
				free(path);
				status = frame_error(EXIT_INTERNAL, msg);
				goto cleanup;
			}
			if (unlink(path) != 0) {
				text_format(msg, sizeof(msg), "cannot remove %s: %s", o.pos[i],
				            strerror(errno));
				free(path);
				status = frame_error(EXIT_INTERNAL, msg);
				goto cleanup;
			}
			jv_push(removed, jv_str(o.pos[i]));
		}
		free(path);
	}
	fsync_dir(o.root, &err);
	{
		jv *f = jv_object();
		jv_set(f, "removed", removed);
		removed = NULL;
		frame_emit(f);
	}
cleanup:
	jv_free(removed);
	free(o.pos);
	return status;
}

/* ---- capture-test --------------------------------------------------------- */

int cmd_capture_test(int argc, char **argv)
{
	opts o;
	char msg[256];
	rerr err;
	capture_spec spec;
	jv *cap = NULL;
	int64_t wait_ms = 120000, every_ms = 5000, start, next_try;
	int tries = 0, status = EXIT_DONE;
	capture_outcome co;
	memset(&spec, 0, sizeof(spec));
	memset(&co, 0, sizeof(co));
	static const cmd_shape shape = {
	    "root capture wait-ms every-ms", "root capture", 0, 0,
	    "usage: receiver capture-test --root R --capture JSON [--wait-ms 120000] [--every-ms "
	    "5000]"};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	if ((o.wait_ms && parse_ms(o.wait_ms, 0, 3600000, &wait_ms) != 0) ||
	    (o.every_ms && parse_ms(o.every_ms, 1, 600000, &every_ms) != 0)) {
		status = usage("--wait-ms must be 0..3600000 and --every-ms 1..600000");
		goto cleanup;
	}
	cap = jv_parse(o.capture, strlen(o.capture), &err);
	if (!cap || capture_spec_parse(cap, &spec, &err) != 0) {
		text_format(msg, sizeof(msg), "invalid capture command: %s", err.msg);
		status = usage(msg);
		goto cleanup;
	}
	proc_become_subreaper();
	start = mono_ms();
	next_try = start;
	for (;;) {
		char rnd[17];
		char *probe;
		int64_t now = mono_ms();
		int64_t left = wait_ms - (now - start);
		if (tries > 0 && left <= 0)
			break;
		if (random_hex(rnd, 8, &err) != 0) {
			status = frame_error(EXIT_INTERNAL, err.msg);
			goto cleanup;
		}
		probe = xasprintf("%s/.capture-probe-%s.png", o.root, rnd);
		tries++;
		capture_take(&spec, probe, left > 0 ? left : 1, NULL, NULL, 0, &co);
		unlink(probe);
		free(probe);
		if (co.ok) {
			jv *f = jv_object();
			jv_set_bool(f, "ok", 1);
			jv_set_int(f, "afterMs", mono_ms() - start);
			frame_emit(f);
			goto cleanup;
		}
		fprintf(stderr, "receiver: capture try %d failed: %s\n", tries, co.diagnostic);
		next_try += every_ms;
		now = mono_ms();
		if (next_try < now)
			next_try = now;
		if (next_try - start >= wait_ms)
			break;
		sleep_ms(next_try - now);
	}
	{
		jv *f = jv_object();
		jv_set_bool(f, "ok", 0);
		jv_set_int(f, "tries", tries);
		jv_set_str(f, "diagnostic", co.diagnostic);
		frame_emit(f);
	}
cleanup:
	capture_spec_free(&spec);
	jv_free(cap);
	free(o.pos);
	return status;
}

/* ---- run, cancel, reset --------------------------------------------------- */

int cmd_run(int argc, char **argv)
{
	opts o;
	char msg[256];
	int status;
	int from_stdin = argc == 3 && strcmp(argv[2], RECEIVER_RUN_STDIN_OPTION) == 0;
	if (parse_opts(argc - from_stdin, argv, "root", &o, msg, sizeof(msg)) != 0 || !o.root ||
	    o.npos != (from_stdin ? 0u : 1u)) {
		jv *f = jv_object();
		jv *out = jv_object();
		jv_set_str(out, "kind", "refused");
		jv_set_str(out, "diagnostic",
		           "usage: receiver run --root R REQUEST | receiver run --root R --stdin");
		jv_set_str(f, "executionId", "unknown");
		jv_set_null(f, "receipt");
		jv_set(f, "outcome", out);
		frame_emit(f);
		free(o.pos);
		return EXIT_USAGE;
	}
	signal(SIGHUP, SIG_IGN);
	proc_become_subreaper();
	status = run_command(o.root, from_stdin ? NULL : o.pos[0], from_stdin);
	free(o.pos);
	return status;
}

int cmd_cancel(int argc, char **argv)
{
	opts o;
	rerr err;
	jv *owner = NULL;
	int signalled = 0, status = EXIT_DONE;
	static const cmd_shape shape = {"root execution", "root execution", 0, 0,
	                                "usage: receiver cancel --root R --execution ID"};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	if (!execution_id_valid(o.execution)) {
		status = usage("--execution must be an execution id");
		goto cleanup;
	}
	owner = lock_read_owner(o.root);
	{
		const char *owner_exec = jv_get_str(owner, "executionId");
		jv *groups = jv_get(owner, "operationPids");
		if (owner_exec && strcmp(owner_exec, o.execution) == 0) {
			char *dir = xasprintf("%s/%s", o.root, LOCK_DIR_NAME);
			jv *marker = jv_object();
			char at[32];
			char *text;
			size_t i;
			timestamp_now(at);
			jv_set_str(marker, "executionId", o.execution);
			jv_set_str(marker, "at", at);
			text = jv_to_text(marker, 0);
			if (durable_write(dir, "cancel", text, strlen(text), &err) == 0)
				signalled = 1;
			else
				fprintf(stderr, "receiver: %s\n", err.msg);
			for (i = 0; jv_is(groups, JV_ARRAY) && i < groups->count; i++) {
				jv *g = groups->items[i];
				if (jv_is(g, JV_NUMBER) && g->number_is_int && g->number_int > 1 &&
				    kill(-(pid_t)g->number_int, SIGKILL) == 0)
					signalled = 1;
			}
			free(text);
			jv_free(marker);
			free(dir);
		}
	}
	{
		jv *f = jv_object();
		jv_set_str(f, "executionId", o.execution);
		jv_set_bool(f, "signalled", signalled);
		frame_emit(f);
	}
cleanup:
	jv_free(owner);
	free(o.pos);
	return status;
}

/* True for an existing directory without entries. */
static int dir_empty(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *de;
	int empty = 1;
	if (!dir)
		return 0;
	while ((de = readdir(dir)) != NULL) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
			empty = 0;
			break;
		}
	}
	closedir(dir);
	return empty;
}

int cmd_reset(int argc, char **argv)
{
	opts o;
	char msg[512];
	rerr err;
	char *marker_name = NULL, *archive_rel = NULL, *archive_abs = NULL, *state_abs = NULL,
	     *lock_abs = NULL;
	int status = EXIT_DONE;
	const char *state_word = "reset";
	static const cmd_shape shape = {"root id", "root id", 0, 0, "usage: receiver reset --root R --id ID"};
	status = cmd_begin(argc, argv, &shape, &o);
	if (status != EXIT_DONE)
		goto cleanup;
	if (!id_valid(o.id)) {
		status = usage("--id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,119}$");
		goto cleanup;
	}
	lock_abs = path_join(o.root, LOCK_DIR_NAME);
	if (path_exists(lock_abs)) {
		jv *f = jv_object();
		jv_set_str(f, "error",
		           "receiver-locked: the receiver lock exists; diagnose the active execution "
		           "before resetting the recording");
		jv_set_str(f, "code", "receiver-locked");
		fprintf(stderr, "receiver: the receiver lock exists; reset refused\n");
		frame_emit(f);
		status = EXIT_INTERNAL;
		goto cleanup;
	}
	marker_name = xasprintf(".recording-reset-%s.json", o.id);
	archive_rel = xasprintf("recordings/%s", o.id);
	archive_abs = path_join(o.root, archive_rel);
	state_abs = path_join(o.root, "state");
	{
		char *marker_abs = path_join(o.root, marker_name);
		int done = path_exists(marker_abs);
		free(marker_abs);
		if (done) {
			state_word = "already-reset";
			goto answer;
		}
	}
	if (dir_ensure(o.root, "recordings", &err) != 0 ||
	    path_walk_check(o.root, archive_rel, 1, NULL, &err) != 0 ||
	    path_walk_check(o.root, "state", 1, NULL, &err) != 0) {
		status = frame_error(EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	if (path_exists(archive_abs) && !dir_empty(archive_abs)) {
		/* An earlier attempt may have moved state already; then only the
		 * empty state and the marker are missing. */
		if (path_exists(state_abs) && !dir_empty(state_abs)) {
			status = frame_error(EXIT_INTERNAL, "reset destination is not empty");
			goto cleanup;
		}
	} else {
		if (path_exists(archive_abs))
			rmdir(archive_abs);
		if (path_exists(state_abs)) {
			if (rename(state_abs, archive_abs) != 0) {
				text_format(msg, sizeof(msg), "cannot move state/ to %s: %s", archive_rel,
				            strerror(errno));
				status = frame_error(EXIT_INTERNAL, msg);
				goto cleanup;
			}
		} else if (dir_ensure(o.root, archive_rel, &err) != 0) {
			status = frame_error(EXIT_INTERNAL, err.msg);
			goto cleanup;
		}
		{
			char *rec = path_join(o.root, "recordings");
			int ok = fsync_dir(rec, &err) == 0 && fsync_dir(o.root, &err) == 0;
			free(rec);
			if (!ok) {
				status = frame_error(EXIT_INTERNAL, err.msg);
				goto cleanup;
			}
		}
	}
	if (dir_ensure(o.root, "state", &err) != 0) {
		status = frame_error(EXIT_INTERNAL, err.msg);
		goto cleanup;
	}
	{
		jv *m = jv_object();
		char *text;
		int exists = 0, ok;
		jv_set_str(m, "id", o.id);
		jv_set_str(m, "archive", archive_rel);
		text = jv_to_text(m, 0);
		ok = durable_write_new(o.root, marker_name, text, strlen(text), &exists, &err);
		free(text);
		jv_free(m);
		if (ok != 0 && !exists) {
			status = frame_error(EXIT_INTERNAL, err.msg);
			goto cleanup;
		}
		if (exists)
			state_word = "already-reset";
	}
answer : {
	jv *f = jv_object();
	jv_set_str(f, "id", o.id);
	jv_set_str(f, "archive", archive_rel ? archive_rel : "");
	jv_set_str(f, "state", state_word);
	frame_emit(f);
}
cleanup:
	free(marker_name);
	free(archive_rel);
	free(archive_abs);
	free(state_abs);
	free(lock_abs);
	free(o.pos);
	return status;
}
