/*
 * delivery/finish.h — the packaging half of relay_finish (spec/tools.md §3.9,
 * spec/evidence.md §9.1 steps 2-7): the download queue closed, every declared
 * output pulled, the recording pulled and merged, earlier recordings and
 * this package delivered and verified, the guest sealed. The destruction
 * (step 8) belongs to lease/ and is called by the tool handler
 * (tools/tool_finish.c) after finish_package() succeeds.
 *
 * Guest fields written (session/guest.h): phase (FINISHING, back to STAGED
 * on a failure), delivered, last_error, through guest_save().
 *
 * Call on the guest's queue, without the manager's lock.
 */
#ifndef RELAY_DELIVERY_FINISH_H
#define RELAY_DELIVERY_FINISH_H

#include <json-c/json.h>
#include <stdbool.h>

#include "session/manager_internal.h"
#include "util/outcome.h"

/* What one relay_finish found; owned, release with finish_report_free(). */
typedef struct finish_report {
	char *evidence;           /* the guest's evidence folder */
	json_object *extractions; /* [{name, destination, files, bytes}] */
	json_object *incomplete;  /* [{name, path, error}] */
	json_object *review;      /* review data of the delivered package */
	const char *completeness; /* the review's snapshot completeness (in review) */
	const char *execution;    /* the review's execution verdict (in review) */
	bool delivered;
} finish_report;

#define FINISH_REPORT_INIT                                                                                   \
	{                                                                                                    \
		NULL, NULL, NULL, NULL, NULL, NULL, false                                                    \
	}

void finish_report_free(finish_report *r);

/* The number of progress steps relay_finish reports (the last one,
 * "destruction", is the handler's). */
#define FINISH_STEPS 6

/*
 * Steps 2-7 for a guest the handler let through (staged or delivered, in
 * a phase relay_finish may run in): phase FINISHING and a `finish` event,
 * then, for a guest delivered earlier, the package re-verified (not
 * rewritten); otherwise downloads closed, outputs, recording, package,
 * verification, and the guest sealed (delivered). 0 with *report filled;
 * -1 with the outcome's code ("transfer-failed", "output-missing",
 * "delivery-failed", ...) and sentence, and its facts the finish result's
 * shape {guest, delivered: false, ...}: the guest is then kept (back to
 * staged, its queue reopened, lastError and an operation-failed event).
 */
int finish_package(session_manager *m, guest *g, relay_call *call, finish_report *report, relay_outcome *o);

/* The finish result's delivery facts (spec/tools.md §3.9) with `released`. */
json_object *finish_facts(session_manager *m, guest *g, const finish_report *report, bool released);

#endif
