/*
 * Image identities, the private image catalog and publication of originals
 * (spec/images.md §2, §5). Host files only; see image_catalog.h.
 */
#include "images/image_catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pixels/image.h"
#include "relay_support/json_escape.h"
#include "util/error.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/randx.h"
#include "util/strbuf.h"

#define CATALOG_ENTRY_MAX_BYTES (1024 * 1024)

/* ---- canonical JSON ------------------------------------------------------------------ */

/* Decodes one UTF-8 sequence at s[*i..len); returns the code point, or -1
 * on an invalid sequence. */
static int32_t utf8_next(const unsigned char *s, size_t len, size_t *i)
{
	unsigned char c = s[*i];
	int32_t cp;
	size_t n;
	if (c < 0x80) {
		(*i)++;
		return c;
	}
	if ((c & 0xe0) == 0xc0) {
		cp = c & 0x1f;
		n = 1;
	} else if ((c & 0xf0) == 0xe0) {
		cp = c & 0x0f;
		n = 2;
	} else if ((c & 0xf8) == 0xf0) {
		cp = c & 0x07;
		n = 3;
	} else {
		return -1;
	}
	if (*i + n >= len)
		return -1;
	for (size_t k = 1; k <= n; k++) {
		unsigned char d = s[*i + k];
		if ((d & 0xc0) != 0x80)
			return -1;
		cp = (cp << 6) | (d & 0x3f);
	}
	*i += n + 1;
	return cp;
}

/* The next UTF-16 code unit of a key: a supplementary code point gives its
 * high surrogate, then (through *pending) its low one. -1 at the end, -2 on
 * invalid UTF-8. */
static int32_t utf16_next(const unsigned char *s, size_t len, size_t *i, int32_t *pending)
{
	if (*pending >= 0) {
		int32_t unit = *pending;
		*pending = -1;
		return unit;
	}
	if (*i >= len)
		return -1;
	int32_t cp = utf8_next(s, len, i);
	if (cp < 0)
		return -2;
	if (cp >= 0x10000) {
		cp -= 0x10000;
		*pending = 0xdc00 + (cp & 0x3ff);
		return 0xd800 + (cp >> 10);
	}
	return cp;
}

/* Orders keys by their UTF-16 code units (equal to byte order for ASCII). */
static int key_cmp(const void *a, const void *b)
{
	const unsigned char *ka = *(const unsigned char *const *)a;
	const unsigned char *kb = *(const unsigned char *const *)b;
	size_t la = strlen((const char *)ka), lb = strlen((const char *)kb);
	size_t ia = 0, ib = 0;
	int32_t pa = -1, pb = -1;
	for (;;) {
		int32_t ua = utf16_next(ka, la, &ia, &pa);
		int32_t ub = utf16_next(kb, lb, &ib, &pb);
		if (ua == -2 || ub == -2)
			return strcmp((const char *)ka, (const char *)kb);
		if (ua != ub)
			return ua < ub ? -1 : 1;
		if (ua == -1)
			return 0;
	}
}

static void canon_string(strbuf *sb, const char *s, size_t len)
{
	strbuf_putc(sb, '"');
	size_t run = 0;
	for (size_t i = 0; i < len; i++) {
		char u[7];
		const char *esc = rs_json_escape((unsigned char)s[i], u);
		if (esc == NULL) {
			run++;
			continue;
		}
		if (run)
			strbuf_append(sb, s + i - run, run);
		run = 0;
		strbuf_puts(sb, esc);
	}
	if (run)
		strbuf_append(sb, s + len - run, run);
	strbuf_putc(sb, '"');
}

