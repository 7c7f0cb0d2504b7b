/* plugin-test checks 68 and 69: a push and a pull whose call is cancelled
 * while they move bytes (issue 26.4), where checks 61 and 62 cancel before
 * the first byte. The source is a 256 MiB file the runner writes (every
 * byte real, no holes), so the copy lasts well past the cancellation; a
 * real relay_call (call/call.h) is cancelled from this thread while the
 * transfer runs on another, as check 60 does for exec.
 *
 * A transport that runs such a transfer to its end (RELAY_OK) does not
 * offer cancellation mid-transfer: the check is skipped, saying so, since
 * relay/host.h asks a plugin to poll, not to poll at any granularity. A
 * transport that answers anything else, answers late, or leaves facts or
 * a host file behind fails. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call/call.h"
#include "cli/plugin_test.h"
#include "util/clock.h"
#include "util/fsutil.h"

/* The size of the transferred file. */
#define PT_MID_BYTES (256u << 20)
/* The chunk it is written in. */
#define PT_MID_CHUNK_BYTES (1u << 20)
/* When the runner cancels the live transfer, after it started: while a copy out of the page
 * cache (256 MiB take about 85 ms at 3 GB/s) still moves bytes. At 100 ms reference-machine's
 * copy had ended and its facts were being hashed (host->sha256_file, which takes no call), so
 * the push ended RELAY_OK and the check was skipped (CI, 2026-12-07). */
#define PT_MID_CANCEL_AFTER_MS 20
/* What "promptly" means mid-transfer: RELAY_E_CANCELLED within this much
 * of the cancellation. */
#define PT_MID_PROMPT_MS 3000

typedef struct pt_xfer_job {
	pt_run *run;
	bool pull;
	const char *from;
	const char *to;
	relay_call *call;
	relay_status status;
	char *facts;
	relay_error err;
	int64_t done_ms;
} pt_xfer_job;

static void *xfer_thread(void *arg)
{
	pt_xfer_job *job = arg;
	const relay_transport_ops *t = &job->run->plugin->transport;
	memset(&job->err, 0, sizeof job->err);
	job->facts = NULL;
	job->status = (job->pull ? t->pull : t->push)(job->run->plugin->state, job->run->conn, job->from,
	                                              job->to, job->call, 0, &job->facts, &job->err);
	job->done_ms = clock_now_ms();
	return NULL;
}

/* Writes PT_MID_BYTES of a pattern to a new file `path`; false on failure. */
static bool write_big(const char *path)
{
	char *chunk = malloc(PT_MID_CHUNK_BYTES);
	int fd = chunk == NULL ? -1 : open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	bool ok = fd >= 0;
	for (size_t i = 0; ok && i < PT_MID_CHUNK_BYTES; i++)
		chunk[i] = (char)('a' + i % 26);
	for (size_t done = 0; ok && done < PT_MID_BYTES; done += PT_MID_CHUNK_BYTES) {
		chunk[0] = (char)('A' + (done / PT_MID_CHUNK_BYTES) % 26); /* no two MiB alike */
		ok = write(fd, chunk, PT_MID_CHUNK_BYTES) == (ssize_t)PT_MID_CHUNK_BYTES;
	}
	if (fd >= 0 && close(fd) != 0)
		ok = false;
	free(chunk);
	return ok;
}

/* Check 68 (push `from` to `to`) or 69 (pull): the transfer under a call
 * cancelled PT_MID_CANCEL_AFTER_MS after it started. */
