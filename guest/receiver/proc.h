/*
 * receiver/proc.h — running scripts and capture commands under the process
 * rules of spec/guest.md §12.2-§12.4: a new session and process group, standard
 * input from /dev/null, standard output and error on pipes sharing one
 * output budget, the pid recorded durably before exec, a timeout that kills
 * the group, and termination confirmation.
 */
#ifndef RECEIVER_PROC_H
#define RECEIVER_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

#define OUTPUT_BUDGET_BYTES 65536u
#define CONFIRM_POLL_MS     20
#define CONFIRM_WAIT_MS     1000
/* After a normal exit that leaves processes behind, output is still read
 * for at most this long (spec/guest.md §16.1 item 2). */
#define SURVIVOR_DRAIN_MS 250

typedef struct spawn_hooks {
	/* Before fork (mark pendingSpawn). Non-zero aborts the spawn. */
	int (*before_fork)(void *ctx, rerr *err);
	/* After fork, before the child may exec: record pid durably.
	 * Non-zero kills the child before it runs anything. */
	int (*after_fork)(void *ctx, pid_t pid, rerr *err);
	/* After termination was decided: confirmed or not. */
	int (*after_end)(void *ctx, pid_t pgid, int confirmed, rerr *err);
	/* Polled while the program runs; non-zero cancels it. */
	int (*cancelled)(void *ctx);
	void *ctx;
} spawn_hooks;

typedef struct spawn_request {
	const char *path;   /* the executable, resolved */
	char *const *argv;  /* argv[0] as shown */
	char *const *envp;  /* NULL: inherit the environment */
	const char *cwd;    /* NULL: stay */
	int64_t timeout_ms; /* > 0 */
	size_t output_budget;
	/* spec/guest.md §16.1: when the main process exits on its own, leave its
	 * group and descendants running (a script); 0 kills them (a capture). */
	int leave_survivors;
	/* Children of this process that the end-of-run sweep must not kill:
	 * what an earlier script left running, and the background drainer. */
	const pid_t *spared;
	size_t spared_count;
} spawn_request;

typedef struct spawn_result {
	int spawn_failed; /* fork, the pid record, chdir or exec failed */
	char spawn_error[512];
	int exited; /* the main process ended and was reaped */
	int exit_code;
	int signal_no; /* 0 when it exited normally */
	int timed_out;
	int output_truncated;
	int cancelled;
	int termination_confirmed;
	pid_t pgid;
	buf out;
	buf err;
	/* With leave_survivors after a normal exit: the read ends of the
	 * output pipes that something still holds open (-1 when closed). The
	 * caller owns them: hand them to a drainer (survivors.h) or close them. */
	int out_left_fd;
	int err_left_fd;
	int left_running; /* 1 when the exit left anything behind (pipes open or a live group) */
} spawn_result;

/* Runs one program to its end. Returns 0 when it ran (whatever its
 * outcome: see res), -1 on an internal failure before anything started. */
int proc_run(const spawn_request *req, const spawn_hooks *hooks, spawn_result *res, rerr *err);
void spawn_result_free(spawn_result *res);

/* "SIGKILL", "SIGTERM", ... or "SIG<n>". */
const char *signal_name(int sig, char scratch[16]);

/* Process and group liveness. */
int pid_alive(pid_t pid);    /* exists and is not a zombie */
int group_alive(pid_t pgid); /* kill(-pgid, 0) does not fail with ESRCH */
/* Linux: the start time of pid in clock ticks since boot; -1 elsewhere. */
int proc_start_ticks(pid_t pid, unsigned long long *ticks_out);
/* The start time of pid as a timestamp (Linux), else the current time. */
void proc_start_time(pid_t pid, char out[32]);
/* The boot identity (Linux boot_id); "" when unknown. */
void boot_identity(char out[64]);
/* Linux: make this process a child subreaper. */
void proc_become_subreaper(void);
/* Linux: stop being a child subreaper (orphans go to init from now on). */
void proc_stop_subreaping(void);
/* Linux: the pids whose parent is this process, malloc'd (free()); *count_out
 * set. NULL with count 0 when there are none or elsewhere. */
pid_t *proc_children(size_t *count_out);
/* Linux: reads /proc/<pid>/stat: state, parent, process group and the
 * command name (at most name_len - 1 bytes). 0, or -1 when the process is
 * gone. */
int proc_stat_read(pid_t pid, char *state_out, pid_t *ppid_out, pid_t *pgid_out, char *name_out,
                   size_t name_len);

/* Looks a program up on PATH (or checks a path with a '/'); malloc'd
 * absolute path or NULL. */
char *find_program(const char *name);

#endif
