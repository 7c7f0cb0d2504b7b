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
#include "capture_resident.h"
#include "failpoint.h"
#include "frame.h"
#include "fsx.h"
#include "proc.h"
#include "relay_support/fds.h"
#include "run.h"
#include "serve_cmd.h"
#include "serve_diag.h"
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

/* Reads the worker's standard output (its answer) into `answer` and its
 * standard error through to serve's own, keeping the last
 * RECEIVER_SERVE_STDERR_TAIL bytes in `tail`, until both end. */
static void collect(int out_fd, int err_fd, buf *answer, buf *tail)
{
	char chunk[65536];
	struct pollfd p[2];
	p[0].fd = out_fd;
	p[1].fd = err_fd;
	while (p[0].fd >= 0 || p[1].fd >= 0) {
		int i;
		p[0].events = p[1].events = POLLIN;
		p[0].revents = p[1].revents = 0;
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		for (i = 0; i < 2; i++) {
			ssize_t n;
			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			n = read(p[i].fd, chunk, sizeof(chunk));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				continue;
			}
			if (i == 0) {
				buf_append(answer, chunk, (size_t)n);
				continue;
			}
			rs_write_all(STDERR_FILENO, chunk, (size_t)n);
			buf_append(tail, chunk, (size_t)n);
			if (tail->len > RECEIVER_SERVE_STDERR_TAIL) {
				size_t drop = tail->len - RECEIVER_SERVE_STDERR_TAIL;
				memmove(tail->data, tail->data + drop, RECEIVER_SERVE_STDERR_TAIL);
				tail->len = RECEIVER_SERVE_STDERR_TAIL;
			}
		}
	}
}

/* The answer for a worker that ended without its own (serve.h). */
static void answer_worker_exit(const stdin_parts *parts, int status, const buf *tail)
{
	rerr err;
	jv *req = jv_parse(parts->request.data ? parts->request.data : "", parts->request.len, &err);
	const char *id = req ? jv_get_str(req, "executionId") : NULL;
	jv *f = jv_object();
	jv *ex = jv_object();
	buf text;
	buf_init(&text);
	utf8_sanitize(&text, tail->data ? tail->data : "", tail->len, 1);
	jv_set_str(f, "executionId", id ? id : "unknown");
	jv_set_null(f, "receipt");
	if (WIFEXITED(status))
		jv_set_int(ex, RECEIVER_FRAME_CODE, WEXITSTATUS(status));
	else
		jv_set_null(ex, RECEIVER_FRAME_CODE);
	if (WIFSIGNALED(status))
		jv_set_int(ex, RECEIVER_FRAME_SIGNAL, WTERMSIG(status));
	else
		jv_set_null(ex, RECEIVER_FRAME_SIGNAL);
	jv_set(f, RECEIVER_FRAME_WORKER_EXIT, ex);
	jv_set(f, RECEIVER_FRAME_STDERR, jv_strn(text.data ? text.data : "", text.len));
	fprintf(stderr, "receiver serve: the worker of %s ended without its answer (status %d)\n",
	        id ? id : "?", status);
	frame_emit(f);
	buf_free(&text);
	jv_free(req);
}

/* Runs one request in a worker (a fork) whose standard output and error
 * are pipes to serve: the answer goes on the channel only once the worker
 * has exited, so its lock is released by then, and only whole; a worker
 * that ended without it (a signal, a crash, a failpoint) is answered for
 * (answer_worker_exit). */
static void run_in_worker(const char *root, stdin_parts *parts)
{
	pid_t pid;
	int status = 0, out[2] = {-1, -1}, errp[2] = {-1, -1};
	buf answer, tail;
	fflush(NULL);
	if (pipe(out) != 0 || pipe(errp) != 0 || (pid = fork()) < 0) {
		answer_refused("cannot start a worker for the request (pipe or fork failed); nothing ran");
		return;
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
		dup2(out[1], STDOUT_FILENO);
		dup2(errp[1], STDERR_FILENO);
		close(out[0]);
		close(out[1]);
		close(errp[0]);
		close(errp[1]);
		signal(SIGHUP, SIG_IGN);
		proc_become_subreaper();
		status = run_command_parts(root, parts);
		fflush(NULL);
		_exit(status);
	}
	close(out[1]);
	close(errp[1]);
	buf_init(&answer);
	buf_init(&tail);
	collect(out[0], errp[0], &answer, &tail);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			status = -1;
			break;
		}
	if (status != -1 && WIFEXITED(status) &&
	    (WEXITSTATUS(status) == EXIT_DONE || WEXITSTATUS(status) == EXIT_USAGE ||
	     WEXITSTATUS(status) == EXIT_INTERNAL) &&
	    answer.len > 0)
		rs_write_all(STDOUT_FILENO, answer.data, answer.len);
	else
		answer_worker_exit(parts, status, &tail);
	buf_free(&answer);
	buf_free(&tail);
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
		if (r == STDIN_NEXT_DIAGNOSTIC) {
			int d = serve_diagnostic(&reader, &err);
			if (d != SERVE_DIAG_DONE)
				answer_refused(err.msg);
			if (d == SERVE_DIAG_OUT_OF_STEP) {
				status = EXIT_USAGE;
				break;
			}
			continue;
		}
		if (r == STDIN_NEXT_COMMAND || r == STDIN_NEXT_FILE) {
			if ((r == STDIN_NEXT_COMMAND ? serve_command(&reader, &err)
			                             : serve_file(&reader, root, &err)) != 0)
				answer_refused(err.msg);
			continue;
		}
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
		capture_resident_prepare(parts.request.data, parts.request.len);
		run_in_worker(root, &parts);
		stdin_parts_free(&parts);
	}
	buf_free(&reader.pending);
	capture_resident_stop();
	return status;
}
