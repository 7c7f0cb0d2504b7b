/*
 * The stubs and their resolver (see lazy_libs.h). Built only with
 * RELAY_LAZY_LIBS (x86-64 Linux, core/src/cli/lazy_libs.cmake); otherwise
 * this file only says so.
 */
#include "cli/lazy_libs.h"

#if defined(RELAY_LAZY_LIBS) && defined(__x86_64__)

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

/*
 * The stubs, x86-64 System V only. Each listed function gets:
 *
 *   <name>:              jmp *lazy_entry_<name>    (hidden: never exported)
 *   lazy_entry_<name>:   {target, "<name>", library}; target starts at
 *   lazy_thunk_<name>:   r11 = &lazy_entry_<name>; jmp lazy_common
 *
 * lazy_common saves every register that can carry an argument (rdi, rsi,
 * rdx, rcx, r8, r9, rax for the vector-register count of variadic calls
 * such as curl_easy_setopt, xmm0-xmm7), calls lazy_libs_resolve(entry),
 * restores them and jumps to the function with the caller's return address
 * still on the stack, so the function returns straight to its caller.
 * On entry rsp = 8 (mod 16); 184 bytes of saves make it 0 for the call.
 *
 * To stub another function: add one LAZY line (name, library number:
 * 0 libcurl, 1 libarchive, 2 libpng).
 */
__asm__("	.pushsection .text\n"
        "	.macro LAZY name, lib\n"
        "	.text\n"
        "	.globl \\name\n"
        "	.hidden \\name\n"
        "	.type \\name, @function\n"
        "	.p2align 4\n"
        "\\name:\n"
        "	jmp *lazy_entry_\\name(%rip)\n"
        "	.size \\name, . - \\name\n"
        "lazy_thunk_\\name:\n"
        "	leaq lazy_entry_\\name(%rip), %r11\n"
        "	jmp lazy_common\n"
        "	.section .rodata.str1.1, \"aMS\", @progbits, 1\n"
        "lazy_name_\\name:\n"
        "	.asciz \"\\name\"\n"
        "	.data\n"
        "	.p2align 3\n"
        "lazy_entry_\\name:\n"
        "	.quad lazy_thunk_\\name\n"
        "	.quad lazy_name_\\name\n"
        "	.quad \\lib\n"
        "	.text\n"
        "	.endm\n"
        "\n"
        "	.text\n"
        "	.p2align 4\n"
        "	.type lazy_common, @function\n"
        "lazy_common:\n"
        "	# On entry rsp = 8 (mod 16): the caller's return address is on top.\n"
        "	# 184 bytes of saves make it 0 (mod 16) for the call.\n"
        "	subq $184, %rsp\n"
        "	movq %rdi, 0(%rsp)\n"
        "	movq %rsi, 8(%rsp)\n"
        "	movq %rdx, 16(%rsp)\n"
        "	movq %rcx, 24(%rsp)\n"
        "	movq %r8, 32(%rsp)\n"
        "	movq %r9, 40(%rsp)\n"
        "	movq %rax, 48(%rsp)\n"
        "	movdqu %xmm0, 56(%rsp)\n"
        "	movdqu %xmm1, 72(%rsp)\n"
        "	movdqu %xmm2, 88(%rsp)\n"
        "	movdqu %xmm3, 104(%rsp)\n"
        "	movdqu %xmm4, 120(%rsp)\n"
        "	movdqu %xmm5, 136(%rsp)\n"
        "	movdqu %xmm6, 152(%rsp)\n"
        "	movdqu %xmm7, 168(%rsp)\n"
        "	movq %r11, %rdi\n"
        "	call lazy_libs_resolve\n"
        "	movq %rax, %r11\n"
        "	movq 0(%rsp), %rdi\n"
        "	movq 8(%rsp), %rsi\n"
        "	movq 16(%rsp), %rdx\n"
        "	movq 24(%rsp), %rcx\n"
        "	movq 32(%rsp), %r8\n"
        "	movq 40(%rsp), %r9\n"
        "	movq 48(%rsp), %rax\n"
        "	movdqu 56(%rsp), %xmm0\n"
        "	movdqu 72(%rsp), %xmm1\n"
        "	movdqu 88(%rsp), %xmm2\n"
        "	movdqu 104(%rsp), %xmm3\n"
        "	movdqu 120(%rsp), %xmm4\n"
        "	movdqu 136(%rsp), %xmm5\n"
        "	movdqu 152(%rsp), %xmm6\n"
        "	movdqu 168(%rsp), %xmm7\n"
        "	addq $184, %rsp\n"
        "	jmp *%r11\n"
        "	.size lazy_common, . - lazy_common\n"
        "\n"
        /* Library numbers: 0 libcurl, 1 libarchive, 2 libpng (lazy_libs.h). */
        "\n"
        "LAZY curl_easy_cleanup, 0\n"
        "LAZY curl_easy_getinfo, 0\n"
        "LAZY curl_easy_init, 0\n"
        "LAZY curl_easy_perform, 0\n"
        "LAZY curl_easy_setopt, 0\n"
        "LAZY curl_easy_strerror, 0\n"
        "LAZY curl_global_init, 0\n"
        "LAZY curl_slist_append, 0\n"
        "LAZY curl_slist_free_all, 0\n"
        "\n"
        "LAZY archive_entry_acl_count, 1\n"
        "LAZY archive_entry_filetype, 1\n"
        "LAZY archive_entry_free, 1\n"
        "LAZY archive_entry_hardlink, 1\n"
        "LAZY archive_entry_new, 1\n"
        "LAZY archive_entry_pathname, 1\n"
        "LAZY archive_entry_pathname_utf8, 1\n"
        "LAZY archive_entry_set_filetype, 1\n"
        "LAZY archive_entry_set_gid, 1\n"
        "LAZY archive_entry_set_mtime, 1\n"
        "LAZY archive_entry_set_perm, 1\n"
        "LAZY archive_entry_set_size, 1\n"
        "LAZY archive_entry_set_uid, 1\n"
        "LAZY archive_entry_size, 1\n"
        "LAZY archive_entry_size_is_set, 1\n"
        "LAZY archive_entry_sparse_count, 1\n"
        "LAZY archive_entry_symlink, 1\n"
        "LAZY archive_entry_update_pathname_utf8, 1\n"
        "LAZY archive_entry_xattr_count, 1\n"
        "LAZY archive_errno, 1\n"
        "LAZY archive_error_string, 1\n"
        "LAZY archive_read_data, 1\n"
        "LAZY archive_read_free, 1\n"
        "LAZY archive_read_new, 1\n"
        "LAZY archive_read_next_header, 1\n"
        "LAZY archive_read_open_fd, 1\n"
        "LAZY archive_read_support_format_tar, 1\n"
        "LAZY archive_write_add_filter_none, 1\n"
        "LAZY archive_write_close, 1\n"
        "LAZY archive_write_data, 1\n"
        "LAZY archive_write_free, 1\n"
        "LAZY archive_write_header, 1\n"
        "LAZY archive_write_new, 1\n"
        "LAZY archive_write_open_fd, 1\n"
        "LAZY archive_write_set_bytes_in_last_block, 1\n"
        "LAZY archive_write_set_bytes_per_block, 1\n"
        "LAZY archive_write_set_format_pax_restricted, 1\n"
        "\n"
        "LAZY png_create_info_struct, 2\n"
        "LAZY png_create_read_struct, 2\n"
        "LAZY png_create_write_struct, 2\n"
        "LAZY png_destroy_read_struct, 2\n"
        "LAZY png_destroy_write_struct, 2\n"
        "LAZY png_error, 2\n"
        "LAZY png_get_bit_depth, 2\n"
        "LAZY png_get_channels, 2\n"
        "LAZY png_get_color_type, 2\n"
        "LAZY png_get_error_ptr, 2\n"
        "LAZY png_get_image_height, 2\n"
        "LAZY png_get_image_width, 2\n"
        "LAZY png_get_io_ptr, 2\n"
        "LAZY png_get_rowbytes, 2\n"
        "LAZY png_get_valid, 2\n"
        "LAZY png_longjmp, 2\n"
        "LAZY png_read_end, 2\n"
        "LAZY png_read_image, 2\n"
        "LAZY png_read_info, 2\n"
        "LAZY png_read_row, 2\n"
        "LAZY png_read_update_info, 2\n"
        "LAZY png_set_IHDR, 2\n"
        "LAZY png_set_benign_errors, 2\n"
        "LAZY png_set_compression_buffer_size, 2\n"
        "LAZY png_set_compression_level, 2\n"
        "LAZY png_set_crc_action, 2\n"
        "LAZY png_set_expand_gray_1_2_4_to_8, 2\n"
        "LAZY png_set_filter, 2\n"
        "LAZY png_set_gray_to_rgb, 2\n"
        "LAZY png_set_interlace_handling, 2\n"
        "LAZY png_set_keep_unknown_chunks, 2\n"
        "LAZY png_set_longjmp_fn, 2\n"
        "LAZY png_set_palette_to_rgb, 2\n"
        "LAZY png_set_read_fn, 2\n"
        "LAZY png_set_strip_16, 2\n"
        "LAZY png_set_tRNS_to_alpha, 2\n"
        "LAZY png_set_user_limits, 2\n"
        "LAZY png_set_write_fn, 2\n"
        "LAZY png_write_end, 2\n"
        "LAZY png_write_info, 2\n"
        "LAZY png_write_row, 2\n"
        "\n"
        "	.popsection\n");

