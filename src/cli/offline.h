/* offline.h: what the offline tools (stats, export, import, backup) share:
 * the --data argument, opening a data folder with a clear message when
 * tallyd holds it, and the folder's list of counting types. */
#ifndef TALLY_CLI_OFFLINE_H
#define TALLY_CLI_OFFLINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "tally.h"

/* Progress lines every this many events or records. */
#define OFFLINE_PROGRESS_EVERY 1000000u

/* The --data folder; CLI_OK or CLI_USAGE after printing that it is
 * required. */
int offline_data_dir(const cli_args *a, const char **dir);

/* Open dir read-only (TALLY_OPEN_READ_ONLY), for the tools that only
 * read (stats, export): not a byte of the folder changes, a backup's
 * included, and what a crash left is replayed into memory. As
 * offline_open(dir, 0, ..., out, NULL). */
int offline_open_read(const char *dir, tally **out);

/* Open dir; create: whether a missing folder is created (import) or an
 * error (the read-only tools). CLI_OK, or CLI_ERR after printing why.
 * A folder held by tallyd (or another process) is reported here, unless
 * busy is not NULL: then *busy is set and the caller deals with it. */
int offline_open(const char *dir, int create, const tally_options *opts,
                 tally **out, int *busy);

/* The folder's counting types in a new array (free() it). CLI_OK or
 * CLI_ERR after printing why. */
int offline_types(tally *t, tally_type_info **out, size_t *n);

/* "tally: DIR: what: strerror" for a failed engine call; returns CLI_ERR. */
int offline_fail(const char *dir, const char *what, int err);

/* Flush, fsync and close f (what it wrote must outlive a crash before it
 * is renamed into place); 0, or -1 with errno set. f is closed either
 * way. */
int offline_close_synced(FILE *f);

/* fsync the folder holding path, so that a rename into it lasts; 0, or
 * -1 with errno set. */
int offline_dir_sync(const char *path);

/* What a folder holds, subfolders included (up to OFFLINE_DEPTH_MAX
 * deep), links not followed: file sizes, the bytes allocated to them,
 * and files. */
typedef struct disk_use {
	uint64_t bytes, blocks_bytes, files;
} disk_use;
#define OFFLINE_DEPTH_MAX 8
/* Sums into *u from 0: 1, or 0 when path is no folder that opens (not
 * made yet, or renamed), *u then 0. */
int offline_disk_use(const char *path, disk_use *u);

#endif
