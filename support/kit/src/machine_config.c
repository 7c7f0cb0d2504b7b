/* machine_config.c — the configuration every machine plugin reads (relay_kit/machine_config.h). */
#include "relay_kit/machine_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_kit/error.h"
#include "relay_support/json_get.h"
#include "relay_support/tree.h"

static bool state_dir_ok(const char *dir, const rk_machine_config_rules *rules)
{
	if (dir == NULL || dir[0] != '/' || strlen(dir) > rules->state_dir_max_bytes)
		return false;
	return rules->state_dir_refused == NULL || strpbrk(dir, rules->state_dir_refused) == NULL;
}

relay_status rk_machine_config_read(rk_machine *kit, json_object *cfg, const rk_machine_config_rules *rules,
                                    relay_error *err)
{
	const relay_host *host = kit->host;
	const char *name = kit->backend->name;
	if (cfg == NULL || !json_object_is_type(cfg, json_type_object))
		return rk_err(host, err, RELAY_E_INVALID_ARGUMENT, 0, 0,
		              "the %s configuration is not a JSON object", name);
	const char *state_dir = rsj_get_str(cfg, "stateDir");
	if (!state_dir_ok(state_dir, rules)) {
		char refused[64] = "";
		if (rules->state_dir_refused)
			for (const char *c = rules->state_dir_refused; *c; c++)
				if (*c != '\n') /* a line break is no character to show */
					snprintf(refused + strlen(refused), sizeof refused - strlen(refused),
					         "%s'%c'", refused[0] ? " or " : " without ", *c);
		return rk_err(host, err, RELAY_E_INVALID_ARGUMENT, 0, 0,
		              "%s needs an absolute \"stateDir\" of at most %zu bytes%s", name,
		              rules->state_dir_max_bytes, refused);
	}
	const char *libexec = rsj_get_str(cfg, "libexecDir");
	const char *net = rsj_get_str(cfg, "guestNetwork");
	kit->state_dir = strdup(state_dir);
	kit->libexec_dir = libexec ? strdup(libexec) : NULL;
	kit->default_network =
	    strdup(net && (strcmp(net, "internet") == 0 || strcmp(net, "allow") == 0) ? net : "nat");
	size_t len = strlen(state_dir) + sizeof "/leases";
	kit->leases_dir = malloc(len);
	if (kit->state_dir == NULL || kit->default_network == NULL || kit->leases_dir == NULL ||
	    (libexec && kit->libexec_dir == NULL))
		return rk_err(host, err, RELAY_E_NO_MEMORY, ENOMEM, 0, "out of memory");
	snprintf(kit->leases_dir, len, "%s/leases", state_dir);
	kit->store = kit->state_dir;
	if (rs_mkdir_p(kit->leases_dir, 0700, 0, NULL) != 0)
		return rk_err(host, err, RELAY_E_IO, errno, RK_ERR_NAME_ERRNO,
		              "cannot create the lease store %s", kit->leases_dir);
	return RELAY_OK;
}

void rk_machine_config_free(rk_machine *kit)
{
	free(kit->state_dir);
	free(kit->leases_dir);
	free(kit->libexec_dir);
	free(kit->default_network);
	kit->state_dir = kit->leases_dir = kit->libexec_dir = kit->default_network = NULL;
	kit->store = NULL;
}
