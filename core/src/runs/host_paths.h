/*
 * runs/host_paths.h — the project-folder rules for host files a tool reads
 * (spec/lifecycle.md §12, spec/tools.md §2.6): relay_stage's `workspace` and
 * `files[].local`, relay_script's `localPath`.
 *
 *   1. not empty, no NUL, at most 4,096 bytes, no ".." segment ("." segments
 *      and repeated slashes are normalised away);
 *   2. a relative path is taken from the project folder P;
 *   3. an absolute path must already start with P or its real path P′ at a
 *      component boundary;
 *   4. no symbolic link at or below P′: the walk from P′ to the target opens
 *      every component with O_NOFOLLOW (openat, one component at a time);
 *   5. the target is a regular file or a folder as asked; inside a workspace
 *      tree, symbolic links and special files are refused too;
 *   6. files are opened again the same way (O_NOFOLLOW at every component)
 *      and their device and inode must equal what the first walk saw.
 *
 * A breach is the tool error `path-refused`; every function here that
 * refuses writes the message (naming the path and the rule) into `why`.
 *
 * Ownership: host_path and host_tree own their strings; free them with
 * host_path_free / host_tree_free. Nothing here keeps global state.
 */
#ifndef RELAY_RUNS_HOST_PATHS_H
#define RELAY_RUNS_HOST_PATHS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HOST_PATH_MAX_BYTES 4096

typedef enum host_path_kind { HOST_PATH_FILE = 0, HOST_PATH_DIR = 1 } host_path_kind;

/* A checked host path. */
typedef struct host_path {
	char *given; /* the path as the call gave it; owned */
	char *path;  /* absolute: P′ + "/" + rel (P′ itself when rel is ""); owned */
	char *rel;   /* normalised, relative to P′ ("" for P′ itself); owned */
	dev_t dev;   /* device and inode the walk found */
	ino_t ino;
	uint64_t bytes; /* size in bytes of a regular file (0 for a folder) */
} host_path;

/* Resolves `given` under the project folder. `project_real` is P′ (the
 * settings' realpath), `project_given` is P as configured (may equal P′).
 * Returns 0 with *out filled, or -1 with the refusal in `why`. */
int host_path_resolve(const char *project_real, const char *project_given, const char *given,
                      host_path_kind kind, host_path *out, char *why, size_t why_len);
void host_path_free(host_path *p);

/* Opens a resolved file for reading again (rule 6): every component with
 * O_NOFOLLOW from P′, the result a regular file with the same device and
 * inode. Returns the descriptor (O_CLOEXEC), or -1 with the reason. */
int host_path_open(const char *project_real, const host_path *p, char *why, size_t why_len);

/* Reads a whole resolved file of at most max_bytes (opened by
 * host_path_open) into a malloc'd NUL-terminated buffer. 0, or -1 with the
 * reason; *too_large is set when the file is bigger than max_bytes. */
int host_path_read(const char *project_real, const host_path *p, size_t max_bytes, char **data_out,
                   size_t *len_out, bool *too_large, char *why, size_t why_len);

/* One regular file of a tree, relative to the tree's root. */
typedef struct host_tree_file {
	char *rel;      /* '/'-separated, no leading slash; owned */
	uint64_t bytes; /* size in bytes */
	dev_t dev;      /* identity seen by the walk */
	ino_t ino;
	char sha256[65]; /* lowercase hex; "" until host_tree_hash() */
} host_tree_file;

/* The regular files of a folder, sorted by `rel` in byte order. */
typedef struct host_tree {
	host_tree_file *files;
	size_t count;
	size_t capacity;
	uint64_t total_bytes; /* sum of bytes */
} host_tree;

/* Walks the folder `dir` (resolved with HOST_PATH_DIR) below P′ without
 * following any link: symbolic links and special files anywhere in it are
 * refused ("workspace holds a symbolic link: <path>"). Folders are descended
 * into, not listed. Returns 0, or -1 with the reason. `label` names the tree
 * in messages ("workspace"). */
int host_tree_walk(const char *project_real, const host_path *dir, const char *label, host_tree *out,
                   char *why, size_t why_len);

/* Hashes every file of a walked tree (SHA-256 and size), opening each one
 * again below the tree's root with O_NOFOLLOW at every component; a file
 * whose device, inode or size moved since the walk is reported in `why` and
 * -1 is returned with *changed set (integrity-failed, "staging source
 * changed"); any other failure sets *changed to false. */
int host_tree_hash(const char *project_real, const host_path *dir, host_tree *tree, bool *changed, char *why,
                   size_t why_len);

void host_tree_free(host_tree *tree);

/* The SHA-256 and size of a resolved file, read through host_path_open.
 * 0, or -1 with the reason (*changed as for host_tree_hash). */
int host_path_hash(const char *project_real, const host_path *p, char sha256_out[65], uint64_t *bytes_out,
                   bool *changed, char *why, size_t why_len);

#endif
