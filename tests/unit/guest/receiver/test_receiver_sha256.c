/*
 * test_receiver_sha256.c — the guest receiver's SHA-256 (guest/receiver/
 * sha256.c, compiled into this test by tests/CMakeLists.txt because the
 * receiver is not part of relay_core): its portable block function and the
 * one using the x86 SHA extensions, against the FIPS 180-4 / NIST vectors
 * and OpenSSL's SHA256(); the choice made by sha256_begin (CPUID and
 * RELAY_RECEIVER_SHA256=portable); and the built receiver's `hash` on both
 * paths.
 *
 * The accelerated-path tests skip, saying why, on a CPU without SHA, SSE4.1
 * and SSSE3 or a build that is not x86-64 GCC/clang.
 *
 * Speed is measured outside the tests (no timing assertions here). On this
 * machine (2-core Intel Xeon VM with sha_ni, OpenSSL 3.0.19, files in page
 * cache, wall-clock medians of 5 runs, the receiver from a -DRELAY_SANITIZE=ON
 * build, which leaves the receiver unsanitized):
 *
 *   receiver hash big.bin (512 MiB)                  portable 2.24 s, SHA-NI 0.55 s
 *   openssl dgst -sha256 big.bin                     0.49 s
 *   sha256sum big.bin                                1.75 s
 *   receiver scan --root R --base R tree             portable 2.30 s, SHA-NI 0.60 s
 *     (tree: 10,000 files, 512 MiB, in 100 folders)
 *
 * with RELAY_RECEIVER_SHA256=portable for the portable rows, unset for the
 * SHA-NI rows; the runs were interleaved, every run gave the same digest.
 */
#include "receiver_harness.h"

#include <openssl/sha.h>

#include "receiver/sha256.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define TEST_X86 1
#else
#define TEST_X86 0
#endif

#define MODE_ENV "RELAY_RECEIVER_SHA256"

/* Asked here with our own CPUID call rather than through the code under
 * test, so a broken detection shows as a failure. */
static int cpu_has_x86_sha(void)
{
#if TEST_X86
	unsigned int eax, ebx, ecx, edx;
	if (__get_cpuid_max(0, NULL) < 7)
		return 0;
	__cpuid(1, eax, ebx, ecx, edx);
	if (!(ecx & (1u << 19)) || !(ecx & (1u << 9))) /* SSE4.1, SSSE3 */
		return 0;
	__cpuid_count(7, 0, eax, ebx, ecx, edx);
	return (ebx & (1u << 29)) != 0; /* SHA */
#else
	return 0;
#endif
}

#define REQUIRE_X86_SHA()                                                                                    \
	do {                                                                                                 \
		if (!TEST_X86) {                                                                             \
			fprintf(stderr, "skipped: not an x86-64 GCC/clang build, so the receiver has only "  \
			                "its portable SHA-256\n");                                           \
			skip();                                                                              \
		}                                                                                            \
		if (!cpu_has_x86_sha()) {                                                                    \
			fprintf(stderr, "skipped: this CPU lacks the SHA extensions (CPUID leaf 7 EBX bit "  \
			                "29) or SSE4.1/SSSE3, so the accelerated path cannot run here\n");   \
			skip();                                                                              \
		}                                                                                            \
	} while (0)

/* The path a hash takes: PORTABLE sets RELAY_RECEIVER_SHA256=portable, X86
 * unsets it (automatic, which must then choose the SHA extensions). */
enum path { PORTABLE = 0, X86 = 1 };

static void select_path(enum path path)
{
	if (path == PORTABLE)
		assert_int_equal(setenv(MODE_ENV, "portable", 1), 0);
	else
		assert_int_equal(unsetenv(MODE_ENV), 0);
}

/* Hashes data on `path`, fed in chunks whose sizes cycle through
 * chunks[0..n_chunks) (one feed of everything when n_chunks is 0). */
static void hash_on(enum path path, const unsigned char *data, size_t len, const size_t *chunks,
                    size_t n_chunks, char hex[SHA256_HEX_CHARS + 1])
{
	sha256_state st;
	size_t done = 0, i = 0;
	select_path(path);
	sha256_begin(&st);
	assert_int_equal(st.x86_sha, path == X86);
	if (!n_chunks) {
		sha256_feed(&st, data, len);
		done = len;
	}
	while (done < len) {
		size_t take = chunks[i++ % n_chunks];
		if (take > len - done)
			take = len - done;
		sha256_feed(&st, data + done, take);
		done += take;
	}
	sha256_end_hex(&st, hex);
	assert_int_equal(unsetenv(MODE_ENV), 0);
}

