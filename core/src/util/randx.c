#include "util/randx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "util/error.h"
#include "util/log.h"

relay_status random_fill(void *out, size_t len, relay_error *err)
{
	unsigned char *p = out;
	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return relay_error_set(err, RELAY_E_IO, errno, "getrandom failed: %s",
			                       strerror(errno));
		}
		p += n;
		len -= (size_t)n;
	}
	return RELAY_OK;
}

static void fill_or_die(void *out, size_t len)
{
	if (random_fill(out, len, NULL) != RELAY_OK) {
		/* Identities must never repeat; without randomness nothing is safe. */
		log_error("the system random source failed; stopping");
		abort();
	}
}

void random_hex(char *out, size_t digits)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char bytes[64];
	size_t done = 0;
	while (done < digits) {
		size_t chunk = (digits - done + 1) / 2;
		if (chunk > sizeof bytes)
			chunk = sizeof bytes;
		fill_or_die(bytes, chunk);
		for (size_t i = 0; i < chunk && done < digits; i++) {
			out[done++] = hex[bytes[i] >> 4];
			if (done < digits)
				out[done++] = hex[bytes[i] & 15];
		}
	}
	out[digits] = '\0';
}

void random_uuid(char out[37])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[16];
	fill_or_die(b, sizeof b);
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	size_t o = 0;
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[b[i] >> 4];
		out[o++] = hex[b[i] & 15];
	}
	out[o] = '\0';
}
