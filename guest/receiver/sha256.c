/*
 * receiver/sha256.c — see sha256.h.
 */
#include "sha256.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHA256_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define SHA256_X86 0
#endif

static const uint32_t k_round[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block_portable(uint32_t state[8], const unsigned char *p)
{
	uint32_t w[64];
	uint32_t a, b, c, d, e, f, g, h;
	int i;
	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
		       (uint32_t)p[4 * i + 3];
	for (i = 16; i < 64; i++) {
		uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = state[0];
	b = state[1];
	c = state[2];
	d = state[3];
	e = state[4];
	f = state[5];
	g = state[6];
	h = state[7];
	for (i = 0; i < 64; i++) {
		uint32_t s1 = ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = h + s1 + ch + k_round[i] + w[i];
		uint32_t s0 = ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = s0 + maj;
		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	state[0] += a;
	state[1] += b;
	state[2] += c;
	state[3] += d;
	state[4] += e;
	state[5] += f;
	state[6] += g;
	state[7] += h;
}

#if SHA256_X86
/*
 * The x86 SHA extensions. SHA256RNDS2 does two rounds on the state held as
 * two vectors, ABEF and CDGH (h[] order is A..H), taking the two words
 * W[t] + K[t] in the low half of its third operand; SHA256MSG1/MSG2 compute
 * the message schedule four words at a time. Four words (one vector) of
 * the schedule serve four rounds, so a block is sixteen groups.
 */

/* Four rounds with schedule vector w (words 4g..4g+3). */
#define SHANI_ROUNDS(w, g)                                                                                   \
	do {                                                                                                 \
		__m128i wk_ = _mm_add_epi32((w), _mm_loadu_si128((const __m128i *)&k_round[4 * (g)]));       \
		cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk_);                                               \
		abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk_, 0x0e));                      \
	} while (0)

/* The next four schedule words into w0, from the last sixteen w0..w3:
 * W[t-16] + s0(W[t-15]) (MSG1), + W[t-7] (the middle of w2:w3), + s1(W[t-2])
 * (MSG2). */
#define SHANI_SCHEDULE(w0, w1, w2, w3)                                                                       \
	(w0) = _mm_sha256msg2_epu32(                                                                         \
	    _mm_add_epi32(_mm_sha256msg1_epu32((w0), (w1)), _mm_alignr_epi8((w3), (w2), 4)), (w3))

/* Hashes `blocks` whole 64-byte blocks from p into state. Called only
 * when CPUID reported SHA, SSE4.1 and SSSE3 (sha256_x86_usable). */
__attribute__((target("sha,sse4.1,ssse3"))) static void
sha256_blocks_x86(uint32_t state[8], const unsigned char *p, size_t blocks)
{
	/* Reverses the bytes of each 32-bit word: the message is big-endian. */
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
	__m128i abef, cdgh, tmp;
	tmp = _mm_loadu_si128((const __m128i *)&state[0]);  /* D C B A (high to low) */
	cdgh = _mm_loadu_si128((const __m128i *)&state[4]); /* H G F E */
	tmp = _mm_shuffle_epi32(tmp, 0xb1);                 /* C D A B */
	cdgh = _mm_shuffle_epi32(cdgh, 0x1b);               /* E F G H */
	abef = _mm_alignr_epi8(tmp, cdgh, 8);               /* A B E F */
	cdgh = _mm_blend_epi16(cdgh, tmp, 0xf0);            /* C D G H */
	while (blocks--) {
		const __m128i abef_in = abef;
		const __m128i cdgh_in = cdgh;
		__m128i w0, w1, w2, w3;
		int g;
		w0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 0)), bswap);
		SHANI_ROUNDS(w0, 0);
		w1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), bswap);
		SHANI_ROUNDS(w1, 1);
		w2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 32)), bswap);
		SHANI_ROUNDS(w2, 2);
		w3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 48)), bswap);
		SHANI_ROUNDS(w3, 3);
		for (g = 4; g < 16; g += 4) {
			SHANI_SCHEDULE(w0, w1, w2, w3);
			SHANI_ROUNDS(w0, g);
			SHANI_SCHEDULE(w1, w2, w3, w0);
			SHANI_ROUNDS(w1, g + 1);
			SHANI_SCHEDULE(w2, w3, w0, w1);
			SHANI_ROUNDS(w2, g + 2);
			SHANI_SCHEDULE(w3, w0, w1, w2);
			SHANI_ROUNDS(w3, g + 3);
		}
		abef = _mm_add_epi32(abef, abef_in);
		cdgh = _mm_add_epi32(cdgh, cdgh_in);
		p += 64;
	}
	tmp = _mm_shuffle_epi32(abef, 0x1b);     /* F E B A */
	cdgh = _mm_shuffle_epi32(cdgh, 0xb1);    /* D C H G */
	abef = _mm_blend_epi16(tmp, cdgh, 0xf0); /* D C B A */
	cdgh = _mm_alignr_epi8(cdgh, tmp, 8);    /* H G F E */
	_mm_storeu_si128((__m128i *)&state[0], abef);
	_mm_storeu_si128((__m128i *)&state[4], cdgh);
}

