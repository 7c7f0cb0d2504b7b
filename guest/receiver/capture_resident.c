/*
 * receiver/capture_resident.c — see capture_resident.h.
 */
#include "capture_resident.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fsx.h"
#include "json.h"
#include "proc.h"
#include "relay_support/fds.h"
#include "util.h"

#define RESIDENT_PROGRAM      "relay-x11shot"
#define RESIDENT_STOP_WAIT_MS 2000
#define RESIDENT_ANSWER_MAX   8192

/* The one resident program (capture_resident.h: one thread, one user at a
 * time). pid 0: none. key: its argv joined by '\n' (no entry holds one:
 * the capture command of a request is checked to hold no NUL, and an argv
 * with a newline simply never matches a running one). */
static struct {
	pid_t pid;
	int to_fd, from_fd;
	char *key;
} resident = {0, -1, -1, NULL};

/* The argv of the resident form of `spec`, or NULL when it has none: the
 * program is relay-x11shot, the check "png-file", and the output is the
 * argument pair "--out" "@OUT@", which becomes "--serve". */
static char **resident_argv(const capture_spec *spec)
{
	const char *base = strrchr(spec->argv[0], '/');
	size_t i, k = 0, outs = 0;
	char **argv;
	base = base ? base + 1 : spec->argv[0];
	if (strcmp(base, RESIDENT_PROGRAM) != 0 || strcmp(spec->check, "png-file") != 0)
		return NULL;
	for (i = 1; i + 1 < spec->argc; i++)
		if (!strcmp(spec->argv[i], "--out") && !strcmp(spec->argv[i + 1], "@OUT@"))
			outs++;
	if (outs != 1)
		return NULL;
	argv = xcalloc(spec->argc, sizeof(char *));
	for (i = 0; i < spec->argc; i++) {
		if (i + 1 < spec->argc && !strcmp(spec->argv[i], "--out") &&
		    !strcmp(spec->argv[i + 1], "@OUT@")) {
			argv[k++] = xstrdup("--serve");
			i++;
			continue;
		}
		argv[k++] = xstrdup(spec->argv[i]);
	}
	argv[k] = NULL;
	return argv;
}

static char *argv_key(char **argv)
{
	buf b;
	size_t i;
	buf_init(&b);
	for (i = 0; argv[i]; i++) {
		buf_append(&b, argv[i], strlen(argv[i]));
		buf_append(&b, "\n", 1);
	}
	buf_append(&b, "", 1);
	return b.data;
}

