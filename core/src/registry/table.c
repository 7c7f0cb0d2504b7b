/*
 * The VM table of the task registry (registry.h): reading its lines and
 * cells, validating it, and the add and remove transforms that
 * registry_update() applies under its lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/registry.h"

static const char *const header_cells[REGISTRY_CELLS] = {"Machine", "OS",      "Task Name",
                                                         "Agent",   "Project", "Start Date"};

/* ---- lines and cells ----------------------------------------------------------- */

/* One line of the file: text[start, text_end) without its line break,
 * text[start, end) with it. */
typedef struct line {
	size_t start, text_end, end;
} line;

typedef struct lines {
	line *items;
	size_t count;
} lines;

static int split_lines(const char *text, size_t len, lines *out)
{
	out->items = NULL;
	out->count = 0;
	size_t capacity = 0;
	size_t pos = 0;
	while (pos < len) {
		size_t start = pos;
		while (pos < len && text[pos] != '\n' && text[pos] != '\r')
			pos++;
		size_t text_end = pos;
		if (pos < len && text[pos] == '\r')
			pos++;
		if (pos < len && text[pos] == '\n' && (pos == text_end || text[pos - 1] == '\r'))
			pos++;
		if (out->count == capacity) {
			size_t grown = capacity ? capacity * 2 : 64;
			line *items = realloc(out->items, grown * sizeof *items);
			if (items == NULL)
				return -1;
			out->items = items;
			capacity = grown;
		}
		out->items[out->count++] = (line){start, text_end, pos};
	}
	return 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n';
}

/* A cell range inside the text. */
typedef struct cell {
	size_t start, end;
} cell;

#define MAX_PARSED_CELLS 64

/* Splits a table line "| a | b |" into trimmed cells. Returns the number of
 * cells, or -1 when the line is not a table row (too many cells count as
 * not a row of ours: -2). */
static int parse_cells(const char *text, const line *l, cell *cells)
{
	size_t a = l->start, b = l->text_end;
	while (a < b && is_space(text[a]))
		a++;
	while (b > a && is_space(text[b - 1]))
		b--;
	if (b - a < 2 || text[a] != '|' || text[b - 1] != '|')
		return -1;
	int n = 0;
	size_t cell_start = a + 1;
	for (size_t i = a + 1; i < b; i++) {
		if (text[i] != '|')
			continue;
		if (n == MAX_PARSED_CELLS)
			return -2;
		size_t s = cell_start, e = i;
		while (s < e && is_space(text[s]))
			s++;
		while (e > s && is_space(text[e - 1]))
			e--;
		cells[n++] = (cell){s, e};
		cell_start = i + 1;
	}
	return n;
}

static bool cell_is(const char *text, const cell *c, const char *want)
{
	size_t n = strlen(want);
	return c->end - c->start == n && memcmp(text + c->start, want, n) == 0;
}

static bool line_starts_with(const char *text, const line *l, const char *prefix)
{
	size_t n = strlen(prefix);
	return l->text_end - l->start >= n && memcmp(text + l->start, prefix, n) == 0;
}

/* ^## Using VMs\s*$ */
static bool is_section_line(const char *text, const line *l)
{
	if (!line_starts_with(text, l, "## Using VMs"))
		return false;
	for (size_t i = l->start + strlen("## Using VMs"); i < l->text_end; i++)
		if (!is_space(text[i]))
			return false;
	return true;
}

/* ^#{1,2} : the next "#" or "##" heading ends the section. */
static bool is_section_end(const char *text, const line *l)
{
	return line_starts_with(text, l, "# ") || line_starts_with(text, l, "## ");
}

/* ^:?-{2,}:?$ */
static bool is_separator_cell(const char *text, const cell *c)
{
	size_t s = c->start, e = c->end;
	if (s < e && text[s] == ':')
		s++;
	if (e > s && text[e - 1] == ':')
		e--;
	if (e - s < 2)
		return false;
	for (size_t i = s; i < e; i++)
		if (text[i] != '-')
			return false;
	return true;
}

static bool line_trimmed_starts_with_pipe(const char *text, const line *l)
{
	size_t a = l->start;
	while (a < l->text_end && is_space(text[a]))
		a++;
	return a < l->text_end && text[a] == '|';
}

/* The parsed VM table: its data rows (indices into the lines), where a new
 * row goes, and the file's line-ending style. */
typedef struct vm_table {
	lines lines;
	size_t *rows;
	size_t row_count;
	size_t insertion;
	const char *newline;
} vm_table;

static void table_free(vm_table *t)
{
	free(t->lines.items);
	free(t->rows);
	memset(t, 0, sizeof *t);
}

