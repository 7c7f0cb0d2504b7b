/*
 * md_guestpath.c — what the plugin believes of a guest path only after the
 * engine said it: the stat header the engine sends (base64 in either
 * alphabet) and the check that no folder above a pulled path is a link.
 */
#include <stdlib.h>
#include <string.h>

#include "md.h"

/* The value of one base64 character in either alphabet (RFC 4648 §4
 * "+/", §5 "-_": Podman sends X-Docker-Container-Path-Stat URL-safe,
 * Docker in the standard one), or -1. */
static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

char *md_b64_decode(const char *in)
{
	size_t n = strlen(in);
	char *out = malloc(n + 1);
	if (out == NULL)
		return NULL;
	size_t o = 0;
	unsigned acc = 0;
	int bits = 0;
	/* Padded or not; anything outside the alphabets (padding, white
	 * space) is skipped. */
	for (size_t i = 0; i < n; i++) {
		int v = b64_value((unsigned char)in[i]);
		if (v < 0)
			continue;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (char)((acc >> bits) & 0xff);
		}
	}
	out[o] = '\0';
	return out;
}

/* The engine resolves every folder of a pulled path as root, following
 * links: a guest that makes `deep -> /root` and has its receiver report
 * `deep/secret` as a plain file would be sent a file it cannot read. So
 * each folder above the pulled path (the path itself: check_pulled_stat) is
 * asked for its own stat and must not be a link, whatever the receiver
 * said. Called before the GET and again after it, so that a link swapped
 * in meanwhile fails the pull too (a guest that swaps a folder and back
 * between the two checks and the GET is not detected; docs/reliability.md). */
relay_status md_check_pull_path(md_state *st, const char *container, const char *remote_path,
                                relay_error *err)
{
	/* Podman expands [ ] * ? in an archive path (a glob), so such a name
	 * would pull another file or none: refused with the reason. */
	if (md_engine_is_podman(st, NULL) && strpbrk(remote_path, "[]*?") != NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "%s has one of [ ] * ? in its name, which Podman's archive API expands as a "
		              "pattern: rename it in the guest (a diagnostic shell script) and try again",
		              remote_path);
	char prefix[1024];
	size_t n = strlen(remote_path);
	if (n >= sizeof prefix)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "the guest path is too long");
	for (size_t i = 1; i < n; i++) {
		if (remote_path[i] != '/')
			continue;
		memcpy(prefix, remote_path, i);
		prefix[i] = '\0';
		uint32_t mode = 0;
		int found = lease_path_exists(st, container, prefix, &mode);
		if (found < 0)
			return md_err(st, err, RELAY_E_TRANSIENT, 0,
			              "the engine did not answer for the folder %s of %s", prefix,
			              remote_path);
		if (found == 0)
			return md_err(st, err, RELAY_E_NOT_FOUND, 0, "%s does not exist in the guest",
			              prefix);
		if (mode & 0x08000000u)
			return md_err(st, err, RELAY_E_UNSAFE_PATH, 0,
			              "%s is a symbolic link in the guest; %s is not pulled through it",
			              prefix, remote_path);
		if (!(mode & 0x80000000u))
			return md_err(st, err, RELAY_E_UNSAFE_PATH, 0,
			              "%s is not a folder in the guest; %s is not pulled", prefix,
			              remote_path);
	}
	return RELAY_OK;
}
