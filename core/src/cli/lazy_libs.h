/*
 * cli/lazy_libs.h — loading libcurl, libarchive and libpng on first use
 * (x86-64 Linux builds with RELAY_LAZY_LIBS, the default there).
 *
 * Why: those three libraries pull in some forty more (GnuTLS, Kerberos,
 * LDAP, libxml2, ICU, libstdc++ ...). Linking them normally costs every
 * start of the server several milliseconds of relocation and megabytes of
 * resident memory, although a session that never talks HTTP, writes no
 * evidence archive and decodes no PNG never needs them (mcp.md §1: nothing
 * may delay `initialize`).
 *
 * How: lazy_libs.c defines (in assembly), for every function of those libraries the core
 * calls, a hidden symbol of the same name that jumps through a slot. The
 * slot first points to a resolver that saves the argument registers, calls
 * lazy_libs_resolve() below (dlopen of the library's soname, dlsym of the
 * name, curl_global_init once for libcurl), stores the address in the slot
 * and jumps there; later calls cost one indirect jump. Callers use the
 * libraries' own headers unchanged.
 *
 * Adding a call to a function that is not listed in lazy_libs.c still
 * works: the linker then links that library the ordinary way (it is
 * linked --as-needed), only startup gets slower again;
 * tests/integration/test_startup.py names the library and the fix.
 */
#ifndef RELAY_CLI_LAZY_LIBS_H
#define RELAY_CLI_LAZY_LIBS_H

#include <stdint.h>

/* One stubbed function, laid out by the assembly in lazy_libs.c. */
typedef struct lazy_entry {
	void *target;     /* where the stub jumps: the resolver, then the function */
	const char *name; /* the function's name */
	uintptr_t lib;    /* LAZY_LIB_* */
} lazy_entry;

enum { LAZY_LIB_CURL = 0, LAZY_LIB_ARCHIVE = 1, LAZY_LIB_PNG = 2, LAZY_LIB_COUNT = 3 };

/* Called from the stubs only: loads the entry's library once, looks the
 * function up, stores it in the entry and returns it. A library or function
 * that cannot be found ends the process with a message on stderr (the
 * installation is broken: the same as a missing library at startup). */
void *lazy_libs_resolve(lazy_entry *entry);

/* True when the lazy stubs are built in (for diagnostics). */
int lazy_libs_enabled(void);

#endif
