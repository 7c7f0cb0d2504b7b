/*
 * receiver/serve_diag.c — see serve_diag.h.
 */
#include "serve_diag.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../receiver_protocol.h"
#include "fsx.h"
#include "relay_support/fds.h"
#include "sha256.h"

/* What became of one diagnostic. */
typedef struct diag_end {
	int status;    /* waitpid's, when reaped */
	int reaped;    /* the command's own process was reaped */
	int timed_out; /* limitMs passed: its group was killed */
	int hung_up;   /* serve's standard input ended: its group was killed */
	int truncated; /* more than RECEIVER_DIAG_OUTPUT_KEEP bytes came */
	buf output;    /* the last RECEIVER_DIAG_OUTPUT_KEEP bytes */
} diag_end;

static void keep_tail(diag_end *e, const char *data, size_t n)
{
	buf_append(&e->output, data, n);
	if (e->output.len > RECEIVER_DIAG_OUTPUT_KEEP) {
		size_t drop = e->output.len - RECEIVER_DIAG_OUTPUT_KEEP;
		memmove(e->output.data, e->output.data + drop, RECEIVER_DIAG_OUTPUT_KEEP);
		e->output.len = RECEIVER_DIAG_OUTPUT_KEEP;
		e->truncated = 1;
	}
}

/* The command in a session of its own; -1 when it cannot be started. */
static pid_t diag_start(const diag_request *d, int out_fd)
{
	pid_t pid;
	fflush(NULL);
	pid = fork();
	if (pid != 0)
		return pid;
	setsid();
	{
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0 && devnull != STDIN_FILENO) {
			dup2(devnull, STDIN_FILENO);
			close(devnull);
		}
	}
	dup2(out_fd, STDOUT_FILENO);
	dup2(out_fd, STDERR_FILENO);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	execv(d->argv[0], d->argv);
	fprintf(stderr, "receiver serve: cannot start %s: %s\n", d->argv[0], strerror(errno));
	_exit(127);
}

static void kill_group(pid_t pid, diag_end *e)
{
	kill(-pid, SIGKILL);
	if (!e->reaped) {
		while (waitpid(pid, &e->status, 0) < 0 && errno == EINTR) {
		}
		e->reaped = 1;
	}
}

/* A descriptor that polls readable when pid ends (Linux 5.3), or -1. */
static int pid_fd(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	return -1;
#endif
}

/* Reads the command's output until the pipe ends (or RECEIVER_DIAG_DRAIN_MS
 * after the command ended while a survivor holds it), and reaps it; kills
 * its group at the limit or when the channel ends. */
static void diag_watch(pid_t pid, int out_fd, int64_t limit_ms, diag_end *e)
{
	int64_t deadline = mono_ms() + limit_ms, drain_until = 0;
	char chunk[65536];
	struct pollfd p[3];
	int pfd = pid_fd(pid);
	p[0].fd = out_fd;
	p[1].fd = STDIN_FILENO;
	p[2].fd = pfd;
	for (;;) {
		int64_t now = mono_ms(), wait = deadline - now;
		if (!e->reaped && waitpid(pid, &e->status, WNOHANG) == pid) {
			e->reaped = 1;
			p[2].fd = -1;
		}
		if (e->reaped && p[0].fd < 0)
			break;
		if (e->reaped && drain_until == 0)
			drain_until = now + RECEIVER_DIAG_DRAIN_MS;
		if (drain_until && now >= drain_until)
			break; /* something it left running holds the pipe */
		if (wait <= 0) {
			e->timed_out = 1;
			kill_group(pid, e);
			break;
		}
		/* without a pidfd, the command's end alone wakes nothing: look often */
		if (p[2].fd < 0 && !e->reaped && p[0].fd < 0)
			wait = wait < 2 ? wait : 2;
		else if (drain_until)
			wait = wait < drain_until - now ? wait : drain_until - now;
		p[0].events = p[2].events = POLLIN;
		p[1].events = 0; /* only its end (POLLHUP) counts: no request comes meanwhile */
		p[0].revents = p[1].revents = p[2].revents = 0;
		if (poll(p, 3, (int)(wait < 60000 ? wait : 60000)) < 0 && errno != EINTR)
			break;
		if (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)) {
			e->hung_up = 1;
			kill_group(pid, e);
			break;
		}
		if (p[0].fd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(p[0].fd, chunk, sizeof(chunk));
			if (n > 0)
				keep_tail(e, chunk, (size_t)n);
			else if (n == 0 || errno != EINTR)
				p[0].fd = -1; /* closed by the caller */
		}
	}
	if (pfd >= 0)
		close(pfd);
}

