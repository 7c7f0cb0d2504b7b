/*
 * relay_kit/options.h — a plugin's options (the "options" object of its
 * init config) read through one table: each key names its parser, or a
 * range for a whole number. Every key of the object must be in the table;
 * one that is not is refused with the kit's one wording,
 *
 *     unknown <plugin> option <key>; accepted: <key>, <key>, ...
 *
 * (the table's keys in its order), and a whole number out of range with
 *
 *     <plugin>: options.<key> must be a whole number from <lo> to <hi> (default <d>)
 *
 * where the default is what the destination held before the parse; every
 * refusal the kit words names the plugin. `where`, when
 * set, is added to every refusal the kit words ("; fix it in <where>").
 * Keys are read in the object's order; the first refusal stops the parse.
 */
#ifndef RELAY_KIT_OPTIONS_H
#define RELAY_KIT_OPTIONS_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/host.h"

struct rk_options;
struct rk_option;
/* A key's own parser (the plugin's state in spec->ctx, the entry's in
 * opt->dest): RELAY_OK, or the refusal in err (host->error_set). */
typedef relay_status (*rk_option_fn)(const struct rk_options *spec, const struct rk_option *opt,
                                     json_object *value, relay_error *err);

typedef struct rk_option {
	const char *key;
	rk_option_fn parse; /* NULL: a whole number from lo to hi into *(int64_t *)dest */
	int64_t lo, hi;
	void *dest;
} rk_option;

/* The options every machine plugin has: the lease times (milliseconds, up
 * to 30 days; the reaper's interval at least 100 ms), the display ("auto"
 * or "off", into a bool) and its screen (into char[RK_SCREEN_BYTES]). */
#define RK_SCREEN_BYTES 32
#define RK_MONTH_MS     (30LL * 24 * 3600 * 1000)
#define RK_OPTIONS_LEASE_TIMES(grace_ms, backstop_ms, reaper_interval_ms)                                    \
	{"graceMs", NULL, 0, RK_MONTH_MS, (grace_ms)}, {"backstopMs", NULL, 0, RK_MONTH_MS, (backstop_ms)},  \
	{                                                                                                    \
		"reaperIntervalMs", NULL, 100, RK_MONTH_MS, (reaper_interval_ms)                             \
	}
#define RK_OPTIONS_DISPLAY(enabled, screen)                                                                  \
	{"display", rk_option_display, 0, 0, (enabled)},                                                     \
	{                                                                                                    \
		"screen", rk_option_screen, 0, 0, (screen)                                                   \
	}
relay_status rk_option_display(const struct rk_options *spec, const struct rk_option *opt, json_object *value,
                               relay_error *err);
relay_status rk_option_screen(const struct rk_options *spec, const struct rk_option *opt, json_object *value,
                              relay_error *err);

typedef struct rk_options {
	const relay_host *host;
	const char *plugin; /* in "unknown <plugin> option" */
	const char *where;  /* NULL, or where a deployment sets the options */
	const rk_option *table;
	size_t count;
	void *ctx; /* the parsers' state */
} rk_options;

/* Reads `options` (NULL: nothing to read) through the table. Not an
 * object: RELAY_E_INVALID_ARGUMENT "<plugin> options must be a JSON object". */
relay_status rk_options_parse(const rk_options *spec, json_object *options, relay_error *err);

/* The whole number `value` from lo to hi into *out, refused in the kit's
 * wording (default: *out's value before) otherwise; for parsers that read
 * a number inside a larger value. */
relay_status rk_option_number(const rk_options *spec, const char *key, json_object *value, int64_t lo,
                              int64_t hi, int64_t *out, relay_error *err);

/* A string of `choices` (NULL-terminated): its index in *index_out;
 * refused as "options.<key> must be a, b or c" otherwise. */
relay_status rk_option_choice(const rk_options *spec, const char *key, json_object *value,
                              const char *const *choices, int *index_out, relay_error *err);

#endif
