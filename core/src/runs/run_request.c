/* The host side of relay_script (guest.md §6, §13-§15); see run_request.h. */
#include "runs/run_request.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/tools.h"
#include "session/events.h"
#include "guestio/guest_io.h"
#include "runs/host_paths.h"
#include "delivery/image_delivery.h"
#include "delivery/step_downloads.h"
#include "call/call.h"
#include "receiver_protocol.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"
#include "util/timefmt.h"

#define RECEIPT_MAX_BYTES      ((size_t)RECEIVER_RECEIPT_MAX_BYTES)
#define FRAME_MAX_OUTPUT_BYTES ((size_t)1 << 20)
#define STDERR_TAIL_BYTES      600

/* ---- parsing the call ------------------------------------------------------------ */

static const char *language_ext(const char *language)
{
	if (strcmp(language, "shell") == 0)
		return "sh";
	if (strcmp(language, "javascript") == 0)
		return "js";
	if (strcmp(language, "typescript") == 0)
		return "ts";
	return "py";
}

void run_call_free(run_call *c)
{
	if (c == NULL)
		return;
	free(c->script);
	free(c->local_path);
	free(c->local_abs);
	free(c->reason);
	json_object_put(c->step);
	json_object_put(c->snapshots);
	json_object_put(c->args);
	memset(c, 0, sizeof *c);
}

static bool step_id_used(manager *m, guest *g, const char *id)
{
	bool used = false;
	manager_lock(m);
	size_t n = g->used_step_ids ? json_object_array_length(g->used_step_ids) : 0;
	for (size_t i = 0; i < n && !used; i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(g->used_step_ids, i));
		used = s && strcmp(s, id) == 0;
	}
	manager_unlock(m);
	return used;
}

tool_result *run_call_parse(manager *m, guest *g, json_object *args, run_call *out)
{
	memset(out, 0, sizeof *out);
	const char *language = jsonx_get_str(args, "language");
	snprintf(out->language, sizeof out->language, "%s", language ? language : "shell");
	out->ext = language_ext(out->language);
	jsonx_get_bool(args, "inline", &out->is_inline);
	jsonx_get_bool(args, "diagnostic", &out->diagnostic);
	out->timeout_ms = RUN_DEFAULT_TIMEOUT_MS;
	jsonx_get_int(args, "timeoutMs", &out->timeout_ms);
	const char *reason = jsonx_get_str(args, "reason");
	out->reason = reason ? strdup(reason) : NULL;
	json_object *step = jsonx_get_obj(args, "step");
	out->step = step ? json_object_get(step) : NULL;
	json_object *snapshots = jsonx_get_obj(args, "snapshots");
	out->snapshots = snapshots ? json_object_get(snapshots) : NULL;
	out->args = json_object_get(args);
	if (out->is_inline) {
		json_object *code = NULL;
		json_object_object_get_ex(args, "code", &code);
		size_t len = (size_t)json_object_get_string_len(code);
		out->script = malloc(len + 1);
		if (out->script == NULL)
			return guest_error(m, g, NULL, "internal",
			                   "out of memory reading the script; nothing was sent");
		memcpy(out->script, json_object_get_string(code), len);
		out->script[len] = '\0';
		out->script_len = len;
	} else {
		const char *given = jsonx_get_str(args, "localPath");
		host_path p;
		char why[1024];
		if (host_path_resolve(m->settings->project, m->settings->project_given, given, HOST_PATH_FILE,
		                      &p, why, sizeof why) != 0)
			return guest_error(
			    m, g, NULL, "path-refused",
			    "relay_script localPath refused: %s; nothing was sent to the guest", why);
		size_t max = out->diagnostic ? RUN_DIAGNOSTIC_MAX_BYTES : RUN_SCRIPT_FILE_MAX_BYTES;
		bool too_large = false;
		int rc = host_path_read(m->settings->project, &p, max, &out->script, &out->script_len,
		                        &too_large, why, sizeof why);
		out->local_path = strdup(given);
		out->local_abs = strdup(p.path);
		uint64_t bytes = p.bytes;
		host_path_free(&p);
		if (rc != 0 && too_large)
			return guest_error(
			    m, g, NULL, "invalid-input",
			    "Invalid relay_script input: /localPath is %llu bytes; %s at most %zu bytes",
			    (unsigned long long)bytes,
			    out->diagnostic ? "a diagnostic script travels as one argument and may have"
			                    : "a script file may have",
			    max);
		if (rc != 0)
			return guest_error(
			    m, g, NULL, "path-refused",
			    "relay_script localPath refused: %s; nothing was sent to the guest", why);
	}
	if (!out->diagnostic && out->step) {
		const char *id = jsonx_get_str(out->step, "id");
		if (id && step_id_used(m, g, id))
			return guest_error(
			    m, g, NULL, "invalid-input",
			    "Invalid relay_script input: /step/id %s was already used by an earlier run "
			    "on %s; step ids are never reused, choose another",
			    id, g->name);
	}
	return NULL;
}

/* ---- step derivation (guest.md §14) ----------------------------------------------- */

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

/* The step of a recorded run: the caller's fields over the derived ones.
 * Takes the run number under the lock (a derived id that was used before
 * moves on to the next number). New reference; *run_seq_out the number. */
static json_object *derive_step(manager *m, guest *g, const run_call *c, const char *title,
                                int64_t *run_seq_out)
{
	const char *given_id = c->step ? jsonx_get_str(c->step, "id") : NULL;
	char id[160];
	manager_lock(m);
	int64_t seq = g->run_seq;
	for (;;) {
		seq++;
		if (given_id) {
			snprintf(id, sizeof id, "%s", given_id);
			break;
		}
		snprintf(id, sizeof id, "%s-%lld", c->language, (long long)seq);
		bool used = false;
		size_t n = json_object_array_length(g->used_step_ids);
		for (size_t i = 0; i < n && !used; i++) {
			const char *s =
			    json_object_get_string(json_object_array_get_idx(g->used_step_ids, i));
			used = s && strcmp(s, id) == 0;
		}
		if (!used)
			break;
	}
	g->run_seq = seq;
	guest_save(g);
	manager_unlock(m);
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

/* The request's snapshots block (guest.md §6.1, §10): {afterIntervalMs,
 * group}. *after_ms_out is the interval the exec limit adds (0 when none). */
static json_object *snapshot_block(const run_call *c, int64_t *after_ms_out, const char **phase_out)
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

/* ---- host files ------------------------------------------------------------------ */

/* Writes <evidence>/host/<sub>/<name> durably (0600, folders 0700). */
static relay_status write_host_file(manager *m, guest *g, const char *evidence, const char *sub,
                                    const char *name, const void *data, size_t len, relay_error *err)
{
	char errbuf[512];
	if (guest_ensure_evidence_dir(m, g, errbuf, sizeof errbuf) != 0)
		return relay_error_set(err, RELAY_E_IO, 0, "%s", errbuf);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/host/%s", evidence, sub);
	relay_status st = fs_mkdir_p(strbuf_str(&sb), 0700, err);
	if (st == RELAY_OK) {
		strbuf_printf(&sb, "/%s", name);
		st = fs_write_durable(strbuf_str(&sb), data, len, 0600, err);
	}
	strbuf_free(&sb);
	return st;
}

static relay_status write_host_json(manager *m, guest *g, const char *evidence, const char *sub,
                                    const char *name, const json_object *obj, relay_error *err)
{
	char *text = jsonx_to_string(obj, JSONX_PRETTY);
	if (text == NULL)
		return relay_error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, text);
	strbuf_putc(&sb, '\n');
	free(text);
	relay_status st = write_host_file(m, g, evidence, sub, name, sb.data, sb.len, err);
	strbuf_free(&sb);
	return st;
}

static void now_iso_millis(char out[25])
{
	time_format_iso_millis(clock_now_ms(), out);
}

/* ---- outcomes --------------------------------------------------------------------- */

static json_object *outcome_uncertain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_object *outcome_uncertain(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	json_object *o = json_object_new_object();
	jsonx_add_str(o, "kind", "uncertain");
	jsonx_add_str(o, "diagnostic", strbuf_str(&sb));
	strbuf_free(&sb);
	return o;
}

