/*
 * xfer_int.h — what the parts of machine-local's transfers share (xfer.c:
 * push and pull; xfer_facts.c, xfer_paths.c, xfer_send.c, xfer_receive.c).
 * Private to plugins/machine-local.
 */
#ifndef MACHINE_LOCAL_XFER_INT_H
#define MACHINE_LOCAL_XFER_INT_H

#include "relay_kit/sha256.h"
#include <archive.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "local.h"

#define XFER_CHUNK      (256 * 1024)
#define OVERLAYFS_MAGIC 0x794c7630
#define TMPFS_MAGIC_    0x01021994

/* ---- facts (xfer_facts.c) ---- */

typedef struct fact {
	char *path;
	uint64_t bytes;
	char sha256[65];
} fact;

typedef struct fact_list {
	fact *items;
	size_t count, cap;
} fact_list;

/* ---- guest paths (xfer_paths.c) ---- */

typedef struct guest_ctx {
	local_state *st;
	local_conn *conn;
	int root_fd;
	bool chown_files;
} guest_ctx;

/* ---- the tar stream (xfer_send.c) ---- */

/* The stream between the two threads: a queue of segments in memory. The
 * sender's file data is lent, not copied: libarchive hands the sender's own
 * read buffer to the write callback (no blocking), the segment points into
 * it, and the sender reads into that buffer again only once the receiver
 * has moved past it. Headers and padding (libarchive's own memory) are
 * copied. So a file's bytes are copied once into memory (the read) and once
 * out of it (the write), as `tar c | tar x` does through its pipe twice. */
#define SEND_BUFFERS 32
#define QUEUE_SLOTS  1024

typedef struct q_segment {
	const char *ptr;
	size_t len;
	int lent;    /* index of the sender buffer it points into, or -1 */
	char *owned; /* a copy, freed when released */
} q_segment;

typedef struct stream_queue {
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t cond;
	q_segment seg[QUEUE_SLOTS];
	size_t head, count;
	bool closed;  /* the sender is done */
	bool aborted; /* the receiver is done (finished or failed) */
	int lent[SEND_BUFFERS];
	char *bufs[SEND_BUFFERS];
	size_t bufsize;
	q_segment current; /* handed to libarchive until its next read */
	bool holding;
	int waiting; /* threads blocked in pthread_cond_wait: wake-ups only when someone waits */
} stream_queue;

/* Sender: one thread that walks a tree (host for push, guest for pull). */
typedef struct sender {
	local_state *st;
	stream_queue *q;
	int next_buf;                 /* the send buffer to read into next */
	int base_fd;                  /* the folder being sent (tree), or the folder holding the file */
	const char *leaf;             /* the single file's name, or NULL for a tree */
	bool refuse_links_are_unsafe; /* pull: links/devices are RELAY_E_UNSAFE_PATH */
	relay_call *call;
	fact_list facts;
	relay_status status;
	char message[256];
	bool pipe_broken; /* the sender stopped because the receiver closed the stream */
} sender;

/* ---- receiving (xfer_receive.c) ---- */

/* The folder the last entries went to, kept open: a tree's files arrive
 * folder by folder. */
typedef struct dir_cache {
	char path[PATH_MAX]; /* relative to the root it was opened from; "" = the root */
	int fd;
} dir_cache;

typedef struct receiver {
	local_state *st;
	guest_ctx *g;            /* push: writing into the guest; NULL for pull (host) */
	int base_fd;             /* where files are created */
	bool direct;             /* push: base_fd is in the upper layer (see xfer_push) */
	const char *single_name; /* single file: the name to create in base_fd */
	const char *dest_label;
	fact_list facts; /* what was written (pull) or read back through the guest (push) */
	relay_call *call;
	dir_cache wcache, vcache;
	struct verifier *verifier; /* push: reads every written file back through the guest's view */
} receiver;

/* The guest side of a push: every file written is read back through the
 * guest's own view (the overlay) and hashed, in a thread of its own beside
 * the writing. The receiver queues each file it finished. */
typedef struct verify_item {
	char *fact_path; /* relative to the pushed root ("" for a single file) */
	char *open_path; /* relative to the folder being verified */
} verify_item;

typedef struct verifier {
	receiver *r;
	int root_fd; /* the folder as the guest sees it */
	pthread_t thread;
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t cond;
	verify_item *queue;
	size_t head, count, cap;
	bool done, stop;
	relay_status status;
	char message[256];
	fact_list facts;
	dir_cache cache;
	char *buf;
} verifier;

/* xfer_facts.c */
int facts_add(fact_list *l, const char *path, uint64_t bytes, const char *sha);
void facts_free(fact_list *l);
/* The end of a push (from, to) or a pull (from, to NULL): both lists sorted
 * and compared, RELAY_E_INTEGRITY naming the first difference; then
 * *facts_out (may be NULL: not wanted) their JSON (relay/transport.h). */
relay_status facts_settle(local_state *st, fact_list *sent, fact_list *arrived, const char *from,
                          const char *to, char **facts_out, relay_error *err);
int hash_fd(int fd, char *buf, size_t bufsize, char out[65], uint64_t *bytes);

/* xfer_paths.c */
int split_guest_path(const char *path, char *buf, size_t size, char **comps, int max, int *count);
bool relative_path_ok(const char *rel);
bool writable_fs(int fd);
int open_dirs(guest_ctx *g, int dir_fd, char **comps, int n, bool create);
relay_status path_error(guest_ctx *g, relay_error *err, int e, const char *what, const char *path);

/* xfer_send.c */
la_ssize_t queue_read_cb(struct archive *a, void *ctx, const void **out);
void queue_abort(stream_queue *q);
void *sender_main(void *arg);

/* xfer_receive.c */
int verifier_start(verifier *v, receiver *r, int root_fd);
void verifier_finish(verifier *v, bool abort);
relay_status run_transfer(sender *s, receiver *r, relay_error *err);

#endif
