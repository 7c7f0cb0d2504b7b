/*
 * A recorded run (spec/guest.md §15, §16.2): the host files and the request,
 * the push (or one round trip on standard input), `receiver run` once, the
 * frame and the receipt, the result's facts; see run_request.h.
 */
#include "runs/run_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "delivery/image_delivery.h"
#include "delivery/step_downloads.h"
#include "guestio/receiver_api.h"
#include "guestio/resident.h"
#include "receiver_protocol.h"
#include "runs/run_internal.h"
#include "runs/run_network.h"
#include "runs/run_state.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/sha256.h"
#include "util/strbuf.h"

typedef enum receipt_state {
	RECEIPT_HOME, /* the receipt was pulled and validated */
	RECEIPT_NONE, /* the receiver answered with a frame-only outcome: nothing was recorded */
	RECEIPT_LOST, /* the run may have a receipt the host does not hold */
} receipt_state;

/* One recorded run on its way (all owned unless said). */
typedef struct run_ctx {
	session_manager *m;
	guest *g;
	run_call *c;
	relay_call *call;
	run_outcome *out;
	int64_t mark_ms;
	char exec_id[40], attempt_id[20];
	char *root, *evidence, *session, *node_path;
	bool snapshots_on;
	json_object *capture;
	char *title, *because;
	int64_t run_seq, after_ms;
	json_object *step, *snaps;
	char script_sha[65], request_sha[65], receipt_sha[65];
	char *script_rel, *request_rel, *script_remote;
	json_object *request;
	char *request_text, *stdin_text;
	size_t request_len, stdin_len;
	guest_io io;
	/* one_trip: the request goes framed on standard input (§16.2) and the
	 * answer comes framed; resident: on the guest's channel (§17) */
	bool io_open, one_trip, resident, channel_broken, cancelled;
	const char *channel; /* the execution record's `channel`: resident, one-shot or pushed */
	uint64_t limit_ms;
	json_object *frame, *receipt, *outcome;
	gio_receipt rc; /* `receipt` read once (when it came home): what delivery/ takes */
	int64_t receipt_bytes;
	receipt_state rs;
} run_ctx;

/* Debug timing of a run's phases (MCP_RELAY_DEBUG=1). */
static void run_mark(run_ctx *x, const char *phase)
{
	int64_t now = clock_monotonic_ms();
	log_debug("relay_script %s: %s took %lld ms", x->exec_id, phase, (long long)(now - x->mark_ms));
	x->mark_ms = now;
}

/* Ids, what the guest holds, the step and the paths of the run's files. */
static void run_prepare(run_ctx *x)
{
	char hex32[33], hex12[13], rand16[17];
	random_hex(hex32, 32);
	random_hex(hex12, 12);
	snprintf(x->exec_id, sizeof x->exec_id, "run-%s", hex32);
	snprintf(x->attempt_id, sizeof x->attempt_id, "att-%s", hex12);
	session_lock(x->m);
	x->root = strdup(x->g->guest_root);
	x->evidence = strdup(x->g->evidence_path);
	x->session = x->g->recording_session_id ? strdup(x->g->recording_session_id) : NULL;
	session_unlock(x->m);
	slice_lock(x->g->run);
	x->node_path = x->g->run->node_path ? strdup(x->g->run->node_path) : NULL;
	x->snapshots_on = x->g->run->snapshots == 1;
	json_object *capture = x->snapshots_on ? jsonx_get_obj(x->g->run->capture_plan, "capture") : NULL;
	x->capture = capture ? json_object_get(capture) : NULL;
	slice_unlock(x->g->run);
	if (x->capture == NULL)
		x->snapshots_on = false;
	x->title = run_derive_title(x->c);
	x->because = run_derive_because(x->c, x->title ? x->title : "run");
	x->step = run_derive_step(x->m, x->g, x->c, x->title ? x->title : "run", &x->run_seq);
	const char *phase = NULL;
	x->snaps = run_snapshot_block(x->c, &x->after_ms, &phase);
	sha256_buffer_hex(x->c->script, x->c->script_len, x->script_sha);
	random_hex(rand16, 16);
	strbuf sb = STRBUF_INIT;
	if (x->c->is_inline)
		strbuf_printf(&sb, "%s/%s.%s", RECEIVER_STREAMED_DIR, x->exec_id, x->c->ext);
	else
		strbuf_printf(&sb, "%s/%s.%s", RECEIVER_SCRIPTS_DIR, rand16, x->c->ext);
	x->script_rel = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s.json", RECEIVER_REQUESTS_DIR, x->exec_id);
	x->request_rel = strbuf_detach(&sb, NULL);
	strbuf_printf(&sb, "%s/%s", x->root, x->script_rel);
	x->script_remote = strbuf_detach(&sb, NULL);
}

