/* random.c — random hex and passwords (relay_kit/random.h). */
#include "relay_kit/random.h"

#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void random_bytes(const relay_host *host, unsigned char *out, size_t n)
{
	relay_error e;
	if (host && host->random_bytes(out, n, &e) == RELAY_OK)
		return;
	/* The host's random source failed: the kernel's. */
	if (syscall(SYS_getrandom, out, n, 0) != (long)n)
		memset(out, 0, n);
}

void rk_random_hex(const relay_host *host, char *out, size_t digits)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char bytes[64];
	if (digits > 2 * sizeof bytes)
		digits = 2 * sizeof bytes;
	random_bytes(host, bytes, (digits + 1) / 2);
	for (size_t i = 0; i < digits; i++)
		out[i] = hex[(i % 2 == 0) ? (bytes[i / 2] >> 4) : (bytes[i / 2] & 15)];
	out[digits] = '\0';
}

void rk_random_password(const relay_host *host, char *out, size_t len)
{
	static const char alphabet[] = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
	unsigned char bytes[64];
	if (len > sizeof bytes)
		len = sizeof bytes;
	random_bytes(host, bytes, len);
	for (size_t i = 0; i < len; i++)
		out[i] = alphabet[bytes[i] % (sizeof alphabet - 1)];
	out[len] = '\0';
}
