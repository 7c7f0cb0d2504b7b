#include "relay_support/ustar.h"

#include <string.h>

int rs_tar_zero(const unsigned char *bytes, size_t len)
{
	size_t i;
	for (i = 0; i < len; i++)
		if (bytes[i] != 0)
			return 0;
	return 1;
}

int rs_tar_octal(const unsigned char *field, size_t width, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;
	int digits = 0;
	if (width > 0 && (field[0] & 0x80))
		return -1; /* base-256: a GNU extension */
	while (i < width && field[i] == ' ')
		i++;
	for (; i < width && field[i] >= '0' && field[i] <= '7'; i++) {
		if (v > (UINT64_MAX >> 3))
			return -1;
		v = (v << 3) | (uint64_t)(field[i] - '0');
		digits++;
	}
	for (; i < width; i++)
		if (field[i] != ' ' && field[i] != '\0')
			return -1;
	if (!digits)
		return -1;
	*out = v;
	return 0;
}

int rs_tar_checksum_ok(const unsigned char *header)
{
	uint64_t stored, sum = 0;
	size_t i;
	if (rs_tar_octal(header + 148, 8, &stored) != 0)
		return 0;
	for (i = 0; i < RS_TAR_BLOCK; i++)
		sum += (i >= 148 && i < 156) ? ' ' : header[i];
	return stored == sum;
}

int rs_tar_is_ustar(const unsigned char *header)
{
	return memcmp(header + 257, "ustar", 6) == 0 && memcmp(header + 263, "00", 2) == 0;
}

int rs_tar_pax_path(const char *data, size_t len, const char **path_out, size_t *path_len_out,
                    const char **key_out, size_t *key_len_out)
{
	size_t pos = 0;
	*path_out = NULL;
	*path_len_out = 0;
	while (pos < len) {
		size_t rec_len = 0, i = pos;
		const char *key, *eq, *rec_end;
		while (i < len && data[i] >= '0' && data[i] <= '9') {
			rec_len = rec_len * 10 + (size_t)(data[i] - '0');
			if (rec_len > len)
				break;
			i++;
		}
		/* The shortest record is "5 k=\n". */
		if (i == pos || i >= len || data[i] != ' ' || rec_len < 5 || pos + rec_len > len ||
		    data[pos + rec_len - 1] != '\n')
			return RS_TAR_PAX_MALFORMED;
		key = data + i + 1;
		rec_end = data + pos + rec_len - 1;
		if (key >= rec_end)
			return RS_TAR_PAX_MALFORMED;
		eq = memchr(key, '=', (size_t)(rec_end - key));
		if (eq == NULL)
			return RS_TAR_PAX_MALFORMED;
		if ((size_t)(eq - key) != 4 || memcmp(key, "path", 4) != 0) {
			*key_out = key;
			*key_len_out = (size_t)(eq - key);
			return RS_TAR_PAX_KEY;
		}
		if (memchr(eq + 1, '\0', (size_t)(rec_end - eq - 1)) != NULL)
			return RS_TAR_PAX_NUL;
		*path_out = eq + 1;
		*path_len_out = (size_t)(rec_end - eq - 1);
		pos += rec_len;
	}
	return RS_TAR_PAX_OK;
}