/* The sonames the build linked against (core/src/cli/lazy_libs.cmake). */
static const char *const sonames[LAZY_LIB_COUNT] = {RELAY_LAZY_SONAME_CURL, RELAY_LAZY_SONAME_ARCHIVE,
                                                    RELAY_LAZY_SONAME_PNG};

/* One handle per library, opened once (pthread_once) and never closed:
 * process-wide because the stubs are. */
static void *handles[LAZY_LIB_COUNT];
static pthread_once_t once[LAZY_LIB_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static void fatal(const char *what, const char *name, const char *why)
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
		long (*global_init)(long) = (long (*)(long))dlsym(h, "curl_global_init");
		if (global_init == NULL)
			fatal("the function", "curl_global_init", dlerror());
		global_init(3L); /* CURL_GLOBAL_DEFAULT (SSL | WIN32) */
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

void *lazy_libs_resolve(lazy_entry *entry)
{
	static void (*const openers[LAZY_LIB_COUNT])(void) = {open_curl, open_archive, open_png};
	unsigned lib = (unsigned)entry->lib;
	if (lib >= LAZY_LIB_COUNT)
		fatal("the function", entry->name, "unknown library");
	pthread_once(&once[lib], openers[lib]);
	void *fn = dlsym(handles[lib], entry->name);
	if (fn == NULL)
		fatal("the function", entry->name, dlerror());
	/* Another thread may resolve the same entry at the same time: both
	 * store the same address. */
	__atomic_store_n(&entry->target, fn, __ATOMIC_RELEASE);
	return fn;
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
