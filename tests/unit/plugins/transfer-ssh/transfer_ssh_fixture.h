/*
 * transfer_ssh_fixture.h — a real OpenSSH server for the transfer-ssh
 * tests, and the plugin loaded through the real loader.
 *
 * ssh_fixture_start() generates a throwaway host key and user key with
 * ssh-keygen, writes an sshd_config of its own (127.0.0.1, a free port,
 * UsePAM no, key-only root login, AuthorizedKeysFile and PidFile in the
 * fixture's folder, StrictModes no, HOME of the fixture's own, plus any
 * extra lines), runs
 * `sshd -D -e -f <config>` in the background and waits until it accepts
 * connections. The lease document's "ssh" object points at it; the guest
 * root is a fresh folder under /var/tmp. Tests skip (with the reason) when
 * not run as root or when sshd/ssh/ssh-keygen are missing.
 *
 * Included by tests/unit/plugins/transfer-ssh/test_transfer_ssh_*.c only; every function is
 * static and marked unused so each test takes what it needs.
 */
#ifndef TRANSFER_SSH_FIXTURE_H
#define TRANSFER_SSH_FIXTURE_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loader/loader.h"

#define FIXTURE_UNUSED __attribute__((unused))

typedef struct ssh_fixture {
	char dir[64];        /* keys, config, logs */
	char guest_root[64]; /* /var/tmp/relay-ssh-guest-XXXXXX */
	char home[80];       /* HOME of every session: <dir>/home */
	char host_key[128];
	char user_key[128];
	char known_hosts[128];
	char config[128];
	int port;
	pid_t sshd_pid;
	char lease[1024];
} ssh_fixture;

/* In a cmocka test (include after <cmocka.h>): skips it, saying why on
 * stderr, when `reason` (from ssh_fixture_missing) is set. */
