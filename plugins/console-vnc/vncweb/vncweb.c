/*
 * vncweb.c — relay-vncweb (vncweb.h): the loopback HTTP server.
 *
 *   relay-vncweb --vnc-port 5900 [--netns /proc/<pid>/ns/net] [--web DIR]
 *                [--control] [--events FILE]
 *
 * Reads x11vnc's one-time password from the first line of standard input,
 * listens on 127.0.0.1 (an ephemeral port, in this host's network
 * namespace), then switches to the guest's network namespace (so every
 * connection to x11vnc reaches the guest's loopback), prints the URL
 * `http://127.0.0.1:<port>/#token=<64 hex>` on standard output, closes it,
 * and serves until killed:
 *
 *   GET  /            the page (vncweb_page.c): no guest data
 *   POST /session     body = the token: once, 204 and an HttpOnly
 *                     SameSite=Strict cookie; a wrong or used token is 403
 *   GET  /config      {password, control} (cookie)
 *   GET  /novnc/...   noVNC's files from --web (cookie)
 *   GET  /websockify  the WebSocket bridge to x11vnc (cookie, same origin)
 *   POST /control     "take" or "give" (cookie, --control): the take-over
 *
 * Every other request, and any request without the cookie, is 403; a Host
 * header other than 127.0.0.1:<port> is refused (DNS rebinding).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/nsfs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "relay_support/fds.h"
#include "vncweb.h"

#define REQUEST_MAX_BYTES 8192
#define REQUEST_WAIT_MS   3000

void vncweb_now(char out[64])
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
	         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (ts.tv_nsec / 1000000) % 1000);
}

static int random_hex(char *out, size_t hex_chars)
{
	unsigned char bytes[64];
	size_t n = hex_chars / 2;
	if (n > sizeof bytes || getrandom(bytes, n, 0) != (ssize_t)n)
		return -1;
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", bytes[i]);
	out[hex_chars] = '\0';
	return 0;
}

/* Constant-time comparison of two NUL-terminated secrets. */
static bool same_secret(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = (unsigned char)(la != lb);
	for (size_t i = 0; i < la && i < lb; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0 && la > 0;
}

static void respond(int fd, int code, const char *reason, const char *type, const char *extra_headers,
                    const char *body, size_t body_len)
{
	char head[1024];
	int n = snprintf(head, sizeof head,
	                 "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
	                 "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
	                 "Referrer-Policy: no-referrer\r\nX-Frame-Options: DENY\r\n%s%s%s%s\r\n",
	                 code, reason, body_len, type ? "Content-Type: " : "", type ? type : "",
	                 type ? "\r\n" : "", extra_headers ? extra_headers : "");
	if (n > 0 && (size_t)n < sizeof head && rs_write_all(fd, head, (size_t)n) == 0 && body_len)
		rs_write_all(fd, body, body_len);
}

static void refuse(int fd, int code)
{
	static const char forbidden[] =
	    "403 forbidden: open the link mcp-relay logged; each link works once\n";
	if (code == 403)
		respond(fd, 403, "Forbidden", "text/plain; charset=utf-8", NULL, forbidden,
		        sizeof forbidden - 1);
	else
		respond(fd, code, code == 404 ? "Not Found" : "Bad Request", "text/plain", NULL, "", 0);
}

/* The value of header `name` (case-insensitive) in the request head, copied
 * into out; false when absent. */
static bool header(const char *head, const char *name, char *out, size_t size)
{
	size_t nl = strlen(name);
	for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
		const char *line = p + 2;
		if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
			const char *v = line + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			const char *end = strstr(v, "\r\n");
			size_t len = end ? (size_t)(end - v) : strlen(v);
			if (len >= size)
				return false;
			memcpy(out, v, len);
			out[len] = '\0';
			return true;
		}
	}
	return false;
}