static relay_status canon_write(strbuf *sb, const json_object *value, int depth, relay_error *err)
{
	if (depth > 64)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "an image identity nests deeper than 64 levels");
	switch (json_object_get_type(value)) {
	case json_type_null: strbuf_puts(sb, "null"); return RELAY_OK;
	case json_type_boolean:
		strbuf_puts(sb, json_object_get_boolean(value) ? "true" : "false");
		return RELAY_OK;
	case json_type_int: {
		int64_t v = json_object_get_int64(value);
		if (v == INT64_MAX) {
			uint64_t u = json_object_get_uint64(value);
			strbuf_printf(sb, "%" PRIu64, u);
		} else {
			strbuf_printf(sb, "%" PRId64, v);
		}
		return RELAY_OK;
	}
	case json_type_double:
		return relay_error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "an image identity holds a floating-point number, which canonical JSON "
		    "does not allow");
	case json_type_string: {
		const char *s = json_object_get_string((json_object *)value);
		size_t len = (size_t)json_object_get_string_len(value);
		if (!utf8_valid(s, len))
			return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
			                       "an image identity holds a string that is not valid UTF-8");
		canon_string(sb, s, len);
		return RELAY_OK;
	}
	case json_type_array: {
		size_t n = json_object_array_length(value);
		strbuf_putc(sb, '[');
		for (size_t i = 0; i < n; i++) {
			if (i)
				strbuf_putc(sb, ',');
			relay_status st =
			    canon_write(sb, json_object_array_get_idx(value, i), depth + 1, err);
			if (st != RELAY_OK)
				return st;
		}
		strbuf_putc(sb, ']');
		return RELAY_OK;
	}
	case json_type_object: {
		size_t n = (size_t)json_object_object_length(value);
		const char **keys = n ? calloc(n, sizeof *keys) : NULL;
		if (n && keys == NULL)
			return relay_error_set(err, RELAY_E_NO_MEMORY, 0,
			                       "out of memory writing canonical JSON");
		size_t k = 0;
		json_object_object_foreach((json_object *)value, key, child)
		{
			(void)child;
			if (k < n)
				keys[k++] = key;
		}
		for (size_t i = 0; i < k; i++) {
			if (!utf8_valid(keys[i], strlen(keys[i]))) {
				free(keys);
				return relay_error_set(
				    err, RELAY_E_INVALID_ARGUMENT, 0,
				    "an image identity holds a key that is not valid UTF-8");
			}
		}
		if (k > 1)
			qsort(keys, k, sizeof *keys, key_cmp);
		strbuf_putc(sb, '{');
		relay_status st = RELAY_OK;
		for (size_t i = 0; i < k && st == RELAY_OK; i++) {
			if (i)
				strbuf_putc(sb, ',');
			canon_string(sb, keys[i], strlen(keys[i]));
			strbuf_putc(sb, ':');
			st = canon_write(sb, json_object_object_get((json_object *)value, keys[i]), depth + 1,
			                 err);
		}
		free(keys);
		if (st != RELAY_OK)
			return st;
		strbuf_putc(sb, '}');
		return RELAY_OK;
	}
	}
	return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
	                       "an image identity holds an unknown JSON type");
}

relay_status image_catalog_canonical_json(const json_object *value, char **out, relay_error *err)
{
	strbuf sb = STRBUF_INIT;
	*out = NULL;
	relay_status st = canon_write(&sb, value, 0, err);
	if (st == RELAY_OK && !strbuf_ok(&sb))
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory writing canonical JSON");
	if (st != RELAY_OK) {
		strbuf_free(&sb);
		return st;
	}
	strbuf_putc(&sb, '\0'); /* an empty buffer still detaches as "" */
	if (!strbuf_ok(&sb)) {
		strbuf_free(&sb);
		return relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory writing canonical JSON");
	}
	*out = strbuf_detach(&sb, NULL);
	return RELAY_OK;
}

static relay_status canonical_sha256(const json_object *value, char out[SHA256_HEX_LEN + 1], relay_error *err)
{
	char *text = NULL;
	relay_status st = image_catalog_canonical_json(value, &text, err);
	if (st != RELAY_OK)
		return st;
	sha256_buffer_hex(text, strlen(text), out);
	free(text);
	return RELAY_OK;
}

