/* faultmem.c: an LD_PRELOAD shim that makes a real tallyd's own allocations
 * fail, so that tests can see it answer errors and keep serving instead of
 * crashing, and lose no acknowledged write.
 *
 *   TALLY_FAULT_MEM_EVERY=K   while on, an allocation made from the
 *                             executable's own code (tallyd and the
 *                             libtally linked into it) fails with ENOMEM
 *                             one time in K, picked at random
 *   TALLY_FAULT_MEM_SEED=S    the random picks' seed (default 1): which
 *                             allocations fail changes with the seed and
 *                             with the threads' timing
 *   SIGUSR2                   turns the faults on (off at start, so that
 *                             tallyd starts); SIGUSR1 turns them off and
 *                             writes "faultmem: F of N allocations failed"
 *                             to stderr (tallyd's log)
 *
 * Allocations from shared libraries (libc, libuv, librocksdb, which aborts
 * on a failed one) never fail. An allocator that intercepts malloc ahead
 * of this shim (a sanitizer's) would never see a fault: the test then
 * finds no failure counted and fails. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);

static uintptr_t g_text_lo, g_text_hi; /* the executable's code */
static unsigned long g_every;          /* 0: never */
static atomic_int g_on;
static atomic_ulong g_counted, g_failed;
static atomic_ullong g_rng;            /* xorshift64 state, shared */

/* The first object dl_iterate_phdr reports is the executable. */
static int find_text(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			g_text_lo = info->dlpi_addr + ph->p_vaddr;
			g_text_hi = g_text_lo + ph->p_memsz;
			break;
		}
	}
	return 1;
}

/* Async-signal-safe: digits by hand, one write. */
static size_t put_ulong(char *p, unsigned long v)
{
	char d[24];
	size_t n = 0, k = 0;

	do {
		d[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	while (n > 0)
		p[k++] = d[--n];
	return k;
}

static void on_signal(int sig)
{
	char buf[96];
	size_t n = 0;
	int saved = errno;

	if (sig == SIGUSR2) {
		atomic_store(&g_on, 1);
		errno = saved;
		return;
	}
	atomic_store(&g_on, 0);
	memcpy(buf, "faultmem: ", 10);
	n = 10;
	n += put_ulong(buf + n, atomic_load(&g_failed));
	memcpy(buf + n, " of ", 4);
	n += 4;
	n += put_ulong(buf + n, atomic_load(&g_counted));
	memcpy(buf + n, " allocations failed\n", 20);
	n += 20;
	(void)!write(2, buf, n);
	errno = saved;
}

__attribute__((constructor)) static void shim_init(void)
{
	const char *every = getenv("TALLY_FAULT_MEM_EVERY");
	const char *seed = getenv("TALLY_FAULT_MEM_SEED");
	struct sigaction sa;

	(void)dl_iterate_phdr(find_text, NULL);
	if (every != NULL)
		g_every = strtoul(every, NULL, 10);
	atomic_store(&g_rng, 0x9E3779B97F4A7C15ull *
	             (seed != NULL ? strtoull(seed, NULL, 10) + 1 : 2));
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	(void)sigaction(SIGUSR1, &sa, NULL);
	(void)sigaction(SIGUSR2, &sa, NULL);
}

static int fail_now(const void *caller)
{
	uintptr_t c = (uintptr_t)caller;

	if (g_every == 0 || !atomic_load_explicit(&g_on, memory_order_relaxed) ||
	    c < g_text_lo || c >= g_text_hi)
		return 0;
	unsigned long long x = atomic_load(&g_rng), y;

	atomic_fetch_add(&g_counted, 1);
	/* Threads that race on the state may pick alike: still random. */
	do {
		y = x;
		y ^= y << 13;
		y ^= y >> 7;
		y ^= y << 17;
	} while (!atomic_compare_exchange_weak(&g_rng, &x, y));
	if (y % g_every != 0)
		return 0;
	atomic_fetch_add(&g_failed, 1);
	errno = ENOMEM;
	return 1;
}

EXPORT void *malloc(size_t n)
{
	return fail_now(__builtin_return_address(0)) ? NULL : __libc_malloc(n);
}

EXPORT void *calloc(size_t n, size_t size)
{
	return fail_now(__builtin_return_address(0)) ? NULL
	                                             : __libc_calloc(n, size);
}

EXPORT void *realloc(void *p, size_t n)
{
	return fail_now(__builtin_return_address(0)) ? NULL
	                                             : __libc_realloc(p, n);
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
	return fail_now(__builtin_return_address(0))
	       ? NULL : __libc_memalign(align, n);
}

EXPORT char *strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p;

	if (fail_now(__builtin_return_address(0)))
		return NULL;
	p = __libc_malloc(n);
	if (p != NULL)
		memcpy(p, s, n);
	return p;
}
