#include "ssh_conn.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay_kit/buf.h"
#include "relay_kit/options.h"
#include "relay_support/json_get.h"
#include "relay_support/tree.h"
#include "ssh_scripts.h"
#include "ssh_session.h"

/* sun_path holds 108 bytes; OpenSSH binds "<ControlPath>.<16 random>" and
 * renames it, so a control path may use at most 108 - 1 - 17 = 90 bytes.
 * Ours are "<socket dir>/<16 hex>": the folder may use 73. */
#define SSH_SOCKET_DIR_MAX 73

/* Characters a control socket folder may hold without quoting or ssh's
 * %-token expansion getting in the way. */
static bool plain_path(const char *p)
{
	for (; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '/' || *p == '.' || *p == '_' || *p == '-'))
			return false;
	return true;
}

/* Where a deployment sets these options (docs/transfer-ssh.md). */
#define SSH_OPTIONS_WHERE "MCP_RELAY_TRANSFER_SSH_OPTIONS"

/* options.ssh: the ssh program, a non-empty string. */
static relay_status opt_ssh(const rk_options *spec, const rk_option *opt, json_object *value,
                            relay_error *err)
{
	(void)opt;
	if (!json_object_is_type(value, json_type_string) || json_object_get_string_len(value) == 0)
		return spec->host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                             "transfer-ssh: options.ssh must be the ssh program, a non-empty "
		                             "string; fix it in " SSH_OPTIONS_WHERE);
	return RELAY_OK;
}

/* The options through the kit's table (relay_kit/options.h): unknown keys
 * and numbers out of range are refused naming where to fix them. */
static relay_status read_options(const relay_host *host, json_object *options, ssh_plugin *plugin,
                                 relay_error *err)
{
	int64_t connect_s = 10, persist_s = 300, spares = SSH_SPARES_DEFAULT;
	const rk_option table[] = {
	    {"ssh", opt_ssh, 0, 0, NULL},
	    {"connectTimeoutSeconds", NULL, 1, 600, &connect_s},
	    {"controlPersistSeconds", NULL, 1, 86400, &persist_s},
	    {"spareSessions", NULL, 0, SSH_SPARES_MAX, &spares},
	};
	const rk_options spec = {
	    host, SSH_PLUGIN_NAME, SSH_OPTIONS_WHERE, table, sizeof table / sizeof table[0], NULL};
	relay_status s = rk_options_parse(&spec, options, err);
	plugin->connect_timeout_s = (unsigned)connect_s;
	plugin->control_persist_s = (unsigned)persist_s;
	plugin->spare_sessions = (unsigned)spares;
	return s;
}

relay_status ssh_plugin_create(const relay_host *host, const char *config_json, ssh_plugin **out,
                               relay_error *err)
{
	relay_status status = RELAY_OK;
	json_object *config = NULL;
	ssh_plugin *plugin = calloc(1, sizeof *plugin);
	*out = NULL;
	if (plugin == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory starting transfer-ssh");
	plugin->host = host;

	config = json_tokener_parse(config_json ? config_json : "");
	if (config == NULL || !json_object_is_type(config, json_type_object)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "transfer-ssh: the init config is not a JSON object");
		goto cleanup;
	}
	json_object *options = NULL;
	if (!json_object_object_get_ex(config, "options", &options) ||
	    !json_object_is_type(options, json_type_object))
		options = NULL;
	status = read_options(host, options, plugin, err);
	if (status != RELAY_OK)
		goto cleanup;
	const char *ssh_program = options ? rsj_get_str(options, "ssh") : NULL;
	plugin->ssh_program = strdup(ssh_program ? ssh_program : "ssh");
	if (plugin->ssh_program == NULL) {
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory starting transfer-ssh");
		goto cleanup;
	}

	const char *state_dir = rsj_get_str(config, "stateDir");
	if (state_dir == NULL || state_dir[0] != '/') {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "transfer-ssh: the init config lacks an absolute \"stateDir\"");
		goto cleanup;
	}
	char candidate[PATH_MAX];
	int n = snprintf(candidate, sizeof candidate, "%s/cm", state_dir);
	if (n > 0 && (size_t)n <= SSH_SOCKET_DIR_MAX && plain_path(candidate)) {
		if (rs_mkdir_p(candidate, 0700, RS_MKDIR_NO_LINK_LEAF, NULL) != 0) {
			status =
			    host->error_set(err, RELAY_E_IO, errno,
			                    "transfer-ssh: cannot create the control socket folder %s: %s",
			                    candidate, strerror(errno));
			goto cleanup;
		}
		plugin->socket_dir = strdup(candidate);
	} else {
		/* The state folder is too deep (or holds characters ssh would
		 * expand) for a socket path: use a private folder in /tmp. */
		char tmpl[] = "/tmp/relay-ssh-XXXXXX";
		if (mkdtemp(tmpl) == NULL) {
			status =
			    host->error_set(err, RELAY_E_IO, errno,
			                    "transfer-ssh: cannot create a control socket folder in /tmp: %s",
			                    strerror(errno));
			goto cleanup;
		}
		plugin->socket_dir = strdup(tmpl);
		plugin->socket_dir_owned = true;
		host->log(RELAY_LOG_DEBUG, SSH_PLUGIN_NAME,
		          "state folder too long for control sockets; using %s", tmpl);
	}
	if (plugin->socket_dir == NULL) {
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory starting transfer-ssh");
		goto cleanup;
	}
	*out = plugin;
	plugin = NULL;
