/* faultclock.c: an LD_PRELOAD shim that steps the system clock of one
 * process, so that tests can see what a real tallyd does when the time is
 * stepped under it (NTP, a VM resumed) without changing the machine's.
 *
 *   TALLY_FAULT_CLOCK=/abs/file   holds a signed number of seconds added
 *                                 to CLOCK_REALTIME (and gettimeofday,
 *                                 time); no such file: 0 (an empty read,
 *                                 as while it is rewritten, keeps the
 *                                 last)
 *
 * The file is read again when 2 ms have passed on the monotonic clock,
 * which the shim leaves alone, as it does every other clock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define PATH_CAP 4096
#define REREAD_NS 2000000

typedef int (*gettime_fn)(clockid_t, struct timespec *);

static gettime_fn g_real;
static char g_path[PATH_CAP];
static _Atomic int64_t g_offset_s;
static _Atomic int64_t g_read_at_ns; /* 0: never read */

/* Resolved before main, while the process has one thread, or at the
 * first call when another library's constructor asks the time first. */
__attribute__((constructor)) static void shim_init(void)
{
	const char *p = getenv("TALLY_FAULT_CLOCK");

	if (g_real == NULL)
		*(void **)&g_real = dlsym(RTLD_NEXT, "clock_gettime");
	if (g_real == NULL) {
		fprintf(stderr, "faultclock: no clock_gettime to forward to\n");
		abort();
	}
	if (p != NULL && strlen(p) < sizeof g_path)
		memcpy(g_path, p, strlen(p) + 1);
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	g_real(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The offset, read again from its file at most every REREAD_NS. */
static int64_t offset_s(void)
{
	int64_t now = mono_ns(), at = atomic_load(&g_read_at_ns);
	char buf[32];
	ssize_t n;
	int fd;

	if (g_path[0] == '\0' || (at != 0 && now - at < REREAD_NS))
		return atomic_load(&g_offset_s);
	atomic_store(&g_read_at_ns, now);
	fd = open(g_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		atomic_store(&g_offset_s, 0);
		return 0;
	}
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		atomic_store(&g_offset_s, strtoll(buf, NULL, 10));
	}
	return atomic_load(&g_offset_s);
}

EXPORT int clock_gettime(clockid_t id, struct timespec *ts)
{
	int rc;

	if (g_real == NULL)
		shim_init();
	rc = g_real(id, ts);

	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		ts->tv_sec += offset_s();
	return rc;
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
	struct timespec ts;
	int rc = clock_gettime(CLOCK_REALTIME, &ts);

	(void)tz;
	if (rc == 0) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return rc;
}

EXPORT time_t time(time_t *out)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return (time_t)-1;
	if (out != NULL)
		*out = ts.tv_sec;
	return ts.tv_sec;
}