static int parse_table(const char *text, size_t len, vm_table *t, char *errbuf, size_t errlen)
{
	memset(t, 0, sizeof *t);
	if (split_lines(text, len, &t->lines) != 0) {
		snprintf(errbuf, errlen, "out of memory reading the registry");
		return -1;
	}
	size_t n = t->lines.count;
	line *ls = t->lines.items;
	size_t sections = 0, begin = 0;
	for (size_t i = 0; i < n; i++) {
		if (is_section_line(text, &ls[i])) {
			sections++;
			begin = i;
		}
	}
	if (sections != 1) {
		snprintf(errbuf, errlen, "expected exactly one '## Using VMs' section, found %zu", sections);
		goto fail;
	}
	size_t end = n;
	for (size_t i = begin + 1; i < n; i++) {
		if (is_section_end(text, &ls[i])) {
			end = i;
			break;
		}
	}
	cell cells[MAX_PARSED_CELLS];
	size_t headers = 0, header = 0;
	for (size_t i = begin + 1; i < end; i++) {
		if (parse_cells(text, &ls[i], cells) != REGISTRY_CELLS)
			continue;
		bool match = true;
		for (int c = 0; c < REGISTRY_CELLS && match; c++)
			match = cell_is(text, &cells[c], header_cells[c]);
		if (match) {
			headers++;
			header = i;
		}
	}
	if (headers != 1) {
		snprintf(errbuf, errlen,
		         "expected exactly one VM table header row (| Machine | OS | Task Name | Agent | "
		         "Project | "
		         "Start Date |) under '## Using VMs', found %zu",
		         headers);
		goto fail;
	}
	if (header + 1 >= end || parse_cells(text, &ls[header + 1], cells) != REGISTRY_CELLS) {
		snprintf(errbuf, errlen,
		         "malformed VM table separator: the line after the header must have six cells");
		goto fail;
	}
	for (int c = 0; c < REGISTRY_CELLS; c++) {
		if (!is_separator_cell(text, &cells[c])) {
			snprintf(errbuf, errlen,
			         "malformed VM table separator: each cell must match ^:?-{2,}:?$");
			goto fail;
		}
	}
	t->rows = calloc(n ? n : 1, sizeof *t->rows);
	if (t->rows == NULL) {
		snprintf(errbuf, errlen, "out of memory reading the registry");
		goto fail;
	}
	size_t last = header + 1;
	for (size_t i = header + 2; i < end && line_trimmed_starts_with_pipe(text, &ls[i]); i++) {
		if (parse_cells(text, &ls[i], cells) != REGISTRY_CELLS) {
			snprintf(errbuf, errlen,
			         "malformed VM table row on line %zu: a row must have exactly six cells",
			         i + 1);
			goto fail;
		}
		t->rows[t->row_count++] = i;
		last = i;
	}
	t->insertion = ls[last].end;
	t->newline = memmem(text, len, "\r\n", 2) ? "\r\n" : "\n";
	return 0;
fail:
	table_free(t);
	return -1;
}

int registry_validate_text(const char *text, size_t len, char *errbuf, size_t errlen)
{
	vm_table t;
	if (parse_table(text, len, &t, errbuf, errlen) != 0)
		return -1;
	table_free(&t);
	return 0;
}