static const char *signal_name(int sig, char buf[32])
{
	const char *abbrev = sigabbrev_np(sig);
	if (abbrev)
		snprintf(buf, 32, "SIG%s", abbrev);
	else
		snprintf(buf, 32, "%d", sig);
	return buf;
}

/* executionFailed (images.md §8.2): not completed, or a nonzero code, or a signal. */
static bool execution_failed(const json_object *outcome)
{
	const char *kind = jsonx_get_str(outcome, "kind");
	if (kind == NULL || strcmp(kind, "completed") != 0)
		return true;
	json_object *status = jsonx_get_obj(outcome, "exitStatus");
	int64_t code = -1;
	json_object *sig = NULL;
	json_object_object_get_ex(status, "signal", &sig);
	if (!jsonx_get_int(status, "code", &code) || code != 0)
		return true;
	return sig != NULL && !json_object_is_type(sig, json_type_null);
}

static const char *error_code_for(const json_object *outcome)
{
	const char *kind = jsonx_get_str(outcome, "kind");
	if (kind && strcmp(kind, "refused") == 0)
		return "execution-refused";
	if (kind && strcmp(kind, "completed") == 0)
		return "execution-failed";
	return "execution-uncertain";
}

/* The error message of a failed execution. */
static char *failure_message(const json_object *outcome, const char *execution_id)
{
	strbuf sb = STRBUF_INIT;
	const char *kind = jsonx_get_str(outcome, "kind");
	const char *diag = jsonx_get_str(outcome, "diagnostic");
	if (kind && strcmp(kind, "refused") == 0) {
		strbuf_printf(
		    &sb,
		    "The receiver refused run %s before it started: %s. Nothing ran; fix the cause and "
		    "submit a new run.",
		    execution_id, diag ? diag : "no diagnostic");
	} else if (kind && strcmp(kind, "completed") == 0) {
		json_object *status = jsonx_get_obj(outcome, "exitStatus");
		int64_t code = 0;
		const char *sig = jsonx_get_str(status, "signal");
		if (sig)
			strbuf_printf(&sb, "Run %s ended by signal %s; the guest is kept.", execution_id,
			              sig);
		else if (jsonx_get_int(status, "code", &code))
			strbuf_printf(&sb, "Run %s exited with status %lld; the guest is kept.", execution_id,
			              (long long)code);
		else
			strbuf_printf(&sb, "Run %s ended without an exit status; the guest is kept.",
			              execution_id);
	} else {
		strbuf_printf(
		    &sb,
		    "The outcome of run %s is uncertain: %s. It is never replayed; inspect the guest "
		    "(a diagnostic shell script) and submit a new operation.",
		    execution_id, diag ? diag : "no diagnostic");
	}
	return strbuf_detach(&sb, NULL);
}

/* ---- the receipt ------------------------------------------------------------------ */

/* NULL when the receipt is well formed for this run, else the reason
 * (guest.md §15 step 5). */
static const char *receipt_problem(const json_object *receipt, const char *execution_id,
                                   const char *request_sha)
{
	if (!json_object_is_type((json_object *)receipt, json_type_object))
		return "it is not a JSON object";
	const char *id = jsonx_get_str(receipt, "executionId");
	if (id == NULL || strcmp(id, execution_id) != 0)
		return "its executionId is not this run's";
	const char *sha = jsonx_get_str(receipt, "requestSha256");
	if (request_sha && (sha == NULL || strcmp(sha, request_sha) != 0))
		return "its requestSha256 is not the SHA-256 of the request the host sent";
	json_object *outcome = jsonx_get_obj(receipt, "outcome");
	const char *kind = jsonx_get_str(outcome, "kind");
	if (kind == NULL)
		return "it has no outcome kind";
	if (strcmp(kind, "completed") == 0) {
		if (!json_object_is_type(jsonx_get_obj(outcome, "exitStatus"), json_type_object))
			return "a completed outcome carries no exitStatus";
	} else if (strcmp(kind, "refused") == 0 || strcmp(kind, "uncertain") == 0) {
		if (jsonx_get_str(outcome, "diagnostic") == NULL)
			return "a refused or uncertain outcome carries no diagnostic";
	} else {
		return "its outcome kind is none of completed, refused, uncertain";
	}
	json_object *ev = jsonx_get_obj(receipt, "imageEvidence");
	if (ev && !json_object_is_type(jsonx_get_array(ev, "snapshots"), json_type_array))
		return "its imageEvidence has no snapshots list";
	return NULL;
}

/* Checks the frame's receipt fact: the path of this run's receipt, a
 * SHA-256 and a size within bounds. */
static bool receipt_fact_ok(json_object *frame_receipt, const char *execution_id, const char **sha_out,
                            int64_t *bytes_out)
{
	const char *path = jsonx_get_str(frame_receipt, "path");
	const char *sha = jsonx_get_str(frame_receipt, "sha256");
	int64_t bytes = -1;
	strbuf expect = STRBUF_INIT;
	strbuf_printf(&expect, "state/receiver/receipts/%s.json", execution_id);
	bool ok = path && strcmp(path, strbuf_str(&expect)) == 0 && sha && sha256_hex_valid(sha) &&
	          jsonx_get_int(frame_receipt, "bytes", &bytes) && bytes > 0 &&
	          (uint64_t)bytes <= RECEIPT_MAX_BYTES;
	strbuf_free(&expect);
	*sha_out = sha;
	*bytes_out = bytes;
	return ok;
}

/* Checks the receipt bytes that came home (against the frame's fact, then
 * as a receipt) and writes them durably to host/receiver-receipts/<id>.json.
 * RELAY_OK with *receipt_out; otherwise the reason in err. */
static relay_status place_receipt(guest_io *io, json_object *frame_receipt, const char *execution_id,
                                  const char *request_sha, const char *data, size_t len, const char *how,
                                  json_object **receipt_out, char sha_out[65], int64_t *bytes_out,
                                  relay_error *err)
{
	*receipt_out = NULL;
	const char *sha = NULL;
	int64_t bytes = -1;
	if (!receipt_fact_ok(frame_receipt, execution_id, &sha, &bytes))
		return relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                       "the receiver's frame names no valid receipt fact");
	sha256_buffer_hex(data, len, sha_out);
	if ((int64_t)len != bytes || strcmp(sha_out, sha) != 0)
		return relay_error_set(
		    err, RELAY_E_INTEGRITY, 0,
		    "the receipt did not arrive intact (frame: %lld bytes, host: %zu bytes)",
		    (long long)bytes, len);
	char why[160];
	json_object *receipt = jsonx_parse(data, len, NULL, why, sizeof why);
	const char *problem = receipt ? receipt_problem(receipt, execution_id, request_sha) : why;
	if (problem) {
		json_object_put(receipt);
		return relay_error_set(err, RELAY_E_PROTOCOL, 0, "the receipt is not valid: %s", problem);
	}
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/host/receiver-receipts", io->evidence);
	char *dir = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s.json", dir, execution_id);
	char *final = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", io->root, jsonx_get_str(frame_receipt, "path"));
	char *remote = strbuf_detach(&sb, NULL);
	relay_status st = fs_mkdir_p(dir, 0700, err);
	if (st == RELAY_OK)
		st = fs_write_durable(final, data, len, 0600, err);
	if (st == RELAY_OK) {
		gio_note_transfer(io, "pull", "receipt", final, remote, (uint64_t)len, sha_out, 1, how);
		*bytes_out = (int64_t)len;
		*receipt_out = receipt;
	} else {
		json_object_put(receipt);
	}
	free(dir);
	free(final);
	free(remote);
	return st;
}