relay_status image_catalog_binding(const char *owner, const char *enclosure, const json_object *backend,
                                   char out[SHA256_HEX_LEN + 1], relay_error *err)
{
	if (owner == NULL || enclosure == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "an image binding needs the session identity and the guest's purpose");
	json_object *arr = json_object_new_array();
	if (arr == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	json_object_array_add(arr, json_object_new_string(owner));
	json_object_array_add(arr, json_object_new_string(enclosure));
	json_object_array_add(arr, json_object_get((json_object *)backend));
	relay_status st = canonical_sha256(arr, out, err);
	json_object_put(arr);
	return st;
}

relay_status image_catalog_image_id(const char *binding_hex, const json_object *descriptor,
                                    const char *file_name, char out[IMAGE_CATALOG_ID_LEN + 1],
                                    relay_error *err)
{
	if (binding_hex == NULL || !json_object_is_type(descriptor, json_type_object))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "an image identity needs a binding and a descriptor object");
	relay_status st = RELAY_OK;
	json_object *arr = json_object_new_array();
	json_object *stripped = json_object_new_object();
	if (arr == NULL || stripped == NULL) {
		json_object_put(arr);
		json_object_put(stripped);
		return relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	}
	json_object_object_foreach((json_object *)descriptor, key, child)
	{
		if (strcmp(key, "imageId") == 0 || strcmp(key, "originalPath") == 0 ||
		    strcmp(key, "retrievedAt") == 0)
			continue;
		json_object_object_add(stripped, key, json_object_get(child));
	}
	json_object_array_add(arr, json_object_new_string(binding_hex));
	json_object_array_add(arr, stripped);
	json_object_array_add(arr, file_name ? json_object_new_string(file_name) : NULL);
	char hex[SHA256_HEX_LEN + 1];
	st = canonical_sha256(arr, hex, err);
	json_object_put(arr);
	if (st == RELAY_OK)
		snprintf(out, IMAGE_CATALOG_ID_LEN + 1, "image-%s", hex);
	return st;
}

bool image_catalog_id_valid(const char *text)
{
	if (text == NULL || strncmp(text, "image-", 6) != 0 || strlen(text) != IMAGE_CATALOG_ID_LEN)
		return false;
	for (const char *p = text + 6; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

const char *image_catalog_ext(const char *mime_type)
{
	if (mime_type == NULL)
		return NULL;
	if (strcmp(mime_type, IMAGE_MIME_PNG) == 0)
		return "png";
	if (strcmp(mime_type, IMAGE_MIME_JPEG) == 0)
		return "jpg";
	if (strcmp(mime_type, IMAGE_MIME_WEBP) == 0)
		return "webp";
	return NULL;
}

/* ---- the catalog --------------------------------------------------------------------- */

/* True when a and b serialise to the same canonical JSON (both may be NULL). */
static bool canonical_equal(const json_object *a, const json_object *b)
{
	char *ta = NULL, *tb = NULL;
	relay_error err;
	bool equal = image_catalog_canonical_json(a, &ta, &err) == RELAY_OK &&
	             image_catalog_canonical_json(b, &tb, &err) == RELAY_OK && strcmp(ta, tb) == 0;
	free(ta);
	free(tb);
	return equal;
}

relay_status image_catalog_check(const json_object *entry, const char *image_id, relay_error *err)
{
	const char *binding = jsonx_get_str(entry, "binding");
	json_object *descriptor = jsonx_get_obj(entry, "descriptor");
	json_object *file_name = NULL;
	bool has_file_name = json_object_object_get_ex(entry, "fileName", &file_name);
	if (binding == NULL || !sha256_hex_valid(binding) || descriptor == NULL || !has_file_name ||
	    (file_name != NULL && !json_object_is_type(file_name, json_type_string)))
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "catalog entry %s is not a well-formed image reference "
		                       "(binding, descriptor and fileName are required)",
		                       image_id);
	const char *stated = jsonx_get_str(descriptor, "imageId");
	if (stated == NULL || strcmp(stated, image_id) != 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "catalog entry %s names another imageId in its descriptor", image_id);
	char computed[IMAGE_CATALOG_ID_LEN + 1];
	relay_status st = image_catalog_image_id(
	    binding, descriptor, file_name ? json_object_get_string(file_name) : NULL, computed, err);
	if (st != RELAY_OK)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0, "catalog entry %s cannot be verified: %s",
		                       image_id, err->message);
	if (strcmp(computed, image_id) != 0)
		return relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                       "catalog entry %s does not match its identity (it derives %s)",
		                       image_id, computed);
	return RELAY_OK;
}

