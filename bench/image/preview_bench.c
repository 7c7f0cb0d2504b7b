/*
 * preview_bench — the preview of one image by the relay's pixels/ room,
 * as one process run, for bench/image/run.sh.
 *
 *   preview_bench <in.png|jpg|webp> <out>
 *
 * Reads the original, runs image_present() (validation, full decode,
 * area-average resampling, PNG encoding, SHA-256, base64, receipt) and
 * writes the preview's bytes to <out>. Prints "<width>x<height> <bytes>
 * <shrink steps>" on standard output.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pixels/image.h"

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: preview_bench <in> <out>\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "rb");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	size_t cap = 1 << 20, len = 0;
	unsigned char *data = malloc(cap);
	size_t n;
	while (data && (n = fread(data + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			cap *= 2;
			data = realloc(data, cap);
		}
	}
	fclose(f);
	if (!data) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	image_presentation pr;
	relay_error err;
	relay_status st = image_present(data, len, image_mime_for_path(argv[1]), &pr, &err);
	free(data);
	if (st != RELAY_OK) {
		fprintf(stderr, "%s: %s\n", image_delivery_status(st), err.message);
		return 1;
	}
	FILE *o = fopen(argv[2], "wb");
	if (!o || fwrite(pr.bytes, 1, pr.len, o) != pr.len || fclose(o) != 0) {
		perror(argv[2]);
		return 1;
	}
	printf("%ux%u %zu %u\n", pr.width, pr.height, pr.len, pr.shrink_steps);
	image_presentation_free(&pr);
	return 0;
}
