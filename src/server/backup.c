/* backup.c: where TALLY.BACKUP may write, checked before RocksDB is asked,
 * so that each way a path can be wrong gets its own clear error, and so
 * that --backup-dir can keep clients to one folder. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/server.h"

_Static_assert(SRV_BACKUP_PATH_MAX <= PATH_MAX, "a backup path fits PATH_MAX");

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return -1;
}

const char *srv_path_split(const char *path, char *parent, size_t cap)
{
	const char *slash = strrchr(path, '/');
	size_t n;

	if (slash == NULL) {
		snprintf(parent, cap, ".");
		return path;
	}
	n = slash == path ? 1 : (size_t)(slash - path);
	assert(n < cap);
	memcpy(parent, path, n);
	parent[n] = '\0';
	return slash + 1;
}

/* With --backup-dir: a bare name, or a path whose parent is that folder
 * (after symbolic links), becomes backup_dir/name. */
static int confine(const srv_config *cfg, const char *parent,
                   const char *name, char *out, size_t cap, char *err,
                   size_t ecap)
{
	char real[PATH_MAX];
	int n;

	if (strcmp(parent, ".") != 0 &&
	    (realpath(parent, real) == NULL ||
	     strcmp(real, cfg->backup_dir) != 0))
		return fail(err, ecap, "ERR this server writes backups only "
		            "into its --backup-dir folder: give a new folder "
		            "name, or a path directly inside %.200s",
		            cfg->backup_dir);
	n = snprintf(out, cap, "%s/%s", cfg->backup_dir, name);
	if (n < 0 || (size_t)n >= cap)
		return fail(err, ecap, "ERR backup path is too long (at most "
		            "%d bytes)", SRV_BACKUP_PATH_MAX);
	return 0;
}

int backup_target(const srv_config *cfg, const char *arg, size_t len,
                  char *out, size_t cap, char *err, size_t ecap)
{
	char parent[SRV_BACKUP_PATH_MAX + 1];
	const char *name;
	struct stat st;

	assert(cap >= SRV_BACKUP_PATH_MAX + 1 && ecap > 0);
	if (len == 0 || memchr(arg, '\0', len) != NULL)
		return fail(err, ecap, "ERR backup path is empty or holds "
		            "a NUL byte");
	if (len > SRV_BACKUP_PATH_MAX || len >= cap)
		return fail(err, ecap, "ERR backup path is too long (at most "
		            "%d bytes)", SRV_BACKUP_PATH_MAX);
	while (len > 1 && arg[len - 1] == '/')
		len--;          /* "dir/" names the folder "dir" */
	memcpy(out, arg, len);
	out[len] = '\0';
	name = srv_path_split(out, parent, sizeof parent);
	if (name[0] == '\0' || !strcmp(name, ".") || !strcmp(name, ".."))
		return fail(err, ecap, "ERR backup path '%.200s' names no new "
		            "folder", out);
	/* The copy is made under the name with a suffix (tally_backup). */
	if (strlen(name) > TALLY_BACKUP_NAME_MAX)
		return fail(err, ecap, "ERR backup folder name is too long (at "
		            "most %d bytes)", TALLY_BACKUP_NAME_MAX);
	if (cfg->backup_dir != NULL) {
		char confined[SRV_BACKUP_PATH_MAX + 1];

		if (confine(cfg, parent, name, confined, sizeof confined, err,
		            ecap) != 0)
			return -1;
		memcpy(out, confined, strlen(confined) + 1);
		name = srv_path_split(out, parent, sizeof parent);
	}
	if (lstat(out, &st) == 0)
		return fail(err, ecap, "ERR backup folder '%.200s' already exists: "
		            "a backup goes into a new folder", out);
	if (stat(parent, &st) != 0)
		return fail(err, ecap, "ERR cannot write the backup in '%.200s': "
		            "%s", parent, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail(err, ecap, "ERR cannot write the backup in '%.200s': "
		            "%s", parent, strerror(ENOTDIR));
	if (access(parent, W_OK | X_OK) != 0)
		return fail(err, ecap, "ERR cannot write the backup in '%.200s': "
		            "%s", parent, strerror(errno));
	return 0;
}