/* Pulls the receipt named by the frame and places it (place_receipt). */
static relay_status pull_receipt(guest_io *io, json_object *frame_receipt, const char *execution_id,
                                 const char *request_sha, json_object **receipt_out, char sha_out[65],
                                 int64_t *bytes_out, relay_error *err)
{
	*receipt_out = NULL;
	const char *sha = NULL;
	int64_t bytes = -1;
	if (!receipt_fact_ok(frame_receipt, execution_id, &sha, &bytes))
		return relay_error_set(err, RELAY_E_PROTOCOL, 0,
		                       "the receiver's frame names no valid receipt fact");
	char *tmp = gio_scratch_path(io, "receipt-", ".json", err);
	if (tmp == NULL)
		return err->code;
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", io->root, jsonx_get_str(frame_receipt, "path"));
	char *remote = strbuf_detach(&sb, NULL);
	char *data = NULL;
	size_t len = 0;
	relay_status st = gio_pull(io, remote, tmp, 0, "the run's receipt", err);
	if (st == RELAY_OK)
		st = fs_read_file(tmp, RECEIPT_MAX_BYTES, &data, &len, err);
	if (st == RELAY_OK)
		st = place_receipt(io, frame_receipt, execution_id, request_sha, data, len, "transport",
		                   receipt_out, sha_out, bytes_out, err);
	unlink(tmp);
	free(tmp);
	free(remote);
	free(data);
	return st;
}

/* ---- a run in one round trip (guest.md §16.2) --------------------------------------- */

/* The standard input of `receiver run --stdin` (guest/receiver_protocol.h):
 * the header line naming both parts, then the request and the script. */
static char *stdin_parts_text(const char *request_rel, const char *request, size_t request_len,
                              const char *request_sha, const char *script_rel, const char *script,
                              size_t script_len, const char *script_sha, size_t *len_out)
{
	json_object *header = json_object_new_object();
	json_object *parts = json_object_new_array();
	jsonx_add_int(header, "protocol", RECEIVER_PROTOCOL_VERSION);
	const struct {
		const char *name, *rel, *sha;
		size_t len;
	} each[] = {{RECEIVER_PART_REQUEST, request_rel, request_sha, request_len},
	            {RECEIVER_PART_SCRIPT, script_rel, script_sha, script_len}};
	for (size_t i = 0; i < 2; i++) {
		json_object *part = json_object_new_object();
		jsonx_add_str(part, "name", each[i].name);
		jsonx_add_str(part, "path", each[i].rel);
		jsonx_add_int(part, "bytes", (int64_t)each[i].len);
		jsonx_add_str(part, "sha256", each[i].sha);
		json_object_array_add(parts, part);
	}
	jsonx_add(header, "parts", parts);
	char *line = jsonx_to_string(header, 0);
	json_object_put(header);
	strbuf sb = STRBUF_INIT;
	if (line) {
		strbuf_printf(&sb, "%s\n", line);
		strbuf_append(&sb, request, request_len);
		strbuf_append(&sb, script, script_len);
	}
	free(line);
	*len_out = sb.len;
	return strbuf_ok(&sb) && line ? strbuf_detach(&sb, NULL) : (strbuf_free(&sb), NULL);
}

/* What `receiver run --stdin` answered: the frame line, then the parts it
 * names, each checked against its own fact. Parts are borrowed from the
 * exec output; a part that is short or fails its hash is left NULL (the
 * host then pulls it) and named in `dropped`. */
typedef struct stdio_answer {
	json_object *frame; /* new reference, or NULL */
	const char *receipt;
	size_t receipt_len;
	const char *image;
	size_t image_len;
	json_object *image_part; /* the part's fact {name, path, bytes, sha256}; borrowed from frame */
	char dropped[160];
} stdio_answer;

static void stdio_answer_parse(const char *out, size_t len, stdio_answer *a)
{
	memset(a, 0, sizeof *a);
	const char *nl = out ? memchr(out, '\n', len) : NULL;
	if (nl == NULL)
		return;
	a->frame = jsonx_parse(out, (size_t)(nl - out), NULL, NULL, 0);
	if (!json_object_is_type(a->frame, json_type_object)) {
		json_object_put(a->frame);
		a->frame = NULL;
		return;
	}
	const char *at = nl + 1;
	size_t left = len - (size_t)(at - out);
	json_object *parts = jsonx_get_array(a->frame, "parts");
	size_t n = parts ? json_object_array_length(parts) : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *part = json_object_array_get_idx(parts, i);
		const char *name = jsonx_get_str(part, "name");
		const char *sha = jsonx_get_str(part, "sha256");
		int64_t bytes = -1;
		if (!jsonx_get_int(part, "bytes", &bytes) || bytes < 0 || (uint64_t)bytes > left ||
		    name == NULL || sha == NULL) {
			snprintf(a->dropped, sizeof a->dropped, "the part %s is not whole",
			         name ? name : "(unnamed)");
			return;
		}
		char hex[SHA256_HEX_LEN + 1];
		sha256_buffer_hex(at, (size_t)bytes, hex);
		if (strcmp(hex, sha) != 0) {
			snprintf(a->dropped, sizeof a->dropped, "the part %s does not match its sha256",
			         name);
		} else if (strcmp(name, RECEIVER_PART_RECEIPT) == 0) {
			a->receipt = at;
			a->receipt_len = (size_t)bytes;
		} else if (strcmp(name, RECEIVER_PART_AFTER_IMAGE) == 0) {
			a->image = at;
			a->image_len = (size_t)bytes;
			a->image_part = part;
		}
		at += bytes;
		left -= (size_t)bytes;
	}
}

/* ---- pushing the run's files ----------------------------------------------------- */

static relay_status write_plain(const char *path, const void *data, size_t len, relay_error *err)
{
	return fs_write_exclusive(path, data, len, 0600, err);
}

/* Checks that transport facts list `rel` with the given sha256 and bytes. */
static bool facts_match(json_object *facts, const char *rel, const char *sha, uint64_t bytes)
{
	json_object *f = gio_fact_find(facts, rel);
	int64_t b = -1;
	return f && jsonx_get_int(f, "bytes", &b) && (uint64_t)b == bytes && jsonx_get_str(f, "sha256") &&
	       strcmp(jsonx_get_str(f, "sha256"), sha) == 0;
}

/* Verifies one pushed file with `receiver scan` (guest.md §3.4 step 5). */
static relay_status scan_check(guest_io *io, const char *rel, const char *sha, uint64_t bytes,
                               const char *what, relay_error *err)
{
	json_object *facts = NULL;
	relay_status st = gio_scan(io, io->root, rel, false, bytes, &facts, err);
	if (st != RELAY_OK)
		return st;
	if (json_object_array_length(facts) != 1 || !facts_match(facts, "", sha, bytes))
		st = relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging checksum mismatch: %s", what);
	json_object_put(facts);
	return st;
}

/* Pushes one file of a run to R/<rel> and checks it: against the
 * transport's guest-side facts when it computes them (one round trip),
 * else with `receiver scan` (guest.md §3.4 step 5) unless `receiver_checks`
 * says the receiver checks the file's SHA-256 and size itself before it
 * uses it (the script: a mismatch refuses the run, nothing runs), which
 * saves a round trip where every exec is an HTTP call. */
static relay_status push_checked(guest_io *io, const char *local, const char *rel, const char *sha,
                                 uint64_t bytes, const char *what, bool receiver_checks, relay_error *err)
{
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", io->root, rel);
	char *remote = strbuf_detach(&sb, NULL);
	json_object *facts = NULL;
	bool want_facts = (io->traits & RELAY_TRANSPORT_GUEST_FACTS) != 0;
	relay_status st = gio_push(io, local, remote, 0, what, want_facts ? &facts : NULL, err);
	free(remote);
	if (st != RELAY_OK)
		return st;
	if (facts) {
		if (json_object_array_length(facts) != 1 || !facts_match(facts, "", sha, bytes))
			st =
			    relay_error_set(err, RELAY_E_INTEGRITY, 0, "staging checksum mismatch: %s", what);
		json_object_put(facts);
		return st;
	}
	return receiver_checks ? RELAY_OK : scan_check(io, rel, sha, bytes, what, err);
}

typedef struct side_push {
	guest_io *io;
	const char *local, *rel, *sha, *what;
	uint64_t bytes;
	relay_status status;
	relay_error err;
} side_push;

static void *side_push_main(void *arg)
{
	side_push *p = arg;
	memset(&p->err, 0, sizeof p->err);
	p->status = push_checked(p->io, p->local, p->rel, p->sha, p->bytes, p->what, true, &p->err);
	return NULL;
}

