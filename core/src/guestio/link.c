/*
 * The guestio room's slice of a guest (link.h): the transport connection,
 * opened once and shared.
 */
#include "guestio/link.h"

#include <stdlib.h>

#include "loader/loader.h"
#include "util/error.h"

const guest_slice_ops gio_link_ops = {
    .size = sizeof(gio_link),
};

relay_status gio_link_transport(session_manager *m, guest *g, loaded_plugin **plugin_out,
                                relay_transport_conn **conn_out, relay_error *err)
{
	session_wait_startup(m);
	m->hooks->guest_reached(m, g); /* an operation reaches the guest: lifts a download pause */
	/* A call and a step download may reach a guest without a connection
	 * at the same moment: one opens, the other waits for it, so a guest
	 * never holds two connections (the loser's would leak its master). */
	gio_link *link = g->link;
	slice_lock(link);
	while (link->transport_opening && link->transport_conn == NULL)
		slice_wait(link);
	if (link->transport_conn) {
		*plugin_out = link->transport_plugin;
		*conn_out = link->transport_conn;
		slice_unlock(link);
		return RELAY_OK;
	}
	link->transport_opening = true;
	slice_unlock(link);
	char *lease = guest_lease_text(m, g);
	relay_status status = RELAY_OK;
	relay_transport_conn *conn = NULL;
	loaded_plugin *plugin = NULL;
	if (lease == NULL) {
		status = relay_error_set(err, RELAY_E_NOT_FOUND, 0, "guest %s holds no lease", g->name);
		goto cleanup;
	}
	plugin = backends_transport_for(m->backends, lease);
	if (plugin == NULL) {
		status = relay_error_set(
		    err, RELAY_E_UNAVAILABLE, 0, "no transport plugin could be loaded for %s (%s)", g->name,
		    m->backends->load_errors[SLOT_TRANSPORT] ? m->backends->load_errors[SLOT_TRANSPORT]
		                                             : "the transport slot is empty");
		goto cleanup;
	}
	status = plugin->transport.open(plugin->state, lease, NULL, 0, &conn, err);
cleanup:
	free(lease);
	slice_lock(link);
	link->transport_opening = false;
	if (status == RELAY_OK) {
		link->transport_plugin = plugin;
		link->transport_conn = conn;
		*plugin_out = plugin;
		*conn_out = conn;
	}
	slice_broadcast(link);
	slice_unlock(link);
	return status;
}

void gio_link_close(session_manager *m, guest *g)
{
	(void)m;
	gio_link *link = g->link;
	slice_lock(link);
	loaded_plugin *plugin = link->transport_plugin;
	relay_transport_conn *conn = link->transport_conn;
	link->transport_conn = NULL;
	link->transport_plugin = NULL;
	slice_unlock(link);
	if (plugin && conn)
		plugin->transport.close(plugin->state, conn, 0);
}
