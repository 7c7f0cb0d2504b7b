/*
 * md_engine.c — the small Engine API requests the lease code shares:
 * container paths, inspect, remove, archive puts and HEADs, the image
 * lookup and pull, and the parts of a create body (labels, rlimits).
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"
#include "md_lease.h"

/* ---- small engine helpers ------------------------------------------------------ */

char *md_container_path(const char *vm, const char *suffix)
{
	char *p = malloc(1024);
	if (p == NULL)
		return NULL;
	snprintf(p, 1024, MD_API_PREFIX "/containers/");
	md_url_encode(p, 1024, vm);
	if (suffix)
		strncat(p, suffix, 1023 - strlen(p));
	return p;
}

relay_status md_container_api(md_state *st, const char *method, const char *vm, const char *suffix,
                              json_object *body, uint32_t timeout_ms, relay_call *call, md_reply *reply,
                              relay_error *err)
{
	char *path = md_container_path(vm, suffix);
	if (path == NULL) {
		memset(reply, 0, sizeof *reply);
		return md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	}
	relay_status s = md_api(st, method, path, body, -1, -1, timeout_ms, call, reply, err);
	free(path);
	return s;
}

/* GET /containers/{vm}/json: 1 found (*out owned), 0 gone, -1 cannot tell. */
int md_container_get(md_state *st, const char *vm, relay_call *call, json_object **out)
{
	*out = NULL;
	md_reply r;
	relay_error e;
	relay_status s = md_container_api(st, "GET", vm, "/json", NULL, 20000, call, &r, &e);
	if (s != RELAY_OK)
		return -1;
	int found = r.status == 200 && r.json ? 1 : (r.status == 404 ? 0 : -1);
	if (found == 1) {
		*out = r.json;
		r.json = NULL;
	}
	md_reply_free(&r);
	return found;
}

bool md_container_running(json_object *info)
{
	json_object *state = md_obj(info, "State");
	json_object *running = NULL;
	return state && json_object_object_get_ex(state, "Running", &running) &&
	       json_object_get_boolean(running);
}

const char *md_label_of(json_object *info, const char *name)
{
	char key[96];
	snprintf(key, sizeof key, MD_LABEL "%s", name);
	return md_str(md_obj(md_obj(info, "Config"), "Labels"), key);
}

int lease_path_exists(md_state *st, const char *container, const char *path, uint32_t *mode_out)
{
	char *p = md_container_path(container, "/archive?path=");
	if (p == NULL || !md_url_encode(p, 1024, path)) {
		free(p);
		return -1;
	}
	md_reply r;
	relay_error e;
	relay_status s = md_api(st, "HEAD", p, NULL, -1, -1, 20000, NULL, &r, &e);
	free(p);
	if (s != RELAY_OK)
		return -1;
	int out = r.status == 200 ? 1 : (r.status == 404 ? 0 : -1);
	if (out == 1 && mode_out) {
		*mode_out = 0;
		/* The header is base64 of {"name","size","mode",...}. */
		char *text = r.path_stat ? md_b64_decode(r.path_stat) : NULL;
		json_object *j = text ? json_tokener_parse(text) : NULL;
		*mode_out = (uint32_t)md_int(j, "mode", 0);
		json_object_put(j);
		free(text);
	}
	md_reply_free(&r);
	return out;
}

/* Puts small entries into folder `dir` of the container. */
relay_status md_put_entries(md_state *st, const char *container, const char *dir, const md_put_entry *entries,
                            size_t count, relay_call *call, relay_error *err)
{
	int fd = md_tmp_file(st);
	if (fd < 0)
		return md_err(st, err, RELAY_E_IO, errno, "cannot create a temporary archive under %s",
		              st->kit.state_dir);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_in_last_block(a, 1);
	relay_status s = RELAY_OK;
	if (archive_write_open(a, &fd, NULL, md_tar_write_cb, NULL) != ARCHIVE_OK) {
		s = md_err(st, err, RELAY_E_IO, 0, "cannot start an archive");
		goto done;
	}
	for (size_t i = 0; i < count; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, entries[i].name);
		archive_entry_set_filetype(e, entries[i].dir ? AE_IFDIR : AE_IFREG);
		archive_entry_set_perm(e, entries[i].mode);
		archive_entry_set_uid(e, entries[i].uid);
		archive_entry_set_gid(e, entries[i].gid);
		archive_entry_set_size(e, entries[i].dir ? 0 : (la_int64_t)entries[i].len);
		archive_entry_set_mtime(e, (time_t)(st->host->now_ms() / 1000), 0);
		int rc = archive_write_header(a, e);
		archive_entry_free(e);
		if (rc != ARCHIVE_OK ||
		    (!entries[i].dir && entries[i].len &&
		     archive_write_data(a, entries[i].data, entries[i].len) != (la_ssize_t)entries[i].len)) {
			s = md_err(st, err, RELAY_E_IO, 0, "cannot write an archive: %s",
			           archive_error_string(a));
			goto done;
		}
	}
	if (archive_write_close(a) != ARCHIVE_OK) {
		s = md_err(st, err, RELAY_E_IO, 0, "cannot finish an archive");
		goto done;
	}
	lseek(fd, 0, SEEK_SET);
	char *path = md_container_path(container, "/archive?path=");
	if (path == NULL || !md_url_encode(path, 1024, dir)) {
		free(path);
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	md_reply r;
	s = md_api(st, "PUT", path, NULL, fd, -1, 60000, call, &r, err);
	free(path);
	if (s == RELAY_OK && r.status != 200)
		s = md_err(st, err, r.status == 404 ? RELAY_E_NOT_FOUND : RELAY_E_REFUSED, 0,
		           "the engine refused to write into %s of %s (HTTP %ld): %s", dir, container,
		           r.status, md_reply_message(&r));
	md_reply_free(&r);
done:
	archive_write_free(a);
	close(fd);
	return s;
}

