/*
 * md_lease.c — machine-docker's leases: one container per guest.
 *
 * Records: <stateDir>/leases/<vm>.json (written durably at every change,
 * serialised by the flock on <vm>.lock). The vm (container name) is the
 * purpose, unique per acquisition; the lease id is drawn before anything
 * is asked of the engine.
 *
 * acquire:
 *   1. the intent — the record in state "provisioning" with the lease id,
 *      purpose, deadline — is written and fsynced before the create call;
 *   2. the image is looked up, and pulled by the engine when missing (as
 *      progress); an image neither present nor pullable is refused;
 *   3. POST /containers/create with the labels io.mcp-relay.{plugin, store,
 *      owner, session, guest, purpose, lease-id, deadline-ms, image} and the
 *      isolation: no mounts, network "none", every capability dropped,
 *      no-new-privileges, pids/memory/CPU limits, the guest user;
 *   4. /.mcp-relay/{init, expires, run/} put in through the archive API,
 *      then start; the container's entry is the guest program's backstop;
 *   5. with Xvfb in the image, a display :0 of its own (each container has
 *      its own /tmp and network namespace);
 *   6. the record becomes "running".
 * A failure after the create call that leaves the outcome open keeps the
 * record: find_by_purpose reconciles by the labels.
 *
 * release removes the container with its anonymous volumes (force, v=1),
 * then checks the container, each volume and the label query are gone.
 * The reaper removes leases whose expiry (+ grace) passed while the relay
 * that owned them is gone; the backstop inside the container stops it even
 * when no relay is left at all.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "md.h"

extern const unsigned char machine_docker_guest_start[];
extern const unsigned char machine_docker_guest_end[];

#define CREATE_TIMEOUT_MS 120000u

static bool valid_name(const char *s)
{
	if (s == NULL || s[0] == '\0' || strlen(s) > 120)
		return false;
	for (const char *p = s; *p; p++) {
		bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		          ((*p == '-' || *p == '_' || *p == '.') && p != s);
		if (!ok)
			return false;
	}
	return true;
}

static void record_path(md_state *st, const char *vm, const char *ext, char *out, size_t size)
{
	snprintf(out, size, "%s/%s.%s", st->leases_dir, vm, ext);
}

static json_object *record_read(md_state *st, const char *vm, int *errno_out)
{
	if (!valid_name(vm)) {
		if (errno_out)
			*errno_out = EINVAL;
		return NULL;
	}
	char path[PATH_MAX];
	record_path(st, vm, "json", path, sizeof path);
	return md_read_json(path, errno_out);
}

static int record_write(md_state *st, json_object *rec)
{
	char path[PATH_MAX];
	record_path(st, md_str(rec, "vm"), "json", path, sizeof path);
	const char *text =
	    json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
	return md_write_durable(path, text, strlen(text));
}

static void record_remove(md_state *st, const char *vm)
{
	char path[PATH_MAX];
	record_path(st, vm, "json", path, sizeof path);
	unlink(path);
	record_path(st, vm, "lock", path, sizeof path);
	unlink(path);
}

static int record_lock(md_state *st, const char *vm)
{
	char path[PATH_MAX];
	record_path(st, vm, "lock", path, sizeof path);
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void set_owner(md_state *st, json_object *rec)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "bootId", json_object_new_string(st->boot_id));
	json_object_object_add(o, "pid", json_object_new_int64(st->self_pid));
	json_object_object_add(o, "startTime", json_object_new_int64((int64_t)st->self_start));
	json_object_object_add(rec, "owner", o);
}

static bool owner_alive(md_state *st, json_object *rec)
{
	json_object *o = md_obj(rec, "owner");
	const char *boot = md_str(o, "bootId");
	if (o == NULL || boot == NULL || strcmp(boot, st->boot_id) != 0)
		return false;
	pid_t pid = (pid_t)md_int(o, "pid", 0);
	unsigned long long start = (unsigned long long)md_int(o, "startTime", 0);
	if (pid == st->self_pid && start == st->self_start)
		return true;
	return pid > 0 && md_proc_start(pid) == start;
}

static json_object *copy_of(json_object *obj, const char *key)
{
	json_object *v = NULL, *out = NULL;
	if (obj == NULL || !json_object_object_get_ex(obj, key, &v) || v == NULL)
		return NULL;
	if (json_object_deep_copy(v, &out, NULL) != 0)
		return NULL;
	return out;
}

/* The name or id the container API knows the guest's container by: the vm
 * for a plain container, the task's container id for a Swarm service. */
static const char *container_of(json_object *rec)
{
	const char *c = md_str(rec, "container");
	return c ? c : md_str(rec, "vm");
}

static bool is_service(json_object *rec)
{
	const char *m = md_str(rec, "mode");
	return m && strcmp(m, "service") == 0;
}

/* The lease document (relay/machine.h) of a record, with `state` as found. */
static json_object *document(md_state *st, json_object *rec, const char *state)
{
	json_object *doc = json_object_new_object();
	json_object_object_add(doc, "vm", copy_of(rec, "vm"));
	json_object_object_add(doc, "purpose", copy_of(rec, "purpose"));
	json_object_object_add(doc, "image", copy_of(rec, "image"));
	json_object_object_add(doc, "lease_id", copy_of(rec, "lease_id"));
	json_object_object_add(doc, "state", json_object_new_string(state ? state : "unknown"));
	json_object_object_add(doc, "expiresAtMs", copy_of(rec, "expiresAtMs"));
	json_object_object_add(doc, "console", NULL);
	json_object_object_add(doc, "display", copy_of(rec, "display"));
	json_object_object_add(doc, "ssh", NULL);
	json_object *r = NULL;
	json_object_deep_copy(rec, &r, NULL);
	json_object_object_add(doc, "record", r);
	json_object *d = json_object_new_object();
	json_object_object_add(d, "container",
	                       json_object_new_string(container_of(rec) ? container_of(rec) : ""));
	json_object_object_add(d, "mode", json_object_new_string(is_service(rec) ? "service" : "container"));
	json_object_object_add(d, "containerId", copy_of(rec, "containerId"));
	json_object_object_add(d, "user", copy_of(rec, "user"));
	json_object_object_add(d, "endpoint", json_object_new_string(st->endpoint));
	json_object_object_add(d, "runtime", copy_of(rec, "runtime"));
	json_object_object_add(d, "network", copy_of(rec, "network"));
	json_object_object_add(doc, "docker", d);
	return doc;
}

/* ---- small engine helpers ------------------------------------------------------ */

static char *container_path(const char *vm, const char *suffix)
{
	char *p = malloc(1024);
	if (p == NULL)
		return NULL;
	snprintf(p, 1024, MD_API_PREFIX "/containers/");
	md_url_encode(p, 1024, vm);
	if (suffix)
		strncat(p, suffix, 1023 - strlen(p));
	return p;
}

/* GET /containers/{vm}/json: 1 found (*out owned), 0 gone, -1 cannot tell. */
static int container_get(md_state *st, const char *vm, relay_call *call, json_object **out)
{
	*out = NULL;
	char *path = container_path(vm, "/json");
	md_reply r;
	relay_error e;
	relay_status s =
	    path ? md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) : RELAY_E_NO_MEMORY;
	free(path);
	if (s != RELAY_OK)
		return -1;
	int found = r.status == 200 && r.json ? 1 : (r.status == 404 ? 0 : -1);
	if (found == 1) {
		*out = r.json;
		r.json = NULL;
	}
	md_reply_free(&r);
	return found;
}

static bool container_running(json_object *info)
{
	json_object *state = md_obj(info, "State");
	json_object *running = NULL;
	return state && json_object_object_get_ex(state, "Running", &running) &&
	       json_object_get_boolean(running);
}

static const char *label_of(json_object *info, const char *name)
{
	char key[96];
	snprintf(key, sizeof key, MD_LABEL "%s", name);
	return md_str(md_obj(md_obj(info, "Config"), "Labels"), key);
}

