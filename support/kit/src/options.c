/* options.c — table-driven plugin options (relay_kit/options.h). */
#include "relay_kit/options.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "relay_kit/buf.h"

static const char *fix_it(const rk_options *spec, char *out, size_t size)
{
	if (spec->where == NULL)
		return "";
	snprintf(out, size, "; fix it in %s", spec->where);
	return out;
}

relay_status rk_option_number(const rk_options *spec, const char *key, json_object *value, int64_t lo,
                              int64_t hi, int64_t *out, relay_error *err)
{
	int64_t n = json_object_is_type(value, json_type_int) ? json_object_get_int64(value) : lo - 1;
	if (!json_object_is_type(value, json_type_int) || n < lo || n > hi) {
		char where[160];
		return spec->host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: options.%s must be a whole number from %lld to %lld (default "
		    "%lld)%s",
		    spec->plugin, key, (long long)lo, (long long)hi, (long long)*out,
		    fix_it(spec, where, sizeof where));
	}
	*out = n;
	return RELAY_OK;
}

relay_status rk_option_choice(const rk_options *spec, const char *key, json_object *value,
                              const char *const *choices, int *index_out, relay_error *err)
{
	const char *text = json_object_is_type(value, json_type_string) ? json_object_get_string(value) : "";
	size_t count = 0;
	for (; choices[count]; count++)
		if (strcmp(text, choices[count]) == 0) {
			*index_out = (int)count;
			return RELAY_OK;
		}
	rk_buf list = RK_BUF_INIT;
	for (size_t i = 0; i < count; i++)
		rk_buf_printf(&list, "%s%s", i == 0 ? "" : i + 1 == count ? " or " : ", ", choices[i]);
	char where[160];
	relay_status s =
	    spec->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s: options.%s must be %s%s",
	                          spec->plugin, key, rk_buf_str(&list), fix_it(spec, where, sizeof where));
	rk_buf_free(&list);
	return s;
}

relay_status rk_option_display(const rk_options *spec, const rk_option *opt, json_object *value,
                               relay_error *err)
{
	static const char *const modes[] = {"auto", "off", NULL};
	int i = 0;
	relay_status s = rk_option_choice(spec, opt->key, value, modes, &i, err);
	if (s == RELAY_OK)
		*(bool *)opt->dest = i == 0;
	return s;
}

/* A screen "WIDTHxHEIGHTxDEPTH" (64..8192 pixels, depth 16, 24 or 32),
 * written back normalised. */
relay_status rk_option_screen(const rk_options *spec, const rk_option *opt, json_object *value,
                              relay_error *err)
{
	const char *key = opt->key;
	const char *text = json_object_is_type(value, json_type_string) ? json_object_get_string(value) : "";
	unsigned w = 0, h = 0, d = 0;
	char tail = 0;
	if (sscanf(text, "%ux%ux%u%c", &w, &h, &d, &tail) != 3 || w < 64 || h < 64 || w > 8192 || h > 8192 ||
	    (d != 16 && d != 24 && d != 32)) {
		char where[160];
		return spec->host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "%s: options.%s must look like 1280x800x24 (depth 16, 24 or 32)%s", spec->plugin, key,
		    fix_it(spec, where, sizeof where));
	}
	snprintf(opt->dest, RK_SCREEN_BYTES, "%ux%ux%u", w, h, d);
	return RELAY_OK;
}

static relay_status unknown(const rk_options *spec, const char *key, relay_error *err)
{
	rk_buf accepted = RK_BUF_INIT;
	for (size_t i = 0; i < spec->count; i++)
		rk_buf_printf(&accepted, "%s%s", i ? ", " : "", spec->table[i].key);
	char where[160];
	relay_status s = spec->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
	                                       "unknown %s option %s; accepted: %s%s", spec->plugin, key,
	                                       rk_buf_str(&accepted), fix_it(spec, where, sizeof where));
	rk_buf_free(&accepted);
	return s;
}

relay_status rk_options_parse(const rk_options *spec, json_object *options, relay_error *err)
{
	if (options == NULL)
		return RELAY_OK;
	if (!json_object_is_type(options, json_type_object)) {
		char where[160];
		return spec->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                             "%s options must be a JSON object%s", spec->plugin,
		                             fix_it(spec, where, sizeof where));
	}
	json_object_object_foreach(options, key, value)
	{
		const rk_option *opt = NULL;
		for (size_t i = 0; i < spec->count && opt == NULL; i++)
			if (strcmp(spec->table[i].key, key) == 0)
				opt = &spec->table[i];
		if (opt == NULL)
			return unknown(spec, key, err);
		relay_status s = opt->parse
		                     ? opt->parse(spec, opt, value, err)
		                     : rk_option_number(spec, key, value, opt->lo, opt->hi, opt->dest, err);
		if (s != RELAY_OK)
			return s;
	}
	return RELAY_OK;
}
