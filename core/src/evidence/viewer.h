/*
 * evidence/viewer.h — the index.html viewer of an evidence package (spec
 * spec/evidence.md §10, docs/evidence-format.md "Viewer").
 *
 * One static HTML page derived from review data (evidence/review.h): inline
 * CSS, no JavaScript, no fonts, nothing fetched from a network. Images are
 * referenced by their package-relative, percent-encoded paths, so the page
 * works when opened from the package folder. Every text from the guest or
 * the agent is HTML-escaped; output is shown in <pre> blocks. The review data
 * it was built from is embedded as a non-executed JSON data block
 * (<script type="application/json" id="relay-review">, "</" written "<\/",
 * any other "<" written "\u003c").
 */
#ifndef RELAY_EVIDENCE_VIEWER_H
#define RELAY_EVIDENCE_VIEWER_H

#include <json-c/json.h>

#include "util/strbuf.h"

/* Output shown per stream (bytes); the rest stays in the receipt. */
#define EVIDENCE_VIEWER_OUTPUT_EXCERPT_BYTES 16384

/* Appends the page for `review` (borrowed) to `out`. Check strbuf_ok(out). */
void evidence_viewer_render(const json_object *review, strbuf *out);

/* Appends text[0..len) HTML-escaped (& < > " '). */
void evidence_html_escape(strbuf *out, const char *text, size_t len);
/* Appends a package-relative path percent-encoded for src/href (unreserved
 * characters and '/' kept). */
void evidence_url_encode_path(strbuf *out, const char *path);

#endif
