/*
 * vncweb.h — relay-vncweb, the live view's bridge (MCP_RELAY_VNC_VIEWER=
 * browser): a loopback-only HTTP server that serves Debian's noVNC client
 * behind a one-time token and bridges its WebSocket to the guest's x11vnc.
 *
 *   vncweb.c     options, the listening socket, the network namespace, the
 *                token, the request loop (HTTP, static files, cookies)
 *   vncweb_ws.c  one WebSocket connection: the handshake, the frames, and
 *                the RFB filter that drops input until a take-over
 *   vncweb_page.c the page at "/" (the token exchange and the noVNC client)
 */
#ifndef RELAY_VNCWEB_H
#define RELAY_VNCWEB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VNCWEB_COOKIE "relay_live"

/* State shared between the server and its WebSocket children (one
 * MAP_SHARED page: the take-over flag is read by every child). */
typedef struct vncweb_shared {
	volatile int control; /* 1 while the person holds control */
} vncweb_shared;

typedef struct vncweb {
	int listen_fd;
	int port;
	char token[65]; /* one-time, cleared once used */
	bool token_used;
	char session[65];        /* the cookie's value once the token is exchanged */
	char password[64];       /* x11vnc's one-time password (given to the page with the cookie) */
	int vnc_port;            /* in the guest's network namespace */
	const char *web_dir;     /* /usr/share/novnc */
	bool control_allowed;    /* MCP_RELAY_CONSOLE_CONTROL=allow */
	const char *events_path; /* take-over events, JSON lines; or NULL */
	vncweb_shared *shared;
} vncweb;

/* The page served at "/" (vncweb_page.c). */
extern const char vncweb_page_html[];

/* Serves one upgraded connection until either side closes; runs in a
 * child process. `key` is the Sec-WebSocket-Key, `protocol` the chosen
 * subprotocol or NULL. Returns the exit status. */
int vncweb_ws_serve(vncweb *w, int client_fd, const char *key, const char *protocol);

/* The current UTC time, ISO 8601 with milliseconds. */
void vncweb_now(char out[64]);

#endif
