/* fuzz.h: what the libFuzzer harnesses share: a check that aborts (so the
 * fuzzer records the input as a crash, with the failed property named) and
 * a small deterministic generator for chunk sizes drawn from the input. */
#ifndef TALLY_FUZZ_H
#define TALLY_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Assertions compile out under NDEBUG; these must not. */
#define FUZZ_CHECK(cond)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: property failed: %s\n",   \
			        __FILE__, __LINE__, #cond);                \
			abort();                                           \
		}                                                          \
	} while (0)

/* A property failed that no single expression states. */
#define FUZZ_FAIL(msg)                                                     \
	do {                                                               \
		fprintf(stderr, "%s:%d: property failed: %s\n",           \
		        __FILE__, __LINE__, (msg));                        \
		abort();                                                   \
	} while (0)

/* FNV-1a of the input: seeds the chunk sizes, so one input always splits
 * the same way and a crash reproduces from the input alone. */
static inline uint64_t fuzz_hash(const uint8_t *p, size_t n)
{
	uint64_t h = UINT64_C(14695981039346656037);
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= UINT64_C(1099511628211);
	}
	return h ? h : 1;
}

/* xorshift64*: the next pseudo-random number of state *s (never 0). */
static inline uint64_t fuzz_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

/* A chunk size for feeding: mostly 1..16 bytes (splits inside tokens and
 * line endings), sometimes up to 4 KiB, never 0. */
static inline size_t fuzz_chunk(uint64_t *s)
{
	uint64_t r = fuzz_next(s);
	if (r % 4 != 0)
		return (size_t)(r >> 8) % 16 + 1;
	return (size_t)(r >> 8) % 4096 + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
