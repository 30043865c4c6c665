/* faultfs.c: an LD_PRELOAD shim that makes writes and syncs of files under
 * one folder fail with EIO or ENOSPC while a control file says so, so that
 * tests can break a real tallyd's disk at run time and mend it again.
 *
 *   TALLY_FAULT_DIR=/abs/data   the folder whose files fail (and below it)
 *   TALLY_FAULT_CTL=/abs/ctl    holds the mode; absent, empty or "off": none
 *
 * A mode is ERR-WHAT or ERR-WHAT-once. ERR is eio or enospc; WHAT is write
 * (write, pwrite, writev, pwritev, fallocate), fsync (fsync, fdatasync,
 * sync_file_range), all, or write-after (the write is made, then reported
 * failed: a write whose outcome its caller cannot know). A "-once" mode
 * fails one call, then writes "off"
 * to the control file, so a test can see that the fault was consumed.
 * A second word limits the fault to files whose names end with it:
 * "eio-fsync-once .log" fails the next fsync of a RocksDB WAL file only.
 * Mode "stall-fsync" fails nothing: each sync waits until the mode
 * changes, then goes through (a disk that is slow for as long as a test
 * wants). A sync that starts waiting creates the file CTL.stalled, so a
 * test can wait for the stall to hold a call instead of sleeping.
 * A failed call does nothing: a failed write writes no byte, a failed sync
 * leaves the page cache as it was (the data may reach the disk later, as it
 * may after a real failed fsync: the caller must not count on either).
 * The control file is read again at most every CTL_RECHECK_NS, so a change
 * takes effect within milliseconds and a call costs one clock read when no
 * fault is on. An unknown mode is reported on stderr and acts as "off". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CTL_RECHECK_NS 2000000u /* 2 ms */
#define PATH_CAP 4096
#define MODE_TEXT_MAX 64

/* A mode, packed: bits 0-1 which calls fail, bit 2 once, bits 8+ errno. */
#define M_WRITE 1u
#define M_SYNC 2u
#define M_ONCE 4u
#define M_STALL 8u
#define M_AFTER 16u
#define M_ERRNO_SHIFT 8

#define EXPORT __attribute__((visibility("default")))

static _Atomic uint32_t g_mode;
static _Atomic uint64_t g_mode_read_ns;
static _Atomic int g_mode_valid;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_dir[PATH_CAP];
static size_t g_dir_len;
static char g_ctl[PATH_CAP];
static char g_bad_mode[MODE_TEXT_MAX]; /* last unknown mode reported */
static char g_suffix[MODE_TEXT_MAX];   /* file name end; under g_lock */

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*pwritev2_fn)(int, const struct iovec *, int, off_t, int);
typedef int (*fsync_fn)(int);
typedef int (*sfr_fn)(int, off_t, off_t, unsigned int);
typedef int (*falloc_fn)(int, int, off_t, off_t);
typedef int (*pfalloc_fn)(int, off_t, off_t);

static struct {
	write_fn write;
	pwrite_fn pwrite, pwrite64;
	writev_fn writev;
	pwritev_fn pwritev, pwritev64;
	pwritev2_fn pwritev2;
	fsync_fn fsync, fdatasync;
	sfr_fn sync_file_range;
	falloc_fn fallocate, fallocate64;
	pfalloc_fn posix_fallocate, posix_fallocate64;
	_Atomic int done;
} real;

/* dlsym returns void *; a function pointer cast from it is what POSIX
 * promises to work. Racing first calls store the same values. */
static void resolve(void)
{
	if (atomic_load(&real.done))
		return;
	*(void **)&real.write = dlsym(RTLD_NEXT, "write");
	*(void **)&real.pwrite = dlsym(RTLD_NEXT, "pwrite");
	*(void **)&real.pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
	*(void **)&real.writev = dlsym(RTLD_NEXT, "writev");
	*(void **)&real.pwritev = dlsym(RTLD_NEXT, "pwritev");
	*(void **)&real.pwritev64 = dlsym(RTLD_NEXT, "pwritev64");
	*(void **)&real.pwritev2 = dlsym(RTLD_NEXT, "pwritev2");
	*(void **)&real.fsync = dlsym(RTLD_NEXT, "fsync");
	*(void **)&real.fdatasync = dlsym(RTLD_NEXT, "fdatasync");
	*(void **)&real.sync_file_range = dlsym(RTLD_NEXT, "sync_file_range");
	*(void **)&real.fallocate = dlsym(RTLD_NEXT, "fallocate");
	*(void **)&real.fallocate64 = dlsym(RTLD_NEXT, "fallocate64");
	*(void **)&real.posix_fallocate = dlsym(RTLD_NEXT, "posix_fallocate");
	*(void **)&real.posix_fallocate64 = dlsym(RTLD_NEXT,
	                                          "posix_fallocate64");
	atomic_store(&real.done, 1);
}

static void copy_env(const char *name, char *out, size_t cap)
{
	const char *v = getenv(name);
	size_t n;

	out[0] = '\0';
	if (v == NULL || v[0] != '/')
		return; /* relative paths would change meaning with the cwd */
	n = strlen(v);
	if (n >= cap)
		return;
	memcpy(out, v, n + 1);
}

