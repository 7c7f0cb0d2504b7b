/*
 * The server's output (spec/mcp.md §2): one buffer under one lock, so messages
 * never interleave; the reader defers flushing while it still has input to
 * handle, so pipelined requests are answered with few writes. Batches
 * collect their answers and write one array.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp/server_internal.h"
#include "util/jsonx.h"
#include "util/log.h"

/* ---- output -------------------------------------------------------------- */

/* Wakes the reader of `srv` (its own pipe, so that servers never take each
 * other's wake-ups). */
void wake_reader(mcp_server *srv, char why)
{
	if (srv->wake_pipe[1] >= 0) {
		ssize_t ignored = write(srv->wake_pipe[1], &why, 1);
		(void)ignored;
	}
}

/* Writes the buffered output; call with out_lock held. */
static void flush_locked(mcp_server *srv)
{
	size_t off = 0;
	while (!atomic_load(&srv->out_failed) && off < srv->out.len) {
		ssize_t n = write(srv->out_fd, srv->out.data + off, srv->out.len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				struct pollfd p = {srv->out_fd, POLLOUT, 0};
				poll(&p, 1, 1000);
				continue;
			}
			atomic_store(&srv->out_failed, true);
			/* The reader starts the end of the session (stdout-failed). */
			wake_reader(srv, WAKE_OUTPUT_FAILED);
			break;
		}
		off += (size_t)n;
	}
	strbuf_reset(&srv->out);
	if (srv->out.capacity > KEEP_INPUT_BUFFER_BYTES) {
		strbuf_free(&srv->out);
		strbuf_init(&srv->out);
	}
}

/* Queues one complete message (without its newline). With `defer`, the
 * reader flushes later; otherwise it is written now. */
void send_message(mcp_server *srv, const char *msg, size_t len, bool defer)
{
	/* Every byte that leaves is UTF-8 (spec/tools.md §5.3): a guest's or a file
	 * name's bytes may have reached a result, a headline or an error. In
	 * JSON text they can only sit inside strings (the syntax is ASCII), so
	 * replacing each invalid sequence with U+FFFD keeps the message valid
	 * JSON. The evidence keeps the original bytes; only the stream is
	 * repaired. */
	char *repaired = NULL;
	if (!utf8_valid(msg, len)) {
		size_t repaired_len = 0;
		repaired = utf8_sanitize(msg, len, &repaired_len);
		if (repaired == NULL) {
			log_error("out of memory repairing a message that is not UTF-8; it is not sent");
			return;
		}
		msg = repaired;
		len = repaired_len;
	}
	pthread_mutex_lock(&srv->out_lock);
	if (!atomic_load(&srv->out_failed)) {
		strbuf_append(&srv->out, msg, len);
		strbuf_putc(&srv->out, '\n');
		if (!strbuf_ok(&srv->out)) {
			/* No memory to queue it: write what is queued, then this one
			 * directly, so the stream stays whole. */
			srv->out.failed = false;
			flush_locked(srv);
			struct iovec_like {
				const char *p;
				size_t n;
			} parts[2] = {{msg, len}, {"\n", 1}};
			for (int i = 0; i < 2 && !atomic_load(&srv->out_failed); i++) {
				size_t off = 0;
				while (off < parts[i].n) {
					ssize_t n = write(srv->out_fd, parts[i].p + off, parts[i].n - off);
					if (n < 0 && errno == EINTR)
						continue;
					if (n <= 0) {
						atomic_store(&srv->out_failed, true);
						wake_reader(srv, WAKE_OUTPUT_FAILED);
						break;
					}
					off += (size_t)n;
				}
			}
		} else if (!defer || srv->out.len > FLUSH_THRESHOLD_BYTES) {
			flush_locked(srv);
		}
	}
	pthread_mutex_unlock(&srv->out_lock);
	free(repaired);
}

void flush_output(mcp_server *srv)
{
	pthread_mutex_lock(&srv->out_lock);
	flush_locked(srv);
	pthread_mutex_unlock(&srv->out_lock);
}

bool on_reader_thread(const mcp_server *srv)
{
	return pthread_equal(pthread_self(), srv->reader);
}

/* The last resort when an answer could not be formed: a fixed -32603 error
 * built without allocating. */
void send_internal_error(mcp_server *srv, batch *b, const char *id_text)
{
	char msg[512];
	int n = snprintf(
	    msg, sizeof msg,
	    "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32603,\"message\":\"Internal error\"}}",
	    id_text && strlen(id_text) < 400 ? id_text : "null");
	if (n <= 0 || (size_t)n >= sizeof msg)
		return;
	log_error("out of memory forming a response; answered -32603");
	if (b)
		batch_add(b, msg, (size_t)n);
	else
		send_message(srv, msg, (size_t)n, on_reader_thread(srv));
}

