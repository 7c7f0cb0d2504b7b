/*
 * util/http.h — one HTTP request through libcurl; backs
 * relay_host.http_request (relay/host.h documents the contract).
 * http_global_init() must run once before any thread starts.
 */
#ifndef RELAY_UTIL_HTTP_H
#define RELAY_UTIL_HTTP_H

#include "relay/host.h"

typedef int (*http_cancel_fn)(const void *ctx);

void http_global_init(void);
relay_status http_request_run(const relay_http_request *req, http_cancel_fn cancelled, const void *cancel_ctx,
                              unsigned flags, relay_http_response *resp, relay_error *err);

#endif
