/*
 * The preview of an original (image_present): container check, the full
 * PNG decode through libpng, the area-averaging resample into 2000 x 2000
 * and the 0.75 shrink steps, the re-encode and the second validation. The
 * input is the file; its type comes from its signature.
 *
 * Invariants: a preview fits the bounds of spec/images.md §9.3, its base64 is
 * the base64 of its bytes, and the preview itself passes image_inspect.
 */
#include <stdlib.h>
#include <string.h>

#include "pixels/image.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	image_presentation p;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_present(data, size, NULL, &p, &err);
	if (st != RELAY_OK) {
		if (err.message[0] == '\0')
			fuzz_fail("a refusal (status %d) gave no message", (int)st);
		return 0;
	}
	if (p.width == 0 || p.height == 0 || p.width > IMAGE_PREVIEW_MAX_SIDE ||
	    p.height > IMAGE_PREVIEW_MAX_SIDE)
		fuzz_fail("a preview of %ux%u", p.width, p.height);
	if (p.base64_len > IMAGE_PREVIEW_MAX_BASE64 || p.base64_len != image_base64_len(p.len))
		fuzz_fail("a preview's base64 is %zu characters for %zu bytes", p.base64_len, p.len);
	size_t len = 0;
	char *b64 = image_base64_encode(p.bytes, p.len, &len);
	if (b64 == NULL || len != p.base64_len || memcmp(b64, p.base64, len) != 0)
		fuzz_fail("a preview's base64 is not the base64 of its bytes");
	free(b64);
	image_info info;
	memset(&info, 0, sizeof info);
	if (image_inspect(p.bytes, p.len, p.mime_type, &info, &err) != RELAY_OK)
		fuzz_fail("a preview fails its own container check: %s", err.message);
	if (info.width != p.width || info.height != p.height)
		fuzz_fail("a preview says %ux%u, its header %ux%u", p.width, p.height, info.width,
		          info.height);
	image_presentation_free(&p);
	return 0;
}
