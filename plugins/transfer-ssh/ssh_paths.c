#include "ssh_paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

relay_status ssh_guest_path(const relay_host *host, const char *path, char **out, relay_error *err)
{
	*out = NULL;
	if (path == NULL || path[0] != '/')
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "the guest path %.120s is not absolute", path ? path : "(null)");
	size_t len = strlen(path);
	char *norm = malloc(len + 1);
	if (norm == NULL)
		return host->error_set(err, RELAY_E_NO_MEMORY, 0, "out of memory");
	size_t j = 0;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			break;
		const char *seg = p;
		while (*p && *p != '/')
			p++;
		size_t seg_len = (size_t)(p - seg);
		if ((seg_len == 1 && seg[0] == '.') || (seg_len == 2 && seg[0] == '.' && seg[1] == '.')) {
			free(norm);
			return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
			                       "the guest path %.120s has a '.' or '..' segment", path);
		}
		for (size_t i = 0; i < seg_len; i++) {
			unsigned char ch = (unsigned char)seg[i];
			if (ch < 0x20 || ch == 0x7f) {
				free(norm);
				return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
				                       "the guest path %.120s holds a control character",
				                       path);
			}
		}
		norm[j++] = '/';
		memcpy(norm + j, seg, seg_len);
		j += seg_len;
	}
	norm[j] = '\0';
	if (j == 0) {
		free(norm);
		return host->error_set(err, RELAY_E_INVALID_ARGUMENT, 0,
		                       "refusing to transfer onto or from the guest's root folder");
	}
	*out = norm;
	return RELAY_OK;
}

bool ssh_name_ok(const char *name)
{
	if (name[0] == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	for (const char *p = name; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch < 0x20 || ch == 0x7f || ch == '\\')
			return false;
	}
	return true;
}
