/*
 * relay_image (spec/tools.md §3.7): retrieves one saved image through one of
 * three closed selectors and answers its delivery status. It never sends
 * input, never captures, never exports a folder and never acquires; a
 * closed guest is not refused (manager.c lets TOOL_IMAGE through) and
 * answers stale-reference. The work is image_delivery_retrieve().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/image_delivery.h"
#include "session/manager_internal.h"
#include "tools/tools.h"
#include "util/clock.h"
#include "util/jsonx.h"

tool_result *tool_image(session_manager *m, guest *g, json_object *args, relay_call *call)
{
	int64_t started_mono_ms = clock_monotonic_ms();
	image_delivery_result r;
	image_delivery_retrieve(m, g, jsonx_get_obj(args, "target"), call, started_mono_ms, &r);

	json_object *delivery = image_delivery_json(&r);
	json_object *structured = json_object_new_object();
	tool_result *result = NULL;
	char *headline = NULL;
	if (delivery == NULL || structured == NULL)
		goto cleanup;
	jsonx_add_str(structured, "guest", g->name);
	jsonx_add(structured, "imageDelivery", json_object_get(delivery));
	jsonx_add_bool(structured, "executionFailed", false);
	headline = image_delivery_headline(delivery, false);
	if (image_delivery_status_is_error(r.status)) {
		char code[64];
		snprintf(code, sizeof code, "delivery-%s", r.status);
		result = guest_error(m, g, structured, code, "%s",
		                     r.diagnostic ? r.diagnostic : IMAGE_DIAG_UNEXPECTED);
	} else {
		result = tool_result_ok(structured, "%s", headline ? headline : "");
	}
	structured = NULL;
	if (result == NULL)
		goto cleanup;
	/* The headline is the compact imageDelivery line for errors too
	 * (spec/images.md §7), and the text leaves imageDelivery out of the pretty
	 * JSON (spec/tools.md §2.3). */
	if (headline)
		tool_result_set_headline(result, "%s", headline);
	char *phrase = image_delivery_phrase(delivery, "saved image");
	if (phrase) {
		tool_result_set_lead(result, "%c%s; the guest is kept.", phrase[0] == 'n' ? 'N' : 'S',
		                     phrase + 1);
		free(phrase);
	}
	result->text_omits_key = "imageDelivery";
	/* The image block stays beside isError when it was produced (spec/mcp.md §7). */
	image_delivery_take_preview(&r, &result->image_base64, &result->image_mime);
cleanup:
	json_object_put(structured);
	json_object_put(delivery);
	free(headline);
	image_delivery_result_clear(&r);
	if (result == NULL)
		result = tool_result_error(NULL, "internal",
		                           "out of memory answering relay_image; nothing was replayed");
	return result;
}
