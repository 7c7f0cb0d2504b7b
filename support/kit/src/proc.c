/* proc.c — processes named by pid and start time (relay_kit/proc.h). */
#include "relay_kit/proc.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads field 22 (starttime) and field 3 (state) of /proc/<pid>/stat. */
static int proc_stat(pid_t pid, unsigned long long *start, char *state)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ')
		return -1;
	p += 2;
	*state = *p;
	/* p is at field 3; starttime is field 22. */
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (p == NULL)
			return -1;
		p++;
	}
	*start = strtoull(p, NULL, 10);
	return 0;
}

unsigned long long rk_proc_start(pid_t pid)
{
	unsigned long long start = 0;
	char state = 0;
	if (pid <= 0 || proc_stat(pid, &start, &state) != 0 || state == 'Z' || state == 'X')
		return 0;
	return start;
}

bool rk_proc_alive(pid_t pid, unsigned long long start)
{
	unsigned long long s = rk_proc_start(pid);
	return s != 0 && s == start;
}
