/* console_viewer.c — the console's viewer on this host (relay_kit/console.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "relay_kit/clock.h"
#include "relay_kit/console.h"
#include "relay_kit/durable.h"
#include "relay_kit/proc.h"
#include "relay_support/json_get.h"
#include "relay_support/liveview.h"

extern char **environ;

static void put_text(json_object *o, const char *key, const char *value)
{
	json_object_object_add(o, key, value ? json_object_new_string(value) : NULL);
}

bool rk_console_control(void)
{
	const char *v = getenv("MCP_RELAY_CONSOLE_CONTROL");
	return rs_liveview_wanted(getenv("MCP_RELAY_VNC_VIEWER")) && v && strcmp(v, "allow") == 0;
}

bool rk_console_rfb_banner(rk_console_in_netns_fn in_netns, void *ctx, char banner[16], int timeout_ms,
                           int *err_no)
{
	int64_t until = rk_monotonic_ms() + timeout_ms;
	while (rk_monotonic_ms() < until) {
		int fd = in_netns(ctx, NULL, NULL, err_no);
		if (fd < 0)
			return false;
		struct sockaddr_in sa;
		memset(&sa, 0, sizeof sa);
		sa.sin_family = AF_INET;
		sa.sin_port = htons(RK_CONSOLE_VNC_PORT);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		size_t got = 0;
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
			struct pollfd pfd = {fd, POLLIN, 0};
			while (got < 12 && poll(&pfd, 1, 2000) > 0) {
				ssize_t n = read(fd, banner + got, 12 - got);
				if (n <= 0)
					break;
				got += (size_t)n;
			}
		}
		close(fd);
		if (got == 12) {
			banner[11] = '\0';
			return strncmp(banner, "RFB ", 4) == 0;
		}
		rk_sleep_ms(25);
	}
	return false;
}

void rk_console_endpoint(json_object *attempt, pid_t netns_pid, const char *banner)
{
	json_object *endpoint = json_object_new_object();
	put_text(endpoint, "address", "127.0.0.1");
	json_object_object_add(endpoint, "port", json_object_new_int(RK_CONSOLE_VNC_PORT));
	char nspath[64];
	snprintf(nspath, sizeof nspath, "/proc/%d/ns/net", (int)netns_pid);
	put_text(endpoint, "networkNamespace", nspath);
	put_text(endpoint, "banner", banner);
	json_object_object_add(attempt, "endpoint", endpoint);
}

static void launched(json_object *attempt, pid_t viewer_pid)
{
	json_object_object_add(attempt, "viewerPid", json_object_new_int64(viewer_pid));
	json_object_object_add(attempt, "viewerStart",
	                       json_object_new_int64((int64_t)rk_proc_start(viewer_pid)));
	rk_console_set(attempt, "launched", NULL);
	put_text(attempt, "transport_connected", "unknown");
	put_text(attempt, "viewer_cleanup", "pending");
}

static relay_status launch_failed(const rk_console *c, json_object *attempt, relay_error *err, int e,
                                  const char *message)
{
	rk_console_set(attempt, "failed", "worker-launch-failed");
	put_text(attempt, "viewer_cleanup", "not-started");
	return c->host->error_set(err, RELAY_E_REFUSED, e, "%s", message);
}

/* The browser live view: relay-vncweb on this host's loopback, reaching
 * x11vnc through the guest's namespace; the one-time URL goes to the
 * browser and standard error, never into a report. */
static relay_status live_view(const rk_console *c, json_object *attempt, const rk_console_viewer *v,
                              relay_error *err)
{
	char netns[64];
	snprintf(netns, sizeof netns, "/proc/%d/ns/net", (int)v->netns_pid);
	rs_liveview_request req = {
	    v->libexec_dir, netns,    RK_CONSOLE_VNC_PORT, v->password, rk_console_control(),
	    v->events_path, v->log_fd};
	rs_liveview lv;
	rs_error e;
	if (rs_liveview_start(&req, &lv, &e) != 0)
		return launch_failed(c, attempt, err, e.errnum, e.message);
	launched(attempt, lv.bridge_pid);
	json_object *live = json_object_new_object();
	put_text(live, "origin", lv.origin);
	json_object_object_add(live, "browser_opened", json_object_new_boolean(lv.browser_pid > 0));
	put_text(live, "launcher", lv.launcher[0] ? lv.launcher : NULL);
	put_text(live, "browser_reason", lv.browser_reason[0] ? lv.browser_reason : NULL);
	put_text(live, "control", req.control ? "on-take-over" : "view-only");
	put_text(live, "token", "one-time, in the URL logged on standard error");
	put_text(live, "events", v->events_path);
	json_object_object_add(attempt, "liveView", live);
	c->host->log(RELAY_LOG_INFO, c->ops->source,
	             "console of %s: live view at %s (one-time link, loopback only%s); %s", v->vm, lv.url,
	             req.control ? ", take-over offered" : ", view-only",
	             lv.browser_pid > 0 ? "opened with the browser" : lv.browser_reason);
	return RELAY_OK;
}

