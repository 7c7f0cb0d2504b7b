/* plugin-test checks 60-64: the hard half of the transport ABI. A real
 * relay_call (call/call.h, the one host->call_cancelled of the counting
 * host table polls) is cancelled during exec, push and pull; inspect and
 * renew run on another thread during a long exec; two execs share one
 * connection when the transport says RELAY_TRANSPORT_CONCURRENT. The
 * machine half (65-67) is plugin_test_recover.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "cli/plugin_test.h"
#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"

#define PT_HARD_TIMEOUT_MS 60000
/* When the runner cancels a live exec, after it started. */
#define PT_CANCEL_AFTER_MS 500
/* What "promptly" means for a cancelled exec: the answer within this much
 * of the cancellation (the core's grace period is of the same order). */
#define PT_CANCEL_PROMPT_MS 15000
/* How long the cancelled command would have run: its marker must never
 * appear once the exec answered RELAY_E_CANCELLED. */
#define PT_CANCELLED_SLEEP_S 3

typedef struct pt_exec_job {
	pt_run *run;
	const char *script;
	relay_call *call;
	relay_status status;
	relay_exec_result res;
	relay_error err;
	atomic_bool done;
	int64_t done_ms;
} pt_exec_job;

static void *exec_thread(void *arg)
{
	pt_exec_job *job = arg;
	const char *argv[] = {"/bin/sh", "-c", job->script, NULL};
	relay_exec_request req = {.struct_size = sizeof req, .argv = argv, .timeout_ms = PT_HARD_TIMEOUT_MS};
	memset(&job->res, 0, sizeof job->res);
	job->res.struct_size = sizeof job->res;
	memset(&job->err, 0, sizeof job->err);
	job->status = job->run->plugin->transport.exec(job->run->plugin->state, job->run->conn, &req,
	                                               job->call, 0, &job->res, &job->err);
	job->done_ms = clock_now_ms();
	atomic_store(&job->done, true);
	return NULL;
}

static void job_free(pt_exec_job *job)
{
	pt_host()->free(job->res.out);
	pt_host()->free(job->res.err);
	job->res.out = job->res.err = NULL;
}

/* 1 when `sh -c script` in the guest printed exactly `want`. */
static bool sh_prints(pt_run *run, const char *script, const char *want)
{
	relay_exec_result res;
	relay_error err;
	relay_status st = pt_sh(run, script, 0, &res, &err);
	bool same = st == RELAY_OK && res.out != NULL && res.out_len == strlen(want) &&
	            memcmp(res.out, want, res.out_len) == 0;
	pt_host()->free(res.out);
	pt_host()->free(res.err);
	return same;
}

/* Check 60: a live exec whose call is cancelled answers RELAY_E_CANCELLED
 * promptly, its command is gone, and the connection still runs commands. */
static void cancel_exec(pt_run *run)
{
	char script[900], probe[900];
	snprintf(script, sizeof script, "sleep %d; echo survived > '%s/pt-cancel-marker'",
	         PT_CANCELLED_SLEEP_S, run->guest_root);
	snprintf(probe, sizeof probe, "test -e '%s/pt-cancel-marker' && echo survived || echo gone",
	         run->guest_root);
	bool uncancellable = (run->plugin->transport.traits & RELAY_TRANSPORT_EXEC_UNCANCELLABLE) != 0;
	pt_exec_job job = {.run = run, .script = script, .call = relay_call_new_internal()};
	atomic_init(&job.done, false);
	pthread_t thread;
	int64_t start_ms = clock_now_ms();
	if (job.call == NULL || pthread_create(&thread, NULL, exec_thread, &job) != 0) {
		pt_fail(run, 60, "the runner could not start its exec thread");
		relay_call_complete(job.call, NULL);
		return;
	}
	pt_sleep_ms(PT_CANCEL_AFTER_MS);
	int64_t cancel_ms = clock_now_ms();
	relay_call_cancel(job.call);
	pthread_join(thread, NULL);
	relay_call_complete(job.call, NULL);
	int64_t answer_ms = job.done_ms - cancel_ms;
	job_free(&job); /* after a failure: NULL or the caller's (relay/transport.h exec) */
	/* The command would have written its marker PT_CANCELLED_SLEEP_S in. */
	int64_t wait_ms = start_ms + PT_CANCELLED_SLEEP_S * 1000 + 700 - clock_now_ms();
	if (wait_ms > 0)
		pt_sleep_ms((uint64_t)wait_ms);
	if (job.status != RELAY_E_CANCELLED)
		pt_fail(run, 60,
		        "exec of sleep %d whose call was cancelled after %d ms answered %s (%s): poll "
		        "host->call_cancelled while the command runs, kill it and answer RELAY_E_CANCELLED "
		        "(relay/host.h)",
		        PT_CANCELLED_SLEEP_S, PT_CANCEL_AFTER_MS, pt_status(job.status),
		        job.status == RELAY_OK ? "it ran to its end" : job.err.message);
	else if (answer_ms > PT_CANCEL_PROMPT_MS)
		pt_fail(run, 60,
		        "exec answered RELAY_E_CANCELLED %lld ms after its call was cancelled: answer "
		        "within %d ms",
		        (long long)answer_ms, PT_CANCEL_PROMPT_MS);
	else if (sh_prints(run, probe, "gone\n")) {
		if (uncancellable)
			pt_fail(
			    run, 60,
			    "the transport declares RELAY_TRANSPORT_EXEC_UNCANCELLABLE, but its cancelled "
			    "exec stopped the command: drop the trait");
		else
			pt_ran(run, 60);
	} else if (sh_prints(run, probe, "survived\n") && uncancellable)
		pt_fail(
		    run, 60,
		    "exec cannot be cancelled: the transport declares RELAY_TRANSPORT_EXEC_UNCANCELLABLE, "
		    "and its cancelled exec answered RELAY_E_CANCELLED while the command ran on and "
		    "wrote its marker %d s in; the check passes only for a transport that stops a "
		    "running command on cancellation",
		    PT_CANCELLED_SLEEP_S);
	else if (sh_prints(run, probe, "survived\n"))
		pt_fail(run, 60,
		        "exec answered RELAY_E_CANCELLED, but its command ran on and wrote its marker %d s "
		        "in: stop the command itself on cancellation (kill its process group, or the "
		        "backend's own cancellation of an exec); a backend that cannot cancel an exec "
		        "declares RELAY_TRANSPORT_EXEC_UNCANCELLABLE and cannot pass this check",
		        PT_CANCELLED_SLEEP_S);
	else
		pt_fail(run, 60,
		        "after a cancelled exec the connection no longer runs commands (a probe of the "
		        "command's marker failed): keep the connection usable after a cancellation");
}