cleanup:
	json_object_put(config);
	ssh_plugin_destroy(plugin);
	return status;
}

void ssh_plugin_destroy(ssh_plugin *plugin)
{
	if (plugin == NULL)
		return;
	if (plugin->socket_dir_owned && plugin->socket_dir)
		rmdir(plugin->socket_dir);
	free(plugin->socket_dir);
	free(plugin->ssh_program);
	free(plugin);
}

void ssh_conn_free(ssh_conn *conn)
{
	if (conn == NULL)
		return;
	if (conn->spares) {
		ssh_spares_stop(conn->spares);
		pthread_mutex_destroy(&conn->spares->lock);
		free(conn->spares);
	}
	free(conn->host);
	free(conn->user);
	free(conn->identity_file);
	free(conn->known_hosts_file);
	free(conn->control_path);
	free(conn);
}

/* A host name or address ssh takes as a destination: no user part, no
 * option look-alike, nothing a shell or ssh would reinterpret. */
static bool valid_host(const char *h)
{
	if (h == NULL || h[0] == '\0' || h[0] == '-' || strlen(h) > 253)
		return false;
	for (const char *p = h; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '.' || *p == '-' || *p == '_' || *p == ':'))
			return false;
	return true;
}

static bool valid_user(const char *u)
{
	if (u == NULL || u[0] == '\0' || u[0] == '-' || strlen(u) > 64)
		return false;
	for (const char *p = u; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '.' || *p == '-' || *p == '_' || *p == '@' || *p == '$'))
			return false;
	return true;
}

/* A file path ssh reads through -i or a quoted -o value: absolute, no
 * control characters, no quote or backslash, no ${ (ssh expands it). */
static bool valid_file_path(const char *p)
{
	if (p == NULL || p[0] != '/')
		return false;
	for (const char *q = p; *q; q++) {
		unsigned char ch = (unsigned char)*q;
		if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\')
			return false;
		if (ch == '$' && q[1] == '{')
			return false;
	}
	return true;
}

