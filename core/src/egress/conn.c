/*
 * One connection of the egress proxy: HTTP (absolute-form requests and
 * CONNECT) or SOCKS5, the decision, the upstream connection made from the
 * relay's namespace, the bytes both ways, and the record (see proxy.h).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress/proxy.h"
#include "egress/records.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define HEAD_MAX_BYTES  16384
#define PUMP_BUF_BYTES  (256 * 1024)
#define PIPE_BYTES      (1024 * 1024)
#define CLIENT_WAIT_MS  30000
#define CONNECT_WAIT_MS 10000

typedef enum proto { PROTO_HTTP, PROTO_CONNECT, PROTO_SOCKS5 } proto;
static const char *const proto_names[] = {"http", "connect", "socks5"};

typedef struct conn {
	egress_ctx *ctx;
	int client, upstream;
	proto kind;
	char id[48], step[EGRESS_STEP_MAX], time[25];
	int64_t start_ms;
	char name[EGRESS_NAME_MAX + 3]; /* as asked (a name or a literal) */
	int port;
	char address[INET6_ADDRSTRLEN];
	egress_verdict v;
	char error[600];
	uint64_t bytes_out, bytes_in; /* guest to destination, and back */
	char head[HEAD_MAX_BYTES + 1];
	size_t head_len;
	size_t head_end; /* bytes of the request head (HTTP) */
} conn;

static void write_record(conn *c, const char *phase)
{
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "record", "connection");
	jsonx_add_str(r, "phase", phase);
	jsonx_add_str(r, "id", c->id);
	jsonx_add_str(r, "executionId", c->step[0] ? c->step : NULL);
	jsonx_add_str(r, "time", c->time);
	jsonx_add_str(r, "protocol", proto_names[c->kind]);
	jsonx_add_str(r, "name", c->name[0] ? c->name : NULL);
	jsonx_add_int(r, "port", c->port);
	jsonx_add_str(r, "address", c->address[0] ? c->address : NULL);
	jsonx_add_str(r, "decision", c->v.allowed ? "allowed" : "refused");
	jsonx_add_str(r, "rule", c->v.rule[0] ? c->v.rule : NULL);
	jsonx_add_str(r, "reason", c->v.reason[0] ? c->v.reason : NULL);
	if (strcmp(phase, "end") == 0) {
		jsonx_add_int(r, "bytesOut", (int64_t)c->bytes_out);
		jsonx_add_int(r, "bytesIn", (int64_t)c->bytes_in);
		jsonx_add_int(r, "durationMs", clock_monotonic_ms() - c->start_ms);
		jsonx_add_str(r, "error", c->error[0] ? c->error : NULL);
	}
	pthread_mutex_lock(&c->ctx->lock);
	egress_record_append(c->ctx->log_fd, r);
	pthread_mutex_unlock(&c->ctx->lock);
	json_object_put(r);
}

/* Waits until `fd` takes more bytes (a non-blocking socket that is full). */
static bool wait_writable(int fd)
{
	struct pollfd p = {fd, POLLOUT, 0};
	while (poll(&p, 1, -1) < 0)
		if (errno != EINTR)
			return false;
	return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0 || (p.revents & POLLOUT);
}

static bool send_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && wait_writable(fd))
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* Reads more of the client's first bytes; false on end, error or wait. */
static bool read_more(conn *c)
{
	if (c->head_len >= HEAD_MAX_BYTES)
		return false;
	struct pollfd p = {c->client, POLLIN, 0};
	if (poll(&p, 1, CLIENT_WAIT_MS) <= 0)
		return false;
	ssize_t n = recv(c->client, c->head + c->head_len, HEAD_MAX_BYTES - c->head_len, 0);
	if (n <= 0)
		return false;
	c->head_len += (size_t)n;
	c->head[c->head_len] = '\0';
	return true;
}

static bool need(conn *c, size_t bytes)
{
	while (c->head_len < bytes)
		if (!read_more(c))
			return false;
	return true;
}

/* The words of a refusal: destination, why (the rule or the range), and
 * the setting that would allow it. */
