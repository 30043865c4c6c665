/* offline.c: opening a data folder for the offline tools. RocksDB allows
 * one process per folder; the usual reason for a busy folder is a running
 * tallyd, so the message says so and names the way around it. */
#include "offline.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int offline_data_dir(const cli_args *a, const char **dir)
{
	*dir = cli_opt(a, "data");
	if (*dir != NULL && (*dir)[0] != '\0')
		return CLI_OK;
	return cli_usage_error(a->cmd, "--data DIR is required (the data "
	                       "folder, as given to tallyd --data)");
}

int offline_fail(const char *dir, const char *what, int err)
{
	fprintf(stderr, "tally: %s: %s: %s\n", dir, what, tally_strerror(err));
	return CLI_ERR;
}

int offline_open(const char *dir, int create, const tally_options *opts,
                 tally **out, int *busy)
{
	tally_options o = { 0 };
	int rc;

	if (opts != NULL)
		o = *opts;
	if (!create)
		o.flags |= TALLY_OPEN_NO_CREATE;
	if (busy != NULL)
		*busy = 0;
	rc = tally_open(dir, &o, out);
	if (rc == TALLY_OK)
		return CLI_OK;
	if (rc == TALLY_EBUSY && busy != NULL) {
		*busy = 1;
		return CLI_ERR;
	}
	if (rc == TALLY_EBUSY) {
		fprintf(stderr, "tally: %s is in use: tallyd (or another tally "
		        "command%s) is running on it. Stop it first, or ask the "
		        "running server with the client commands (tally -h HOST "
		        "-p PORT ...).\n", dir,
		        o.flags & TALLY_OPEN_READ_ONLY ? " that writes: import"
		        : "");
		return CLI_ERR;
	}
	if (rc == TALLY_ENOTFOUND && create)
		fprintf(stderr, "tally: %s: the folder it would be created in "
		        "does not exist\n", dir);
	else if (rc == TALLY_ENOTFOUND)
		fprintf(stderr, "tally: %s: no tally database there\n", dir);
	else
		offline_fail(dir, "cannot open the database", rc);
	return CLI_ERR;
}

int offline_open_read(const char *dir, tally **out)
{
	tally_options o = { .flags = TALLY_OPEN_READ_ONLY };

	return offline_open(dir, 0, &o, out, NULL);
}

int offline_types(tally *t, tally_type_info **out, size_t *n)
{
	tally_type_info *ti = calloc(TALLY_TYPES_MAX, sizeof *ti);
	int rc;

	*out = NULL;
	if (ti == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		return CLI_ERR;
	}
	rc = tally_types(t, ti, TALLY_TYPES_MAX, n);
	if (rc != TALLY_OK) {
		free(ti);
		return offline_fail("types", "cannot list the counting types",
		                    rc);
	}
	if (*n > TALLY_TYPES_MAX)
		*n = TALLY_TYPES_MAX;
	*out = ti;
	return CLI_OK;
}

int offline_close_synced(FILE *f)
{
	if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
		int saved = errno;
		fclose(f);
		errno = saved ? saved : EIO;
		return -1;
	}
	return fclose(f) == 0 ? 0 : -1;
}

int offline_dir_sync(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd, rc;

	if (slash == NULL)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else if ((size_t)(slash - path) < sizeof dir)
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	else {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

static void disk_walk(const char *path, int depth, disk_use *u)
{
	char sub[4096];
	struct dirent *e;
	struct stat st;
	DIR *d;

	if (depth > OFFLINE_DEPTH_MAX || (d = opendir(path)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		int n = snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
		if (n < 0 || (size_t)n >= sizeof sub || lstat(sub, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			disk_walk(sub, depth + 1, u);
			continue;
		}
		u->bytes += (uint64_t)st.st_size;
		u->blocks_bytes += (uint64_t)st.st_blocks * 512;
		u->files++;
	}
	closedir(d);
}

int offline_disk_use(const char *path, disk_use *u)
{
	struct stat st;

	memset(u, 0, sizeof *u);
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0;
	disk_walk(path, 0, u);
	return 1;
}
