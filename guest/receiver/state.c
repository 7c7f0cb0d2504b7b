/*
 * receiver/state.c — see state.h.
 */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsx.h"
#include "journal.h"
#include "scan.h"
#include "sha256.h"

jv *state_read_json(const char *root, const char *rel, size_t max_bytes, int *missing_out, rerr *err)
{
	char *path = path_join(root, rel);
	buf text;
	jv *value = NULL;
	int exists = 0;
	*missing_out = 0;
	buf_init(&text);
	if (path_walk_check(root, rel, 1, &exists, err) != 0)
		goto cleanup;
	if (!exists) {
		*missing_out = 1;
		err_set(err, "%s does not exist", rel);
		goto cleanup;
	}
	if (read_file_limited(path, max_bytes, &text, missing_out, NULL, err) != 0)
		goto cleanup;
	value = jv_parse(text.data, text.len, err);
	if (!value)
		err_prefix(err, "%s", rel);
cleanup:
	buf_free(&text);
	free(path);
	return value;
}

/* state_write_json, and with f its in-place rewrites. */
static int write_json(const char *root, const char *rel_dir, const char *name, const jv *value,
                      durable_file *f, char sha_out[65], uint64_t *bytes_out, rerr *err)
{
	buf text;
	char *dir;
	int rc = -1;
	buf_init(&text);
	/* A file already open for rewriting needs no walk of its folders. */
	if ((!f || f->fd < 0) && dir_ensure(root, rel_dir, err) != 0)
		goto cleanup_nodir;
	jv_write(&text, value, JV_PRETTY);
	buf_putc(&text, '\n');
	dir = path_join(root, rel_dir);
	rc = f ? durable_rewrite(f, dir, name, text.data, text.len, err)
	       : durable_write(dir, name, text.data, text.len, err);
	free(dir);
	if (rc == 0 && sha_out)
		sha256_hex_of(text.data, text.len, sha_out);
	if (rc == 0 && bytes_out)
		*bytes_out = text.len;
cleanup_nodir:
	buf_free(&text);
	return rc;
}

int state_write_json(const char *root, const char *rel_dir, const char *name, const jv *value,
                     char sha_out[65], uint64_t *bytes_out, rerr *err)
{
	return write_json(root, rel_dir, name, value, NULL, sha_out, bytes_out, err);
}

int state_rewrite_json(const char *root, const char *rel_dir, const char *name, const jv *value,
                       durable_file *f, rerr *err)
{
	return write_json(root, rel_dir, name, value, f, NULL, NULL, err);
}

char *state_session_id(const char *root, rerr *err)
{
	int missing = 0;
	jv *session = state_read_json(root, SESSION_REL, 65536, &missing, err);
	const char *sid = jv_get_str(session, "sessionId");
	char *out = NULL;
	if (!session) {
		if (missing)
			err_set(err, "no recording session: %s is missing (stage the guest first)",
			        SESSION_REL);
	} else if (!sid || !id_valid(sid)) {
		err_set(err, "%s has no valid sessionId", SESSION_REL);
	} else {
		out = xstrdup(sid);
	}
	jv_free(session);
	return out;
}

/* 0 when the journal is absent, empty, or holds exactly one session-start
 * of session_id (*has_start_out tells which). */
static int journal_fresh(const char *root, const char *session_id, int *has_start_out, rerr *err)
{
	char *path = path_join(root, JOURNAL_REL);
	buf text;
	int missing = 0, rc = -1;
	jv *ev = NULL;
	*has_start_out = 0;
	buf_init(&text);
	if (read_file_limited(path, JOURNAL_LINE_MAX + 1, &text, &missing, NULL, err) != 0) {
		if (missing)
			rc = 0;
		goto cleanup;
	}
	if (text.len == 0) {
		rc = 0;
		goto cleanup;
	}
	if (text.data[text.len - 1] == '\n' && !memchr(text.data, '\n', text.len - 1)) {
		const char *type, *sid;
		ev = jv_parse(text.data, text.len - 1, err);
		type = jv_get_str(ev, "type");
		sid = jv_get_str(ev, "sessionId");
		if (type && sid && strcmp(type, "session-start") == 0 && strcmp(sid, session_id) == 0) {
			*has_start_out = 1;
			rc = 0;
			goto cleanup;
		}
	}
	err_set(err, "state/ already holds a journal of another recording; reset the recording "
	             "(relay_stage resetRecording: true)");
cleanup:
	jv_free(ev);
	buf_free(&text);
	free(path);
	return rc;
}