relay_status ssh_conn_from_lease(ssh_plugin *plugin, const char *lease_json, ssh_conn **out, relay_error *err)
{
	const relay_host *host = plugin->host;
	relay_status status = RELAY_OK;
	ssh_conn *conn = NULL;
	json_object *lease = json_tokener_parse(lease_json ? lease_json : "");
	*out = NULL;
	if (lease == NULL || !json_object_is_type(lease, json_type_object)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                         "the lease document is not a JSON object");
		goto cleanup;
	}
	json_object *ssh = NULL;
	if (!json_object_object_get_ex(lease, "ssh", &ssh) || !json_object_is_type(ssh, json_type_object)) {
		status = host->error_set(
		    err, RELAY_E_UNSUPPORTED, 0,
		    "the lease has no \"ssh\" endpoint, so transfer-ssh cannot reach this guest");
		goto cleanup;
	}
	const char *h = rsj_get_str(ssh, "host");
	const char *u = rsj_get_str(ssh, "user");
	const char *id = rsj_get_str(ssh, "identityFile");
	const char *kh = rsj_get_str(ssh, "knownHostsFile");
	int64_t port = 22;
	json_object *pv = NULL;
	if (json_object_object_get_ex(ssh, "port", &pv) && !json_object_is_type(pv, json_type_null)) {
		if (!json_object_is_type(pv, json_type_int)) {
			status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
			                         "the lease's ssh \"port\" is not an integer");
			goto cleanup;
		}
		port = json_object_get_int64(pv);
	}
	if (!valid_host(h)) {
		status = host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "the lease's ssh \"host\" is missing or not a plain host name or address");
		goto cleanup;
	}
	if (port < 1 || port > 65535) {
		status =
		    host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                    "the lease's ssh \"port\" %lld is outside 1..65535", (long long)port);
		goto cleanup;
	}
	if (!valid_user(u)) {
		status = host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "the lease's ssh \"user\" is missing or holds characters ssh cannot take");
		goto cleanup;
	}
	if (!valid_file_path(id)) {
		status = host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "the lease's ssh \"identityFile\" is missing or not a plain absolute path");
		goto cleanup;
	}
	if (!valid_file_path(kh)) {
		status = host->error_set(
		    err, RELAY_E_INVALID_ARGUMENT, 0,
		    "the lease's ssh \"knownHostsFile\" is missing or not a plain absolute path; "
		    "transfer-ssh checks host keys strictly and needs one");
		goto cleanup;
	}
	struct stat st;
	if (stat(id, &st) != 0 || !S_ISREG(st.st_mode)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, errno,
		                         "the lease's ssh identity file %s is not a readable file", id);
		goto cleanup;
	}
	if (stat(kh, &st) != 0 || !S_ISREG(st.st_mode)) {
		status = host->error_set(err, RELAY_E_INVALID_ARGUMENT, errno,
		                         "the lease's known hosts file %s is not a readable file", kh);
		goto cleanup;
	}

	conn = calloc(1, sizeof *conn);
	if (conn == NULL) {
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
		                         "out of memory opening an ssh connection");
		goto cleanup;
	}
	conn->plugin = plugin;
	conn->port = (unsigned)port;
	conn->host = strdup(h);
	conn->user = strdup(u);
	conn->identity_file = strdup(id);
	conn->known_hosts_file = strdup(kh);
	unsigned char raw[8];
	status = host->random_bytes(raw, sizeof raw, err);
	if (status != RELAY_OK)
		goto cleanup;
	char cp[PATH_MAX];
	snprintf(cp, sizeof cp, "%s/%02x%02x%02x%02x%02x%02x%02x%02x", plugin->socket_dir, raw[0], raw[1],
	         raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]);
	conn->control_path = strdup(cp);
	conn->spares = malloc(sizeof *conn->spares);
	if (conn->spares)
		ssh_spares_init(conn->spares, plugin->spare_sessions);
	if (!conn->host || !conn->user || !conn->identity_file || !conn->known_hosts_file ||
	    !conn->control_path || !conn->spares) {
		status = host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
		                         "out of memory opening an ssh connection");
		goto cleanup;
	}
	*out = conn;
	conn = NULL;
cleanup:
	json_object_put(lease);
	ssh_conn_free(conn);
	return status;
}

