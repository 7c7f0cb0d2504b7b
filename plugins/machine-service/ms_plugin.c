/*
 * machine-service: the machine plugin (and its service-mediated transport)
 * for the loopback machine-service daemon, spec/machine-service.md.
 *
 * This file holds the descriptor, init/fini (configuration, options of §11,
 * the selected environment, the Tart binary for the destruction check), the
 * binding of leases, and the identity check as the `health` operation.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_http.h"
#include "ms_plugin.h"
#include "ms_util.h"
#include "relay_support/pattern.h"
#include "relay_support/which.h"

#define DEFAULT_ORIGIN "http://localhost:6240"

/* ---- configuration -------------------------------------------------------------- */

/* §1 origin check: http, a loopback host, an optional port, nothing else
 * but an optional "/". Writes the canonical origin (no trailing slash). */
static bool loopback_origin(const char *url, char *out, size_t out_len)
{
	static const char *const pattern =
	    "^http://(localhost|127\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}|\\[::1\\])(:[0-9]{1,5})?/?$";
	if (url == NULL || !rs_matches(url, pattern))
		return false;
	const char *host = url + 7;
	const char *after = host[0] == '[' ? strchr(host, ']') + 1 : host + strcspn(host, ":/");
	if (strncmp(host, "127.", 4) == 0) {
		int a = 0, b = 0, c = 0;
		if (sscanf(host + 4, "%d.%d.%d", &a, &b, &c) != 3 || a > 255 || b > 255 || c > 255)
			return false;
	}
	if (*after == ':') {
		long port = strtol(after + 1, NULL, 10);
		if (port < 1 || port > 65535)
			return false;
	}
	size_t len = strlen(url);
	if (url[len - 1] == '/')
		len--;
	if (len >= out_len)
		return false;
	memcpy(out, url, len);
	out[len] = '\0';
	return true;
}

static relay_status copy_option(const relay_host *host, json_object *value, const char *key, char *dst,
                                size_t len, const char *pattern, relay_error *err)
{
	if (!json_object_is_type(value, json_type_string) || json_object_get_string_len(value) == 0 ||
	    (size_t)json_object_get_string_len(value) >= len ||
	    (pattern && !rs_matches(json_object_get_string(value), pattern)))
		return host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: the option %s has a bad value; see MCP_RELAY_MACHINE_SERVICE_OPTIONS in "
		    "docs/machine-service.md",
		    MS_PLUGIN_NAME, key);
	snprintf(dst, len, "%s", json_object_get_string(value));
	return RELAY_OK;
}

