/*
 * Rendering a tool_result as a CallToolResult (spec/tools.md §2.3, §5; spec/mcp.md §7):
 * the text block with its headline and bounded pretty JSON, the spill file,
 * structuredContent (whole, reduced or minimal), the image block, isError
 * and the modern-era fields.
 */
#include "mcp/render.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"

#define REDUCED_STRING_MAX_BYTES 4096
#define REDUCED_ARRAY_MAX_ITEMS  50
#define ELLIPSIS                 "\xe2\x80\xa6"

/* Set once at startup before threads run; read-only afterwards. */
static char *fallback_spill_dir;

void render_set_fallback_spill_dir(const char *dir)
{
	free(fallback_spill_dir);
	fallback_spill_dir = dir ? strdup(dir) : NULL;
}

void render_modern_fields(strbuf *sb)
{
	strbuf_puts(sb, ",\"resultType\":\"complete\",\"_meta\":{\"io.modelcontextprotocol/serverInfo\":"
	                "{\"name\":\"relay\",\"version\":\"" RELAY_VERSION "\"}}");
}

/* ---- spill files -------------------------------------------------------------- */

/* Opens `dir` (created 0700 when missing) as a folder we may write spill
 * files into: a real directory, not a link, owned by us, closed to group and
 * others. Returns an O_DIRECTORY descriptor or -1. */