static void refusal_text(const conn *c, char *out, size_t size)
{
	bool v6 = strchr(c->name, ':') != NULL;
	bool literal = c->address[0] && strcmp(c->address, c->name) == 0;
	char dest[EGRESS_NAME_MAX + 64];
	snprintf(dest, sizeof dest, v6 ? "[%s]:%d" : "%s:%d", c->name, c->port);
	if (c->address[0] && !literal)
		snprintf(dest + strlen(dest), sizeof dest - strlen(dest), " (%s)", c->address);
	char fix[EGRESS_NAME_MAX + 64];
	if (strstr(c->v.reason, "Host header"))
		snprintf(fix, sizeof fix, "send a Host header naming %s:%d", c->name, c->port);
	else if (c->address[0] && !v6)
		snprintf(fix, sizeof fix, "the rule %s/32:%d in MCP_RELAY_EGRESS_ALLOW would allow it",
		         c->address, c->port);
	else if (!v6)
		snprintf(fix, sizeof fix, "the rule %s:%d in MCP_RELAY_EGRESS_ALLOW would allow it", c->name,
		         c->port);
	else
		snprintf(fix, sizeof fix, "IPv6 destinations are not served");
	int written = snprintf(
	    out, size, "egress refused %s: %s; %s (MCP_RELAY_GUEST_NETWORK=%s, set by the deployment)", dest,
	    c->v.reason[0] ? c->v.reason : "not allowed", fix,
	    c->ctx->policy.internet ? "internet" : "allow");
	/* A sentence longer than the line it goes into is cut, and says so. */
	if ((written < 0 || (size_t)written >= size) && size > 4)
		memcpy(out + size - 4, "...", 4);
}

static void refuse(conn *c)
{
	c->v.allowed = false;
	char text[600];
	refusal_text(c, text, sizeof text);
	if (c->kind == PROTO_SOCKS5) {
		/* 0x02: connection not allowed by ruleset. */
		static const unsigned char reply[10] = {5, 2, 0, 1, 0, 0, 0, 0, 0, 0};
		send_all(c->client, reply, sizeof reply);
	} else {
		char head[256];
		int body_len = (int)strlen(text) + 1;
		snprintf(head, sizeof head,
		         "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
		         "Content-Length: %d\r\nConnection: close\r\nX-MCP-Relay-Egress: refused\r\n\r\n",
		         body_len);
		send_all(c->client, head, strlen(head));
		send_all(c->client, text, strlen(text));
		send_all(c->client, "\n", 1);
	}
	write_record(c, "end");
}

static void fail_reply(conn *c, int http_status, const char *http_text, unsigned char socks_code)
{
	if (c->kind == PROTO_SOCKS5) {
		unsigned char reply[10] = {5, socks_code, 0, 1, 0, 0, 0, 0, 0, 0};
		send_all(c->client, reply, sizeof reply);
	} else {
		char head[1024];
		snprintf(head, sizeof head,
		         "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
		         "Connection: close\r\n\r\n%s\n",
		         http_status, http_text, strlen(c->error) + 1, c->error);
		send_all(c->client, head, strlen(head));
	}
}

/* Connects to `sa` within CONNECT_WAIT_MS; the socket or -1 with errno. */
static int connect_to(const struct sockaddr *sa, socklen_t len)
{
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, sa, len) != 0 && errno != EINPROGRESS)
		goto fail;
	struct pollfd p = {fd, POLLOUT, 0};
	int rc = poll(&p, 1, CONNECT_WAIT_MS);
	int soerr = 0;
	socklen_t sl = sizeof soerr;
	if (rc <= 0) {
		errno = rc == 0 ? ETIMEDOUT : errno;
		goto fail;
	}
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
	if (soerr != 0) {
		errno = soerr;
		goto fail;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
fail:;
	int e = errno;
	close(fd);
	errno = e;
	return -1;
}

static void set_address_text(conn *c, const struct sockaddr *sa)
{
	const void *raw = sa->sa_family == AF_INET
	                      ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
	                      : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	inet_ntop(sa->sa_family, raw, c->address, sizeof c->address);
}

/* The decision and the upstream connection: true when connected. On false
 * the refusal or failure has been answered and recorded. */
