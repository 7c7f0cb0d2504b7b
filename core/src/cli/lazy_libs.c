/*
 * Lazy loading of libcurl, libarchive, libpng and zlib (see lazy_libs.h): a plain
 * C table of the functions the core calls, each resolved with dlopen/dlsym
 * on first use. Built only with RELAY_LAZY_LIBS (Linux,
 * core/src/cli/lazy_libs.cmake); otherwise this file only says so.
 */
#include "cli/lazy_libs.h"

#if defined(RELAY_LAZY_LIBS)

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <png.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <zlib.h>

#include "util/log.h"

/*
 * Every function of the four libraries the core calls, one line each:
 *   LAZY_FN(library, return type, name, (parameters), (arguments))
 *   LAZY_VOID(library, name, (parameters), (arguments))   returns nothing
 * The parameters are written out as the library's header declares them; the
 * header's own prototype is in scope, so a line that does not match it does
 * not compile. Each line gives a slot in `lazy_table` and a hidden function
 * of that name that calls through the slot. curl_easy_setopt and
 * curl_easy_getinfo (variadic), png_error and png_longjmp (they do not
 * return) and png_set_longjmp_fn (it returns a jmp_buf pointer, which the
 * line form cannot spell) are written by hand below, with their slots in
 * LAZY_SPECIAL.
 *
 * To call another function of these libraries: add its line here. A call
 * to a function that is not listed links that library the ordinary way (it
 * is linked --as-needed), only startup gets slower again;
 * tests/integration/test_startup.py names the library and the fix.
 */