/* The options of §11; unknown keys and bad values refuse the plugin. */
static relay_status read_options(const relay_host *host, json_object *options, ms_options *opt,
                                 relay_error *err)
{
	snprintf(opt->route_prefix, sizeof opt->route_prefix, "/machines");
	snprintf(opt->list_key, sizeof opt->list_key, "machines");
	snprintf(opt->name_field, sizeof opt->name_field, "vm");
	snprintf(opt->service_name, sizeof opt->service_name, "machine-service");
	snprintf(opt->acquire_path, sizeof opt->acquire_path, "/acquire");
	snprintf(opt->fingerprint_header, sizeof opt->fingerprint_header, "X-VM-Environment-Fingerprint");
	snprintf(opt->ssh_field, sizeof opt->ssh_field, "ssh");
	opt->max_exec_timeout_s = 4200;
	opt->destruction_check = MS_CHECK_SERVICE;
	if (options == NULL)
		return RELAY_OK;
	if (!json_object_is_type(options, json_type_object))
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "%s: \"options\" must be a JSON object", MS_PLUGIN_NAME);
	relay_status status = RELAY_OK;
	json_object_object_foreach(options, key, value)
	{
		if (strcmp(key, "routePrefix") == 0)
			status = copy_option(host, value, key, opt->route_prefix, sizeof opt->route_prefix,
			                     "^/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", err);
		else if (strcmp(key, "acquirePath") == 0)
			status = copy_option(host, value, key, opt->acquire_path, sizeof opt->acquire_path,
			                     "^/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", err);
		else if (strcmp(key, "listKey") == 0)
			status =
			    copy_option(host, value, key, opt->list_key, sizeof opt->list_key, NULL, err);
		else if (strcmp(key, "nameField") == 0)
			status = copy_option(host, value, key, opt->name_field, sizeof opt->name_field,
			                     "^(vm|machine)$", err);
		else if (strcmp(key, "serviceName") == 0)
			status = copy_option(host, value, key, opt->service_name, sizeof opt->service_name,
			                     NULL, err);
		else if (strcmp(key, "fingerprintHeader") == 0)
			status = copy_option(host, value, key, opt->fingerprint_header,
			                     sizeof opt->fingerprint_header, "^[A-Za-z0-9-]+$", err);
		else if (strcmp(key, "sshField") == 0)
			status =
			    copy_option(host, value, key, opt->ssh_field, sizeof opt->ssh_field, NULL, err);
		else if (strcmp(key, "maxExecTimeoutS") == 0) {
			if (!json_object_is_type(value, json_type_int) || json_object_get_int64(value) < 1)
				status = host->error_set(
				    err, RELAY_E_INVALID_ARGUMENT, 0,
				    "%s: the option maxExecTimeoutS must be a positive integer of "
				    "seconds",
				    MS_PLUGIN_NAME);
			else
				opt->max_exec_timeout_s = json_object_get_int64(value);
		} else if (strcmp(key, "destructionCheck") == 0) {
			const char *v =
			    json_object_is_type(value, json_type_string) ? json_object_get_string(value) : "";
			if (strcmp(v, "tart") == 0 || strcmp(v, "service") == 0) {
				opt->destruction_check =
				    strcmp(v, "tart") == 0 ? MS_CHECK_TART : MS_CHECK_SERVICE;
				opt->destruction_check_given = true;
			} else {
				status =
				    host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
				                    "%s: the option destructionCheck must be \"tart\" or "
				                    "\"service\"",
				                    MS_PLUGIN_NAME);
			}
		} else {
			status = host->error_set(
			    err, RELAY_E_INVALID_ARGUMENT, 0,
			    "%s: unknown option %s; accepted: routePrefix, listKey, nameField, "
			    "serviceName, acquirePath, fingerprintHeader, maxExecTimeoutS, "
			    "destructionCheck, sshField",
			    MS_PLUGIN_NAME, key);
		}
		if (status != RELAY_OK)
			return status;
	}
	return RELAY_OK;
}

/* The exported bundle (§7.7) as "K=V" lines, from config
 * "exportedEnvironment". */
static char **read_bundle(json_object *bundle)
{
	if (!json_object_is_type(bundle, json_type_object))
		return NULL;
	size_t n = (size_t)json_object_object_length(bundle);
	char **lines = calloc(n + 1, sizeof *lines);
	if (lines == NULL)
		return NULL;
	size_t i = 0;
	json_object_object_foreach(bundle, key, value)
	{
		if (!json_object_is_type(value, json_type_string))
			continue;
		size_t len = strlen(key) + (size_t)json_object_get_string_len(value) + 2;
		lines[i] = malloc(len);
		if (lines[i] == NULL)
			break;
		snprintf(lines[i], len, "%s=%s", key, json_object_get_string(value));
		i++;
	}
	return lines;
}

static const char *bundle_value(char **bundle, const char *key)
{
	size_t kl = strlen(key);
	for (size_t i = 0; bundle && bundle[i]; i++)
		if (strncmp(bundle[i], key, kl) == 0 && bundle[i][kl] == '=')
			return bundle[i] + kl + 1;
	return NULL;
}

