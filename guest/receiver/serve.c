/*
 * receiver/serve.c — see serve.h.
 */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../receiver_protocol.h"
#include "failpoint.h"
#include "frame.h"
#include "fsx.h"
#include "proc.h"
#include "run.h"
#include "stdio_parts.h"
#include "util.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The idle limit: RECEIVER_SERVE_IDLE_MS, or a shorter one from the
 * environment (tests). */
static int64_t idle_limit_ms(void)
{
	const char *text = getenv(RECEIVER_SERVE_IDLE_ENV);
	char *end = NULL;
	long long v;
	if (!text || !*text)
		return RECEIVER_SERVE_IDLE_MS;
	v = strtoll(text, &end, 10);
	if (*end || v < 1 || v > RECEIVER_SERVE_IDLE_MS)
		return RECEIVER_SERVE_IDLE_MS;
	return v;
}

/* The refusal frame of a request that did not come through (nothing ran). */
static void answer_refused(const char *diagnostic)
{
	jv *f = jv_object();
	jv *out = jv_object();
	fprintf(stderr, "receiver serve: %s\n", diagnostic);
	jv_set_str(out, "kind", RECEIVER_KIND_REFUSED);
	jv_set_str(out, "diagnostic", diagnostic);
	jv_set_str(f, "executionId", "unknown");
	jv_set_null(f, "receipt");
	jv_set(f, "outcome", out);
	frame_emit(f);
}

/* Waits for the next request: 1 when standard input is readable (or at
 * its end), 0 when serve should end (idle, or R is gone). */
static int wait_for_request(const char *root, int64_t idle_ms)
{
	int64_t idle_from = now_ms();
	for (;;) {
		struct pollfd p = {STDIN_FILENO, POLLIN, 0};
		int64_t left = idle_from + idle_ms - now_ms();
		int r;
		rerr err;
		if (left <= 0) {
			fprintf(stderr, "receiver serve: no request for %lld ms; ending\n",
			        (long long)idle_ms);
			return 0;
		}
		r = poll(&p, 1,
		         (int)(left < RECEIVER_SERVE_ROOT_POLL_MS ? left : RECEIVER_SERVE_ROOT_POLL_MS));
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return 1; /* the read reports it */
		if (root_check(root, &err) != 0) {
			fprintf(stderr, "receiver serve: the guest root is gone (%s); ending\n", err.msg);
			return 0;
		}
	}
}

/* Reads fd to its end into b. */
static void read_all(int fd, buf *b)
{
	char chunk[65536];
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf_append(b, chunk, (size_t)n);
	}
}

/* Runs one request in a worker (a fork) whose standard output is a pipe
 * to serve: the answer goes on the channel only once the worker has
 * exited, so its lock is released by then, and only whole. 0 when the
 * worker answered, -1 when it ended without (a signal, a crash, a
 * failpoint): serve then stops. */
static int run_in_worker(const char *root, stdin_parts *parts)
{
	pid_t pid;
	int status = 0, fds[2];
	buf answer;
	fflush(NULL);
	if (pipe(fds) != 0 || (pid = fork()) < 0) {
		answer_refused("cannot start a worker for the request (pipe or fork failed); nothing ran");
		return 0;
	}
	if (pid == 0) {
		/* The worker never reads the channel: the next request is
		 * serve's. It is the subreaper of what its run starts, so none of
		 * it is left a child of serve. */
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0 && devnull != STDIN_FILENO) {
			dup2(devnull, STDIN_FILENO);
			close(devnull);
		}
		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		signal(SIGHUP, SIG_IGN);
		proc_become_subreaper();
		status = run_command_parts(root, parts);
		fflush(NULL);
		_exit(status);
	}
	close(fds[1]);
	buf_init(&answer);
	read_all(fds[0], &answer);
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			status = -1;
			break;
		}
	if (status != -1 && WIFEXITED(status) &&
	    (WEXITSTATUS(status) == EXIT_DONE || WEXITSTATUS(status) == EXIT_USAGE ||
	     WEXITSTATUS(status) == EXIT_INTERNAL)) {
		write_all(STDOUT_FILENO, answer.data ? answer.data : "", answer.len);
		buf_free(&answer);
		return 0;
	}
	buf_free(&answer);
	if (status != -1 && WIFSIGNALED(status))
		fprintf(stderr, "receiver serve: the worker ended by signal %d; ending\n", WTERMSIG(status));
	else
		fprintf(stderr, "receiver serve: the worker ended without its answer (status %d); ending\n",
		        status);
	return -1;
}

int cmd_serve(int argc, char **argv)
{
	stdin_reader reader;
	const char *root;
	int64_t idle_ms = idle_limit_ms();
	int status = EXIT_DONE;
	rerr err;
	if (argc != 2 || strcmp(argv[0], RECEIVER_OPT_ROOT) != 0)
		return frame_error(EXIT_USAGE, "usage: receiver serve --root R");
	root = argv[1];
	if (root_check(root, &err) != 0)
		return frame_error(EXIT_USAGE, err.msg);
	signal(SIGHUP, SIG_IGN);
	memset(&reader, 0, sizeof(reader));
	reader.fd = STDIN_FILENO;
	buf_init(&reader.pending);
	for (;;) {
		stdin_parts parts;
		int r;
		if (reader.pending.len == 0 && !wait_for_request(root, idle_ms))
			break;
		r = stdin_parts_next(&reader, &parts, &err);
		if (r == 1)
			break;
		if (r == -1) {
			answer_refused(err.msg);
			stdin_parts_free(&parts);
			status = EXIT_USAGE;
			break;
		}
		if (r == -2) {
			answer_refused(err.msg);
			stdin_parts_free(&parts);
			continue;
		}
		RECEIVER_FAILPOINT("receiver.serve.after-read");
		r = run_in_worker(root, &parts);
		stdin_parts_free(&parts);
		if (r != 0) {
			status = EXIT_INTERNAL;
			break;
		}
		RECEIVER_FAILPOINT("receiver.serve.after-answer");
	}
	buf_free(&reader.pending);
	return status;
}