#define LAZY_FUNCTIONS(LAZY_FN, LAZY_VOID)                                                                   \
	LAZY_VOID(LAZY_LIB_CURL, curl_easy_cleanup, (CURL * a0), (a0))                                       \
	LAZY_FN(LAZY_LIB_CURL, CURL *, curl_easy_init, (void), ())                                           \
	LAZY_FN(LAZY_LIB_CURL, CURLcode, curl_easy_perform, (CURL * a0), (a0))                               \
	LAZY_FN(LAZY_LIB_CURL, const char *, curl_easy_strerror, (CURLcode a0), (a0))                        \
	LAZY_FN(LAZY_LIB_CURL, CURLcode, curl_global_init, (long int a0), (a0))                              \
	LAZY_FN(LAZY_LIB_CURL, struct curl_slist *, curl_slist_append,                                       \
	        (struct curl_slist * a0, const char *a1), (a0, a1))                                          \
	LAZY_VOID(LAZY_LIB_CURL, curl_slist_free_all, (struct curl_slist * a0), (a0))                        \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_entry_acl_count, (struct archive_entry * a0, int a1),         \
	        (a0, a1))                                                                                    \
	LAZY_FN(LAZY_LIB_ARCHIVE, mode_t, archive_entry_filetype, (struct archive_entry * a0), (a0))         \
	LAZY_VOID(LAZY_LIB_ARCHIVE, archive_entry_free, (struct archive_entry * a0), (a0))                   \
	LAZY_FN(LAZY_LIB_ARCHIVE, const char *, archive_entry_hardlink, (struct archive_entry * a0), (a0))   \
	LAZY_FN(LAZY_LIB_ARCHIVE, struct archive_entry *, archive_entry_new, (void), ())                     \
	LAZY_FN(LAZY_LIB_ARCHIVE, const char *, archive_entry_pathname, (struct archive_entry * a0), (a0))   \
	LAZY_FN(LAZY_LIB_ARCHIVE, const char *, archive_entry_pathname_utf8, (struct archive_entry * a0),    \
	        (a0))                                                                                        \
	LAZY_VOID(LAZY_LIB_ARCHIVE, archive_entry_set_filetype,                                              \
	          (struct archive_entry * a0, unsigned int a1), (a0, a1))                                    \
	LAZY_VOID(LAZY_LIB_ARCHIVE, archive_entry_set_gid, (struct archive_entry * a0, la_int64_t a1),       \
	          (a0, a1))                                                                                  \
	LAZY_VOID(LAZY_LIB_ARCHIVE, archive_entry_set_mtime,                                                 \
	          (struct archive_entry * a0, time_t a1, long int a2), (a0, a1, a2))                         \
	LAZY_VOID(LAZY_LIB_ARCHIVE, archive_entry_set_perm, (struct archive_entry * a0, mode_t a1),          \
	          (a0, a1))                                                                                  \
	LAZY_VOID(LAZY_LIB_ARCHIVE, archive_entry_set_size, (struct archive_entry * a0, la_int64_t a1),      \
	          (a0, a1))                                                                                  \
	LAZY_VOID(LAZY_LIB_ARCHIVE, archive_entry_set_uid, (struct archive_entry * a0, la_int64_t a1),       \
	          (a0, a1))                                                                                  \
	LAZY_FN(LAZY_LIB_ARCHIVE, la_int64_t, archive_entry_size, (struct archive_entry * a0), (a0))         \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_entry_size_is_set, (struct archive_entry * a0), (a0))         \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_entry_sparse_count, (struct archive_entry * a0), (a0))        \
	LAZY_FN(LAZY_LIB_ARCHIVE, const char *, archive_entry_symlink, (struct archive_entry * a0), (a0))    \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_entry_update_pathname_utf8,                                   \
	        (struct archive_entry * a0, const char *a1), (a0, a1))                                       \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_entry_xattr_count, (struct archive_entry * a0), (a0))         \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_errno, (struct archive * a0), (a0))                           \
	LAZY_FN(LAZY_LIB_ARCHIVE, const char *, archive_error_string, (struct archive * a0), (a0))           \
	LAZY_FN(LAZY_LIB_ARCHIVE, la_ssize_t, archive_read_data, (struct archive * a0, void *a1, size_t a2), \
	        (a0, a1, a2))                                                                                \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_read_free, (struct archive * a0), (a0))                       \
	LAZY_FN(LAZY_LIB_ARCHIVE, struct archive *, archive_read_new, (void), ())                            \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_read_next_header,                                             \
	        (struct archive * a0, struct archive_entry * *a1), (a0, a1))                                 \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_read_open_fd, (struct archive * a0, int a1, size_t a2),       \
	        (a0, a1, a2))                                                                                \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_read_support_format_tar, (struct archive * a0), (a0))         \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_add_filter_none, (struct archive * a0), (a0))           \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_close, (struct archive * a0), (a0))                     \
	LAZY_FN(LAZY_LIB_ARCHIVE, la_ssize_t, archive_write_data,                                            \
	        (struct archive * a0, const void *a1, size_t a2), (a0, a1, a2))                              \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_free, (struct archive * a0), (a0))                      \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_header,                                                 \
	        (struct archive * a0, struct archive_entry * a1), (a0, a1))                                  \
	LAZY_FN(LAZY_LIB_ARCHIVE, struct archive *, archive_write_new, (void), ())                           \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_open_fd, (struct archive * a0, int a1), (a0, a1))       \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_set_bytes_in_last_block, (struct archive * a0, int a1), \
	        (a0, a1))                                                                                    \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_set_bytes_per_block, (struct archive * a0, int a1),     \
	        (a0, a1))                                                                                    \
	LAZY_FN(LAZY_LIB_ARCHIVE, int, archive_write_set_format_pax_restricted, (struct archive * a0), (a0)) \
	LAZY_FN(LAZY_LIB_PNG, png_infop, png_create_info_struct, (png_const_structrp a0), (a0))              \
	LAZY_FN(LAZY_LIB_PNG, png_structp, png_create_read_struct,                                           \
	        (png_const_charp a0, png_voidp a1, png_error_ptr a2, png_error_ptr a3), (a0, a1, a2, a3))    \
	LAZY_FN(LAZY_LIB_PNG, png_structp, png_create_write_struct,                                          \
	        (png_const_charp a0, png_voidp a1, png_error_ptr a2, png_error_ptr a3), (a0, a1, a2, a3))    \
	LAZY_VOID(LAZY_LIB_PNG, png_destroy_read_struct, (png_structpp a0, png_infopp a1, png_infopp a2),    \
	          (a0, a1, a2))                                                                              \
	LAZY_VOID(LAZY_LIB_PNG, png_destroy_write_struct, (png_structpp a0, png_infopp a1), (a0, a1))        \
	LAZY_FN(LAZY_LIB_PNG, png_byte, png_get_bit_depth, (png_const_structrp a0, png_const_inforp a1),     \
	        (a0, a1))                                                                                    \
	LAZY_FN(LAZY_LIB_PNG, png_byte, png_get_channels, (png_const_structrp a0, png_const_inforp a1),      \
	        (a0, a1))                                                                                    \
	LAZY_FN(LAZY_LIB_PNG, png_byte, png_get_color_type, (png_const_structrp a0, png_const_inforp a1),    \
	        (a0, a1))                                                                                    \
	LAZY_FN(LAZY_LIB_PNG, png_voidp, png_get_error_ptr, (png_const_structrp a0), (a0))                   \
	LAZY_FN(LAZY_LIB_PNG, png_uint_32, png_get_image_height,                                             \
	        (png_const_structrp a0, png_const_inforp a1), (a0, a1))                                      \
	LAZY_FN(LAZY_LIB_PNG, png_uint_32, png_get_image_width,                                              \
	        (png_const_structrp a0, png_const_inforp a1), (a0, a1))                                      \
	LAZY_FN(LAZY_LIB_PNG, png_voidp, png_get_io_ptr, (png_const_structrp a0), (a0))                      \
	LAZY_FN(LAZY_LIB_PNG, size_t, png_get_rowbytes, (png_const_structrp a0, png_const_inforp a1),        \
	        (a0, a1))                                                                                    \
	LAZY_FN(LAZY_LIB_PNG, png_uint_32, png_get_valid,                                                    \
	        (png_const_structrp a0, png_const_inforp a1, png_uint_32 a2), (a0, a1, a2))                  \
	LAZY_VOID(LAZY_LIB_PNG, png_read_end, (png_structrp a0, png_inforp a1), (a0, a1))                    \
	LAZY_VOID(LAZY_LIB_PNG, png_read_image, (png_structrp a0, png_bytepp a1), (a0, a1))                  \
	LAZY_VOID(LAZY_LIB_PNG, png_read_info, (png_structrp a0, png_inforp a1), (a0, a1))                   \
	LAZY_VOID(LAZY_LIB_PNG, png_read_row, (png_structrp a0, png_bytep a1, png_bytep a2), (a0, a1, a2))   \
	LAZY_VOID(LAZY_LIB_PNG, png_read_update_info, (png_structrp a0, png_inforp a1), (a0, a1))            \
	LAZY_VOID(LAZY_LIB_PNG, png_set_IHDR,                                                                \
	          (png_const_structrp a0, png_inforp a1, png_uint_32 a2, png_uint_32 a3, int a4, int a5,     \
	           int a6, int a7, int a8),                                                                  \
	          (a0, a1, a2, a3, a4, a5, a6, a7, a8))                                                      \
	LAZY_VOID(LAZY_LIB_PNG, png_set_benign_errors, (png_structrp a0, int a1), (a0, a1))                  \
	LAZY_VOID(LAZY_LIB_PNG, png_set_compression_buffer_size, (png_structrp a0, size_t a1), (a0, a1))     \
	LAZY_VOID(LAZY_LIB_PNG, png_set_compression_level, (png_structrp a0, int a1), (a0, a1))              \
	LAZY_VOID(LAZY_LIB_PNG, png_set_crc_action, (png_structrp a0, int a1, int a2), (a0, a1, a2))         \
	LAZY_VOID(LAZY_LIB_PNG, png_set_expand_gray_1_2_4_to_8, (png_structrp a0), (a0))                     \
	LAZY_VOID(LAZY_LIB_PNG, png_set_filter, (png_structrp a0, int a1, int a2), (a0, a1, a2))             \
	LAZY_VOID(LAZY_LIB_PNG, png_set_gray_to_rgb, (png_structrp a0), (a0))                                \
	LAZY_FN(LAZY_LIB_PNG, int, png_set_interlace_handling, (png_structrp a0), (a0))                      \
	LAZY_VOID(LAZY_LIB_PNG, png_set_keep_unknown_chunks,                                                 \
	          (png_structrp a0, int a1, png_const_bytep a2, int a3), (a0, a1, a2, a3))                   \
	LAZY_VOID(LAZY_LIB_PNG, png_set_palette_to_rgb, (png_structrp a0), (a0))                             \
	LAZY_VOID(LAZY_LIB_PNG, png_set_read_fn, (png_structrp a0, png_voidp a1, png_rw_ptr a2),             \
	          (a0, a1, a2))                                                                              \
	LAZY_VOID(LAZY_LIB_PNG, png_set_strip_16, (png_structrp a0), (a0))                                   \
	LAZY_VOID(LAZY_LIB_PNG, png_set_tRNS_to_alpha, (png_structrp a0), (a0))                              \
	LAZY_VOID(LAZY_LIB_PNG, png_set_user_limits, (png_structrp a0, png_uint_32 a1, png_uint_32 a2),      \
	          (a0, a1, a2))                                                                              \
	LAZY_VOID(LAZY_LIB_PNG, png_set_write_fn,                                                            \
	          (png_structrp a0, png_voidp a1, png_rw_ptr a2, png_flush_ptr a3), (a0, a1, a2, a3))        \
	LAZY_VOID(LAZY_LIB_PNG, png_write_end, (png_structrp a0, png_inforp a1), (a0, a1))                   \
	LAZY_VOID(LAZY_LIB_PNG, png_write_info, (png_structrp a0, png_const_inforp a1), (a0, a1))            \
	LAZY_VOID(LAZY_LIB_PNG, png_write_row, (png_structrp a0, png_const_bytep a1), (a0, a1))              \
	LAZY_FN(LAZY_LIB_Z, int, inflate, (z_streamp a0, int a1), (a0, a1))                                  \
	LAZY_FN(LAZY_LIB_Z, int, inflateEnd, (z_streamp a0), (a0))                                           \
	LAZY_FN(LAZY_LIB_Z, int, inflateInit2_, (z_streamp a0, int a1, const char *a2, int a3),              \
	        (a0, a1, a2, a3))                                                                            \
	/* end */

