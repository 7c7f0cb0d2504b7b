/*
 * Container checks of PNG, JPEG and WebP originals (pixels/container.c via
 * image_inspect): the first byte picks the expected type (none, PNG, JPEG,
 * WebP), the rest is the file.
 *
 * Invariants: an accepted container has dimensions within the limits of
 * spec/images.md §4 and a known format; a refusal names its rule.
 */
#include <string.h>

#include "pixels/image.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	static const char *const types[] = {NULL, IMAGE_MIME_PNG, IMAGE_MIME_JPEG, IMAGE_MIME_WEBP};
	const char *mime = types[data[0] % 4];
	image_info info;
	memset(&info, 0, sizeof info);
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = image_inspect(data + 1, size - 1, mime, &info, &err);
	if (st == RELAY_OK) {
		if (info.width == 0 || info.height == 0 || info.width > IMAGE_MAX_DIMENSION ||
		    info.height > IMAGE_MAX_DIMENSION ||
		    (uint64_t)info.width * info.height > IMAGE_MAX_PIXELS)
			fuzz_fail("an accepted image is %ux%u", info.width, info.height);
		if (info.format < IMAGE_FORMAT_PNG || info.format > IMAGE_FORMAT_WEBP ||
		    info.mime_type == NULL)
			fuzz_fail("an accepted image has no format");
		if (mime && strcmp(mime, info.mime_type) != 0)
			fuzz_fail("expected %s, accepted %s", mime, info.mime_type);
	} else if (err.message[0] == '\0') {
		fuzz_fail("a refusal (status %d) gave no message", (int)st);
	}
	(void)image_mime_from_signature(data, size);
	return 0;
}
