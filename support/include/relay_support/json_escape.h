/*
 * relay_support/json_escape.h — how a byte is written inside a JSON string,
 * the one rule the core's canonical JSON (spec/images.md §2.2) and the
 * receiver's writer share (RFC 8259 §7; RFC 8785 §3.2.2.2 writes the same).
 */
#ifndef RELAY_SUPPORT_JSON_ESCAPE_H
#define RELAY_SUPPORT_JSON_ESCAPE_H

/* The escape of byte `c` inside a JSON string: the two-character forms for
 * '"', '\\', '\b', '\f', '\n', '\r' and '\t', "\u00xx" (lower-case hex,
 * written into `buf`) for the other bytes below 0x20, or NULL when `c`
 * stands as it is (0x7f and the bytes of UTF-8 sequences included). */
const char *rs_json_escape(unsigned char c, char buf[7]);

#endif
