/*
 * reference-machine: init/fini, the lease operations (relay/machine.h) and
 * the descriptor. Each operation follows the rules of relay/plugin.h: flags
 * first (R1), `err` filled on every failure (R2), out-parameters NULL after
 * a failure (R3), memory from host->alloc (R7).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rm.h"

/* No operation here knows a flag yet: every bit is refused (R1). */
#define RM_KNOWN_FLAGS 0u

#define RM_CHECK_FLAGS(st, flags, op, err)                                                                   \
	do {                                                                                                 \
		if ((flags) & ~RM_KNOWN_FLAGS)                                                               \
			return rm_err((st), (err), RELAY_E_UNSUPPORTED_FLAGS, 0, "unknown %s flags 0x%x",    \
			              (op), (flags));                                                        \
	} while (0)

static int valid_name(const char *s)
{
	if (s == NULL || *s == '\0' || strlen(s) > 200)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      *s == '-'))
			return 0;
	return 1;
}

static const char *json_str(json_object *obj, const char *key)
{
	json_object *v = NULL;
	return json_object_object_get_ex(obj, key, &v) && json_object_is_type(v, json_type_string)
	           ? json_object_get_string(v)
	           : NULL;
}

relay_status rm_guest_dir(const rm_state *st, const char *lease_json, char *out, size_t out_len, char *vm_out,
                          size_t vm_len, relay_error *err)
{
	json_object *lease = lease_json ? json_tokener_parse(lease_json) : NULL;
	const char *vm = json_str(lease, "vm");
	relay_status status = RELAY_OK;
	if (!valid_name(vm))
		status =
		    rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the lease document has no valid \"vm\"");
	else {
		snprintf(out, out_len, "%s/%s", st->root, vm);
		if (vm_out)
			snprintf(vm_out, vm_len, "%s", vm);
	}
	json_object_put(lease);
	return status;
}

/* The guest folder of `lease_json` into `dir` and its stored lease
 * document into *lease_out; RELAY_E_NOT_FOUND when the guest is gone. */
