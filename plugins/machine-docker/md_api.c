/*
 * md_api.c — the Docker Engine API (also Podman's Docker-compatible service)
 * over libcurl on a unix socket (or TLS with client certificates for a
 * tcp:// endpoint). Every request gets its own easy handle, so
 * operations on different leases run concurrently. No `docker` program is
 * involved.
 *
 *   md_api()          one request: a JSON body or a tar stream from a file
 *                     descriptor up, a buffered body (capped) or a stream to
 *                     a file descriptor down.
 *   md_stream_*()     the hijacked connection of POST /exec/{id}/start:
 *                     libcurl connects (CURLOPT_CONNECT_ONLY), the request
 *                     is written by hand with "Upgrade: tcp", and the raw
 *                     multiplexed stream follows the 101 answer.
 */
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"

#define MD_MAX_BODY_BYTES (16u << 20)

void md_reply_free(md_reply *r)
{
	if (r == NULL)
		return;
	free(r->body);
	free(r->path_stat);
	if (r->json)
		json_object_put(r->json);
	memset(r, 0, sizeof *r);
}

const char *md_reply_message(const md_reply *r)
{
	const char *m = md_str(r->json, "message");
	if (m)
		return m;
	return r->body && r->body[0] ? r->body : "no message";
}

bool md_url_encode(char *out, size_t size, const char *text)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(out);
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		             (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_' || *c == '~' ||
		             *c == '/';
		if (n + 4 >= size)
			return false;
		if (plain) {
			out[n++] = (char)*c;
		} else {
			out[n++] = '%';
			out[n++] = hex[*c >> 4];
			out[n++] = hex[*c & 15];
		}
	}
	out[n] = '\0';
	return true;
}

typedef struct io_ctx {
	md_state *st;
	relay_call *call;
	char *buf;
	size_t len, cap;
	bool too_large;
	int download_fd;
	int upload_fd;
	bool write_failed;
	char *path_stat;
} io_ctx;

static size_t on_write(char *data, size_t size, size_t n, void *user)
{
	io_ctx *c = user;
	size_t bytes = size * n;
	if (c->download_fd >= 0) {
		size_t done = 0;
		while (done < bytes) {
			ssize_t w = write(c->download_fd, data + done, bytes - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				c->write_failed = true;
				return 0;
			}
			done += (size_t)w;
		}
		return bytes;
	}
	if (c->len + bytes + 1 > MD_MAX_BODY_BYTES) {
		c->too_large = true;
		return 0;
	}
	if (c->len + bytes + 1 > c->cap) {
		size_t cap = c->cap ? c->cap : 4096;
		while (cap < c->len + bytes + 1)
			cap *= 2;
		char *p = realloc(c->buf, cap);
		if (p == NULL)
			return 0;
		c->buf = p;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, data, bytes);
	c->len += bytes;
	c->buf[c->len] = '\0';
	return bytes;
}

static size_t on_read(char *data, size_t size, size_t n, void *user)
{
	io_ctx *c = user;
	for (;;) {
		ssize_t r = read(c->upload_fd, data, size * n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return CURL_READFUNC_ABORT;
		return (size_t)r;
	}
}

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
	io_ctx *c = user;
	size_t bytes = size * n;
	static const char name[] = "x-docker-container-path-stat:";
	if (bytes > sizeof name - 1 && strncasecmp(data, name, sizeof name - 1) == 0 &&
	    c->path_stat == NULL) {
		const char *v = data + sizeof name - 1;
		size_t vl = bytes - (sizeof name - 1);
		while (vl && (*v == ' ' || *v == '\t')) {
			v++;
			vl--;
		}
		while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
			vl--;
		c->path_stat = strndup(v, vl);
	}
	return bytes;
}

static int on_progress(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	io_ctx *c = user;
	return c->call && c->st->host->call_cancelled(c->call) ? 1 : 0;
}

/* The URL of an API path: http://docker<path> over the unix socket, or
 * https://host:port<path> for a tcp:// endpoint. Returns what snprintf does. */
static size_t md_base_url(md_state *st, char *out, size_t size, const char *path)
{
	int n = st->tls.enabled ? snprintf(out, size, "https://%s:%d%s", st->tls.host, st->tls.port, path)
	                        : snprintf(out, size, "http://docker%s", path);
	return n < 0 ? size : (size_t)n;
}

