/*
 * liveview.c — starting the browser live view (relay_support/liveview.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "relay_support/liveview.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "relay_support/which.h"

extern char **environ;

#define LIVEVIEW_NOVNC_DIR   "/usr/share/novnc"
#define LIVEVIEW_URL_WAIT_MS 10000

int rs_liveview_wanted(const char *viewer)
{
	return viewer != NULL && strcmp(viewer, "browser") == 0;
}

static const char *novnc_dir(void)
{
	const char *d = getenv("MCP_RELAY_NOVNC_DIR");
	return d && *d ? d : LIVEVIEW_NOVNC_DIR;
}

int rs_liveview_check(const char *libexec_dir, char *path, size_t size, rs_error *err)
{
	struct stat st;
	char rfb[PATH_MAX];
	if (libexec_dir == NULL)
		return rs_error_set(err, ENOENT,
		                    "the live view needs the relay's libexec folder, and none is known");
	snprintf(path, size, "%s/../relay-vncweb", libexec_dir);
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0)
		return rs_error_set(err, ENOENT,
		                    "the live view's bridge %s is missing; rebuild or reinstall mcp-relay",
		                    path);
	snprintf(rfb, sizeof rfb, "%s/core/rfb.js", novnc_dir());
	if (stat(rfb, &st) != 0)
		return rs_error_set(
		    err, ENOENT,
		    "MCP_RELAY_VNC_VIEWER=browser needs noVNC (%s is missing): apt-get install "
		    "novnc, or set MCP_RELAY_NOVNC_DIR",
		    rfb);
	return 0;
}

static int read_line(int fd, char *out, size_t size, int timeout_ms)
{
	size_t got = 0;
	struct pollfd p = {fd, POLLIN, 0};
	while (got + 1 < size && poll(&p, 1, timeout_ms) > 0) {
		ssize_t n = read(fd, out + got, 1);
		if (n <= 0)
			break;
		if (out[got] == '\n') {
			out[got] = '\0';
			return 0;
		}
		got++;
	}
	out[got] = '\0';
	return -1;
}

static pid_t spawn(const char *const *argv, int in_fd, int out_fd, int log_fd, int new_session, int *err_no)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	pid_t pid = -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	if (new_session)
		posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
	else {
		posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
		posix_spawnattr_setpgroup(&attr, 0);
	}
	if (in_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
	else
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (out_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	else
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (log_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
	else
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	*err_no = posix_spawnp(&pid, argv[0], &fa, &attr, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	return *err_no == 0 ? pid : -1;
}

/* $BROWSER (its first entry of a colon-separated list; "%s" replaced by the
 * URL when present), else xdg-open. */
static void open_browser(const rs_liveview_request *req, rs_liveview *out)
{
	const char *browser = getenv("BROWSER");
	char cmd[PATH_MAX];
	int e = 0;
	if (browser && *browser) {
		size_t n = strcspn(browser, ":");
		snprintf(cmd, sizeof cmd, "%.*s", (int)n, browser);
		snprintf(out->launcher, sizeof out->launcher, "$BROWSER");
	} else {
		char *xdg = rs_which("xdg-open", getenv("PATH"));
		if (xdg == NULL) {
			snprintf(out->browser_reason, sizeof out->browser_reason,
			         "neither BROWSER is set nor xdg-open installed (apt-get install xdg-utils)");
			return;
		}
		snprintf(cmd, sizeof cmd, "%s", xdg);
		free(xdg);
		snprintf(out->launcher, sizeof out->launcher, "xdg-open");
	}
	const char *argv[] = {cmd, out->url, NULL};
	pid_t pid = spawn(argv, -1, -1, req->log_fd, 1, &e);
	if (pid <= 0)
		snprintf(out->browser_reason, sizeof out->browser_reason, "%.80s could not be started: %.40s",
		         cmd, strerror(e));
	else
		out->browser_pid = pid;
}