static bool has_session(const vncweb *w, const char *head)
{
	char cookies[2048];
	if (w->session[0] == '\0' || !header(head, "Cookie", cookies, sizeof cookies))
		return false;
	for (char *save = NULL, *c = strtok_r(cookies, ";", &save); c; c = strtok_r(NULL, ";", &save)) {
		while (*c == ' ')
			c++;
		if (strncmp(c, VNCWEB_COOKIE "=", sizeof VNCWEB_COOKIE) == 0 &&
		    same_secret(c + sizeof VNCWEB_COOKIE, w->session))
			return true;
	}
	return false;
}

static const char *mime_of(const char *path)
{
	const char *dot = strrchr(path, '.');
	static const struct {
		const char *ext, *type;
	} types[] = {{".js", "text/javascript; charset=utf-8"},
	             {".html", "text/html; charset=utf-8"},
	             {".css", "text/css; charset=utf-8"},
	             {".svg", "image/svg+xml"},
	             {".png", "image/png"},
	             {".json", "application/json"}};
	for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return "application/octet-stream";
}

/* GET /novnc/<rel>: a regular file below web_dir, by a plain relative name. */
static void serve_file(const vncweb *w, int fd, const char *rel)
{
	if (rel[0] == '\0' || strstr(rel, "..") || strstr(rel, "//")) {
		refuse(fd, 404);
		return;
	}
	for (const char *p = rel; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '/' || *p == '.' || *p == '-' || *p == '_')) {
			refuse(fd, 404);
			return;
		}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", w->web_dir, rel);
	int file = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (file < 0 || fstat(file, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (16 << 20)) {
		if (file >= 0)
			close(file);
		refuse(fd, 404);
		return;
	}
	char *data = malloc((size_t)st.st_size + 1);
	ssize_t got = data ? read(file, data, (size_t)st.st_size) : -1;
	close(file);
	if (got == st.st_size)
		respond(fd, 200, "OK", mime_of(path), NULL, data, (size_t)got);
	else
		refuse(fd, 404);
	free(data);
}

static void note_event(const vncweb *w, const char *event)
{
	char at[64], line[256];
	vncweb_now(at);
	int n = snprintf(line, sizeof line, "{\"event\":\"%s\",\"at\":\"%s\"}\n", event, at);
	fprintf(stderr, "relay-vncweb: %s at %s\n", event, at);
	if (w->events_path) {
		int fd = open(w->events_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0) {
			rs_write_all(fd, line, (size_t)n);
			fsync(fd);
			close(fd);
		}
	}
}

static void post_session(vncweb *w, int fd, const char *head, const char *body)
{
	char cookie[256];
	if (has_session(w, head)) { /* a reload of the page that holds the cookie */
		respond(fd, 204, "No Content", NULL, NULL, "", 0);
		return;
	}
	if (w->token_used || !same_secret(body, w->token)) {
		fprintf(stderr, "relay-vncweb: refused a %s token\n",
		        w->token_used ? "used or wrong" : "wrong");
		refuse(fd, 403);
		return;
	}
	w->token_used = true;
	memset(w->token, 0, sizeof w->token);
	if (random_hex(w->session, 64) != 0) {
		refuse(fd, 403);
		return;
	}
	snprintf(cookie, sizeof cookie, "Set-Cookie: %s=%s; Path=/; HttpOnly; SameSite=Strict\r\n",
	         VNCWEB_COOKIE, w->session);
	respond(fd, 204, "No Content", NULL, cookie, "", 0);
	note_event(w, "viewer-admitted");
}

static void post_control(vncweb *w, int fd, const char *body)
{
	if (!w->control_allowed) {
		refuse(fd, 403);
		return;
	}
	bool take = strcmp(body, "take") == 0;
	if (!take && strcmp(body, "give") != 0) {
		refuse(fd, 400);
		return;
	}
	if (take != (w->shared->control != 0)) {
		w->shared->control = take ? 1 : 0;
		note_event(w, take ? "control-start" : "control-end");
	}
	respond(fd, 204, "No Content", NULL, NULL, "", 0);
}