/* Step 2: host/submissions, host/scripts, then the request (spec/guest.md §6),
 * written to host/requests before it is sent. 0, or -1 (not dispatched). */
static int run_write_inputs(run_ctx *x)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	char at[25];
	run_now_iso_millis(at);
	json_object *sub = json_object_new_object();
	jsonx_add_str(sub, "executionId", x->exec_id);
	jsonx_add_str(sub, "attemptId", x->attempt_id);
	jsonx_add_str(sub, "guest", x->g->name);
	jsonx_add_str(sub, "submittedAt", at);
	jsonx_add(sub, "call", json_object_get(x->c->args));
	jsonx_add(sub, "step", json_object_get(x->step));
	jsonx_add_str(sub, "because", x->because);
	jsonx_add(sub, "snapshots", json_object_get(x->snaps));
	jsonx_add_int(sub, "timeoutMs", x->c->timeout_ms);
	jsonx_add_int(sub, "runSeq", x->run_seq);
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s.json", x->exec_id);
	relay_status st =
	    run_write_host_json(x->m, x->g, x->evidence, "submissions", strbuf_str(&sb), sub, &err);
	strbuf_reset(&sb);
	json_object_put(sub);
	if (st == RELAY_OK) {
		strbuf_printf(&sb, "%s.%s", x->exec_id, x->c->ext);
		st = run_write_host_file(x->m, x->g, x->evidence, "scripts", strbuf_str(&sb), x->c->script,
		                         x->c->script_len, &err);
		strbuf_reset(&sb);
	}
	if (st != RELAY_OK) {
		strbuf_free(&sb);
		return run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, "internal", false, x->out,
		                          "the evidence folder could not be written: %s", err.message);
	}
	run_request_in in = {
	    x->exec_id,       x->attempt_id,
	    x->session,       x->g->name,
	    x->because,       x->c,
	    x->script_remote, x->script_sha,
	    x->node_path,     x->root,
	    x->step,          x->snaps,
	    x->capture,       run_video_request(x->m->settings->record_video_fps, x->capture)};
	x->request = run_request_build(&in);
	json_object_put(in.video);
	x->request_text = jsonx_to_string(x->request, 0);
	x->request_len = x->request_text ? strlen(x->request_text) : 0;
	if (x->request_text == NULL) {
		strbuf_free(&sb);
		return run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, "internal", false, x->out,
		                          "out of memory building the request");
	}
	sha256_buffer_hex(x->request_text, x->request_len, x->request_sha);
	strbuf_printf(&sb, "%s.json", x->exec_id);
	st = run_write_host_file(x->m, x->g, x->evidence, "requests", strbuf_str(&sb), x->request_text,
	                         x->request_len, &err);
	strbuf_free(&sb);
	if (st != RELAY_OK)
		return run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, "internal", false, x->out,
		                          "the request could not be written to the evidence folder: %s",
		                          err.message);
	return 0;
}

/* Step 3: the transport, and the script and request pushed, or made ready
 * for one round trip (spec/guest.md §16.2). 0, or -1 (not dispatched). */