static bool decide_and_connect(conn *c)
{
	struct sockaddr_storage lit;
	if (egress_parse_literal(c->name, &lit)) {
		set_address_text(c, (struct sockaddr *)&lit);
		egress_check_address(&c->ctx->policy, (struct sockaddr *)&lit, c->port, true, c->ctx->own,
		                     c->ctx->own_count, &c->v);
		if (!c->v.allowed) {
			refuse(c);
			return false;
		}
		if (lit.ss_family == AF_INET)
			((struct sockaddr_in *)&lit)->sin_port = htons((uint16_t)c->port);
		else
			((struct sockaddr_in6 *)&lit)->sin6_port = htons((uint16_t)c->port);
		c->upstream = connect_to((struct sockaddr *)&lit, lit.ss_family == AF_INET
		                                                      ? sizeof(struct sockaddr_in)
		                                                      : sizeof(struct sockaddr_in6));
		if (c->upstream < 0) {
			snprintf(c->error, sizeof c->error, "cannot connect to %s:%d: %s", c->address,
			         c->port, strerror(errno));
			fail_reply(c, 502, "Bad Gateway", 5);
			write_record(c, "end");
			return false;
		}
		return true;
	}
	egress_check_name(&c->ctx->policy, c->name, c->port, &c->v);
	if (!c->v.allowed) {
		refuse(c);
		return false;
	}
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	char port_text[8];
	snprintf(port_text, sizeof port_text, "%d", c->port);
	int gai = getaddrinfo(c->name, port_text, &hints, &res);
	if (gai != 0) {
		snprintf(c->error, sizeof c->error, "cannot resolve %s: %s", c->name, gai_strerror(gai));
		fail_reply(c, 502, "Bad Gateway", 4);
		write_record(c, "end");
		return false;
	}
	egress_verdict name_verdict = c->v, first_refusal;
	bool any_refused = false;
	int last_errno = 0;
	for (struct addrinfo *ai = res; ai && c->upstream < 0; ai = ai->ai_next) {
		egress_verdict av;
		egress_check_address(&c->ctx->policy, ai->ai_addr, c->port, false, c->ctx->own,
		                     c->ctx->own_count, &av);
		if (!av.allowed) {
			if (!any_refused) {
				first_refusal = av;
				set_address_text(c, ai->ai_addr);
			}
			any_refused = true;
			continue;
		}
		set_address_text(c, ai->ai_addr);
		c->upstream = connect_to(ai->ai_addr, ai->ai_addrlen);
		last_errno = errno;
	}
	freeaddrinfo(res);
	if (c->upstream >= 0) {
		c->v = name_verdict;
		return true;
	}
	if (any_refused && last_errno == 0) {
		c->v = first_refusal;
		refuse(c);
		return false;
	}
	snprintf(c->error, sizeof c->error, "cannot connect to %s:%d (%s): %s", c->name, c->port, c->address,
	         strerror(last_errno));
	fail_reply(c, 502, "Bad Gateway", 5);
	write_record(c, "end");
	return false;
}

/* ---- TLS server name --------------------------------------------------------------- */

/* The SNI of a TLS ClientHello in `buf`: 1 found (in out), 0 none, -1
 * incomplete. */
static int client_hello_sni(const unsigned char *b, size_t len, char *out, size_t size)
{
	if (len < 5)
		return -1;
	if (b[0] != 0x16)
		return 0;
	size_t rec = ((size_t)b[3] << 8) | b[4];
	if (len < 5 + rec)
		return -1;
	const unsigned char *p = b + 5, *end = b + 5 + rec;
	if (end - p < 4 || p[0] != 1)
		return 0;
	p += 4 + 2 + 32; /* handshake header, version, random */
	if (p >= end)
		return 0;
	p += 1 + p[0]; /* session id */
	if (end - p < 2)
		return 0;
	p += 2 + (((size_t)p[0] << 8) | p[1]); /* cipher suites */
	if (p >= end)
		return 0;
	p += 1 + p[0]; /* compression */
	if (end - p < 2)
		return 0;
	const unsigned char *ext_end = p + 2 + (((size_t)p[0] << 8) | p[1]);
	p += 2;
	if (ext_end > end)
		ext_end = end;
	while (ext_end - p >= 4) {
		unsigned type = ((unsigned)p[0] << 8) | p[1];
		size_t elen = ((size_t)p[2] << 8) | p[3];
		p += 4;
		if ((size_t)(ext_end - p) < elen)
			return 0;
		if (type == 0 && elen >= 5 && p[2] == 0) {
			size_t nlen = ((size_t)p[3] << 8) | p[4];
			if (nlen + 5 > elen || nlen >= size)
				return 0;
			memcpy(out, p + 5, nlen);
			out[nlen] = '\0';
			return 1;
		}
		p += elen;
	}
	return 0;
}