static relay_status load_lease(const rm_state *st, const char *lease_json, char dir[RM_PATH_MAX],
                               json_object **lease_out, relay_error *err)
{
	*lease_out = NULL;
	relay_status status = rm_guest_dir(st, lease_json, dir, RM_PATH_MAX, NULL, 0, err);
	if (status != RELAY_OK)
		return status;
	char path[RM_PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/lease.json", dir);
	if ((*lease_out = json_object_from_file(path)) == NULL)
		return rm_err(st, err, RELAY_E_NOT_FOUND, 0,
		              "no guest at %s: it was released or never leased", dir);
	return RELAY_OK;
}

/* *out (when asked for) becomes an owned copy of `lease`, which is put. */
static relay_status answer_lease(const rm_state *st, json_object *lease, char **out, relay_error *err)
{
	relay_status status = RELAY_OK;
	if (out && (*out = rm_owned_json(st, lease)) == NULL)
		status = rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	json_object_put(lease);
	return status;
}

/* Writes the lease document durably enough for a reference: temp + rename. */
static relay_status write_lease(const rm_state *st, const char *dir, json_object *lease, relay_error *err)
{
	char path[RM_PATH_MAX + 16], tmp[RM_PATH_MAX + 24];
	/* A path that does not fit is refused, never cut (a cut path names
	 * another file). */
	if (snprintf(path, sizeof path, "%s/lease.json", dir) >= (int)sizeof path ||
	    snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
		return rm_err(st, err, RELAY_E_TOO_LARGE, 0, "the guest folder %s is too long", dir);
	if (json_object_to_file_ext(tmp, lease, JSON_C_TO_STRING_PLAIN) != 0 || rename(tmp, path) != 0)
		return rm_err(st, err, RELAY_E_IO, errno, "cannot write %s", path);
	return RELAY_OK;
}

static relay_status rm_acquire(relay_plugin_state *state, const char *spec_json, relay_call *call,
                               unsigned flags, char **lease_json_out, relay_error *err)
{
	rm_state *st = state;
	(void)call;
	*lease_json_out = NULL;
	RM_CHECK_FLAGS(st, flags, "acquire", err);
	relay_status status = RELAY_OK;
	json_object *spec = spec_json ? json_tokener_parse(spec_json) : NULL, *lease = NULL, *ttl = NULL;
	const char *purpose = json_str(spec, "purpose"), *image = json_str(spec, "image");
	if (!valid_name(purpose) || image == NULL) {
		status = rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		                "the spec needs a \"purpose\" of [A-Za-z0-9-] and an \"image\"");
		goto cleanup;
	}
	if (strcmp(image, RM_IMAGE) != 0) {
		status = rm_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		                "there is no image %s; this backend offers \"%s\"", image, RM_IMAGE);
		goto cleanup;
	}
	unsigned char random[8];
	if ((status = st->host->random_bytes(random, sizeof random, err)) != RELAY_OK)
		goto cleanup;
	char vm[32], dir[RM_PATH_MAX], home[RM_PATH_MAX + 8];
	snprintf(vm, sizeof vm, "ref-%02x%02x%02x%02x%02x%02x%02x%02x", random[0], random[1], random[2],
	         random[3], random[4], random[5], random[6], random[7]);
	snprintf(dir, sizeof dir, "%s/%s", st->root, vm);
	snprintf(home, sizeof home, "%s/home", dir);
	if ((status = rm_mkdir_p(st, home, err)) != RELAY_OK)
		goto cleanup;
	int64_t ttl_ms =
	    json_object_object_get_ex(spec, "ttlMs", &ttl) ? json_object_get_int64(ttl) : 3600000;
	lease = json_object_new_object();
	json_object *record = json_object_new_object();
	json_object_object_add(record, "folder", json_object_new_string(dir));
	json_object_object_add(lease, "vm", json_object_new_string(vm));
	json_object_object_add(lease, "purpose", json_object_new_string(purpose));
	json_object_object_add(lease, "image", json_object_new_string(image));
	json_object_object_add(lease, "lease_id", json_object_new_string(vm));
	json_object_object_add(lease, "state", json_object_new_string("running"));
	json_object_object_add(lease, "expiresAtMs", json_object_new_int64(st->host->now_ms() + ttl_ms));
	json_object_object_add(lease, "console", NULL);
	json_object_object_add(lease, "display", NULL);
	json_object_object_add(lease, "ssh", NULL);
	json_object_object_add(lease, "record", record);
	if ((status = write_lease(st, dir, lease, err)) != RELAY_OK) {
		st->host->remove_tree(dir, 0, NULL);
		goto cleanup;
	}
	if ((*lease_json_out = rm_owned_json(st, lease)) == NULL)
		status = rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
cleanup:
	json_object_put(lease);
	json_object_put(spec);
	return status;
}

static relay_status rm_renew(relay_plugin_state *state, const char *lease_json, uint64_t ttl_ms,
                             relay_call *call, unsigned flags, char **lease_json_out, relay_error *err)
{
	rm_state *st = state;
	(void)call;
	if (lease_json_out)
		*lease_json_out = NULL;
	RM_CHECK_FLAGS(st, flags, "renew", err);
	char dir[RM_PATH_MAX];
	json_object *lease = NULL;
	relay_status status = load_lease(st, lease_json, dir, &lease, err);
	if (status != RELAY_OK)
		return status;
	json_object_object_add(lease, "expiresAtMs",
	                       json_object_new_int64(st->host->now_ms() + (int64_t)ttl_ms));
	if ((status = write_lease(st, dir, lease, err)) != RELAY_OK) {
		json_object_put(lease);
		return status;
	}
	return answer_lease(st, lease, lease_json_out, err);
}

static relay_status rm_inspect(relay_plugin_state *state, const char *lease_json, relay_call *call,
                               unsigned flags, char **lease_json_out, relay_error *err)
{
	rm_state *st = state;
	(void)call;
	if (lease_json_out)
		*lease_json_out = NULL;
	RM_CHECK_FLAGS(st, flags, "inspect", err);
	char dir[RM_PATH_MAX];
	json_object *lease = NULL;
	relay_status status = load_lease(st, lease_json, dir, &lease, err);
	return status != RELAY_OK ? status : answer_lease(st, lease, lease_json_out, err);
}