static int run_send(run_ctx *x)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = gio_begin(&x->io, x->m, x->g, x->call, &err);
	if (st != RELAY_OK)
		return run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, "transfer-failed", false,
		                          x->out, "the guest's transport is not available: %s", err.message);
	x->io_open = true;
	x->io.receiver_ready = true;
	/* With a transport that carries standard input bytes, the request and
	 * script ride on the receiver's standard input and the receipt comes
	 * back on its output: one round trip. */
	x->one_trip = (x->io.traits & RELAY_TRANSPORT_STDIO_BYTES) != 0;
	x->resident = gio_resident_possible(&x->io);
	if (x->one_trip || x->resident)
		x->stdin_text = run_stdin_parts_text(x->request_rel, x->request_text, x->request_len,
		                                     x->request_sha, x->script_rel, x->c->script,
		                                     x->c->script_len, x->script_sha, &x->stdin_len);
	if ((x->one_trip || x->resident) && x->stdin_text == NULL)
		return run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, "internal", false, x->out,
		                          "out of memory building the receiver's standard input");
	st = x->one_trip || x->resident
	         ? RELAY_OK
	         : run_push_files(&x->io, x->script_rel, x->c->script, x->c->script_len, x->script_sha,
	                          x->request_rel, x->request_text, x->request_len, x->request_sha, &err);
	if (st != RELAY_OK || relay_call_is_cancelled(x->call)) {
		bool was_cancelled = st == RELAY_E_CANCELLED || relay_call_is_cancelled(x->call);
		return run_not_dispatched(
		    x->m, x->g, x->evidence, x->exec_id,
		    was_cancelled ? "transfer-failed" : gio_tool_code(st), was_cancelled, x->out, "%s",
		    was_cancelled ? "the call was cancelled while the script was being sent" : err.message);
	}
	return 0;
}

/* The supervision of the run's receiver (progress, cancellation, caps). */
static void run_supervision(run_ctx *x, gio_supervision *sv, bool framed)
{
	memset(sv, 0, sizeof *sv);
	sv->tick_ms = RUN_PROGRESS_MS;
	sv->tick_what = "script";
	sv->limit_ms = x->c->timeout_ms;
	sv->cancel_execution = x->exec_id;
	sv->cancel_grace_ms = RUN_CANCEL_GRACE_MS;
	sv->stdin_data = framed ? x->stdin_text : NULL;
	sv->stdin_len = framed ? x->stdin_len : 0;
	sv->max_stdout_bytes =
	    RUN_FRAME_MAX_OUTPUT_BYTES + RECEIVER_RECEIPT_MAX_BYTES + RECEIVER_ATTACH_IMAGE_MAX_BYTES;
}

/* The run on the guest's resident channel (spec/guest.md §17). True when it
 * went there (answered, or broke after the request went in whole: never
 * resent); false when the run takes the one-shot or push path, with the
 * files pushed when only the push is left (-1 in *rc: not dispatched). */
static bool run_dispatch_resident(run_ctx *x, relay_status *st, gio_supervision *sv, relay_exec_result *res,
                                  relay_error *err, int *rc)
{
	*rc = 0;
	run_supervision(x, sv, true);
	run_network_step(x->m, x->g, x->exec_id);
	run_channel_end end =
	    run_channel_send(&x->io, x->exec_id, x->stdin_text, x->stdin_len, x->limit_ms, sv, st, res, err);
	run_network_step(x->m, x->g, NULL);
	bool refused = end == RUN_CHANNEL_ANSWERED && *st == RELAY_OK && !res->timed_out &&
	               gio_run_answer_refused(res->out, res->out_len);
	if (end != RUN_CHANNEL_UNSENT && !refused) {
		x->channel = RUN_CHANNEL_NAME_RESIDENT;
		x->channel_broken = end == RUN_CHANNEL_BROKEN;
		x->one_trip = true; /* the answer is framed as the one round trip's */
		return true;
	}
	if (refused) {
		/* A refusal of the framing: nothing ran (§16.2 item 2); sent by push. */
		log_warning(
		    "relay_script %s: receiver serve refused the request; sending the run by push instead",
		    x->exec_id);
		x->one_trip = false;
	}
	gio_exec_result_free(res);
	if (!x->one_trip) {
		relay_status pst =
		    run_push_files(&x->io, x->script_rel, x->c->script, x->c->script_len, x->script_sha,
		                   x->request_rel, x->request_text, x->request_len, x->request_sha, err);
		if (pst != RELAY_OK)
			*rc = run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, gio_tool_code(pst),
			                         false, x->out, "%s", err->message);
	}
	return false;
}

/* Step 4: `receiver run`, once; with one round trip, a refusal of its
 * standard input (nothing ran) sends the same id the three-step way
 * (spec/guest.md §16.2 item 3). 0 with *st_out, *sv, *res filled (res freed by
 * the caller), or -1 (not dispatched). */