static void state_free(ms_state *s)
{
	if (s == NULL)
		return;
	free(s->origin);
	free(s->state_dir);
	free(s->transfer_tmp);
	json_object_put(s->identity);
	ms_env_free(s->bundle);
	free(s->tart_path);
	free(s->tart_home);
	free(s->machctl_path);
	while (s->boot_refusals) {
		ms_boot_refusal *b = s->boot_refusals;
		s->boot_refusals = b->next;
		ms_boot_refusal_free(b);
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void ms_boot_refusal_free(ms_boot_refusal *b)
{
	free(b->purpose);
	free(b->image);
	free(b->reason);
	free(b);
}

relay_status ms_unknown_flags(const relay_host *host, const char *op, unsigned unknown, relay_error *err)
{
	return host->error_set(err, RELAY_E_UNSUPPORTED_FLAGS, 0, "%s: unknown %s flags 0x%x", MS_PLUGIN_NAME,
	                       op, unknown);
}

static relay_status ms_init(const relay_host *host, const char *config_json, unsigned flags,
                            relay_plugin_state **state_out, relay_error *err)
{
	*state_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(host, "init", flags, err);
	relay_status status = RELAY_OK;
	char why[128];
	json_object *config = ms_json_parse(config_json, strlen(config_json), why, sizeof why);
	ms_state *s = calloc(1, sizeof *s);
	if (s == NULL) {
		json_object_put(config);
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", MS_PLUGIN_NAME);
	}
	pthread_mutex_init(&s->lock, NULL);
	s->host = host;
	if (!json_object_is_type(config, json_type_object)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "%s: the configuration is not a JSON object", MS_PLUGIN_NAME);
		goto cleanup;
	}
	const char *state_dir = rsj_get_str(config, "stateDir");
	if (state_dir == NULL || state_dir[0] != '/') {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "%s: the configuration lacks an absolute stateDir", MS_PLUGIN_NAME);
		goto cleanup;
	}
	s->state_dir = strdup(state_dir);
	size_t tl = strlen(state_dir) + sizeof "/transfer-tmp";
	s->transfer_tmp = malloc(tl);
	if (s->state_dir == NULL || s->transfer_tmp == NULL) {
		status = host->error_set(err, RELAY_E_NO_MEMORY, 0, "%s: out of memory", MS_PLUGIN_NAME);
		goto cleanup;
	}
	snprintf(s->transfer_tmp, tl, "%s/transfer-tmp", state_dir);

	const char *url = rsj_get_str(config, "serviceUrl");
	char origin[256];
	if (!loopback_origin(url ? url : DEFAULT_ORIGIN, origin, sizeof origin)) {
		status = host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: the service origin %s is not an http origin on localhost, 127.x.x.x or "
		    "[::1] without credentials, path, query or fragment; fix MCP_RELAY_URL",
		    MS_PLUGIN_NAME, url ? url : "(none)");
		goto cleanup;
	}
	s->origin = strdup(origin);

	json_object *options = NULL;
	json_object_object_get_ex(config, "options", &options);
	status = read_options(host, options, &s->opt, err);
	if (status != RELAY_OK)
		goto cleanup;

	json_object *identity = rsj_get_obj(config, "environment");
	if (identity) {
		const char *fp = rsj_get_str(identity, "fingerprint");
		if (fp == NULL || strlen(fp) != 64) {
			status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
			                         "%s: the selected environment has no fingerprint",
			                         MS_PLUGIN_NAME);
			goto cleanup;
		}
		s->identity = json_object_get(identity);
		snprintf(s->fingerprint, sizeof s->fingerprint, "%s", fp);
		snprintf(s->fingerprint_line, sizeof s->fingerprint_line, "%s: %s", s->opt.fingerprint_header,
		         fp);
	}

	/* Subprocesses and the destruction check (§3.10, §7.6, §7.7). */
	json_object *bundle = NULL;
	json_object_object_get_ex(config, "exportedEnvironment", &bundle);
	s->bundle = read_bundle(bundle);
	const char *tart = bundle_value(s->bundle, "TART");
	const char *tart_home = bundle_value(s->bundle, "TART_HOME");
	const char *machctl = bundle_value(s->bundle, "MACHCTL");
	if (tart == NULL && s->identity == NULL)
		tart = getenv("TART") && getenv("TART")[0] ? getenv("TART") : "tart";
	if (tart_home == NULL && s->identity == NULL) {
		const char *env_home = getenv("TART_HOME");
		const char *home = getenv("HOME");
		char path[PATH_MAX];
		if (env_home && env_home[0] == '/')
			snprintf(path, sizeof path, "%s", env_home);
		else
			snprintf(path, sizeof path, "%s/.tart", home && home[0] == '/' ? home : "");
		s->tart_home = strdup(path);
	} else if (tart_home) {
		s->tart_home = strdup(tart_home);
	}
	s->tart_path = tart ? rs_which(tart, NULL) : NULL;
	s->machctl_path = machctl ? strdup(machctl) : NULL;
	if (!s->opt.destruction_check_given)
		s->opt.destruction_check = s->tart_path ? MS_CHECK_TART : MS_CHECK_SERVICE;
	host->log(RELAY_LOG_DEBUG, MS_PLUGIN_NAME, "service %s, destruction check %s%s%s", s->origin,
	          s->opt.destruction_check == MS_CHECK_TART ? "tart" : "service", s->tart_path ? " at " : "",
	          s->tart_path ? s->tart_path : "");
	*state_out = s;
	s = NULL;