/* Pushes the script and the request (guest.md §15 step 3), each
 * hash-checked; side by side when the transport runs operations
 * concurrently and reports guest-side facts (no receiver scan), else the
 * script first. The receiver checks the script's SHA-256 and size again
 * before running it, and its receipt carries the request's SHA-256. */
static relay_status push_run_files(guest_io *io, const char *script_rel, const char *script,
                                   size_t script_len, const char *script_sha, const char *request_rel,
                                   const char *request, size_t request_len, const char *request_sha,
                                   relay_error *err)
{
	relay_status st = RELAY_OK;
	char *script_local = gio_scratch_path(io, "script-", NULL, err);
	char *request_local = script_local ? gio_scratch_path(io, "request-", ".json", err) : NULL;
	if (script_local == NULL || request_local == NULL) {
		st = err->code;
		goto cleanup;
	}
	st = write_plain(script_local, script, script_len, err);
	if (st == RELAY_OK)
		st = write_plain(request_local, request, request_len, err);
	if (st != RELAY_OK)
		goto cleanup;
	if ((io->traits & RELAY_TRANSPORT_CONCURRENT) && (io->traits & RELAY_TRANSPORT_GUEST_FACTS)) {
		side_push side = {io,           script_local, script_rel, script_sha,
		                  "the script", script_len,   RELAY_OK,   {0}};
		pthread_t thread;
		bool threaded = pthread_create(&thread, NULL, side_push_main, &side) == 0;
		if (!threaded)
			side_push_main(&side);
		st = push_checked(io, request_local, request_rel, request_sha, request_len, "the request",
		                  false, err);
		if (threaded)
			pthread_join(thread, NULL);
		if (side.status != RELAY_OK) {
			*err = side.err;
			st = side.status;
		}
	} else {
		st = push_checked(io, script_local, script_rel, script_sha, script_len, "the script", true,
		                  err);
		if (st == RELAY_OK)
			st = push_checked(io, request_local, request_rel, request_sha, request_len,
			                  "the request", false, err);
	}
cleanup:
	if (script_local)
		unlink(script_local);
	if (request_local)
		unlink(request_local);
	free(script_local);
	free(request_local);
	return st;
}

/* ---- imageDelivery (images.md §8) ------------------------------------------------- */

typedef enum receipt_state {
	RECEIPT_HOME, /* the receipt was pulled and validated */
	RECEIPT_NONE, /* the receiver answered with a frame-only outcome: nothing was recorded */
	RECEIPT_LOST, /* the run may have a receipt the host does not hold */
} receipt_state;

/* ---- the result ------------------------------------------------------------------- */

/* How the run ended, for the lead sentence: "exited with status 3",
 * "was ended by SIGKILL", "was refused before it started: …". */
static void outcome_phrase(strbuf *sb, const json_object *outcome)
{
	const char *kind = jsonx_get_str(outcome, "kind");
	const char *diag = jsonx_get_str(outcome, "diagnostic");
	json_object *status = jsonx_get_obj(outcome, "exitStatus");
	const char *signal_text = jsonx_get_str(status, "signal");
	int64_t code = 0;
	if (kind && strcmp(kind, "completed") == 0 && signal_text)
		strbuf_printf(sb, "was ended by %s", signal_text);
	else if (kind && strcmp(kind, "completed") == 0 && jsonx_get_int(status, "code", &code))
		strbuf_printf(sb, "exited with status %lld", (long long)code);
	else if (kind && strcmp(kind, "refused") == 0)
		strbuf_printf(sb, "was refused before it started: %.80s", diag ? diag : "no diagnostic");
	else
		strbuf_printf(sb, "ended uncertain: %.80s", diag ? diag : "no diagnostic");
}

/* The lead sentence of a run's result (tools.md §2.3): the step, how it
 * ended, what it left running, that the guest is kept, the after-image. */
static void set_run_lead(tool_result *r, const json_object *structured)
{
	strbuf sb = STRBUF_INIT;
	const char *mode = jsonx_get_str(structured, "evidenceMode");
	bool diagnostic = mode && strcmp(mode, "diagnostic") == 0;
	if (diagnostic)
		strbuf_puts(&sb, "Diagnostic script ");
	else
		strbuf_printf(&sb, "Step %s ", jsonx_get_str(jsonx_get_obj(structured, "step"), "id"));
	outcome_phrase(&sb, jsonx_get_obj(structured, "outcome"));
	json_object *left = jsonx_get_obj(structured, "leftRunning");
	int64_t count = 0;
	if (jsonx_get_int(left, "count", &count) && count > 0) {
		json_object *procs = jsonx_get_array(left, "processes");
		const char *first =
		    procs ? jsonx_get_str(json_object_array_get_idx(procs, 0), "command") : NULL;
		strbuf_printf(&sb, ", leaving %lld process%s running (%.32s%s)", (long long)count,
		              count == 1 ? "" : "es", first ? first : "?", count > 1 ? ", …" : "");
	}
	char *phrase = diagnostic
	                   ? strdup("no screenshot (diagnostic)")
	                   : image_delivery_phrase(jsonx_get_obj(structured, "imageDelivery"), "after-image");
	strbuf_printf(&sb, "; the guest is kept; %s.", phrase ? phrase : "after-image unknown");
	free(phrase);
	if (strbuf_ok(&sb))
		tool_result_set_lead(r, "%s", strbuf_str(&sb));
	strbuf_free(&sb);
}

/* Finishes a run's result: isError, error, the lead sentence, the compact
 * headline, the text without imageDelivery. Takes `structured`. */
static tool_result *finish_result(manager *m, guest *g, json_object *structured, const char *execution_id)
{
	json_object *outcome = jsonx_get_obj(structured, "outcome");
	json_object *d = jsonx_get_obj(structured, "imageDelivery");
	bool failed = execution_failed(outcome);
	jsonx_add_bool(structured, "executionFailed", failed);
	manager_lock(m);
	jsonx_add_str(structured, "evidencePath", g->evidence_path);
	manager_unlock(m);
	jsonx_add_bool(structured, "leaseReleased", false);
	char *headline = image_delivery_headline(d, failed);
	tool_result *r = NULL;
	if (failed || image_delivery_status_is_error(jsonx_get_str(d, "status"))) {
		char *message = NULL;
		const char *code = NULL;
		char codebuf[64];
		if (failed) {
			code = error_code_for(outcome);
			message = failure_message(outcome, execution_id);
		} else {
			snprintf(codebuf, sizeof codebuf, "delivery-%s", jsonx_get_str(d, "status"));
			code = codebuf;
			strbuf sb = STRBUF_INIT;
			strbuf_printf(&sb,
			              "Run %s completed, but its after-image cannot be delivered (%s): %s",
			              execution_id, jsonx_get_str(d, "status"),
			              jsonx_get_str(d, "diagnostic") ? jsonx_get_str(d, "diagnostic")
			                                             : "no diagnostic");
			message = strbuf_detach(&sb, NULL);
		}
		/* lastError first, so that the result's guestState shows it. */
		guest_set_last_error(m, g, "relay_script: %s", message ? message : "the run failed");
		r = guest_error(m, g, structured, code, "%s", message ? message : "the run failed");
		free(message);
	} else {
		r = tool_result_ok(structured, "%s", headline ? headline : "{}");
	}
	if (r) {
		tool_result_set_headline(r, "%s", headline ? headline : "{}");
		set_run_lead(r, r->structured);
		r->text_omits_key = "imageDelivery";
	}
	free(headline);
	return r;
}