void ssh_argv_free(char **argv)
{
	if (argv == NULL)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

/* ssh expands %-tokens in file options: a literal % is written %%. */
static void put_percent_escaped(rk_buf *b, const char *path)
{
	for (const char *p = path; *p; p++) {
		if (*p == '%')
			rk_buf_append(b, "%%", 2);
		else
			rk_buf_append(b, p, 1);
	}
}

char **ssh_argv(const ssh_conn *conn, ssh_mode mode, const char *remote_command)
{
	const ssh_plugin *plugin = conn->plugin;
	enum { MAX_ARGS = 80 };
	char **argv = calloc(MAX_ARGS, sizeof *argv);
	size_t n = 0;
	bool ok = argv != NULL;
#define ADD(text)                                                                                            \
	do {                                                                                                 \
		if (ok && n + 1 < MAX_ARGS && (argv[n] = strdup(text)) != NULL)                              \
			n++;                                                                                 \
		else                                                                                         \
			ok = false;                                                                          \
	} while (0)
#define ADDF(...)                                                                                            \
	do {                                                                                                 \
		char tmp_[PATH_MAX + 64];                                                                    \
		if (snprintf(tmp_, sizeof tmp_, __VA_ARGS__) >= (int)sizeof tmp_)                            \
			ok = false;                                                                          \
		ADD(tmp_);                                                                                   \
	} while (0)
	if (!ok)
		return NULL;
	ADD(plugin->ssh_program);
	ADD("-F");
	ADD("/dev/null");
	ADD("-T");
	ADD("-x");
	ADD("-a");
	{
		rk_buf b = RK_BUF_INIT;
		rk_buf_puts(&b, "UserKnownHostsFile=\"");
		put_percent_escaped(&b, conn->known_hosts_file);
		rk_buf_puts(&b, "\"");
		ADD("-o");
		if (b.failed)
			ok = false;
		else
			ADD(rk_buf_str(&b));
		rk_buf_free(&b);
	}
	static const char *const fixed[] = {
	    "BatchMode=yes",
	    "StrictHostKeyChecking=yes",
	    "GlobalKnownHostsFile=/dev/null",
	    "UpdateHostKeys=no",
	    "CheckHostIP=no",
	    "IdentitiesOnly=yes",
	    "IdentityAgent=none",
	    "PasswordAuthentication=no",
	    "KbdInteractiveAuthentication=no",
	    "ForwardAgent=no",
	    "ForwardX11=no",
	    "ClearAllForwardings=yes",
	    "PermitLocalCommand=no",
	    "ServerAliveInterval=15",
	    "ServerAliveCountMax=4",
	    "LogLevel=ERROR",
	};
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
		ADD("-o");
		ADD(fixed[i]);
	}
	ADD("-o");
	ADDF("ConnectTimeout=%u", plugin->connect_timeout_s);
	ADD("-o");
	ADDF("ControlPath=%s", conn->control_path);
	ADD("-o");
	ADD(mode == SSH_MODE_MASTER ? "ControlMaster=yes" : "ControlMaster=auto");
	ADD("-o");
	ADDF("ControlPersist=%u", plugin->control_persist_s);
	{
		rk_buf b = RK_BUF_INIT;
		put_percent_escaped(&b, conn->identity_file);
		ADD("-i");
		if (b.failed)
			ok = false;
		else
			ADD(rk_buf_str(&b));
		rk_buf_free(&b);
	}
	ADD("-p");
	ADDF("%u", conn->port);
	ADD("-l");
	ADD(conn->user);
	if (mode == SSH_MODE_MASTER) {
		ADD("-N");
		ADD("-f");
	} else if (mode == SSH_MODE_EXIT) {
		ADD("-O");
		ADD("exit");
	}
	ADD("--");
	ADD(conn->host);
	if (mode == SSH_MODE_SESSION && remote_command)
		ADD(remote_command);
#undef ADD
#undef ADDF
	if (!ok) {
		ssh_argv_free(argv);
		return NULL;
	}
	return argv;
}

char *ssh_script_command(const char *const *script, const char *const *args)
{
	rk_buf text = RK_BUF_INIT, b = RK_BUF_INIT;
	for (size_t i = 0; script && script[i]; i++)
		rk_buf_puts(&text, script[i]);
	rk_buf_puts(&b, "exec /bin/sh -c ");
	rk_buf_quote(&b, rk_buf_str(&text));
	rk_buf_puts(&b, " relay-ssh");
	for (size_t i = 0; args && args[i]; i++) {
		rk_buf_puts(&b, " ");
		rk_buf_quote(&b, args[i]);
	}
	bool failed = text.failed || b.failed;
	rk_buf_free(&text);
	if (failed) {
		rk_buf_free(&b);
		return NULL;
	}
	return b.data ? b.data : strdup("");
}