#define LAZY_SPECIAL(LAZY_SLOT)                                                                              \
	LAZY_SLOT(LAZY_LIB_CURL, curl_easy_setopt)                                                           \
	LAZY_SLOT(LAZY_LIB_CURL, curl_easy_getinfo)                                                          \
	LAZY_SLOT(LAZY_LIB_PNG, png_error)                                                                   \
	LAZY_SLOT(LAZY_LIB_PNG, png_longjmp)                                                                 \
	LAZY_SLOT(LAZY_LIB_PNG, png_set_longjmp_fn)

/* The slot numbers. */
#define SLOT_ENUM_FN(lib, ret, name, params, args) LAZY_SLOT_##name,
#define SLOT_ENUM_VOID(lib, name, params, args)    LAZY_SLOT_##name,
#define SLOT_ENUM(lib, name)                       LAZY_SLOT_##name,
enum { LAZY_FUNCTIONS(SLOT_ENUM_FN, SLOT_ENUM_VOID) LAZY_SPECIAL(SLOT_ENUM) LAZY_SLOT_COUNT };

/* One function: its name, its library and, once resolved, its address. */
typedef struct lazy_slot {
	const char *name;
	unsigned lib; /* LAZY_LIB_* */
	_Atomic(void *) address;
} lazy_slot;

