/* plugin-test checks 50-54: the long-lived stream (relay/transport.h,
 * RELAY_TRANSPORT_STREAM): open, many requests in order, a read that times
 * out, close, a broken stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plugin_test.h"
#include "util/clock.h"

#define PT_STREAM_REQUESTS 100
#define PT_STREAM_WAIT_MS  10000

static relay_status open_sh(pt_run *run, const char *script, unsigned flags, relay_transport_stream **out,
                            relay_error *err)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	relay_exec_request req;
	memset(&req, 0, sizeof req);
	req.struct_size = sizeof req;
	req.argv = argv;
	req.timeout_ms = PT_STREAM_WAIT_MS;
	memset(err, 0, sizeof *err);
	*out = NULL;
	return run->plugin->transport.stream_open(run->plugin->state, run->conn, &req, NULL, flags, out, err);
}

/* Reads exactly `len` bytes within PT_STREAM_WAIT_MS. */
static bool read_exact(pt_run *run, relay_transport_stream *s, char *buf, size_t len, relay_status *st_out)
{
	const relay_transport_ops *t = &run->plugin->transport;
	int64_t deadline = clock_monotonic_ms() + PT_STREAM_WAIT_MS;
	size_t have = 0;
	*st_out = RELAY_OK;
	while (have < len && clock_monotonic_ms() < deadline) {
		size_t got = 0;
		relay_error err;
		relay_status st =
		    t->stream_read(run->plugin->state, s, buf + have, len - have, 500, 0, &got, &err);
		if (st == RELAY_E_TIMEOUT)
			continue;
		*st_out = st;
		if (st != RELAY_OK || got == 0)
			return false;
		have += got;
	}
	return have == len;
}

/* Check 51: requests of growing size, each echoed whole and in order. */
static void many_requests(pt_run *run, relay_transport_stream *s)
{
	const relay_transport_ops *t = &run->plugin->transport;
	char *sent = malloc(PT_STREAM_REQUESTS * 64 + 64), *back = malloc(PT_STREAM_REQUESTS * 64 + 64);
	for (int i = 0; sent && back && i < PT_STREAM_REQUESTS; i++) {
		int n = snprintf(sent, PT_STREAM_REQUESTS * 64, "request %d ", i);
		for (int k = 0; k < i * 16; k++)
			sent[n++] = (char)('a' + (k + i) % 26);
		sent[n++] = '\n';
		relay_error err;
		memset(&err, 0, sizeof err);
		relay_status st =
		    t->stream_write(run->plugin->state, s, sent, (size_t)n, PT_STREAM_WAIT_MS, 0, &err);
		relay_status rst = RELAY_OK;
		if (st != RELAY_OK) {
			pt_fail(run, 51, "stream_write of request %d (%d bytes) answered %s: %s", i, n,
			        pt_status(st), err.message);
			break;
		}
		if (!read_exact(run, s, back, (size_t)n, &rst) || memcmp(back, sent, (size_t)n) != 0) {
			pt_fail(
			    run, 51,
			    "request %d of %d (%d bytes) to /bin/cat did not come back whole and unchanged "
			    "(%s): a stream carries bytes unchanged and in order",
			    i, PT_STREAM_REQUESTS, n, pt_status(rst));
			break;
		}
	}
	pt_ran(run, 51);
	free(sent);
	free(back);
}

/* Check 52: nothing written, nothing to read: RELAY_E_TIMEOUT, and the
 * stream still works. */
static void read_times_out(pt_run *run, relay_transport_stream *s)
{
	const relay_transport_ops *t = &run->plugin->transport;
	char buf[16];
	size_t got = 0;
	relay_error err;
	memset(&err, 0, sizeof err);
	int64_t t0 = clock_monotonic_ms();
	relay_status st = t->stream_read(run->plugin->state, s, buf, sizeof buf, 300, 0, &got, &err);
	int64_t took = clock_monotonic_ms() - t0;
	relay_status rst = RELAY_OK;
	if (st != RELAY_E_TIMEOUT || got != 0 || took > 5000)
		pt_fail(run, 52,
		        "stream_read with nothing written answered %s with %zu bytes after %lld ms: answer "
		        "RELAY_E_TIMEOUT after about timeout_ms and keep the stream",
		        pt_status(st), got, (long long)took);
	else if (t->stream_write(run->plugin->state, s, "again\n", 6, PT_STREAM_WAIT_MS, 0, &err) !=
	             RELAY_OK ||
	         !read_exact(run, s, buf, 6, &rst) || memcmp(buf, "again\n", 6) != 0)
		pt_fail(run, 52, "the stream did not carry bytes after a read timed out (%s)",
		        pt_status(rst));
	else
		pt_ran(run, 52);
}