/* What a run records after it: host/receipts, lastError, events. */
static void record_run_end(manager *m, guest *g, const char *evidence, const char *execution_id,
                           const tool_result *r, const json_object *step, bool cancelled)
{
	relay_error err;
	strbuf name = STRBUF_INIT;
	strbuf_printf(&name, "%s.json", execution_id);
	if (r &&
	    write_host_json(m, g, evidence, "receipts", strbuf_str(&name), r->structured, &err) != RELAY_OK)
		log_error("cannot write the host receipt of %s: %s", execution_id, err.message);
	strbuf_free(&name);
	json_object *outcome = r ? jsonx_get_obj(r->structured, "outcome") : NULL;
	bool failed = r == NULL || execution_failed(outcome);
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "executionId", execution_id);
	jsonx_add_str(details, "stepId", jsonx_get_str(step, "id"));
	jsonx_add(details, "outcome", outcome ? json_object_get(outcome) : NULL);
	guest_event(m, g, "run", jsonx_get_str(step, "title"), details);
	if (failed) {
		json_object *d2 = json_object_new_object();
		jsonx_add_str(d2, "executionId", execution_id);
		jsonx_add(d2, "outcome", outcome ? json_object_get(outcome) : NULL);
		guest_event(m, g, "execution-failed", jsonx_get_str(step, "title"), d2);
	}
	if (cancelled)
		lifecycle_record_cancelled(
		    m, g, "relay_script", true,
		    "the run was cancelled while the receiver ran it; recorded uncertain, "
		    "never replayed");
}