static int run_dispatch(run_ctx *x, relay_status *st_out, gio_supervision *sv, relay_exec_result *res,
                        relay_error *err)
{
	RELAY_FAILPOINT("run.before-dispatch");
	run_use_step_id(x->m, x->g, jsonx_get_str(x->step, "id"));
	/* The first commit point (docs/runs.md, "Durability"): host/submissions,
	 * host/scripts, host/requests and the guest record with the used step
	 * id are durable, with one syncfs, before the request can reach a
	 * receiver (spec/guest.md §16.2 item 1; the three-step path's push only
	 * placed the file, which nothing runs before `receiver run`): the
	 * durable record that the run may have started, on which "uncertain,
	 * never replayed" rests. A run whose files cannot be made durable is
	 * not sent. */
	relay_error serr;
	if (fs_sync_group_commit(&serr) != RELAY_OK)
		return run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, "internal", false, x->out,
		                          "the run's files could not be made durable: %s", serr.message);
	run_mark(x, "commit before the send");
	strbuf sb = STRBUF_INIT;
	strbuf_printf(&sb, "%s/%s", x->root, x->request_rel);
	char *request_remote = strbuf_detach(&sb, NULL);
	x->limit_ms = (uint64_t)x->c->timeout_ms + RUN_CAPTURE_ALLOWANCE_MS + (uint64_t)x->after_ms;
	x->limit_ms = (x->limit_ms + 999) / 1000 * 1000;
	relay_status st = RELAY_OK;
	int rc = 0;
	if (x->resident && run_dispatch_resident(x, &st, sv, res, err, &rc)) {
		free(request_remote);
		x->cancelled = sv->cancelled;
		*st_out = st;
		return 0;
	}
	if (rc != 0) {
		free(request_remote);
		return rc;
	}
	for (;;) {
		run_supervision(x, sv, x->one_trip);
		run_network_step(x->m, x->g, x->exec_id);
		st = gio_rcv_run(&x->io, sv, x->one_trip ? NULL : request_remote, x->limit_ms,
		                 RUN_FRAME_MAX_OUTPUT_BYTES, res, err);
		run_network_step(x->m, x->g, NULL);
		bool refused = st == RELAY_OK && !sv->cancelled && gio_rcv_run_stdin_refused(res);
		if (!x->one_trip || !refused)
			break;
		log_warning(
		    "relay_script %s: the receiver refused its standard input (%.*s); sending the run "
		    "by push instead",
		    x->exec_id, (int)(res->err_len > 200 ? 200 : res->err_len), res->err ? res->err : "");
		gio_exec_result_free(res);
		x->one_trip = false;
		st = run_push_files(&x->io, x->script_rel, x->c->script, x->c->script_len, x->script_sha,
		                    x->request_rel, x->request_text, x->request_len, x->request_sha, err);
		if (st != RELAY_OK) {
			free(request_remote);
			return run_not_dispatched(x->m, x->g, x->evidence, x->exec_id, gio_tool_code(st),
			                          false, x->out, "%s", err->message);
		}
	}
	free(request_remote);
	x->channel = x->one_trip ? RUN_CHANNEL_NAME_ONE_SHOT : RUN_CHANNEL_NAME_PUSHED;
	x->cancelled = sv->cancelled;
	*st_out = st;
	return 0;
}

/* The outcome of a receiver that ended badly (exit status, signal). */
static json_object *receiver_exit_outcome(const relay_exec_result *res)
{
	char tail[RUN_STDERR_TAIL_BYTES + 1] = "";
	if (res->err && res->err_len) {
		size_t from = res->err_len > RUN_STDERR_TAIL_BYTES ? res->err_len - RUN_STDERR_TAIL_BYTES : 0;
		from = utf8_cut_forward(res->err, res->err_len, from);
		snprintf(tail, sizeof tail, "%.*s", (int)(res->err_len - from), res->err + from);
	}
	if (res->exit_code < 0 && res->signal > 0)
		return run_outcome_uncertain("Receiver ended by signal %d: %s", res->signal, tail);
	return run_outcome_uncertain("Receiver exit %d: %s", res->exit_code, tail);
}

