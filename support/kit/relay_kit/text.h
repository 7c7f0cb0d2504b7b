/*
 * relay_kit/text.h — text a plugin hands back: JSON for the host, and
 * messages and paths whose truncation is acceptable.
 */
#ifndef RELAY_KIT_TEXT_H
#define RELAY_KIT_TEXT_H

#include <json-c/json.h>
#include <stddef.h>

#include "relay/host.h"

/* snprintf for messages and paths whose truncation is acceptable. */
void rk_textf(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* obj as plain JSON text (no escaped slashes), allocated by the host
 * (host->strdup: free with host->free); NULL when out of memory. */
char *rk_json_text(const relay_host *host, json_object *obj);

/* text parsed when it is a JSON object (owned by the caller: json_object_put);
 * NULL when it is NULL, not JSON, or another type. */
json_object *rk_json_object(const char *text);

/* The first line of a small file, without its newline, cut to fit out
 * ("" when it cannot be read). */
void rk_read_line(const char *path, char *out, size_t size);

#endif
