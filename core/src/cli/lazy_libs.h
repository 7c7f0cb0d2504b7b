/*
 * cli/lazy_libs.h — loading libcurl, libarchive, libpng and zlib on first use
 * (Linux builds with RELAY_LAZY_LIBS, the default there).
 *
 * Why: the first three libraries pull in some forty more (GnuTLS, Kerberos,
 * LDAP, libxml2, ICU, libstdc++ ...). Linking them normally costs every
 * start of the server several milliseconds of relocation and megabytes of
 * resident memory, although a session that never talks HTTP, writes no
 * evidence archive and decodes no PNG never needs them (spec/mcp.md §1: nothing
 * may delay `initialize`).
 *
 * How: lazy_libs.c holds a plain C table with one slot per function of those
 * libraries the core calls, and defines for each a hidden function of the
 * same name and prototype (checked against the library's header) that calls
 * through its slot. The first call of a slot loads its library (dlopen of
 * the soname the build linked against; curl_global_init once for libcurl),
 * looks the name up with dlsym and stores the address; later calls cost one
 * atomic load and one indirect call. Callers use the libraries' own headers
 * unchanged, and only the façades call them: util/http.c (libcurl),
 * evidence/archive*.c (libarchive), pixels/pngcodec.c (libpng), pixels/pngcheck.c (zlib).
 *
 * Adding a call to a function that is not in the table still works: the
 * linker then links that library the ordinary way (it is linked
 * --as-needed), only startup gets slower again; tests/integration/
 * test_startup.py names the library and the fix.
 */
#ifndef RELAY_CLI_LAZY_LIBS_H
#define RELAY_CLI_LAZY_LIBS_H

enum { LAZY_LIB_CURL = 0, LAZY_LIB_ARCHIVE = 1, LAZY_LIB_PNG = 2, LAZY_LIB_Z = 3, LAZY_LIB_COUNT = 4 };

/* Called from the table's functions only: the address of the function in
 * slot `slot_index`, loading its library and looking it up on first use. A
 * library or function that cannot be found ends the process with a message
 * on stderr (the installation is broken: the same as a missing library at
 * startup). */
void *lazy_libs_resolve(unsigned slot_index);

/* True when the lazy table is built in (for diagnostics). */
int lazy_libs_enabled(void);

#endif
