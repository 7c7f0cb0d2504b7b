/*
 * receiver/journal.c — see journal.h.
 */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsx.h"
#include "relay_support/utf8.h"

int journal_open(journal *j, const char *root, const char *session_id, int *damaged_out, rerr *err)
{
	struct stat st;
	int fd = -1, rc = -1;
	size_t tail_len;
	char *tail = NULL;
	ssize_t n;
	size_t start, end;
	jv *line = NULL;
	int64_t seq;
	const char *at, *type, *sid;
	*damaged_out = 0;
	j->path = xasprintf("%s/%s", root, JOURNAL_REL);
	j->session_id = xstrdup(session_id);
	j->next_seq = 0;
	if (path_walk_check(root, JOURNAL_REL, 0, NULL, err) != 0) {
		*damaged_out = 1;
		err_prefix(err, "damaged journal");
		goto cleanup;
	}
	fd = open(j->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		err_set(err, "cannot open the journal %s: %s", j->path, strerror(errno));
		goto cleanup;
	}
	if (!S_ISREG(st.st_mode) || st.st_size == 0) {
		*damaged_out = 1;
		err_set(err, "damaged journal: %s is empty or not a regular file", j->path);
		goto cleanup;
	}
	tail_len = (uint64_t)st.st_size > JOURNAL_LINE_MAX + 1 ? JOURNAL_LINE_MAX + 1 : (size_t)st.st_size;
	tail = xmalloc(tail_len + 1);
	n = pread(fd, tail, tail_len, st.st_size - (off_t)tail_len);
	if (n != (ssize_t)tail_len) {
		err_set(err, "cannot read the journal %s", j->path);
		goto cleanup;
	}
	tail[tail_len] = '\0';
	if (tail[tail_len - 1] != '\n') {
		*damaged_out = 1;
		err_set(err, "damaged journal: the last line is not terminated");
		goto cleanup;
	}
	end = tail_len - 1;
	start = end;
	while (start > 0 && tail[start - 1] != '\n')
		start--;
	if (start == 0 && tail_len < (size_t)st.st_size) {
		*damaged_out = 1;
		err_set(err, "damaged journal: the last line is longer than 64 KiB");
		goto cleanup;
	}
	line = jv_parse(tail + start, end - start, err);
	if (!line || line->type != JV_OBJECT || !jv_get_int(line, "seq", &seq) || seq < 1 ||
	    !(at = jv_get_str(line, "at")) || !(type = jv_get_str(line, "type")) ||
	    !(sid = jv_get_str(line, "sessionId")) || strcmp(sid, session_id) != 0) {
		*damaged_out = 1;
		err_set(err, "damaged journal: the last line is not an event of recording %s", session_id);
		goto cleanup;
	}
	j->next_seq = seq + 1;
	rc = 0;
cleanup:
	if (rc != 0)
		journal_close(j);
	if (fd >= 0)
		close(fd);
	free(tail);
	jv_free(line);
	return rc;
}

void journal_close(journal *j)
{
	free(j->path);
	free(j->session_id);
	j->path = NULL;
	j->session_id = NULL;
}

/* Copy of v with every string cut to max_chars characters. */
static jv *cut_strings(const jv *v, size_t max_chars)
{
	jv *c;
	size_t i;
	if (v->type == JV_STRING) {
		size_t n = rs_utf8_prefix_bytes(v->str, v->str_len, max_chars);
		return jv_strn(v->str, n);
	}
	if (v->type != JV_ARRAY && v->type != JV_OBJECT)
		return jv_copy(v);
	c = v->type == JV_ARRAY ? jv_array() : jv_object();
	for (i = 0; i < v->count; i++) {
		if (v->type == JV_ARRAY)
			jv_push(c, cut_strings(v->items[i], max_chars));
		else
			jv_set(c, v->keys[i], cut_strings(v->items[i], max_chars));
	}
	return c;
}

int journal_append(journal *j, const char *type, jv *fields, rerr *err)
{
	static const size_t cuts[] = {0, 4096, 512, 64};
	jv *event = jv_object();
	char at[32];
	buf line;
	size_t i, attempt;
	int fd = -1, rc = -1;
	buf_init(&line);
	timestamp_now(at);
	jv_set_int(event, "seq", j->next_seq);
	jv_set_str(event, "at", at);
	jv_set_str(event, "type", type);
	jv_set_str(event, "sessionId", j->session_id);
	for (i = 0; fields && i < fields->count; i++)
		jv_set(event, fields->keys[i], jv_copy(fields->items[i]));
	for (attempt = 0; attempt < sizeof(cuts) / sizeof(cuts[0]); attempt++) {
		line.len = 0;
		if (attempt == 0) {
			jv_write(&line, event, 0);
		} else {
			jv *cut = cut_strings(event, cuts[attempt]);
			jv_set_bool(cut, "truncated", 1);
			jv_write(&line, cut, 0);
			jv_free(cut);
		}
		buf_putc(&line, '\n');
		if (line.len <= JOURNAL_LINE_MAX)
			break;
	}
	if (line.len > JOURNAL_LINE_MAX) {
		err_set(err, "journal line of type %s exceeds 64 KiB", type);
		goto cleanup;
	}
	fd = open(j->path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		err_set(err, "cannot open the journal %s: %s", j->path, strerror(errno));
		goto cleanup;
	}
	{
		ssize_t n;
		do
			n = write(fd, line.data, line.len);
		while (n < 0 && errno == EINTR);
		if (n != (ssize_t)line.len) {
			err_set(err, "cannot append to the journal %s: %s", j->path,
			        n < 0 ? strerror(errno) : "short write");
			goto cleanup;
		}
	}
	if (fsx_fsync(fd) != 0) {
		err_set(err, "cannot sync the journal %s: %s", j->path, strerror(errno));
		goto cleanup;
	}
	j->next_seq++;
	rc = 0;
cleanup:
	if (fd >= 0)
		close(fd);
	buf_free(&line);
	jv_free(event);
	jv_free(fields);
	return rc;
}

int journal_has_completion(const journal *j, const char *execution_id, int *found_out, rerr *err)
{
	buf text;
	size_t pos = 0;
	int rc = -1;
	*found_out = 0;
	buf_init(&text);
	if (read_file_limited(j->path, (size_t)1 << 40, &text, NULL, NULL, err) != 0)
		goto cleanup;
	while (pos < text.len) {
		char *nl = memchr(text.data + pos, '\n', text.len - pos);
		size_t end = nl ? (size_t)(nl - text.data) : text.len;
		size_t len = end - pos;
		if (len && memmem(text.data + pos, len, "\"execution-completion\"", 22) &&
		    memmem(text.data + pos, len, execution_id, strlen(execution_id))) {
			rerr ignored;
			jv *ev = jv_parse(text.data + pos, len, &ignored);
			const char *type = jv_get_str(ev, "type");
			const char *id = jv_get_str(ev, "executionId");
			if (type && id && strcmp(type, "execution-completion") == 0 &&
			    strcmp(id, execution_id) == 0)
				*found_out = 1;
			jv_free(ev);
			if (*found_out)
				break;
		}
		pos = end + 1;
	}
	rc = 0;
cleanup:
	buf_free(&text);
	return rc;
}