static void argv_free(char **argv)
{
	size_t i;
	for (i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}

/* Kills the resident program's process group (its own, from start). */
static void kill_group(pid_t pid)
{
	if (kill(-pid, SIGKILL) != 0)
		kill(pid, SIGKILL);
}

/* Forgets the resident program (its pipes closed); kills it first when
 * `kill_it` (a worker that found it broken: serve reaps it). */
static void forget(int kill_it)
{
	if (resident.pid > 0 && kill_it)
		kill_group(resident.pid);
	if (resident.to_fd >= 0)
		close(resident.to_fd);
	if (resident.from_fd >= 0)
		close(resident.from_fd);
	free(resident.key);
	resident.pid = 0;
	resident.to_fd = resident.from_fd = -1;
	resident.key = NULL;
}

static int cloexec_pipe(int fds[2])
{
	if (pipe(fds) != 0)
		return -1;
	fcntl(fds[0], F_SETFD, FD_CLOEXEC);
	fcntl(fds[1], F_SETFD, FD_CLOEXEC);
	return 0;
}

/* Starts argv as serve's child in its own process group, standard input
 * and output pipes to serve, standard error serve's own. */
static void start(char **argv, char *key)
{
	int in[2] = {-1, -1}, out[2] = {-1, -1};
	char *program = find_program(argv[0]);
	pid_t pid;
	if (!program || cloexec_pipe(in) != 0 || cloexec_pipe(out) != 0 || (pid = fork()) < 0) {
		fprintf(stderr, "receiver serve: cannot start a resident %s; captures stay one-shot\n",
		        argv[0]);
		goto fail;
	}
	if (pid == 0) {
		setpgid(0, 0);
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		execv(program, argv);
		_exit(127);
	}
	setpgid(pid, pid);
	close(in[0]);
	close(out[1]);
	resident.pid = pid;
	resident.to_fd = in[1];
	resident.from_fd = out[0];
	resident.key = key;
	free(program);
	return;
fail:
	free(program);
	free(key);
	if (in[0] >= 0) {
		close(in[0]);
		close(in[1]);
	}
	if (out[0] >= 0) {
		close(out[0]);
		close(out[1]);
	}
}

void capture_resident_prepare(const char *request_json, size_t len)
{
	rerr err;
	capture_spec spec;
	jv *req = jv_parse(request_json ? request_json : "", len, &err);
	jv *cap = jv_get(req, "capture");
	char **argv = NULL;
	char *key = NULL;
	if (resident.pid > 0 && waitpid(resident.pid, NULL, WNOHANG) != 0)
		forget(0); /* it ended (a display failure, or a worker killed it) */
	memset(&spec, 0, sizeof(spec));
	/* RELAY_RECEIVER_CAPTURE_RESIDENT=off in the guest keeps every capture
	 * one-shot (bench/runs measures both ways). */
	const char *off = getenv("RELAY_RECEIVER_CAPTURE_RESIDENT");
	if (off && strcmp(off, "off") == 0)
		cap = NULL;
	if (jv_is(cap, JV_OBJECT) && capture_spec_parse(cap, &spec, &err) == 0)
		argv = resident_argv(&spec);
	if (argv) {
		key = argv_key(argv);
		if (resident.pid > 0 && strcmp(resident.key, key) == 0) {
			free(key);
		} else {
			capture_resident_stop();
			start(argv, key);
		}
	}
	argv_free(argv);
	capture_spec_free(&spec);
	jv_free(req);
}

void capture_resident_stop(void)
{
	int64_t until = mono_ms() + RESIDENT_STOP_WAIT_MS;
	pid_t pid = resident.pid;
	forget(0); /* its standard input ends: it exits */
	if (pid <= 0)
		return;
	while (waitpid(pid, NULL, WNOHANG) == 0) {
		struct timespec ts = {0, 10 * 1000000L};
		if (mono_ms() >= until) {
			kill_group(pid);
			waitpid(pid, NULL, 0);
			return;
		}
		nanosleep(&ts, NULL);
	}
}

/* Reads one line into `answer` before `deadline`: 0, 1 at the deadline,
 * -1 when the pipe broke or the line is too long. */
static int read_answer(buf *answer, int64_t deadline)
{
	for (;;) {
		char chunk[1024];
		struct pollfd p = {resident.from_fd, POLLIN, 0};
		int64_t left = deadline - mono_ms();
		ssize_t n;
		if (answer->len > 0 && answer->data[answer->len - 1] == '\n')
			return 0;
		if (left <= 0)
			return 1;
		if (poll(&p, 1, (int)(left > 1000000 ? 1000000 : left)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (!p.revents)
			continue;
		n = read(resident.from_fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || answer->len + (size_t)n > RESIDENT_ANSWER_MAX)
			return -1;
		buf_append(answer, chunk, (size_t)n);
	}
}

int capture_resident_take(const capture_spec *spec, const char *out_path, int64_t timeout_ms,
                          capture_outcome *res)
{
	char **argv;
	char *key, *line;
	buf answer;
	int rc = 1, r;
	if (resident.pid <= 0)
		return 1;
	argv = resident_argv(spec);
	key = argv ? argv_key(argv) : NULL;
	argv_free(argv);
	if (!key || strcmp(key, resident.key) != 0) {
		free(key);
		return 1;
	}
	free(key);
	buf_init(&answer);
	line = xasprintf("%s\n", out_path);
	if (rs_write_all(resident.to_fd, line, strlen(line)) != 0) {
		forget(1);
		goto cleanup;
	}
	r = read_answer(&answer, mono_ms() + timeout_ms);
	if (r == 1) {
		forget(1);
		text_format(res->diagnostic, sizeof(res->diagnostic), "capture timed out after %lld ms",
		            (long long)timeout_ms);
		rc = 0;
		goto cleanup;
	}
	if (r != 0) {
		forget(1);
		goto cleanup;
	}
	{
		/* A success line for another path (an answer a killed worker left
		 * behind) or a failure answer: the one-shot way decides. */
		rerr err;
		jv *a = jv_parse(answer.data, answer.len, &err);
		const char *reported = jv_get_str(a, "screenshot_file_path");
		int for_us = reported && strcmp(reported, out_path) == 0;
		int failure_answer = jv_is(a, JV_OBJECT) && !reported;
		jv_free(a);
		if (!for_us) {
			if (!failure_answer)
				forget(1); /* out of step: not to be trusted again */
			goto cleanup;
		}
	}
	capture_check_answer(answer.data, answer.len, out_path, res);
	rc = 0;
cleanup:
	free(line);
	buf_free(&answer);
	return rc;
}
