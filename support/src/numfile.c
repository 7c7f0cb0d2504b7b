#include "relay_support/numfile.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

int rs_read_numbers(int fd, long long *out, int count)
{
	char buf[128];
	long long v[8];
	if (count < 1 || count > 8)
		return -1;
	ssize_t n;
	do
		n = read(fd, buf, sizeof buf - 1);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *p = buf;
	for (int i = 0; i < count; i++) {
		char *end;
		errno = 0;
		v[i] = strtoll(p, &end, 10);
		if (end == p || errno != 0)
			return -1;
		p = end;
	}
	for (int i = 0; i < count; i++)
		out[i] = v[i];
	return 0;
}