relay_status lease_put_file(md_state *st, const char *container, const char *dir, const char *name,
                            const void *data, size_t len, unsigned mode, uid_t uid, gid_t gid,
                            relay_call *call, relay_error *err)
{
	md_put_entry e = {.name = name, .data = data, .len = len, .mode = mode, .uid = uid, .gid = gid};
	return md_put_entries(st, container, dir, &e, 1, call, err);
}

int md_expires_text(md_state *st, json_object *rec, char *out, size_t size)
{
	return snprintf(out, size, "%lld %lld %lld\n", (long long)md_int(rec, "expiresAtMs", 0),
	                (long long)md_int(rec, "graceMs", st->grace_ms), (long long)st->backstop_ms);
}

/* DELETE with force and its anonymous volumes: 1 removed or gone, 0 refused, -1 unknown. */
int md_container_remove(md_state *st, const char *vm, relay_call *call, relay_error *err)
{
	md_reply r;
	relay_status s = md_container_api(st, "DELETE", vm, "?force=1&v=1", NULL, 60000, call, &r, err);
	if (s != RELAY_OK)
		return -1;
	int out = (r.status == 204 || r.status == 200 || r.status == 404) ? 1 : 0;
	if (!out)
		md_err(st, err, RELAY_E_REFUSED, 0, "the engine refused to remove %s (HTTP %ld): %s", vm,
		       r.status, md_reply_message(&r));
	md_reply_free(&r);
	return out;
}

/* ---- images ------------------------------------------------------------------- */

relay_status md_ensure_image(md_state *st, const md_image *im, relay_call *call, relay_error *err)
{
	md_reply r;
	relay_status s = md_image_inspect(st, im->ref, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_INDETERMINATE ? RELAY_E_UNAVAILABLE : s;
	long code = r.status;
	md_reply_free(&r);
	if (code == 200)
		return RELAY_OK;
	/* Not present: the engine pulls it (its own job), reported as progress. */
	st->host->call_progress(call, 0, -1, "the container engine is pulling the image");
	char pull[1200] = MD_API_PREFIX "/images/create?fromImage=";
	md_url_encode(pull, sizeof pull, im->ref);
	s = md_api(st, "POST", pull, NULL, -1, -1, (uint32_t)st->pull_timeout_ms, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_CANCELLED
		           ? s
		           : md_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		                    "image %s (%s) is not present and pulling it failed: %s", im->key,
		                    im->ref, err->message);
	/* The pull streams JSON lines; an "error" in any of them is a failure. */
	const char *bad = r.body ? strstr(r.body, "\"error\"") : NULL;
	if (r.status != 200 || bad) {
		const char *msg = bad ? bad : md_reply_message(&r);
		s = md_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		           "image %s (%s) is not present on the engine and cannot be pulled: %.300s; pull or "
		           "build it on the engine, or fix options.images",
		           im->key, im->ref, msg);
	}
	md_reply_free(&r);
	return s;
}

json_object *md_str_array(const char *const *items)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; items[i]; i++)
		json_object_array_add(a, json_object_new_string(items[i]));
	return a;
}

void md_add_label(json_object *labels, const char *name, const char *value)
{
	char key[96];
	snprintf(key, sizeof key, MD_LABEL "%s", name);
	json_object_object_add(labels, key, json_object_new_string(value ? value : ""));
}

void md_make_labels(md_state *st, json_object *rec, const md_image *im, json_object *labels)
{
	char text[64];
	md_add_label(labels, "plugin", MD_PLUGIN_NAME);
	md_add_label(labels, "store", st->kit.state_dir);
	md_add_label(labels, "owner", st->owner);
	md_add_label(labels, "session", st->session_id);
	md_add_label(labels, "guest", md_str(rec, "guest"));
	md_add_label(labels, "purpose", md_str(rec, "purpose"));
	md_add_label(labels, "lease-id", md_str(rec, "lease_id"));
	snprintf(text, sizeof text, "%lld", (long long)md_int(rec, "deadlineMs", 0));
	md_add_label(labels, "deadline-ms", text);
	md_add_label(labels, "image", im->key);
}

json_object *md_ulimits_json(md_state *st)
{
	json_object *ul = json_object_new_array();
	const char *names[] = {"nofile", "nproc"};
	int64_t values[] = {st->ulimit_nofile, st->ulimit_nproc};
	for (int i = 0; i < 2; i++) {
		if (values[i] <= 0)
			continue;
		json_object *u = json_object_new_object();
		json_object_object_add(u, "Name", json_object_new_string(names[i]));
		json_object_object_add(u, "Soft", json_object_new_int64(values[i]));
		json_object_object_add(u, "Hard", json_object_new_int64(values[i]));
		json_object_array_add(ul, u);
	}
	return ul;
}

void md_backstop_args(md_state *st, json_object *rec, md_backstop_text *out)
{
	snprintf(out->expires, sizeof out->expires, "%lld", (long long)md_int(rec, "expiresAtMs", 0));
	snprintf(out->grace, sizeof out->grace, "%lld", (long long)md_int(rec, "graceMs", st->grace_ms));
	snprintf(out->backstop, sizeof out->backstop, "%lld", (long long)st->backstop_ms);
}