/* A run stopped before its request reached the guest: nothing ran. */
static tool_result *not_dispatched(manager *m, guest *g, const char *evidence, const char *execution_id,
                                   const char *code, bool cancelled, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static tool_result *not_dispatched(manager *m, guest *g, const char *evidence, const char *execution_id,
                                   const char *code, bool cancelled, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strbuf sb = STRBUF_INIT;
	strbuf_vprintf(&sb, fmt, ap);
	va_end(ap);
	json_object *rec = json_object_new_object();
	jsonx_add_str(rec, "guest", g->name);
	jsonx_add_str(rec, "executionId", execution_id);
	json_object *o = json_object_new_object();
	jsonx_add_str(o, "kind", "refused");
	jsonx_add_str(o, "diagnostic", strbuf_str(&sb));
	jsonx_add(rec, "outcome", o);
	jsonx_add_bool(rec, "dispatched", false);
	relay_error err;
	strbuf name = STRBUF_INIT;
	strbuf_printf(&name, "%s.json", execution_id);
	if (evidence && write_host_json(m, g, evidence, "receipts", strbuf_str(&name), rec, &err) != RELAY_OK)
		log_error("cannot write the host receipt of %s: %s", execution_id, err.message);
	strbuf_free(&name);
	json_object_put(rec);
	guest_set_last_error(m, g, "relay_script %s was not sent: %s", execution_id, strbuf_str(&sb));
	if (cancelled)
		lifecycle_record_cancelled(m, g, "relay_script", false,
		                           "cancelled before the request reached the guest; nothing ran");
	json_object *s = json_object_new_object();
	jsonx_add_str(s, "guest", g->name);
	jsonx_add_str(s, "executionId", execution_id);
	jsonx_add_bool(s, "dispatched", false);
	tool_result *r = guest_error(m, g, s, code, "Run %s was not started: %s; nothing ran in the guest",
	                             execution_id, strbuf_str(&sb));
	strbuf_free(&sb);
	return r;
}

/* Marks a step id used once its request is dispatched. */
static void use_step_id(manager *m, guest *g, const char *id)
{
	manager_lock(m);
	json_object_array_add(g->used_step_ids, json_object_new_string(id));
	guest_save(g);
	manager_unlock(m);
}

/* True when `receiver run --stdin` refused its standard input (exit 2 with
 * a frame-only refusal): the receiver read no whole request, so nothing ran. */
static bool stdin_refused(relay_status st, const gio_supervision *sv, const relay_exec_result *res)
{
	if (st != RELAY_OK || sv->cancelled || res->timed_out || res->exit_code != 2)
		return false;
	stdio_answer a;
	stdio_answer_parse(res->out, res->out_len, &a);
	const char *kind = jsonx_get_str(jsonx_get_obj(a.frame, "outcome"), "kind");
	bool refused = jsonx_get_obj(a.frame, "receipt") == NULL && kind && strcmp(kind, "refused") == 0;
	json_object_put(a.frame);
	return refused;
}

/* ---- a recorded run (guest.md §15) ------------------------------------------------ */

/* Debug timing of a run's phases (MCP_RELAY_DEBUG=1). */
static void run_mark(const char *execution_id, const char *phase, int64_t *mark_ms)
{
	int64_t now = clock_monotonic_ms();
	log_debug("relay_script %s: %s took %lld ms", execution_id, phase, (long long)(now - *mark_ms));
	*mark_ms = now;
}

tool_result *run_recorded(manager *m, guest *g, run_call *c, relay_call *call)
{
	tool_result *result = NULL;
	int64_t mark_ms = clock_monotonic_ms();
	relay_error err;
	memset(&err, 0, sizeof err);
	char exec_id[40], attempt_id[20], hex32[33], hex12[13];
	random_hex(hex32, 32);
	random_hex(hex12, 12);
	snprintf(exec_id, sizeof exec_id, "run-%s", hex32);
	snprintf(attempt_id, sizeof attempt_id, "att-%s", hex12);

	manager_lock(m);
	char *root = strdup(g->guest_root);
	char *evidence = strdup(g->evidence_path);
	char *session = g->recording_session_id ? strdup(g->recording_session_id) : NULL;
	char *node_path = g->node_path ? strdup(g->node_path) : NULL;
	bool snapshots_on = g->snapshots == 1;
	json_object *capture = snapshots_on ? jsonx_get_obj(g->capture_plan, "capture") : NULL;
	capture = capture ? json_object_get(capture) : NULL;
	manager_unlock(m);
	if (capture == NULL)
		snapshots_on = false;

	char *title = run_derive_title(c);
	char *because = run_derive_because(c, title ? title : "run");
	int64_t run_seq = 0;
	json_object *step = derive_step(m, g, c, title ? title : "run", &run_seq);
	int64_t after_ms = 0;
	const char *phase = NULL;
	json_object *snaps = snapshot_block(c, &after_ms, &phase);
	char script_sha[65];
	sha256_buffer_hex(c->script, c->script_len, script_sha);
	char rand16[17];
	random_hex(rand16, 16);
	strbuf sb = STRBUF_INIT;
	if (c->is_inline)
		strbuf_printf(&sb, "streamed/%s.%s", exec_id, c->ext);
	else
		strbuf_printf(&sb, "scripts/%s.%s", rand16, c->ext);
	char *script_rel = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "requests/%s.json", exec_id);
	char *request_rel = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", root, script_rel);
	char *script_remote = strbuf_detach(&sb, NULL);
	char *request_text = NULL, *stdin_text = NULL;
	json_object *request = NULL, *frame = NULL, *receipt = NULL, *outcome = NULL;
	guest_io io;
	bool io_open = false, cancelled = false;
	char request_sha[65] = "", receipt_sha[65] = "";
	int64_t receipt_bytes = -1;
	receipt_state rs = RECEIPT_LOST;

	/* Step 2: the submission and the script copy. */
	char at[25];
	now_iso_millis(at);
	json_object *sub = json_object_new_object();
	jsonx_add_str(sub, "executionId", exec_id);
	jsonx_add_str(sub, "attemptId", attempt_id);
	jsonx_add_str(sub, "guest", g->name);
	jsonx_add_str(sub, "submittedAt", at);
	jsonx_add(sub, "call", json_object_get(c->args));
	jsonx_add(sub, "step", json_object_get(step));
	jsonx_add_str(sub, "because", because);
	jsonx_add(sub, "snapshots", json_object_get(snaps));
	jsonx_add_int(sub, "timeoutMs", c->timeout_ms);
	jsonx_add_int(sub, "runSeq", run_seq);
	strbuf_printf(&sb, "%s.json", exec_id);
	relay_status st = write_host_json(m, g, evidence, "submissions", strbuf_str(&sb), sub, &err);
	strbuf_reset(&sb);
	json_object_put(sub);
	if (st == RELAY_OK) {
		strbuf_printf(&sb, "%s.%s", exec_id, c->ext);
		st = write_host_file(m, g, evidence, "scripts", strbuf_str(&sb), c->script, c->script_len,
		                     &err);
		strbuf_reset(&sb);
	}
	if (st != RELAY_OK) {
		result = not_dispatched(m, g, evidence, exec_id, "internal", false,
		                        "the evidence folder could not be written: %s", err.message);
		goto cleanup;
	}

	/* The request (guest.md §6), written before it is sent. */
	request = json_object_new_object();
	jsonx_add_int(request, "protocol", 1);
	jsonx_add_str(request, "executionId", exec_id);
	jsonx_add_str(request, "sessionId", session);
	jsonx_add_str(request, "attemptId", attempt_id);
	jsonx_add_str(request, "guest", g->name);
	jsonx_add_str(request, "because", because);
	jsonx_add_str(request, "evidenceMode", "recorded");
	jsonx_add_str(request, "language", c->language);
	json_object *script = json_object_new_object();
	jsonx_add_str(script, "path", script_remote);
	jsonx_add_str(script, "sha256", script_sha);
	jsonx_add_int(script, "bytes", (int64_t)c->script_len);
	jsonx_add_str(script, "origin", c->is_inline ? "inline" : "file");
	jsonx_add_str(script, "localName", c->local_path);
	jsonx_add(request, "script", script);
	json_object *runtime = json_object_new_object();
	jsonx_add_str(runtime, "nodePath", node_path);
	jsonx_add(request, "runtime", runtime);
	strbuf_printf(&sb, "%s/workspace", root);
	jsonx_add_str(request, "cwd", strbuf_str(&sb));
	strbuf_reset(&sb);
	jsonx_add_int(request, "timeoutMs", c->timeout_ms);
	jsonx_add(request, "step", json_object_get(step));
	jsonx_add(request, "snapshots", json_object_get(snaps));
	jsonx_add(request, "capture", capture ? json_object_get(capture) : NULL);
	request_text = jsonx_to_string(request, 0);
	size_t request_len = request_text ? strlen(request_text) : 0;
	if (request_text == NULL) {
		result = not_dispatched(m, g, evidence, exec_id, "internal", false,
		                        "out of memory building the request");
		goto cleanup;
	}
	sha256_buffer_hex(request_text, request_len, request_sha);
	strbuf_printf(&sb, "%s.json", exec_id);
	st = write_host_file(m, g, evidence, "requests", strbuf_str(&sb), request_text, request_len, &err);
	strbuf_reset(&sb);
	if (st != RELAY_OK) {
		result = not_dispatched(m, g, evidence, exec_id, "internal", false,
		                        "the request could not be written to the evidence folder: %s",
		                        err.message);
		goto cleanup;
	}

	run_mark(exec_id, "host files", &mark_ms);
	/* Step 3: push the script and the request. */
	st = gio_begin(&io, m, g, call, &err);
	if (st != RELAY_OK) {
		result = not_dispatched(m, g, evidence, exec_id, "transfer-failed", false,
		                        "the guest's transport is not available: %s", err.message);
		goto cleanup;
	}
	io_open = true;
	io.receiver_ready = true;
	/* guest.md §16.2: with a transport that carries standard input bytes,
	 * the request and script ride on the receiver's standard input and the
	 * receipt comes back on its output: one round trip. */
	bool one_trip = (io.traits & RELAY_TRANSPORT_STDIO_BYTES) != 0;
	size_t stdin_len = 0;
	if (one_trip)
		stdin_text = stdin_parts_text(request_rel, request_text, request_len, request_sha, script_rel,
		                              c->script, c->script_len, script_sha, &stdin_len);
	if (one_trip && stdin_text == NULL) {
		result = not_dispatched(m, g, evidence, exec_id, "internal", false,
		                        "out of memory building the receiver's standard input");
		goto cleanup;
	}
	st = one_trip ? RELAY_OK
	              : push_run_files(&io, script_rel, c->script, c->script_len, script_sha, request_rel,
	                               request_text, request_len, request_sha, &err);
	if (st != RELAY_OK || relay_call_is_cancelled(call)) {
		bool was_cancelled = st == RELAY_E_CANCELLED || relay_call_is_cancelled(call);
		result = not_dispatched(
		    m, g, evidence, exec_id, was_cancelled ? "transfer-failed" : gio_tool_code(st),
		    was_cancelled, "%s",
		    was_cancelled ? "the call was cancelled while the script was being sent" : err.message);
		goto cleanup;
	}

	run_mark(exec_id, "pushes", &mark_ms);
	/* Step 4: the receiver runs it, once. */
	RELAY_FAILPOINT("run.before-dispatch");
	use_step_id(m, g, jsonx_get_str(step, "id"));
	strbuf_printf(&sb, "%s/%s", root, request_rel);
	char *request_remote = strbuf_detach(&sb, NULL);
	uint64_t limit_ms = (uint64_t)c->timeout_ms + RUN_CAPTURE_ALLOWANCE_MS + (uint64_t)after_ms;
	limit_ms = (limit_ms + 999) / 1000 * 1000;
	gio_supervision sv;
	relay_exec_result res;
	for (;;) {
		const char *argv[] = {
		    io.receiver, "run", "--root", root, one_trip ? RECEIVER_RUN_STDIN_OPTION : request_remote,
		    NULL};
		memset(&sv, 0, sizeof sv);
		sv.tick_ms = RUN_PROGRESS_MS;
		sv.tick_what = "script";
		sv.limit_ms = c->timeout_ms;
		sv.cancel_execution = exec_id;
		sv.cancel_grace_ms = RUN_CANCEL_GRACE_MS;
		sv.stdin_data = one_trip ? stdin_text : NULL;
		sv.stdin_len = one_trip ? stdin_len : 0;
		sv.max_stdout_bytes =
		    FRAME_MAX_OUTPUT_BYTES + RECEIPT_MAX_BYTES + RECEIVER_ATTACH_IMAGE_MAX_BYTES;
		st = gio_exec_supervised(&io, &sv, argv, NULL, limit_ms, FRAME_MAX_OUTPUT_BYTES,
		                         one_trip ? RELAY_EXEC_STDIO_BYTES : 0, &res, &err);
		if (!one_trip || !stdin_refused(st, &sv, &res))
			break;
		/* The receiver proved that nothing ran: what it read on its
		 * standard input did not arrive whole. The same id goes the
		 * three-step way (guest.md §16.2 item 3: never trusted, sent
		 * again only where nothing ran). */
		log_warning(
		    "relay_script %s: the receiver refused its standard input (%.*s); sending the run "
		    "by push instead",
		    exec_id, (int)(res.err_len > 200 ? 200 : res.err_len), res.err ? res.err : "");
		gio_exec_result_free(&res);
		one_trip = false;
		st = push_run_files(&io, script_rel, c->script, c->script_len, script_sha, request_rel,
		                    request_text, request_len, request_sha, &err);
		if (st != RELAY_OK) {
			free(request_remote);
			result = not_dispatched(m, g, evidence, exec_id, gio_tool_code(st), false, "%s",
			                        err.message);
			goto cleanup;
		}
	}
	free(request_remote);
	cancelled = sv.cancelled;
	stdio_answer answer;
	memset(&answer, 0, sizeof answer);

	run_mark(exec_id, "receiver run", &mark_ms);
	/* Steps 5-6: the frame, the receipt, or an uncertain outcome. */
	if (cancelled) {
		outcome = outcome_uncertain(
		    "cancelled by the client while the receiver ran it%s; the run is never sent "
		    "again",
		    sv.receiver_cancel_signalled ? " (receiver cancel signalled its process group)" : "");
	} else if (st != RELAY_OK) {
		outcome =
		    outcome_uncertain("the transport failed while the run was in flight: %s", err.message);
	} else if (res.timed_out) {
		outcome = outcome_uncertain("the receiver did not answer within the exec limit of %llu s",
		                            (unsigned long long)(limit_ms / 1000));
	} else if (res.exit_code != 0) {
		char tail[STDERR_TAIL_BYTES + 1] = "";
		if (res.err && res.err_len) {
			size_t from = res.err_len > STDERR_TAIL_BYTES ? res.err_len - STDERR_TAIL_BYTES : 0;
			from = utf8_cut_forward(res.err, res.err_len, from);
			snprintf(tail, sizeof tail, "%.*s", (int)(res.err_len - from), res.err + from);
		}
		if (res.exit_code < 0 && res.signal > 0)
			outcome = outcome_uncertain("Receiver ended by signal %d: %s", res.signal, tail);
		else
			outcome = outcome_uncertain("Receiver exit %d: %s", res.exit_code, tail);
	} else {
		if (one_trip) {
			stdio_answer_parse(res.out, res.out_len, &answer);
			frame = answer.frame;
			answer.frame = NULL;
			if (answer.dropped[0])
				log_warning("relay_script %s: %s; it is pulled instead", exec_id,
				            answer.dropped);
		} else {
			frame = gio_parse_frame(res.out, res.out_len);
		}
		const char *fid = jsonx_get_str(frame, "executionId");
		json_object *fr = jsonx_get_obj(frame, "receipt");
		if (frame == NULL) {
			outcome = outcome_uncertain("the receiver printed no frame");
		} else if (fid == NULL || strcmp(fid, exec_id) != 0) {
			outcome = outcome_uncertain("the receiver's frame names another execution (%s)",
			                            fid ? fid : "none");
		} else if (fr) {
			RELAY_FAILPOINT("run.before-receipt");
			relay_error perr;
			memset(&perr, 0, sizeof perr);
			relay_status placed = RELAY_E_NOT_FOUND;
			if (answer.receipt) {
				placed = place_receipt(&io, fr, exec_id, request_sha, answer.receipt,
				                       answer.receipt_len, "run-answer", &receipt,
				                       receipt_sha, &receipt_bytes, &perr);
				if (placed != RELAY_OK)
					log_warning(
					    "relay_script %s: the receipt on the receiver's answer was not "
					    "taken (%s); it is pulled instead",
					    exec_id, perr.message);
			}
			if (placed == RELAY_OK ||
			    pull_receipt(&io, fr, exec_id, request_sha, &receipt, receipt_sha, &receipt_bytes,
			                 &perr) == RELAY_OK) {
				rs = RECEIPT_HOME;
				RELAY_FAILPOINT("run.after-receipt");
				outcome = json_object_get(jsonx_get_obj(receipt, "outcome"));
			} else {
				outcome = outcome_uncertain("the receipt could not be brought home: %s",
				                            perr.message);
			}
		} else {
			json_object *fo = jsonx_get_obj(frame, "outcome");
			const char *kind = jsonx_get_str(fo, "kind");
			const char *diag = jsonx_get_str(fo, "diagnostic");
			rs = RECEIPT_NONE;
			if (kind && strcmp(kind, "refused") == 0)
				outcome = json_object_get(fo);
			else
				outcome =
				    outcome_uncertain("%s", diag ? diag : "the receiver wrote no receipt");
		}
	}
	/* guest.md §16.3: the after-image original that rode the answer is
	 * checked and published as a step download would publish it, so the
	 * result below attaches it. A failure leaves it to the download. */
	if (receipt && answer.image) {
		relay_error ierr;
		memset(&ierr, 0, sizeof ierr);
		if (image_delivery_publish_answer(m, g, evidence, receipt, answer.image_part, answer.image,
		                                  answer.image_len, &ierr) != RELAY_OK)
			log_warning(
			    "relay_script %s: the after-image on the receiver's answer was not taken (%s); "
			    "the step download brings it",
			    exec_id, ierr.message);
	}
	gio_exec_result_free(&res);

	run_mark(exec_id, "receipt pull", &mark_ms);
	/* Step 7: the result. */
	json_object *out = json_object_new_object();
	jsonx_add_str(out, "guest", g->name);
	jsonx_add_str(out, "executionId", exec_id);
	jsonx_add_str(out, "language", c->language);
	jsonx_add_bool(out, "inline", c->is_inline);
	json_object *rscript = json_object_new_object();
	jsonx_add_str(rscript, "sha256", script_sha);
	jsonx_add_int(rscript, "bytes", (int64_t)c->script_len);
	jsonx_add_str(rscript, "localPath", c->local_path);
	jsonx_add_str(rscript, "remotePath", script_remote);
	jsonx_add(out, "script", rscript);
	jsonx_add(out, "step", json_object_get(step));
	jsonx_add_str(out, "reason", because);
	json_object *rsnap = json_object_new_object();
	json_object *after_v = NULL;
	json_object_object_get_ex(snaps, "afterIntervalMs", &after_v);
	jsonx_add(rsnap, "afterIntervalMs", after_v ? json_object_get(after_v) : NULL);
	json_object *grp = jsonx_get_obj(snaps, "group");
	if (grp)
		jsonx_add(rsnap, "group", json_object_get(grp));
	jsonx_add(out, "snapshots", rsnap);
	jsonx_add(out, "outcome", json_object_get(outcome));
	if (receipt) {
		static const char *const copied[] = {
		    "stdout", "stderr", "timedOut", "outputTruncated", "terminationConfirmed", "leftRunning"};
		for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
			json_object *v = NULL;
			json_object_object_get_ex(receipt, copied[i], &v);
			jsonx_add(out, copied[i], v ? json_object_get(v) : NULL);
		}
	} else {
		jsonx_add_str(out, "stdout", "");
		jsonx_add_str(out, "stderr", "");
		jsonx_add_bool(out, "timedOut", false);
		jsonx_add_bool(out, "outputTruncated", false);
		jsonx_add_bool(out, "terminationConfirmed", rs == RECEIPT_NONE);
	}
	jsonx_add_int(out, "timeoutMs", c->timeout_ms);
	json_object *ev = receipt ? jsonx_get_obj(receipt, "imageEvidence") : NULL;
	jsonx_add(out, "imageEvidence", ev ? json_object_get(ev) : NULL);
	image_delivery_result idr;
	memset(&idr, 0, sizeof idr);
	if (rs == RECEIPT_NONE && snapshots_on) {
		/* The receiver recorded nothing for this id: no image will come. */
		json_object *d = json_object_new_object();
		jsonx_add_str(d, "status", IMAGE_STATUS_NOT_REQUESTED);
		jsonx_add_str(d, "diagnostic",
		              "the receiver recorded no execution, so no after-image exists");
		jsonx_add(out, "imageDelivery", d);
	} else {
		image_delivery_for_run(m, g, request, receipt, evidence, &idr);
		jsonx_add(out, "imageDelivery", image_delivery_json(&idr));
	}
	result = finish_result(m, g, out, exec_id);
	if (result)
		image_delivery_take_preview(&idr, &result->image_base64, &result->image_mime);
	image_delivery_result_clear(&idr);

	record_run_end(m, g, evidence, exec_id, result, step, cancelled);
	run_mark(exec_id, "result and host receipt", &mark_ms);
	/* The step's background download (evidence.md §5): every run whose
	 * request reached the receiver, with or without a receipt at home. */
	if (rs != RECEIPT_NONE)
		downloads_enqueue_step(m, g, exec_id, receipt, rs == RECEIPT_HOME ? receipt_sha : NULL,
		                       rs == RECEIPT_HOME ? receipt_bytes : -1);
