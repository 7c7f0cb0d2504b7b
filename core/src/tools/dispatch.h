/*
 * tools/dispatch.h — the dispatcher of tool calls and the hook table the
 * relay's creator passes to session_create() (session/manager.h).
 */
#ifndef RELAY_TOOLS_DISPATCH_H
#define RELAY_TOOLS_DISPATCH_H

#include "session/manager.h"

/* The hooks of the rooms above the session: dispatch (tools/), taking back
 * and ending guests (lease/), the download queue (delivery/). Static
 * storage. */
const session_hooks *tools_session_hooks(void);
/* The rooms' slices of a guest (session/guest.h), as the hooks name them:
 * for code that makes guests outside a session (tests). Static storage. */
const struct guest_rooms *tools_guest_rooms(void);

#endif
