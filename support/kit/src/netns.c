/* netns.c — work inside a guest's network namespace (relay_kit/netns.h). */
#include "relay_kit/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

typedef struct netns_job {
	pid_t pid;
	int domain, type;        /* a socket, when argv is NULL */
	const char *const *argv; /* else a program */
	const char *const *envp;
	int log_fd;
	int result; /* the socket or the pid, -1 on failure */
	int err_no;
} netns_job;

static void spawn_job(netns_job *job)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (job->log_fd >= 0) {
		posix_spawn_file_actions_adddup2(&fa, job->log_fd, 1);
		posix_spawn_file_actions_adddup2(&fa, job->log_fd, 2);
	} else {
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	}
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	pid_t pid = -1;
	int rc = posix_spawnp(&pid, job->argv[0], &fa, &attr, (char *const *)job->argv,
	                      (char *const *)(job->envp ? job->envp : (const char *const *)environ));
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	job->result = rc == 0 ? pid : -1;
	job->err_no = rc;
}

/* The thread: into the namespace, the job, and back (the thread ends
 * either way; nothing else runs on it). */
static void *netns_thread(void *arg)
{
	netns_job *job = arg;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)job->pid);
	int guest = open(path, O_RDONLY | O_CLOEXEC);
	int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	job->result = -1;
	if (guest < 0 || self < 0 || setns(guest, CLONE_NEWNET) != 0) {
		job->err_no = errno;
	} else if (job->argv == NULL) {
		job->result = socket(job->domain, job->type | SOCK_CLOEXEC, 0);
		job->err_no = job->result < 0 ? errno : 0;
	} else {
		spawn_job(job);
	}
	if (self >= 0 && setns(self, CLONE_NEWNET) != 0) {
		/* Cannot happen for a thread that only switched its network
		 * namespace; the thread ends here either way. */
	}
	if (guest >= 0)
		close(guest);
	if (self >= 0)
		close(self);
	return NULL;
}

static int run_job(netns_job *job, int *err_no)
{
	pthread_t t;
	int rc = pthread_create(&t, NULL, netns_thread, job);
	if (rc != 0) {
		*err_no = rc;
		return -1;
	}
	pthread_join(t, NULL);
	*err_no = job->err_no;
	return job->result;
}

int rk_netns_socket(pid_t pid, int domain, int type, int *err_no)
{
	netns_job job = {pid, domain, type, NULL, NULL, -1, -1, 0};
	return run_job(&job, err_no);
}

pid_t rk_netns_spawn(pid_t pid, const char *const *argv, const char *const *envp, int log_fd, int *err_no)
{
	netns_job job = {pid, 0, 0, argv, envp, log_fd, -1, 0};
	return (pid_t)run_job(&job, err_no);
}