cleanup:
	state_free(s);
	json_object_put(config);
	return status;
}

static void ms_fini(relay_plugin_state *state)
{
	state_free(state);
}

/* ---- binding and health ------------------------------------------------------------ */

relay_status ms_binding(relay_plugin_state *state, unsigned flags, char **binding_json_out, relay_error *err)
{
	ms_state *s = state;
	*binding_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(s->host, "binding", flags, err);
	json_object *b = json_object_new_object();
	json_object_object_add(b, "machine", json_object_new_string(MS_PLUGIN_NAME));
	json_object_object_add(b, "endpoint", json_object_new_string(s->origin));
	json_object_object_add(b, "store", s->tart_home ? json_object_new_string(s->tart_home) : NULL);
	json_object_object_add(b, "environmentFingerprint",
	                       s->fingerprint[0] ? json_object_new_string(s->fingerprint) : NULL);
	*binding_json_out = ms_json_owned(s->host, b);
	json_object_put(b);
	return *binding_json_out ? RELAY_OK : s->host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
}

relay_status ms_health_op(relay_plugin_state *state, relay_call *call, unsigned flags, char **health_json_out,
                          relay_error *err)
{
	ms_state *s = state;
	if (health_json_out)
		*health_json_out = NULL;
	if (flags != 0)
		return ms_unknown_flags(s->host, "health", flags, err);
	json_object *health = NULL;
	relay_status status = ms_check_health(s, MS_LOOKUP_TIMEOUT_MS, call, &health, err);
	if (status == RELAY_OK && health_json_out) {
		*health_json_out = ms_json_owned(s->host, health);
		if (*health_json_out == NULL)
			status = s->host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	}
	json_object_put(health);
	return status;
}

/* ---- the descriptor ------------------------------------------------------------------ */

static const relay_machine_ops machine_ops = {
    .struct_size = sizeof(relay_machine_ops),
    .acquire = ms_acquire,
    .renew = ms_renew,
    .inspect = ms_inspect,
    .release = ms_release,
    .verify_destroyed = ms_verify_destroyed,
    .images = ms_images,
    .health = ms_health_op,
    .catalog = ms_catalog,
    .find_by_purpose = ms_find_by_purpose,
    .binding = ms_binding,
    .doctor = ms_doctor,
    .console_ops = &ms_console_ops,
};

/* ms_transport_exec fills a whole result; the caller's may be smaller
 * (relay/plugin.h R5): copy out within its size, free what did not fit. */
static relay_status ms_t_exec(relay_plugin_state *state, relay_transport_conn *conn,
                              const relay_exec_request *req, relay_call *call, unsigned flags,
                              relay_exec_result *res, relay_error *err)
{
	relay_exec_result full = {.struct_size = sizeof full};
	relay_status status = ms_transport_exec(state, conn, req, call, flags, &full, err);
	relay_exec_result_deliver(((ms_state *)state)->host, res, &full);
	return status;
}

static const relay_transport_ops transport_ops = {
    .struct_size = sizeof(relay_transport_ops),
    /* One operation per machine at a time; the core verifies hashes; the
     * service answers stdout and stderr as one "output", and its exec has
     * no cancellation (a cancelled call drops the request, the command runs
     * on: spec/machine-service.md §3.7). */
    .traits = RELAY_TRANSPORT_MERGED_OUTPUT | RELAY_TRANSPORT_EXEC_UNCANCELLABLE,
    .open = ms_transport_open,
    .close = ms_transport_close,
    .exec = ms_t_exec,
    .push = ms_transport_push,
    .pull = ms_transport_pull,
};

static const relay_plugin_descriptor descriptor = {
    .abi_version = RELAY_ABI_VERSION,
    .struct_size = sizeof(relay_plugin_descriptor),
    .name = MS_PLUGIN_NAME,
    .version = MS_PLUGIN_VERSION,
    .description = "guests leased from the loopback machine-service (HTTP), with its exec, push and pull",
    .kinds = RELAY_KIND_MACHINE | RELAY_KIND_TRANSPORT,
    .capabilities = 0,
    .init = ms_init,
    .fini = ms_fini,
    .machine = &machine_ops,
    .machine_ops_size = sizeof(relay_machine_ops),
    .transport = &transport_ops,
    .transport_ops_size = sizeof(relay_transport_ops),
};

RELAY_PLUGIN_DEFINE_ENTRY(descriptor)
