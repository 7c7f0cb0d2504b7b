/*
 * machine-service replies (plugins/machine-service/, spec/machine-service.md)
 * and its options (§11): the real plugin, compiled in, with the host's
 * http_request replaced by one that answers from the input.
 *
 * Input: the first byte picks what is fuzzed.
 *   - 0xff: the rest is the plugin's "options" object (MCP_RELAY_MACHINE_
 *     SERVICE_OPTIONS as the core hands it over) and init() runs on it;
 *   - otherwise byte % 9 picks a machine operation (inspect, renew,
 *     release, verify_destroyed, images, catalog, find_by_purpose, acquire,
 *     health) and the rest is the service's replies, in the order the
 *     plugin asks, separated by lines "----": each is "<HTTP status>\n<body>"
 *     (a first line that is not a number means 200 and all of it is the
 *     body). When they run out, the service no longer answers (connection
 *     refused).
 * Invariants: an operation either succeeds with JSON the core can parse or
 * fails with a message; init either accepts the options or names the bad
 * one. (Transport operations are left out: they retry with sleeps.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "loader/loader.h"
#include "relay/plugin.h"
#include "util/jsonx.h"

#include "fuzz.h"

const relay_plugin_descriptor *relay_plugin_entry_v1(uint32_t host_abi_version);

/* The replies of the current input; the fuzzing thread only (the plugin
 * makes its requests on the calling thread). */
static const char *reply_at;
static const char *reply_end;
static unsigned requests;

static const relay_host *real_host;

static relay_status fake_http(const relay_http_request *req, relay_call *call, unsigned flags,
                              relay_http_response *resp, relay_error *err)
{
	(void)call;
	(void)flags;
	if (req == NULL || req->url == NULL || strncmp(req->url, "http://127.0.0.1:6240/", 22) != 0)
		fuzz_fail("the plugin asked for another origin: %s", req && req->url ? req->url : "(null)");
	resp->status = 0;
	resp->body = NULL;
	resp->body_len = 0;
	resp->answered = 0;
	if (++requests > 64 || reply_at == NULL || reply_at >= reply_end)
		return real_host->error_set(err, RELAY_E_TRANSIENT, ECONNREFUSED,
		                            "cannot connect to 127.0.0.1:6240: Connection refused");
	const char *start = reply_at;
	const char *stop = reply_end;
	for (const char *p = start; p + 6 <= reply_end; p++) {
		if (memcmp(p, "\n----\n", 6) == 0) {
			stop = p;
			break;
		}
	}
	reply_at = stop < reply_end ? stop + 6 : reply_end;
	long status = 200;
	const char *body = start;
	const char *nl = memchr(start, '\n', (size_t)(stop - start));
	if (nl && nl > start && nl - start <= 3) {
		long v = 0;
		const char *d = start;
		for (; d < nl && *d >= '0' && *d <= '9'; d++)
			v = v * 10 + (*d - '0');
		if (d == nl) {
			status = v;
			body = nl + 1;
		}
	}
	size_t len = (size_t)(stop - body);
	size_t cap = req->max_body_bytes ? req->max_body_bytes : (4u << 20);
	if (status >= 200 && status < 300 && len > cap)
		return real_host->error_set(err, RELAY_E_TOO_LARGE, 0, "the body is over %zu bytes", cap);
	resp->body = real_host->alloc(len + 1);
	if (resp->body == NULL)
		return real_host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	memcpy(resp->body, body, len);
	resp->body[len] = '\0';
	resp->body_len = len;
	resp->status = status;
	resp->answered = 1;
	return RELAY_OK;
}

static relay_host fake_host;
static const relay_plugin_descriptor *plugin;
static relay_plugin_state *state;
static char config_prefix[4400];