static void diag_answer(const diag_request *d, const diag_end *e)
{
	jv *f = jv_object(), *ex = jv_object(), *parts = jv_array(), *part = jv_object();
	char hex[65];
	buf line;
	int st = e->status;
	if (e->reaped && WIFEXITED(st))
		jv_set_int(ex, RECEIVER_FRAME_CODE, WEXITSTATUS(st));
	else
		jv_set_null(ex, RECEIVER_FRAME_CODE);
	if (e->reaped && WIFSIGNALED(st) && !e->timed_out)
		jv_set_int(ex, RECEIVER_FRAME_SIGNAL, WTERMSIG(st));
	else
		jv_set_null(ex, RECEIVER_FRAME_SIGNAL);
	jv_set_bool(ex, RECEIVER_FRAME_TIMED_OUT, e->timed_out);
	jv_set_bool(ex, RECEIVER_FRAME_OUTPUT_TRUNCATED, e->truncated);
	sha256_hex_of(e->output.data ? e->output.data : "", e->output.len, hex);
	jv_set_str(part, RECEIVER_PART_KEY_NAME, RECEIVER_PART_OUTPUT);
	jv_set_int(part, RECEIVER_PART_KEY_BYTES, (int64_t)e->output.len);
	jv_set_str(part, RECEIVER_PART_KEY_SHA256, hex);
	jv_push(parts, part);
	jv_set_str(f, RECEIVER_FRAME_EXECUTION_ID, d->execution_id);
	jv_set(f, RECEIVER_FRAME_DIAGNOSTIC_EXIT, ex);
	jv_set(f, RECEIVER_FRAME_PARTS, parts);
	/* one write when it fits: the host reads the frame and its part as one answer */
	buf_init(&line);
	jv_write(&line, f, 0);
	buf_putc(&line, '\n');
	buf_append(&line, e->output.data ? e->output.data : "", e->output.len);
	rs_write_all(STDOUT_FILENO, line.data, line.len);
	buf_free(&line);
	jv_free(f);
}

int serve_diagnostic(stdin_reader *reader, rerr *err)
{
	diag_request d;
	diag_end e;
	int out[2] = {-1, -1};
	pid_t pid;
	int r = stdin_diag_next(reader, &d, err);
	if (r != 0)
		return r == -1 ? SERVE_DIAG_OUT_OF_STEP : SERVE_DIAG_REFUSED;
	memset(&e, 0, sizeof(e));
	buf_init(&e.output);
	if (pipe2(out, O_CLOEXEC) != 0 || (pid = diag_start(&d, out[1])) < 0) {
		err_set(err, "cannot start the diagnostic script (pipe or fork failed); nothing ran");
		if (out[0] >= 0) {
			close(out[0]);
			close(out[1]);
		}
		diag_request_free(&d);
		return SERVE_DIAG_REFUSED;
	}
	close(out[1]);
	diag_watch(pid, out[0], d.limit_ms, &e);
	close(out[0]);
	if (!e.hung_up)
		diag_answer(&d, &e);
	buf_free(&e.output);
	diag_request_free(&d);
	return SERVE_DIAG_DONE;
}
