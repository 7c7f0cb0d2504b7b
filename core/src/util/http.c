#include "util/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/strbuf.h"

#define HTTP_KNOWN_FLAGS RELAY_HTTP_ALLOW_REDIRECT

void http_global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct body_sink {
	strbuf body;
	size_t cap;
	int overflow;
	http_cancel_fn cancelled;
	const void *cancel_ctx;
	int was_cancelled;
} body_sink;

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
	body_sink *sink = user;
	size_t len = size * nmemb;
	if (sink->body.len + len > sink->cap) {
		sink->overflow = 1;
		return 0; /* aborts the transfer */
	}
	strbuf_append(&sink->body, data, len);
	return strbuf_ok(&sink->body) ? len : 0;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	body_sink *sink = user;
	if (sink->cancelled && sink->cancelled(sink->cancel_ctx)) {
		sink->was_cancelled = 1;
		return 1;
	}
	return 0;
}

relay_status http_request_run(const relay_http_request *req, http_cancel_fn cancelled, const void *cancel_ctx,
                              unsigned flags, relay_http_response *resp, relay_error *err)
{
	if (flags & ~HTTP_KNOWN_FLAGS)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown HTTP flags 0x%x", flags);
	if (req == NULL || req->url == NULL || req->method == NULL || resp == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "an HTTP request needs a method and a URL");
	uint32_t resp_size = resp->struct_size;
	memset(resp, 0, resp_size < sizeof *resp ? resp_size : sizeof *resp);
	resp->struct_size = resp_size;

	relay_status status = RELAY_OK;
	struct curl_slist *headers = NULL;
	size_t max_body = req->max_body_bytes ? req->max_body_bytes : (size_t)4 << 20;
	body_sink sink = {STRBUF_INIT, max_body, 0, cancelled, cancel_ctx, 0};
	CURL *curl = curl_easy_init();
	if (curl == NULL) {
		status = relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "cannot create an HTTP handle");
		goto cleanup;
	}
	uint32_t timeout_ms = req->timeout_ms ? req->timeout_ms : 660000;
	uint32_t connect_ms =
	    req->connect_timeout_ms ? req->connect_timeout_ms : (timeout_ms < 10000 ? timeout_ms : 10000);
	curl_easy_setopt(curl, CURLOPT_URL, req->url);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, (flags & RELAY_HTTP_ALLOW_REDIRECT) ? 1L : 0L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &sink);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	if (strcmp(req->method, "GET") == 0) {
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	} else {
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req->method);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->body ? req->body : "");
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)(req->body ? req->body_len : 0));
	}
	/* Never send "Expect: 100-continue"; the service reads Content-Length strictly. */
	headers = curl_slist_append(headers, "Expect:");
	for (const char *const *h = req->headers; h && *h; h++)
		headers = curl_slist_append(headers, *h);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

	CURLcode rc = curl_easy_perform(curl);
	long code = 0;
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
	resp->status = code;
	if (sink.was_cancelled) {
		status = relay_error_set(err, RELAY_E_CANCELLED, 0, "HTTP request to %s cancelled", req->url);
		goto cleanup;
	}
	if (rc == CURLE_WRITE_ERROR && sink.overflow && code >= 200 && code < 300) {
		status = relay_error_set(err, RELAY_E_TOO_LARGE, 0,
		                         "the answer of %s is larger than %zu bytes", req->url, max_body);
		goto cleanup;
	}
	if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && sink.overflow)) {
		relay_status kind = rc == CURLE_OPERATION_TIMEDOUT ? RELAY_E_TIMEOUT : RELAY_E_TRANSIENT;
		status = relay_error_set(err, kind, 0, "HTTP request to %s failed: %s", req->url,
		                         curl_easy_strerror(rc));
		goto cleanup;
	}
	if (code >= 300 && code < 400 && !(flags & RELAY_HTTP_ALLOW_REDIRECT)) {
		status = relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                         "%s answered with a redirect (HTTP %ld); redirects are refused",
		                         req->url, code);
		goto cleanup;
	}
	resp->answered = 1;
	if (code < 200 || code >= 300) {
		size_t keep = req->max_error_bytes ? req->max_error_bytes : 4096;
		if (sink.body.len > keep) {
			sink.body.len = keep;
			sink.body.data[keep] = '\0';
		}
	}
	resp->body = strbuf_detach(&sink.body, &resp->body_len);
	if (resp->body == NULL)
		status =
		    relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory reading %s", req->url);
cleanup:
	strbuf_free(&sink.body);
	curl_slist_free_all(headers);
	if (curl)
		curl_easy_cleanup(curl);
	return status;
}
