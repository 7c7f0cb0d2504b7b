/*
 * relay_kit/machine_config.h — what init reads of the configuration every
 * machine plugin gets (relay/plugin.h: "stateDir", "libexecDir",
 * "guestNetwork") into the plugin's rk_machine, with the lease store
 * <stateDir>/leases made, in one wording. The plugin reads the rest
 * ("options", its own members) itself.
 */
#ifndef RELAY_KIT_MACHINE_CONFIG_H
#define RELAY_KIT_MACHINE_CONFIG_H

#include <stddef.h>

#include <json-c/json.h>

#include "relay_kit/machine.h"

/* What a backend accepts as its state folder. */
typedef struct rk_machine_config_rules {
	size_t state_dir_max_bytes;    /* the longest "stateDir" */
	const char *state_dir_refused; /* characters it may not hold (NULL: none) */
} rk_machine_config_rules;

/* Fills kit's state_dir, leases_dir (created, 0700, with the folders above
 * it), libexec_dir (NULL when absent) and default_network ("internet" or
 * "allow" as configured, else "nat"), and points kit->store at state_dir.
 * kit->host and kit->backend are set. Refuses a cfg that is NULL or not a
 * JSON object and a "stateDir" that is not absolute or breaks the rules
 * (RELAY_E_INVALID_ARGUMENT, naming the backend); RELAY_E_NO_MEMORY,
 * RELAY_E_IO when the lease store cannot be made. What it filled before a
 * failure is freed by rk_machine_config_free. */
relay_status rk_machine_config_read(rk_machine *kit, json_object *cfg, const rk_machine_config_rules *rules,
                                    relay_error *err);
/* Frees what rk_machine_config_read filled (the fields are NULL after). */
void rk_machine_config_free(rk_machine *kit);

#endif