int lease_path_exists(md_state *st, const char *container, const char *path, uint32_t *mode_out)
{
	char *p = container_path(container, "/archive?path=");
	if (p == NULL || !md_url_encode(p, 1024, path)) {
		free(p);
		return -1;
	}
	md_reply r;
	relay_error e;
	relay_status s = md_api(st, "HEAD", p, NULL, -1, -1, 20000, NULL, &r, &e);
	free(p);
	if (s != RELAY_OK)
		return -1;
	int out = r.status == 200 ? 1 : (r.status == 404 ? 0 : -1);
	if (out == 1 && mode_out) {
		*mode_out = 0;
		/* The header is base64 of {"name","size","mode",...}. */
		char *text = r.path_stat ? md_b64_decode(r.path_stat) : NULL;
		json_object *j = text ? json_tokener_parse(text) : NULL;
		*mode_out = (uint32_t)md_int(j, "mode", 0);
		json_object_put(j);
		free(text);
	}
	md_reply_free(&r);
	return out;
}

typedef struct put_entry {
	const char *name;
	bool dir;
	const void *data;
	size_t len;
	unsigned mode;
	uid_t uid;
	gid_t gid;
} put_entry;

/* Puts small entries into folder `dir` of the container. */
static relay_status put_entries(md_state *st, const char *container, const char *dir,
                                const put_entry *entries, size_t count, relay_call *call, relay_error *err)
{
	int fd = md_tmp_file(st);
	if (fd < 0)
		return md_err(st, err, RELAY_E_IO, errno, "cannot create a temporary archive under %s",
		              st->state_dir);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_in_last_block(a, 1);
	relay_status s = RELAY_OK;
	if (archive_write_open(a, &fd, NULL, md_tar_write_cb, NULL) != ARCHIVE_OK) {
		s = md_err(st, err, RELAY_E_IO, 0, "cannot start an archive");
		goto done;
	}
	for (size_t i = 0; i < count; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, entries[i].name);
		archive_entry_set_filetype(e, entries[i].dir ? AE_IFDIR : AE_IFREG);
		archive_entry_set_perm(e, entries[i].mode);
		archive_entry_set_uid(e, entries[i].uid);
		archive_entry_set_gid(e, entries[i].gid);
		archive_entry_set_size(e, entries[i].dir ? 0 : (la_int64_t)entries[i].len);
		archive_entry_set_mtime(e, (time_t)(st->host->now_ms() / 1000), 0);
		int rc = archive_write_header(a, e);
		archive_entry_free(e);
		if (rc != ARCHIVE_OK ||
		    (!entries[i].dir && entries[i].len &&
		     archive_write_data(a, entries[i].data, entries[i].len) != (la_ssize_t)entries[i].len)) {
			s = md_err(st, err, RELAY_E_IO, 0, "cannot write an archive: %s",
			           archive_error_string(a));
			goto done;
		}
	}
	if (archive_write_close(a) != ARCHIVE_OK) {
		s = md_err(st, err, RELAY_E_IO, 0, "cannot finish an archive");
		goto done;
	}
	lseek(fd, 0, SEEK_SET);
	char *path = container_path(container, "/archive?path=");
	if (path == NULL || !md_url_encode(path, 1024, dir)) {
		free(path);
		s = md_err(st, err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory");
		goto done;
	}
	md_reply r;
	s = md_api(st, "PUT", path, NULL, fd, -1, 60000, call, &r, err);
	free(path);
	if (s == RELAY_OK && r.status != 200)
		s = md_err(st, err, r.status == 404 ? RELAY_E_NOT_FOUND : RELAY_E_REFUSED, 0,
		           "the engine refused to write into %s of %s (HTTP %ld): %s", dir, container,
		           r.status, md_reply_message(&r));
	md_reply_free(&r);
done:
	archive_write_free(a);
	close(fd);
	return s;
}

relay_status lease_put_file(md_state *st, const char *container, const char *dir, const char *name,
                            const void *data, size_t len, unsigned mode, uid_t uid, gid_t gid,
                            relay_call *call, relay_error *err)
{
	put_entry e = {.name = name, .data = data, .len = len, .mode = mode, .uid = uid, .gid = gid};
	return put_entries(st, container, dir, &e, 1, call, err);
}

static int expires_text(md_state *st, json_object *rec, char *out, size_t size)
{
	return snprintf(out, size, "%lld %lld %lld\n", (long long)md_int(rec, "expiresAtMs", 0),
	                (long long)md_int(rec, "graceMs", st->grace_ms), (long long)st->backstop_ms);
}

/* DELETE with force and its anonymous volumes: 1 removed or gone, 0 refused, -1 unknown. */
static int container_remove(md_state *st, const char *vm, relay_call *call, relay_error *err)
{
	char *path = container_path(vm, "?force=1&v=1");
	md_reply r;
	relay_status s =
	    path ? md_api(st, "DELETE", path, NULL, -1, -1, 60000, call, &r, err) : RELAY_E_NO_MEMORY;
	free(path);
	if (s != RELAY_OK)
		return -1;
	int out = (r.status == 204 || r.status == 200 || r.status == 404) ? 1 : 0;
	if (!out)
		md_err(st, err, RELAY_E_REFUSED, 0, "the engine refused to remove %s (HTTP %ld): %s", vm,
		       r.status, md_reply_message(&r));
	md_reply_free(&r);
	return out;
}

static int remove_guest(md_state *st, json_object *rec, relay_call *call, relay_error *err);

/* ---- images ------------------------------------------------------------------- */

static relay_status ensure_image(md_state *st, const md_image *im, relay_call *call, relay_error *err)
{
	char path[1024] = MD_API_PREFIX "/images/";
	md_url_encode(path, sizeof path, im->ref);
	strncat(path, "/json", sizeof path - strlen(path) - 1);
	md_reply r;
	relay_status s = md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_INDETERMINATE ? RELAY_E_UNAVAILABLE : s;
	long code = r.status;
	md_reply_free(&r);
	if (code == 200)
		return RELAY_OK;
	/* Not present: the engine pulls it (its own job), reported as progress. */
	st->host->call_progress(call, 0, -1, "the container engine is pulling the image");
	char pull[1200] = MD_API_PREFIX "/images/create?fromImage=";
	md_url_encode(pull, sizeof pull, im->ref);
	s = md_api(st, "POST", pull, NULL, -1, -1, (uint32_t)st->pull_timeout_ms, call, &r, err);
	if (s != RELAY_OK)
		return s == RELAY_E_CANCELLED
		           ? s
		           : md_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		                    "image %s (%s) is not present and pulling it failed: %s", im->key,
		                    im->ref, err->message);
	/* The pull streams JSON lines; an "error" in any of them is a failure. */
	const char *bad = r.body ? strstr(r.body, "\"error\"") : NULL;
	if (r.status != 200 || bad) {
		const char *msg = bad ? bad : md_reply_message(&r);
		s = md_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		           "image %s (%s) is not present on the engine and cannot be pulled: %.300s; pull or "
		           "build it on the engine, or fix options.images",
		           im->key, im->ref, msg);
	}
	md_reply_free(&r);
	return s;
}

/* ---- acquire ---------------------------------------------------------------------- */

static json_object *str_array(const char *const *items)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; items[i]; i++)
		json_object_array_add(a, json_object_new_string(items[i]));
	return a;
}

static void add_label(json_object *labels, const char *name, const char *value)
{
	char key[96];
	snprintf(key, sizeof key, MD_LABEL "%s", name);
	json_object_object_add(labels, key, json_object_new_string(value ? value : ""));
}

static void make_labels(md_state *st, json_object *rec, const md_image *im, json_object *labels)
{
	char text[64];
	add_label(labels, "plugin", MD_PLUGIN_NAME);
	add_label(labels, "store", st->state_dir);
	add_label(labels, "owner", st->owner);
	add_label(labels, "session", st->session_id);
	add_label(labels, "guest", md_str(rec, "guest"));
	add_label(labels, "purpose", md_str(rec, "purpose"));
	add_label(labels, "lease-id", md_str(rec, "lease_id"));
	snprintf(text, sizeof text, "%lld", (long long)md_int(rec, "deadlineMs", 0));
	add_label(labels, "deadline-ms", text);
	add_label(labels, "image", im->key);
}

