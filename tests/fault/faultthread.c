/* faultthread.c: an LD_PRELOAD shim that makes one thread start fail, so
 * that tests can see a real tallyd give up cleanly when its I/O threads
 * cannot all start (the threads RocksDB and the engine start are left be).
 *
 *   TALLY_FAULT_UV_THREAD=N   the Nth thread libuv is asked to start (the
 *                             I/O threads, in order, from 1) fails with
 *                             EAGAIN, as when the process is out of threads
 *
 * A thread counts as libuv's when pthread_create is called from code in a
 * shared library whose file name holds "libuv" (Debian's libuv.so.1, which
 * tallyd links). A libuv linked statically, or a sanitizer runtime that
 * intercepts pthread_create ahead of this shim, would never see the fault
 * fire: the test then finds tallyd running and fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *,
                         void *(*)(void *), void *);

static create_fn g_real;
static unsigned long g_nth; /* 0: no fault */
static _Atomic unsigned long g_uv_calls;

/* Resolved before main, while the process has one thread. */
__attribute__((constructor)) static void shim_init(void)
{
	const char *want = getenv("TALLY_FAULT_UV_THREAD");

	/* dlsym returns void *; POSIX makes the cast through an object
	 * pointer what works. */
	*(void **)&g_real = dlsym(RTLD_NEXT, "pthread_create");
	if (g_real == NULL) {
		fprintf(stderr, "faultthread: no pthread_create to forward to\n");
		abort();
	}
	if (want != NULL)
		g_nth = strtoul(want, NULL, 10);
}

static int from_libuv(const void *caller)
{
	Dl_info di;

	return dladdr(caller, &di) != 0 && di.dli_fname != NULL &&
	       strstr(di.dli_fname, "libuv") != NULL;
}

EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr,
                          void *(*fn)(void *), void *arg)
{
	if (g_nth != 0 && from_libuv(__builtin_return_address(0)) &&
	    atomic_fetch_add(&g_uv_calls, 1) + 1 == g_nth)
		return EAGAIN;
	return g_real(th, attr, fn, arg);
}