#undef SHANI_ROUNDS
#undef SHANI_SCHEDULE

/* 1 when the CPU has SHA (leaf 7 subleaf 0, EBX bit 29), SSE4.1 (leaf 1,
 * ECX bit 19) and SSSE3 (leaf 1, ECX bit 9). They use only the XMM
 * registers, which every x86-64 kernel saves, so no OSXSAVE check. */
static int sha256_cpu_has_x86_sha(void)
{
	unsigned int eax, ebx, ecx, edx;
	if (__get_cpuid_max(0, NULL) < 7)
		return 0;
	__cpuid(1, eax, ebx, ecx, edx);
	if (!(ecx & (1u << 19)) || !(ecx & (1u << 9)))
		return 0;
	__cpuid_count(7, 0, eax, ebx, ecx, edx);
	return (ebx & (1u << 29)) != 0;
}

static int sha256_x86_usable(void)
{
	/* The CPUID answer, asked once: CPUID can cost a hypervisor exit in a
	 * guest, and a scan begins one hash per file. -1 = not asked yet.
	 * No lock: the receiver never starts a thread, so this static is
	 * written once, by the first call, before anything reads its value. */
	static int cpu_has = -1;
	if (cpu_has < 0)
		cpu_has = sha256_cpu_has_x86_sha();
	return cpu_has;
}
#endif

/* Hashes `blocks` whole 64-byte blocks from p with the chosen code. */
static void sha256_blocks(sha256_state *st, const unsigned char *p, size_t blocks)
{
#if SHA256_X86
	if (st->x86_sha) {
		sha256_blocks_x86(st->h, p, blocks);
		return;
	}
#endif
	while (blocks--) {
		sha256_block_portable(st->h, p);
		p += 64;
	}
}

void sha256_begin(sha256_state *st)
{
	static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	const char *mode = getenv("RELAY_RECEIVER_SHA256");
	memcpy(st->h, init, sizeof(init));
	st->total_bytes = 0;
	st->block_len = 0;
	st->x86_sha = 0;
#if SHA256_X86
	if (!(mode && strcmp(mode, "portable") == 0))
		st->x86_sha = sha256_x86_usable();
#else
	(void)mode;
#endif
}

void sha256_feed(sha256_state *st, const void *data, size_t len)
{
	const unsigned char *p = data;
	st->total_bytes += len;
	if (st->block_len) {
		size_t take = 64 - st->block_len;
		if (take > len)
			take = len;
		memcpy(st->block + st->block_len, p, take);
		st->block_len += take;
		p += take;
		len -= take;
		if (st->block_len == 64) {
			sha256_blocks(st, st->block, 1);
			st->block_len = 0;
		}
	}
	if (len >= 64) {
		size_t blocks = len / 64;
		sha256_blocks(st, p, blocks);
		p += blocks * 64;
		len -= blocks * 64;
	}
	if (len) {
		memcpy(st->block, p, len);
		st->block_len = len;
	}
}

void sha256_end_hex(sha256_state *st, char hex[SHA256_HEX_CHARS + 1])
{
	static const char digits[] = "0123456789abcdef";
	uint64_t bits = st->total_bytes * 8;
	unsigned char pad = 0x80;
	unsigned char zero = 0;
	unsigned char len_be[8];
	int i;
	sha256_feed(st, &pad, 1);
	while (st->block_len != 56)
		sha256_feed(st, &zero, 1);
	for (i = 0; i < 8; i++)
		len_be[i] = (unsigned char)(bits >> (56 - 8 * i));
	sha256_feed(st, len_be, 8);
	for (i = 0; i < 32; i++) {
		unsigned char byte = (unsigned char)(st->h[i / 4] >> (24 - 8 * (i % 4)));
		hex[2 * i] = digits[byte >> 4];
		hex[2 * i + 1] = digits[byte & 15];
	}
	hex[64] = '\0';
}

void sha256_hex_of(const void *data, size_t len, char hex[SHA256_HEX_CHARS + 1])
{
	sha256_state st;
	sha256_begin(&st);
	sha256_feed(&st, data, len);
	sha256_end_hex(&st, hex);
}

int sha256_hex_ok(const char *text)
{
	size_t i;
	if (!text || strlen(text) != 64)
		return 0;
	for (i = 0; i < 64; i++) {
		char c = text[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	return 1;
}
