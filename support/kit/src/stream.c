/* stream.c — the stream operations' checks and wording (relay_kit/stream.h). */
#include "relay_kit/stream.h"

#include <errno.h>
#include <string.h>

#include "relay_support/fdstream.h"

relay_status rk_stream_open_request(const relay_host *host, const relay_exec_request *req_in, unsigned flags,
                                    relay_exec_request *req, relay_error *err)
{
	memset(req, 0, sizeof *req);
	if (flags)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown stream_open flags 0x%x",
		                       flags);
	if (req_in == NULL || req_in->struct_size < RELAY_EXEC_REQUEST_V1_0_SIZE)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "stream_open needs a request");
	memcpy(req, req_in, req_in->struct_size < sizeof *req ? req_in->struct_size : sizeof *req);
	if (req->argv == NULL || req->argv[0] == NULL || req->argv[0][0] == '\0')
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "stream_open needs a non-empty argv");
	return RELAY_OK;
}

relay_status rk_stream_write_check(const relay_host *host, bool open, const void *data, size_t len,
                                   uint64_t timeout_ms, unsigned flags, relay_error *err)
{
	if (flags)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown stream_write flags 0x%x",
		                       flags);
	if (!open || (data == NULL && len) || timeout_ms == 0)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "stream_write needs an open stream, data and a positive timeout");
	return RELAY_OK;
}

relay_status rk_stream_read_check(const relay_host *host, bool open, const void *buf, size_t cap,
                                  unsigned flags, relay_error *err)
{
	if (flags)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown stream_read flags 0x%x",
		                       flags);
	if (!open || buf == NULL || cap == 0)
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "stream_read needs an open stream and a buffer");
	return RELAY_OK;
}

relay_status rk_stream_write_timeout(const relay_host *host, const char *taker, size_t len,
                                     uint64_t timeout_ms, relay_error *err)
{
	return host->error_set(err, RELAY_E_TIMEOUT, ETIMEDOUT, "%s did not take %zu bytes within %llu ms",
	                       taker, len, (unsigned long long)timeout_ms);
}

relay_status rk_stream_read_timeout(const relay_host *host, uint64_t timeout_ms, relay_error *err)
{
	return host->error_set(err, RELAY_E_TIMEOUT, ETIMEDOUT,
	                       "nothing arrived on the stream within %llu ms",
	                       (unsigned long long)timeout_ms);
}

relay_status rk_stream_fd_write(const relay_host *host, int fd, const void *data, size_t len,
                                uint64_t timeout_ms, const char *who, relay_error *err)
{
	if (rs_fd_write_all(fd, data, len, (int64_t)timeout_ms) == 0)
		return RELAY_OK;
	if (errno == ETIMEDOUT)
		return rk_stream_write_timeout(host, who, len, timeout_ms, err);
	return host->error_set(err, RELAY_E_INDETERMINATE, errno, "%s's standard input broke: %s", who,
	                       strerror(errno));
}

relay_status rk_stream_fd_read(const relay_host *host, int fd, void *buf, size_t cap, uint64_t timeout_ms,
                               const char *who, size_t *got_out, relay_error *err)
{
	ssize_t n = rs_fd_read_wait(fd, buf, cap, (int64_t)timeout_ms);
	if (n >= 0) {
		*got_out = (size_t)n;
		return RELAY_OK;
	}
	if (errno == ETIMEDOUT)
		return rk_stream_read_timeout(host, timeout_ms, err);
	return host->error_set(err, RELAY_E_INDETERMINATE, errno, "%s's standard output broke: %s", who,
	                       strerror(errno));
}