/* How libcurl reaches the engine: the unix socket (the configured one or
 * the ssh forwarder's), or TLS with this relay's client certificate,
 * checking the engine's certificate and name against options.tls.caFile. */
static void md_curl_endpoint(md_state *st, CURL *h)
{
	if (!st->tls.enabled) {
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, st->socket_path);
		return;
	}
	curl_easy_setopt(h, CURLOPT_CAINFO, st->tls.ca);
	curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
	curl_easy_setopt(h, CURLOPT_SSLCERT, st->tls.cert);
	curl_easy_setopt(h, CURLOPT_SSLKEY, st->tls.key);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	curl_easy_setopt(h, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
}

static relay_status api_once(md_state *st, const char *method, const char *path, json_object *body_json,
                             int upload_fd, int download_fd, uint32_t timeout_ms, relay_call *call,
                             md_reply *reply, relay_error *err)
{
	memset(reply, 0, sizeof *reply);
	char url[4096];
	if (md_base_url(st, url, sizeof url, path) >= sizeof url)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the API path %.64s... is too long",
		              path);
	CURL *h = curl_easy_init();
	if (h == NULL)
		return md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "cannot create a libcurl handle");
	io_ctx ctx = {.st = st, .call = call, .download_fd = download_fd, .upload_fd = upload_fd};
	struct curl_slist *headers = NULL;
	const char *payload = NULL;
	relay_status s = RELAY_OK;
	headers = curl_slist_append(headers, "Expect:");
	md_curl_endpoint(st, h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_ms ? timeout_ms : 60000));
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &ctx);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &ctx);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, &ctx);
	if (strcmp(method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (upload_fd >= 0) {
		struct stat sb;
		if (fstat(upload_fd, &sb) != 0) {
			s = md_err(st, err, RELAY_E_IO, errno, "cannot read the archive to upload");
			goto done;
		}
		headers = curl_slist_append(headers, "Content-Type: application/x-tar");
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, &ctx);
		/* A pipe has no size: the body goes chunked. */
		if (S_ISREG(sb.st_mode))
			curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)sb.st_size);
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	} else if (strcmp(method, "POST") == 0 || body_json) {
		payload = body_json ? json_object_to_json_string_ext(body_json, JSON_C_TO_STRING_PLAIN) : "";
		headers = curl_slist_append(headers, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	} else {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	CURLcode rc = curl_easy_perform(h);
	long code = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	reply->status = code;
	if (rc == CURLE_ABORTED_BY_CALLBACK && call && st->host->call_cancelled(call)) {
		s = md_err(st, err, RELAY_E_CANCELLED, 0, "cancelled");
	} else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) {
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0,
		           "the container engine at %s cannot be reached (%s); start it (for Podman: podman "
		           "system service --time=0 %s) or fix options.endpoint",
		           st->endpoint, curl_easy_strerror(rc), st->endpoint);
	} else if (rc == CURLE_OPERATION_TIMEDOUT) {
		s = md_err(st, err, RELAY_E_TIMEOUT, 0, "the container engine did not answer %s %s in time",
		           method, path);
	} else if (ctx.too_large) {
		s = md_err(st, err, RELAY_E_TOO_LARGE, 0, "the engine's answer to %s %s passed %u bytes",
		           method, path, MD_MAX_BODY_BYTES);
	} else if (ctx.write_failed) {
		s = md_err(st, err, RELAY_E_IO, errno, "cannot write what the engine sent for %s", path);
	} else if (rc != CURLE_OK) {
		s = md_err(st, err, RELAY_E_INDETERMINATE, 0, "%s %s failed after it was sent: %s", method,
		           path, curl_easy_strerror(rc));
	}
	if (s == RELAY_OK) {
		reply->body = ctx.buf;
		reply->body_len = ctx.len;
		ctx.buf = NULL;
		if (reply->body && reply->body_len > 0 && (reply->body[0] == '{' || reply->body[0] == '['))
			reply->json = json_tokener_parse(reply->body);
		reply->path_stat = ctx.path_stat;
		ctx.path_stat = NULL;
	}
