/*
 * relay_kit/guest_facts.h — facts every machine backend states the same way
 * about its guests: the environment of a guest behind the relay's egress
 * proxy (docs/egress.md), and the installed Debian packages of an image's
 * dpkg status file (the application catalog, spec/images.md §1.2).
 */
#ifndef RELAY_KIT_GUEST_FACTS_H
#define RELAY_KIT_GUEST_FACTS_H

#include <stddef.h>

/* The proxy variables of a guest whose network access is "egress" (allow and
 * internet): the relay's egress proxy listens on the guest's own loopback,
 * port 3128, and is the only way out. A static table of
 * RK_EGRESS_PROXY_ENV_COUNT "NAME=value" strings (borrowed, never freed). */
#define RK_EGRESS_PROXY_ENV_COUNT 8
extern const char *const rk_egress_proxy_env[RK_EGRESS_PROXY_ENV_COUNT];

/* Called once per installed package: `id` is dpkg:<package>, or
 * dpkg:<package>:<arch> for Multi-Arch: same (as `dpkg-query -W` names
 * them), at most 128 bytes; `version` is NULL when the stanza has none.
 * All three are borrowed for the call only. */
typedef void (*rk_dpkg_package_fn)(void *ctx, const char *id, const char *name, const char *version);

/* Walks the text of a dpkg status file (NUL-terminated; a last stanza
 * without a closing blank line counts): every stanza whose Status says
 * installed (not deinstall, not config-files only) is handed to `fn`.
 * Continuation lines are skipped; over-long values are cut to their field's
 * buffer. Never fails: text that is no status file yields no packages. */
void rk_dpkg_installed_each(const char *status_text, rk_dpkg_package_fn fn, void *ctx);

#endif