int registry_check_file(const char *path, char *errbuf, size_t errlen)
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(errbuf, errlen, "must name an existing regular file");
		return -1;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(errbuf, errlen, "cannot be read: %s", strerror(errno));
		return -1;
	}
	char *data = NULL;
	size_t len = 0, cap = 0;
	int rc = 0;
	for (;;) {
		if (len + 65536 > cap) {
			if (cap >= REGISTRY_MAX_BYTES) {
				snprintf(errbuf, errlen,
				         "is larger than %u bytes, too large for a task registry",
				         REGISTRY_MAX_BYTES);
				rc = -1;
				goto cleanup;
			}
			size_t grown = cap ? cap * 2 : 65536 * 2;
			char *more = realloc(data, grown + 1);
			if (more == NULL) {
				snprintf(errbuf, errlen, "cannot be read: out of memory");
				rc = -1;
				goto cleanup;
			}
			data = more;
			cap = grown;
		}
		ssize_t n = read(fd, data + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(errbuf, errlen, "cannot be read: %s", strerror(errno));
			rc = -1;
			goto cleanup;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	char why[512];
	if (registry_validate_text(data ? data : "", len, why, sizeof why) != 0) {
		snprintf(
		    errbuf, errlen,
		    "must hold a valid VM table (a single '## Using VMs' section with the header | Machine | "
		    "OS | Task Name | Agent | Project | Start Date |): %s",
		    why);
		rc = -1;
	}
cleanup:
	free(data);
	close(fd);
	return rc;
}

/* ---- add and remove ---------------------------------------------------------------- */

static int check_row(const registry_row *row, char *errbuf, size_t errlen)
{
	for (int c = 0; c < REGISTRY_CELLS; c++) {
		const char *v = row->cells[c];
		size_t n = v ? strlen(v) : 0;
		bool ok = n > 0 && !is_space(v[0]) && !is_space(v[n - 1]);
		for (size_t i = 0; ok && i < n; i++) {
			unsigned char ch = (unsigned char)v[i];
			ok = ch != '|' && ch >= 0x20 && ch != 0x7f;
		}
		if (!ok) {
			snprintf(errbuf, errlen,
			         "registry cell %s must be non-empty trimmed text without '|' or control "
			         "characters",
			         header_cells[c]);
			return -1;
		}
	}
	return 0;
}

/* Rows whose Task Name equals the row's: how many, and whether the only one
 * is identical. */
static size_t matching_rows(const char *text, const vm_table *t, const registry_row *row, size_t *first_out,
                            bool *identical_out)
{
	size_t matches = 0;
	*identical_out = false;
	cell cells[MAX_PARSED_CELLS];
	for (size_t r = 0; r < t->row_count; r++) {
		const line *l = &t->lines.items[t->rows[r]];
		parse_cells(text, l, cells);
		if (!cell_is(text, &cells[2], row->cells[2]))
			continue;
		if (matches++ == 0) {
			*first_out = t->rows[r];
			bool same = true;
			for (int c = 0; c < REGISTRY_CELLS && same; c++)
				same = cell_is(text, &cells[c], row->cells[c]);
			*identical_out = same;
		}
	}
	return matches;
}

/* The table of `text` and the rows naming the task of `row` (matching_rows). */
typedef struct row_match {
	vm_table table;
	size_t count;   /* rows whose Task Name is the row's */
	size_t first;   /* the first of them */
	bool identical; /* the only one equals the row in every cell */
} row_match;

/* One change of the table once the task's rows are found: its outcome, and
 * the new text in `out` when REGISTRY_CHANGED. */
typedef registry_outcome (*row_edit)(const char *text, size_t len, const row_match *m,
                                     const registry_row *row, strbuf *out, char *errbuf, size_t errlen);

/* Parses `text`, finds the rows of `ctx`'s task and hands them to `edit`. */
static registry_outcome edit_table(const char *text, size_t len, strbuf *out, const void *ctx, row_edit edit,
                                   char *errbuf, size_t errlen)
{
	const registry_row *row = ctx;
	row_match m = {.first = 0, .count = 0, .identical = false};
	if (parse_table(text, len, &m.table, errbuf, errlen) != 0)
		return REGISTRY_INVALID;
	m.count = matching_rows(text, &m.table, row, &m.first, &m.identical);
	registry_outcome outcome = edit(text, len, &m, row, out, errbuf, errlen);
	table_free(&m.table);
	return outcome;
}

/* Adds the row before the table's end; the same row again changes nothing,
 * another row of the task is a conflict. */
static registry_outcome add_row(const char *text, size_t len, const row_match *m, const registry_row *row,
                                strbuf *out, char *errbuf, size_t errlen)
{
	if (m->count == 1 && m->identical)
		return REGISTRY_UNCHANGED;
	if (m->count > 0) {
		snprintf(errbuf, errlen, "task %s is already registered by a different owner or duplicated",
		         row->cells[2]);
		return REGISTRY_CONFLICT;
	}
	size_t at = m->table.insertion;
	strbuf_append(out, text, at);
	if (at > 0 && text[at - 1] != '\n' && text[at - 1] != '\r')
		strbuf_puts(out, m->table.newline);
	strbuf_puts(out, "|");
	for (int c = 0; c < REGISTRY_CELLS; c++)
		strbuf_printf(out, " %s |", row->cells[c]);
	strbuf_puts(out, m->table.newline);
	strbuf_append(out, text + at, len - at);
	return REGISTRY_CHANGED;
}

/* Removes the task's one row, which must equal `row`; no row changes nothing. */
static registry_outcome remove_row(const char *text, size_t len, const row_match *m, const registry_row *row,
                                   strbuf *out, char *errbuf, size_t errlen)
{
	if (m->count == 0)
		return REGISTRY_UNCHANGED;
	if (m->count != 1 || !m->identical) {
		snprintf(errbuf, errlen,
		         "refusing to remove task %s from the registry: ownership does not match",
		         row->cells[2]);
		return REGISTRY_CONFLICT;
	}
	const line *l = &m->table.lines.items[m->first];
	strbuf_append(out, text, l->start);
	strbuf_append(out, text + l->end, len - l->end);
	return REGISTRY_CHANGED;
}

static registry_outcome add_transform(const char *text, size_t len, strbuf *out, void *ctx, char *errbuf,
                                      size_t errlen)
{
	return edit_table(text, len, out, ctx, add_row, errbuf, errlen);
}

static registry_outcome remove_transform(const char *text, size_t len, strbuf *out, void *ctx, char *errbuf,
                                         size_t errlen)
{
	return edit_table(text, len, out, ctx, remove_row, errbuf, errlen);
}

registry_outcome registry_add(const registry_target *target, const registry_row *row, char *errbuf,
                              size_t errlen)
{
	if (check_row(row, errbuf, errlen) != 0)
		return REGISTRY_INVALID;
	return registry_update(target, add_transform, (void *)row, errbuf, errlen);
}

registry_outcome registry_remove(const registry_target *target, const registry_row *row, char *errbuf,
                                 size_t errlen)
{
	if (check_row(row, errbuf, errlen) != 0)
		return REGISTRY_INVALID;
	return registry_update(target, remove_transform, (void *)row, errbuf, errlen);
}