#define SLOT_ENTRY_FN(lib, ret, name, params, args) [LAZY_SLOT_##name] = {#name, lib, NULL},
#define SLOT_ENTRY_VOID(lib, name, params, args)    [LAZY_SLOT_##name] = {#name, lib, NULL},
#define SLOT_ENTRY(lib, name)                       [LAZY_SLOT_##name] = {#name, lib, NULL},

/* The table. Process-wide, as the functions are: an address is written once
 * (atomically; two threads resolving the same slot store the same value). */
static lazy_slot lazy_table[LAZY_SLOT_COUNT] = {LAZY_FUNCTIONS(SLOT_ENTRY_FN, SLOT_ENTRY_VOID)
                                                    LAZY_SPECIAL(SLOT_ENTRY)};

/* The sonames the build linked against (core/src/cli/lazy_libs.cmake). */
static const char *const sonames[LAZY_LIB_COUNT] = {RELAY_LAZY_SONAME_CURL, RELAY_LAZY_SONAME_ARCHIVE,
                                                    RELAY_LAZY_SONAME_PNG, RELAY_LAZY_SONAME_Z};

/* One handle per library, opened once (pthread_once) and never closed:
 * process-wide because the table is. */
static void *handles[LAZY_LIB_COUNT];
static pthread_once_t once[LAZY_LIB_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                              PTHREAD_ONCE_INIT};

static _Noreturn void fatal(const char *what, const char *name, const char *why)
{
	log_error(
	    "cannot load %s %s: %s; the installation is incomplete (install the library, or rebuild with "
	    "-DRELAY_LAZY_LIBS=OFF to link it at startup)",
	    what, name, why ? why : "unknown error");
	abort();
}

