#include "ssh_session.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "relay_kit/buf.h"
#include "relay_support/utf8_locale.h"
#include "ssh_scripts.h"

#define SESSION_LINE_SEND_MS 10000

void ssh_spares_init(ssh_spares *s, unsigned wanted)
{
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->lock, NULL);
	s->wanted = wanted > SSH_SPARES_MAX ? SSH_SPARES_MAX : wanted;
	for (unsigned i = 0; i < SSH_SPARES_MAX; i++)
		s->child[i] = (ssh_child){.pid = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1};
}

/* Takes every waiting spare out of `s` (the caller holds the lock) into
 * `out`; returns how many. */
static unsigned take_all_locked(ssh_spares *s, ssh_child out[SSH_SPARES_MAX])
{
	unsigned n = s->count;
	for (unsigned i = 0; i < n; i++)
		out[i] = s->child[i];
	s->count = 0;
	return n;
}

void ssh_spares_stop(ssh_spares *s)
{
	ssh_child gone[SSH_SPARES_MAX];
	pthread_mutex_lock(&s->lock);
	s->closed = true;
	s->wanted = 0;
	unsigned n = take_all_locked(s, gone);
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < n; i++)
		ssh_child_destroy(&gone[i]);
}

/* A new session waiting for its operation's line. */
static relay_status session_spawn(const ssh_conn *conn, ssh_child *c, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	char *command = ssh_script_command(ssh_script_session, NULL);
	char **argv = command ? ssh_argv(conn, SSH_MODE_SESSION, command) : NULL;
	relay_status status;
	if (argv == NULL)
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory building an ssh command");
	else
		status = ssh_child_start(host, (const char *const *)argv, c, err);
	ssh_argv_free(argv);
	free(command);
	return status;
}

void ssh_spares_fill(const ssh_conn *conn)
{
	ssh_spares *s = conn->spares;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		bool need = !s->closed && s->count + s->starting < s->wanted;
		if (need)
			s->starting++;
		pthread_mutex_unlock(&s->lock);
		if (!need)
			return;
		ssh_child c;
		relay_error ignored;
		relay_status status = session_spawn(conn, &c, &ignored);
		pthread_mutex_lock(&s->lock);
		s->starting--;
		bool keep = status == RELAY_OK && !s->closed && s->count < s->wanted;
		if (keep)
			s->child[s->count++] = c;
		pthread_mutex_unlock(&s->lock);
		if (status != RELAY_OK)
			return; /* ssh cannot be started: the operations will say why */
		if (!keep)
			ssh_child_destroy(&c);
	}
}

bool ssh_spares_note_failure(const ssh_conn *conn, const char *err_text, size_t err_len)
{
	if (!ssh_text_contains(err_text, err_len, "open failed") &&
	    !ssh_text_contains(err_text, err_len, "refused by peer"))
		return false;
	ssh_spares *s = conn->spares;
	ssh_child gone[SSH_SPARES_MAX];
	pthread_mutex_lock(&s->lock);
	bool was_on = s->wanted > 0;
	s->wanted = 0;
	unsigned n = take_all_locked(s, gone);
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < n; i++)
		ssh_child_destroy(&gone[i]);
	if (was_on)
		conn->plugin->host->log(RELAY_LOG_WARNING, SSH_PLUGIN_NAME,
		                        "the guest %s refused an ssh session (sshd's MaxSessions?); no "
		                        "spare sessions are kept for it any more",
		                        conn->host);
	return was_on;
}

/* The oldest waiting spare that is still alive, or false. */
static bool take_spare(const ssh_conn *conn, ssh_child *out)
{
	ssh_spares *s = conn->spares;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		bool have = s->count > 0;
		if (have) {
			*out = s->child[0];
			memmove(&s->child[0], &s->child[1], (s->count - 1) * sizeof s->child[0]);
			s->count--;
		}
		pthread_mutex_unlock(&s->lock);
		if (!have)
			return false;
		/* A spare whose multiplexed session sshd refused (MaxSessions)
		 * has fallen back to a connection of its own and works; its
		 * message still turns the spares off (ssh_session.h). */
		rk_buf err_text = RK_BUF_INIT;
		bool alive = ssh_child_alive(out, &err_text);
		ssh_spares_note_failure(conn, rk_buf_str(&err_text), err_text.len);
		rk_buf_free(&err_text);
		if (alive)
			return true;
		ssh_child_destroy(out);
	}
}

/* Sends the whole line; false when the child stopped reading. */
static bool send_line(ssh_child *c, const char *line, size_t len)
{
	ssh_io io = {.in_data = line, .in_len = len};
	int64_t deadline = ssh_now_ms() + SESSION_LINE_SEND_MS;
	while (io.in_len > 0) {
		if (ssh_child_try_send(c, &io))
			continue;
		if (io.in_broken || c->in_fd < 0 || ssh_now_ms() > deadline)
			return false;
		struct pollfd p = {c->in_fd, POLLOUT, 0};
		poll(&p, 1, 100);
	}
	return true;
}

relay_status ssh_session_start(const ssh_conn *conn, const char *op, const char *const *args,
                               bool may_use_spare, ssh_child *c, bool *was_spare, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	relay_status status = RELAY_OK;
	rk_buf line = RK_BUF_INIT;
	*c = (ssh_child){.pid = -1, .in_fd = -1, .out_fd = -1, .err_fd = -1};
	*was_spare = false;
	rk_buf_quote(&line, op);
	for (size_t i = 0; args && args[i]; i++) {
		rk_buf_puts(&line, " ");
		rk_buf_quote(&line, args[i]);
	}
	rk_buf_puts(&line, "\n");
	if (line.failed) {
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory building an ssh command");
		goto cleanup;
	}
	if (may_use_spare && take_spare(conn, c)) {
		if (send_line(c, line.data, line.len)) {
			*was_spare = true;
			goto started;
		}
		ssh_child_destroy(c); /* it died after all: nothing was handed over */
	}
	status = session_spawn(conn, c, err);
	if (status != RELAY_OK)
		goto cleanup;
	/* A session that cannot take its line has failed; the operation reads
	 * why from ssh's exit and standard error. */
	send_line(c, line.data, line.len);
started:
	ssh_spares_fill(conn);
cleanup:
	rk_buf_free(&line);
	return status;
}

relay_status ssh_session_transfer(ssh_transfer_attempt attempt, const ssh_conn *conn, const char *from,
                                  const char *to, relay_call *call, unsigned flags, char **facts_json_out,
                                  relay_error *err)
{
	bool retry_cold = false;
	rs_utf8_locale_scope utf8;
	rs_utf8_locale_enter(&utf8);
	relay_status status = attempt(conn, from, to, call, flags, true, &retry_cold, facts_json_out, err);
	if (retry_cold)
		status = attempt(conn, from, to, call, flags, false, &retry_cold, facts_json_out, err);
	rs_utf8_locale_leave(&utf8);
	return status;
}
