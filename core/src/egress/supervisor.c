/* The relay's side of a guest's egress proxy (see egress/supervisor.h). */
#include "egress/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "egress/proxy.h"
#include "egress/records.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/timefmt.h"

extern char **environ;

struct egress_proxy {
	char *mode, *rules, *log_path;
	int listeners[3];
	pthread_mutex_t lock; /* guards pid, control, step, stopping */
	pid_t pid;
	int control; /* the relay's end of the control socket, -1 when none */
	char step[EGRESS_STEP_MAX];
	bool stopping;
	int wake[2]; /* written by egress_proxy_stop to end the watcher */
	pthread_t watcher;
	bool watcher_started;
};

/* Starts one proxy process; under the lock. 0 or -1 with errno. */
static int spawn_proxy(egress_proxy *p)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
		return -1;
	int high[4] = {-1, -1, -1, -1};
	int src[4] = {p->listeners[0], p->listeners[1], p->listeners[2], pair[1]};
	int rc = -1;
	for (int i = 0; i < 4; i++)
		if ((high[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 100)) < 0)
			goto cleanup;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	sigset_t none;
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	for (int i = 0; i < 4; i++)
		posix_spawn_file_actions_adddup2(&fa, high[i], EGRESS_FD_PROXY + i);
	posix_spawn_file_actions_addclosefrom_np(&fa, EGRESS_FD_CONTROL + 1);
	char *argv[] = {"mcp-relay", "egress-proxy", "--mode",    p->mode, "--rules",
	                p->rules,    "--log",        p->log_path, NULL};
	pid_t pid = -1;
	int e = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (e != 0) {
		errno = e;
		goto cleanup;
	}
	p->pid = pid;
	p->control = pair[0];
	pair[0] = -1;
	rc = 0;
cleanup:
	for (int i = 0; i < 4; i++)
		if (high[i] >= 0)
			close(high[i]);
	if (pair[0] >= 0)
		close(pair[0]);
	close(pair[1]);
	return rc;
}

/* Sends "step <id>" and waits for "ok"; under the lock. */
static void send_step(egress_proxy *p)
{
	if (p->control < 0)
		return;
	char msg[EGRESS_STEP_MAX + 8];
	snprintf(msg, sizeof msg, "step %s", p->step[0] ? p->step : "-");
	if (send(p->control, msg, strlen(msg), MSG_NOSIGNAL) < 0)
		return;
	struct pollfd pf = {p->control, POLLIN, 0};
	char ack[8];
	if (poll(&pf, 1, 2000) > 0)
		(void)recv(p->control, ack, sizeof ack, 0);
}

static void describe_exit(int status, char *out, size_t size)
{
	if (WIFSIGNALED(status))
		snprintf(out, size, "the egress proxy was killed by signal %d (%s)", WTERMSIG(status),
		         strsignal(WTERMSIG(status)));
	else
		snprintf(out, size, "the egress proxy exited with status %d", WEXITSTATUS(status));
}

static void record_stop(egress_proxy *p, const char *detail)
{
	int fd = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	char when[25];
	time_format_iso_millis(clock_now_ms(), when);
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "record", "proxy");
	jsonx_add_str(r, "event", "stopped");
	jsonx_add_str(r, "time", when);
	jsonx_add_str(r, "executionId", p->step[0] ? p->step : NULL);
	jsonx_add_str(r, "detail", detail);
	egress_record_append(fd, r);
	json_object_put(r);
	close(fd);
}

/* Waits for the proxy to end; an end nobody asked for is recorded and the
 * proxy started again on the same sockets. */
static void *watch_proxy(void *arg)
{
	egress_proxy *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		pid_t pid = p->pid;
		pthread_mutex_unlock(&p->lock);
		int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		struct pollfd pf[2] = {{pidfd, POLLIN, 0}, {p->wake[0], POLLIN, 0}};
		while (poll(pf, 2, -1) < 0 && errno == EINTR)
			;
		if (pidfd >= 0)
			close(pidfd);
		if (pf[1].revents)
			return NULL;
		int status = 0;
		if (waitpid(pid, &status, 0) != pid)
			return NULL;
		pthread_mutex_lock(&p->lock);
		char detail[160];
		describe_exit(status, detail, sizeof detail);
		close(p->control);
		p->control = -1;
		p->pid = 0;
		if (p->stopping) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		record_stop(p, detail);
		log_warning("%s (%s); starting it again on the same sockets", detail, p->log_path);
		bool ok = spawn_proxy(p) == 0;
		if (ok)
			send_step(p);
		pthread_mutex_unlock(&p->lock);
		if (!ok) {
			log_warning(
			    "cannot start the egress proxy again: %s; the guest's connections are refused",
			    strerror(errno));
			return NULL;
		}
	}
}