static void cancel_mid(pt_run *run, int check, bool pull, const char *from, const char *to)
{
	const char *verb = pull ? "pull" : "push";
	pt_xfer_job job = {.run = run, .pull = pull, .from = from, .to = to};
	job.call = relay_call_new_internal();
	pthread_t thread;
	if (pthread_create(&thread, NULL, xfer_thread, &job) != 0) {
		pt_fail(run, check, "the runner could not start its transfer thread");
		relay_call_complete(job.call, NULL);
		return;
	}
	int64_t start_ms = clock_now_ms();
	pt_sleep_ms(PT_MID_CANCEL_AFTER_MS);
	int64_t cancel_ms = clock_now_ms();
	relay_call_cancel(job.call);
	pthread_join(thread, NULL);
	relay_call_complete(job.call, NULL);
	int64_t answer_ms = job.done_ms - cancel_ms;
	bool left = job.facts != NULL;
	pt_host()->free(job.facts);
	char why[300];
	if (job.done_ms < cancel_ms) {
		snprintf(why, sizeof why,
		         "the %s of 256 MiB ended %lld ms in, before its call was cancelled: too fast to "
		         "cancel mid-transfer here",
		         verb, (long long)(job.done_ms - start_ms));
		pt_skip(run, check, why);
	} else if (job.status == RELAY_OK) {
		snprintf(why, sizeof why,
		         "the transport does not stop a transfer mid-way: the %s of 256 MiB whose call "
		         "was cancelled after %d ms ran to its end",
		         verb, PT_MID_CANCEL_AFTER_MS);
		pt_skip(run, check, why);
	} else if (job.status != RELAY_E_CANCELLED)
		pt_fail(run, check,
		        "%s of 256 MiB whose call was cancelled after %d ms answered %s (%s): answer "
		        "RELAY_E_CANCELLED when host->call_cancelled turns true while bytes move "
		        "(relay/host.h)",
		        verb, PT_MID_CANCEL_AFTER_MS, pt_status(job.status), job.err.message);
	else if (answer_ms > PT_MID_PROMPT_MS)
		pt_fail(run, check,
		        "%s of 256 MiB answered RELAY_E_CANCELLED %lld ms after its call was cancelled: "
		        "ask host->call_cancelled per file and per chunk of a large file and answer within "
		        "%d ms",
		        verb, (long long)answer_ms, PT_MID_PROMPT_MS);
	else if (left)
		pt_fail(run, check,
		        "a %s cancelled mid-transfer left facts in *facts_json_out (relay/plugin.h R3)",
		        verb);
	else if (pull && fs_exists_nofollow(to))
		pt_fail(run, check,
		        "a pull cancelled mid-transfer left %s: on failure nothing is left at local_path "
		        "(relay/transport.h)",
		        to);
	else
		pt_ran(run, check);
	if (pull) {
		relay_error err;
		fs_remove_tree(to, &err);
	}
}

/* Checks 68 and 69: the push of 256 MiB cancelled mid-way, the same push
 * to completion (the connection still works, and the guest holds the
 * source of the pull), the pull cancelled mid-way. */
static void cancel_mid_transfer(pt_run *run)
{
	relay_error err;
	char local[700], remote[700], back[700];
	snprintf(local, sizeof local, "%s/cancel-mid.bin", run->scratch);
	snprintf(remote, sizeof remote, "%s/pt/cancel-mid.bin", run->guest_root);
	snprintf(back, sizeof back, "%s/cancel-mid-back.bin", run->scratch);
	if (fs_mkdir_p(run->scratch, 0700, &err) != RELAY_OK || !write_big(local)) {
		pt_fail(run, 68, "the runner could not write its 256 MiB host file %s", local);
		pt_skip(run, 69, "no file in the guest to pull (check 68)");
		unlink(local);
		return;
	}
	cancel_mid(run, 68, false, local, remote);
	char *facts = NULL;
	memset(&err, 0, sizeof err);
	relay_status st =
	    run->plugin->transport.push(run->plugin->state, run->conn, local, remote, NULL, 0, &facts, &err);
	pt_host()->free(facts);
	unlink(local);
	if (st != RELAY_OK) {
		pt_fail(run, 68, "push of 256 MiB after a push cancelled mid-transfer answered %s: %s",
		        pt_status(st), err.message);
		pt_skip(run, 69, "no file in the guest to pull (check 68)");
		return;
	}
	cancel_mid(run, 69, true, remote, back);
	relay_exec_result res;
	char script[800];
	snprintf(script, sizeof script, "rm -f '%s'", remote);
	if (pt_sh(run, script, 0, &res, &err) == RELAY_OK) { /* 256 MiB less in the guest */
		pt_host()->free(res.out);
		pt_host()->free(res.err);
	}
}

void pt_transport_cancel_mid(pt_run *run)
{
	cancel_mid_transfer(run);
}