/* The frame's receipt brought home: from the answer when it rode along
 * and passes its checks, else pulled. Sets x->receipt, x->outcome, x->rs. */
static void run_take_receipt(run_ctx *x, json_object *fr, const gio_run_answer *answer)
{
	RELAY_FAILPOINT("run.before-receipt");
	relay_error perr;
	memset(&perr, 0, sizeof perr);
	relay_status placed = RELAY_E_NOT_FOUND;
	if (answer->receipt) {
		placed = run_place_receipt(&x->io, fr, x->exec_id, x->request_sha, answer->receipt,
		                           answer->receipt_len, "run-answer", &x->receipt, x->receipt_sha,
		                           &x->receipt_bytes, &perr);
		if (placed != RELAY_OK)
			log_warning(
			    "relay_script %s: the receipt on the receiver's answer was not taken (%s); it "
			    "is pulled instead",
			    x->exec_id, perr.message);
	}
	if (placed == RELAY_OK || run_pull_receipt(&x->io, fr, x->exec_id, x->request_sha, &x->receipt,
	                                           x->receipt_sha, &x->receipt_bytes, &perr) == RELAY_OK) {
		x->rs = RECEIPT_HOME;
		RELAY_FAILPOINT("run.after-receipt");
		gio_receipt_read(x->receipt, &x->rc);
		x->outcome = json_object_get(x->rc.outcome_json);
	} else {
		x->outcome = run_outcome_uncertain("the receipt could not be brought home: %s", perr.message);
	}
}

/* Steps 5-6: the frame, the receipt, or an uncertain outcome; the
 * after-image that rode the answer published (spec/guest.md §16.3). */
static void run_read_answer(run_ctx *x, relay_status st, const gio_supervision *sv,
                            const relay_exec_result *res, const relay_error *err)
{
	gio_run_answer answer;
	memset(&answer, 0, sizeof answer);
	if (x->cancelled) {
		x->outcome = run_outcome_uncertain(
		    "cancelled by the client while the receiver ran it%s; the run is never sent again",
		    sv->receiver_cancel_signalled ? " (receiver cancel signalled its process group)" : "");
	} else if (st != RELAY_OK) {
		x->outcome = run_outcome_uncertain("the transport failed while the run was in flight: %s",
		                                   err->message);
	} else if (res->timed_out) {
		x->outcome =
		    run_outcome_uncertain("the receiver did not answer within the exec limit of %llu s",
		                          (unsigned long long)(x->limit_ms / 1000));
	} else if (res->exit_code != 0) {
		x->outcome = receiver_exit_outcome(res);
	} else {
		if (x->one_trip) {
			gio_run_answer_parse(res->out, res->out_len, &answer);
			x->frame = answer.frame;
			answer.frame = NULL;
			if (answer.dropped[0])
				log_warning("relay_script %s: %s; it is pulled instead", x->exec_id,
				            answer.dropped);
		} else {
			x->frame = gio_parse_frame(res->out, res->out_len);
		}
		const char *fid = jsonx_get_str(x->frame, RECEIVER_FRAME_EXECUTION_ID);
		json_object *fr = jsonx_get_obj(x->frame, RECEIVER_FRAME_RECEIPT);
		if (x->frame == NULL) {
			x->outcome = run_outcome_uncertain("the receiver printed no frame");
		} else if (fid == NULL || strcmp(fid, x->exec_id) != 0) {
			x->outcome = run_outcome_uncertain(
			    "the receiver's frame names another execution (%s)", fid ? fid : "none");
		} else if (fr) {
			run_take_receipt(x, fr, &answer);
		} else {
			json_object *fo = jsonx_get_obj(x->frame, RECEIVER_FRAME_OUTCOME);
			const char *kind = jsonx_get_str(fo, RECEIVER_OUTCOME_KIND);
			const char *diag = jsonx_get_str(fo, RECEIVER_OUTCOME_DIAGNOSTIC);
			x->rs = RECEIPT_NONE;
			if (kind && strcmp(kind, RECEIVER_KIND_REFUSED) == 0)
				x->outcome = json_object_get(fo);
			else
				x->outcome = run_outcome_uncertain(
				    "%s", diag ? diag : "the receiver wrote no receipt");
		}
	}
	/* The after-image original that rode the answer is checked and
	 * published as a step download would publish it, so the result
	 * attaches it. A failure leaves it to the download. */
	if (x->receipt && answer.image) {
		relay_error ierr;
		memset(&ierr, 0, sizeof ierr);
		if (image_delivery_publish_answer(x->m, x->g, x->evidence, &x->rc, answer.image_part,
		                                  answer.image, answer.image_len, &ierr) != RELAY_OK)
			log_warning(
			    "relay_script %s: the after-image on the receiver's answer was not taken (%s); "
			    "the step download brings it",
			    x->exec_id, ierr.message);
	}
}

