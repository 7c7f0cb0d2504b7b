/*
 * relay_support/json_get.h — the one family of typed JSON getters (json-c),
 * for the core (util/jsonx.c builds jsonx_get_* on it) and every plugin or
 * fake that reads JSON.
 *
 * Header-only, not part of the libc-only support library: it needs json-c,
 * which the guest programs cannot have, and each function is a few lines, so
 * every user compiles its own static copy and nothing is exported (target
 * relay_support_json adds this folder and json-c).
 *
 * A getter returns the member `key` of the object `obj` only when it has the
 * asked type; NULL obj, a non-object, a missing key and another type are all
 * "absent" (NULL / false, *out untouched). Returned objects and strings are
 * borrowed from obj.
 */
#ifndef RELAY_SUPPORT_JSON_GET_H
#define RELAY_SUPPORT_JSON_GET_H

#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The member `key` when it has type `type`, else NULL. */
static inline json_object *rsj_get_typed(const json_object *obj, const char *key, json_type type)
{
	json_object *value = NULL;
	if (obj == NULL || !json_object_is_type(obj, json_type_object) ||
	    !json_object_object_get_ex(obj, key, &value) || !json_object_is_type(value, type))
		return NULL;
	return value;
}

static inline const char *rsj_get_str(const json_object *obj, const char *key)
{
	json_object *value = rsj_get_typed(obj, key, json_type_string);
	return value ? json_object_get_string(value) : NULL;
}

/* An integer, or a double that holds an integer exactly (|d| <= 2^53). */
static inline bool rsj_get_int(const json_object *obj, const char *key, int64_t *out)
{
	json_object *value = rsj_get_typed(obj, key, json_type_int);
	if (value == NULL) {
		double d;
		value = rsj_get_typed(obj, key, json_type_double);
		if (value == NULL)
			return false;
		d = json_object_get_double(value);
		if (d != floor(d) || fabs(d) > 9007199254740992.0)
			return false;
		*out = (int64_t)d;
		return true;
	}
	*out = json_object_get_int64(value);
	return true;
}

/* A number (integer or double) that is finite. */
static inline bool rsj_get_double(const json_object *obj, const char *key, double *out)
{
	double d;
	json_object *value = rsj_get_typed(obj, key, json_type_double);
	if (value == NULL)
		value = rsj_get_typed(obj, key, json_type_int);
	if (value == NULL)
		return false;
	d = json_object_get_double(value);
	if (!isfinite(d))
		return false;
	*out = d;
	return true;
}

static inline bool rsj_get_bool(const json_object *obj, const char *key, bool *out)
{
	json_object *value = rsj_get_typed(obj, key, json_type_boolean);
	if (value == NULL)
		return false;
	*out = json_object_get_boolean(value);
	return true;
}

static inline json_object *rsj_get_obj(const json_object *obj, const char *key)
{
	return rsj_get_typed(obj, key, json_type_object);
}

static inline json_object *rsj_get_array(const json_object *obj, const char *key)
{
	return rsj_get_typed(obj, key, json_type_array);
}

/* The same getters with a fallback for an absent or mistyped member. */
static inline int64_t rsj_int_or(const json_object *obj, const char *key, int64_t fallback)
{
	int64_t value;
	return rsj_get_int(obj, key, &value) ? value : fallback;
}

static inline bool rsj_bool_or(const json_object *obj, const char *key, bool fallback)
{
	bool value;
	return rsj_get_bool(obj, key, &value) ? value : fallback;
}

#endif