/* A viewer program, in the guest's namespace, with the password in its
 * environment and in a file. */
static relay_status viewer_program(const rk_console *c, json_object *attempt, const rk_console_viewer *v,
                                   const char *viewer, relay_error *err)
{
	char line[80], why[RELAY_ERROR_MESSAGE_BYTES];
	int n = snprintf(line, sizeof line, "%s\n", v->password);
	int e = rk_write_durable(v->password_file, line, (size_t)n, 0600, RK_DURABLE_SYNC);
	if (e != 0) {
		snprintf(why, sizeof why, "the viewer %s could not be given its password file %s", viewer,
		         v->password_file);
		return launch_failed(c, attempt, err, e, why);
	}
	put_text(attempt, "passwordFile", v->password_file);
	size_t envc = 0;
	while (environ[envc])
		envc++;
	const char **venv = calloc(envc + 3, sizeof *venv);
	if (venv == NULL)
		return launch_failed(c, attempt, err, ENOMEM, "out of memory starting the viewer");
	char pw_env[96], pwf_env[4200];
	snprintf(pw_env, sizeof pw_env, "VNC_PASSWORD=%s", v->password);
	snprintf(pwf_env, sizeof pwf_env, "MCP_RELAY_VNC_PASSWORD_FILE=%s", v->password_file);
	size_t k = 0;
	for (size_t i = 0; i < envc; i++)
		if (strncmp(environ[i], "VNC_PASSWORD=", 13) != 0)
			venv[k++] = environ[i];
	venv[k++] = pw_env;
	venv[k++] = pwf_env;
	const char *vargv[] = {viewer, "127.0.0.1::5900", NULL};
	int pid = v->in_netns(v->in_netns_ctx, vargv, venv, &e);
	free(venv);
	if (pid <= 0) {
		snprintf(why, sizeof why, "the viewer %s could not be started: %s", viewer, strerror(e));
		return launch_failed(c, attempt, err, e, why);
	}
	launched(attempt, (pid_t)pid);
	return RELAY_OK;
}

relay_status rk_console_viewer_start(const rk_console *c, json_object *attempt, const rk_console_viewer *v,
                                     relay_error *err)
{
	const char *viewer = getenv("MCP_RELAY_VNC_VIEWER");
	if (viewer && strcmp(viewer, "browser") == 0)
		return live_view(c, attempt, v, err);
	if (viewer && *viewer)
		return viewer_program(c, attempt, v, viewer, err);
	rk_console_set(attempt, "dispatching", "worker-unavailable");
	json_object_object_add(attempt, "transport_connected", json_object_new_boolean(false));
	put_text(attempt, "viewer_cleanup", "not-started");
	c->host->log(
	    RELAY_LOG_INFO, c->ops->source,
	    "console of %s: x11vnc (view-only, one-time password) listens on 127.0.0.1:%d inside the "
	    "%s network namespace /proc/%d/ns/net; no viewer was launched because "
	    "MCP_RELAY_VNC_VIEWER is not set",
	    v->vm, RK_CONSOLE_VNC_PORT, v->whose, (int)v->netns_pid);
	return RELAY_OK;
}

bool rk_console_viewer_stop(json_object *attempt)
{
	bool confirmed = true;
	int64_t pid = 0, start = 0;
	rsj_get_int(attempt, "viewerPid", &pid);
	rsj_get_int(attempt, "viewerStart", &start);
	pid_t vpid = (pid_t)pid;
	unsigned long long vstart = (unsigned long long)start;
	if (vpid > 0 && rk_proc_alive(vpid, vstart)) {
		kill(-vpid, SIGKILL);
		kill(vpid, SIGKILL);
		for (int64_t until = rk_monotonic_ms() + 2000;
		     rk_proc_alive(vpid, vstart) && rk_monotonic_ms() < until;) {
			if (waitpid(vpid, NULL, WNOHANG) == vpid)
				break;
			rk_sleep_ms(10);
		}
		confirmed = !rk_proc_alive(vpid, vstart);
	}
	const char *pwfile = rsj_get_str(attempt, "passwordFile");
	if (pwfile)
		unlink(pwfile);
	return confirmed;
}