static json_object *ulimits_json(md_state *st)
{
	json_object *ul = json_object_new_array();
	const char *names[] = {"nofile", "nproc"};
	int64_t values[] = {st->ulimit_nofile, st->ulimit_nproc};
	for (int i = 0; i < 2; i++) {
		if (values[i] <= 0)
			continue;
		json_object *u = json_object_new_object();
		json_object_object_add(u, "Name", json_object_new_string(names[i]));
		json_object_object_add(u, "Soft", json_object_new_int64(values[i]));
		json_object_object_add(u, "Hard", json_object_new_int64(values[i]));
		json_object_array_add(ul, u);
	}
	return ul;
}

static json_object *create_body(md_state *st, json_object *rec, const md_image *im, const char *user)
{
	json_object *b = json_object_new_object();
	json_object_object_add(b, "Image", json_object_new_string(im->ref));
	static const char *const entry[] = {MD_GUEST_INIT, NULL};
	static const char *const cmd[] = {"init", NULL};
	json_object_object_add(b, "Entrypoint", str_array(entry));
	json_object_object_add(b, "Cmd", str_array(cmd));
	json_object_object_add(b, "User", json_object_new_string(user));
	json_object_object_add(b, "WorkingDir", json_object_new_string("/"));
	json_object_object_add(b, "Hostname", json_object_new_string("guest"));
	json_object_object_add(b, "NetworkDisabled", json_object_new_boolean(true));
	json_object_object_add(b, "AttachStdin", json_object_new_boolean(false));
	json_object_object_add(b, "OpenStdin", json_object_new_boolean(false));
	json_object_object_add(b, "Tty", json_object_new_boolean(false));
	json_object *env = json_object_new_array();
	json_object_array_add(env, json_object_new_string(st->guest_uid == 0 ? "HOME=/root" : "HOME=/tmp"));
	json_object_array_add(env, json_object_new_string("MCP_RELAY_GUEST=1"));
	json_object_object_add(b, "Env", env);
	json_object *labels = json_object_new_object();
	make_labels(st, rec, im, labels);
	json_object_object_add(b, "Labels", labels);

	json_object *hc = json_object_new_object();
	json_object_object_add(hc, "NetworkMode", json_object_new_string("none"));
	json_object_object_add(hc, "Binds", json_object_new_array());
	json_object_object_add(hc, "Mounts", json_object_new_array());
	static const char *const caps[] = {"ALL", NULL};
	json_object_object_add(hc, "CapDrop", str_array(caps));
	static const char *const sec[] = {"no-new-privileges", NULL};
	json_object_object_add(hc, "SecurityOpt", str_array(sec));
	json_object_object_add(hc, "Privileged", json_object_new_boolean(false));
	json_object_object_add(hc, "ReadonlyRootfs", json_object_new_boolean(false));
	json_object_object_add(hc, "PublishAllPorts", json_object_new_boolean(false));
	json_object_object_add(hc, "IpcMode", json_object_new_string("private"));
	if (st->limit_pids > 0)
		json_object_object_add(hc, "PidsLimit", json_object_new_int64(st->limit_pids));
	if (st->limit_memory_bytes > 0) {
		json_object_object_add(hc, "Memory", json_object_new_int64(st->limit_memory_bytes));
		json_object_object_add(hc, "MemorySwap", json_object_new_int64(st->limit_memory_bytes));
	}
	if (st->limit_nano_cpus > 0)
		json_object_object_add(hc, "NanoCpus", json_object_new_int64(st->limit_nano_cpus));
	json_object_object_add(hc, "Ulimits", ulimits_json(st));
	if (st->runtime[0])
		json_object_object_add(hc, "Runtime", json_object_new_string(st->runtime));
	json_object *restart = json_object_new_object();
	json_object_object_add(restart, "Name", json_object_new_string("no"));
	json_object_object_add(hc, "RestartPolicy", restart);
	json_object_object_add(b, "HostConfig", hc);
	return b;
}

/* Starts Xvfb :0 as the guest user (a detached exec) and waits for its socket. */
static bool start_display(md_state *st, const char *vm, const char *user, relay_call *call)
{
	json_object *body = json_object_new_object();
	const char *argv[] = {"Xvfb", ":0", "-screen", "0", st->screen, "-nolisten", "tcp", NULL};
	json_object_object_add(body, "Cmd", str_array(argv));
	json_object_object_add(body, "User", json_object_new_string(user));
	json_object_object_add(body, "AttachStdout", json_object_new_boolean(false));
	json_object_object_add(body, "AttachStderr", json_object_new_boolean(false));
	char *path = container_path(vm, "/exec");
	md_reply r;
	relay_error e;
	relay_status s =
	    path ? md_api(st, "POST", path, body, -1, -1, 20000, call, &r, &e) : RELAY_E_NO_MEMORY;
	free(path);
	json_object_put(body);
	if (s != RELAY_OK)
		return false;
	char start[256] = "";
	const char *id = md_str(r.json, "Id");
	if (r.status == 201 && id)
		snprintf(start, sizeof start, MD_API_PREFIX "/exec/%s/start", id);
	md_reply_free(&r);
	if (start[0] == '\0')
		return false;
	json_object *sb = json_object_new_object();
	json_object_object_add(sb, "Detach", json_object_new_boolean(true));
	json_object_object_add(sb, "Tty", json_object_new_boolean(false));
	s = md_api(st, "POST", start, sb, -1, -1, 20000, call, &r, &e);
	json_object_put(sb);
	bool started = s == RELAY_OK && (r.status == 200 || r.status == 204);
	md_reply_free(&r);
	for (int i = 0; started && i < 100; i++) {
		if (lease_path_exists(st, vm, "/tmp/.X11-unix/X0", NULL) == 1)
			return true;
		md_sleep_ms(100);
	}
	return false;
}

/* ---- Swarm ------------------------------------------------------------------------ */

/* True when the endpoint is a Swarm manager (GET /info, asked once per
 * relay: the answer is kept in st->swarm_known under the lock). */
static bool swarm_manager(md_state *st, relay_call *call)
{
	pthread_mutex_lock(&st->lock);
	int known = st->swarm_known;
	pthread_mutex_unlock(&st->lock);
	if (known)
		return known > 0;
	md_reply r;
	relay_error e;
	if (md_api(st, "GET", MD_API_PREFIX "/info", NULL, -1, -1, 20000, call, &r, &e) != RELAY_OK)
		return false;
	json_object *sw = md_obj(r.json, "Swarm");
	json_object *ctl = NULL;
	bool yes =
	    sw && json_object_object_get_ex(sw, "ControlAvailable", &ctl) && json_object_get_boolean(ctl);
	pthread_mutex_lock(&st->lock);
	if (yes && md_str(sw, "NodeID"))
		snprintf(st->swarm_node, sizeof st->swarm_node, "%s", md_str(sw, "NodeID"));
	st->swarm_known = r.status == 200 ? (yes ? 1 : -1) : 0;
	pthread_mutex_unlock(&st->lock);
	md_reply_free(&r);
	return yes;
}

/* Creates the lease's internal overlay network (no route out of it) and a
 * one-replica service on it, then waits for its task's container. Fills
 * rec's "container" and "taskNetwork". *keep_record when the outcome may
 * have taken effect. */
