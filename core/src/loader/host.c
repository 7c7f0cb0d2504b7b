/* The relay_host table lent to plugins (relay/host.h). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "evidence/archive.h"
#include "loader/loader.h"
#include "call/call.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/http.h"
#include "util/log.h"
#include "util/process.h"
#include "util/randx.h"
#include "util/sha256.h"

static void host_log(relay_log_level level, const char *plugin, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void host_log(relay_log_level level, const char *plugin, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_linev(level, plugin, fmt, ap);
	va_end(ap);
}

static void *host_alloc(size_t bytes)
{
	return malloc(bytes ? bytes : 1);
}

static void host_free(void *ptr)
{
	free(ptr);
}

static char *host_strdup(const char *text)
{
	return text ? strdup(text) : NULL;
}

static relay_status host_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static relay_status host_error_set(relay_error *err, relay_status code, int sys_errno, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	relay_error_setv(err, code, sys_errno, fmt, ap);
	va_end(ap);
	return code;
}

static int host_call_cancelled(const relay_call *call)
{
	return relay_call_is_cancelled(call);
}

static int cancel_adapter(const void *ctx)
{
	return relay_call_is_cancelled((const relay_call *)ctx);
}

static void host_call_progress(relay_call *call, double progress, double total, const char *message)
{
	relay_call_progress(call, progress, total, message, false);
}

static relay_status host_http_request(const relay_http_request *req, relay_call *call, unsigned flags,
				      relay_http_response *resp, relay_error *err)
{
	return http_request_run(req, cancel_adapter, call, flags, resp, err);
}

static void host_sha256_buffer(const void *data, size_t len, char hex_out[65])
{
	sha256_buffer_hex(data, len, hex_out);
}

static relay_status host_sha256_file(const char *path, unsigned flags, char hex_out[65], uint64_t *bytes_out,
				     relay_error *err)
{
	if (flags != 0)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown sha256_file flags 0x%x", flags);
	return sha256_file_hex(path, hex_out, bytes_out, err);
}

static relay_status host_process_run(const relay_process_request *req, relay_call *call, unsigned flags,
				     relay_process_result *res, relay_error *err)
{
	return process_run(req, cancel_adapter, call, flags, res, err);
}

static const relay_host host_table = {
	.abi_version = RELAY_ABI_VERSION,
	.struct_size = sizeof(relay_host),
	.log = host_log,
	.alloc = host_alloc,
	.free = host_free,
	.strdup = host_strdup,
	.error_set = host_error_set,
	.now_ms = clock_now_ms,
	.call_cancelled = host_call_cancelled,
	.call_progress = host_call_progress,
	.http_request = host_http_request,
	.sha256_buffer = host_sha256_buffer,
	.sha256_file = host_sha256_file,
	.process_run = host_process_run,
	.archive_write = evidence_archive_write,
	.archive_extract = evidence_archive_extract,
	.random_bytes = random_fill,
};

const relay_host *loader_host_table(void)
{
	return &host_table;
}
