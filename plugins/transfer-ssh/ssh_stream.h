/*
 * ssh_stream.h — transfer-ssh's long-lived stream (relay/transport.h,
 * RELAY_TRANSPORT_STREAM; spec/guest.md §17): one ssh session over the
 * connection's ControlMaster running the command, its standard input our
 * socket, its standard output our pipe. No exec wrapper and no token: the
 * stream is not a command that must run at most once (the resident
 * receiver's own replay rule covers what goes over it). ssh's standard
 * error is read beside it and logged a line at a time.
 */
#ifndef TRANSFER_SSH_STREAM_H
#define TRANSFER_SSH_STREAM_H

#include "relay/transport.h"
#include "ssh_conn.h"

relay_status ssh_stream_open(const ssh_conn *conn, const relay_exec_request *req, unsigned flags,
                             relay_transport_stream **out, relay_error *err);
relay_status ssh_stream_write(ssh_plugin *plugin, relay_transport_stream *stream, const void *data,
                              size_t len, uint64_t timeout_ms, unsigned flags, relay_error *err);
relay_status ssh_stream_read(ssh_plugin *plugin, relay_transport_stream *stream, void *buf, size_t cap,
                             uint64_t timeout_ms, unsigned flags, size_t *got_out, relay_error *err);
void ssh_stream_close(relay_transport_stream *stream);

#endif
