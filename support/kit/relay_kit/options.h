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
 *     options.<key> must be a whole number from <lo> to <hi> (default <d>)
 *
 * where the default is what *number held before the parse. `where`, when
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
/* A key's own parser (its state in spec->ctx): RELAY_OK, or the refusal in
 * err (host->error_set). */
typedef relay_status (*rk_option_fn)(const struct rk_options *spec, const char *key, json_object *value,
                                     relay_error *err);

typedef struct rk_option {
	const char *key;
	rk_option_fn parse; /* NULL: a whole number from lo to hi into *number */
	int64_t lo, hi;
	int64_t *number;
} rk_option;

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
/* A screen "WIDTHxHEIGHTxDEPTH" (64..8192 pixels, depth 16, 24 or 32),
 * written back normalised into out. */
relay_status rk_option_screen(const rk_options *spec, const char *key, json_object *value, char *out,
                              size_t size, relay_error *err);

#endif