#define SSH_SKIP_IF(reason)                                                                                  \
	do {                                                                                                 \
		if (reason) {                                                                                \
			fprintf(stderr, "skipped: %s\n", reason);                                            \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

typedef struct ssh_plugin_handle {
	plugin_registry registry;
	loaded_plugin *plugin;
	char state_dir[64];
	char load_error[RELAY_ERROR_MESSAGE_BYTES]; /* why the last load failed, "" otherwise */
} ssh_plugin_handle;

/* Why the fixture cannot run here, or NULL. */
FIXTURE_UNUSED static const char *ssh_fixture_missing(void)
{
	if (geteuid() != 0)
		return "the sshd fixture needs root (sshd's privilege separation folder and key login as "
		       "root)";
	if (access("/usr/sbin/sshd", X_OK) != 0)
		return "/usr/sbin/sshd is missing (apt-get install openssh-server)";
	if (system("command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1") != 0)
		return "ssh or ssh-keygen is missing (apt-get install openssh-client)";
	return NULL;
}

FIXTURE_UNUSED static int fixture_run(const char *cmd)
{
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

FIXTURE_UNUSED static int fixture_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof sa;
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

FIXTURE_UNUSED static int fixture_port_open(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

FIXTURE_UNUSED static void fixture_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* Reads the first two fields ("type base64") of a public key file. */
FIXTURE_UNUSED static int fixture_pubkey(const char *path, char *out, size_t out_len)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	char type[64], key[512];
	int n = fscanf(f, "%63s %511s", type, key);
	fclose(f);
	if (n != 2)
		return -1;
	snprintf(out, out_len, "%s %s", type, key);
	return 0;
}

/* Starts sshd. `env_vars` (may be NULL: "NAME=value ...") are set in every
 * session next to HOME, which is a folder of the fixture's own (an empty
 * one unless the test puts rc files there): the sessions never run the
 * build machine's own ~/.bashrc, whose `pyenv init` takes a lock that a
 * session killed at the wrong moment (ssh_fixture_stop_server kills every
 * session) leaves behind, making every later root login wait 60 s.
 * `extra_config` (may be NULL; whole lines) comes first in sshd_config, so
 * its keywords win over the fixture's own (sshd takes the first value of
 * each keyword: "MaxSessions 2\n" overrides the fixture's 64); it must not
 * hold SetEnv or a Match block.
 * Returns 0, or -1 with the reason on stderr. */
FIXTURE_UNUSED static int ssh_fixture_start_env(ssh_fixture *fx, const char *env_vars,
                                                const char *extra_config)
{
	char cmd[1024], text[2048], pub[600];
	memset(fx, 0, sizeof *fx);
	fx->sshd_pid = -1;
	strcpy(fx->dir, "/tmp/relay-sshd-XXXXXX");
	strcpy(fx->guest_root, "/var/tmp/relay-ssh-guest-XXXXXX");
	if (mkdtemp(fx->dir) == NULL || mkdtemp(fx->guest_root) == NULL) {
		fprintf(stderr, "fixture: mkdtemp failed: %s\n", strerror(errno));
		return -1;
	}
	mkdir("/run/sshd", 0755); /* sshd's privilege separation folder */
	snprintf(fx->home, sizeof fx->home, "%s/home", fx->dir);
	mkdir(fx->home, 0700);
	snprintf(fx->host_key, sizeof fx->host_key, "%s/host_key", fx->dir);
	snprintf(fx->user_key, sizeof fx->user_key, "%s/user_key", fx->dir);
	snprintf(fx->known_hosts, sizeof fx->known_hosts, "%s/known_hosts", fx->dir);
	snprintf(fx->config, sizeof fx->config, "%s/sshd_config", fx->dir);
	snprintf(cmd, sizeof cmd,
	         "ssh-keygen -q -t ed25519 -N '' -C relay-test-host -f %s && "
	         "ssh-keygen -q -t ed25519 -N '' -C relay-test-user -f %s && cp %s.pub %s/authorized_keys",
	         fx->host_key, fx->user_key, fx->user_key, fx->dir);
	if (fixture_run(cmd) != 0) {
		fprintf(stderr, "fixture: ssh-keygen failed\n");
		return -1;
	}
	fx->port = fixture_free_port();
	snprintf(
	    text, sizeof text,
	    "%sPort %d\nListenAddress 127.0.0.1\nHostKey %s\nUsePAM no\nPermitRootLogin prohibit-password\n"
	    "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
	    "AuthorizedKeysFile %s/authorized_keys\nStrictModes no\nPidFile %s/sshd.pid\n"
	    "MaxSessions 64\nMaxStartups 64\nSubsystem sftp internal-sftp\nSetEnv HOME=%s%s%s\n",
	    extra_config ? extra_config : "", fx->port, fx->host_key, fx->dir, fx->dir, fx->home,
	    env_vars ? " " : "", env_vars ? env_vars : "");
	fixture_write(fx->config, text);
	snprintf(text, sizeof text, "%s.pub", fx->host_key);
	if (fixture_pubkey(text, pub, sizeof pub) != 0) {
		fprintf(stderr, "fixture: cannot read %s\n", text);
		return -1;
	}
	snprintf(text, sizeof text, "[127.0.0.1]:%d %s\n", fx->port, pub);
	fixture_write(fx->known_hosts, text);
	char log_path[128];
	snprintf(log_path, sizeof log_path, "%s/sshd.log", fx->dir);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		setpgid(0, 0);
		execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", fx->config, (char *)NULL);
		_exit(127);
	}
	fx->sshd_pid = pid;
	for (int i = 0; i < 100; i++) {
		if (fixture_port_open(fx->port))
			break;
		struct timespec ts = {0, 50 * 1000000};
		nanosleep(&ts, NULL);
	}
	if (!fixture_port_open(fx->port)) {
		snprintf(cmd, sizeof cmd, "cat %s >&2", log_path);
		fixture_run(cmd);
		fprintf(stderr, "fixture: sshd did not start on port %d\n", fx->port);
		return -1;
	}
	snprintf(
	    fx->lease, sizeof fx->lease,
	    "{\"vm\":\"ssh-test\",\"purpose\":\"relay-ssh-test-0\",\"image\":\"localhost\",\"lease_id\":null,"
	    "\"state\":\"running\",\"expiresAtMs\":null,\"console\":null,\"display\":null,"
	    "\"ssh\":{\"host\":\"127.0.0.1\",\"port\":%d,\"user\":\"root\",\"identityFile\":\"%s\","
	    "\"knownHostsFile\":\"%s\"},\"record\":{}}",
	    fx->port, fx->user_key, fx->known_hosts);
	return 0;
}

/* ssh_fixture_start_env without extra session variables. */
FIXTURE_UNUSED static int ssh_fixture_start(ssh_fixture *fx, const char *extra_config)
{
	return ssh_fixture_start_env(fx, NULL, extra_config);
}

/* The parent of `pid` from /proc, or -1. */
FIXTURE_UNUSED static pid_t fixture_ppid(pid_t pid)
{
	char path[64], line[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	pid_t ppid = -1;
	if (fgets(line, sizeof line, f)) {
		char *rp = strrchr(line, ')');
		char state = 0;
		int parent = 0;
		if (rp && sscanf(rp + 2, "%c %d", &state, &parent) == 2)
			ppid = parent;
	}
	fclose(f);
	return ppid;
}

/* Kills every process descended from `root` (sshd's connections and their
 * sessions), parents before children, so a connection drops before the
 * commands it carries can report anything. */
FIXTURE_UNUSED static void ssh_fixture_kill_tree(pid_t root)
{
	enum { MAX_TREE = 512 };
	pid_t tree[MAX_TREE];
	size_t count = 0;
	tree[count++] = root;
	for (size_t next = 0; next < count; next++) {
		DIR *d = opendir("/proc");
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL && count < MAX_TREE) {
			pid_t pid = (pid_t)atoi(de->d_name);
			if (pid > 0 && fixture_ppid(pid) == tree[next])
				tree[count++] = pid;
		}
		if (d)
			closedir(d);
	}
	for (size_t k = 1; k < count; k++)
		kill(tree[k], SIGKILL);
}

FIXTURE_UNUSED static void ssh_fixture_stop_server(ssh_fixture *fx)
{
	if (fx->sshd_pid > 0) {
		ssh_fixture_kill_tree(fx->sshd_pid);
		kill(fx->sshd_pid, SIGKILL);
		waitpid(fx->sshd_pid, NULL, 0);
		fx->sshd_pid = -1;
	}
}

FIXTURE_UNUSED static void ssh_fixture_stop(ssh_fixture *fx)
{
	char cmd[256];
	ssh_fixture_stop_server(fx);
	if (fx->dir[0]) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
		fixture_run(cmd);
	}
	if (fx->guest_root[0]) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->guest_root);
		fixture_run(cmd);
	}
}