static void setup(void)
{
	real_host = loader_host_table();
	fake_host = *real_host;
	fake_host.http_request = fake_http;
	plugin = relay_plugin_entry_v1(RELAY_ABI_VERSION);
	if (plugin == NULL || plugin->init == NULL)
		fuzz_fail("no machine-service descriptor");
	snprintf(config_prefix, sizeof config_prefix,
	         "{\"stateDir\":\"%s\",\"libexecDir\":\"/nonexistent\",\"guestNetwork\":\"nat\","
	         "\"serviceUrl\":\"http://127.0.0.1:6240\",\"environment\":null,\"exportedEnvironment\":null,"
	         "\"options\":",
	         fuzz_scratch_dir());
	char config[4600];
	snprintf(config, sizeof config, "%s{\"destructionCheck\":\"service\"}}", config_prefix);
	relay_error err;
	memset(&err, 0, sizeof err);
	if (plugin->init(&fake_host, config, 0, &state, &err) != RELAY_OK)
		fuzz_fail("machine-service init failed: %s", err.message);
}

static void check_json_out(relay_status st, char *out, const relay_error *err, const char *op)
{
	if (st == RELAY_OK) {
		if (out != NULL) {
			json_object *v = jsonx_parse_str(out, NULL, 0);
			if (v == NULL)
				fuzz_fail("%s answered text that is not JSON: %.200s", op, out);
			json_object_put(v);
		}
	} else if (err->message[0] == '\0') {
		fuzz_fail("%s failed (status %d) without a message", op, (int)st);
	}
	real_host->free(out);
}

static void fuzz_options(const uint8_t *data, size_t size)
{
	char *config = fuzz_wrap(config_prefix, data, size, "}");
	relay_plugin_state *s = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	reply_at = reply_end = NULL;
	relay_status st = plugin->init(&fake_host, config, 0, &s, &err);
	if (st == RELAY_OK)
		plugin->fini(s);
	else if (err.message[0] == '\0')
		fuzz_fail("init refused the options without a message");
	free(config);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (plugin == NULL)
		setup();
	if (size < 1)
		return 0;
	if (data[0] == 0xff) {
		fuzz_options(data + 1, size - 1);
		return 0;
	}
	reply_at = (const char *)data + 1;
	reply_end = (const char *)data + size;
	requests = 0;
	const relay_machine_ops *m = plugin->machine;
	static const char lease[] =
	    "{\"vm\":\"vm-1\",\"purpose\":\"relay-t-1\",\"lease_id\":\"l-1\",\"image\":\"img\"}";
	static const char spec[] =
	    "{\"guest\":\"t-1\",\"task\":\"t\",\"purpose\":\"relay-t-1\",\"image\":\"img\","
	    "\"env\":\"none\",\"network\":\"nat\",\"vnc\":false,\"ttlMs\":900000,"
	    "\"deadlineMs\":4102444800000}";
	char *out = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st;
	switch (data[0] % 9) {
	case 0:
		st = m->inspect(state, lease, NULL, 0, &out, &err);
		check_json_out(st, out, &err, "inspect");
		break;
	case 1:
		st = m->renew(state, lease, 60000, NULL, 0, &out, &err);
		check_json_out(st, out, &err, "renew");
		break;
	case 2:
		st = m->release(state, lease, "released", NULL, 0, &err);
		check_json_out(st, NULL, &err, "release");
		break;
	case 3:
		st = m->verify_destroyed(state, lease, NULL, 0, &out, &err);
		check_json_out(st, NULL, &err, "verify_destroyed"); /* out: a check's name, not JSON */
		real_host->free(out);
		break;
	case 4:
		st = m->images(state, NULL, 0, &out, &err);
		check_json_out(st, out, &err, "images");
		break;
	case 5:
		st = m->catalog(state, NULL, 0, &out, &err);
		check_json_out(st, out, &err, "catalog");
		break;
	case 6:
		st = m->find_by_purpose(state, "relay-t-1", NULL, 0, &out, &err);
		check_json_out(st, out, &err, "find_by_purpose");
		break;
	case 7:
		st = m->acquire(state, spec, NULL, 0, &out, &err);
		check_json_out(st, out, &err, "acquire");
		break;
	default:
		st = m->health(state, NULL, 0, &out, &err);
		check_json_out(st, out, &err, "health");
		break;
	}
	return 0;
}
