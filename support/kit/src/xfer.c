/* xfer.c — the transfers' first checks and their facts (relay_kit/xfer.h). */
#include "relay_kit/xfer.h"

#include <stddef.h>

relay_status rk_xfer_begin(const relay_host *host, const char *op, unsigned flags, unsigned accepted,
                           const char *host_path, const char *guest_path, char **facts_out, relay_error *err)
{
	if (facts_out)
		*facts_out = NULL;
	if (flags & ~accepted)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown %s flags 0x%x", op, flags);
	if (host_path == NULL || host_path[0] == '\0' || guest_path == NULL || guest_path[0] == '\0')
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "%s needs a host path and a guest path", op);
	return RELAY_OK;
}

int rk_xfer_fact_add(json_object *facts, const char *path, uint64_t bytes, const char *sha256)
{
	json_object *o = json_object_new_object();
	if (o == NULL || json_object_object_add(o, "path", json_object_new_string(path)) != 0 ||
	    json_object_object_add(o, "bytes", json_object_new_int64((int64_t)bytes)) != 0 ||
	    json_object_object_add(o, "sha256", json_object_new_string(sha256)) != 0 ||
	    json_object_array_add(facts, o) != 0) {
		json_object_put(o);
		return -1;
	}
	return 0;
}
