/*
 * relay-x11shot/shm.c — the MIT-SHM extension (x11shot.h): the server
 * writes the root window's pixels straight into memory both processes map,
 * instead of copying them through the socket (two copies of 4 MB at
 * 1280x800, and a reply read in many pieces).
 *
 * Only ShmAttachFd (MIT-SHM 1.2) is used: the segment is a POSIX shared
 * memory object, unlinked at once, whose descriptor travels over the
 * display's Unix socket. A System V segment is named by a number the server
 * looks up in its own IPC namespace, which in a sandbox is not the guest's;
 * a descriptor names the same memory on both sides wherever they run. Any
 * failure (no extension, version 1.1, TCP, no /dev/shm, an X error for the
 * attachment or the first ShmGetImage) leaves the capture to plain GetImage.
 */
#define _POSIX_C_SOURCE 200809L

#include "x11shot.h"

#include <sys/mman.h>

#define X_OPCODE_QUERY_EXTENSION 98
#define X_OPCODE_GET_INPUT_FOCUS 43
#define SHM_GET_IMAGE            4
#define SHM_ATTACH_FD            6

/* QueryExtension("MIT-SHM"): x->shm_opcode, 0 when the server has none.
 * 0, or -1 with errno when the connection failed. */
static int query_shm(xconn_t *x)
{
	static const char name[] = "MIT-SHM";
	unsigned char req[8 + 8];
	uint16_t v;
	memset(req, 0, sizeof req);
	req[0] = X_OPCODE_QUERY_EXTENSION;
	v = (uint16_t)(sizeof req / 4);
	memcpy(req + 2, &v, 2);
	v = (uint16_t)(sizeof name - 1);
	memcpy(req + 4, &v, 2);
	memcpy(req + 8, name, sizeof name - 1);
	x->sequence++;
	uint16_t seq = x->sequence;
	if (write_all_fd(x->fd, req, sizeof req, 1) < 0)
		return -1;
	unsigned char head[32];
	if (x_next_reply(x, head) < 0)
		return -1;
	if (head[0] != 1 || rd16(head + 2) != seq || rd32(head + 4) != 0) {
		errno = EPROTO;
		return -1;
	}
	x->shm_opcode = head[8] ? head[9] : 0;
	return 0;
}

/* A shared memory object of `bytes`, already unlinked; -1 when none. */
static int shm_object(size_t bytes)
{
	char name[64];
	static unsigned counter; /* single-threaded program */
	for (int attempt = 0; attempt < 8; attempt++) {
		snprintf(name, sizeof name, "/relay-x11shot-%ld-%u", (long)getpid(), counter++);
		int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0)
			return -1;
		shm_unlink(name);
		if (ftruncate(fd, (off_t)bytes) < 0) {
			close(fd);
			return -1;
		}
		return fd;
	}
	return -1;
}

/* Writes req with `fd` passed alongside (SCM_RIGHTS). */
static int send_with_fd(int sock, const unsigned char *req, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		unsigned char space[CMSG_SPACE(sizeof(int))];
	} control;
	struct iovec iov;
	struct msghdr msg;
	memset(&msg, 0, sizeof msg);
	memset(&control, 0, sizeof control);
	iov.iov_base = (void *)req;
	iov.iov_len = len;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control.space;
	msg.msg_controllen = sizeof control.space;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	ssize_t n;
	do
		n = sendmsg(sock, &msg, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	return write_all_fd(sock, req + n, len - (size_t)n, 1);
}

/* Asks for the extension and attaches a segment of `bytes` to the server.
 * 0: ShmGetImage may be tried (its first reply says whether the server
 * took the segment); 1: not available here, use GetImage; -1 with errno:
 * the connection failed. */
