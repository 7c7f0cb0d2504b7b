/*
 * Guest tar archives through the evidence extraction (evidence/archive.c):
 * names, links, devices, sizes, pax headers, the index. The first byte
 * picks the options (bit 0 skips the raw header pre-scan so libarchive's
 * view is tried alone; bit 1 extracts against an expected list with
 * RELAY_ARCHIVE_PRESENT; bit 2 caps snapshot originals at 64 bytes), the
 * rest is the archive.
 *
 * Invariants: nothing is written outside the destination folder; on
 * success every reported file is a regular file there with the reported
 * size, and no link exists below the destination; on refusal no file is
 * left in it.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "evidence/archive.h"
#include "util/jsonx.h"

#include "fuzz.h"

static char root[4096]; /* <scratch>/archive: holds only in.tar and dest */
static char tar_path[4200];
static char dest[4200];
static size_t files_left; /* regular files found under dest by count_entry */
static size_t links_left;

static int count_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (type == FTW_SL || type == FTW_SLN || S_ISLNK(st->st_mode))
		links_left++;
	else if (type == FTW_F)
		files_left++;
	return 0;
}

static void check_root_alone(void)
{
	DIR *d = opendir(root);
	if (d == NULL)
		fuzz_fail("cannot list %s", root);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    strcmp(e->d_name, "in.tar") == 0 || strcmp(e->d_name, "dest") == 0)
			continue;
		fuzz_fail("extraction wrote %s outside its destination", e->d_name);
	}
	closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (root[0] == '\0') {
		snprintf(root, sizeof root, "%s/archive", fuzz_scratch_dir());
		snprintf(tar_path, sizeof tar_path, "%s/in.tar", root);
		snprintf(dest, sizeof dest, "%s/dest", root);
	}
	fuzz_remove_tree(root);
	if (mkdir(root, 0700) != 0 || mkdir(dest, 0700) != 0)
		fuzz_fail("cannot create %s: %s", dest, strerror(errno));
	if (fuzz_write_file(tar_path, data + 1, size - 1) != 0)
		fuzz_fail("cannot write %s", tar_path);

	evidence_extract_options opts;
	memset(&opts, 0, sizeof opts);
	opts.skip_structure_scan = (data[0] & 1) != 0;
	if (data[0] & 4)
		opts.snapshot_max_bytes = 64;
	const char *expected = NULL;
	unsigned flags = 0;
	if (data[0] & 2) {
		expected = "[{\"path\":\"a.txt\"},{\"path\":\"dir/b.bin\",\"bytes\":3},"
		           "{\"path\":\"state/snapshots/s.png\"}]";
		flags = RELAY_ARCHIVE_PRESENT;
	}
	char *facts = NULL;
	relay_error err;
	memset(&err, 0, sizeof err);
	relay_status st = evidence_archive_extract_ex(tar_path, dest, expected, flags, &opts, &facts, &err);
	check_root_alone();
	files_left = links_left = 0;
	nftw(dest, count_entry, 16, FTW_PHYS);
	if (links_left)
		fuzz_fail("a link was left below the destination (status %d)", (int)st);
	if (st != RELAY_OK) {
		if (files_left)
			fuzz_fail("a refused archive left %zu files (%s)", files_left, err.message);
		if (err.message[0] == '\0')
			fuzz_fail("a refusal gave no message");
	} else {
		json_object *list = facts ? jsonx_parse_str(facts, NULL, 0) : NULL;
		if (!json_object_is_type(list, json_type_array))
			fuzz_fail("an extraction reported no facts");
		size_t n = json_object_array_length(list);
		if (n != files_left)
			fuzz_fail("facts list %zu files, %zu are present", n, files_left);
		for (size_t i = 0; i < n; i++) {
			json_object *f = json_object_array_get_idx(list, i);
			const char *path = jsonx_get_str(f, "path");
			int64_t bytes = -1;
			if (path == NULL || !jsonx_get_int(f, "bytes", &bytes) ||
			    !evidence_archive_path_ok(path))
				fuzz_fail("a bad fact: %s", json_object_to_json_string(f));
			char full[8400];
			snprintf(full, sizeof full, "%s/%s", dest, path);
			struct stat sb;
			if (lstat(full, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size != bytes)
				fuzz_fail("%s is not a regular file of %lld bytes", path, (long long)bytes);
		}
		json_object_put(list);
	}
	free(facts);
	return 0;
}