__attribute__((constructor)) static void faultfs_init(void)
{
	char abs[PATH_CAP];

	resolve();
	copy_env("TALLY_FAULT_DIR", g_dir, sizeof g_dir);
	copy_env("TALLY_FAULT_CTL", g_ctl, sizeof g_ctl);
	/* /proc/self/fd names are canonical: compare against the same. */
	if (g_dir[0] != '\0' && realpath(g_dir, abs) != NULL &&
	    strlen(abs) < sizeof g_dir)
		memcpy(g_dir, abs, strlen(abs) + 1);
	g_dir_len = strlen(g_dir);
	while (g_dir_len > 1 && g_dir[g_dir_len - 1] == '/')
		g_dir[--g_dir_len] = '\0';
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t mode_parse(const char *s)
{
	static const struct { const char *name; uint32_t err; } errs[] = {
		{ "eio-", EIO }, { "enospc-", ENOSPC },
	};
	static const struct { const char *name; uint32_t what; } whats[] = {
		{ "write", M_WRITE }, { "fsync", M_SYNC },
		{ "all", M_WRITE | M_SYNC }, { "write-after", M_WRITE | M_AFTER },
	};

	if (s[0] == '\0' || strcmp(s, "off") == 0)
		return 0;
	if (strcmp(s, "stall-fsync") == 0)
		return M_SYNC | M_STALL;
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
		size_t el = strlen(errs[i].name);

		if (strncmp(s, errs[i].name, el) != 0)
			continue;
		for (size_t j = 0; j < sizeof whats / sizeof whats[0]; j++) {
			size_t wl = strlen(whats[j].name);
			const char *rest = s + el + wl;

			if (strncmp(s + el, whats[j].name, wl) != 0)
				continue;
			if (rest[0] == '\0')
				return whats[j].what | errs[i].err << M_ERRNO_SHIFT;
			if (strcmp(rest, "-once") == 0)
				return whats[j].what | M_ONCE |
				       errs[i].err << M_ERRNO_SHIFT;
		}
	}
	return UINT32_MAX;
}

/* Read the control file (caller holds g_lock). */
static uint32_t ctl_read(void)
{
	char buf[MODE_TEXT_MAX], *space;
	ssize_t n;
	uint32_t m;
	int fd;

	g_suffix[0] = '\0';
	if (g_ctl[0] == '\0')
		return 0;
	fd = open(g_ctl, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0)
		return 0;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' ||
	                 buf[n - 1] == '\r'))
		n--;
	buf[n] = '\0';
	space = strchr(buf, ' ');
	if (space != NULL) {
		*space = '\0';
		/* buf holds at most MODE_TEXT_MAX - 1 bytes: the rest fits */
		memcpy(g_suffix, space + 1, strlen(space + 1) + 1);
		n = space - buf;
	}
	m = mode_parse(buf);
	if (m != UINT32_MAX)
		return m;
	if (strcmp(buf, g_bad_mode) != 0) {
		char msg[160];
		int len = snprintf(msg, sizeof msg,
		                   "faultfs: unknown mode '%s' (off)\n", buf);

		memcpy(g_bad_mode, buf, (size_t)n + 1);
		if (len > 0 && real.write != NULL)
			(void)!real.write(2, msg, (size_t)len < sizeof msg ?
			                  (size_t)len : sizeof msg - 1);
	}
	return 0;
}

/* A one-shot fault was used: say so in the control file (caller holds
 * g_lock, so no other thread reads the old mode in between). */
static void ctl_write_off(void)
{
	int fd = open(g_ctl, O_WRONLY | O_TRUNC | O_CLOEXEC);

	if (fd < 0)
		return;
	(void)!real.write(fd, "off\n", 4);
	close(fd);
}

/* CTL.stalled: a sync is held by "stall-fsync". */
static void stall_mark(void)
{
	char path[PATH_CAP + 16];
	int fd, n = snprintf(path, sizeof path, "%s.stalled", g_ctl);

	if (n < 0 || (size_t)n >= sizeof path)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
}

static uint32_t mode_now(void)
{
	uint64_t now = mono_ns();

	if (!atomic_load(&g_mode_valid) ||
	    now - atomic_load(&g_mode_read_ns) >= CTL_RECHECK_NS) {
		pthread_mutex_lock(&g_lock);
		if (!atomic_load(&g_mode_valid) ||
		    now - atomic_load(&g_mode_read_ns) >= CTL_RECHECK_NS) {
			atomic_store(&g_mode, ctl_read());
			atomic_store(&g_mode_read_ns, mono_ns());
			atomic_store(&g_mode_valid, 1);
		}
		pthread_mutex_unlock(&g_lock);
	}
	return atomic_load(&g_mode);
}

/* Whether fd is a file under the folder (and, when a suffix is set,
 * whose name ends with it). */