relay_status image_catalog_get(const char *catalog_dir, const char *image_id, json_object **entry_out,
                               relay_error *err)
{
	*entry_out = NULL;
	if (!image_catalog_id_valid(image_id))
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0, "%s is not an imageId",
		                       image_id ? image_id : "(null)");
	char name[IMAGE_CATALOG_ID_LEN + 8];
	snprintf(name, sizeof name, "%s.json", image_id);
	char *path = fs_path_join(catalog_dir, name);
	if (path == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	json_object *entry = NULL;
	relay_status st = fs_read_json(path, CATALOG_ENTRY_MAX_BYTES, &entry, err);
	if (st == RELAY_OK && !json_object_is_type(entry, json_type_object))
		st =
		    relay_error_set(err, RELAY_E_INTEGRITY, 0, "catalog entry %s is not a JSON object", path);
	if (st == RELAY_OK)
		st = image_catalog_check(entry, image_id, err);
	free(path);
	if (st != RELAY_OK) {
		json_object_put(entry);
		return st;
	}
	*entry_out = entry;
	return RELAY_OK;
}

/* The parts of an entry that must never change once recorded. */
static const char *const identity_keys[] = {"binding", "descriptor", "fileName", "remote", "approvedRoot"};

relay_status image_catalog_put(const char *catalog_dir, const json_object *entry, json_object **stored_out,
                               relay_error *err)
{
	relay_status st = RELAY_OK;
	char *path = NULL, *tmp = NULL, *text = NULL;
	json_object *existing = NULL;
	int fd = -1;
	if (stored_out)
		*stored_out = NULL;
	json_object *descriptor = jsonx_get_obj(entry, "descriptor");
	const char *image_id = jsonx_get_str(descriptor, "imageId");
	if (!image_catalog_id_valid(image_id)) {
		st = relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                     "a catalog entry needs descriptor.imageId");
		goto cleanup;
	}
	st = image_catalog_check(entry, image_id, err);
	if (st != RELAY_OK)
		goto cleanup;
	st = fs_mkdir_p(catalog_dir, 0700, err);
	if (st != RELAY_OK)
		goto cleanup;
	char name[IMAGE_CATALOG_ID_LEN + 8];
	snprintf(name, sizeof name, "%s.json", image_id);
	path = fs_path_join(catalog_dir, name);
	char rnd[17];
	random_hex(rnd, 16);
	strbuf tb = STRBUF_INIT;
	strbuf_printf(&tb, "%s/.%s.tmp-%s", catalog_dir, image_id, rnd);
	tmp = strbuf_detach(&tb, NULL);
	strbuf body = STRBUF_INIT;
	jsonx_write(&body, entry, JSONX_PRETTY);
	strbuf_putc(&body, '\n');
	text = strbuf_detach(&body, NULL);
	if (path == NULL || tmp == NULL || text == NULL) {
		st = relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
		goto cleanup;
	}
	if (!fs_exists_nofollow(path)) {
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			st = relay_error_set(err, RELAY_E_IO, errno, "cannot create %s: %s", tmp,
			                     strerror(errno));
			goto cleanup;
		}
		size_t len = strlen(text);
		for (size_t off = 0; off < len;) {
			ssize_t w = write(fd, text + off, len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				st = relay_error_set(err, errno == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO,
				                     errno, "cannot write %s: %s", tmp, strerror(errno));
				goto cleanup;
			}
			off += (size_t)w;
		}
		if (fsync(fd) != 0) {
			st = relay_error_set(err, RELAY_E_IO, errno, "cannot sync %s: %s", tmp,
			                     strerror(errno));
			goto cleanup;
		}
		close(fd);
		fd = -1;
		if (link(tmp, path) == 0) {
			unlink(tmp);
			fs_fsync_dir(catalog_dir, err);
			if (stored_out)
				*stored_out = json_object_get((json_object *)entry);
			st = RELAY_OK;
			goto cleanup;
		}
		if (errno != EEXIST) {
			st = relay_error_set(err, RELAY_E_IO, errno, "cannot record %s: %s", path,
			                     strerror(errno));
			goto cleanup;
		}
		/* Another delivery recorded it first: verify theirs below. */
	}
	st = image_catalog_get(catalog_dir, image_id, &existing, err);
	if (st != RELAY_OK) {
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "the existing catalog entry %s cannot be trusted: %s", path,
		                     err->message);
		goto cleanup;
	}
	for (size_t i = 0; i < sizeof identity_keys / sizeof identity_keys[0]; i++) {
		json_object *a = NULL, *b = NULL;
		bool has_a = json_object_object_get_ex(existing, identity_keys[i], &a);
		bool has_b = json_object_object_get_ex(entry, identity_keys[i], &b);
		if (has_a != has_b || !canonical_equal(a, b)) {
			st = relay_error_set(
			    err, RELAY_E_INTEGRITY, 0,
			    "catalog entry %s already exists and disagrees with this derivation in "
			    "\"%s\"; it is never replaced",
			    path, identity_keys[i]);
			goto cleanup;
		}
	}
	if (stored_out) {
		*stored_out = existing;
		existing = NULL;
	}
