/* The relay_host table lent to plugins (relay/host.h). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call/call.h"
#include "evidence/archive.h"
#include "loader/loader.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/http.h"
#include "util/log.h"
#include "util/process.h"
#include "util/randx.h"
#include "util/sha256.h"

#define PROCESS_HOST_FLAGS                                                                                   \
	(RELAY_PROCESS_MERGE_OUTPUT | RELAY_PROCESS_KEEP_TAIL | RELAY_PROCESS_NEW_SESSION |                  \
	 RELAY_PROCESS_ENV_ADD | RELAY_PROCESS_SHARED_CAP)

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
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown sha256_file flags 0x%x",
		                       flags);
	return sha256_file_hex(path, hex_out, bytes_out, err);
}

/* The length of the key of "K=V" (the whole entry when it has no '='). */
static size_t env_key_len(const char *entry)
{
	const char *eq = strchr(entry, '=');
	return eq ? (size_t)(eq - entry) : strlen(entry);
}

/* RELAY_PROCESS_ENV_ADD: the relay's environment with `added` on top, an
 * added entry replacing one of the same key. The array is malloc'd, its
 * strings borrowed. NULL when out of memory. */
static const char **env_with(const char *const *added)
{
	size_t n_env = 0, n_add = 0;
	while (environ != NULL && environ[n_env] != NULL)
		n_env++;
	while (added != NULL && added[n_add] != NULL)
		n_add++;
	const char **env = calloc(n_env + n_add + 1, sizeof *env);
	if (env == NULL)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < n_env; i++) {
		size_t key = env_key_len(environ[i]);
		bool replaced = false;
		for (size_t j = 0; j < n_add && !replaced; j++)
			replaced = env_key_len(added[j]) == key && strncmp(added[j], environ[i], key) == 0;
		if (!replaced)
			env[n++] = environ[i];
	}
	for (size_t j = 0; j < n_add; j++)
		env[n++] = added[j];
	return env;
}

/* process_run by the rules of relay/host.h: the request read and the result
 * written by their struct sizes (relay/plugin.h R4, R5), ENV_ADD resolved
 * here, SHARED_CAP and the rest in util/process.c. */
static relay_status host_process_run(const relay_process_request *req_in, relay_call *call, unsigned flags,
                                     relay_process_result *res, relay_error *err)
{
	if (flags & ~(PROCESS_HOST_FLAGS))
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown process flags 0x%x",
		                       flags);
	if (req_in == NULL || res == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "process_run needs argv and a result");
	relay_process_request req;
	RELAY_COPY_IN(req, req_in);
	const char **env = NULL;
	if ((flags & RELAY_PROCESS_ENV_ADD) && req.envp != NULL) {
		env = env_with(req.envp);
		if (env == NULL)
			return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
			                       "out of memory building the environment");
		req.envp = env;
	}
	relay_process_result full;
	memset(&full, 0, sizeof full);
	full.struct_size = sizeof full;
	relay_status status =
	    process_run(&req, cancel_adapter, call, flags & ~(unsigned)RELAY_PROCESS_ENV_ADD, &full, err);
	free(env);
	RELAY_COPY_OUT(res, &full);
	/* Buffers past a smaller caller's struct never reach it. */
	if (!RELAY_SIZED_HAS(res, out))
		free(full.out);
	if (!RELAY_SIZED_HAS(res, err))
		free(full.err);
	return status;
}

/* The session's receiver of host->lease_changed. Global because the host
 * table is one static table for every plugin; guarded by the lock, which
 * is held through each call so that clearing it waits for calls in flight. */
static pthread_mutex_t lease_changed_lock = PTHREAD_MUTEX_INITIALIZER;
static loader_lease_changed_fn lease_changed_fn;
static void *lease_changed_ctx;

void loader_set_lease_changed(loader_lease_changed_fn fn, void *ctx)
{
	pthread_mutex_lock(&lease_changed_lock);
	lease_changed_fn = fn;
	lease_changed_ctx = ctx;
	pthread_mutex_unlock(&lease_changed_lock);
}

void loader_forget_lease_changed(void *ctx)
{
	pthread_mutex_lock(&lease_changed_lock);
	if (lease_changed_ctx == ctx) {
		lease_changed_fn = NULL;
		lease_changed_ctx = NULL;
	}
	pthread_mutex_unlock(&lease_changed_lock);
}

static void host_lease_changed(const char *vm, unsigned flags)
{
	if (vm == NULL || vm[0] == '\0' || flags != 0)
		return;
	pthread_mutex_lock(&lease_changed_lock);
	if (lease_changed_fn)
		lease_changed_fn(lease_changed_ctx, vm);
	pthread_mutex_unlock(&lease_changed_lock);
}

static relay_status host_remove_tree(const char *path, unsigned flags, relay_error *err)
{
	if (flags)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown remove_tree flags 0x%x",
		                       flags);
	if (path == NULL || path[0] == '\0')
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "remove_tree needs a path");
	return fs_remove_tree(path, err);
}

static relay_status host_write_durable(const char *path, const void *data, size_t len, unsigned flags,
                                       relay_error *err)
{
	if (flags)
		return relay_error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown write_durable flags 0x%x",
		                       flags);
	if (path == NULL || path[0] == '\0' || (data == NULL && len))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "write_durable needs a path and data");
	return fs_write_durable(path, data, len, 0600, err);
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
    .lease_changed = host_lease_changed,
    .remove_tree = host_remove_tree,
    .write_durable = host_write_durable,
};

const relay_host *loader_host_table(void)
{
	return &host_table;
}