static relay_status create_service(md_state *st, json_object *rec, const md_image *im, const char *user,
                                   relay_call *call, bool *keep_record, relay_error *err)
{
	const char *vm = md_str(rec, "vm");
	char net[160];
	snprintf(net, sizeof net, "%s-net", vm);
	json_object_object_add(rec, "taskNetwork", json_object_new_string(net));
	json_object *labels = json_object_new_object();
	make_labels(st, rec, im, labels);
	add_label(labels, "mode", "service");
	add_label(labels, "network", net);
	json_object *nb = json_object_new_object();
	json_object_object_add(nb, "Name", json_object_new_string(net));
	json_object_object_add(nb, "Driver", json_object_new_string("overlay"));
	json_object_object_add(nb, "Internal", json_object_new_boolean(true));
	json_object_object_add(nb, "Attachable", json_object_new_boolean(false));
	json_object_object_add(nb, "CheckDuplicate", json_object_new_boolean(true));
	json_object *nl = NULL;
	json_object_deep_copy(labels, &nl, NULL);
	json_object_object_add(nb, "Labels", nl);
	md_reply r;
	relay_status s =
	    md_api(st, "POST", MD_API_PREFIX "/networks/create", nb, -1, -1, 60000, call, &r, err);
	json_object_put(nb);
	if (s != RELAY_OK || r.status != 201) {
		if (s == RELAY_OK)
			s = md_err(st, err, RELAY_E_REFUSED, 0,
			           "the Swarm manager refused the guest network (HTTP %ld): %s", r.status,
			           md_reply_message(&r));
		else
			*keep_record = s != RELAY_E_UNAVAILABLE;
		md_reply_free(&r);
		json_object_put(labels);
		return s == RELAY_E_UNAVAILABLE || s == RELAY_E_REFUSED ? s : RELAY_E_INDETERMINATE;
	}
	md_reply_free(&r);
	*keep_record = true; /* from here on, release or the reaper removes what exists */

	json_object *cs = json_object_new_object();
	json_object_object_add(cs, "Image", json_object_new_string(im->ref));
	static const char *const wait_cmd[] = {
	    "/bin/sh", "-c",
	    "while [ ! -f " MD_GUEST_DIR "/ready ]; do sleep 0.1; done; exec " MD_GUEST_INIT " init", NULL};
	json_object_object_add(cs, "Command", str_array(wait_cmd));
	json_object_object_add(cs, "User", json_object_new_string(user));
	json_object_object_add(cs, "Hostname", json_object_new_string("guest"));
	json_object *env = json_object_new_array();
	json_object_array_add(env, json_object_new_string(st->guest_uid == 0 ? "HOME=/root" : "HOME=/tmp"));
	json_object_array_add(env, json_object_new_string("MCP_RELAY_GUEST=1"));
	json_object_object_add(cs, "Env", env);
	json_object *cl = NULL;
	json_object_deep_copy(labels, &cl, NULL);
	json_object_object_add(cs, "Labels", cl);
	static const char *const caps[] = {"ALL", NULL};
	json_object_object_add(cs, "CapabilityDrop", str_array(caps));
	json_object_object_add(cs, "Ulimits", ulimits_json(st));
	json_object *limits = json_object_new_object();
	if (st->limit_nano_cpus > 0)
		json_object_object_add(limits, "NanoCPUs", json_object_new_int64(st->limit_nano_cpus));
	if (st->limit_memory_bytes > 0)
		json_object_object_add(limits, "MemoryBytes", json_object_new_int64(st->limit_memory_bytes));
	if (st->limit_pids > 0)
		json_object_object_add(limits, "Pids", json_object_new_int64(st->limit_pids));
	json_object *res = json_object_new_object();
	json_object_object_add(res, "Limits", limits);
	json_object *restart = json_object_new_object();
	json_object_object_add(restart, "Condition", json_object_new_string("none"));
	json_object *nets = json_object_new_array();
	json_object *target = json_object_new_object();
	json_object_object_add(target, "Target", json_object_new_string(net));
	json_object_array_add(nets, target);
	json_object *tt = json_object_new_object();
	json_object_object_add(tt, "ContainerSpec", cs);
	json_object_object_add(tt, "Resources", res);
	json_object_object_add(tt, "RestartPolicy", restart);
	json_object_object_add(tt, "Networks", nets);
	if (st->runtime[0]) {
		json_object *rt = json_object_new_object();
		json_object_object_add(rt, "Runtime", json_object_new_string(st->runtime));
		(void)rt; /* Swarm has no per-service runtime: the node's default applies */
		json_object_put(rt);
	}
	json_object *replicated = json_object_new_object();
	json_object_object_add(replicated, "Replicas", json_object_new_int64(1));
	json_object *mode = json_object_new_object();
	json_object_object_add(mode, "Replicated", replicated);
	json_object *sb = json_object_new_object();
	json_object_object_add(sb, "Name", json_object_new_string(vm));
	json_object_object_add(sb, "Labels", labels);
	json_object_object_add(sb, "TaskTemplate", tt);
	json_object_object_add(sb, "Mode", mode);
	s = md_api(st, "POST", MD_API_PREFIX "/services/create", sb, -1, -1, 60000, call, &r, err);
	json_object_put(sb);
	if (s != RELAY_OK)
		return s == RELAY_E_UNAVAILABLE ? s : RELAY_E_INDETERMINATE;
	if (r.status != 201) {
		s = md_err(st, err, RELAY_E_REFUSED, 0,
		           "the Swarm manager refused the guest service (HTTP %ld): %s", r.status,
		           md_reply_message(&r));
		md_reply_free(&r);
		return s;
	}
	md_reply_free(&r);
	/* The task the manager placed, and its container. */
	char filter[256], path[1024] = MD_API_PREFIX "/tasks?filters=";
	snprintf(filter, sizeof filter, "{\"service\":[\"%s\"]}", vm);
	md_url_encode(path, sizeof path, filter);
	int64_t deadline = md_monotonic_ms() + (int64_t)st->pull_timeout_ms;
	while (md_monotonic_ms() < deadline) {
		if (call && st->host->call_cancelled(call))
			return md_err(st, err, RELAY_E_CANCELLED, 0,
			              "cancelled while the Swarm placed the guest");
		if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, err) != RELAY_OK)
			return RELAY_E_INDETERMINATE;
		json_object *task = r.json && json_object_is_type(r.json, json_type_array)
		                        ? json_object_array_get_idx(r.json, 0)
		                        : NULL;
		json_object *status = md_obj(task, "Status");
		const char *state = md_str(status, "State");
		const char *cid = md_str(md_obj(status, "ContainerStatus"), "ContainerID");
		const char *node = md_str(task, "NodeID");
		if (state && (strcmp(state, "failed") == 0 || strcmp(state, "rejected") == 0)) {
			s = md_err(st, err, RELAY_E_REFUSED, 0, "the Swarm task of %s %s: %s", vm, state,
			           md_str(status, "Err") ? md_str(status, "Err") : "no reason given");
			md_reply_free(&r);
			return s;
		}
		if (state && strcmp(state, "running") == 0 && cid) {
			if (node && st->swarm_node[0] && strcmp(node, st->swarm_node) != 0) {
				s = md_err(st, err, RELAY_E_REFUSED, 0,
				           "the Swarm placed %s on node %s; exec and copy go to the engine "
				           "of that node, "
				           "which this build reaches only for the manager's own node",
				           vm, node);
				md_reply_free(&r);
				return s;
			}
			json_object_object_add(rec, "container", json_object_new_string(cid));
			json_object_object_add(rec, "containerId", json_object_new_string(cid));
			json_object_object_add(rec, "swarmNode", json_object_new_string(node ? node : ""));
			md_reply_free(&r);
			return RELAY_OK;
		}
		md_reply_free(&r);
		md_sleep_ms(200);
	}
	return md_err(st, err, RELAY_E_TIMEOUT, 0, "the Swarm did not start the task of %s in time", vm);
}

