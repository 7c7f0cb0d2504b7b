/*
 * relay_support/ustar.h — the pieces of a strict POSIX ustar/pax reader
 * (spec/evidence.md §5.3) shared by the receiver's unpacker (guest/receiver/
 * tar_read.c) and the core's pre-scan of guest archives (core/src/
 * evidence/archive.c). Each reader walks the headers its own way and words
 * its own refusals; what a valid header field is, is decided here once.
 */
#ifndef RELAY_SUPPORT_USTAR_H
#define RELAY_SUPPORT_USTAR_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of one tar block (a header, or a unit of member data). */
#define RS_TAR_BLOCK 512u

/* 1 when bytes[0..len) are all zero. */
int rs_tar_zero(const unsigned char *bytes, size_t len);

/* An octal field: optional leading spaces, at least one octal digit, then
 * only spaces or NULs. Base-256 (a GNU extension) and overflow are refused.
 * 0 with *out, or -1. */
int rs_tar_octal(const unsigned char *field, size_t width, uint64_t *out);

/* 1 when the header's checksum field (octal) equals the sum of its bytes
 * with that field counted as spaces. */
int rs_tar_checksum_ok(const unsigned char *header);

/* 1 when the header carries the POSIX magic "ustar\0" and version "00". */
int rs_tar_is_ustar(const unsigned char *header);

/* rs_tar_pax_path results. */
enum {
	RS_TAR_PAX_OK = 0,
	RS_TAR_PAX_MALFORMED = -1, /* not a sequence of "<len> <key>=<value>\n" records */
	RS_TAR_PAX_KEY = -2,       /* a record sets another key than `path` (*key_out) */
	RS_TAR_PAX_NUL = -3,       /* the path holds a NUL byte */
};

/* Parses the records of a pax extended header; only `path` is allowed.
 * On RS_TAR_PAX_OK, *path_out and *path_len_out give the value of the last
 * path record, inside data (NULL and 0 when there is none). On
 * RS_TAR_PAX_KEY, *key_out and *key_len_out give the refused key. */
int rs_tar_pax_path(const char *data, size_t len, const char **path_out, size_t *path_len_out,
                    const char **key_out, size_t *key_len_out);

#endif
