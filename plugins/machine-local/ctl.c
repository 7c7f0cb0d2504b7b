/* ctl.c — the client side of the guest init's control socket (local_proto.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "local.h"
#include "local_proto.h"
#include "relay_kit/guest_facts.h"
#include "relay_support/fds.h"

ctl_spawn ctl_guest_daemon(json_object *record, const char *const *argv, char **env, int out_fd, int err_fd)
{
	json_object *user = lu_get_object(record, "guestUser");
	return (ctl_spawn){.argv = argv,
	                   .envp = (const char *const *)env,
	                   .cwd = lu_get_string(user, "home"),
	                   .uid = (uid_t)lu_get_int(user, "uid", 0),
	                   .gid = (gid_t)lu_get_int(user, "gid", 0),
	                   .flags = LP_SPAWN_DETACHED | LP_SPAWN_NO_NEW_PRIVS,
	                   .out_fd = out_fd,
	                   .err_fd = err_fd,
	                   .in_fd = -1};
}

int ctl_connect(const char *lease_dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/control.sock", lease_dir);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int sndbuf = (int)(2 * LP_MAX_PACKET);
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	int pathfd = -1;
	if (strlen(path) < sizeof sa.sun_path) {
		memcpy(sa.sun_path, path, strlen(path) + 1);
	} else {
		/* Long state folders: connect through the descriptor's magic link. */
		pathfd = open(path, O_PATH | O_CLOEXEC | O_NOFOLLOW);
		if (pathfd < 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d", pathfd);
	}
	int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	int e = errno;
	if (pathfd >= 0)
		close(pathfd);
	if (rc != 0) {
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int ctl_spawn_cmd(int conn, const ctl_spawn *req, pid_t *pid_out, int *err_no, char *why, size_t why_size)
{
	size_t argc = 0, envc = 0, len = 0;
	const char *cwd = req->cwd ? req->cwd : "";
	len += strlen(cwd) + 1;
	for (; req->argv[argc]; argc++)
		len += strlen(req->argv[argc]) + 1;
	for (; req->envp && req->envp[envc]; envc++)
		len += strlen(req->envp[envc]) + 1;
	*err_no = 0;
	if (argc == 0) {
		*err_no = EINVAL;
		snprintf(why, why_size, "empty argv");
		return -1;
	}
	if (len + sizeof(lp_header) > LP_MAX_PACKET || argc >= 4096 || envc >= 4096) {
		*err_no = E2BIG;
		snprintf(why, why_size, "the command line and environment exceed %u bytes",
		         LP_MAX_PACKET - 4096);
		return -1;
	}
	char *buf = malloc(sizeof(lp_header) + len);
	if (buf == NULL) {
		*err_no = ENOMEM;
		snprintf(why, why_size, "out of memory");
		return -1;
	}
	lp_header h;
	memset(&h, 0, sizeof h);
	h.magic = LP_MAGIC;
	h.op = LP_SPAWN;
	h.a = (uint32_t)req->uid;
	h.b = (uint32_t)req->gid;
	h.c = (int32_t)(req->flags | (req->in_fd >= 0 ? LP_SPAWN_STDIN : 0u));
	h.d = (int32_t)argc;
	h.nstr = (uint32_t)(1 + argc + envc);
	h.len = (uint32_t)len;
	memcpy(buf, &h, sizeof h);
	char *p = buf + sizeof h;
	size_t n = strlen(cwd) + 1;
	memcpy(p, cwd, n);
	p += n;
	for (size_t i = 0; i < argc; i++) {
		n = strlen(req->argv[i]) + 1;
		memcpy(p, req->argv[i], n);
		p += n;
	}
	for (size_t i = 0; i < envc; i++) {
		n = strlen(req->envp[i]) + 1;
		memcpy(p, req->envp[i], n);
		p += n;
	}
	int fds[3];
	int nfds = 0;
	if (req->out_fd >= 0)
		fds[nfds++] = req->out_fd;
	if (req->err_fd >= 0 && !(req->flags & LP_SPAWN_MERGE)) {
		if (nfds == 0) {
			/* stderr without stdout: stdout goes to /dev/null */
			int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
			if (null_fd < 0) {
				free(buf);
				*err_no = errno;
				snprintf(why, why_size, "cannot open /dev/null");
				return -1;
			}
			fds[nfds++] = null_fd;
			fds[nfds++] = req->err_fd;
			if (req->in_fd >= 0)
				fds[nfds++] = req->in_fd;
			int rc = rs_send_fds(conn, buf, sizeof h + len, fds, nfds, 0);
			int e = errno;
			close(null_fd);
			if (rc != 0) {
				free(buf);
				*err_no = e;
				snprintf(why, why_size, "cannot send the command to the guest init: %s",
				         strerror(e));
				return -1;
			}
			goto sent;
		}
		fds[nfds++] = req->err_fd;
	}
	if (req->in_fd >= 0)
		fds[nfds++] = req->in_fd;
	if (rs_send_fds(conn, buf, sizeof h + len, fds, nfds, 0) != 0) {
		int e = errno;
		free(buf);
		*err_no = e;
		snprintf(why, why_size, "cannot send the command to the guest init: %s", strerror(e));
		return -1;
	}
sent:
	free(buf);
	for (;;) {
		uint32_t op = 0, a = 0;
		int32_t c = 0;
		char text[256] = "";
		if (ctl_recv(conn, &op, &a, &c, text, sizeof text, 30000) != 0) {
			*err_no = errno ? errno : EPIPE;
			snprintf(why, why_size, "the guest init did not answer the command request");
			return -2;
		}
		if (op == LP_R_STARTED) {
			*pid_out = (pid_t)a;
			return 0;
		}
		if (op == LP_R_FAILED || op == LP_R_ERROR) {
			*err_no = c;
			snprintf(why, why_size, "%s", text[0] ? text : "spawn");
			return -1;
		}
		/* anything else is out of order; keep reading */
	}
}

int ctl_send(int conn, uint32_t op, uint32_t a)
{
	lp_header h;
	memset(&h, 0, sizeof h);
	h.magic = LP_MAGIC;
	h.op = op;
	h.a = a;
	return rs_send_fds(conn, &h, sizeof h, NULL, 0, 0);
}

int ctl_recv(int conn, uint32_t *op, uint32_t *a, int32_t *c, char *text, size_t text_size, int timeout_ms)
{
	struct pollfd pfd = {conn, POLLIN, 0};
	for (;;) {
		int rc = poll(&pfd, 1, timeout_ms);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (rc < 0)
			return -1;
		break;
	}
	char buf[sizeof(lp_header) + 600];
	ssize_t n;
	do
		n = recv(conn, buf, sizeof buf, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		if (n == 0)
			errno = EPIPE;
		return -1;
	}
	if ((size_t)n < sizeof(lp_header)) {
		errno = EPROTO;
		return -1;
	}
	lp_header h;
	memcpy(&h, buf, sizeof h);
	if (h.magic != LP_MAGIC) {
		errno = EPROTO;
		return -1;
	}
	*op = h.op;
	*a = h.a;
	*c = h.c;
	if (text && text_size) {
		size_t tl = (size_t)n - sizeof h;
		if (tl >= text_size)
			tl = text_size - 1;
		memcpy(text, buf + sizeof h, tl);
		text[tl] = '\0';
	}
	return 0;
}

int ctl_request_fds(int conn, uint32_t op, int *fds, int max, int *nfds, int *err_no, char *why,
                    size_t why_size)
{
	*nfds = 0;
	*err_no = 0;
	why[0] = '\0';
	struct pollfd pfd = {conn, POLLIN, 0};
	int rc = ctl_send(conn, op, 0);
	while (rc == 0 && (rc = poll(&pfd, 1, 10000)) < 0 && errno == EINTR)
		rc = 0;
	if (rc <= 0) {
		*err_no = rc == 0 ? ETIMEDOUT : errno;
		snprintf(why, why_size, "the guest init did not answer: %s", strerror(*err_no));
		return -1;
	}
	char buf[sizeof(lp_header) + 600];
	int got[RS_FDS_MAX], ngot = 0, truncated = 0;
	ssize_t n = rs_recv_fds(conn, buf, sizeof buf - 1, 0, got, RS_FDS_MAX, &ngot, &truncated);
	lp_header h;
	memset(&h, 0, sizeof h);
	if (n >= (ssize_t)sizeof h)
		memcpy(&h, buf, sizeof h);
	if (n >= (ssize_t)sizeof h && h.magic == LP_MAGIC && h.op == LP_R_FDS && ngot <= max && !truncated) {
		memcpy(fds, got, sizeof(int) * (size_t)ngot);
		*nfds = ngot;
		return 0;
	}
	for (int k = 0; k < ngot; k++)
		close(got[k]);
	if (n < (ssize_t)sizeof h || h.magic != LP_MAGIC) {
		*err_no = n < 0 ? errno : EPROTO;
		snprintf(why, why_size, "the guest init's answer is unreadable");
		return -1;
	}
	buf[n] = '\0';
	*err_no = h.op == LP_R_FDS ? EPROTO : h.c;
	snprintf(why, why_size, "%s",
	         h.op == LP_R_FDS        ? "the guest init sent more descriptors than asked for"
	         : n > (ssize_t)sizeof h ? buf + sizeof h
	                                 : "the guest init refused the request");
	return -1;
}

int ctl_killpid(const char *lease_dir, pid_t pid)
{
	int conn = ctl_connect(lease_dir);
	if (conn < 0)
		return 0;
	int gone = 0;
	if (ctl_send(conn, LP_KILLPID, (uint32_t)pid) == 0) {
		uint32_t op = 0, a = 0;
		int32_t c = 0;
		while (ctl_recv(conn, &op, &a, &c, NULL, 0, 5000) == 0) {
			if (op == LP_R_GROUP) {
				gone = (int)a;
				break;
			}
			if (op == LP_R_ERROR)
				break;
		}
	}
	close(conn);
	return gone;
}

static int env_key_len(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq ? (int)(eq - kv) : -1;
}

char **ctl_guest_env(local_state *st, json_object *record, const char *const *extra)
{
	(void)st;
	json_object *user = lu_get_object(record, "guestUser");
	const char *name = lu_get_string(user, "name");
	const char *home = lu_get_string(user, "home");
	const char *display = lu_get_string(record, "display");
	char base[20][320];
	size_t nb = 0;
	snprintf(base[nb++], sizeof base[0],
	         "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	snprintf(base[nb++], sizeof base[0], "HOME=%s", home ? home : "/");
	snprintf(base[nb++], sizeof base[0], "USER=%s", name ? name : "root");
	snprintf(base[nb++], sizeof base[0], "LOGNAME=%s", name ? name : "root");
	snprintf(base[nb++], sizeof base[0], "SHELL=/bin/sh");
	snprintf(base[nb++], sizeof base[0], "LANG=C.UTF-8");
	if (display)
		snprintf(base[nb++], sizeof base[0], "DISPLAY=%s", display);
	/* Under allow and internet, the relay's egress proxy in the guest's own
	 * loopback is the only way out (docs/egress.md). */
	const char *access = lu_get_string(lu_get_object(record, "network"), "access");
	if (access && strcmp(access, "egress") == 0) {
		for (size_t i = 0; i < RK_EGRESS_PROXY_ENV_COUNT; i++)
			snprintf(base[nb++], sizeof base[0], "%s", rk_egress_proxy_env[i]);
	}
	size_t ne = 0;
	while (extra && extra[ne])
		ne++;
	char **env = calloc(nb + ne + 1, sizeof *env);
	if (env == NULL)
		return NULL;
	size_t out = 0;
	for (size_t i = 0; i < nb; i++) {
		int kl = env_key_len(base[i]);
		bool overridden = false;
		for (size_t j = 0; j < ne && !overridden; j++)
			overridden =
			    env_key_len(extra[j]) == kl && strncmp(extra[j], base[i], (size_t)kl) == 0;
		if (!overridden && (env[out] = strdup(base[i])) != NULL)
			out++;
	}
	for (size_t j = 0; j < ne; j++) {
		if (env_key_len(extra[j]) <= 0)
			continue; /* not K=V: ignored */
		if ((env[out] = strdup(extra[j])) != NULL)
			out++;
	}
	env[out] = NULL;
	return env;
}

void ctl_env_free(char **env)
{
	if (env == NULL)
		return;
	for (size_t i = 0; env[i]; i++)
		free(env[i]);
	free(env);
}