static void get_config(const vncweb *w, int fd)
{
	char body[256];
	int n = snprintf(body, sizeof body, "{\"password\":\"%s\",\"control\":%s}", w->password,
	                 w->control_allowed ? "true" : "false");
	respond(fd, 200, "OK", "application/json", NULL, body, (size_t)n);
}

/* Reads the head (and a small body) of one request within REQUEST_WAIT_MS. */
static ssize_t read_request(int fd, char *buf, size_t size, char **body_out)
{
	size_t got = 0;
	struct pollfd p = {fd, POLLIN, 0};
	*body_out = NULL;
	while (got + 1 < size && poll(&p, 1, REQUEST_WAIT_MS) > 0) {
		ssize_t n = read(fd, buf + got, size - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		buf[got] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		if (end == NULL)
			continue;
		char len_text[32];
		long want = header(buf, "Content-Length", len_text, sizeof len_text) ? atol(len_text) : 0;
		size_t have = got - (size_t)(end + 4 - buf);
		if (want < 0 || want > 512)
			return -1;
		if ((long)have >= want) {
			end[2] = '\0'; /* the head ends at its last CRLF */
			*body_out = end + 4;
			(*body_out)[want] = '\0';
			return (ssize_t)got;
		}
	}
	return -1;
}

static void handle(vncweb *w, int fd)
{
	char buf[REQUEST_MAX_BYTES + 1], method[8], target[512], host[128], want_host[64];
	char *body = NULL;
	if (read_request(fd, buf, sizeof buf, &body) < 0 ||
	    sscanf(buf, "%7s %511s HTTP/1.%*c", method, target) != 2) {
		refuse(fd, 400);
		return;
	}
	snprintf(want_host, sizeof want_host, "127.0.0.1:%d", w->port);
	if (!header(buf, "Host", host, sizeof host) || strcmp(host, want_host) != 0) {
		refuse(fd, 403);
		return;
	}
	bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
	if (get && strcmp(target, "/") == 0) {
		respond(fd, 200, "OK", "text/html; charset=utf-8",
		        "Content-Security-Policy: default-src 'self'; script-src 'self' 'unsafe-inline'; "
		        "connect-src 'self' ws://127.0.0.1:*; img-src 'self' data: blob:; style-src 'self' "
		        "'unsafe-inline'\r\n",
		        vncweb_page_html, strlen(vncweb_page_html));
		return;
	}
	if (post && strcmp(target, "/session") == 0) {
		post_session(w, fd, buf, body);
		return;
	}
	if (!has_session(w, buf)) {
		refuse(fd, 403);
		return;
	}
	if (get && strcmp(target, "/config") == 0)
		get_config(w, fd);
	else if (post && strcmp(target, "/control") == 0)
		post_control(w, fd, body);
	else if (get && strncmp(target, "/novnc/", 7) == 0)
		serve_file(w, fd, target + 7);
	else if (get && strcmp(target, "/websockify") == 0) {
		char key[64], origin[128], upgrade[32], proto[128], want_origin[80];
		snprintf(want_origin, sizeof want_origin, "http://%s", want_host);
		if (!header(buf, "Upgrade", upgrade, sizeof upgrade) ||
		    strcasecmp(upgrade, "websocket") != 0 ||
		    !header(buf, "Sec-WebSocket-Key", key, sizeof key) ||
		    !header(buf, "Origin", origin, sizeof origin) || strcmp(origin, want_origin) != 0) {
			refuse(fd, 403);
			return;
		}
		bool binary =
		    header(buf, "Sec-WebSocket-Protocol", proto, sizeof proto) && strstr(proto, "binary");
		pid_t pid = fork();
		if (pid == 0) {
			close(w->listen_fd);
			_exit(vncweb_ws_serve(w, fd, key, binary ? "binary" : NULL));
		}
	} else
		refuse(fd, 404);
}

static int listen_loopback(int *port_out)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port_out = ntohs(sa.sin_port);
	return fd;
}