relay_status egress_proxy_start(const char *mode, const char *rules, const char *log_path, int listeners[3],
                                egress_proxy **out, relay_error *err)
{
	*out = NULL;
	egress_proxy *p = calloc(1, sizeof *p);
	if (p == NULL) {
		for (int i = 0; i < 3; i++)
			close(listeners[i]);
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
		                       "out of memory starting the egress proxy");
	}
	pthread_mutex_init(&p->lock, NULL);
	p->control = -1;
	p->wake[0] = p->wake[1] = -1;
	memcpy(p->listeners, listeners, sizeof p->listeners);
	p->mode = strdup(mode);
	p->rules = strdup(rules ? rules : "");
	p->log_path = strdup(log_path);
	if (p->mode == NULL || p->rules == NULL || p->log_path == NULL || pipe2(p->wake, O_CLOEXEC) != 0) {
		egress_proxy_stop(p);
		return relay_error_set(err, RELAY_E_NO_MEMORY, errno, "cannot prepare the egress proxy");
	}
	pthread_mutex_lock(&p->lock);
	int rc = spawn_proxy(p);
	int e = errno;
	if (rc == 0)
		send_step(p);
	pthread_mutex_unlock(&p->lock);
	if (rc != 0) {
		egress_proxy_stop(p);
		return relay_error_set(err, RELAY_E_IO, e,
		                       "cannot start the egress proxy (mcp-relay egress-proxy)");
	}
	if (pthread_create(&p->watcher, NULL, watch_proxy, p) != 0) {
		egress_proxy_stop(p);
		return relay_error_set(err, RELAY_E_IO, 0, "cannot start the egress proxy's watcher");
	}
	p->watcher_started = true;
	*out = p;
	return RELAY_OK;
}

void egress_proxy_step(egress_proxy *proxy, const char *execution_id)
{
	if (proxy == NULL)
		return;
	pthread_mutex_lock(&proxy->lock);
	snprintf(proxy->step, sizeof proxy->step, "%s", execution_id ? execution_id : "");
	send_step(proxy);
	pthread_mutex_unlock(&proxy->lock);
}

pid_t egress_proxy_pid(egress_proxy *proxy)
{
	if (proxy == NULL)
		return 0;
	pthread_mutex_lock(&proxy->lock);
	pid_t pid = proxy->pid;
	pthread_mutex_unlock(&proxy->lock);
	return pid;
}

void egress_proxy_stop(egress_proxy *proxy)
{
	if (proxy == NULL)
		return;
	pthread_mutex_lock(&proxy->lock);
	proxy->stopping = true;
	pid_t pid = proxy->pid;
	if (proxy->control >= 0)
		shutdown(proxy->control, SHUT_RDWR); /* the proxy exits when its control socket closes */
	pthread_mutex_unlock(&proxy->lock);
	/* The watcher reaps it (it clears pid); a proxy that does not exit within
	 * 2 s is killed. */
	int64_t until = clock_monotonic_ms() + 2000;
	while (proxy->watcher_started && pid > 0 && egress_proxy_pid(proxy) != 0 &&
	       clock_monotonic_ms() < until)
		usleep(5000);
	if (pid > 0 && egress_proxy_pid(proxy) != 0) {
		kill(pid, SIGKILL);
		until = clock_monotonic_ms() + 1000;
		while (proxy->watcher_started && egress_proxy_pid(proxy) != 0 && clock_monotonic_ms() < until)
			usleep(5000);
	}
	if (proxy->watcher_started) {
		if (proxy->wake[1] >= 0)
			(void)write(proxy->wake[1], "x", 1);
		pthread_join(proxy->watcher, NULL);
	}
	if (egress_proxy_pid(proxy) != 0)
		waitpid(pid, NULL, 0); /* killed above; not reaped by a watcher */
	for (int i = 0; i < 3; i++)
		if (proxy->listeners[i] >= 0)
			close(proxy->listeners[i]);
	if (proxy->control >= 0)
		close(proxy->control);
	for (int i = 0; i < 2; i++)
		if (proxy->wake[i] >= 0)
			close(proxy->wake[i]);
	pthread_mutex_destroy(&proxy->lock);
	free(proxy->mode);
	free(proxy->rules);
	free(proxy->log_path);
	free(proxy);
}
