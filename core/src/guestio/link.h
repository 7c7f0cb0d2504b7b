/*
 * guestio/link.h — the guestio room's slice of a guest (session/guest.h,
 * guest_slice_ops): the guest's transport connection, opened on first use
 * and shared by every operation and the step downloads, and the resident
 * receiver's channel (resident.h). Runtime only: nothing of it is in the
 * ownership record. The session holds the pointer (guest->link) and never
 * looks inside.
 *
 * Locking: the fields are read and written under the slice's own lock
 * (head, session/slice.h; a leaf); a thread opening the connection sets
 * transport_opening and the others wait on the slice's condition. Only
 * guestio/ writes them.
 */
#ifndef RELAY_GUESTIO_LINK_H
#define RELAY_GUESTIO_LINK_H

#include <stdbool.h>

#include "relay/transport.h"
#include "session/manager_internal.h"
#include "session/slice.h"

struct gio_resident;

typedef struct gio_link {
	slice_head head;                        /* the slice's lock; its condition: opening ended */
	struct loaded_plugin *transport_plugin; /* chosen at first use */
	relay_transport_conn *transport_conn;   /* open connection, or NULL */
	bool transport_opening;                 /* a thread is in transport.open for this guest */
	struct gio_resident *resident;          /* the resident receiver's channel, or NULL */
	bool resident_lent;                     /* a step download has it for one request; the others wait */
	bool resident_no_commands;              /* its serve refused a command request (an older receiver) */
} gio_link;

/* The slice operations the session calls (tools/dispatch.c puts them in
 * the relay's guest_rooms). */
extern const guest_slice_ops gio_link_ops;

/* The transport connection of a guest, opened on first use with the plugin
 * backends_transport_for() picks; tells the rooms above an operation
 * reaches the guest (session_hooks.guest_reached). RELAY_OK with
 * *plugin_out and *conn_out borrowed from the guest. Call without the lock
 * (from the guest's queue or a download worker). */
relay_status gio_link_transport(session_manager *m, guest *g, struct loaded_plugin **plugin_out,
                                relay_transport_conn **conn_out, relay_error *err);
/* Closes the guest's transport connection, if open (the release). Call
 * without the lock, once nothing uses the connection any more. */
void gio_link_close(session_manager *m, guest *g);

#endif