relay_status lease_acquire(md_state *st, json_object *spec, relay_call *call, json_object **doc_out,
                           relay_error *err)
{
	*doc_out = NULL;
	const char *guest = md_str(spec, "guest");
	const char *purpose = md_str(spec, "purpose");
	const char *key = md_str(spec, "image");
	const char *network = md_str(spec, "network");
	int64_t ttl = md_int(spec, "ttlMs", 900000);
	int64_t deadline = md_int(spec, "deadlineMs", 0);
	json_object *vnc = NULL;
	if (!valid_name(purpose) || guest == NULL || key == NULL)
		return md_err(
		    st, err, RELAY_E_INVALID_ARGUMENT, 0,
		    "the acquire spec needs a purpose of [A-Za-z0-9._-] (at most 120), a guest and an image");
	const md_image *im = inventory_find(st, key);
	if (im == NULL) {
		char known[1024] = "";
		for (size_t i = 0; i < st->image_count; i++)
			snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
			         st->images[i].key);
		return md_err(st, err, RELAY_E_IMAGE_UNAVAILABLE, 0,
		              "machine-docker has no image %s (configured: %s); add it to the \"images\" of "
		              "MCP_RELAY_DOCKER_OPTIONS",
		              key, known[0] ? known : "none");
	}
	if (network == NULL)
		network = st->default_network;
	if (strcmp(network, "internet") == 0)
		return md_err(
		    st, err, RELAY_E_REFUSED, 0,
		    "machine-docker refuses network \"internet\": it cannot verify that an engine network "
		    "keeps the guest from this host and from private networks, so guests get no network "
		    "but their own loopback (use MCP_RELAY_GUEST_NETWORK=nat)");
	if (json_object_object_get_ex(spec, "vnc", &vnc) && json_object_get_boolean(vnc))
		return md_err(st, err, RELAY_E_REFUSED, 0,
		              "machine-docker has no console yet: acquire without vnc (snapshots still work "
		              "where the image has Xvfb)");
	pthread_mutex_lock(&st->lock);
	size_t held = lease_count(st) + st->acquiring;
	bool room = held < (size_t)st->max_guests;
	if (room)
		st->acquiring++;
	pthread_mutex_unlock(&st->lock);
	if (!room)
		return md_err(
		    st, err, RELAY_E_CAPACITY, 0,
		    "machine-docker holds %zu guests, its limit (options.maxGuests %d); release one first",
		    held, st->max_guests);

	relay_status s = RELAY_OK;
	json_object *rec = json_object_new_object();
	json_object *info = NULL, *body = NULL;
	bool keep_record = false;
	char lease_id[40] = "mdl-", user[32], text[256];
	md_random_hex(st, lease_id + 4, 24);
	snprintf(user, sizeof user, "%u:%u", (unsigned)st->guest_uid, (unsigned)st->guest_gid);
	int64_t now = st->host->now_ms();
	int64_t expires = now + (ttl > 0 ? ttl : 900000);
	if (deadline > 0 && expires > deadline)
		expires = deadline;
	json_object_object_add(rec, "schemaVersion", json_object_new_int64(1));
	json_object_object_add(rec, "vm", json_object_new_string(purpose));
	json_object_object_add(rec, "purpose", json_object_new_string(purpose));
	json_object_object_add(rec, "guest", json_object_new_string(guest));
	json_object_object_add(rec, "image", json_object_new_string(im->key));
	json_object_object_add(rec, "imageRef", json_object_new_string(im->ref));
	json_object_object_add(rec, "lease_id", json_object_new_string(lease_id));
	json_object_object_add(rec, "state", json_object_new_string("provisioning"));
	json_object_object_add(rec, "createdAtMs", json_object_new_int64(now));
	json_object_object_add(rec, "expiresAtMs", json_object_new_int64(expires));
	json_object_object_add(rec, "deadlineMs", json_object_new_int64(deadline));
	json_object_object_add(rec, "graceMs", json_object_new_int64(st->grace_ms));
	json_object_object_add(rec, "user", json_object_new_string(user));
	json_object_object_add(rec, "network", json_object_new_string("none"));
	json_object_object_add(rec, "endpoint", json_object_new_string(st->endpoint));
	json_object_object_add(rec, "runtime", st->runtime[0] ? json_object_new_string(st->runtime) : NULL);
	json_object_object_add(rec, "display", NULL);
	set_owner(st, rec);
	/* 1. The intent, durable before the engine hears of it. */
	int lock = record_lock(st, purpose);
	int e = lock >= 0 ? record_write(st, rec) : errno;
	if (e != 0) {
		s = md_err(st, err, RELAY_E_IO, e, "cannot write the lease record under %s", st->leases_dir);
		goto done;
	}
	/* 2. The image: a service's task needs it on the manager now; a
	 * container's create says "no such image" (404) when it is missing,
	 * and the pull then happens before a second create. */
	bool service = st->swarm && swarm_manager(st, call);
	if (service) {
		s = ensure_image(st, im, call, err);
		if (s != RELAY_OK)
			goto done;
	}
	/* 3. Create: a one-replica service the Swarm manager places, or a container. */
	if (service) {
		json_object_object_add(rec, "mode", json_object_new_string("service"));
		s = create_service(st, rec, im, user, call, &keep_record, err);
		if (s != RELAY_OK)
			goto done;
		goto created;
	}
	body = create_body(st, rec, im, user);
	char path[512] = MD_API_PREFIX "/containers/create?name=";
	md_url_encode(path, sizeof path, purpose);
	md_reply r;
	s = md_api(st, "POST", path, body, -1, -1, CREATE_TIMEOUT_MS, call, &r, err);
	if (s == RELAY_OK && r.status == 404) {
		md_reply_free(&r);
		s = ensure_image(st, im, call, err);
		if (s != RELAY_OK)
			goto done;
		s = md_api(st, "POST", path, body, -1, -1, CREATE_TIMEOUT_MS, call, &r, err);
	}
	if (s == RELAY_E_UNAVAILABLE)
		goto done; /* never connected: nothing happened */
	if (s != RELAY_OK) {
		keep_record = true;
		s = md_err(st, err, RELAY_E_INDETERMINATE, 0,
		           "the create call for %s may or may not have taken effect: %s", purpose,
		           err->message);
		goto done;
	}
	long code = r.status;
	md_textf(text, sizeof text, "%.200s", md_reply_message(&r));
	if (code == 201 && md_str(r.json, "Id"))
		json_object_object_add(rec, "containerId", json_object_new_string(md_str(r.json, "Id")));
	md_reply_free(&r);
	if (code != 201) {
		int found = container_get(st, purpose, call, &info);
		if (found != 0) {
			keep_record = true;
			s = md_err(
			    st, err, RELAY_E_INDETERMINATE, 0,
			    "the engine answered HTTP %ld to the create of %s (%s), and the container %s",
			    code, purpose, text, found == 1 ? "exists" : "cannot be looked up");
			goto done;
		}
		s = md_err(st, err, code == 404 ? RELAY_E_IMAGE_UNAVAILABLE : RELAY_E_REFUSED, 0,
		           "the engine refused to create the guest container (HTTP %ld): %s", code, text);
		goto done;
	}
	json_object_object_add(rec, "container", json_object_new_string(purpose));
