/*
 * The host's reading of a receiver's standard output (guestio/frame.c
 * gio_parse_frame, spec/guest.md §5.1 and §15 step 5): the last line that
 * parses as a JSON object is the frame, whatever a hostile guest printed
 * before or around it.
 *
 * Invariants: the frame, when found, is an object, and it is the frame of
 * the output cut just after the line it came from (no earlier line wins
 * over a later valid one).
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "guestio/frame.h"
#include "util/jsonx.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_object *frame = gio_parse_frame((const char *)data, size);
	if (frame != NULL && !json_object_is_type(frame, json_type_object))
		fuzz_fail("a frame that is not an object");
	/* Appending a valid frame line makes that the frame. */
	char *more = malloc(size + 32);
	if (more == NULL)
		fuzz_fail("no memory");
	memcpy(more, data, size);
	static const char tail[] = "\n{\"fuzz\":\"last\"}\n";
	memcpy(more + size, tail, sizeof tail - 1);
	json_object *last = gio_parse_frame(more, size + sizeof tail - 1);
	const char *v = jsonx_get_str(last, "fuzz");
	if (v == NULL || strcmp(v, "last") != 0)
		fuzz_fail("a valid last line is not the frame");
	json_object_put(last);
	free(more);
	json_object_put(frame);
	return 0;
}
