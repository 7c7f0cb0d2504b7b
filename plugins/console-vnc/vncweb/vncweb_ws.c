/*
 * vncweb_ws.c — one WebSocket connection bridged to x11vnc (vncweb.h).
 *
 * Browser to guest, the RFB client stream is parsed message by message:
 * the handshake (version, security type 2 with its 16-byte response,
 * ClientInit), then the client messages of RFC 6143 §7.5 and the
 * extensions noVNC sends. KeyEvent, PointerEvent, ClientCutText and QEMU
 * key events reach x11vnc only while the person holds control (a
 * take-over, vncweb.c); an unknown message closes the connection.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "relay_support/fds.h"
#include "vncweb.h"

#define WS_FRAME_MAX (1u << 20)
#define RFB_PREAMBLE 30 /* version 12, security type 1, VNC response 16, ClientInit 1 */
#define RFB_MSG_MAX  (1u << 20)
#define GUID         "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

static int handshake(int fd, const char *key, const char *protocol)
{
	char in[128], accept[64];
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	snprintf(in, sizeof in, "%s%s", key, GUID);
	if (!EVP_Digest(in, strlen(in), digest, &dlen, EVP_sha1(), NULL))
		return -1;
	EVP_EncodeBlock((unsigned char *)accept, digest, (int)dlen);
	char head[512];
	int n = snprintf(head, sizeof head,
	                 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	                 "Sec-WebSocket-Accept: %s\r\n%s%s%s\r\n",
	                 accept, protocol ? "Sec-WebSocket-Protocol: " : "", protocol ? protocol : "",
	                 protocol ? "\r\n" : "");
	return rs_write_all(fd, head, (size_t)n);
}

static int ws_send(int fd, int opcode, const unsigned char *data, size_t len)
{
	unsigned char head[10];
	size_t h = 2;
	head[0] = (unsigned char)(0x80 | opcode);
	if (len < 126)
		head[1] = (unsigned char)len;
	else if (len < 65536) {
		head[1] = 126;
		head[2] = (unsigned char)(len >> 8);
		head[3] = (unsigned char)len;
		h = 4;
	} else {
		head[1] = 127;
		for (int i = 0; i < 8; i++)
			head[2 + i] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
		h = 10;
	}
	return rs_write_all(fd, head, h) == 0 && (len == 0 || rs_write_all(fd, data, len) == 0) ? 0 : -1;
}

typedef struct rfb_filter {
	unsigned char *buf;
	size_t len, cap;
	size_t preamble_left;
	int security_checked;
	unsigned long dropped;
} rfb_filter;

