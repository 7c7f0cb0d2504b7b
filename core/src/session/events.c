#include "session/events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/clock.h"
#include "util/fsutil.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/randx.h"
#include "util/timefmt.h"

int guest_ensure_evidence_dir(session_manager *m, guest *g, char *errbuf, size_t errlen)
{
	session_lock(m);
	char *path = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	if (path == NULL) {
		snprintf(errbuf, errlen, "the guest has no evidence folder yet");
		return -1;
	}
	/* Walk from the project folder down: every component a real folder. */
	const char *project = m->settings->project;
	size_t plen = strlen(project);
	int rc = 0;
	if (strncmp(path, project, plen) != 0 || path[plen] != '/') {
		snprintf(errbuf, errlen, "the evidence folder %s is not inside the project folder %s", path,
		         project);
		rc = -1;
		goto cleanup;
	}
	for (char *p = path + plen + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		struct stat st;
		if (lstat(path, &st) != 0) {
			/* Another process or guest may create the same folder at the
			 * same moment: EEXIST is fine when what exists is a folder. */
			if (errno != ENOENT || (mkdir(path, 0700) != 0 && errno != EEXIST)) {
				snprintf(errbuf, errlen, "cannot create %s: %s", path, strerror(errno));
				rc = -1;
				goto cleanup;
			}
			if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
				snprintf(errbuf, errlen, "%s must be a folder, not a link or file", path);
				rc = -1;
				goto cleanup;
			}
		} else if (!S_ISDIR(st.st_mode)) {
			snprintf(errbuf, errlen, "%s must be a folder, not a link or file", path);
			rc = -1;
			goto cleanup;
		}
		*p = saved;
		if (saved == '\0')
			break;
	}
cleanup:
	free(path);
	return rc;
}

void guest_event(session_manager *m, guest *g, const char *kind, const char *because, json_object *details)
{
	char errbuf[256];
	session_lock(m);
	bool sealed = g->delivered;
	char *evidence = g->evidence_path ? strdup(g->evidence_path) : NULL;
	session_unlock(m);
	if (evidence == NULL) {
		json_object_put(details);
		return;
	}
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/manifest.json", evidence);
	sealed = sealed || fs_exists_nofollow(dir); /* a finish cut short after its manifest */
	if (sealed)
		snprintf(dir, sizeof dir, "%s.lifecycle-events", evidence);
	else
		snprintf(dir, sizeof dir, "%s/host/events", evidence);
	relay_error err;
	if ((!sealed && guest_ensure_evidence_dir(m, g, errbuf, sizeof errbuf) != 0) ||
	    fs_mkdir_p(dir, 0700, &err) != RELAY_OK) {
		log_error("cannot record the %s event of %s", kind, g->name);
		json_object_put(details);
		free(evidence);
		return;
	}
	int64_t now = clock_now_ms();
	char at[25], suffix[17];
	time_format_iso_millis(now, at);
	random_hex(suffix, 16);
	json_object *event = json_object_new_object();
	jsonx_add_str(event, "kind", kind);
	jsonx_add_str(event, "because", because ? because : kind);
	jsonx_add_str(event, "at", at);
	jsonx_add(event, "details", details ? details : json_object_new_object());
	char path[4200];
	snprintf(path, sizeof path, "%s/%lld-%s.json", dir, (long long)now, suffix);
	if (fs_write_json_durable(path, event, &err) != RELAY_OK)
		log_error("cannot record the %s event of %s: %s", kind, g->name, err.message);
	json_object_put(event);
	free(evidence);
}

void lifecycle_record_cancelled(session_manager *m, guest *g, const char *operation, bool uncertain,
                                const char *why)
{
	json_object *details = json_object_new_object();
	jsonx_add_str(details, "operation", operation);
	jsonx_add_bool(details, "uncertain", uncertain);
	jsonx_add_str(details, "reason", why);
	guest_event(m, g, "operation-cancelled", why, details);
}