static void openssl_hex(const unsigned char *data, size_t len, char hex[SHA256_HEX_CHARS + 1])
{
	unsigned char digest[SHA256_DIGEST_LENGTH];
	size_t i;
	SHA256(data, len, digest);
	for (i = 0; i < SHA256_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

/* Deterministic bytes (xorshift64*), so a failure can be reproduced. */
static unsigned char *random_bytes(size_t len, uint64_t seed)
{
	unsigned char *buf = malloc(len ? len : 1);
	uint64_t x = seed | 1;
	size_t i;
	assert_non_null(buf);
	for (i = 0; i < len; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		buf[i] = (unsigned char)((x * 0x2545F4914F6CDD1DULL) >> 56);
	}
	return buf;
}

/* ---- NIST vectors ------------------------------------------------------- */

static void check_nist(enum path path)
{
	static const struct {
		const char *text;
		const char *hex;
	} vectors[] = {
	    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	    /* 448 bits */
	    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
	     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
	    /* 896 bits */
	    {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqr"
	     "sm"
	     "nopqrstnopqrstu",
	     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
	};
	static const char *million_a = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
	static const size_t thousand[] = {1000};
	char hex[SHA256_HEX_CHARS + 1];
	unsigned char *a;
	size_t i;
	for (i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		hash_on(path, (const unsigned char *)vectors[i].text, strlen(vectors[i].text), NULL, 0, hex);
		assert_string_equal(hex, vectors[i].hex);
	}
	a = malloc(1000000);
	assert_non_null(a);
	memset(a, 'a', 1000000);
	hash_on(path, a, 1000000, NULL, 0, hex);
	assert_string_equal(hex, million_a);
	hash_on(path, a, 1000000, thousand, 1, hex);
	assert_string_equal(hex, million_a);
	free(a);
}

static void test_nist_portable(void **state)
{
	(void)state;
	check_nist(PORTABLE);
}

static void test_nist_x86(void **state)
{
	(void)state;
	REQUIRE_X86_SHA();
	check_nist(X86);
}

/* ---- choosing the path --------------------------------------------------- */

static int begin_chooses_x86(const char *mode)
{
	sha256_state st;
	if (mode)
		assert_int_equal(setenv(MODE_ENV, mode, 1), 0);
	else
		assert_int_equal(unsetenv(MODE_ENV), 0);
	sha256_begin(&st);
	assert_int_equal(unsetenv(MODE_ENV), 0);
	return st.x86_sha;
}

/* Runs on every CPU: automatic means exactly "the CPU has the extensions"
 * (always no off x86-64), and only the value "portable" forces portable. */
static void test_path_choice(void **state)
{
	const int expect_auto = TEST_X86 && cpu_has_x86_sha();
	static const char *const automatic[] = {NULL, "", "auto", "PORTABLE", "portable ", "x86", "0"};
	size_t i;
	(void)state;
	if (!expect_auto)
		fprintf(stderr,
		        "note: no x86 SHA extensions here; automatic must choose the portable code\n");
	assert_int_equal(begin_chooses_x86("portable"), 0);
	for (i = 0; i < sizeof(automatic) / sizeof(automatic[0]); i++)
		assert_int_equal(begin_chooses_x86(automatic[i]), expect_auto);
	/* The choice is per hash: portable again after automatic. */
	assert_int_equal(begin_chooses_x86("portable"), 0);
}

/* ---- random inputs against OpenSSL ---------------------------------------- */

/* Every length 0..1000 in one feed, from a buffer at an odd address so the
 * block functions read unaligned data. */
static void check_lengths(enum path path)
{
	unsigned char *buf = random_bytes(1000 + 3, 0x5eed0001u);
	char ours[SHA256_HEX_CHARS + 1], other[SHA256_HEX_CHARS + 1], ref[SHA256_HEX_CHARS + 1];
	size_t len;
	for (len = 0; len <= 1000; len++) {
		const unsigned char *data = buf + 3;
		hash_on(path, data, len, NULL, 0, ours);
		openssl_hex(data, len, ref);
		if (strcmp(ours, ref) != 0)
			fail_msg("%s path, %zu bytes: %s, OpenSSL %s", path == X86 ? "x86" : "portable", len,
			         ours, ref);
		if (path == X86) {
			hash_on(PORTABLE, data, len, NULL, 0, other);
			assert_string_equal(ours, other);
		}
	}
	free(buf);
}

static void test_lengths_portable(void **state)
{
	(void)state;
	check_lengths(PORTABLE);
}

static void test_lengths_x86(void **state)
{
	(void)state;
	REQUIRE_X86_SHA();
	check_lengths(X86);
}

/* Several MiB fed in odd-sized pieces: the partial-block buffer and the
 * multi-block calls take turns at every offset. */
static void check_large(enum path path)
{
	static const size_t one[] = {1}, b63[] = {63}, b64[] = {64}, b65[] = {65}, b4097[] = {4097};
	static const size_t mixed[] = {1, 63, 64, 65, 4097, 7, 128, 1 << 20, 3};
	static const struct {
		const size_t *sizes;
		size_t n;
	} patterns[] = {{one, 1}, {b63, 1}, {b64, 1}, {b65, 1}, {b4097, 1}, {mixed, 9}, {NULL, 0}};
	const size_t len = 5u * 1024 * 1024 + 37;
	unsigned char *data = random_bytes(len, 0x5eed0002u);
	char ours[SHA256_HEX_CHARS + 1], ref[SHA256_HEX_CHARS + 1], portable[SHA256_HEX_CHARS + 1];
	size_t i;
	openssl_hex(data, len, ref);
	hash_on(PORTABLE, data, len, NULL, 0, portable);
	assert_string_equal(portable, ref);
	for (i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
		hash_on(path, data, len, patterns[i].sizes, patterns[i].n, ours);
		if (strcmp(ours, ref) != 0)
			fail_msg("%s path, pattern %zu: %s, OpenSSL %s", path == X86 ? "x86" : "portable", i,
			         ours, ref);
		assert_string_equal(ours, portable);
	}
	free(data);
}

static void test_large_portable(void **state)
{
	(void)state;
	check_large(PORTABLE);
}

static void test_large_x86(void **state)
{
	(void)state;
	REQUIRE_X86_SHA();
	check_large(X86);
}

/* ---- the built receiver --------------------------------------------------- */

/* `receiver hash` with and without RELAY_RECEIVER_SHA256=portable: the same
 * frame, {"path","sha256","bytes"} and nothing more, with OpenSSL's digest.
 * (On a CPU without the extensions both runs take the portable code.) */
static void test_binary_hash(void **state)
{
	const size_t len = 3u * 1024 * 1024 + 5;
	unsigned char *data;
	char tmpl[] = "/var/tmp/relay-receiver-sha256-XXXXXX";
	char ref[SHA256_HEX_CHARS + 1];
	char *texts[2] = {NULL, NULL};
	int fd, round;
	(void)state;
	RH_REQUIRE_BINARY();
	data = random_bytes(len, 0x5eed0003u);
	openssl_hex(data, len, ref);
	fd = mkstemp(tmpl);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
	for (round = 0; round < 2; round++) {
		rh_out o;
		select_path(round == 0 ? PORTABLE : X86);
		rh_run(&o, "hash", tmpl, NULL);
		assert_int_equal(unsetenv(MODE_ENV), 0);
		if (o.status != 0 || !o.frame)
			fail_msg("receiver hash exited %d: stdout=%s stderr=%s", o.status, o.out, o.err);
		assert_int_equal(json_object_object_length(o.frame), 3);
		assert_string_equal(rh_str(o.frame, "path"), tmpl);
		assert_string_equal(rh_str(o.frame, "sha256"), ref);
		assert_int_equal(rh_int(o.frame, "bytes"), (int64_t)len);
		texts[round] = strdup(o.out);
		rh_out_free(&o);
	}
	assert_string_equal(texts[0], texts[1]);
	unlink(tmpl);
	free(texts[0]);
	free(texts[1]);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_nist_portable), cmocka_unit_test(test_nist_x86),
	    cmocka_unit_test(test_path_choice),   cmocka_unit_test(test_lengths_portable),
	    cmocka_unit_test(test_lengths_x86),   cmocka_unit_test(test_large_portable),
	    cmocka_unit_test(test_large_x86),     cmocka_unit_test(test_binary_hash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
