/*
 * machine-fake — what the machine half (machine_fake.c) and the transport
 * half (fake_transport.c) of the fake backend share.
 */
#ifndef RELAY_TESTS_MACHINE_FAKE_H
#define RELAY_TESTS_MACHINE_FAKE_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>

#include "relay/host.h"
#include "relay/machine.h"
#include "relay/plugin.h"
#include "relay/transport.h"

#define FAKE_PLUGIN_NAME "machine-fake"

typedef struct fake_state {
	const relay_host *host; /* borrowed until fini() */
	char *state_dir;        /* <state root>/plugins/machine-fake: leases/, machines/, ops.jsonl */
	char *control_path;     /* the control file (may not exist) */
	char *log_path;         /* the operation log (JSON lines) */
	char *store;            /* the "store" of the binding (RELAY_FAKE_MACHINE_STORE, else state_dir) */
	/* Guards the control file and the lease files between this process's
	 * threads; an flock on <control>.lock guards them between processes. */
	pthread_mutex_t lock;
} fake_state;

/* Appends one line to the operation log: {"op", "lease", "time", "pid",
 * ...extra}. `extra` (may be NULL) is taken. */
void fake_log(fake_state *st, const char *op, const char *vm, json_object *extra);

/* Sleeps `delay_ms` of real time in small steps; returns non-zero when the
 * call was cancelled meanwhile. */
int fake_delay(fake_state *st, relay_call *call, int64_t delay_ms);

/* json-c text as an owned host string. */
char *fake_owned_json(fake_state *st, json_object *obj);

extern const relay_transport_ops fake_transport_ops;

#endif