cleanup:
	if (fd >= 0)
		close(fd);
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	json_object_put(existing);
	free(path);
	free(text);
	return st;
}

/* ---- publication --------------------------------------------------------------------- */

relay_status image_catalog_staging_open(const char *image_dir, const char *ext, image_catalog_staging *out,
                                        relay_error *err)
{
	memset(out, 0, sizeof *out);
	if (image_dir == NULL || ext == NULL)
		return relay_error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "publication needs a folder and a type");
	relay_status st = fs_mkdir_p(image_dir, 0700, err);
	if (st != RELAY_OK)
		return st;
	strbuf sb = STRBUF_INIT;
	out->image_dir = strdup(image_dir);
	strbuf_printf(&sb, "%s/original.%s", image_dir, ext);
	out->published = strbuf_detach(&sb, NULL);
	for (int tries = 0; tries < 8 && out->dir == NULL; tries++) {
		char rnd[17];
		random_hex(rnd, 16);
		strbuf_printf(&sb, "%s/.relay-image-%s", image_dir, rnd);
		char *dir = strbuf_detach(&sb, NULL);
		if (dir == NULL)
			break;
		if (mkdir(dir, 0700) == 0) {
			out->dir = dir;
		} else {
			int e = errno;
			free(dir);
			if (e != EEXIST) {
				image_catalog_staging_close(out);
				return relay_error_set(err, e == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, e,
				                       "cannot create a staging folder in %s: %s", image_dir,
				                       strerror(e));
			}
		}
	}
	if (out->dir) {
		strbuf_printf(&sb, "%s/original.%s", out->dir, ext);
		out->file = strbuf_detach(&sb, NULL);
	}
	if (out->image_dir == NULL || out->published == NULL || out->dir == NULL || out->file == NULL) {
		image_catalog_staging_close(out);
		return relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory preparing publication in %s",
		                       image_dir);
	}
	return RELAY_OK;
}

void image_catalog_staging_close(image_catalog_staging *s)
{
	if (s == NULL)
		return;
	if (s->dir) {
		relay_error ignored;
		fs_remove_tree(s->dir, &ignored);
		if (s->image_dir)
			fs_fsync_dir(s->image_dir, &ignored);
	}
	free(s->image_dir);
	free(s->dir);
	free(s->file);
	free(s->published);
	memset(s, 0, sizeof *s);
}

/* Hashes a regular file without following a link. */
static relay_status hash_nofollow(const char *path, char hex[SHA256_HEX_LEN + 1], uint64_t *bytes,
                                  relay_error *err)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT)
			return relay_error_set(err, RELAY_E_NOT_FOUND, e, "%s does not exist", path);
		return relay_error_set(err, e == ELOOP ? RELAY_E_UNSAFE_PATH : RELAY_E_IO, e,
		                       "cannot open %s: %s", path, strerror(e));
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return relay_error_set(err, RELAY_E_UNSAFE_PATH, 0, "%s is not a regular file", path);
	}
	relay_status st = sha256_fd_hex(fd, hex, bytes, err);
	close(fd);
	return st;
}