done:
	free(ctx.buf);
	free(ctx.path_stat);
	curl_slist_free_all(headers);
	curl_easy_cleanup(h);
	return s;
}

static relay_status api_engine(md_state *st, const char *method, const char *path, json_object *body_json,
                               int upload_fd, int download_fd, uint32_t timeout_ms, relay_call *call,
                               md_reply *reply, relay_error *err)
{
	relay_status s =
	    api_once(st, method, path, body_json, upload_fd, download_fd, timeout_ms, call, reply, err);
	/* Nothing was sent: with an ssh:// endpoint the forwarder may be gone. */
	if (s == RELAY_E_UNAVAILABLE && st->ssh.enabled &&
	    (upload_fd < 0 || lseek(upload_fd, 0, SEEK_SET) == 0)) {
		relay_status e = md_ssh_ensure(st, err);
		if (e != RELAY_OK)
			return e;
		s = api_once(st, method, path, body_json, upload_fd, download_fd, timeout_ms, call, reply,
		             err);
	}
	return s;
}

/* With options.managers, a manager that cannot be reached (nothing was
 * sent) passes the request to the next one (md_nodes.c). */
relay_status md_api(md_state *st, const char *method, const char *path, json_object *body_json, int upload_fd,
                    int download_fd, uint32_t timeout_ms, relay_call *call, md_reply *reply, relay_error *err)
{
	md_state *eng = md_manager_pick(st);
	relay_status s =
	    api_engine(eng, method, path, body_json, upload_fd, download_fd, timeout_ms, call, reply, err);
	size_t tried = 0;
	while (s == RELAY_E_UNAVAILABLE && (upload_fd < 0 || lseek(upload_fd, 0, SEEK_SET) == 0) &&
	       (eng = md_manager_next(st, eng, &tried)) != NULL)
		s = api_engine(eng, method, path, body_json, upload_fd, download_fd, timeout_ms, call, reply,
		               err);
	return s;
}

/* ---- the hijacked exec stream ------------------------------------------------ */

struct md_stream {
	CURL *h;
	curl_socket_t fd;
	bool tls;            /* over TLS: decrypted bytes may wait in libcurl past what poll sees */
	bool maybe_buffered; /* the last receive over TLS brought bytes: ask again before polling */
	char pending[16384]; /* bytes read past the answer's headers */
	size_t pending_len, pending_off;
};

void md_stream_free(md_stream *s)
{
	if (s == NULL)
		return;
	if (s->h)
		curl_easy_cleanup(s->h);
	free(s);
}

