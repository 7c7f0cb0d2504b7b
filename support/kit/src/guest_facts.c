/*
 * kit/src/guest_facts.c — see relay_kit/guest_facts.h.
 */
#include "relay_kit/guest_facts.h"

#include <stdio.h>
#include <string.h>

const char *const rk_egress_proxy_env[RK_EGRESS_PROXY_ENV_COUNT] = {
    "HTTP_PROXY=http://127.0.0.1:3128",   "HTTPS_PROXY=http://127.0.0.1:3128",
    "ALL_PROXY=socks5h://127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1,::1",
    "http_proxy=http://127.0.0.1:3128",   "https_proxy=http://127.0.0.1:3128",
    "all_proxy=socks5h://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1"};

typedef struct {
	char package[256], status[128], version[256], arch[64], multi_arch[32];
} dpkg_stanza;

static void stanza_end(dpkg_stanza *s, rk_dpkg_package_fn fn, void *ctx)
{
	if (s->package[0] && strstr(s->status, " installed") && strncmp(s->status, "deinstall", 9) != 0 &&
	    strstr(s->status, "config-files") == NULL) {
		char id[400];
		if (strcmp(s->multi_arch, "same") == 0 && s->arch[0])
			snprintf(id, sizeof id, "dpkg:%s:%s", s->package, s->arch);
		else
			snprintf(id, sizeof id, "dpkg:%s", s->package);
		if (strlen(id) <= 128)
			fn(ctx, id, s->package, s->version[0] ? s->version : NULL);
	}
	memset(s, 0, sizeof *s);
}

/* line[0, len) is "Key: value" for one of the stanza's fields: the value,
 * without the blanks around it, cut to the field's buffer. */
static void stanza_field(dpkg_stanza *s, const char *line, size_t len)
{
	struct {
		const char *key;
		char *out;
		size_t size;
	} fields[] = {{"Package", s->package, sizeof s->package},
	              {"Status", s->status, sizeof s->status},
	              {"Version", s->version, sizeof s->version},
	              {"Architecture", s->arch, sizeof s->arch},
	              {"Multi-Arch", s->multi_arch, sizeof s->multi_arch}};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		size_t key_len = strlen(fields[i].key);
		if (len <= key_len || strncmp(line, fields[i].key, key_len) != 0 || line[key_len] != ':')
			continue;
		const char *v = line + key_len + 1, *end = line + len;
		while (v < end && (*v == ' ' || *v == '\t'))
			v++;
		while (end > v && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
			end--;
		size_t value_len = (size_t)(end - v);
		if (value_len >= fields[i].size)
			value_len = fields[i].size - 1;
		memcpy(fields[i].out, v, value_len);
		fields[i].out[value_len] = '\0';
		return;
	}
}

void rk_dpkg_installed_each(const char *status_text, rk_dpkg_package_fn fn, void *ctx)
{
	dpkg_stanza s;
	memset(&s, 0, sizeof s);
	const char *p = status_text ? status_text : "";
	for (;;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len > 0 && p[len - 1] == '\r')
			len--;
		if (len == 0)
			stanza_end(&s, fn, ctx);
		else if (p[0] != ' ' && p[0] != '\t')
			stanza_field(&s, p, len);
		if (nl == NULL)
			break;
		p = nl + 1;
	}
	stanza_end(&s, fn, ctx);
}