int shm_attach(xconn_t *x, size_t bytes)
{
	if (!x->is_unix || getenv("RELAY_X11SHOT_NO_SHM"))
		return 1;
	if (query_shm(x) < 0)
		return -1;
	if (!x->shm_opcode)
		return 1;
	int fd = shm_object(bytes);
	if (fd < 0)
		return 1;
	void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		close(fd);
		return 1;
	}
	unsigned char req[12];
	uint16_t v = 3;
	memset(req, 0, sizeof req);
	x->shm_seg = x->resource_base | (x->resource_mask & (0u - x->resource_mask)); /* lowest id */
	req[0] = (unsigned char)x->shm_opcode;
	req[1] = SHM_ATTACH_FD;
	memcpy(req + 2, &v, 2);
	memcpy(req + 4, &x->shm_seg, 4);
	req[8] = 0; /* read-write: the server writes into it */
	x->sequence++;
	int rc = send_with_fd(x->fd, req, sizeof req, fd);
	close(fd); /* the mapping and the server's copy keep the memory */
	if (rc < 0) {
		munmap(map, bytes);
		return -1;
	}
	x->shm_map = map;
	x->shm_bytes = bytes;
	return 0;
}

int shm_send_get_image(xconn_t *x, unsigned y, unsigned rows, size_t offset)
{
	unsigned char req[32];
	uint16_t len = 8;
	uint32_t at = (uint32_t)offset;
	memset(req, 0, sizeof req);
	req[0] = (unsigned char)x->shm_opcode;
	req[1] = SHM_GET_IMAGE;
	memcpy(req + 2, &len, 2);
	put_image_region(req, x, y, rows);
	req[20] = X_FORMAT_ZPIXMAP;
	memcpy(req + 24, &x->shm_seg, 4);
	memcpy(req + 28, &at, 4);
	x->sequence++;
	return write_all_fd(x->fd, req, sizeof req, 1);
}

/* Reads the ShmGetImage reply for `sequence` (its pixels are then in the
 * segment). An X error sets *refused (the caller decides whether that
 * means falling back) and returns 0. Returns 0 or an exit code. */
int shm_read_get_image(xconn_t *x, uint16_t sequence, size_t expect_bytes, const char *display_text,
                       int *refused)
{
	unsigned char head[32];
	*refused = 0;
	if (x_next_reply(x, head) < 0) {
		diag("lost display %s while reading the root window: %s", display_text, strerror(errno));
		return EXIT_DISPLAY;
	}
	if (head[0] == 0) {
		*refused = 1;
		return 0;
	}
	if (rd16(head + 2) != sequence || rd32(head + 4) != 0 || rd32(head + 12) != expect_bytes) {
		diag("display %s sent an unexpected ShmGetImage reply (sequence %u, %u bytes; expected "
		     "%u, %zu bytes)",
		     display_text, rd16(head + 2), rd32(head + 12), sequence, expect_bytes);
		return EXIT_DISPLAY;
	}
	return 0;
}

/* A round trip (GetInputFocus) that drops every reply and error before
 * its own: what is left of a refused ShmGetImage batch. 0, or -1. */
int x_sync(xconn_t *x)
{
	unsigned char req[4] = {X_OPCODE_GET_INPUT_FOCUS, 0, 1, 0};
	uint16_t one = 1;
	memcpy(req + 2, &one, 2);
	x->sequence++;
	uint16_t seq = x->sequence;
	if (write_all_fd(x->fd, req, sizeof req, 1) < 0)
		return -1;
	for (;;) {
		unsigned char head[32];
		if (x_next_reply(x, head) < 0)
			return -1;
		if (head[0] == 1 && rd32(head + 4) > 0) {
			/* some other reply's extra data: not expected here */
			errno = EPROTO;
			return -1;
		}
		if (head[0] == 1 && rd16(head + 2) == seq)
			return 0;
	}
}

/* Unmaps the segment. It is not detached: the server drops it with the
 * connection, and a ShmDetach of a segment it refused would answer with an
 * error in the middle of the GetImage replies that follow. */
void shm_release(xconn_t *x)
{
	if (!x->shm_map)
		return;
	munmap(x->shm_map, x->shm_bytes);
	x->shm_map = NULL;
	x->shm_bytes = 0;
}
