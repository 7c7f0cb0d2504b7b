/*
 * md_ssh.c — an ssh:// endpoint: the remote engine's unix socket forwarded
 * to a socket in the state folder by OpenSSH (`ssh -nNT -L local:remote`),
 * after which every request goes through libcurl to the local socket as for
 * a unix:// endpoint. Host keys are checked strictly against the known_hosts
 * file the options name (StrictHostKeyChecking=yes, BatchMode=yes: never a
 * prompt, never a key learned on first use); the identity is the file the
 * options name (IdentitiesOnly=yes).
 *
 * The forwarder is started at init and again when a request finds it gone
 * (md_ssh_ensure, serialised by ssh_lock). Its standard output is
 * /dev/null, its standard error <stateDir>/ssh.log (a Swarm node's: n<k>.log), rewritten at each start.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "md.h"

extern char **environ;

static bool socket_answers(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	/* A path longer than sun_path cannot be connected to: no answer. */
	int n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	bool ok =
	    n > 0 && (size_t)n < sizeof sa.sun_path && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
	close(fd);
	return ok;
}

static bool forwarder_alive(md_state *st)
{
	if (st->ssh_pid <= 0)
		return false;
	int status = 0;
	pid_t r = waitpid(st->ssh_pid, &status, WNOHANG);
	if (r == st->ssh_pid || (r < 0 && errno == ECHILD)) {
		st->ssh_pid = 0;
		return false;
	}
	return true;
}

/* The forwarder's standard error: the socket's path with ".log" for
 * ".sock" (<stateDir>/ssh.log; a Swarm node's <stateDir>/n<k>.log), so
 * each engine's message is its own. */
static void log_path_of(const md_state *st, char *out, size_t size)
{
	size_t n = strlen(st->socket_path);
	if (n > 5 && strcmp(st->socket_path + n - 5, ".sock") == 0)
		md_textf(out, size, "%.*s.log", (int)(n - 5), st->socket_path);
	else
		md_textf(out, size, "%s/ssh.log", st->kit.state_dir);
}

/* The last two lines ssh wrote (its verdict: "Host key verification
 * failed.", "ssh: connect to host ...: Connection refused"), joined by
 * "; ", into `out`. */
static void ssh_verdict(const char *log_path, char *out, size_t size)
{
	char tail[2048] = "";
	out[0] = '\0';
	int fd = open(log_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	off_t end = lseek(fd, 0, SEEK_END);
	lseek(fd, end > (off_t)sizeof tail - 1 ? end - (off_t)sizeof tail + 1 : 0, SEEK_SET);
	ssize_t n = read(fd, tail, sizeof tail - 1);
	close(fd);
	tail[n > 0 ? n : 0] = '\0';
	char *lines[2] = {NULL, NULL};
	for (char *save = NULL, *line = strtok_r(tail, "\r\n", &save); line;
	     line = strtok_r(NULL, "\r\n", &save)) {
		lines[0] = lines[1];
		lines[1] = line;
	}
	md_textf(out, size, "%s%s%s", lines[0] ? lines[0] : "", lines[0] && lines[1] ? "; " : "",
	         lines[1] ? lines[1] : "");
}

static relay_status start_forwarder(md_state *st, relay_error *err)
{
	char log_path[1100], forward[800], port[16];
	log_path_of(st, log_path, sizeof log_path);
	md_textf(forward, sizeof forward, "%s:%s", st->socket_path, st->ssh.remote_socket);
	snprintf(port, sizeof port, "%d", st->ssh.port);
	unlink(st->socket_path);
	char known[1100], ident[1100];
	md_textf(known, sizeof known, "UserKnownHostsFile=%s", st->ssh.known_hosts);
	md_textf(ident, sizeof ident, "%s", st->ssh.identity);
	const char *argv[] = {"ssh", "-nNT",
	                      "-F",  "/dev/null",
	                      "-o",  "BatchMode=yes",
	                      "-o",  "StrictHostKeyChecking=yes",
	                      "-o",  known,
	                      "-o",  "GlobalKnownHostsFile=/dev/null",
	                      "-o",  "IdentitiesOnly=yes",
	                      "-o",  "ExitOnForwardFailure=yes",
	                      "-o",  "StreamLocalBindUnlink=yes",
	                      "-o",  "StreamLocalBindMask=0177",
	                      "-o",  "ServerAliveInterval=15",
	                      "-o",  "ConnectTimeout=10",
	                      "-i",  ident,
	                      "-p",  port,
	                      "-L",  forward,
	                      "-l",  st->ssh.user,
	                      "--",  st->ssh.host,
	                      NULL};
	/* This start's messages only: the verdict below is read from it. */
	int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (log_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
	else
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	pid_t pid = 0;
	int rc = posix_spawnp(&pid, "ssh", &fa, &attr, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (log_fd >= 0)
		close(log_fd);
	if (rc != 0)
		return md_err(st, err, RELAY_E_UNAVAILABLE, rc,
		              "cannot run ssh for the endpoint %s (apt-get install openssh-client)",
		              st->endpoint);
	st->ssh_pid = pid;
	for (int i = 0; i < 200; i++) {
		if (socket_answers(st->socket_path))
			return RELAY_OK;
		if (!forwarder_alive(st))
			break;
		md_sleep_ms(50);
	}
	if (forwarder_alive(st)) {
		kill(-pid, SIGTERM);
		waitpid(pid, NULL, 0);
		st->ssh_pid = 0;
	}
	char tail[600];
	ssh_verdict(log_path, tail, sizeof tail);
	return md_err(st, err, RELAY_E_UNAVAILABLE, 0,
	              "ssh could not forward the engine socket %s of %s (%s); check the host key in %s, the "
	              "identity %s, and that the remote user may use the socket",
	              st->ssh.remote_socket, st->endpoint, tail[0] ? tail : "no message", st->ssh.known_hosts,
	              st->ssh.identity);
}

relay_status md_ssh_ensure(md_state *st, relay_error *err)
{
	if (!st->ssh.enabled)
		return RELAY_OK;
	pthread_mutex_lock(&st->ssh_lock);
	relay_status s = RELAY_OK;
	if (!forwarder_alive(st) || !socket_answers(st->socket_path)) {
		if (forwarder_alive(st)) {
			kill(-st->ssh_pid, SIGTERM);
			waitpid(st->ssh_pid, NULL, 0);
			st->ssh_pid = 0;
		}
		s = start_forwarder(st, err);
	}
	pthread_mutex_unlock(&st->ssh_lock);
	return s;
}

void md_ssh_stop(md_state *st)
{
	if (!st->ssh.enabled)
		return;
	pthread_mutex_lock(&st->ssh_lock);
	if (forwarder_alive(st)) {
		kill(-st->ssh_pid, SIGTERM);
		waitpid(st->ssh_pid, NULL, 0);
		st->ssh_pid = 0;
	}
	unlink(st->socket_path);
	pthread_mutex_unlock(&st->ssh_lock);
}