static int fd_in_dir(int fd)
{
	char link[64], path[PATH_CAP], suffix[MODE_TEXT_MAX];
	size_t sl;
	ssize_t n;

	if (fd < 0 || snprintf(link, sizeof link, "/proc/self/fd/%d", fd) >=
	    (int)sizeof link)
		return 0;
	n = readlink(link, path, sizeof path - 1);
	if (n < 0 || (size_t)n < g_dir_len)
		return 0;
	path[n] = '\0';
	if (memcmp(path, g_dir, g_dir_len) != 0 ||
	    (path[g_dir_len] != '/' && path[g_dir_len] != '\0'))
		return 0;
	pthread_mutex_lock(&g_lock);
	memcpy(suffix, g_suffix, sizeof suffix);
	pthread_mutex_unlock(&g_lock);
	sl = strlen(suffix);
	return sl == 0 || ((size_t)n >= sl &&
	                   memcmp(path + n - sl, suffix, sl) == 0);
}

/* The errno this call on fd must fail with, or 0 to let it through;
 * *after (may be NULL) says whether the call is to be made first. */
static int fault(int fd, uint32_t kind, int *after)
{
	uint32_t m;

	resolve();
	if (g_dir_len == 0)
		return 0;
	m = mode_now();
	if (!(m & kind) || !fd_in_dir(fd))
		return 0;
	if (m & M_STALL) {
		const struct timespec ms = { 0, 1000000 };

		stall_mark();
		while (mode_now() & M_STALL)
			nanosleep(&ms, NULL);
		return 0;
	}
	if (m & M_ONCE) {
		int mine;

		pthread_mutex_lock(&g_lock);
		mine = atomic_load(&g_mode) == m;
		if (mine) {
			atomic_store(&g_mode, 0);
			ctl_write_off();
			atomic_store(&g_mode_read_ns, mono_ns());
		}
		pthread_mutex_unlock(&g_lock);
		if (!mine)
			return 0; /* another call took the one fault */
	}
	if (after != NULL)
		*after = (m & M_AFTER) != 0;
	return (int)(m >> M_ERRNO_SHIFT);
}

#define FAIL_IF(fd, kind, ret)                                               \
	do {                                                                 \
		int e_ = fault((fd), (kind), NULL);                          \
		if (e_ != 0) {                                               \
			errno = e_;                                          \
			return (ret);                                        \
		}                                                            \
	} while (0)

/* A write: failed before it is made, or (write-after) made, then failed. */
#define WRITE(fd, call)                                                      \
	do {                                                                 \
		int after_ = 0, e_ = fault((fd), M_WRITE, &after_);          \
		if (e_ != 0) {                                               \
			if (after_)                                          \
				(void)(call);                                \
			errno = e_;                                          \
			return -1;                                           \
		}                                                            \
		return (call);                                               \
	} while (0)

#define CALL(fn, ...) (real.fn != NULL ? real.fn(__VA_ARGS__) : \
                       (errno = ENOSYS, -1))

EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	WRITE(fd, CALL(write, fd, buf, n));
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	WRITE(fd, CALL(pwrite, fd, buf, n, off));
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	WRITE(fd, CALL(pwrite64, fd, buf, n, off));
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	WRITE(fd, CALL(writev, fd, iov, cnt));
}

EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	WRITE(fd, CALL(pwritev, fd, iov, cnt, off));
}

EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
	WRITE(fd, CALL(pwritev64, fd, iov, cnt, off));
}

EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off,
                        int flags)
{
	WRITE(fd, CALL(pwritev2, fd, iov, cnt, off, flags));
}

/* fallocate reserves space: it fails like a write (ENOSPC is its real
 * failure), so a full disk refuses new WAL and table files too. */
EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
	FAIL_IF(fd, M_WRITE, -1);
	return CALL(fallocate, fd, mode, off, len);
}

EXPORT int fallocate64(int fd, int mode, off_t off, off_t len)
{
	FAIL_IF(fd, M_WRITE, -1);
	return CALL(fallocate64, fd, mode, off, len);
}

/* posix_fallocate returns the error instead of setting errno. */
EXPORT int posix_fallocate(int fd, off_t off, off_t len)
{
	int e = fault(fd, M_WRITE, NULL);

	if (e != 0)
		return e;
	return real.posix_fallocate != NULL ?
	       real.posix_fallocate(fd, off, len) : ENOSYS;
}

EXPORT int posix_fallocate64(int fd, off_t off, off_t len)
{
	int e = fault(fd, M_WRITE, NULL);

	if (e != 0)
		return e;
	return real.posix_fallocate64 != NULL ?
	       real.posix_fallocate64(fd, off, len) : ENOSYS;
}

EXPORT int fsync(int fd)
{
	FAIL_IF(fd, M_SYNC, -1);
	return CALL(fsync, fd);
}

EXPORT int fdatasync(int fd)
{
	FAIL_IF(fd, M_SYNC, -1);
	return CALL(fdatasync, fd);
}

EXPORT int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
	/* No flags: a probe of whether the call exists (RocksDB makes one
	 * per new file, and aborts when it fails with anything but ENOSYS),
	 * not a sync. */
	if (flags != 0)
		FAIL_IF(fd, M_SYNC, -1);
	return CALL(sync_file_range, fd, off, n, flags);
}
