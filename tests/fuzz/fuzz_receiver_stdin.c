/*
 * The standard input of `receiver run --stdin` (spec/guest.md §16.2,
 * guest/receiver_protocol.h): a header line naming two parts, then their
 * bytes. stdin_parts_read() is what stands between those bytes and the
 * guest root.
 *
 * Invariants: an accepted input has exactly the two parts in order, with
 * paths below requests/ and streamed/ or scripts/ that pass the receiver's
 * path rule, and its parts hold exactly the bytes after the header line,
 * each matching its announced SHA-256; a refused input says why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fsx.h"
#include "sha256.h"
#include "stdio_parts.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("receiver-stdin", MFD_CLOEXEC);
	if (fd < 0)
		fuzz_fail("memfd_create failed");
	if (size && write(fd, data, size) != (ssize_t)size)
		fuzz_fail("cannot write the input");
	lseek(fd, 0, SEEK_SET);
	stdin_parts parts;
	rerr err;
	memset(&err, 0, sizeof err);
	int rc = stdin_parts_read(fd, &parts, &err);
	close(fd);
	if (rc != 0) {
		if (err.msg[0] == '\0')
			fuzz_fail("a refused input without a reason");
		stdin_parts_free(&parts);
		return 0;
	}
	if (!parts.request_rel || strncmp(parts.request_rel, "requests/", 9) != 0 ||
	    !rel_path_ok(parts.request_rel))
		fuzz_fail("accepted a request path outside requests/: %s",
		          parts.request_rel ? parts.request_rel : "");
	if (!parts.script_rel || !rel_path_ok(parts.script_rel) ||
	    (strncmp(parts.script_rel, "streamed/", 9) != 0 && strncmp(parts.script_rel, "scripts/", 8) != 0))
		fuzz_fail("accepted a script path outside streamed/ and scripts/: %s",
		          parts.script_rel ? parts.script_rel : "");
	const uint8_t *nl = memchr(data, '\n', size);
	size_t body = nl ? size - (size_t)(nl + 1 - data) : 0;
	if (!nl || parts.request.len + parts.script.len != body)
		fuzz_fail("the parts do not hold exactly the bytes after the header");
	if ((parts.request.len && memcmp(parts.request.data, nl + 1, parts.request.len) != 0) ||
	    (parts.script.len &&
	     memcmp(parts.script.data, nl + 1 + parts.request.len, parts.script.len) != 0))
		fuzz_fail("the parts are not the input's bytes in order");
	stdin_parts_free(&parts);
	return 0;
}