/* A channel that broke after the request went in whole (§17 item 4): the
 * guest's own record for the id answers, or the run stays uncertain; it is
 * never sent again. */
static void run_ask_record(run_ctx *x)
{
	bool asked = false;
	json_object *fact = run_channel_ask(&x->io, x->exec_id, &asked);
	if (fact) {
		gio_run_answer none;
		memset(&none, 0, sizeof none);
		json_object_put(x->outcome);
		x->outcome = NULL;
		run_take_receipt(x, fact, &none);
		json_object_put(fact);
		return;
	}
	json_object_put(x->outcome);
	x->outcome = run_outcome_uncertain(
	    "the channel to receiver serve broke after the request was sent and %s; the run is never sent "
	    "again",
	    asked ? "the guest holds no receipt for it (yet)" : "the guest's record could not be asked");
}

/* Step 7: the result's facts (spec/tools.md §3.6) and its imageDelivery. */
static int run_result_facts(run_ctx *x)
{
	const run_call *c = x->c;
	json_object *out = json_object_new_object();
	jsonx_add_str(out, "guest", x->g->name);
	jsonx_add_str(out, "executionId", x->exec_id);
	jsonx_add_str(out, "language", c->language);
	jsonx_add_bool(out, "inline", c->is_inline);
	json_object *rscript = json_object_new_object();
	jsonx_add_str(rscript, "sha256", x->script_sha);
	jsonx_add_int(rscript, "bytes", (int64_t)c->script_len);
	jsonx_add_str(rscript, "localPath", c->local_path);
	jsonx_add_str(rscript, "remotePath", x->script_remote);
	jsonx_add(out, "script", rscript);
	jsonx_add(out, "step", json_object_get(x->step));
	jsonx_add_str(out, "reason", x->because);
	json_object *rsnap = json_object_new_object();
	json_object *after_v = NULL;
	json_object_object_get_ex(x->snaps, "afterIntervalMs", &after_v);
	jsonx_add(rsnap, "afterIntervalMs", after_v ? json_object_get(after_v) : NULL);
	json_object *grp = jsonx_get_obj(x->snaps, "group");
	if (grp)
		jsonx_add(rsnap, "group", json_object_get(grp));
	jsonx_add(out, "snapshots", rsnap);
	jsonx_add(out, "outcome", json_object_get(x->outcome));
	jsonx_add_str(out, "channel", x->channel);
	if (x->receipt) {
		static const char *const copied[] = {
		    "stdout", "stderr", "timedOut", "outputTruncated", "terminationConfirmed", "leftRunning"};
		for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
			json_object *v = NULL;
			json_object_object_get_ex(x->receipt, copied[i], &v);
			jsonx_add(out, copied[i], v ? json_object_get(v) : NULL);
		}
	} else {
		jsonx_add_str(out, "stdout", "");
		jsonx_add_str(out, "stderr", "");
		jsonx_add_bool(out, "timedOut", false);
		jsonx_add_bool(out, "outputTruncated", false);
		jsonx_add_bool(out, "terminationConfirmed", x->rs == RECEIPT_NONE);
	}
	jsonx_add_int(out, "timeoutMs", c->timeout_ms);
	json_object *network = run_network_facts(x->m, x->g, x->exec_id);
	if (network)
		jsonx_add(out, "network", network);
	json_object *ev = x->receipt ? x->rc.image_evidence : NULL;
	jsonx_add(out, "imageEvidence", ev ? json_object_get(ev) : NULL);
	json_object *recording = run_recording_fact(x->receipt, x->request);
	if (recording)
		jsonx_add(out, "recording", recording);
	if (x->rs == RECEIPT_NONE && x->snapshots_on) {
		/* The receiver recorded nothing for this id: no image will come. */
		json_object *d = json_object_new_object();
		jsonx_add_str(d, "status", IMAGE_STATUS_NOT_REQUESTED);
		jsonx_add_str(d, "diagnostic",
		              "the receiver recorded no execution, so no after-image exists");
		jsonx_add(out, "imageDelivery", d);
	} else {
		image_delivery_for_run(x->m, x->g, x->request, x->receipt ? &x->rc : NULL, x->evidence,
		                       &x->out->image);
		jsonx_add(out, "imageDelivery", image_delivery_json(&x->out->image));
	}
	return run_finish(x->m, x->g, out, x->exec_id, x->out);
}