/* Removes the guest roots of `purpose` (/var/tmp/<stamp>-mcp-relay-<purpose>,
 * relay/transport.h): they are folders of this host and outlive the guest
 * folder otherwise. */
static void remove_guest_roots(const rm_state *st, const char *purpose)
{
	char suffix[256];
	snprintf(suffix, sizeof suffix, "-mcp-relay-%s", purpose);
	DIR *dir = opendir("/var/tmp");
	struct dirent *e;
	while (dir && (e = readdir(dir)) != NULL) {
		size_t n = strlen(e->d_name), m = strlen(suffix);
		if (n > m && strcmp(e->d_name + n - m, suffix) == 0) {
			char path[RM_PATH_MAX];
			snprintf(path, sizeof path, "/var/tmp/%s", e->d_name);
			st->host->remove_tree(path, 0, NULL);
		}
	}
	if (dir)
		closedir(dir);
}

static relay_status rm_release(relay_plugin_state *state, const char *lease_json, const char *reason,
                               relay_call *call, unsigned flags, relay_error *err)
{
	rm_state *st = state;
	(void)call, (void)reason;
	RM_CHECK_FLAGS(st, flags, "release", err);
	char dir[RM_PATH_MAX];
	json_object *lease = NULL;
	relay_status status = load_lease(st, lease_json, dir, &lease, err);
	if (status != RELAY_OK)
		return status;
	const char *purpose = json_str(lease, "purpose");
	if (valid_name(purpose))
		remove_guest_roots(st, purpose);
	if (status == RELAY_OK)
		status = st->host->remove_tree(dir, 0, err);
	json_object_put(lease);
	return status;
}

static relay_status rm_verify_destroyed(relay_plugin_state *state, const char *lease_json, relay_call *call,
                                        unsigned flags, char **check_name_out, relay_error *err)
{
	rm_state *st = state;
	(void)call;
	if (check_name_out)
		*check_name_out = NULL;
	RM_CHECK_FLAGS(st, flags, "verify_destroyed", err);
	char dir[RM_PATH_MAX];
	relay_status status = rm_guest_dir(st, lease_json, dir, sizeof dir, NULL, 0, err);
	if (status != RELAY_OK)
		return status;
	struct stat sb;
	if (lstat(dir, &sb) == 0 || errno != ENOENT)
		return rm_err(st, err, RELAY_E_UNVERIFIED, 0, "the guest folder %s still exists", dir);
	if (check_name_out && (*check_name_out = st->host->strdup("folder")) == NULL)
		return rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	return RELAY_OK;
}