/* Where an answer goes: its batch, or the stream. `msg` is a complete
 * JSON-RPC response. */
static void deliver(mcp_server *srv, batch *b, const char *id_text, strbuf *msg)
{
	if (!strbuf_ok(msg)) {
		send_internal_error(srv, b, id_text);
		return;
	}
	if (b)
		batch_add(b, msg->data, msg->len);
	else
		send_message(srv, msg->data, msg->len, on_reader_thread(srv));
}

static void begin_response(strbuf *sb, const char *id_text)
{
	strbuf_puts(sb, "{\"jsonrpc\":\"2.0\",\"id\":");
	strbuf_puts(sb, id_text ? id_text : "null");
}

void send_error(mcp_server *srv, batch *b, const char *id_text, int code, const char *message,
                const char *data_json)
{
	strbuf sb = STRBUF_INIT;
	begin_response(&sb, id_text);
	strbuf_printf(&sb, ",\"error\":{\"code\":%d,\"message\":", code);
	jsonx_write_string(&sb, message, strlen(message));
	if (data_json) {
		strbuf_puts(&sb, ",\"data\":");
		strbuf_puts(&sb, data_json);
	}
	strbuf_puts(&sb, "}}");
	deliver(srv, b, id_text, &sb);
	strbuf_free(&sb);
}

/* An error whose data is {"reason": <text>}. */
void send_error_reason(mcp_server *srv, batch *b, const char *id_text, int code, const char *message,
                       const char *reason)
{
	strbuf data = STRBUF_INIT;
	strbuf_puts(&data, "{\"reason\":");
	jsonx_write_string(&data, reason, strlen(reason));
	strbuf_putc(&data, '}');
	send_error(srv, b, id_text, code, message, strbuf_ok(&data) ? strbuf_str(&data) : NULL);
	strbuf_free(&data);
}

/* `result_json` is a complete JSON object. */
void send_result(mcp_server *srv, batch *b, const char *id_text, const char *result_json, size_t len)
{
	strbuf sb = STRBUF_INIT;
	strbuf_reserve(&sb, len + 48);
	begin_response(&sb, id_text);
	strbuf_puts(&sb, ",\"result\":");
	strbuf_append(&sb, result_json, len);
	strbuf_putc(&sb, '}');
	deliver(srv, b, id_text, &sb);
	strbuf_free(&sb);
}

void send_result_buffer(mcp_server *srv, batch *b, const char *id_text, strbuf *sb)
{
	if (strbuf_ok(sb))
		send_result(srv, b, id_text, sb->data, sb->len);
	else
		send_internal_error(srv, b, id_text);
	strbuf_free(sb);
}

/* ---- batches -------------------------------------------------------------- */

batch *batch_new(void)
{
	batch *b = calloc(1, sizeof *b);
	if (b == NULL)
		return NULL;
	pthread_mutex_init(&b->lock, NULL);
	strbuf_init(&b->answers);
	b->pending = 1;
	return b;
}

void batch_add(batch *b, const char *msg, size_t len)
{
	pthread_mutex_lock(&b->lock);
	if (b->answer_count++)
		strbuf_putc(&b->answers, ',');
	strbuf_append(&b->answers, msg, len);
	pthread_mutex_unlock(&b->lock);
}

void batch_hold(batch *b)
{
	pthread_mutex_lock(&b->lock);
	b->pending++;
	pthread_mutex_unlock(&b->lock);
}

/* Drops one pending unit; the last one writes the array (or nothing when no
 * element of the batch was answered). */
void batch_release(mcp_server *srv, batch *b)
{
	pthread_mutex_lock(&b->lock);
	bool last = --b->pending == 0;
	pthread_mutex_unlock(&b->lock);
	if (!last)
		return;
	if (b->answer_count > 0) {
		strbuf sb = STRBUF_INIT;
		strbuf_reserve(&sb, b->answers.len + 2);
		strbuf_putc(&sb, '[');
		strbuf_append(&sb, strbuf_str(&b->answers), b->answers.len);
		strbuf_putc(&sb, ']');
		if (strbuf_ok(&sb) && strbuf_ok(&b->answers))
			send_message(srv, sb.data, sb.len, on_reader_thread(srv));
		else
			send_internal_error(srv, NULL, NULL);
		strbuf_free(&sb);
	}
	strbuf_free(&b->answers);
	pthread_mutex_destroy(&b->lock);
	free(b);
}