static int usage(void)
{
	fprintf(stderr, "usage: relay-vncweb --vnc-port N [--netns PATH] [--web DIR] [--control] "
	                "[--events FILE] < password\n");
	return 2;
}

int main(int argc, char **argv)
{
	static vncweb w;
	const char *netns = NULL;
	ino_t joined_ino = 0;
	dev_t joined_dev = 0;
	w.web_dir = "/usr/share/novnc";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--vnc-port") == 0 && i + 1 < argc)
			w.vnc_port = atoi(argv[++i]);
		else if (strcmp(argv[i], "--netns") == 0 && i + 1 < argc)
			netns = argv[++i];
		else if (strcmp(argv[i], "--web") == 0 && i + 1 < argc)
			w.web_dir = argv[++i];
		else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc)
			w.events_path = argv[++i];
		else if (strcmp(argv[i], "--control") == 0)
			w.control_allowed = true;
		else
			return usage();
	}
	if (w.vnc_port <= 0 || w.vnc_port > 65535)
		return usage();
	if (fgets(w.password, sizeof w.password, stdin) == NULL) {
		fprintf(stderr, "relay-vncweb: no password on standard input\n");
		return 2;
	}
	w.password[strcspn(w.password, "\r\n")] = '\0';
	for (const char *p = w.password; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) {
			fprintf(stderr, "relay-vncweb: the password must be letters and digits\n");
			return 2;
		}
	w.shared = mmap(NULL, sizeof *w.shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (w.shared == MAP_FAILED || random_hex(w.token, 64) != 0) {
		fprintf(stderr, "relay-vncweb: cannot set up: %s\n", strerror(errno));
		return 1;
	}
	w.listen_fd = listen_loopback(&w.port);
	if (w.listen_fd < 0) {
		fprintf(stderr, "relay-vncweb: cannot listen on 127.0.0.1: %s\n", strerror(errno));
		return 1;
	}
	if (netns) {
		int ns = open(netns, O_RDONLY | O_CLOEXEC);
		struct stat joined;
		if (ns >= 0 && fstat(ns, &joined) == 0) {
			joined_ino = joined.st_ino;
			joined_dev = joined.st_dev;
		}
		bool entered = ns >= 0 && setns(ns, CLONE_NEWNET) == 0;
		if (!entered && ns >= 0 && errno == EPERM) {
			/* Without root (a guest whose namespaces belong to this user's own
			 * user namespace): join the user namespace that owns the network
			 * namespace first, where this user holds the capabilities. */
			int owner = ioctl(ns, NS_GET_USERNS);
			entered =
			    owner >= 0 && setns(owner, CLONE_NEWUSER) == 0 && setns(ns, CLONE_NEWNET) == 0;
			if (owner >= 0)
				close(owner);
		}
		if (!entered) {
			fprintf(stderr, "relay-vncweb: cannot enter the guest's network namespace %s: %s\n",
			        netns, strerror(errno));
			return 1;
		}
		close(ns);
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGCHLD, SIG_IGN); /* WebSocket children are reaped by the kernel */
	printf("http://127.0.0.1:%d/#token=%s\n", w.port, w.token);
	fflush(stdout);
	fclose(stdout);
	for (;;) {
		/* The guest gone (its namespace no longer at --netns, or another
		 * one there: the pid was reused), the bridge ends with it, whether
		 * or not the relay got to cancel it. */
		struct pollfd lp = {w.listen_fd, POLLIN, 0};
		if (poll(&lp, 1, 1000) == 0) {
			struct stat now;
			if (netns && (stat(netns, &now) != 0 || now.st_ino != joined_ino ||
			              now.st_dev != joined_dev)) {
				fprintf(stderr,
				        "relay-vncweb: the guest's network namespace is gone; stopping\n");
				return 0;
			}
			continue;
		}
		int fd = accept4(w.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return 1;
		}
		handle(&w, fd);
		close(fd);
	}
}