cleanup:
	if (io_open) {
		gio_write_transfers(&io, "relay_script");
		gio_end(&io);
	}
	strbuf_free(&sb);
	free(root);
	free(evidence);
	free(session);
	free(node_path);
	free(title);
	free(because);
	free(script_rel);
	free(request_rel);
	free(script_remote);
	free(request_text);
	free(stdin_text);
	json_object_put(capture);
	json_object_put(step);
	json_object_put(snaps);
	json_object_put(request);
	json_object_put(frame);
	json_object_put(receipt);
	json_object_put(outcome);
	return result;
}

/* ---- a diagnostic script (guest.md §13) ------------------------------------------- */

tool_result *run_diagnostic(manager *m, guest *g, run_call *c, relay_call *call)
{
	char exec_id[48], hex32[33];
	random_hex(hex32, 32);
	snprintf(exec_id, sizeof exec_id, "diagnostic-%s", hex32);
	manager_lock(m);
	bool staged = g->staged;
	char *root = g->guest_root ? strdup(g->guest_root) : NULL;
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	manager_unlock(m);
	relay_error err;
	memset(&err, 0, sizeof err);
	strbuf sb = STRBUF_INIT;
	char *workspace = NULL;
	if (staged && root) {
		strbuf_printf(&sb, "%s/workspace", root);
		workspace = strbuf_detach(&sb, NULL);
	}
	const char *argv_staged[] = {
	    "/bin/sh", "-c", "cd \"$1\" || exit 125; shift; eval \"$1\"", "relay-diagnostic", workspace,
	    c->script, NULL};
	const char *argv_plain[] = {"/bin/sh", "-c", c->script, NULL};
	const char *const *argv = workspace ? argv_staged : argv_plain;
	uint64_t limit_ms = ((uint64_t)c->timeout_ms + 999) / 1000 * 1000;
	char script_sha[65], at[25];
	sha256_buffer_hex(c->script, c->script_len, script_sha);
	now_iso_millis(at);

	json_object *req = json_object_new_object();
	jsonx_add_str(req, "executionId", exec_id);
	jsonx_add_str(req, "guest", g->name);
	jsonx_add_str(req, "evidenceMode", "diagnostic");
	jsonx_add_str(req, "language", "shell");
	jsonx_add_bool(req, "inline", c->is_inline);
	jsonx_add_str(req, "localPath", c->local_path);
	jsonx_add_str(req, "reason", c->reason);
	jsonx_add_int(req, "timeoutMs", c->timeout_ms);
	jsonx_add_int(req, "execLimitSeconds", (int64_t)(limit_ms / 1000));
	jsonx_add_bool(req, "staged", staged);
	jsonx_add_str(req, "cwd", workspace);
	json_object *script = json_object_new_object();
	jsonx_add_str(script, "sha256", script_sha);
	jsonx_add_int(script, "bytes", (int64_t)c->script_len);
	jsonx_add_strn(script, "text", c->script, c->script_len);
	jsonx_add(req, "script", script);
	json_object *argv_json = json_object_new_array();
	for (size_t i = 0; argv[i] && argv[i] != c->script; i++)
		json_object_array_add(argv_json, json_object_new_string(argv[i]));
	json_object_array_add(argv_json, json_object_new_string("<script>"));
	jsonx_add(req, "argv", argv_json);
	jsonx_add_str(req, "requestedAt", at);
	strbuf_printf(&sb, "%s.request.json", exec_id);
	char *req_name = strbuf_detach(&sb, NULL);
	if (evidence)
		write_host_json(m, g, evidence, "diagnostics", req_name, req, &err);
	json_object_put(req);
	free(req_name);

	json_object *outcome = NULL;
	char *output = NULL;
	size_t output_len = 0;
	bool truncated = false, cancelled = false;
	guest_io io;
	relay_status st = gio_begin(&io, m, g, call, &err);
	if (st != RELAY_OK) {
		outcome = outcome_uncertain("the guest's transport is not available: %s", err.message);
	} else {
		gio_supervision sv;
		memset(&sv, 0, sizeof sv);
		sv.tick_ms = RUN_PROGRESS_MS;
		sv.tick_what = "diagnostic script";
		sv.limit_ms = c->timeout_ms;
		relay_exec_result res;
		st = gio_exec_supervised(&io, &sv, argv, NULL, limit_ms, RUN_DIAGNOSTIC_OUTPUT_KEEP,
		                         RELAY_EXEC_MERGE_OUTPUT | RELAY_EXEC_KEEP_TAIL, &res, &err);
		cancelled = sv.cancelled;
		if (st == RELAY_OK) {
			strbuf all = STRBUF_INIT;
			if (res.out)
				strbuf_append(&all, res.out, res.out_len);
			if (res.err)
				strbuf_append(&all, res.err, res.err_len);
			size_t len = all.len, from = 0;
			/* A transport that keeps only a tail (the machine service)
			 * cannot say whether it dropped anything: a full tail counts
			 * as cut. */
			if (len >= RUN_DIAGNOSTIC_OUTPUT_KEEP)
				truncated = true;
			if (len > RUN_DIAGNOSTIC_OUTPUT_KEEP) {
				from = utf8_cut_forward(all.data, len, len - RUN_DIAGNOSTIC_OUTPUT_KEEP);
				truncated = true;
			}
			/* A tail the transport cut may start inside a character. */
			if (res.output_truncated) {
				truncated = true;
				size_t skip = 0;
				while (from + skip < len && skip < 3 &&
				       ((unsigned char)all.data[from + skip] & 0xC0) == 0x80)
					skip++;
				from += skip;
			}
			output = utf8_sanitize(all.data ? all.data + from : "", len - from, &output_len);
			strbuf_free(&all);
		}
		if (cancelled) {
			outcome = outcome_uncertain(
			    "cancelled by the client; the diagnostic script is never sent again");
		} else if (st != RELAY_OK) {
			outcome = outcome_uncertain("the transport failed: %s", err.message);
		} else if (res.timed_out) {
			outcome = outcome_uncertain(
			    "the diagnostic script did not end within %llu s; its process group was "
			    "killed",
			    (unsigned long long)(limit_ms / 1000));
			json_object *status = json_object_new_object();
			jsonx_add_null(status, "code");
			jsonx_add_str(status, "signal", "SIGKILL");
			jsonx_add(outcome, "exitStatus", status);
		} else {
			outcome = json_object_new_object();
			jsonx_add_str(outcome, "kind", "completed");
			json_object *status = json_object_new_object();
			char sigbuf[32];
			if (res.exit_code < 0 && res.signal > 0) {
				jsonx_add_null(status, "code");
				jsonx_add_str(status, "signal", signal_name(res.signal, sigbuf));
			} else {
				jsonx_add_int(status, "code", res.exit_code);
				jsonx_add_null(status, "signal");
			}
			jsonx_add(outcome, "exitStatus", status);
		}
		gio_exec_result_free(&res);
		gio_end(&io);
	}

	json_object *out = json_object_new_object();
	jsonx_add_str(out, "guest", g->name);
	jsonx_add_str(out, "executionId", exec_id);
	jsonx_add_str(out, "evidenceMode", "diagnostic");
	jsonx_add(out, "outcome", json_object_get(outcome));
	jsonx_add_strn(out, "output", output ? output : "", output ? output_len : 0);
	jsonx_add_str(out, "outputStreams", "stdout and stderr combined");
	jsonx_add_bool(out, "outputTruncated", truncated);
	jsonx_add_int(out, "timeoutMs", c->timeout_ms);
	jsonx_add_bool(out, "screenshotEvidence", false);
	json_object *nd = json_object_new_object();
	jsonx_add_str(nd, "status", IMAGE_STATUS_NOT_REQUESTED);
	jsonx_add_str(nd, "diagnostic", IMAGE_DIAG_DIAGNOSTIC);
	jsonx_add(out, "imageDelivery", nd);
	tool_result *r = finish_result(m, g, out, exec_id);

	if (r && evidence) {
		json_object *receipt = json_object_get(r->structured);
		char end[25];
		now_iso_millis(end);
		json_object *rec = json_object_new_object();
		json_object_object_foreach(receipt, key, value)
		{
			if (strcmp(key, "guestState") != 0)
				jsonx_add(rec, key, json_object_get(value));
		}
		jsonx_add_str(rec, "startedAt", at);
		jsonx_add_str(rec, "endedAt", end);
		json_object_put(receipt);
		strbuf_printf(&sb, "%s.receipt.json", exec_id);
		char *name = strbuf_detach(&sb, NULL);
		if (write_host_json(m, g, evidence, "diagnostics", name, rec, &err) != RELAY_OK)
			log_error("cannot write the diagnostic receipt of %s: %s", exec_id, err.message);
		free(name);
		json_object_put(rec);
	}
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "executionId", exec_id);
	jsonx_add(details, "outcome", json_object_get(outcome));
	guest_event(m, g, "diagnostic", c->reason ? c->reason : "diagnostic shell script", details);
	if (cancelled)
		lifecycle_record_cancelled(
		    m, g, "relay_script", true,
		    "a diagnostic script was cancelled while it ran; recorded uncertain");
	strbuf_free(&sb);
	free(output);
	free(workspace);
	free(root);
	free(evidence);
	json_object_put(outcome);
	return r;
}
