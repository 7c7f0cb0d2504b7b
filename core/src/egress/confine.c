/* The egress proxy's confinement (see egress/confine.h). */
#include "egress/confine.h"

#include <errno.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pwd.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define CONFINE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define CONFINE_ARCH AUDIT_ARCH_AARCH64
#endif

/* Started as root: nobody, without supplementary groups. */
static int drop_root(char *why, size_t size)
{
	const struct passwd *pw = getpwnam(EGRESS_PROXY_USER);
	uid_t uid = pw ? pw->pw_uid : EGRESS_PROXY_FALLBACK_ID;
	gid_t gid = pw ? pw->pw_gid : EGRESS_PROXY_FALLBACK_ID;
	int rc = setgroups(0, NULL);
	if (rc == 0)
		rc = setresgid(gid, gid, gid);
	if (rc == 0)
		rc = setresuid(uid, uid, uid);
	if (rc != 0 && errno == EINVAL) {
		fprintf(stderr,
		        "mcp-relay egress-proxy: warning: this user namespace maps no uid %u or gid %u "
		        "(%s): the proxy keeps the namespace's root\n",
		        (unsigned)uid, (unsigned)gid, EGRESS_PROXY_USER);
		return 0;
	}
	if (rc != 0 || getuid() == 0 || geteuid() == 0 || getegid() == 0) {
		snprintf(why, size, "cannot become %s (uid %u, gid %u): %s", EGRESS_PROXY_USER, (unsigned)uid,
		         (unsigned)gid, rc != 0 ? strerror(errno) : "still root");
		return -1;
	}
	return 0;
}

#ifdef CONFINE_ARCH
/* LeakSanitizer stops the process's threads with ptrace at exit: a sanitizer
 * build keeps it (tests only; release builds refuse it). */
#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define CONFINE_SANITIZED 1
#elif defined(__has_feature) /* clang */
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define CONFINE_SANITIZED 1
#endif
#endif
#ifdef CONFINE_SANITIZED
#define CONFINE_PTRACE
#else
#define CONFINE_PTRACE __NR_ptrace,
#endif

/* What the proxy never calls: refused with EPERM (not a kill, so a refused
 * call in a library's corner is an error it reports, not a lost guest's
 * way out). Threads stay: clone is allowed without namespace flags (a user
 * that is not root could otherwise make a user namespace), and clone3, whose
 * flags a filter cannot read, answers ENOSYS, so libc falls back to clone. */
static const int denied[] = {
    __NR_execve,
    __NR_execveat,
    CONFINE_PTRACE __NR_process_vm_readv,
    __NR_process_vm_writev,
    __NR_mount,
    __NR_umount2,
    __NR_pivot_root,
    __NR_chroot,
    __NR_unshare,
    __NR_setns,
    __NR_bpf,
    __NR_perf_event_open,
    __NR_keyctl,
    __NR_add_key,
    __NR_request_key,
    __NR_init_module,
    __NR_finit_module,
    __NR_delete_module,
    __NR_kexec_load,
    __NR_userfaultfd,
    __NR_io_uring_setup,
    __NR_open_by_handle_at,
    __NR_name_to_handle_at,
    __NR_swapon,
    __NR_swapoff,
    __NR_reboot,
    __NR_acct,
    __NR_fsopen,
    __NR_fsmount,
    __NR_move_mount,
    __NR_open_tree,
};

#define DENIED_COUNT (sizeof denied / sizeof denied[0])
#define CONFINE_NS_FLAGS                                                                                     \
	(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |        \
	 CLONE_NEWNET)

static int install_filter(char *why, size_t size)
{
	struct sock_filter prog[DENIED_COUNT + 16];
	size_t n = 0;
	const unsigned deny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
	prog[n++] =
	    (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	/* Another ABI (i386 or x32 entry points): refused whole. */
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CONFINE_ARCH, 1, 0);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
#ifdef __x86_64__
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny);
#endif
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4);
	/* clone's flags: the first argument's low word (little-endian) on both ABIs. */
	prog[n++] =
	    (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
	prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CONFINE_NS_FLAGS, 0, 1);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	for (size_t i = 0; i < DENIED_COUNT; i++) {
		/* Match: skip to the last RET deny (DENIED_COUNT - 1 - i rule jumps and the allow). */
		prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied[i],
		                                         (unsigned char)(DENIED_COUNT - i), 0);
	}
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny);
	struct sock_fprog fprog = {(unsigned short)n, prog};
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) != 0) {
		snprintf(why, size, "cannot install the seccomp filter: %s", strerror(errno));
		return -1;
	}
	return 0;
}
#endif

int egress_confine(char *why, size_t size)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		snprintf(why, size, "cannot set no_new_privs: %s", strerror(errno));
		return -1;
	}
	if (geteuid() == 0 && drop_root(why, size) != 0)
		return -1;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
		snprintf(why, size, "cannot make the process not dumpable: %s", strerror(errno));
		return -1;
	}
#ifdef CONFINE_ARCH
	return install_filter(why, size);
#else
	return 0;
#endif
}