created:;
	/* 4. The guest program and the expiry, then start (a service's task
	 * waits for the "ready" file, the archive's last entry, and runs it). */
	const char *cref = container_of(rec);
	size_t glen = (size_t)(machine_docker_guest_end - machine_docker_guest_start);
	char expires_line[96];
	int elen = expires_text(st, rec, expires_line, sizeof expires_line);
	put_entry files[] = {
	    {.name = ".mcp-relay", .dir = true, .mode = 0755},
	    {.name = ".mcp-relay/init", .data = machine_docker_guest_start, .len = glen, .mode = 0755},
	    {.name = ".mcp-relay/expires", .data = expires_line, .len = (size_t)elen, .mode = 0644},
	    {.name = ".mcp-relay/run", .dir = true, .mode = 0700, .uid = st->guest_uid, .gid = st->guest_gid},
	    /* Last: a service's task waits for it, so it never runs a half-written init. */
	    {.name = ".mcp-relay/ready", .data = "", .len = 0, .mode = 0644},
	};
	s = put_entries(st, cref, "/", files, sizeof files / sizeof files[0], call, err);
	/* Checked before the start (Docker 20.10 has been seen to answer 200 for
	 * an archive that did not land); put again once when missing. */
	uint32_t init_mode = 0;
	if (s == RELAY_OK &&
	    (lease_path_exists(st, cref, MD_GUEST_INIT, &init_mode) != 1 || (init_mode & 0755) != 0755)) {
		md_sleep_ms(200);
		s = put_entries(st, cref, "/", files, sizeof files / sizeof files[0], call, err);
		if (s == RELAY_OK && lease_path_exists(st, cref, MD_GUEST_INIT, NULL) != 1)
			s = md_err(st, err, RELAY_E_REFUSED, 0,
			           "the engine accepted the guest program for %s but does not have it",
			           purpose);
	}
	if (s == RELAY_OK && !is_service(rec)) {
		char *start = container_path(purpose, "/start");
		s = start ? md_api(st, "POST", start, NULL, -1, -1, CREATE_TIMEOUT_MS, call, &r, err)
		          : RELAY_E_NO_MEMORY;
		free(start);
		if (s == RELAY_OK && r.status != 204 && r.status != 304)
			s = md_err(st, err, RELAY_E_REFUSED, 0,
			           "the engine could not start the guest container (HTTP %ld): %.600s%s",
			           r.status, md_reply_message(&r),
			           strstr(md_reply_message(&r), "hybrid")
			               ? "; this host mixes cgroup v1 and v2: start "
			                 "Podman with --runtime runc, or set "
			                 "options.runtime to runc"
			               : "");
		md_reply_free(&r);
	}
	json_object_put(info);
	info = NULL;
	if (s == RELAY_OK && container_get(st, cref, call, &info) == 1 && !container_running(info))
		s = md_err(st, err, RELAY_E_REFUSED, 0, "the guest container stopped at once: %s",
		           md_str(md_obj(info, "State"), "Error") ? md_str(md_obj(info, "State"), "Error")
		                                                  : "no reason given");
	if (s != RELAY_OK) {
		relay_error e2;
		if (remove_guest(st, rec, NULL, &e2) != 1)
			keep_record = true; /* the reaper or release settles it */
		goto done;
	}
	/* What the engine gave: volumes to remove later, the runtime. */
	json_object *volumes = json_object_new_array();
	json_object *mounts = md_obj(info, "Mounts");
	for (size_t i = 0; mounts && i < json_object_array_length(mounts); i++) {
		json_object *m = json_object_array_get_idx(mounts, i);
		const char *type = md_str(m, "Type");
		if (type && strcmp(type, "volume") == 0 && md_str(m, "Name"))
			json_object_array_add(volumes, json_object_new_string(md_str(m, "Name")));
	}
	json_object_object_add(rec, "volumes", volumes);
	const char *rt = md_str(md_obj(info, "HostConfig"), "Runtime");
	if (rt && strcmp(rt, "oci") != 0)
		json_object_object_add(rec, "runtime", json_object_new_string(rt));
	/* 5. The display. */
	if (st->display_enabled && lease_path_exists(st, cref, "/usr/bin/Xvfb", NULL) == 1) {
		if (start_display(st, cref, user, call))
			json_object_object_add(rec, "display", json_object_new_string(":0"));
		else
			st->host->log(RELAY_LOG_WARNING, MD_PLUGIN_NAME,
			              "%s: Xvfb is in the image but did not start; the guest has no display",
			              purpose);
	}
	/* 6. Running. */
	json_object_object_add(rec, "state", json_object_new_string("running"));
	e = record_write(st, rec);
	if (e != 0) {
		keep_record = true;
		s = md_err(st, err, RELAY_E_INDETERMINATE, e,
		           "guest %s runs but its record cannot be written", purpose);
		goto done;
	}
	*doc_out = document(st, rec, "running");
	keep_record = true;
done:
	if (!keep_record)
		record_remove(st, purpose);
	if (lock >= 0)
		close(lock);
	pthread_mutex_lock(&st->lock);
	st->acquiring--;
	pthread_mutex_unlock(&st->lock);
	json_object_put(info);
	json_object_put(body);
	json_object_put(rec);
	return s;
}

/* ---- renew, inspect ---------------------------------------------------------------- */

relay_status lease_renew(md_state *st, json_object *doc, uint64_t ttl_ms, json_object **doc_out,
                         relay_error *err)
{
	const char *vm = md_str(doc, "vm");
	if (!valid_name(vm) || ttl_ms == 0)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "renew needs a lease document and a positive ttl");
	int lock = record_lock(st, vm);
	int e = 0;
	json_object *rec = lock >= 0 ? record_read(st, vm, &e) : NULL;
	json_object *info = NULL;
	relay_status s = RELAY_OK;
	if (rec == NULL) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, e, "machine-docker no longer holds lease %s", vm);
		goto done;
	}
	const char *state = md_str(rec, "state");
	if (state == NULL || strcmp(state, "running") != 0) {
		s = md_err(st, err, RELAY_E_REFUSED, 0, "%s is %s; renewal cannot cancel committed teardown",
		           vm, state ? state : "in an unknown state");
		goto done;
	}
	int found = container_get(st, container_of(rec), NULL, &info);
	if (found == 0) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, 0, "the container of %s is gone", vm);
		goto done;
	}
	if (found < 0) {
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the container engine at %s does not answer",
		           st->endpoint);
		goto done;
	}
	if (!container_running(info)) {
		s = md_err(
		    st, err, RELAY_E_REFUSED, 0,
		    "%s is not running (its backstop stopped it, or it failed); release it and acquire a new "
		    "lease",
		    vm);
		goto done;
	}
	int64_t now = st->host->now_ms();
	int64_t expires =
	    now + (int64_t)(ttl_ms > (uint64_t)INT64_MAX / 4 ? (uint64_t)INT64_MAX / 4 : ttl_ms);
	int64_t deadline = md_int(rec, "deadlineMs", 0);
	if (deadline > 0 && expires > deadline)
		expires = deadline;
	json_object_object_add(rec, "expiresAtMs", json_object_new_int64(expires));
	json_object_object_add(rec, "renewedAtMs", json_object_new_int64(now));
	set_owner(st, rec);
	char line[96];
	int n = expires_text(st, rec, line, sizeof line);
	s = lease_put_file(st, container_of(rec), MD_GUEST_DIR, "expires", line, (size_t)n, 0644, 0, 0, NULL,
	                   err);
	if (s != RELAY_OK)
		goto done;
	e = record_write(st, rec);
	if (e != 0) {
		s = md_err(st, err, RELAY_E_IO, e, "cannot write the renewed lease %s", vm);
		goto done;
	}
	if (doc_out)
		*doc_out = document(st, rec, "running");
done:
	if (lock >= 0)
		close(lock);
	json_object_put(rec);
	json_object_put(info);
	return s;
}

relay_status lease_inspect(md_state *st, json_object *doc, relay_call *call, json_object **doc_out,
                           relay_error *err)
{
	const char *vm = md_str(doc, "vm");
	if (!valid_name(vm))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "inspect needs a lease document");
	int e = 0;
	json_object *rec = record_read(st, vm, &e);
	json_object *info = NULL;
	int found = rec ? container_get(st, container_of(rec), call, &info) : 0;
	relay_status s = RELAY_OK;
	if (found < 0) {
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the container engine at %s does not answer",
		           st->endpoint);
	} else if (found == 0 || rec == NULL) {
		s = md_err(st, err, RELAY_E_NOT_FOUND, e, "machine-docker no longer holds lease %s", vm);
	} else {
		const char *lid = label_of(info, "lease-id");
		const char *want = md_str(rec, "lease_id");
		const char *state = md_str(rec, "state");
		if (lid == NULL || want == NULL || strcmp(lid, want) != 0)
			s = md_err(
			    st, err, RELAY_E_NOT_FOUND, 0,
			    "container %s carries another lease id than lease %s; it is not this lease", vm,
			    want);
		else if (doc_out)
			*doc_out = document(st, rec,
			                    state && strcmp(state, "running") == 0 && !container_running(info)
			                        ? "failed"
			                        : state);
	}
	json_object_put(rec);
	json_object_put(info);
	return s;
}

/* ---- release, verify ------------------------------------------------------------------ */

/* Removes what a record describes: a plain container (force, with its
 * anonymous volumes), or a service, its task's container and its network.
 * 1 removed or gone, 0 refused (err filled), -1 unknown. */