/* ---- the bytes both ways ---------------------------------------------------------- */

/* The guest's first bytes of a tunnel: a TLS ClientHello naming another
 * server than the one asked for is a refusal (false). Else they go
 * upstream (false when that fails too). */
static bool first_client_bytes(conn *c, char *buf, const char *early, size_t early_len)
{
	if (early_len > 0)
		memcpy(buf, early, early_len); /* came with the request head (at most HEAD_MAX_BYTES) */
	ssize_t n = early_len ? (ssize_t)early_len : recv(c->client, buf, PUMP_BUF_BYTES, 0);
	if (n <= 0) {
		shutdown(c->upstream, SHUT_WR);
		return n == 0;
	}
	size_t have = (size_t)n;
	char sni[EGRESS_NAME_MAX + 1];
	int found;
	while ((found = client_hello_sni((unsigned char *)buf, have, sni, sizeof sni)) < 0 &&
	       have < PUMP_BUF_BYTES) {
		ssize_t more = recv(c->client, buf + have, PUMP_BUF_BYTES - have, 0);
		if (more <= 0)
			break;
		have += (size_t)more;
	}
	if (found == 1 && strcasecmp(sni, c->name) != 0) {
		c->v.allowed = false;
		c->v.rule[0] = '\0';
		snprintf(c->v.reason, sizeof c->v.reason,
		         "the TLS server name %.80s differs from the name asked for", sni);
		return false;
	}
	if (!send_all(c->upstream, buf, have))
		return false;
	c->bytes_out += have;
	return true;
}

/* One direction's pipe for splice(). Pipe pages count against the proxy's
 * user (fs.pipe-user-pages-soft, 64 MiB by default, and every guest's proxy
 * started by root runs as nobody), so a pipe starts at the default size and
 * grows to PIPE_BYTES only once a splice fills it: a connection that moves
 * bulk data gets ~1 MiB per splice() pair (a third of the CPU per GiB of a
 * 64 KiB pipe, bench/egress/README.md), a small exchange never holds 1 MiB. */
typedef struct pipe_lane {
	int fds[2]; /* -1 when splice() is not used: copies through the buffer */
	int bytes;  /* its capacity now */
	bool grown; /* growth was tried */
} pipe_lane;

static bool lane_open(pipe_lane *l)
{
	l->grown = false;
	if (pipe2(l->fds, O_CLOEXEC) != 0) {
		l->fds[0] = l->fds[1] = -1;
		return false;
	}
	l->bytes = fcntl(l->fds[1], F_GETPIPE_SZ);
	if (l->bytes <= 0)
		l->bytes = 65536;
	return true;
}

static void lane_close(pipe_lane *l)
{
	for (int i = 0; i < 2; i++)
		if (l->fds[i] >= 0)
			close(l->fds[i]);
	l->fds[0] = l->fds[1] = -1;
}

/* Moves what `from` has to `to`: through the lane's pipe with splice() (the
 * bytes never enter the proxy; the sockets are non-blocking then, so one
 * wake-up moves up to 16 pipefuls), else through `buf`. Bytes moved, 0 at
 * the end, -1 on an error, -2 when there was nothing after all. */
