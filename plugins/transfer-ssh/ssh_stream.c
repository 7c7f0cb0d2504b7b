/*
 * ssh_stream.c — see ssh_stream.h.
 */
#include "ssh_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay_kit/buf.h"
#include "relay_kit/stream.h"
#include "relay_support/fdstream.h"
#include "ssh_spawn.h"

#define STREAM_CLOSE_WAIT_MS 2000

typedef struct ssh_stream {
	const relay_host *host;
	ssh_child child;
	char err_line[512]; /* ssh's standard error, up to its next newline */
	size_t err_len;
} ssh_stream;

/* The guest command: `cd CWD && exec [env K=V...] ARGV...` under /bin/sh
 * (the login shell only sees `exec` and single quotes, as every script of
 * this plugin). malloc'd, or NULL. */
static char *stream_command(const relay_exec_request *req)
{
	static const char *const script[] = {"cd \"$1\" || exit 126; shift; exec \"$@\"", NULL};
	size_t n = 0, k = 0;
	while (req->argv[n])
		n++;
	for (size_t i = 0; req->envp && req->envp[i]; i++)
		k++;
	const char **args = calloc(n + k + 3, sizeof *args);
	if (args == NULL)
		return NULL;
	size_t a = 0;
	args[a++] = req->cwd && req->cwd[0] ? req->cwd : ".";
	if (k) {
		args[a++] = "env";
		for (size_t i = 0; i < k; i++)
			args[a++] = req->envp[i];
	}
	for (size_t i = 0; i < n; i++)
		args[a++] = req->argv[i];
	char *command = ssh_script_command(script, args);
	free(args);
	return command;
}

relay_status ssh_stream_open(const ssh_conn *conn, const relay_exec_request *req_in, unsigned flags,
                             relay_transport_stream **out, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	*out = NULL;
	relay_exec_request req;
	relay_status checked = rk_stream_open_request(host, req_in, flags, &req, err);
	if (checked != RELAY_OK)
		return checked;
	ssh_stream *s = calloc(1, sizeof *s);
	char *command = stream_command(&req);
	char **argv = command ? ssh_argv(conn, SSH_MODE_SESSION, command) : NULL;
	relay_status status = RELAY_OK;
	if (s == NULL || argv == NULL) {
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
		                         "out of memory building the stream's ssh");
		goto done;
	}
	s->host = host;
	status = ssh_child_start(host, (const char *const *)argv, &s->child, err);
	if (status != RELAY_OK) {
		if (status != RELAY_E_NO_MEMORY)
			status = RELAY_E_TRANSIENT; /* ssh never ran, so neither did the command */
		goto done;
	}
	fcntl(s->child.err_fd, F_SETFL, fcntl(s->child.err_fd, F_GETFL) | O_NONBLOCK);
	*out = s;
	s = NULL;
done:
	ssh_argv_free(argv);
	free(command);
	free(s);
	return status;
}

/* Logs what ssh wrote to its standard error so far, a line at a time. */
static void drain_stderr(ssh_stream *s)
{
	char chunk[1024];
	for (;;) {
		ssize_t n = s->child.err_fd >= 0 ? read(s->child.err_fd, chunk, sizeof chunk) : -1;
		if (n <= 0) {
			if (n == 0) {
				close(s->child.err_fd);
				s->child.err_fd = -1;
			}
			return;
		}
		for (ssize_t i = 0; i < n; i++) {
			bool end = chunk[i] == '\n' || s->err_len + 1 >= sizeof s->err_line;
			if (chunk[i] != '\n')
				s->err_line[s->err_len++] = chunk[i];
			if (end && s->err_len) {
				s->err_line[s->err_len] = '\0';
				s->host->log(RELAY_LOG_DEBUG, SSH_PLUGIN_NAME, "stream: %s", s->err_line);
				s->err_len = 0;
			}
		}
	}
}

relay_status ssh_stream_write(ssh_plugin *plugin, relay_transport_stream *stream, const void *data,
                              size_t len, uint64_t timeout_ms, unsigned flags, relay_error *err)
{
	ssh_stream *s = stream;
	relay_status st =
	    rk_stream_write_check(plugin->host, s && s->child.in_fd >= 0, data, len, timeout_ms, flags, err);
	if (st != RELAY_OK)
		return st;
	drain_stderr(s);
	return rk_stream_fd_write(plugin->host, s->child.in_fd, data, len, timeout_ms, "the ssh session",
	                          err);
}

relay_status ssh_stream_read(ssh_plugin *plugin, relay_transport_stream *stream, void *buf, size_t cap,
                             uint64_t timeout_ms, unsigned flags, size_t *got_out, relay_error *err)
{
	ssh_stream *s = stream;
	*got_out = 0;
	relay_status st = rk_stream_read_check(plugin->host, s != NULL, buf, cap, flags, err);
	if (st != RELAY_OK)
		return st;
	drain_stderr(s);
	if (s->child.out_fd < 0)
		return RELAY_OK; /* end of file seen before */
	return rk_stream_fd_read(plugin->host, s->child.out_fd, buf, cap, timeout_ms, "the ssh session",
	                         got_out, err);
}

void ssh_stream_close(relay_transport_stream *stream)
{
	ssh_stream *s = stream;
	if (s == NULL)
		return;
	/* End of input ends the command and then the session; ssh exits. A
	 * session that does not end in time is cut here (sshd then closes the
	 * command's input). */
	ssh_child_close_stdin(&s->child);
	int64_t deadline = ssh_now_ms() + STREAM_CLOSE_WAIT_MS;
	char sink[4096];
	while (s->child.out_fd >= 0 && ssh_now_ms() < deadline) {
		ssize_t n = rs_fd_read_wait(s->child.out_fd, sink, sizeof sink, deadline - ssh_now_ms());
		if (n == 0 || (n < 0 && errno != ETIMEDOUT && errno != EINTR))
			break;
	}
	ssh_child_destroy(&s->child);
	free(s);
}