static int remove_guest(md_state *st, json_object *rec, relay_call *call, relay_error *err)
{
	const char *vm = md_str(rec, "vm");
	if (!is_service(rec))
		return container_remove(st, container_of(rec), call, err);
	char path[512] = MD_API_PREFIX "/services/";
	md_url_encode(path, sizeof path, vm);
	md_reply r;
	if (md_api(st, "DELETE", path, NULL, -1, -1, 60000, call, &r, err) != RELAY_OK)
		return -1;
	long code = r.status;
	md_reply_free(&r);
	if (code != 200 && code != 204 && code != 404) {
		md_err(st, err, RELAY_E_REFUSED, 0, "the engine refused to remove the service %s (HTTP %ld)",
		       vm, code);
		return 0;
	}
	/* Swarm stops the task's container on its own time; then it is removed. */
	json_object *info = NULL;
	for (int i = 0; i < 150 && container_get(st, container_of(rec), call, &info) == 1; i++) {
		json_object_put(info);
		info = NULL;
		if (i == 20)
			container_remove(st, container_of(rec), call, err);
		md_sleep_ms(200);
	}
	json_object_put(info);
	const char *net = md_str(rec, "taskNetwork");
	for (int i = 0; net && i < 50; i++) {
		char np[512] = MD_API_PREFIX "/networks/";
		md_url_encode(np, sizeof np, net);
		if (md_api(st, "DELETE", np, NULL, -1, -1, 30000, call, &r, err) != RELAY_OK)
			return -1;
		code = r.status;
		md_reply_free(&r);
		if (code == 204 || code == 200 || code == 404)
			break;
		md_sleep_ms(200); /* still in use by the task being torn down */
	}
	return 1;
}

static relay_status verify_gone(md_state *st, const char *vm, json_object *rec, relay_call *call, char *why,
                                size_t why_size)
{
	json_object *info = NULL;
	const char *ref = container_of(rec) ? container_of(rec) : vm;
	int found = container_get(st, ref, call, &info);
	json_object_put(info);
	if (found != 0) {
		md_textf(why, why_size,
		         found == 1 ? "container %s of %s still exists"
		                    : "the engine cannot say whether %s of %s exists",
		         ref, vm);
		return RELAY_E_UNVERIFIED;
	}
	if (is_service(rec)) {
		const char *kinds[] = {"services", "networks"};
		const char *names[] = {vm, md_str(rec, "taskNetwork")};
		for (int i = 0; i < 2; i++) {
			if (names[i] == NULL)
				continue;
			char path[512];
			snprintf(path, sizeof path, MD_API_PREFIX "/%s/", kinds[i]);
			md_url_encode(path, sizeof path, names[i]);
			md_reply r;
			relay_error e;
			bool gone = md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) == RELAY_OK &&
			            r.status == 404;
			md_reply_free(&r);
			if (!gone) {
				md_textf(why, why_size, "the %s %s of %s is still there",
				         i == 0 ? "service" : "network", names[i], vm);
				return RELAY_E_UNVERIFIED;
			}
		}
	}
	json_object *vols = md_obj(rec, "volumes");
	for (size_t i = 0; vols && i < json_object_array_length(vols); i++) {
		const char *name = json_object_get_string(json_object_array_get_idx(vols, i));
		char path[512] = MD_API_PREFIX "/volumes/";
		md_url_encode(path, sizeof path, name ? name : "");
		md_reply r;
		relay_error e;
		if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) != RELAY_OK ||
		    r.status != 404) {
			md_textf(why, why_size, "volume %s of %s is still there", name ? name : "?", vm);
			md_reply_free(&r);
			return RELAY_E_UNVERIFIED;
		}
		md_reply_free(&r);
	}
	/* And no container at all carries its lease id. */
	const char *lid = md_str(rec, "lease_id");
	if (lid) {
		char filter[256], path[1024] = MD_API_PREFIX "/containers/json?all=1&filters=";
		snprintf(filter, sizeof filter, "{\"label\":[\"" MD_LABEL "lease-id=%s\"]}", lid);
		md_url_encode(path, sizeof path, filter);
		md_reply r;
		relay_error e;
		bool ok = md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, &e) == RELAY_OK &&
		          r.status == 200 && r.json && json_object_is_type(r.json, json_type_array) &&
		          json_object_array_length(r.json) == 0;
		md_reply_free(&r);
		if (!ok) {
			md_textf(why, why_size, "a container with lease id %s is still listed", lid);
			return RELAY_E_UNVERIFIED;
		}
	}
	return RELAY_OK;
}

relay_status lease_release(md_state *st, json_object *doc, relay_call *call, relay_error *err)
{
	const char *vm = md_str(doc, "vm");
	if (!valid_name(vm))
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0, "release needs a lease document");
	int lock = record_lock(st, vm);
	json_object *rec = record_read(st, vm, NULL);
	relay_status s = RELAY_OK;
	bool known = rec != NULL;
	if (rec == NULL) {
		json_object *described = md_obj(doc, "record");
		if (described == NULL || json_object_deep_copy(described, &rec, NULL) != 0 || rec == NULL) {
			s = md_err(st, err, RELAY_E_NOT_FOUND, 0, "machine-docker no longer holds lease %s",
			           vm);
			goto done;
		}
	} else {
		json_object_object_add(rec, "state", json_object_new_string("releasing"));
		record_write(st, rec);
	}
	json_object *info = NULL;
	int found = container_get(st, container_of(rec), call, &info);
	if (found == 0 && is_service(rec))
		found = 1; /* the service and its network may still be there */
	if (found == 1 && info) {
		const char *lid = label_of(info, "lease-id");
		const char *want = md_str(rec, "lease_id");
		if (lid == NULL || want == NULL || strcmp(lid, want) != 0) {
			json_object_put(info);
			s = md_err(st, err, RELAY_E_REFUSED, 0,
			           "container %s carries lease id %s, not %s: it is not removed", vm,
			           lid ? lid : "none", want ? want : "none");
			goto done;
		}
	}
	json_object_put(info);
	if (found < 0) {
		s = md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the container engine at %s does not answer",
		           st->endpoint);
		goto done;
	}
	if (found == 1 && remove_guest(st, rec, call, err) != 1) {
		if (err->message[0] == '\0')
			md_err(st, err, RELAY_E_INDETERMINATE, 0, "the removal of %s was not confirmed", vm);
		s = err->code ? err->code : RELAY_E_INDETERMINATE;
		goto done;
	}
	/* Anonymous volumes go with v=1; any left are removed by name. */
	json_object *vols = md_obj(rec, "volumes");
	for (size_t i = 0; vols && i < json_object_array_length(vols); i++) {
		const char *name = json_object_get_string(json_object_array_get_idx(vols, i));
		char path[512] = MD_API_PREFIX "/volumes/";
		md_url_encode(path, sizeof path, name ? name : "");
		md_reply r;
		relay_error e;
		if (md_api(st, "DELETE", path, NULL, -1, -1, 20000, call, &r, &e) == RELAY_OK)
			md_reply_free(&r);
	}
	char why[512];
	if (verify_gone(st, vm, rec, call, why, sizeof why) != RELAY_OK) {
		s = md_err(st, err, RELAY_E_UNVERIFIED, 0, "%s", why);
		goto done;
	}
	if (known)
		record_remove(st, vm);
	if (found == 0 && !known)
		s = md_err(st, err, RELAY_E_NOT_FOUND, 0, "machine-docker no longer holds lease %s", vm);
done:
	if (lock >= 0)
		close(lock);
	json_object_put(rec);
	return s;
}

relay_status lease_verify_gone(md_state *st, json_object *doc, relay_call *call, relay_error *err)
{
	const char *vm = md_str(doc, "vm");
	json_object *rec = md_obj(doc, "record");
	if (!valid_name(vm) || rec == NULL)
		return md_err(st, err, RELAY_E_INVALID_ARGUMENT, 0,
		              "verify needs a machine-docker lease document");
	char why[512];
	if (verify_gone(st, vm, rec, call, why, sizeof why) != RELAY_OK)
		return md_err(st, err, RELAY_E_UNVERIFIED, 0, "%s", why);
	return RELAY_OK;
}

