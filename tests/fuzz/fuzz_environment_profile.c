/*
 * Environment profiles (profile/environment.c, spec/machine-service.md §7): the
 * input is the file VM_ENVIRONMENT_FILE selects.
 *
 * Invariants: a refusal says what is wrong; an accepted profile has an id,
 * a 64-hex fingerprint that a second load of the same bytes reproduces,
 * and its identity, canonical form and bundle are objects.
 */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "profile/environment.h"
#include "util/jsonx.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/environment.json", fuzz_scratch_dir());
	if (fuzz_write_file(path, data, size) != 0)
		fuzz_fail("cannot write %s", path);
	relay_environment *env = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = environment_load(path, &env, &err);
	if (st != RELAY_OK) {
		if (env != NULL)
			fuzz_fail("a refused profile was returned");
		if (err.message[0] == '\0')
			fuzz_fail("a refusal gave no message");
	} else {
		const char *fp = environment_fingerprint(env);
		if (environment_id(env) == NULL || fp == NULL || strlen(fp) != 64)
			fuzz_fail("an accepted profile lacks its id or fingerprint");
		relay_environment *again = NULL;
		if (environment_load(path, &again, &err) != RELAY_OK ||
		    strcmp(environment_fingerprint(again), fp) != 0)
			fuzz_fail("a second load of the same profile differs");
		environment_free(again);
		json_object *parts[3] = {environment_identity(env), environment_canonical(env),
		                         environment_bundle(env)};
		for (int i = 0; i < 3; i++) {
			if (!json_object_is_type(parts[i], json_type_object))
				fuzz_fail("an accepted profile's derived object %d is not an object", i);
			json_object_put(parts[i]);
		}
		(void)environment_plugin_for(env, "machine");
		(void)environment_value(env, "machctlPath");
		environment_free(env);
	}
	json_object *parsed = jsonx_parse((const char *)data, size, NULL, NULL, 0);
	if (parsed != NULL)
		(void)environment_json_has_duplicate_keys((const char *)data, size);
	json_object_put(parsed);
	return 0;
}