/* Check 61 (a push from `from` to `to`) or 62 (a pull): under the cancelled
 * `call` it answers RELAY_E_CANCELLED and leaves no facts (a pull no host
 * file at `to` either), then the same transfer without the call works;
 * true when it did. */
static bool xfer_cancelled_then_done(pt_run *run, int check, bool pull, const char *from, const char *to,
                                     relay_call *call)
{
	const relay_transport_ops *t = &run->plugin->transport;
	relay_status (*xfer)(relay_plugin_state *, relay_transport_conn *, const char *, const char *,
	                     relay_call *, unsigned, char **, relay_error *) = pull ? t->pull : t->push;
	const char *verb = pull ? "pull" : "push";
	relay_error err;
	memset(&err, 0, sizeof err);
	char *facts = NULL;
	relay_status st = xfer(run->plugin->state, run->conn, from, to, call, 0, &facts, &err);
	bool left = facts != NULL;
	pt_host()->free(facts);
	facts = NULL;
	if (st != RELAY_E_CANCELLED)
		pt_fail(run, check,
		        "%s of 1 MiB with a call cancelled as it began answered %s: check "
		        "host->call_cancelled before and while moving bytes and answer RELAY_E_CANCELLED "
		        "(relay/host.h)",
		        verb, pt_status(st));
	else if (!pull && left)
		pt_fail(run, check, "a cancelled push left facts in *facts_json_out (relay/plugin.h R3)");
	else if (pull && (left || fs_exists_nofollow(to)))
		pt_fail(run, check,
		        "a cancelled pull left %s: on failure nothing is left at local_path and no "
		        "facts (relay/transport.h)",
		        left ? "facts" : to);
	if (pull)
		fs_remove_tree(to, &err);
	st = xfer(run->plugin->state, run->conn, from, to, NULL, 0, &facts, &err);
	pt_host()->free(facts);
	if (st != RELAY_OK)
		pt_fail(run, check, "%s after a cancelled %s answered %s: %s", verb, verb, pt_status(st),
		        err.message);
	pt_ran(run, check);
	return st == RELAY_OK;
}

/* Checks 61 and 62: push and pull under a call cancelled as they begin
 * answer RELAY_E_CANCELLED, leave no facts and no host file, and the same
 * transfer then works. */
static void cancel_xfer(pt_run *run)
{
	relay_error err;
	char local[700], remote[700], back[700];
	snprintf(local, sizeof local, "%s/cancel.bin", run->scratch);
	snprintf(remote, sizeof remote, "%s/pt/cancel.bin", run->guest_root);
	snprintf(back, sizeof back, "%s/cancel-back.bin", run->scratch);
	size_t len = 1u << 20;
	char *data = malloc(len);
	if (data == NULL || fs_mkdir_p(run->scratch, 0700, &err) != RELAY_OK) {
		free(data);
		pt_fail(run, 61, "the runner could not make its host file");
		return;
	}
	for (size_t i = 0; i < len; i++)
		data[i] = (char)('a' + i % 26);
	relay_status st = fs_write_exclusive(local, data, len, 0600, &err);
	free(data);
	if (st != RELAY_OK) {
		pt_fail(run, 61, "the runner could not write %s: %s", local, err.message);
		return;
	}
	relay_call *call = relay_call_new_internal();
	relay_call_cancel(call);
	if (xfer_cancelled_then_done(run, 61, false, local, remote, call))
		xfer_cancelled_then_done(run, 62, true, remote, back, call);
	else
		pt_skip(run, 62, "no file in the guest to pull (check 61)");
	relay_call_complete(call, NULL);
}

