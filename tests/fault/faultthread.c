/* faultthread.c: an LD_PRELOAD shim that makes one thread start fail, so
 * that tests can see a real tallyd give up cleanly when its I/O threads
 * cannot all start (the threads RocksDB and the engine start are left be).
 *
 *   TALLY_FAULT_UV_THREAD=N   the Nth thread libuv is asked to start (the
 *                             I/O threads, in order, from 1) fails with
 *                             EAGAIN, as when the process is out of threads
 *
 * A thread counts as libuv's when pthread_create is called from code in a
 * library whose file name holds "libuv". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *,
                         void *(*)(void *), void *);

static _Atomic unsigned g_uv_calls;

static int from_libuv(const void *caller)
{
	Dl_info di;

	return dladdr(caller, &di) != 0 && di.dli_fname != NULL &&
	       strstr(di.dli_fname, "libuv") != NULL;
}

EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr,
                          void *(*fn)(void *), void *arg)
{
	static create_fn real;
	const char *want = getenv("TALLY_FAULT_UV_THREAD");

	/* dlsym returns void *; POSIX makes the cast through an object
	 * pointer what works. */
	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
	if (real == NULL)
		return EAGAIN;
	if (want != NULL && from_libuv(__builtin_return_address(0)) &&
	    atomic_fetch_add(&g_uv_calls, 1) + 1 == strtoul(want, NULL, 10))
		return EAGAIN;
	return real(th, attr, fn, arg);
}
