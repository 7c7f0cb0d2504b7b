/*
 * test_support_fds.c — support/'s descriptor plumbing (relay_support/fds.h)
 * and its small numbers file (relay_support/numfile.h) on real sockets,
 * pipes and files: descriptors passed and capped, whole writes, the
 * loopback socket, closing from a number up in a child.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "relay_support/fds.h"
#include "relay_support/numfile.h"

static void test_descriptors_pass_and_cap(void **state)
{
	(void)state;
	int sp[2], p1[2], p2[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
	assert_int_equal(pipe(p1), 0);
	assert_int_equal(pipe(p2), 0);
	int two[2] = {p1[1], p2[1]};
	assert_int_equal(rs_send_fds(sp[0], "hello", 5, two, 2, 0), 0);
	char buf[16] = {0};
	int got[1] = {-1}, n = -1, truncated = -1;
	/* Room for one: the second descriptor is closed, the message marked. */
	assert_int_equal(rs_recv_fds(sp[1], buf, sizeof buf, 0, got, 1, &n, &truncated), 5);
	assert_string_equal(buf, "hello");
	assert_int_equal(n, 1);
	assert_int_equal(truncated, 1);
	assert_true(fcntl(got[0], F_GETFD) & FD_CLOEXEC);
	assert_int_equal(rs_write_all(got[0], "x", 1), 0);
	char c = 0;
	assert_int_equal(read(p1[0], &c, 1), 1);
	assert_int_equal(c, 'x');
	close(got[0]);
	close(p1[1]);
	close(p2[1]);
	/* The received copy of p2's write end was closed: p2 reads its end. */
	assert_int_equal(read(p2[0], &c, 1), 0);
	/* Too many descriptors for one message are refused by name. */
	int many[RS_FDS_MAX + 1];
	for (int i = 0; i <= RS_FDS_MAX; i++)
		many[i] = 0;
	errno = 0;
	assert_int_equal(rs_send_fds(sp[0], "x", 1, many, RS_FDS_MAX + 1, 0), -1);
	assert_int_equal(errno, EINVAL);
	/* Without descriptors, and the end of the stream. */
	assert_int_equal(rs_send_fds(sp[0], "ab", 2, NULL, 0, 0), 0);
	assert_int_equal(rs_recv_fds(sp[1], buf, sizeof buf, 0, got, 1, &n, NULL), 2);
	assert_int_equal(n, 0);
	close(sp[0]);
	assert_int_equal(rs_recv_fds(sp[1], buf, sizeof buf, 0, got, 1, &n, &truncated), 0);
	assert_int_equal(truncated, 0);
	close(sp[1]);
	close(p1[0]);
	close(p2[0]);
}

static void test_write_all_to_a_closed_pipe_fails(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	signal(SIGPIPE, SIG_IGN);
	errno = 0;
	assert_int_equal(rs_write_all(p[1], "data", 4), -1);
	assert_int_equal(errno, EPIPE);
	close(p[1]);
}

static void test_loopback_socket(void **state)
{
	(void)state;
	int fd = rs_loopback_socket(SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(ntohl(a.sin_addr.s_addr), INADDR_LOOPBACK);
	int listening = 0;
	len = sizeof listening;
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len), 0);
	assert_int_equal(listening, 1);
	/* The same port again is refused with the reason in errno. */
	int again = rs_loopback_socket(SOCK_STREAM, ntohs(a.sin_port));
	assert_int_equal(again, -1);
	assert_int_equal(errno, EADDRINUSE);
	close(fd);
}

static void test_close_from(void **state)
{
	(void)state;
	int keep = dup2(0, 40), gone = dup2(0, 50);
	assert_int_equal(keep, 40);
	assert_int_equal(gone, 50);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		rs_close_from(45);
		_exit(fcntl(40, F_GETFD) >= 0 && fcntl(50, F_GETFD) < 0 && errno == EBADF ? 0 : 1);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(40);
	close(50);
}

static int numbers_of(const char *text, long long *out, int count)
{
	char path[] = "/tmp/relay-numfile-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(rs_write_all(fd, text, strlen(text)), 0);
	lseek(fd, 0, SEEK_SET);
	int rc = rs_read_numbers(fd, out, count);
	close(fd);
	return rc;
}

static void test_read_numbers(void **state)
{
	(void)state;
	long long v[3] = {7, 7, 7};
	assert_int_equal(numbers_of("1700000000000 300000 60000\n", v, 3), 0);
	assert_true(v[0] == 1700000000000LL && v[1] == 300000 && v[2] == 60000);
	/* Fewer numbers than asked: refused, out untouched. */
	long long w[3] = {7, 7, 7};
	assert_int_equal(numbers_of("12 34\n", w, 3), -1);
	assert_true(w[0] == 7 && w[1] == 7 && w[2] == 7);
	assert_int_equal(numbers_of("12 34\n", w, 2), 0);
	assert_true(w[0] == 12 && w[1] == 34);
	assert_int_equal(numbers_of("", w, 1), -1);
	assert_int_equal(numbers_of("x 1", w, 1), -1);
	assert_int_equal(numbers_of("1", w, 9), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_descriptors_pass_and_cap),
	    cmocka_unit_test(test_write_all_to_a_closed_pipe_fails),
	    cmocka_unit_test(test_loopback_socket),
	    cmocka_unit_test(test_close_from),
	    cmocka_unit_test(test_read_numbers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