int state_init(const char *root, const char *session_id, int *created_out, rerr *err)
{
	static const char *dirs[] = {"state/journal", "state/records/execution", "state/records/action",
	                             "state/receiver/started", RECEIVER_RECEIPTS_DIR};
	int missing = 0, has_start = 0, rc = -1;
	jv *session = NULL;
	fact_list facts = {0};
	size_t i;
	char *snap_dir = NULL;
	*created_out = 0;
	if (dir_ensure(root, "state", err) != 0)
		goto cleanup;
	session = state_read_json(root, SESSION_REL, 65536, &missing, err);
	if (session) {
		const char *sid = jv_get_str(session, "sessionId");
		if (sid && strcmp(sid, session_id) == 0) {
			rc = 0;
			goto cleanup;
		}
		err_set(err,
		        "state/ belongs to recording session %s; reset the recording (relay_stage "
		        "resetRecording: true) before starting %s",
		        sid ? sid : "(unreadable)", session_id);
		goto cleanup;
	}
	if (!missing) {
		err_prefix(err, "state/session.json is unreadable; reset the recording");
		goto cleanup;
	}
	{
		char *state_abs = path_join(root, "state");
		int ok = scan_collect(root, state_abs, ".", 0, 0, &facts, err);
		free(state_abs);
		if (ok != 0) {
			err_prefix(err, "state/ cannot be checked");
			goto cleanup;
		}
	}
	for (i = 0; i < facts.count; i++) {
		if (strcmp(facts.items[i].path, "journal/events.jsonl") != 0 &&
		    strcmp(facts.items[i].path, "receiver/groups.json") != 0) {
			err_set(err,
			        "state/ is not empty (%s) and has no session.json; reset the recording "
			        "(relay_stage resetRecording: true)",
			        facts.items[i].path);
			goto cleanup;
		}
	}
	if (journal_fresh(root, session_id, &has_start, err) != 0)
		goto cleanup;
	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (dir_ensure(root, dirs[i], err) != 0)
			goto cleanup;
	snap_dir = xasprintf("state/snapshots/%s", session_id);
	if (dir_ensure(root, snap_dir, err) != 0)
		goto cleanup;
	{
		jv *groups = jv_object();
		int ok;
		jv_set_null(groups, "active");
		jv_set(groups, "used", jv_array());
		ok = state_write_json(root, "state/receiver", "groups.json", groups, NULL, NULL, err);
		jv_free(groups);
		if (ok != 0)
			goto cleanup;
	}
	if (!has_start) {
		journal j;
		jv *fields = jv_object();
		char *path = path_join(root, JOURNAL_REL);
		int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		int ok;
		free(path);
		if (fd < 0) {
			err_set(err, "cannot create the journal: %s", strerror(errno));
			jv_free(fields);
			goto cleanup;
		}
		close(fd);
		j.path = path_join(root, JOURNAL_REL);
		j.session_id = xstrdup(session_id);
		j.next_seq = 1;
		jv_set_str(fields, "receiverVersion", RECEIVER_VERSION);
		jv_set_str(fields, "platform", RECEIVER_PLATFORM);
		ok = journal_append(&j, "session-start", fields, err);
		journal_close(&j);
		if (ok != 0)
			goto cleanup;
		{
			char *jdir = path_join(root, "state/journal");
			ok = fsync_dir(jdir, err);
			free(jdir);
			if (ok != 0)
				goto cleanup;
		}
	}
	{
		jv *s = jv_object();
		char now[32];
		int ok;
		timestamp_now(now);
		jv_set_str(s, "sessionId", session_id);
		jv_set_str(s, "createdAt", now);
		jv_set_str(s, "receiverVersion", RECEIVER_VERSION);
		jv_set_str(s, "platform", RECEIVER_PLATFORM);
		ok = state_write_json(root, "state", "session.json", s, NULL, NULL, err);
		jv_free(s);
		if (ok != 0)
			goto cleanup;
	}
	*created_out = 1;
	rc = 0;
cleanup:
	free(snap_dir);
	fact_list_free(&facts);
	jv_free(session);
	return rc;
}