/* Check 53: close gives the command end of file. */
static void close_ends_input(pt_run *run)
{
	const relay_transport_ops *t = &run->plugin->transport;
	char script[1400], marker[600];
	snprintf(marker, sizeof marker, "%s/pt-stream-closed", run->guest_root);
	snprintf(script, sizeof script, "cat >/dev/null; echo closed > '%s'", marker);
	relay_transport_stream *s = NULL;
	relay_error err;
	relay_status st = open_sh(run, script, 0, &s, &err);
	if (st != RELAY_OK) {
		pt_fail(run, 53, "stream_open of sh -c 'cat; echo' answered %s: %s", pt_status(st),
		        err.message);
		return;
	}
	t->stream_close(run->plugin->state, s, 0);
	relay_exec_result res;
	char check[2000];
	snprintf(check, sizeof check,
	         "i=0; while [ ! -f '%s' ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; cat '%s'",
	         marker, marker);
	st = pt_sh(run, check, 0, &res, &err);
	if (st != RELAY_OK || res.out == NULL || strcmp(res.out, "closed\n") != 0)
		pt_fail(run, 53,
		        "after stream_close the command did not see end of file on its standard input within "
		        "3 s (%s missing): close ends the command's input",
		        marker);
	else
		pt_ran(run, 53);
	pt_host()->free(res.out);
	pt_host()->free(res.err);
}

/* Check 54: a command that ended: end of file on read, a failing write. */
static void broken_stream(pt_run *run)
{
	const relay_transport_ops *t = &run->plugin->transport;
	relay_transport_stream *s = NULL;
	relay_error err;
	relay_status st = open_sh(run, "head -c 4; exit 0", 0, &s, &err);
	if (st != RELAY_OK) {
		pt_fail(run, 54, "stream_open of sh -c 'head -c 4' answered %s: %s", pt_status(st),
		        err.message);
		return;
	}
	char buf[8];
	relay_status rst = RELAY_OK;
	st = t->stream_write(run->plugin->state, s, "abcd", 4, PT_STREAM_WAIT_MS, 0, &err);
	bool echoed = st == RELAY_OK && read_exact(run, s, buf, 4, &rst) && memcmp(buf, "abcd", 4) == 0;
	size_t got = 1;
	int64_t deadline = clock_monotonic_ms() + PT_STREAM_WAIT_MS;
	do
		rst = t->stream_read(run->plugin->state, s, buf, sizeof buf, 500, 0, &got, &err);
	while (rst == RELAY_E_TIMEOUT && clock_monotonic_ms() < deadline);
	bool eof = (rst == RELAY_OK && got == 0) || rst == RELAY_E_INDETERMINATE;
	/* Writes into what is gone fail (after what buffers took). */
	size_t big = 4u << 20;
	char *junk = calloc(1, big);
	relay_status wst =
	    junk ? t->stream_write(run->plugin->state, s, junk, big, 5000, 0, &err) : RELAY_E_NO_MEMORY;
	free(junk);
	if (!echoed)
		pt_fail(run, 54, "sh -c 'head -c 4' did not send back the 4 bytes written (%s)",
		        pt_status(st));
	else if (!eof)
		pt_fail(run, 54,
		        "after the command ended, stream_read answered %s with %zu bytes: answer end of file "
		        "(RELAY_OK with 0 bytes) or RELAY_E_INDETERMINATE",
		        pt_status(rst), got);
	else if (wst == RELAY_OK)
		pt_fail(
		    run, 54,
		    "stream_write of 4 MiB to a command that has ended answered RELAY_OK: a broken stream's "
		    "write fails (RELAY_E_INDETERMINATE or RELAY_E_TIMEOUT)");
	else
		pt_ran(run, 54);
	t->stream_close(run->plugin->state, s, 0);
}

void pt_transport_stream(pt_run *run)
{
	const relay_transport_ops *t = &run->plugin->transport;
	bool slots = t->stream_open && t->stream_write && t->stream_read && t->stream_close;
	if (!(t->traits & RELAY_TRANSPORT_STREAM)) {
		for (int n = 50; n <= 54; n++)
			pt_skip(run, n, "the transport does not state RELAY_TRANSPORT_STREAM");
		return;
	}
	if (!slots) {
		pt_fail(
		    run, 50,
		    "the transport states RELAY_TRANSPORT_STREAM but a stream_* slot is NULL: give all four");
		return;
	}
	relay_transport_stream *s = NULL;
	relay_error err;
	relay_status st = open_sh(run, "exec /bin/cat", PT_UNKNOWN_FLAG, &s, &err);
	pt_refusal(run, "transport", "stream_open", st, &err, NULL);
	if (s != NULL) {
		t->stream_close(run->plugin->state, s, 0);
		s = NULL;
	}
	st = open_sh(run, "exec /bin/cat", 0, &s, &err);
	if (st != RELAY_OK || s == NULL) {
		pt_fail(run, 50, "stream_open of /bin/cat answered %s: %s", pt_status(st), err.message);
		return;
	}
	pt_ran(run, 50);
	many_requests(run, s);
	read_times_out(run, s);
	t->stream_close(run->plugin->state, s, 0);
	close_ends_input(run);
	broken_stream(run);
}