static int open_spill_dir(const char *dir)
{
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return -1;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		close(fd);
		return -1;
	}
	if ((st.st_mode & 077) != 0 && fchmod(fd, 0700) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

const char *render_spill_base(char *buf, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	struct stat st;
	if (tmp == NULL || tmp[0] != '/' || stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
		tmp = "/tmp";
	size_t tmp_len = strlen(tmp);
	while (tmp_len > 1 && tmp[tmp_len - 1] == '/')
		tmp_len--;
	snprintf(buf, len, "%.*s/mcp-relay-results", (int)tmp_len, tmp);
	return buf;
}

/* Writes the complete structuredContent to a new spill file (spec/tools.md §5.1
 * rule 5); returns its absolute path (malloc'd) or NULL. */
static char *write_spill(const json_object *structured)
{
	char base[4200];
	const char *dir = render_spill_base(base, sizeof base);
	int dir_fd = open_spill_dir(dir);
	if (dir_fd < 0) {
		log_warning(
		    "%s is not a private folder of this user; the spill file goes to the session folder",
		    dir);
		if (fallback_spill_dir == NULL || (dir_fd = open_spill_dir(fallback_spill_dir)) < 0) {
			log_error("no usable folder for a spill file (%s, %s)", dir,
			          fallback_spill_dir ? fallback_spill_dir : "no session folder");
			return NULL;
		}
		dir = fallback_spill_dir;
	}
	strbuf sb = STRBUF_INIT;
	jsonx_write(&sb, structured, JSONX_PRETTY);
	strbuf_putc(&sb, '\n');
	char *path = NULL;
	int fd = -1;
	if (!strbuf_ok(&sb))
		goto cleanup;
	for (int attempt = 0; attempt < 4 && fd < 0; attempt++) {
		char name[48];
		char uuid[37];
		random_uuid(uuid);
		snprintf(name, sizeof name, "%s.json", uuid);
		fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0) {
			path = malloc(strlen(dir) + strlen(name) + 2);
			if (path)
				sprintf(path, "%s/%s", dir, name);
		} else if (errno != EEXIST) {
			break;
		}
	}
	if (fd < 0 || path == NULL)
		goto cleanup;
	size_t off = 0;
	while (off < sb.len) {
		ssize_t n = write(fd, sb.data + off, sb.len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	if (off < sb.len) {
		log_error("cannot write the spill file %s: %s", path, strerror(errno));
		free(path);
		path = NULL;
	}
cleanup:
	if (fd >= 0)
		close(fd);
	close(dir_fd);
	strbuf_free(&sb);
	if (path == NULL)
		log_error("a result was cut but its spill file could not be written in %s", dir);
	return path;
}

/* ---- structuredContent reduction (spec/tools.md §5.2) ------------------------------ */

/* A copy with long strings cut and long arrays shortened; NULL for JSON null
 * or on allocation failure (*failed is then set). */
static json_object *reduce(const json_object *value, bool *failed)
{
	json_object *out = NULL;
	switch (json_object_get_type(value)) {
	case json_type_string: {
		const char *s = json_object_get_string((json_object *)value);
		size_t len = (size_t)json_object_get_string_len(value);
		if (len <= REDUCED_STRING_MAX_BYTES)
			return json_object_get((json_object *)value);
		size_t keep = utf8_cut(s, len, REDUCED_STRING_MAX_BYTES - (sizeof ELLIPSIS - 1));
		char *cut = malloc(keep + sizeof ELLIPSIS);
		if (cut != NULL) {
			memcpy(cut, s, keep);
			memcpy(cut + keep, ELLIPSIS, sizeof ELLIPSIS);
			out = json_object_new_string_len(cut, (int)(keep + sizeof ELLIPSIS - 1));
			free(cut);
		}
		break;
	}
	case json_type_array: {
		size_t n = json_object_array_length(value);
		out = json_object_new_array();
		for (size_t i = 0; out && i < n && i < REDUCED_ARRAY_MAX_ITEMS; i++)
			if (json_object_array_add(out, reduce(json_object_array_get_idx(value, i), failed)) !=
			    0)
				*failed = true;
		break;
	}
	case json_type_object: {
		out = json_object_new_object();
		if (out == NULL)
			break;
		json_object_object_foreach((json_object *)value, key, child)
		{
			if (json_object_object_add(out, key, reduce(child, failed)) != 0)
				*failed = true;
		}
		break;
	}
	case json_type_null: return NULL;
	default: return json_object_get((json_object *)value);
	}
	if (out == NULL)
		*failed = true;
	return out;
}

static bool is_scalar(const json_object *value)
{
	enum json_type t = json_object_get_type(value);
	return t == json_type_null || t == json_type_boolean || t == json_type_int || t == json_type_double ||
	       t == json_type_string;
}

static bool always_kept(const char *key)
{
	return strcmp(key, "guest") == 0 || strcmp(key, "error") == 0 || strcmp(key, "outcome") == 0 ||
	       strcmp(key, "imageDelivery") == 0;
}

typedef enum reduction { REDUCE_COPY, REDUCE_MINIMAL, REDUCE_LAST_RESORT } reduction;

/* The reduced structuredContent: "resultTruncated" and "fullResult" first,
 * then the fields `level` keeps. */
static json_object *reduced_structured(const json_object *structured, const char *spill_path, reduction level,
                                       bool *failed)
{
	json_object *out = json_object_new_object();
	if (out == NULL) {
		*failed = true;
		return NULL;
	}
	jsonx_add_bool(out, "resultTruncated", true);
	jsonx_add_str(out, "fullResult", spill_path);
	json_object_object_foreach((json_object *)structured, key, child)
	{
		if (strcmp(key, "resultTruncated") == 0 || strcmp(key, "fullResult") == 0)
			continue;
		if (level == REDUCE_MINIMAL && !is_scalar(child) && !always_kept(key))
			continue;
		if (level == REDUCE_LAST_RESORT && strcmp(key, "error") != 0 && strcmp(key, "guest") != 0)
			continue;
		if (json_object_object_add(out, key, reduce(child, failed)) != 0)
			*failed = true;
	}
	return out;
}

/* ---- the text block --------------------------------------------------------------- */

/* The headline as one line: line breaks become spaces. */
static void put_headline(strbuf *sb, const char *headline)
{
	size_t len = headline ? strlen(headline) : 0;
	if (len == 0 || strpbrk(headline, "\r\n") == NULL) {
		jsonx_write_escaped(sb, headline ? headline : "", len);
		return;
	}
	char *copy = strdup(headline);
	if (copy == NULL) {
		sb->failed = true;
		return;
	}
	for (char *c = copy; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
	jsonx_write_escaped(sb, copy, len);
	free(copy);
}

/* Appends the pretty JSON of `structured` without the top-level key `omit`. */
static void write_text_body(strbuf *sb, const json_object *structured, const char *omit)
{
	if (omit == NULL || !json_object_object_get_ex(structured, omit, NULL)) {
		jsonx_write(sb, structured, JSONX_PRETTY);
		return;
	}
	json_object *copy = json_object_new_object();
	if (copy == NULL) {
		sb->failed = true;
		return;
	}
	json_object_object_foreach((json_object *)structured, key, child)
	{
		if (strcmp(key, omit) != 0)
			json_object_object_add(copy, key, json_object_get(child));
	}
	jsonx_write(sb, copy, JSONX_PRETTY);
	json_object_put(copy);
}

size_t render_text_bound(const char *body, size_t len)
{
	size_t keep = len, lines = 1;
	const char *p = body, *end = body + len;
	while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		if (++lines > RENDER_TEXT_MAX_LINES) {
			keep = (size_t)(p - body);
			break;
		}
		p++;
	}
	if (keep > RENDER_TEXT_MAX_BYTES)
		keep = RENDER_TEXT_MAX_BYTES;
	return utf8_cut(body, len, keep);
}

/* ---- the result ------------------------------------------------------------------ */

/* structuredContent as it must be: an object, with `error` exactly when
 * isError (spec/tools.md §2.3). Returns a new reference. */
static json_object *checked_structured(const tool_result *result)
{
	json_object *s = result->structured;
	if (!json_object_is_type(s, json_type_object)) {
		log_error("a tool result's structuredContent is not an object; wrapping it");
		json_object *wrapped = json_object_new_object();
		if (wrapped)
			jsonx_add(wrapped, "result", json_object_get(s));
		s = wrapped;
	} else {
		json_object_get(s);
	}
	if (s && !result->is_error && json_object_object_get_ex(s, "error", NULL))
		log_warning("a successful tool result carries an error object (headline: %.200s)",
		            result->headline ? result->headline : "");
	if (s && result->is_error && !json_object_object_get_ex(s, "error", NULL)) {
		json_object *copy = json_object_new_object();
		if (copy) {
			json_object *error = json_object_new_object();
			jsonx_add_str(error, "code", "internal");
			jsonx_add_str(error, "message",
			              result->headline ? result->headline : "the tool failed");
			jsonx_add(copy, "error", error);
			json_object_object_foreach(s, key, child)
			    json_object_object_add(copy, key, json_object_get(child));
		}
		json_object_put(s);
		s = copy;
	}
	return s;
}

/* Appends the result object up to and including isError (no modern fields,
 * no closing brace). *spilled tells whether a spill file was written. */
static void render_body(strbuf *sb, const tool_result *result, bool *spilled)
{
	char *spill_path = NULL;
	bool spill_tried = false;
	bool failed = false;
	*spilled = false;
	json_object *structured = checked_structured(result);
	if (structured == NULL) {
		sb->failed = true;
		return;
	}

	/* The text block: the headline, then the bounded pretty JSON. */
	strbuf body = STRBUF_INIT;
	write_text_body(&body, structured, result->text_omits_key);
	if (!strbuf_ok(&body))
		failed = true;
	size_t keep = render_text_bound(strbuf_str(&body), body.len);
	bool text_cut = keep < body.len;
	if (text_cut) {
		spill_path = write_spill(structured);
		spill_tried = true;
		*spilled = true;
	}
	strbuf_puts(sb, "{\"content\":[{\"type\":\"text\",\"text\":\"");
	if (result->lead) {
		put_headline(sb, result->lead);
		strbuf_append(sb, "\\n", 2);
	}
	put_headline(sb, result->headline);
	strbuf_append(sb, "\\n", 2);
	jsonx_write_escaped(sb, strbuf_str(&body), keep);
	if (text_cut) {
		strbuf_puts(sb, "\\n[Truncated. Full result: ");
		const char *shown = spill_path ? spill_path : "(the spill file could not be written)";
		jsonx_write_escaped(sb, shown, strlen(shown));
		strbuf_putc(sb, ']');
	}
	strbuf_append(sb, "\"}", 2);
	strbuf_free(&body);

	if (result->image_base64) {
		strbuf_puts(sb, ",{\"type\":\"image\",\"data\":\"");
		strbuf_puts(sb, result->image_base64);
		strbuf_puts(sb, "\",\"mimeType\":");
		const char *mime = result->image_mime ? result->image_mime : "image/png";
		jsonx_write_string(sb, mime, strlen(mime));
		strbuf_putc(sb, '}');
	}
	strbuf_puts(sb, "],\"structuredContent\":");

	/* structuredContent: whole when it fits, else reduced, else minimal. */
	size_t before = sb->len;
	jsonx_write(sb, structured, 0);
	if (strbuf_ok(sb) && sb->len - before > RENDER_TEXT_MAX_BYTES) {
		sb->len = before;
		sb->data[before] = '\0';
		if (!spill_tried)
			spill_path = write_spill(structured);
		*spilled = true;
		const char *shown = spill_path ? spill_path : "(the spill file could not be written)";
		static const reduction levels[] = {REDUCE_COPY, REDUCE_MINIMAL, REDUCE_LAST_RESORT};
		for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
			json_object *reduced = reduced_structured(structured, shown, levels[i], &failed);
			sb->len = before;
			sb->data[before] = '\0';
			jsonx_write(sb, reduced, 0);
			json_object_put(reduced);
			if (!strbuf_ok(sb) || sb->len - before <= RENDER_TEXT_MAX_BYTES)
				break;
		}
	}
	strbuf_puts(sb, result->is_error ? ",\"isError\":true" : ",\"isError\":false");
	if (failed)
		sb->failed = true;
	json_object_put(structured);
	free(spill_path);
}

/* A one-entry cache of the last result rendered, keyed by everything the
 * rendering depends on. relay_status is answered at high rates with the
 * same content while nothing changes; its rendering (pretty text, escaping,
 * compact copy) is then a copy. Results with an image, and results that
 * were cut (each writes its own spill file), are never cached. Guarded by
 * cache_lock: results complete on several threads. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static strbuf cache_key = STRBUF_INIT;
static strbuf cache_value = STRBUF_INIT;

void render_tool_result(strbuf *sb, const tool_result *result, bool modern)
{
	strbuf key = STRBUF_INIT;
	bool cacheable =
	    result->image_base64 == NULL && json_object_is_type(result->structured, json_type_object);
	if (cacheable) {
		strbuf_putc(&key, result->is_error ? 'E' : 'O');
		if (result->text_omits_key)
			strbuf_puts(&key, result->text_omits_key);
		strbuf_putc(&key, '\0');
		if (result->headline)
			strbuf_puts(&key, result->headline);
		strbuf_putc(&key, '\0');
		size_t before = key.len;
		jsonx_write(&key, result->structured, 0);
		cacheable = strbuf_ok(&key) && key.len - before <= RENDER_TEXT_MAX_BYTES;
	}
	bool hit = false;
	if (cacheable) {
		pthread_mutex_lock(&cache_lock);
		if (cache_key.len == key.len && cache_key.len > 0 &&
		    memcmp(cache_key.data, key.data, key.len) == 0) {
			strbuf_append(sb, cache_value.data, cache_value.len);
			hit = true;
		}
		pthread_mutex_unlock(&cache_lock);
	}
	if (!hit) {
		size_t start = sb->len;
		bool spilled = false;
		render_body(sb, result, &spilled);
		if (cacheable && !spilled && strbuf_ok(sb)) {
			pthread_mutex_lock(&cache_lock);
			strbuf_reset(&cache_key);
			strbuf_reset(&cache_value);
			strbuf_append(&cache_key, key.data, key.len);
			strbuf_append(&cache_value, sb->data + start, sb->len - start);
			if (!strbuf_ok(&cache_key) || !strbuf_ok(&cache_value)) {
				strbuf_free(&cache_key);
				strbuf_free(&cache_value);
			}
			pthread_mutex_unlock(&cache_lock);
		}
	}
	strbuf_free(&key);
	if (modern)
		render_modern_fields(sb);
	strbuf_putc(sb, '}');
}