relay_status image_catalog_original_check(const char *image_dir, const char *ext, const char *sha256,
                                          uint64_t bytes, bool *present, relay_error *err)
{
	*present = false;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/original.%s", image_dir, ext);
	char *path = strbuf_detach(&sb, NULL);
	if (path == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	char hex[SHA256_HEX_LEN + 1];
	uint64_t got = 0;
	relay_status st = hash_nofollow(path, hex, &got, err);
	if (st == RELAY_E_NOT_FOUND) {
		free(path);
		return RELAY_OK;
	}
	if (st == RELAY_OK) {
		*present = true;
		if (got != bytes || strcmp(hex, sha256) != 0)
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                     "the published original %s holds %" PRIu64
			                     " bytes with SHA-256 %.12s…, not the image's %" PRIu64
			                     " bytes with %.12s…",
			                     path, got, hex, bytes, sha256);
	}
	free(path);
	return st;
}

relay_status image_catalog_staging_publish(image_catalog_staging *s, const char *sha256, uint64_t bytes,
                                           bool *already_out, relay_error *err)
{
	relay_status st = RELAY_OK;
	if (already_out)
		*already_out = false;
	char hex[SHA256_HEX_LEN + 1];
	uint64_t got = 0;
	st = hash_nofollow(s->file, hex, &got, err);
	if (st != RELAY_OK)
		goto cleanup;
	if (got != bytes || strcmp(hex, sha256) != 0) {
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
		                     "the copy brought home holds %" PRIu64
		                     " bytes with SHA-256 %.12s…, not the "
		                     "image's %" PRIu64 " bytes with %.12s…; it was discarded",
		                     got, hex, bytes, sha256);
		goto cleanup;
	}
	if (link(s->file, s->published) != 0) {
		int e = errno;
		if (e != EEXIST) {
			st = relay_error_set(err, e == ENOSPC ? RELAY_E_NO_SPACE : RELAY_E_IO, e,
			                     "cannot publish %s: %s", s->published, strerror(e));
			goto cleanup;
		}
		/* Published before (by a step download or an earlier delivery):
		 * it must hold the same bytes. */
		st = hash_nofollow(s->published, hex, &got, err);
		if (st == RELAY_OK && (got != bytes || strcmp(hex, sha256) != 0))
			st = relay_error_set(err, RELAY_E_INTEGRITY, 0,
			                     "%s already exists with other bytes (%" PRIu64
			                     " bytes, SHA-256 %.12s…); it is never replaced",
			                     s->published, got, hex);
		else if (st != RELAY_OK)
			st = relay_error_set(err, st == RELAY_E_UNSAFE_PATH ? RELAY_E_INTEGRITY : st,
			                     err->sys_errno, "%s already exists and cannot be verified: %s",
			                     s->published, err->message);
		if (st == RELAY_OK && already_out)
			*already_out = true;
		goto cleanup;
	}
	fs_fsync_dir(s->image_dir, err);
cleanup:
	/* The staging folder goes whatever happened, so a published original
	 * ends with one link. */
	if (s->dir) {
		relay_error ignored;
		fs_remove_tree(s->dir, &ignored);
		fs_fsync_dir(s->image_dir, &ignored);
		free(s->dir);
		s->dir = NULL;
	}
	return st;
}

relay_status image_catalog_receipt_write(const char *image_dir, const json_object *receipt, char **path_out,
                                         relay_error *err)
{
	if (path_out)
		*path_out = NULL;
	relay_status st = fs_mkdir_p(image_dir, 0700, err);
	if (st != RELAY_OK)
		return st;
	char uuid[37];
	random_uuid(uuid);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/delivery-%s.json", image_dir, uuid);
	char *path = strbuf_detach(&sb, NULL);
	if (path == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	st = fs_write_json_durable(path, receipt, err);
	if (st == RELAY_OK && path_out)
		*path_out = path;
	else
		free(path);
	return st;
}
