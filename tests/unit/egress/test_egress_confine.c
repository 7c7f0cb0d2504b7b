/*
 * The egress proxy's confinement (core/src/egress/confine.c, docs/egress.md
 * "The proxy's privileges"): in a forked child that confines itself, exec,
 * unshare, a clone that makes a namespace, mount and bpf answer EPERM, clone3
 * ENOSYS, while a thread still starts; run as root, the child is nobody
 * without groups afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "egress/confine.h"

static void *thread_body(void *arg)
{
	return arg;
}

/* In the child: 0 when every check holds, else the number of the first
 * that failed (the exit status). */
static int confined_checks(void)
{
	char why[300];
	bool was_root = geteuid() == 0;
	if (egress_confine(why, sizeof why) != 0) {
		fprintf(stderr, "egress_confine: %s\n", why);
		return 1;
	}
	char *const argv[] = {"/bin/false", NULL}; /* exits 1 if it ran */
	if (execv("/bin/false", argv) == 0 || errno != EPERM)
		return 2;
	if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM)
		return 3;
	long c = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD), 0L, 0L, 0L, 0L);
	if (c == 0)
		_exit(0);
	if (c > 0 || errno != EPERM)
		return 4;
	if (syscall(SYS_clone3, NULL, (size_t)0) == 0 || errno != ENOSYS)
		return 5;
	if (mount("none", "/tmp", "tmpfs", 0, NULL) == 0 || errno != EPERM)
		return 6;
	if (syscall(SYS_bpf, 0, NULL, 0) == 0 || errno != EPERM)
		return 7;
	pthread_t t;
	void *out = NULL;
	if (pthread_create(&t, NULL, thread_body, (void *)why) != 0 || pthread_join(t, &out) != 0 ||
	    out != why)
		return 8;
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1 || prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0)
		return 9;
	if (was_root) {
		const struct passwd *pw = getpwnam(EGRESS_PROXY_USER);
		uid_t want = pw ? pw->pw_uid : EGRESS_PROXY_FALLBACK_ID;
		if (getuid() != want || geteuid() != want || getgid() == 0 || getgroups(0, NULL) != 0)
			return 10;
	}
	return 0;
}

static void test_confined_proxy_cannot_do_what_it_never_needs(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(confined_checks());
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_confined_proxy_cannot_do_what_it_never_needs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