static relay_status rm_images(relay_plugin_state *state, relay_call *call, unsigned flags,
                              char **images_json_out, relay_error *err)
{
	rm_state *st = state;
	(void)call;
	*images_json_out = NULL;
	RM_CHECK_FLAGS(st, flags, "images", err);
	*images_json_out =
	    st->host->strdup("{\"images\":{\"" RM_IMAGE "\":{\"kind\":\"linux\",\"base_available\":true}},"
	                     "\"capacity\":null}");
	return *images_json_out ? RELAY_OK : rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static relay_status rm_find_by_purpose(relay_plugin_state *state, const char *purpose, relay_call *call,
                                       unsigned flags, char **leases_json_out, relay_error *err)
{
	rm_state *st = state;
	(void)call;
	*leases_json_out = NULL;
	RM_CHECK_FLAGS(st, flags, "find_by_purpose", err);
	if (purpose == NULL)
		return rm_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "find_by_purpose needs a purpose");
	json_object *found = json_object_new_array();
	DIR *dir = opendir(st->root);
	struct dirent *e;
	while (dir && (e = readdir(dir)) != NULL) {
		if (!valid_name(e->d_name))
			continue;
		char path[RM_PATH_MAX];
		snprintf(path, sizeof path, "%s/%s/lease.json", st->root, e->d_name);
		json_object *lease = json_object_from_file(path);
		const char *p = json_str(lease, "purpose");
		if (p && strcmp(p, purpose) == 0)
			json_object_array_add(found, lease);
		else
			json_object_put(lease);
	}
	if (dir)
		closedir(dir);
	*leases_json_out = rm_owned_json(st, found);
	json_object_put(found);
	return *leases_json_out ? RELAY_OK : rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static relay_status rm_binding(relay_plugin_state *state, unsigned flags, char **binding_json_out,
                               relay_error *err)
{
	rm_state *st = state;
	*binding_json_out = NULL;
	RM_CHECK_FLAGS(st, flags, "binding", err);
	json_object *b = json_object_new_object();
	json_object_object_add(b, "machine", json_object_new_string(RM_NAME));
	json_object_object_add(b, "endpoint", NULL);
	json_object_object_add(b, "store", json_object_new_string(st->root));
	json_object_object_add(b, "environmentFingerprint", NULL);
	*binding_json_out = rm_owned_json(st, b);
	json_object_put(b);
	return *binding_json_out ? RELAY_OK : rm_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
}

static const relay_machine_ops rm_machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = rm_acquire,
    .renew = rm_renew,
    .inspect = rm_inspect,
    .release = rm_release,
    .verify_destroyed = rm_verify_destroyed,
    .images = rm_images,
    .find_by_purpose = rm_find_by_purpose,
    .binding = rm_binding,
    /* health, catalog, console, doctor: NULL = unsupported. */
};

/* {"stateDir": ..., "options": {"root": ...}}: the guests' folder. */
static relay_status rm_init(const relay_host *host, const char *config_json, unsigned flags,
                            relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	if (flags != 0)
		return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown init flags 0x%x",
		                       RM_NAME, flags);
	/* Trees are removed by the host (ABI 1.6), never by a walk of our own. */
	if (!RELAY_SIZED_HAS(host, remove_tree) || host->remove_tree == NULL)
		return host->error_set(err, RELAY_E_UNSUPPORTED, 0,
		                       "%s needs a relay of plugin ABI 1.6 or later (the host's remove_tree)",
		                       RM_NAME);
	json_object *config = json_tokener_parse(config_json), *options = NULL;
	json_object_object_get_ex(config, "options", &options);
	const char *root = json_str(options, "root"), *state_dir = json_str(config, "stateDir");
	char path[RM_PATH_MAX];
	relay_status status = RELAY_OK;
	rm_state probe = {host, NULL};
	if (root != NULL)
		snprintf(path, sizeof path, "%s", root);
	else if (state_dir != NULL)
		snprintf(path, sizeof path, "%s/guests", state_dir);
	else
		path[0] = '\0';
	if (path[0] != '/')
		status = rm_err(&probe, err, RELAY_E_INVALID_ARGUMENT, 0,
		                "options.root must be an absolute folder (or give a stateDir)");
	else
		status = rm_mkdir_p(&probe, path, err);
	json_object_put(config);
	if (status != RELAY_OK)
		return status;
	rm_state *st = host->alloc(sizeof *st);
	if (st == NULL || (st->root = host->strdup(path)) == NULL) {
		host->free(st);
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "%s: out of memory", RM_NAME);
	}
	st->host = host;
	*state_out = st;
	return RELAY_OK;
}

static void rm_fini(relay_plugin_state *state)
{
	rm_state *st = state;
	if (st == NULL)
		return;
	st->host->free(st->root);
	st->host->free(st);
}

static const relay_plugin_descriptor rm_descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = RM_NAME,
    .version = RM_VERSION,
    .description = "reference machine + transport: guests are folders of this host",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .init = rm_init,
    .fini = rm_fini,
    .machine = &rm_machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &rm_transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

/* exec() relies on RELAY_PROCESS_EXEC_RULES (ABI 1.2): refuse older hosts. */
RELAY_PLUGIN_DEFINE_ENTRY_SINCE(rm_descriptor, 2)
