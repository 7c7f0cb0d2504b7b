/*
 * ms_util.h — small helpers of the machine-service plugin: a growable
 * buffer, strict JSON parsing and compact serialisation, copies owned by the
 * host allocator, environments for child processes, and local folder work
 * (fresh 0700 folders, tree checks, moves, removal).
 *
 * The plugin reaches the core only through relay_host (relay/host.h), so it
 * carries these few helpers itself instead of linking core/src/util.
 */
#ifndef MS_UTIL_H
#define MS_UTIL_H

#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/host.h"

#include "relay_support/json_get.h"

/* A growable NUL-terminated buffer; `failed` is sticky after an allocation
 * failure. */
typedef struct ms_buf {
	char *data;
	size_t len;
	size_t cap;
	bool failed;
} ms_buf;

#define MS_BUF_INIT                                                                                          \
	{                                                                                                    \
		NULL, 0, 0, false                                                                            \
	}

void ms_buf_append(ms_buf *b, const char *data, size_t len);
void ms_buf_puts(ms_buf *b, const char *text);
void ms_buf_printf(ms_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The contents ("" when empty); borrowed. */
const char *ms_buf_str(const ms_buf *b);
void ms_buf_free(ms_buf *b);

/* Parses exactly one JSON value (strict; trailing text refused). A new
 * reference or NULL; `why` (may be NULL) receives a one-line reason. */
json_object *ms_json_parse(const char *text, size_t len, char *why, size_t why_len);
/* Compact JSON, "/" unescaped, as an owned copy from host->alloc, or NULL. */
char *ms_json_owned(const relay_host *host, const json_object *obj);
/* Compact JSON into a malloc'd string (free()), or NULL. */
char *ms_json_text(const json_object *obj);

/* Typed getters: rsj_get_* of relay_support/json_get.h. */
/* True when the key is present with a JSON null (json-c stores NULL). */
bool ms_json_is_null(const json_object *obj, const char *key);
/* A double with a short, stable text form ("0.25", not 0.2500000001). */
json_object *ms_json_number(double value);

/* True when `text` matches ^[a-zA-Z0-9][a-zA-Z0-9._-]*$ (machine names). */
bool ms_valid_machine_name(const char *text);

/* The first `max` bytes of text, cut on a UTF-8 boundary, malloc'd. */
char *ms_cut_utf8(const char *text, size_t max);

/* A NULL-terminated environment for a child: the process's own environ
 * with every "K=V" of `overrides` (NULL-terminated, may be NULL) replacing
 * or adding K. Free with ms_env_free. NULL on allocation failure. */
char **ms_env_build(const char *const *overrides);
void ms_env_free(char **env);

/* Runs `argv` (no stdin) in the environment ms_env_build(overrides), killed
 * after `timeout_ms`, each stream captured up to `max_output_bytes`: what
 * host->process_run answers, with `res` always set up (free res->out and
 * res->err with host->free) and `err` cleared first. */
relay_status ms_run(const relay_host *host, const char *const *argv, const char *const *overrides,
                    uint64_t timeout_ms, size_t max_output_bytes, relay_call *call, relay_process_result *res,
                    relay_error *err);

/* Creates a fresh folder "<parent>/<prefix>-<16 hex>" with mode 0700 (the
 * parent is created 0700 when missing). malloc'd path, or NULL with errno. */
char *ms_fresh_dir(const relay_host *host, const char *parent, const char *prefix);

/* Checks a tree the service wrote: only regular files and folders, no
 * links or special files, at most `max_depth` levels. 0, or -1 with the
 * offending path in `why`. */
int ms_check_tree(const char *path, int max_depth, char *why, size_t why_len);

/* Moves a checked file or tree from `src` to `dst` (which must not exist):
 * rename(2) when possible, else a copy (files O_EXCL|O_NOFOLLOW 0600,
 * folders 0700) followed by removal of `src`. Modes end 0600 / 0700. 0, or
 * -1 with errno and a reason in `why`. */
int ms_move_tree(const char *src, const char *dst, char *why, size_t why_len);

/* The parent folder of a guest path ("/" for "/x"), malloc'd. */
char *ms_dirname(const char *path);

#endif