int md_stream_wait(md_stream *s, bool want_write, int wait_ms)
{
	if (s->pending_off < s->pending_len || (s->tls && s->maybe_buffered))
		return 1;
	struct pollfd p = {.fd = s->fd, .events = (short)(POLLIN | (want_write ? POLLOUT : 0))};
	int n = poll(&p, 1, wait_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	return n > 0 ? 1 : 0;
}

ssize_t md_stream_send(md_stream *s, const void *data, size_t len)
{
	size_t sent = 0;
	CURLcode rc = curl_easy_send(s->h, data, len, &sent);
	if (rc == CURLE_AGAIN)
		return -2;
	if (rc != CURLE_OK)
		return -1;
	return (ssize_t)sent;
}

ssize_t md_stream_recv(md_stream *s, void *buf, size_t len)
{
	if (s->pending_off < s->pending_len) {
		size_t n = s->pending_len - s->pending_off;
		if (n > len)
			n = len;
		memcpy(buf, s->pending + s->pending_off, n);
		s->pending_off += n;
		return (ssize_t)n;
	}
	size_t got = 0;
	CURLcode rc = curl_easy_recv(s->h, buf, len, &got);
	s->maybe_buffered = rc == CURLE_OK && got > 0;
	if (rc == CURLE_AGAIN)
		return -2;
	if (rc != CURLE_OK)
		return -1;
	return (ssize_t)got;
}

void md_stream_close_write(md_stream *s)
{
	shutdown(s->fd, SHUT_WR);
}

relay_status md_stream_open(md_state *st, const char *path, const char *body, uint32_t timeout_ms,
                            md_stream **out, relay_error *err)
{
	*out = NULL;
	md_stream *s = calloc(1, sizeof *s);
	if (s == NULL)
		return md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	relay_status status = RELAY_OK;
	char *req = NULL;
	s->h = curl_easy_init();
	if (s->h == NULL) {
		status = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "cannot create a libcurl handle");
		goto fail;
	}
	char url[600];
	md_base_url(st, url, sizeof url, "/");
	md_curl_endpoint(st, s->h);
	s->tls = st->tls.enabled;
	curl_easy_setopt(s->h, CURLOPT_URL, url);
	curl_easy_setopt(s->h, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	CURLcode rc = curl_easy_perform(s->h);
	if (rc != CURLE_OK) {
		status =
		    md_err(st, err, RELAY_E_TRANSIENT, 0, "cannot connect to the container engine at %s: %s",
		           st->endpoint, curl_easy_strerror(rc));
		goto fail;
	}
	if (curl_easy_getinfo(s->h, CURLINFO_ACTIVESOCKET, &s->fd) != CURLE_OK || s->fd == CURL_SOCKET_BAD) {
		status = md_err(st, err, RELAY_E_TRANSIENT, 0, "libcurl gave no socket for the exec stream");
		goto fail;
	}
	size_t blen = strlen(body);
	size_t cap = strlen(path) + blen + 512;
	req = malloc(cap);
	if (req == NULL) {
		status = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto fail;
	}
	int n = snprintf(req, cap,
	                 "POST %s HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
	                 "Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: %zu\r\n\r\n%s",
	                 path, blen, body);
	size_t off = 0;
	int64_t deadline = md_monotonic_ms() + (timeout_ms ? timeout_ms : 30000);
	while (off < (size_t)n) {
		ssize_t w = md_stream_send(s, req + off, (size_t)n - off);
		if (w == -1 || md_monotonic_ms() > deadline) {
			status = md_err(st, err, RELAY_E_TRANSIENT, 0, "cannot send the exec start request");
			goto fail;
		}
		if (w == -2) {
			md_stream_wait(s, true, 100);
			continue;
		}
		off += (size_t)w;
	}
	/* Read the answer's headers; what follows belongs to the stream. */
	size_t len = 0;
	char *end = NULL;
	while (end == NULL) {
		if (len + 1 >= sizeof s->pending) {
			status = md_err(st, err, RELAY_E_PROTOCOL, 0,
			                "the engine's exec answer has oversized headers");
			goto fail;
		}
		int r = md_stream_wait(s, false, 200);
		if (md_monotonic_ms() > deadline) {
			status = md_err(st, err, RELAY_E_INDETERMINATE, 0,
			                "the engine did not answer the exec start");
			goto fail;
		}
		if (r <= 0)
			continue;
		ssize_t got = md_stream_recv(s, s->pending + len, sizeof s->pending - 1 - len);
		if (got == -2)
			continue;
		if (got <= 0) {
			status = md_err(st, err, RELAY_E_INDETERMINATE, 0,
			                "the engine closed the exec stream before answering");
			goto fail;
		}
		len += (size_t)got;
		s->pending[len] = '\0';
		end = strstr(s->pending, "\r\n\r\n");
	}
	int code = 0;
	if (sscanf(s->pending, "HTTP/1.%*d %d", &code) != 1 || (code != 101 && code != 200)) {
		char *msg = strstr(s->pending, "\r\n\r\n");
		status = md_err(st, err, code == 404 ? RELAY_E_NOT_FOUND : RELAY_E_TRANSIENT, 0,
		                "the engine refused to start the exec (HTTP %d): %.300s", code,
		                msg ? msg + 4 : "");
		goto fail;
	}
	s->pending_off = (size_t)(end + 4 - s->pending);
	s->pending_len = len;
	free(req);
	*out = s;
	return RELAY_OK;
fail:
	free(req);
	md_stream_free(s);
	return status;
}

relay_status md_image_inspect(md_state *st, const char *ref, relay_call *call, md_reply *reply,
                              relay_error *err)
{
	char path[1024] = MD_API_PREFIX "/images/";
	md_url_encode(path, sizeof path, ref);
	strncat(path, "/json", sizeof path - strlen(path) - 1);
	return md_api(st, "GET", path, NULL, -1, -1, 20000, call, reply, err);
}
