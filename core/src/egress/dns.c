/*
 * The egress resolver: the guest's 127.0.0.1:53 over UDP and TCP. A name
 * outside the policy gets NXDOMAIN; a name inside it the IPv4 addresses the
 * relay's resolver finds (the proxy checks the address again when the
 * guest connects through it); AAAA and other types get no answers (the
 * guest has no IPv6 route, and no other record is needed to connect).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress/proxy.h"
#include "egress/records.h"
#include "util/clock.h"
#include "util/jsonx.h"
#include "util/timefmt.h"

#define DNS_MAX_BYTES 1232
#define DNS_TTL_S     5

typedef struct dns_args {
	egress_ctx *ctx;
	int fd;
} dns_args;

static void record_refusal(egress_ctx *ctx, const char *name, const char *why)
{
	char id[48], step[EGRESS_STEP_MAX], when[25];
	egress_ctx_claim(ctx, id, sizeof id, step, sizeof step);
	time_format_iso_millis(clock_now_ms(), when);
	json_object *r = json_object_new_object();
	jsonx_add_str(r, "record", "connection");
	jsonx_add_str(r, "phase", "end");
	jsonx_add_str(r, "id", id);
	jsonx_add_str(r, "executionId", step[0] ? step : NULL);
	jsonx_add_str(r, "time", when);
	jsonx_add_str(r, "protocol", "dns");
	jsonx_add_str(r, "name", name);
	jsonx_add_int(r, "port", 53);
	jsonx_add_null(r, "address");
	jsonx_add_str(r, "decision", "refused");
	jsonx_add_null(r, "rule");
	jsonx_add_str(r, "reason", why);
	jsonx_add_int(r, "bytesOut", 0);
	jsonx_add_int(r, "bytesIn", 0);
	jsonx_add_int(r, "durationMs", 0);
	jsonx_add_null(r, "error");
	pthread_mutex_lock(&ctx->lock);
	egress_record_append(ctx->log_fd, r);
	pthread_mutex_unlock(&ctx->lock);
	json_object_put(r);
}

/* True when some rule could let the guest reach `name` (on any port). */
static bool name_in_policy(const egress_policy *policy, const char *name, char *why, size_t why_len)
{
	static const int ports[] = {80, 443};
	egress_verdict v;
	for (size_t i = 0; i < 2; i++) {
		egress_check_name(policy, name, ports[i], &v);
		if (v.allowed)
			return true;
	}
	for (size_t i = 0; i < policy->count; i++) {
		if (policy->rules[i].port == 0)
			continue;
		egress_check_name(policy, name, policy->rules[i].port, &v);
		if (v.allowed)
			return true;
	}
	snprintf(why, why_len, "%s", v.reason);
	return false;
}

/* Answers the query in q[0..len) into a; the answer's length, 0 to drop. */
static size_t answer(egress_ctx *ctx, const unsigned char *q, size_t len, unsigned char *a, size_t cap)
{
	if (len < 12 || (q[2] & 0x80) || q[4] != 0 || q[5] != 1)
		return 0;
	char name[EGRESS_NAME_MAX + 2] = "";
	size_t off = 12, nlen = 0;
	while (off < len && q[off] != 0) {
		size_t l = q[off];
		if (l > 63 || off + 1 + l >= len || nlen + l + 2 > sizeof name)
			return 0;
		if (nlen)
			name[nlen++] = '.';
		memcpy(name + nlen, q + off + 1, l);
		nlen += l;
		name[nlen] = '\0';
		off += 1 + l;
	}
	if (off + 5 > len)
		return 0;
	size_t qend = off + 5;
	unsigned qtype = ((unsigned)q[off + 1] << 8) | q[off + 2];
	if (qend > cap)
		return 0;
	memcpy(a, q, qend);
	a[2] = (unsigned char)(0x80 | (q[2] & 0x01)); /* QR, RD copied */
	a[3] = 0x80;                                  /* RA, NOERROR */
	memset(a + 6, 0, 6);                          /* no answers yet */
	char why[200] = "";
	if (!name_in_policy(&ctx->policy, name, why, sizeof why)) {
		a[3] |= 3; /* NXDOMAIN */
		record_refusal(ctx, name, why);
		return qend;
	}
	if (qtype != 1)
		return qend;
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(name, NULL, &hints, &res) != 0) {
		a[3] |= 3;
		return qend;
	}
	size_t out = qend;
	unsigned count = 0;
	for (struct addrinfo *ai = res; ai && out + 16 <= cap && count < 16; ai = ai->ai_next) {
		const unsigned char *ip =
		    (const unsigned char *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
		unsigned char rr[16] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, DNS_TTL_S, 0, 4};
		memcpy(rr + 12, ip, 4);
		memcpy(a + out, rr, 16);
		out += 16;
		count++;
	}
	freeaddrinfo(res);
	a[6] = (unsigned char)(count >> 8);
	a[7] = (unsigned char)count;
	return out;
}

static void *udp_thread(void *arg)
{
	dns_args *d = arg;
	unsigned char q[DNS_MAX_BYTES], a[DNS_MAX_BYTES];
	for (;;) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(d->fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		size_t len = answer(d->ctx, q, (size_t)n, a, sizeof a);
		if (len)
			sendto(d->fd, a, len, 0, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

static bool read_exact(int fd, unsigned char *buf, size_t len)
{
	while (len > 0) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 10000) <= 0)
			return false;
		ssize_t n = recv(fd, buf, len, 0);
		if (n <= 0)
			return false;
		buf += n;
		len -= (size_t)n;
	}
	return true;
}

static void *tcp_conn_thread(void *arg)
{
	dns_args *d = arg;
	unsigned char q[DNS_MAX_BYTES + 2], a[DNS_MAX_BYTES + 2];
	for (;;) {
		if (!read_exact(d->fd, q, 2))
			break;
		size_t len = ((size_t)q[0] << 8) | q[1];
		if (len > DNS_MAX_BYTES || !read_exact(d->fd, q + 2, len))
			break;
		size_t out = answer(d->ctx, q + 2, len, a + 2, DNS_MAX_BYTES);
		if (out == 0)
			break;
		a[0] = (unsigned char)(out >> 8);
		a[1] = (unsigned char)out;
		if (send(d->fd, a, out + 2, MSG_NOSIGNAL) != (ssize_t)(out + 2))
			break;
	}
	close(d->fd);
	free(d);
	return NULL;
}

static bool spawn_detached(void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_t t;
	bool ok = pthread_create(&t, &attr, fn, arg) == 0;
	pthread_attr_destroy(&attr);
	return ok;
}

static void *tcp_accept_thread(void *arg)
{
	dns_args *d = arg;
	for (;;) {
		int fd = accept4(d->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0 && errno == EINTR)
			continue;
		if (fd < 0)
			break;
		dns_args *c = malloc(sizeof *c);
		if (c == NULL) {
			close(fd);
			continue;
		}
		c->ctx = d->ctx;
		c->fd = fd;
		if (!spawn_detached(tcp_conn_thread, c)) {
			close(fd);
			free(c);
		}
	}
	return NULL;
}

int egress_dns_start(egress_ctx *ctx, int udp_fd, int tcp_fd)
{
	static dns_args udp, tcp; /* live as long as the process; written once, before the threads */
	udp.ctx = tcp.ctx = ctx;
	udp.fd = udp_fd;
	tcp.fd = tcp_fd;
	if (!spawn_detached(udp_thread, &udp) || !spawn_detached(tcp_accept_thread, &tcp))
		return -1;
	return 0;
}
