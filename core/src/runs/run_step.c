/* Step derivation of a recorded run (spec/guest.md §10, §14); see run_request.h
 * and run_internal.h. */
#include "runs/run_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runs/run_internal.h"
#include "runs/run_state.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* A malloc'd copy of text cut to at most max_chars code points. */
static char *cut_chars(const char *text, size_t len, size_t max_chars)
{
	size_t i = 0, chars = 0;
	while (i < len && chars < max_chars) {
		unsigned char c = (unsigned char)text[i];
		size_t step = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
		if (i + step > len)
			break;
		i += step;
		chars++;
	}
	char *out = malloc(i + 1);
	if (out) {
		memcpy(out, text, i);
		out[i] = '\0';
	}
	return out;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

char *run_derive_title(const run_call *c)
{
	strbuf sb = STRBUF_INIT;
	if (!c->is_inline) {
		strbuf_printf(&sb, "script %s", fs_basename(c->local_path ? c->local_path : "script"));
	} else if (strcmp(c->language, "shell") == 0) {
		strbuf_puts(&sb, "shell");
		const char *p = c->script, *end = c->script + c->script_len;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			const char *le = nl ? nl : end;
			const char *a = p, *b = le;
			while (a < b && is_space(*a))
				a++;
			while (b > a && is_space(b[-1]))
				b--;
			if (b > a && !(b - a >= 2 && a[0] == '#' && a[1] == '!')) {
				strbuf_putc(&sb, ' ');
				strbuf_append(&sb, a, (size_t)(b - a));
				break;
			}
			p = nl ? nl + 1 : end;
		}
	} else {
		strbuf_printf(&sb, "code (%s)", c->language);
	}
	char *full = strbuf_detach(&sb, NULL);
	if (full == NULL)
		return NULL;
	size_t clean_len = 0;
	char *clean = utf8_sanitize(full, strlen(full), &clean_len);
	free(full);
	if (clean == NULL)
		return NULL;
	char *title = cut_chars(clean, clean_len, RUN_TITLE_MAX_CHARS);
	free(clean);
	return title;
}

char *run_derive_because(const run_call *c, const char *title)
{
	strbuf sb = STRBUF_INIT;
	if (c->reason)
		strbuf_puts(&sb, c->reason);
	else
		strbuf_printf(&sb, "Relay %s (no reason given)", title);
	char *full = strbuf_detach(&sb, NULL);
	if (full == NULL)
		return NULL;
	char *out = cut_chars(full, strlen(full), RUN_BECAUSE_MAX_CHARS);
	free(full);
	return out;
}

json_object *run_derive_step(session_manager *m, guest *g, const run_call *c, const char *title,
                             int64_t *run_seq_out)
{
	const char *given_id = c->step ? jsonx_get_str(c->step, "id") : NULL;
	char id[160];
	slice_lock(g->run);
	int64_t seq = g->run->run_seq;
	for (;;) {
		seq++;
		if (given_id) {
			snprintf(id, sizeof id, "%s", given_id);
			break;
		}
		snprintf(id, sizeof id, "%s-%lld", c->language, (long long)seq);
		bool used = false;
		size_t n = json_object_array_length(g->run->used_step_ids);
		for (size_t i = 0; i < n && !used; i++) {
			const char *s =
			    json_object_get_string(json_object_array_get_idx(g->run->used_step_ids, i));
			used = s && strcmp(s, id) == 0;
		}
		if (!used)
			break;
	}
	g->run->run_seq = seq;
	slice_unlock(g->run);
	guest_persist(m, g);
	*run_seq_out = seq;
	json_object *step = json_object_new_object();
	jsonx_add_str(step, "id", id);
	const char *t = c->step ? jsonx_get_str(c->step, "title") : NULL;
	jsonx_add_str(step, "title", t ? t : title);
	const char *e = c->step ? jsonx_get_str(c->step, "expected") : NULL;
	jsonx_add_str(step, "expected", e ? e : "Exits with status 0");
	const char *im = c->step ? jsonx_get_str(c->step, "inputMode") : NULL;
	jsonx_add_str(step, "inputMode", im ? im : "ordinary");
	return step;
}

static int64_t number_ms(json_object *obj, const char *key, int64_t fallback)
{
	double d = 0;
	if (obj && jsonx_get_double(obj, key, &d))
		return (int64_t)(d + 0.5);
	return fallback;
}

json_object *run_snapshot_block(const run_call *c, int64_t *after_ms_out, const char **phase_out)
{
	json_object *group = c->snapshots ? jsonx_get_obj(c->snapshots, "group") : NULL;
	const char *phase = group ? jsonx_get_str(group, "phase") : NULL;
	*phase_out = phase;
	json_object *s = json_object_new_object();
	if (phase == NULL || strcmp(phase, "last") == 0) {
		int64_t after = number_ms(c->snapshots, "afterIntervalMs", RUN_DEFAULT_AFTER_MS);
		if (group && jsonx_has(group, "afterIntervalMs"))
			after = number_ms(group, "afterIntervalMs", after);
		jsonx_add_int(s, "afterIntervalMs", after);
		*after_ms_out = after;
	} else {
		jsonx_add_null(s, "afterIntervalMs");
		*after_ms_out = 0;
	}
	if (group) {
		json_object *g = json_object_new_object();
		jsonx_add_str(g, "groupId", jsonx_get_str(group, "groupId"));
		jsonx_add_str(g, "phase", phase);
		jsonx_add(s, "group", g);
	} else {
		jsonx_add_null(s, "group");
	}
	return s;
}