relay_status ssh_run_script(const ssh_conn *conn, const char *const *script, const char *const *args,
                            uint64_t timeout_ms, size_t max_output_bytes, relay_call *call,
                            relay_process_result *res, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	char *command = ssh_script_command(script, args);
	char **argv = command ? ssh_argv(conn, SSH_MODE_SESSION, command) : NULL;
	relay_status status;
	if (argv == NULL) {
		status =
		    host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM, "out of memory building an ssh command");
		goto cleanup;
	}
	relay_process_request req = {
	    .struct_size = sizeof req,
	    .argv = (const char *const *)argv,
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .timeout_ms = timeout_ms,
	    .max_output_bytes = max_output_bytes,
	};
	res->struct_size = sizeof *res;
	status = host->process_run(&req, call, 0, res, err);
cleanup:
	ssh_argv_free(argv);
	free(command);
	return status;
}

/* The last line of `text` containing `needle`, made printable, into out. */
static bool last_line_with(const char *text, size_t len, const char *needle, char *out, size_t out_len)
{
	const char *found = NULL;
	size_t nlen = strlen(needle);
	for (size_t i = 0; i + nlen <= len; i++)
		if (memcmp(text + i, needle, nlen) == 0)
			found = text + i;
	if (found == NULL)
		return false;
	const char *start = found;
	while (start > text && start[-1] != '\n')
		start--;
	size_t j = 0;
	for (const char *p = start; p < text + len && *p != '\n' && j + 1 < out_len; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '\r')
			continue;
		out[j++] = (ch < 0x20 || ch >= 0x7f) ? '?' : (char)ch;
	}
	out[j] = '\0';
	return true;
}

bool ssh_text_contains(const char *text, size_t len, const char *needle)
{
	size_t nlen = strlen(needle);
	for (size_t i = 0; text && i + nlen <= len; i++)
		if (memcmp(text + i, needle, nlen) == 0)
			return true;
	return false;
}

relay_status ssh_failure(const ssh_conn *conn, const char *what, int exit_code, const char *err_text,
                         size_t err_len, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	char line[160];
	if (err_text == NULL)
		err_len = 0;
	if (exit_code >= SSH_SCRIPT_EXIT_INVALID && exit_code <= SSH_SCRIPT_EXIT_INTEGRITY &&
	    last_line_with(err_text, err_len, "relay-ssh: ", line, sizeof line)) {
		static const relay_status codes[] = {RELAY_E_INVALID_ARGUMENT, RELAY_E_NOT_FOUND,
		                                     RELAY_E_UNSAFE_PATH, RELAY_E_IO, RELAY_E_INTEGRITY};
		return host->error_set(err, codes[exit_code - SSH_SCRIPT_EXIT_INVALID], 0, "%s: %s", what,
		                       line + strlen("relay-ssh: "));
	}
	if (exit_code == 255 || exit_code < 0) {
		if (ssh_text_contains(err_text, err_len, "UNPROTECTED PRIVATE KEY FILE") ||
		    ssh_text_contains(err_text, err_len, "bad permissions"))
			return host->error_set(
			    err, RELAY_E_INVALID_ARGUMENT, 0,
			    "%s: ssh refuses the identity file %s because others can read it; "
			    "make it mode 0600",
			    what, conn->identity_file);
		if (ssh_text_contains(err_text, err_len, "Host key verification failed") ||
		    ssh_text_contains(err_text, err_len, "IDENTIFICATION HAS CHANGED") ||
		    ssh_text_contains(err_text, err_len, "host key is known"))
			return host->error_set(
			    err, RELAY_E_REFUSED, 0,
			    "%s: the guest %s:%u presented a host key that %s does not list "
			    "(strict host key checking); fix the lease's knownHostsFile",
			    what, conn->host, conn->port, conn->known_hosts_file);
		if (ssh_text_contains(err_text, err_len, "Permission denied"))
			return host->error_set(err, RELAY_E_REFUSED, 0,
			                       "%s: the guest %s:%u refused the key %s for user %s", what,
			                       conn->host, conn->port, conn->identity_file, conn->user);
		static const char *const transient[] = {
		    "Connection refused", "timed out",   "No route to host", "Network is unreachable",
		    "Could not resolve",  "not known",   "Connection reset", "Connection closed",
		    "closed by remote",   "Broken pipe", "kex_exchange",     "banner exchange",
		    "open failed",        "mux_client",  "Control socket",   "disconnect",
		};
		for (size_t i = 0; i < sizeof transient / sizeof transient[0]; i++)
			if (last_line_with(err_text, err_len, transient[i], line, sizeof line))
				return host->error_set(err, RELAY_E_TRANSIENT, 0, "%s: ssh failed: %s", what,
				                       line);
		return host->error_set(err, RELAY_E_TRANSIENT, 0,
		                       "%s: ssh to %s:%u failed (exit %d) without saying why", what,
		                       conn->host, conn->port, exit_code);
	}
	if (exit_code == 126 || exit_code == 127) {
		if (last_line_with(err_text, err_len, "not found", line, sizeof line))
			return host->error_set(err, RELAY_E_UNAVAILABLE, 0, "%s: a guest tool is missing: %s",
			                       what, line);
		return host->error_set(err, RELAY_E_UNAVAILABLE, 0,
		                       "%s: the guest could not run a tool the transport needs (exit %d)",
		                       what, exit_code);
	}
	return host->error_set(err, RELAY_E_IO, 0, "%s: the guest side failed with exit status %d", what,
	                       exit_code);
}

