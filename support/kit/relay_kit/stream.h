/*
 * relay_kit/stream.h — what every transport's stream operations
 * (relay/transport.h stream_write, stream_read) check and say, in one
 * wording: the flags (none is defined), the arguments, and the timeouts.
 */
#ifndef RELAY_KIT_STREAM_H
#define RELAY_KIT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/host.h"
#include "relay/transport.h"

/* stream_open's checks: no flags, a request of at least ABI 1.0's size
 * with a non-empty argv; the request copied into *req (the fields the
 * caller's version lacks zero). */
relay_status rk_stream_open_request(const relay_host *host, const relay_exec_request *req_in, unsigned flags,
                                    relay_exec_request *req, relay_error *err);
/* stream_write's checks: no flags, an open stream, data unless len is 0,
 * a positive timeout. RELAY_OK or the refusal in err. */
relay_status rk_stream_write_check(const relay_host *host, bool open, const void *data, size_t len,
                                   uint64_t timeout_ms, unsigned flags, relay_error *err);
/* stream_read's checks: no flags, an open stream, a buffer of cap > 0. */
relay_status rk_stream_read_check(const relay_host *host, bool open, const void *buf, size_t cap,
                                  unsigned flags, relay_error *err);
/* Writes all of data to the descriptor (relay_support/fdstream.h) within
 * timeout_ms: RELAY_E_TIMEOUT "<who> did not take <len> bytes within <t>
 * ms", RELAY_E_INDETERMINATE "<who>'s standard input broke". */
relay_status rk_stream_fd_write(const relay_host *host, int fd, const void *data, size_t len,
                                uint64_t timeout_ms, const char *who, relay_error *err);
/* Reads what arrives on the descriptor within timeout_ms (0 bytes: end of
 * file): RELAY_E_TIMEOUT "nothing arrived on the stream within <t> ms",
 * RELAY_E_INDETERMINATE "<who>'s standard output broke". */
relay_status rk_stream_fd_read(const relay_host *host, int fd, void *buf, size_t cap, uint64_t timeout_ms,
                               const char *who, size_t *got_out, relay_error *err);
/* RELAY_E_TIMEOUT: "<taker> did not take <len> bytes within <t> ms". */
relay_status rk_stream_write_timeout(const relay_host *host, const char *taker, size_t len,
                                     uint64_t timeout_ms, relay_error *err);
/* RELAY_E_TIMEOUT: "nothing arrived on the stream within <t> ms". */
relay_status rk_stream_read_timeout(const relay_host *host, uint64_t timeout_ms, relay_error *err);

#endif