/* Check 63: inspect and renew of the lease answer while an exec of the
 * same guest runs (relay/machine.h "Threads"). */
static void lease_during_exec(pt_run *run)
{
	const relay_machine_ops *m = &run->plugin->machine;
	if (!(run->plugin->descriptor.kinds & RELAY_KIND_MACHINE) || m->inspect == NULL) {
		pt_skip(run, 63,
		        "the plugin is not also a machine: inspect and renew belong to another plugin");
		return;
	}
	pt_exec_job job = {.run = run, .script = "sleep 3"};
	atomic_init(&job.done, false);
	pthread_t thread;
	if (pthread_create(&thread, NULL, exec_thread, &job) != 0) {
		pt_fail(run, 63, "the runner could not start its exec thread");
		return;
	}
	pt_sleep_ms(300);
	relay_error err;
	memset(&err, 0, sizeof err);
	char *text = NULL;
	relay_status inspected = m->inspect(run->plugin->state, run->lease_json, NULL, 0, &text, &err);
	pt_host()->free(text);
	text = NULL;
	relay_error renew_err;
	memset(&renew_err, 0, sizeof renew_err);
	relay_status renewed =
	    m->renew(run->plugin->state, run->lease_json, 600000, NULL, 0, &text, &renew_err);
	pt_host()->free(text);
	bool exec_still_running = !atomic_load(&job.done);
	pthread_join(thread, NULL);
	if (inspected != RELAY_OK)
		pt_fail(run, 63, "inspect during a running exec answered %s: %s", pt_status(inspected),
		        err.message);
	else if (renewed != RELAY_OK)
		pt_fail(run, 63, "renew during a running exec answered %s: %s", pt_status(renewed),
		        renew_err.message);
	else if (!exec_still_running)
		pt_fail(run, 63,
		        "inspect and renew answered only after an exec of sleep 3 of the same guest "
		        "ended: they must not wait for a long operation (relay/machine.h Threads)");
	else if (job.status != RELAY_OK || job.res.exit_code != 0)
		pt_fail(run, 63, "exec of sleep 3 beside inspect and renew answered %s, exit %d",
		        pt_status(job.status), job.res.exit_code);
	else
		pt_ran(run, 63);
	job_free(&job);
}

/* Check 64: two execs on one connection at the same time; each waits for
 * the other's file, so a transport that serialises them fails both. */
static void two_execs(pt_run *run)
{
	if (!(run->plugin->transport.traits & RELAY_TRANSPORT_CONCURRENT)) {
		pt_skip(run, 64,
		        "the transport does not set RELAY_TRANSPORT_CONCURRENT (the core serialises "
		        "its operations)");
		return;
	}
	char scripts[2][2400];
	for (int i = 0; i < 2; i++)
		snprintf(scripts[i], sizeof scripts[i],
		         "touch '%s/pt-both-%d'; n=0; while [ ! -e '%s/pt-both-%d' ] && [ $n -lt 100 ]; do "
		         "sleep 0.1; n=$((n+1)); done; test -e '%s/pt-both-%d'",
		         run->guest_root, i, run->guest_root, 1 - i, run->guest_root, 1 - i);
	pt_exec_job jobs[2];
	pthread_t threads[2];
	int started = 0;
	for (int i = 0; i < 2; i++) {
		memset(&jobs[i], 0, sizeof jobs[i]);
		jobs[i].run = run;
		jobs[i].script = scripts[i];
		atomic_init(&jobs[i].done, false);
		if (pthread_create(&threads[i], NULL, exec_thread, &jobs[i]) == 0)
			started++;
		else
			break;
	}
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	if (started < 2)
		pt_fail(run, 64, "the runner could not start its exec threads");
	for (int i = 0; i < started; i++) {
		if (jobs[i].status != RELAY_OK)
			pt_fail(run, 64, "one of two execs at once on one connection answered %s: %s",
			        pt_status(jobs[i].status), jobs[i].err.message);
		else if (jobs[i].res.exit_code != 0)
			pt_fail(
			    run, 64,
			    "two execs on one connection did not run at the same time (each waited 10 s for "
			    "the other's file): RELAY_TRANSPORT_CONCURRENT promises they do "
			    "(relay/transport.h)");
		job_free(&jobs[i]);
	}
	pt_ran(run, 64);
}

void pt_transport_hard(pt_run *run)
{
	cancel_exec(run);
	cancel_xfer(run);
	lease_during_exec(run);
	two_execs(run);
}