/* ---- find, count ---------------------------------------------------------------------- */

/* Containers of this store, optionally of one purpose (array, owned). */
static json_object *list_ours(md_state *st, const char *purpose, relay_call *call, relay_error *err)
{
	json_object *filters = json_object_new_object();
	json_object *labels = json_object_new_array();
	char text[1200];
	snprintf(text, sizeof text, MD_LABEL "store=%s", st->state_dir);
	json_object_array_add(labels, json_object_new_string(text));
	if (purpose) {
		snprintf(text, sizeof text, MD_LABEL "purpose=%s", purpose);
		json_object_array_add(labels, json_object_new_string(text));
	}
	json_object_object_add(filters, "label", labels);
	char path[4096] = MD_API_PREFIX "/containers/json?all=1&filters=";
	md_url_encode(path, sizeof path, json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN));
	json_object_put(filters);
	md_reply r;
	if (md_api(st, "GET", path, NULL, -1, -1, 20000, call, &r, err) != RELAY_OK)
		return NULL;
	json_object *out = NULL;
	if (r.status == 200 && r.json && json_object_is_type(r.json, json_type_array)) {
		out = r.json;
		r.json = NULL;
	} else {
		md_err(st, err, RELAY_E_UNAVAILABLE, 0, "the engine did not list containers (HTTP %ld)",
		       r.status);
	}
	md_reply_free(&r);
	return out;
}

static const char *list_label(json_object *item, const char *name)
{
	char key[96];
	snprintf(key, sizeof key, MD_LABEL "%s", name);
	return md_str(md_obj(item, "Labels"), key);
}

relay_status lease_find(md_state *st, const char *purpose, relay_call *call, json_object **arr_out,
                        relay_error *err)
{
	*arr_out = NULL;
	json_object *list = list_ours(st, purpose, call, err);
	if (list == NULL)
		return err->code ? err->code : RELAY_E_UNAVAILABLE;
	json_object *found = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *item = json_object_array_get_idx(list, i);
		const char *name = list_label(item, "purpose");
		const char *state = md_str(item, "State");
		json_object *rec = name ? record_read(st, name, NULL) : NULL;
		if (rec == NULL) {
			/* Our store's label but no record: rebuild what the labels say. */
			rec = json_object_new_object();
			json_object_object_add(rec, "vm", json_object_new_string(name ? name : ""));
			json_object_object_add(rec, "container",
			                       json_object_new_string(md_str(item, "Id") ?: ""));
			if (list_label(item, "mode") && strcmp(list_label(item, "mode"), "service") == 0)
				json_object_object_add(rec, "mode", json_object_new_string("service"));
			json_object_object_add(rec, "purpose",
			                       json_object_new_string(list_label(item, "purpose") ?: ""));
			json_object_object_add(rec, "guest",
			                       json_object_new_string(list_label(item, "guest") ?: ""));
			json_object_object_add(rec, "image",
			                       json_object_new_string(list_label(item, "image") ?: ""));
			json_object_object_add(rec, "lease_id",
			                       json_object_new_string(list_label(item, "lease-id") ?: ""));
			json_object_object_add(
			    rec, "deadlineMs",
			    json_object_new_int64(atoll(list_label(item, "deadline-ms") ?: "0")));
			json_object_object_add(rec, "expiresAtMs", NULL);
			json_object_object_add(rec, "state", json_object_new_string("running"));
			char user[32];
			snprintf(user, sizeof user, "%u:%u", (unsigned)st->guest_uid,
			         (unsigned)st->guest_gid);
			json_object_object_add(rec, "user", json_object_new_string(user));
		}
		const char *rs = md_str(rec, "state");
		bool running = state && strcmp(state, "running") == 0;
		json_object_array_add(found,
		                      document(st, rec,
		                               rs && strcmp(rs, "provisioning") == 0 && running ? "running"
		                               : running                                        ? rs
		                                                                                : "failed"));
		json_object_put(rec);
	}
	json_object_put(list);
	*arr_out = found;
	return RELAY_OK;
}

size_t lease_count(md_state *st)
{
	DIR *d = opendir(st->leases_dir);
	size_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);
		if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0 && de->d_name[0] != '.')
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* ---- the reaper ------------------------------------------------------------------------ */

void md_reap_once(md_state *st)
{
	relay_error err;
	memset(&err, 0, sizeof err);
	json_object *list = list_ours(st, NULL, NULL, &err);
	if (list == NULL)
		return;
	int64_t now = st->host->now_ms();
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *item = json_object_array_get_idx(list, i);
		const char *name = list_label(item, "purpose");
		if (!valid_name(name))
			continue;
		int lock = record_lock(st, name);
		json_object *rec = record_read(st, name, NULL);
		int64_t expires =
		    rec ? md_int(rec, "expiresAtMs", 0) : atoll(list_label(item, "deadline-ms") ?: "0");
		int64_t grace = rec ? md_int(rec, "graceMs", st->grace_ms) : st->grace_ms;
		const char *rs = md_str(rec, "state");
		bool provisioning = rs && strcmp(rs, "provisioning") == 0;
		bool alive = rec && owner_alive(st, rec);
		/* An acquisition in flight in this relay is never reaped. */
		bool due = expires > 0 && now > expires + grace && !alive && !provisioning;
		if (due) {
			st->host->log(RELAY_LOG_INFO, MD_PLUGIN_NAME,
			              "reaping %s: its lease expired and the relay that held it is gone",
			              name);
			relay_error e2;
			memset(&e2, 0, sizeof e2);
			json_object *what = rec;
			json_object *fallback = NULL;
			if (what == NULL) {
				fallback = json_object_new_object();
				json_object_object_add(fallback, "vm", json_object_new_string(name));
				json_object_object_add(fallback, "container",
				                       json_object_new_string(md_str(item, "Id") ?: name));
				if (list_label(item, "mode") &&
				    strcmp(list_label(item, "mode"), "service") == 0) {
					json_object_object_add(fallback, "mode",
					                       json_object_new_string("service"));
					json_object_object_add(
					    fallback, "taskNetwork",
					    json_object_new_string(list_label(item, "network") ?: ""));
				}
				what = fallback;
			}
			int removed = remove_guest(st, what, NULL, &e2);
			json_object_put(fallback);
			if (removed == 1) {
				json_object *vols = md_obj(rec, "volumes");
				for (size_t k = 0; vols && k < json_object_array_length(vols); k++) {
					char path[512] = MD_API_PREFIX "/volumes/";
					md_url_encode(
					    path, sizeof path,
					    json_object_get_string(json_object_array_get_idx(vols, k)));
					md_reply r;
					if (md_api(st, "DELETE", path, NULL, -1, -1, 20000, NULL, &r, &e2) ==
					    RELAY_OK)
						md_reply_free(&r);
				}
				if (rec)
					record_remove(st, name);
			}
		}
		json_object_put(rec);
		if (lock >= 0)
			close(lock);
	}
	json_object_put(list);
}

static void *reaper_main(void *arg)
{
	md_state *st = arg;
	pthread_mutex_lock(&st->lock);
	while (!st->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t ns = (int64_t)ts.tv_nsec + (st->reaper_interval_ms % 1000) * 1000000;
		ts.tv_sec += (time_t)(st->reaper_interval_ms / 1000) + (time_t)(ns / 1000000000);
		ts.tv_nsec = (long)(ns % 1000000000);
		pthread_cond_timedwait(&st->cond, &st->lock, &ts);
		if (st->stopping)
			break;
		pthread_mutex_unlock(&st->lock);
		md_reap_once(st);
		pthread_mutex_lock(&st->lock);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

int md_reaper_start(md_state *st)
{
	int rc = pthread_create(&st->reaper, NULL, reaper_main, st);
	if (rc == 0)
		st->reaper_started = true;
	return rc;
}

void md_reaper_stop(md_state *st)
{
	if (!st->reaper_started)
		return;
	pthread_mutex_lock(&st->lock);
	st->stopping = true;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	pthread_join(st->reaper, NULL);
	st->reaper_started = false;
}