relay_status ssh_master_start(const ssh_conn *conn, relay_call *call, relay_error *err)
{
	const relay_host *host = conn->plugin->host;
	relay_status status;
	relay_process_result res = {.struct_size = sizeof res};
	char **argv = ssh_argv(conn, SSH_MODE_MASTER, NULL);
	if (argv == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, ENOMEM,
		                       "out of memory building an ssh command");
	relay_process_request req = {
	    .struct_size = sizeof req,
	    .argv = (const char *const *)argv,
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .timeout_ms = (uint64_t)(conn->plugin->connect_timeout_s + 20) * 1000u,
	    .max_output_bytes = 16384,
	};
	status = host->process_run(&req, call, RELAY_PROCESS_MERGE_OUTPUT, &res, err);
	if (status != RELAY_OK)
		goto cleanup;
	if (res.timed_out) {
		status = host->error_set(err, RELAY_E_TRANSIENT, 0,
		                         "opening ssh to %s:%u timed out before the guest authenticated us",
		                         conn->host, conn->port);
		goto cleanup;
	}
	if (res.exit_code != 0) {
		status = ssh_failure(conn, "opening the ssh connection",
		                     res.exit_code < 0 ? 255 : res.exit_code, res.out, res.out_len, err);
		goto cleanup;
	}
cleanup:
	host->free(res.out);
	host->free(res.err);
	ssh_argv_free(argv);
	return status;
}

void ssh_master_stop(const ssh_conn *conn)
{
	const relay_host *host = conn->plugin->host;
	relay_process_result res = {.struct_size = sizeof res};
	relay_error ignored;
	char **argv = ssh_argv(conn, SSH_MODE_EXIT, NULL);
	if (argv != NULL) {
		relay_process_request req = {
		    .struct_size = sizeof req,
		    .argv = (const char *const *)argv,
		    .stdin_fd = -1,
		    .stdout_fd = -1,
		    .timeout_ms = 10000,
		    .max_output_bytes = 4096,
		};
		if (host->process_run(&req, NULL, RELAY_PROCESS_MERGE_OUTPUT, &res, &ignored) == RELAY_OK) {
			host->free(res.out);
			host->free(res.err);
		}
		ssh_argv_free(argv);
	}
	unlink(conn->control_path);
}

relay_status ssh_token(const relay_host *host, char out[33], relay_error *err)
{
	unsigned char raw[16];
	relay_status status = host->random_bytes(raw, sizeof raw, err);
	if (status != RELAY_OK)
		return status;
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[32] = '\0';
	return RELAY_OK;
}