static void open_library(unsigned lib)
{
	void *h = dlopen(sonames[lib], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		fatal("the library", sonames[lib], dlerror());
	if (lib == LAZY_LIB_CURL) {
		/* curl_global_init once, before any other curl call, serialized by
		 * pthread_once (older libcurl needs that). */
		CURLcode (*global_init)(long) = (CURLcode(*)(long))dlsym(h, "curl_global_init");
		if (global_init == NULL)
			fatal("the function", "curl_global_init", dlerror());
		global_init(CURL_GLOBAL_DEFAULT);
	}
	handles[lib] = h;
}

static void open_curl(void)
{
	open_library(LAZY_LIB_CURL);
}

static void open_archive(void)
{
	open_library(LAZY_LIB_ARCHIVE);
}

static void open_png(void)
{
	open_library(LAZY_LIB_PNG);
}

static void open_z(void)
{
	open_library(LAZY_LIB_Z);
}

void *lazy_libs_resolve(unsigned slot_index)
{
	static void (*const openers[LAZY_LIB_COUNT])(void) = {open_curl, open_archive, open_png, open_z};
	lazy_slot *slot = &lazy_table[slot_index];
	void *fn = atomic_load_explicit(&slot->address, memory_order_acquire);
	if (fn != NULL)
		return fn;
	pthread_once(&once[slot->lib], openers[slot->lib]);
	fn = dlsym(handles[slot->lib], slot->name);
	if (fn == NULL)
		fatal("the function", slot->name, dlerror());
	atomic_store_explicit(&slot->address, fn, memory_order_release);
	return fn;
}

/* The functions: each calls through its slot with its own prototype. */
#define LAZY_CALL(name, ret, params) ((ret(*) params)lazy_libs_resolve(LAZY_SLOT_##name))
#define DEFINE_FN(lib, ret, name, params, args)                                                              \
	ret name params                                                                                      \
	{                                                                                                    \
		return LAZY_CALL(name, ret, params) args;                                                    \
	}
#define DEFINE_VOID(lib, name, params, args)                                                                 \
	void name params                                                                                     \
	{                                                                                                    \
		LAZY_CALL(name, void, params) args;                                                          \
	}
LAZY_FUNCTIONS(DEFINE_FN, DEFINE_VOID)

/* curl_easy_setopt takes one value whose type the option's number range
 * says (curl.h: CURLOPTTYPE_*), which is how libcurl itself reads it. */
CURLcode(curl_easy_setopt)(CURL *curl, CURLoption option, ...)
{
	va_list ap;
	CURLcode rc;
	va_start(ap, option);
	if (option < CURLOPTTYPE_OBJECTPOINT) {
		long value = va_arg(ap, long);
		rc = LAZY_CALL(curl_easy_setopt, CURLcode, (CURL *, CURLoption, ...))(curl, option, value);
	} else if (option < CURLOPTTYPE_FUNCTIONPOINT) {
		void *value = va_arg(ap, void *);
		rc = LAZY_CALL(curl_easy_setopt, CURLcode, (CURL *, CURLoption, ...))(curl, option, value);
	} else if (option < CURLOPTTYPE_OFF_T) {
		void (*value)(void) = va_arg(ap, void (*)(void));
		rc = LAZY_CALL(curl_easy_setopt, CURLcode, (CURL *, CURLoption, ...))(curl, option, value);
	} else if (option < CURLOPTTYPE_BLOB) {
		curl_off_t value = va_arg(ap, curl_off_t);
		rc = LAZY_CALL(curl_easy_setopt, CURLcode, (CURL *, CURLoption, ...))(curl, option, value);
	} else {
		void *value = va_arg(ap, void *);
		rc = LAZY_CALL(curl_easy_setopt, CURLcode, (CURL *, CURLoption, ...))(curl, option, value);
	}
	va_end(ap);
	return rc;
}

/* curl_easy_getinfo always takes one pointer to where the value goes. */
CURLcode(curl_easy_getinfo)(CURL *curl, CURLINFO info, ...)
{
	va_list ap;
	va_start(ap, info);
	void *where = va_arg(ap, void *);
	va_end(ap);
	return LAZY_CALL(curl_easy_getinfo, CURLcode, (CURL *, CURLINFO, ...))(curl, info, where);
}

jmp_buf *png_set_longjmp_fn(png_structrp png_ptr, png_longjmp_ptr longjmp_fn, size_t jmp_buf_size)
{
	return LAZY_CALL(png_set_longjmp_fn, jmp_buf *,
	                 (png_structrp, png_longjmp_ptr, size_t))(png_ptr, longjmp_fn, jmp_buf_size);
}

void png_error(png_const_structrp png_ptr, png_const_charp message)
{
	LAZY_CALL(png_error, void, (png_const_structrp, png_const_charp))(png_ptr, message);
	abort(); /* png_error does not return */
}

void png_longjmp(png_const_structrp png_ptr, int val)
{
	LAZY_CALL(png_longjmp, void, (png_const_structrp, int))(png_ptr, val);
	abort(); /* png_longjmp does not return */
}

int lazy_libs_enabled(void)
{
	return 1;
}

#else

int lazy_libs_enabled(void)
{
	return 0;
}

#endif