int rs_liveview_start(const rs_liveview_request *req, rs_liveview *out, rs_error *err)
{
	char bridge[PATH_MAX], port[16];
	int in[2] = {-1, -1}, url[2] = {-1, -1}, e = 0, rc = -1;
	memset(out, 0, sizeof *out);
	if (rs_liveview_check(req->libexec_dir, bridge, sizeof bridge, err) != 0)
		return -1;
	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(url, O_CLOEXEC) != 0) {
		rs_error_set(err, errno, "cannot start the live view: %s", strerror(errno));
		goto cleanup;
	}
	snprintf(port, sizeof port, "%d", req->vnc_port);
	const char *argv[12];
	size_t k = 0;
	argv[k++] = bridge;
	argv[k++] = "--vnc-port";
	argv[k++] = port;
	argv[k++] = "--web";
	argv[k++] = novnc_dir();
	if (req->netns_path) {
		argv[k++] = "--netns";
		argv[k++] = req->netns_path;
	}
	if (req->control)
		argv[k++] = "--control";
	if (req->events_path) {
		argv[k++] = "--events";
		argv[k++] = req->events_path;
	}
	argv[k] = NULL;
	out->bridge_pid = spawn(argv, in[0], url[1], req->log_fd, 0, &e);
	close(in[0]);
	close(url[1]);
	in[0] = url[1] = -1;
	if (out->bridge_pid <= 0) {
		out->bridge_pid = 0;
		rs_error_set(err, e, "the live view's bridge %s could not be started: %s", bridge,
		             strerror(e));
		goto cleanup;
	}
	/* The relay ignores SIGPIPE (mcp/server.c): a bridge that died early
	 * makes this write fail, not the relay. */
	if (write(in[1], req->password, strlen(req->password)) < 0 || write(in[1], "\n", 1) != 1 ||
	    read_line(url[0], out->url, sizeof out->url, LIVEVIEW_URL_WAIT_MS) != 0 ||
	    strncmp(out->url, "http://127.0.0.1:", 17) != 0) {
		kill(-out->bridge_pid, SIGKILL);
		waitpid(out->bridge_pid, NULL, 0);
		out->bridge_pid = 0;
		rs_error_set(err, EIO,
		             "the live view's bridge did not start (its messages are in the console log)");
		goto cleanup;
	}
	const char *hash = strchr(out->url, '#');
	snprintf(out->origin, sizeof out->origin, "%.*s", hash ? (int)(hash - out->url - 1) : 0, out->url);
	open_browser(req, out);
	rc = 0;
cleanup:
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (url[i] >= 0)
			close(url[i]);
	}
	return rc;
}

/* One line the bridge wrote: {"event":"<name>","at":"<time>"}. */
static int event_line(const char *line, char *event, size_t esize, char *at, size_t asize)
{
	return sscanf(line, "{\"event\":\"%31[a-z-]\",\"at\":\"%39[0-9TZ:.-]\"}", event, at) == 2 &&
	       esize >= 32 && asize >= 40;
}

char *rs_liveview_take_overs(const char *events_path)
{
	size_t cap = 256, len = 0;
	char *out = malloc(cap), line[256], open_at[40] = "";
	FILE *f = events_path ? fopen(events_path, "re") : NULL;
	if (out == NULL) {
		if (f)
			fclose(f);
		return NULL;
	}
	out[len++] = '[';
	out[len] = '\0';
	while (f && fgets(line, sizeof line, f)) {
		char event[32], at[40], item[128];
		if (!event_line(line, event, sizeof event, at, sizeof at))
			continue;
		item[0] = '\0';
		if (strcmp(event, "control-start") == 0 && open_at[0] == '\0')
			snprintf(open_at, sizeof open_at, "%s", at);
		else if (strcmp(event, "control-end") == 0 && open_at[0]) {
			snprintf(item, sizeof item, "%s{\"start\":\"%s\",\"end\":\"%s\"}", len > 1 ? "," : "",
			         open_at, at);
			open_at[0] = '\0';
		}
		if (item[0]) {
			size_t n = strlen(item);
			if (len + n + 64 > cap) {
				char *bigger = realloc(out, cap * 2 + n);
				if (bigger == NULL)
					break;
				out = bigger;
				cap = cap * 2 + n;
			}
			memcpy(out + len, item, n + 1);
			len += n;
		}
	}
	if (open_at[0] && len + 80 < cap) {
		len += (size_t)snprintf(out + len, cap - len, "%s{\"start\":\"%s\",\"end\":null}",
		                        len > 1 ? "," : "", open_at);
	}
	if (f)
		fclose(f);
	if (len + 2 > cap) {
		char *bigger = realloc(out, len + 2);
		if (bigger == NULL) {
			free(out);
			return NULL;
		}
		out = bigger;
	}
	out[len++] = ']';
	out[len] = '\0';
	return out;
}