static uint32_t be16(const unsigned char *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The length of the client message at p (n bytes there), 0 when more bytes
 * are needed, -1 for a message this bridge does not know. *input: it is
 * input (keys, pointer, clipboard). */
static long message_length(const unsigned char *p, size_t n, int *input)
{
	*input = 0;
	switch (p[0]) {
	case 0: /* SetPixelFormat */ return 20;
	case 2: /* SetEncodings */ return n < 4 ? 0 : 4 + 4 * (long)be16(p + 2);
	case 3: /* FramebufferUpdateRequest */ return 10;
	case 4: /* KeyEvent */ *input = 1; return 8;
	case 5: /* PointerEvent */ *input = 1; return 6;
	case 6: /* ClientCutText (extended when the length's high bit is set) */
		*input = 1;
		if (n < 8)
			return 0;
		{
			uint32_t len = be32(p + 4);
			if (len & 0x80000000u)
				len = (uint32_t)(-(int32_t)len);
			return len > RFB_MSG_MAX ? -1 : 8 + (long)len;
		}
	case 150: /* EnableContinuousUpdates */ return 10;
	case 248: /* ClientFence */ return n < 9 ? 0 : 9 + (long)p[8];
	case 250: /* xvp */ *input = 1; return 4;
	case 251: /* SetDesktopSize */ return n < 8 ? 0 : 8 + 16 * (long)p[6];
	case 255: /* QEMU extended key event */ *input = 1; return 12;
	default: return -1;
	}
}

/* Passes what may reach x11vnc; -1 closes the connection. */
static int filter_to_vnc(vncweb *w, rfb_filter *f, int vnc, const unsigned char *data, size_t len)
{
	if (f->len + len > f->cap) {
		size_t cap = f->cap ? f->cap : 4096;
		while (cap < f->len + len)
			cap *= 2;
		if (cap > 2 * RFB_MSG_MAX + WS_FRAME_MAX)
			return -1;
		unsigned char *b = realloc(f->buf, cap);
		if (b == NULL)
			return -1;
		f->buf = b;
		f->cap = cap;
	}
	memcpy(f->buf + f->len, data, len);
	f->len += len;
	size_t pos = 0;
	while (pos < f->len) {
		if (f->preamble_left) {
			size_t take = f->len - pos < f->preamble_left ? f->len - pos : f->preamble_left;
			/* byte 12 is the chosen security type: VNC authentication only */
			size_t offset = RFB_PREAMBLE - f->preamble_left;
			if (offset <= 12 && offset + take > 12 && f->buf[pos + (12 - offset)] != 2)
				return -1;
			if (rs_write_all(vnc, f->buf + pos, take) != 0)
				return -1;
			pos += take;
			f->preamble_left -= take;
			continue;
		}
		int input = 0;
		long need = message_length(f->buf + pos, f->len - pos, &input);
		if (need < 0)
			return -1;
		if (need == 0 || (size_t)need > f->len - pos)
			break;
		if (input && !w->shared->control)
			f->dropped++;
		else if (rs_write_all(vnc, f->buf + pos, (size_t)need) != 0)
			return -1;
		pos += (size_t)need;
	}
	memmove(f->buf, f->buf + pos, f->len - pos);
	f->len -= pos;
	return 0;
}

typedef struct ws_reader {
	unsigned char buf[WS_FRAME_MAX + 16];
	size_t len;
} ws_reader;

/* Takes complete frames out of r; -1 to close. */
static int frames_in(vncweb *w, ws_reader *r, rfb_filter *f, int client, int vnc)
{
	for (;;) {
		if (r->len < 2)
			return 0;
		unsigned char *p = r->buf;
		int opcode = p[0] & 0x0f;
		if (!(p[1] & 0x80))
			return -1; /* client frames are masked */
		uint64_t plen = p[1] & 0x7f;
		size_t h = 2;
		if (plen == 126) {
			if (r->len < 4)
				return 0;
			plen = be16(p + 2);
			h = 4;
		} else if (plen == 127) {
			if (r->len < 10)
				return 0;
			plen = (uint64_t)be32(p + 2) << 32 | be32(p + 6);
			h = 10;
		}
		if (plen > WS_FRAME_MAX)
			return -1;
		if (r->len < h + 4 + plen)
			return 0;
		unsigned char *mask = p + h, *data = p + h + 4;
		for (uint64_t i = 0; i < plen; i++)
			data[i] ^= mask[i & 3];
		if (opcode == 8)
			return -1;
		if (opcode == 9 && ws_send(client, 10, data, (size_t)plen) != 0)
			return -1;
		if ((opcode == 0 || opcode == 1 || opcode == 2) &&
		    filter_to_vnc(w, f, vnc, data, (size_t)plen) != 0)
			return -1;
		size_t used = h + 4 + (size_t)plen;
		memmove(r->buf, r->buf + used, r->len - used);
		r->len -= used;
	}
}

static int connect_vnc(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int vncweb_ws_serve(vncweb *w, int client, const char *key, const char *protocol)
{
	static ws_reader reader;
	static unsigned char from_vnc[65536];
	rfb_filter f = {NULL, 0, 0, RFB_PREAMBLE, 0, 0};
	int vnc = connect_vnc(w->vnc_port);
	if (vnc < 0) {
		fprintf(stderr, "relay-vncweb: x11vnc does not answer on the guest's 127.0.0.1:%d: %s\n",
		        w->vnc_port, strerror(errno));
		return 1;
	}
	if (handshake(client, key, protocol) != 0)
		return 1;
	struct pollfd p[2] = {{client, POLLIN, 0}, {vnc, POLLIN, 0}};
	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents) {
			ssize_t n = read(client, reader.buf + reader.len, sizeof reader.buf - reader.len);
			if (n <= 0)
				break;
			reader.len += (size_t)n;
			if (frames_in(w, &reader, &f, client, vnc) != 0)
				break;
		}
		if (p[1].revents) {
			ssize_t n = read(vnc, from_vnc, sizeof from_vnc);
			if (n <= 0 || ws_send(client, 2, from_vnc, (size_t)n) != 0)
				break;
		}
	}
	if (f.dropped)
		fprintf(stderr, "relay-vncweb: %lu input message(s) refused (no take-over)\n", f.dropped);
	free(f.buf);
	close(vnc);
	return 0;
}