/* Writes `len` pseudo-random bytes (seeded) to path with `mode`. */
FIXTURE_UNUSED static int fixture_random_file(const char *path, size_t len, unsigned seed, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	if (fd < 0)
		return -1;
	unsigned x = seed * 2654435761u + 1u;
	char buf[4096];
	size_t left = len;
	while (left > 0) {
		size_t n = left < sizeof buf ? left : sizeof buf;
		for (size_t i = 0; i < n; i++) {
			x = x * 1103515245u + 12345u;
			buf[i] = (char)(x >> 16);
		}
		if (write(fd, buf, n) != (ssize_t)n) {
			close(fd);
			return -1;
		}
		left -= n;
	}
	fchmod(fd, mode);
	return close(fd);
}

/* 1 when both files exist and hold the same bytes. */
FIXTURE_UNUSED static int fixture_same_file(const char *a, const char *b)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "cmp -s -- '%s' '%s'", a, b);
	return fixture_run(cmd) == 0;
}

/* 1 when both trees hold the same names, types and file bytes. */
FIXTURE_UNUSED static int fixture_same_tree(const char *a, const char *b)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "diff -r --no-dereference -- '%s' '%s' >/dev/null 2>&1", a, b);
	return fixture_run(cmd) == 0;
}

FIXTURE_UNUSED static int fixture_exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* Number of entries in `dir` whose name starts with `prefix`. */
FIXTURE_UNUSED static int fixture_count_prefix(const char *dir, const char *prefix)
{
	int n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL)
		if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
			n++;
	if (d)
		closedir(d);
	return n;
}

/* Loads build/lib/mcp-relay/plugins/<name>.so through the loader with the
 * plugin options `options_json` (a JSON object). On failure the loader's
 * message is in h->load_error. */
FIXTURE_UNUSED static int ssh_plugin_load_options(ssh_plugin_handle *h, const char *name,
                                                  relay_plugin_kind kind, const char *options_json)
{
	memset(h, 0, sizeof *h);
	const char *build = getenv("RELAY_BUILD_DIR");
	char plugin_dir[512], config[1024];
	if (build == NULL) {
		fprintf(stderr, "RELAY_BUILD_DIR is not set (run under ctest)\n");
		return -1;
	}
	snprintf(plugin_dir, sizeof plugin_dir, "%s/lib/mcp-relay/plugins", build);
	setenv("MCP_RELAY_PLUGIN_PATH", plugin_dir, 1);
	strcpy(h->state_dir, "/tmp/relay-plugin-state-XXXXXX");
	if (mkdtemp(h->state_dir) == NULL)
		return -1;
	relay_error err = {0};
	char *path = loader_find_plugin(name, &err);
	if (path == NULL) {
		fprintf(stderr, "cannot find plugin %s: %s\n", name, err.message);
		return -1;
	}
	snprintf(config, sizeof config,
	         "{\"stateDir\":\"%s\",\"libexecDir\":\"%s/libexec/mcp-relay\",\"guestNetwork\":\"nat\","
	         "\"serviceUrl\":null,\"environment\":null,\"options\":%s}",
	         h->state_dir, build, options_json);
	relay_status st = loader_load(&h->registry, path, kind, config, &h->plugin, &err);
	free(path);
	if (st != RELAY_OK) {
		snprintf(h->load_error, sizeof h->load_error, "%s", err.message);
		fprintf(stderr, "cannot load plugin %s: %s\n", name, err.message);
		return -1;
	}
	return 0;
}

/* ssh_plugin_load_options with no options. */
FIXTURE_UNUSED static int ssh_plugin_load(ssh_plugin_handle *h, const char *name, relay_plugin_kind kind)
{
	return ssh_plugin_load_options(h, name, kind, "{}");
}

FIXTURE_UNUSED static void ssh_plugin_unload(ssh_plugin_handle *h)
{
	char cmd[128];
	loader_shutdown(&h->registry);
	if (h->state_dir[0]) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->state_dir);
		fixture_run(cmd);
	}
}

#endif