static void run_ctx_free(run_ctx *x)
{
	if (x->io_open) {
		gio_write_transfers(&x->io, "relay_script");
		gio_end(&x->io);
	}
	free(x->root);
	free(x->evidence);
	free(x->session);
	free(x->node_path);
	free(x->title);
	free(x->because);
	free(x->script_rel);
	free(x->request_rel);
	free(x->script_remote);
	free(x->request_text);
	free(x->stdin_text);
	json_object_put(x->capture);
	json_object_put(x->step);
	json_object_put(x->snaps);
	json_object_put(x->request);
	json_object_put(x->frame);
	json_object_put(x->receipt);
	json_object_put(x->outcome);
}

int run_recorded(session_manager *m, guest *g, run_call *c, relay_call *call, run_outcome *out)
{
	run_ctx x;
	memset(&x, 0, sizeof x);
	x.m = m;
	x.g = g;
	x.c = c;
	x.call = call;
	x.out = out;
	x.mark_ms = clock_monotonic_ms();
	x.receipt_bytes = -1;
	x.rs = RECEIPT_LOST;
	int rc = -1;
	/* The run's host writes share two commit points instead of two fsyncs
	 * per file: one before the send (run_dispatch), one at the end below. */
	bool group = fs_sync_group_begin();
	run_prepare(&x);
	if (run_write_inputs(&x) != 0)
		goto cleanup;
	run_mark(&x, "host files");
	if (run_send(&x) != 0)
		goto cleanup;
	run_mark(&x, "pushes");
	relay_status st = RELAY_OK;
	gio_supervision sv;
	relay_exec_result res;
	relay_error err;
	memset(&err, 0, sizeof err);
	memset(&res, 0, sizeof res);
	if (run_dispatch(&x, &st, &sv, &res, &err) != 0)
		goto cleanup;
	run_mark(&x, "receiver run");
	run_read_answer(&x, st, &sv, &res, &err);
	gio_exec_result_free(&res);
	if (x.channel_broken)
		run_ask_record(&x);
	run_mark(&x, "receipt pull");
	rc = run_result_facts(&x);
	run_record_end(m, g, x.evidence, x.exec_id, out, x.step, x.cancelled);
	run_mark(&x, "result and host receipt");
	/* The step's background download (spec/evidence.md §5): every run whose
	 * request reached the receiver, with or without a receipt at home. */
	if (x.rs != RECEIPT_NONE)
		downloads_enqueue_step(m, g, x.exec_id, x.receipt ? &x.rc : NULL,
		                       x.rs == RECEIPT_HOME ? x.receipt_sha : NULL,
		                       x.rs == RECEIPT_HOME ? x.receipt_bytes : -1);
cleanup:
	run_ctx_free(&x);
	/* The second commit point, before the call is answered: the receiver's
	 * receipt (spec/guest.md §16.2 item 1), the host receipt, the events, the
	 * step download's record, host/transfers and the guest record. A crash
	 * before it leaves the run as the restart finds it after the first
	 * point: sent, maybe run, its receipt in the guest (§17 item 4). */
	relay_error cerr;
	if (fs_sync_group_end(group, &cerr) != RELAY_OK)
		log_error("relay_script %s: the run's records were not made durable: %s", x.exec_id,
		          cerr.message);
	run_mark(&x, "commit before the answer");
	return rc;
}