static ssize_t move_bytes(int from, int to, pipe_lane *lane, char *buf)
{
	if (lane->fds[0] < 0) {
		ssize_t n = recv(from, buf, PUMP_BUF_BYTES, 0);
		return n > 0 && !send_all(to, buf, (size_t)n) ? -1 : n;
	}
	ssize_t total = 0;
	for (int round = 0; round < 16; round++) {
		ssize_t in = splice(from, NULL, lane->fds[1], NULL, (size_t)lane->bytes,
		                    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (in == 0)
			return total;
		if (in < 0)
			return errno == EAGAIN ? (total ? total : -2) : -1;
		for (ssize_t left = in; left > 0;) {
			ssize_t out = splice(lane->fds[0], NULL, to, NULL, (size_t)left,
			                     SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (out < 0 && errno == EAGAIN && wait_writable(to))
				continue;
			if (out <= 0)
				return -1;
			left -= out;
		}
		total += in;
		if (!lane->grown && in >= lane->bytes) {
			lane->grown = true; /* once: a refusal (the user's budget) stays */
			int grown = fcntl(lane->fds[1], F_SETPIPE_SZ, PIPE_BYTES);
			if (grown > 0)
				lane->bytes = grown;
		}
	}
	return total;
}

static void set_nonblocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Copies both ways until both ends are done, starting with the `early`
 * bytes the guest sent with its request (see first_client_bytes). */
static void pump(conn *c, bool check_sni, const char *early, size_t early_len)
{
	char *buf = malloc(PUMP_BUF_BYTES);
	pipe_lane up = {{-1, -1}, 0, false}, down = {{-1, -1}, 0, false};
	if (buf == NULL)
		return;
	if (!lane_open(&up) || !lane_open(&down)) {
		lane_close(&up);
		lane_close(&down);
	}
	bool first = check_sni, client_open = true, upstream_open = true;
	if (early_len > 0 && !first) {
		if (!send_all(c->upstream, early, early_len))
			client_open = upstream_open = false;
		c->bytes_out += early_len;
	} else if (early_len > 0) {
		first = false;
		if (!first_client_bytes(c, buf, early, early_len))
			client_open = upstream_open = false;
	}
	if (!first && up.fds[0] >= 0) {
		set_nonblocking(c->client);
		set_nonblocking(c->upstream);
	}
	while (client_open || upstream_open) {
		struct pollfd p[2] = {{client_open ? c->client : -1, POLLIN, 0},
		                      {upstream_open ? c->upstream : -1, POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents && first) {
			first = false;
			if (!first_client_bytes(c, buf, NULL, 0))
				break;
			if (up.fds[0] >= 0) {
				set_nonblocking(c->client);
				set_nonblocking(c->upstream);
			}
		} else if (p[0].revents) {
			ssize_t n = move_bytes(c->client, c->upstream, &up, buf);
			if (n == 0) {
				client_open = false;
				shutdown(c->upstream, SHUT_WR);
			} else if (n == -1) {
				break;
			} else if (n > 0) {
				c->bytes_out += (uint64_t)n;
			}
		}
		if (p[1].revents) {
			ssize_t n = move_bytes(c->upstream, c->client, &down, buf);
			if (n == 0) {
				upstream_open = false;
				shutdown(c->client, SHUT_WR);
			} else if (n == -1) {
				break;
			} else if (n > 0) {
				c->bytes_in += (uint64_t)n;
			}
		}
	}
	lane_close(&up);
	lane_close(&down);
	free(buf);
}

/* ---- HTTP ------------------------------------------------------------------------- */

/* "host[:port]" into name and port (default_port when absent). */
static bool split_host_port(const char *text, size_t len, int default_port, char *name, size_t size,
                            int *port)
{
	char tmp[EGRESS_NAME_MAX + 16];
	if (len == 0 || len >= sizeof tmp)
		return false;
	memcpy(tmp, text, len);
	tmp[len] = '\0';
	char *colon = tmp[0] == '[' ? strstr(tmp, "]:") : strrchr(tmp, ':');
	if (tmp[0] == '[' && colon)
		colon++;
	*port = default_port;
	if (colon && (tmp[0] == '[' || strchr(tmp, ':') == colon)) {
		*colon = '\0';
		char *end = NULL;
		long v = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || *end != '\0' || v < 1 || v > 65535)
			return false;
		*port = (int)v;
	}
	size_t n = strlen(tmp);
	if (tmp[0] == '[' && n >= 2 && tmp[n - 1] == ']') {
		memmove(tmp, tmp + 1, n - 2);
		tmp[n - 2] = '\0';
	}
	/* A name that does not fit is refused, never cut into another name. */
	int written = snprintf(name, size, "%s", tmp);
	return written > 0 && (size_t)written < size;
}

/* The value of header `key` in the head (first line excluded), or NULL. */
static const char *header_value(const char *head, const char *key, size_t *len)
{
	size_t kl = strlen(key);
	for (const char *line = strstr(head, "\r\n"); line && line[2] != '\r';
	     line = strstr(line + 2, "\r\n")) {
		const char *h = line + 2;
		if (strncasecmp(h, key, kl) == 0 && h[kl] == ':') {
			const char *v = h + kl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			const char *e = strstr(v, "\r\n");
			*len = e ? (size_t)(e - v) : strlen(v);
			while (*len > 0 && (v[*len - 1] == ' ' || v[*len - 1] == '\t'))
				(*len)--;
			return v;
		}
	}
	return NULL;
}

static bool drop_header(const char *h)
{
	static const char *const dropped[] = {
	    "proxy-connection:", "proxy-authorization:", "connection:", "keep-alive:"};
	for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
		if (strncasecmp(h, dropped[i], strlen(dropped[i])) == 0)
			return true;
	return false;
}

static void bad_request(conn *c, const char *why)
{
	snprintf(c->error, sizeof c->error, "%s", why);
	snprintf(c->v.reason, sizeof c->v.reason, "not a proxy request the relay serves");
	fail_reply(c, 400, "Bad Request", 1);
	write_record(c, "end");
}

static void serve_http(conn *c)
{
	char *end;
	while ((end = strstr(c->head, "\r\n\r\n")) == NULL)
		if (!read_more(c)) {
			bad_request(c, "the request head did not end within 16 KiB and 30 s");
			return;
		}
	c->head_end = (size_t)(end - c->head) + 4;
	char method[16], target[2048];
	if (sscanf(c->head, "%15s %2047s", method, target) != 2) {
		bad_request(c, "not an HTTP request line");
		return;
	}
	if (strcmp(method, "CONNECT") == 0) {
		c->kind = PROTO_CONNECT;
		if (!split_host_port(target, strlen(target), 0, c->name, sizeof c->name, &c->port) ||
		    c->port == 0) {
			bad_request(c, "CONNECT needs host:port");
			return;
		}
		if (!decide_and_connect(c))
			return;
		static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
		send_all(c->client, ok, sizeof ok - 1);
		write_record(c, "start");
		pump(c, !egress_parse_literal(c->name, &(struct sockaddr_storage){0}), c->head + c->head_end,
		     c->head_len - c->head_end);
		write_record(c, "end");
		return;
	}
	c->kind = PROTO_HTTP;
	if (strncasecmp(target, "http://", 7) != 0) {
		bad_request(c,
		            "the egress proxy takes absolute http:// requests and CONNECT; use HTTPS_PROXY "
		            "for https");
		return;
	}
	const char *authority = target + 7;
	const char *path = strchr(authority, '/');
	size_t alen = path ? (size_t)(path - authority) : strlen(authority);
	if (!split_host_port(authority, alen, 80, c->name, sizeof c->name, &c->port)) {
		bad_request(c, "the request's host is not host[:port]");
		return;
	}
	size_t hlen = 0;
	const char *host = header_value(c->head, "Host", &hlen);
	char hname[EGRESS_NAME_MAX + 3];
	int hport = 0;
	if (host && (!split_host_port(host, hlen, 80, hname, sizeof hname, &hport) ||
	             strcasecmp(hname, c->name) != 0 || hport != c->port)) {
		snprintf(c->v.reason, sizeof c->v.reason,
		         "the Host header %.*s differs from the request's %.80s:%d",
		         (int)(hlen > 80 ? 80 : hlen), host, c->name, c->port);
		refuse(c);
		return;
	}
	if (!decide_and_connect(c))
		return;
	write_record(c, "start");
	strbuf sb = STRBUF_INIT;
	const char *version = strstr(c->head, " HTTP/");
	const char *eol = strstr(c->head, "\r\n");
	strbuf_printf(&sb, "%s %s%.*s\r\n", method, path ? path : "/",
	              version && version < eol ? (int)(eol - version) : 0, version ? version : "");
	for (const char *line = eol; line && line + 2 < c->head + c->head_end - 2;
	     line = strstr(line + 2, "\r\n")) {
		const char *h = line + 2, *e = strstr(h, "\r\n");
		if (!drop_header(h))
			strbuf_append(&sb, h, (size_t)(e - h) + 2);
	}
	strbuf_puts(&sb, "Connection: close\r\n\r\n");
	strbuf_append(&sb, c->head + c->head_end, c->head_len - c->head_end);
	if (strbuf_ok(&sb) && send_all(c->upstream, strbuf_str(&sb), sb.len))
		c->bytes_out += sb.len;
	strbuf_free(&sb);
	pump(c, false, NULL, 0);
	write_record(c, "end");
}

/* ---- SOCKS5 ----------------------------------------------------------------------- */

static void serve_socks5(conn *c)
{
	c->kind = PROTO_SOCKS5;
	if (!need(c, 2) || !need(c, 2 + (size_t)(unsigned char)c->head[1]))
		return;
	size_t off = 2 + (size_t)(unsigned char)c->head[1];
	static const unsigned char no_auth[2] = {5, 0};
	if (!send_all(c->client, no_auth, 2) || !need(c, off + 5))
		return;
	unsigned char *r = (unsigned char *)c->head + off;
	if (r[0] != 5 || r[1] != 1) {
		snprintf(c->error, sizeof c->error, "only the SOCKS5 CONNECT command is served");
		fail_reply(c, 0, "", 7);
		write_record(c, "end");
		return;
	}
	size_t addr_len = r[3] == 1 ? 4 : r[3] == 4 ? 16 : r[3] == 3 ? 1u + r[4] : 0;
	if (addr_len == 0 || !need(c, off + 4 + addr_len + 2)) {
		snprintf(c->error, sizeof c->error, "a SOCKS5 address type the proxy does not know");
		fail_reply(c, 0, "", 8);
		write_record(c, "end");
		return;
	}
	r = (unsigned char *)c->head + off;
	if (r[3] == 3)
		snprintf(c->name, sizeof c->name, "%.*s", (int)r[4], (char *)r + 5);
	else
		inet_ntop(r[3] == 1 ? AF_INET : AF_INET6, r + 4, c->name, sizeof c->name);
	c->port = (r[4 + addr_len] << 8) | r[5 + addr_len];
	size_t used = off + 4 + addr_len + 2;
	if (!decide_and_connect(c))
		return;
	static const unsigned char ok[10] = {5, 0, 0, 1, 0, 0, 0, 0, 0, 0};
	send_all(c->client, ok, sizeof ok);
	write_record(c, "start");
	pump(c, r[3] == 3, c->head + used, c->head_len - used);
	write_record(c, "end");
}

static void *conn_thread(void *arg)
{
	conn *c = arg;
	if (read_more(c)) {
		if ((unsigned char)c->head[0] == 5)
			serve_socks5(c);
		else
			serve_http(c);
	}
	close(c->client);
	if (c->upstream >= 0)
		close(c->upstream);
	free(c);
	return NULL;
}

void egress_conn_start(egress_ctx *ctx, int fd)
{
	conn *c = calloc(1, sizeof *c);
	if (c == NULL) {
		close(fd);
		return;
	}
	c->ctx = ctx;
	c->client = fd;
	c->upstream = -1;
	c->start_ms = clock_monotonic_ms();
	time_format_iso_millis(clock_now_ms(), c->time);
	egress_ctx_claim(ctx, c->id, sizeof c->id, c->step, sizeof c->step);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_t t;
	if (pthread_create(&t, &attr, conn_thread, c) != 0) {
		close(fd);
		free(c);
	}
	pthread_attr_destroy(&attr);
}
