/* rocks.c: the embedded RocksDB store: opening the column families with
 * their options (merge operator, filters, compression), loading the
 * schema and tokens, backups and closing. The write path is rocks_apply.c,
 * the queries rocks_read.c. */
#define _GNU_SOURCE /* renameat2 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/varint.h"
#include "store/rocks_int.h"

static const char *const cf_names[CF_COUNT] = {
	"default", "named", "totals", "members", "log", "by_member",
};

uint64_t rocks_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rocks_sync_count(rocks *r, uint64_t ns)
{
	uint64_t bound = 100000; /* 100 us */
	int i = 0;

	while (i < TALLY_HIST_BUCKETS - 1 && ns > bound) {
		bound <<= 1;
		i++;
	}
	atomic_fetch_add(&r->st_sync_hist[i], 1);
	atomic_fetch_add(&r->st_syncs, 1);
	atomic_fetch_add(&r->st_sync_ns, ns);
}

/* Map a RocksDB error string to a code and free it. A lock held by another
 * handle or process is the one error users can act on, so it has a code. */
int rocks_err(char *err)
{
	int rc = TALLY_EIO;

	assert(err != NULL);
	/* RocksDB's text when another process holds the folder's LOCK file
	 * ("While lock file: DIR/LOCK: ...", or "lock hold by current
	 * process" within one process); matched whole, since the folder's
	 * own path may contain "lock". */
	if (strstr(err, "While lock file: ") != NULL ||
	    strstr(err, "lock hold by current process") != NULL)
		rc = TALLY_EBUSY;
	else if (strstr(err, "Corruption"))
		rc = TALLY_ECORRUPT;
	rocksdb_free(err);
	return rc;
}

int rocks_write_err(char *err)
{
	int rc = TALLY_EIO;

	assert(err != NULL);
	/* RocksDB keeps strerror's text in its IOError message. */
	if (strstr(err, "No space left on device"))
		rc = TALLY_ENOSPC;
	rocksdb_free(err);
	return rc;
}

/* ---- merge operator: add zigzag varints --------------------------------
 * Sums wrap instead of overflowing: the committer checked every delta
 * against the value, so a wrap can only come from corrupt data, and a
 * merge callback has no way to report an error without failing reads. */

static char *merge_result(uint64_t sum, size_t *len)
{
	char *buf = malloc(VARINT_MAX);

	if (buf == NULL)
		return NULL;
	*len = varint_put_i64((uint8_t *)buf, (int64_t)sum);
	return buf;
}

static int merge_sum(const char *const *ops, const size_t *lens, int n,
                     uint64_t *sum)
{
	for (int i = 0; i < n; i++) {
		int64_t v;

		if (val_i64_decode((const uint8_t *)ops[i], lens[i], &v))
			return -1;
		*sum += (uint64_t)v;
	}
	return 0;
}

static char *merge_full(void *state, const char *key, size_t key_len,
                        const char *existing, size_t existing_len,
                        const char *const *ops, const size_t *lens, int n,
                        unsigned char *success, size_t *new_len)
{
	uint64_t sum = 0;
	char *out;

	(void)state, (void)key, (void)key_len;
	*success = 0;
	if (existing != NULL) {
		int64_t v;

		if (val_i64_decode((const uint8_t *)existing, existing_len, &v))
			return NULL;
		sum = (uint64_t)v;
	}
	if (merge_sum(ops, lens, n, &sum))
		return NULL;
	out = merge_result(sum, new_len);
	*success = out != NULL;
	return out;
}

static char *merge_partial(void *state, const char *key, size_t key_len,
                           const char *const *ops, const size_t *lens, int n,
                           unsigned char *success, size_t *new_len)
{
	return merge_full(state, key, key_len, NULL, 0, ops, lens, n, success,
	                  new_len);
}

static void merge_delete(void *state, const char *value, size_t len)
{
	(void)state, (void)len;
	free((void *)(uintptr_t)value);
}

static const char *merge_name(void *state)
{
	(void)state;
	return "tally.add.v1";
}

/* RocksDB calls the destructor unconditionally, so it must exist. */
static void merge_destroy(void *state)
{
	(void)state;
}

static rocksdb_mergeoperator_t *merge_create(void)
{
	return rocksdb_mergeoperator_create(NULL, merge_destroy, merge_full,
	                                    merge_partial, merge_delete,
	                                    merge_name);
}

/* ---- options ------------------------------------------------------------ */

/* Bytes per like, compacted, with 1M likes (tally_bench bytes-per-like):
 * 33.0 with 4 KiB blocks for point-read tables, 16 KiB for scanned ones, a
 * bloom filter and no dictionary; 31.2 with the sizes, filter and
 * dictionary below, at the same like rate within noise; 30.3 with the
 * scanned tables' restart interval. */
#define ZSTD_DICT_BYTES (16 * 1024)
#define ZSTD_UPPER_LEVEL 1             /* levels above the bottom */
#define BLOCK_POINT_BYTES (16 * 1024)  /* named, totals, members */
#define BLOCK_SCAN_BYTES (64 * 1024)   /* log, by_member, meta */
/* Keys stored whole (the rest share a prefix with the one before) once in
 * this many, in scanned tables: a scan seeks once, then walks, so a longer
 * linear walk after the binary search costs one seek a few hundred ns,
 * and log and by_member lose about 0.5 bytes per like each (16: RocksDB's
 * default, kept for point reads). */
#define BLOCK_SCAN_RESTART 64

/* A checkpoint inserts its entries in key order, each between older ones
 * of the same objects and members. RocksDB's single-writer insert keeps
 * the previous insert's position in the skiplist, but starts again from
 * the top level whenever an older entry lies between two consecutive
 * inserted keys, which here is every insert: under random likes those
 * descents took 44% of the checkpoint thread's CPU. An insert with a
 * hint instead walks up only as far as the key needs. Hints are kept per
 * key prefix; a 1-byte prefix (a type id's high byte, or a member id's:
 * the same in nearly every key) makes them one hint per table, carried
 * from each insert to the next. The C API has no setter for the option,
 * so it is set by name. Returns o, or its copy with the option (o freed);
 * NULL when out of memory. */
static rocksdb_options_t *with_insert_hint(rocksdb_options_t *o)
{
	rocksdb_options_t *n = rocksdb_options_create();
	char *err = NULL;

	if (n == NULL) {
		rocksdb_options_destroy(o);
		return NULL;
	}
	rocksdb_get_options_from_string(
		o, "memtable_insert_with_hint_prefix_extractor="
		   "rocksdb.FixedPrefix.1", n, &err);
	if (err != NULL) {
		/* Not known to this librocksdb: inserts work without it. */
		rocksdb_free(err);
		rocksdb_options_destroy(n);
		return o;
	}
	rocksdb_options_destroy(o);
	return n;
}

static rocksdb_options_t *cf_options(rocks *r, int cf)
{
	rocksdb_options_t *o = rocksdb_options_create();

	/* The bottom level holds nearly everything once compacted, so ZSTD
	 * there decides the bytes per event. Above it (flushes, and what a
	 * clean close leaves), ZSTD's fastest level: 1M likes closed take
	 * 35.7 bytes per like against LZ4's 47.8, at the same like rate in
	 * alternating runs (the flush's CPU goes to building blocks and
	 * filters more than to compressing; docs/PERFORMANCE.md, "Bytes
	 * after a clean close"). */
	rocksdb_options_set_compression(o, rocksdb_zstd_compression);
	rocksdb_options_set_compression_options(o, -14, ZSTD_UPPER_LEVEL, 0, 0);
	rocksdb_options_set_bottommost_compression(o, rocksdb_zstd_compression);
	/* A dictionary trained on each bottom file's own blocks: entries of
	 * one table share their shape (key prefixes, varint layouts) across
	 * blocks, which per-block ZSTD cannot see. */
	rocksdb_options_set_bottommost_compression_options(
		o, -14, 6, 0, ZSTD_DICT_BYTES, 1);
	rocksdb_options_set_bottommost_compression_options_zstd_max_train_bytes(
		o, ZSTD_DICT_BYTES * 100, 1);
	rocksdb_options_set_level_compaction_dynamic_level_bytes(o, 1);
	/* Point lookups (counters, totals, membership) check a filter first;
	 * scans (log, history) do not need one. */
	if (cf == CF_NAMED || cf == CF_TOTALS || cf == CF_MEMBERS) {
		rocksdb_options_set_block_based_table_factory(o, r->bbto_point);
		/* The committer looks up every new counter, total and member
		 * before writing it, and most new ones are absent: a bloom
		 * filter over the memtable answers those without a skiplist
		 * search. */
		rocksdb_options_set_memtable_whole_key_filtering(o, 1);
		rocksdb_options_set_memtable_prefix_bloom_size_ratio(o, 0.1);
	} else {
		rocksdb_options_set_block_based_table_factory(o, r->bbto);
	}
	if (cf == CF_NAMED || cf == CF_TOTALS)
		rocksdb_options_set_merge_operator(o, merge_create());
	/* Events and memberships reach these tables once per checkpoint,
	 * in one write sorted by key (rocks_events.c): a skiplist memtable
	 * takes sorted inserts at the previous insert's position, and its
	 * flush is a walk. (When the committer wrote them one batch at a
	 * time, at random objects, these memtables were hashed by prefix,
	 * and sorting them at each flush was half of tallyd's CPU under
	 * random likes.) The prefix extractor stays: RECENT and HISTORY
	 * scans stay within one prefix. */
	if (cf == CF_LOG || cf == CF_HIST || cf == CF_MEMBERS) {
		size_t prefix = cf == CF_HIST ? KEY_HIST_PREFIX_LEN : KEY_OBJ_LEN;

		rocksdb_options_set_prefix_extractor(
			o, rocksdb_slicetransform_create_fixed_prefix(prefix));
		o = with_insert_hint(o);
	}
	return o;
}

static int options_create(rocks *r, const store_options *so)
{
	r->block_cache = rocksdb_cache_create_lru((size_t)so->block_cache_mb << 20);
	r->bbto = rocksdb_block_based_options_create();
	r->bbto_point = rocksdb_block_based_options_create();
	r->db_opts = rocksdb_options_create();
	if (!r->block_cache || !r->bbto || !r->bbto_point || !r->db_opts)
		return TALLY_ENOMEM;
	rocksdb_block_based_options_set_block_cache(r->bbto, r->block_cache);
	rocksdb_block_based_options_set_block_size(r->bbto, BLOCK_SCAN_BYTES);
	rocksdb_block_based_options_set_block_restart_interval(
		r->bbto, BLOCK_SCAN_RESTART);
	rocksdb_block_based_options_set_block_cache(r->bbto_point,
	                                           r->block_cache);
	rocksdb_block_based_options_set_block_size(r->bbto_point,
	                                           BLOCK_POINT_BYTES);
	/* Ribbon: the false-positive rate of a 10-bit bloom filter in about
	 * 30% less space (members: 9.0 -> 8.2 bytes per like with the block
	 * size above). Files written with bloom filters read as before.
	 * Level 0 keeps bloom filters: a ribbon filter costs several times
	 * the CPU to build, and the memtables (several checkpoints each)
	 * are flushed to level 0 only to be compacted again soon (the
	 * flush thread's CPU under random likes fell by a third, and the
	 * like rate rose 10%); the levels below, which hold nearly every
	 * byte, stay ribbon. */
	rocksdb_block_based_options_set_filter_policy(
		r->bbto_point, rocksdb_filterpolicy_create_ribbon_hybrid(10, 1));
	rocksdb_options_set_create_if_missing(r->db_opts,
	                                     (unsigned char)so->create);
	rocksdb_options_set_create_missing_column_families(r->db_opts, 1);
	rocksdb_options_set_max_background_jobs(r->db_opts, 2);
	/* A bound, so that a store of any size stays inside the open files
	 * its process keeps for it (RocksDB's default is no bound). */
	rocksdb_options_set_max_open_files(r->db_opts,
	                                   (int)so->open_files_max);
	/* One writer at a time is all there is (the committer, the
	 * checkpoint thread): no concurrent memtable inserts. */
	rocksdb_options_set_allow_concurrent_memtable_write(r->db_opts, 0);
	/* RocksDB's own LOG keeps only its headers, written at open. Its
	 * writer is one more file in the data folder: with librocksdb 7.8 a
	 * writer that saw a write error aborts the process (an assertion)
	 * on its next write, so a disk error must never reach the LOG while
	 * tally is refusing writes and serving reads. */
	rocksdb_options_set_info_log_level(r->db_opts, 5 /* HEADER */);
	rocksdb_options_set_keep_log_file_num(r->db_opts, 3);
	for (int i = 0; i < CF_COUNT; i++) {
		r->cf_opts[i] = cf_options(r, i);
		if (r->cf_opts[i] == NULL)
			return TALLY_ENOMEM;
	}
	r->wo_sync = rocksdb_writeoptions_create();
	r->wo_nosync = rocksdb_writeoptions_create();
	r->fo_nowait = rocksdb_flushoptions_create();
	r->ro = rocksdb_readoptions_create();
	if (!r->wo_sync || !r->wo_nosync || !r->fo_nowait || !r->ro)
		return TALLY_ENOMEM;
	rocksdb_writeoptions_set_sync(r->wo_sync, 1);
	rocksdb_writeoptions_set_sync(r->wo_nosync, 0);
	rocksdb_flushoptions_set_wait(r->fo_nowait, 0);
	return TALLY_OK;
}

/* ---- open, format, close ------------------------------------------------ */

/* Read a one-byte meta key into buf (up to cap bytes). *len is set to 0
 * when the key is absent; a longer value is corrupt. */
static int meta_get(rocks *r, uint8_t tag, uint8_t *buf, size_t cap,
                    size_t *len)
{
	char *err = NULL;
	char *val = rocksdb_get_cf(r->db, r->ro, r->cf[CF_META],
	                           (const char *)&tag, 1, len, &err);
	int rc = TALLY_OK;

	if (err)
		return rocks_err(err);
	if (val == NULL) {
		*len = 0;
		return TALLY_OK;
	}
	if (*len > cap || *len == 0)
		rc = TALLY_ECORRUPT;
	else
		memcpy(buf, val, *len);
	rocksdb_free(val);
	return rc;
}

static int format_check(rocks *r)
{
	const uint8_t key = META_FORMAT, fmt = ROCKS_FORMAT;
	uint8_t val[1];
	char *err = NULL;
	size_t len;
	int rc = meta_get(r, META_FORMAT, val, sizeof val, &len);

	if (rc != TALLY_OK)
		return rc == TALLY_ECORRUPT ? TALLY_EVERSION : rc;
	if (len == 1 && val[0] == ROCKS_FORMAT)
		return TALLY_OK;
	/* Formats 1 to 4 read as format 5; once marked 5, older builds
	 * refuse the folder rather than miss the journal's events (3), fail
	 * on the tables' chunks of events (4) or misread their times (5). */
	if (len == 1 && (val[0] < 1 || val[0] >= ROCKS_FORMAT))
		return TALLY_EVERSION;
	/* Read-only: read as format 5 and left unmarked; an older build can
	 * still open the folder, which holds nothing this one wrote. */
	if (r->read_only)
		return TALLY_OK;
	rocksdb_put_cf(r->db, r->wo_sync, r->cf[CF_META], (const char *)&key, 1,
	               (const char *)&fmt, 1, &err);
	return err ? rocks_err(err) : TALLY_OK;
}

/* A be64 meta value; 0 when absent. */
static int meta_get_u64(rocks *r, uint8_t tag, uint64_t *out)
{
	uint8_t val[8];
	size_t len;
	int rc = meta_get(r, tag, val, sizeof val, &len);

	if (rc != TALLY_OK)
		return rc;
	if (len != 0 && len != sizeof val)
		return TALLY_ECORRUPT;
	*out = len ? be64_get(val) : 0;
	return TALLY_OK;
}

static int seq_load(rocks *r)
{
	int rc = meta_get_u64(r, META_SEQ, &r->seq);

	if (rc == TALLY_OK)
		rc = meta_get_u64(r, META_COUNTERS, &r->counters);
	/* Where the journal's replay starts (rocks_journal_load()). */
	if (rc == TALLY_OK)
		rc = meta_get_u64(r, META_JCKPT, &r->ck_upto);
	atomic_store(&r->st_seq, r->seq);
	atomic_store(&r->st_counters, r->counters);
	return rc;
}

/* A clean close leaves everything in SSTs: the next open has no WAL to
 * replay, and the data folder shows its real size. */
static void flush_all(rocks *r)
{
	rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
	char *err = NULL;

	if (fo == NULL)
		return;
	rocksdb_flushoptions_set_wait(fo, 1);
	for (int i = 0; i < CF_COUNT && err == NULL; i++)
		if (r->cf[i] != NULL)
			rocksdb_flush_cf(r->db, fo, r->cf[i], &err);
	rocksdb_flushoptions_destroy(fo);
	free(err); /* the WAL still holds it all: the next open replays it */
}

static void rocks_close(store *s)
{
	rocks *r = (rocks *)s;

	if (r == NULL)
		return;
	rocks_journal_close(r);
	if (r->db != NULL && !rocks_failed(r) && r->ck_wb != NULL &&
	    !r->read_only)
		flush_all(r);
	if (r->db != NULL) {
		for (int i = 0; i < CF_COUNT; i++)
			if (r->cf[i] != NULL)
				rocksdb_column_family_handle_destroy(r->cf[i]);
		rocksdb_close(r->db);
	}
	for (int i = 0; i < CF_COUNT; i++)
		if (r->cf_opts[i] != NULL)
			rocksdb_options_destroy(r->cf_opts[i]);
	if (r->db_opts)
		rocksdb_options_destroy(r->db_opts);
	if (r->bbto)
		rocksdb_block_based_options_destroy(r->bbto);
	if (r->bbto_point)
		rocksdb_block_based_options_destroy(r->bbto_point);
	if (r->block_cache)
		rocksdb_cache_destroy(r->block_cache);
	if (r->wo_sync)
		rocksdb_writeoptions_destroy(r->wo_sync);
	if (r->wo_nosync)
		rocksdb_writeoptions_destroy(r->wo_nosync);
	if (r->fo_nowait)
		rocksdb_flushoptions_destroy(r->fo_nowait);
	if (r->ro)
		rocksdb_readoptions_destroy(r->ro);
	if (r->wb)
		rocksdb_writebatch_destroy(r->wb);
	rocks_clock_free(r);
	/* Their locks go with them, once RocksDB has let the folder go. */
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	if (r->dir_fd >= 0)
		close(r->dir_fd);
	free(r->bev);
	hmap_free(r->cache_named);
	hmap_free(r->cache_totals);
	hmap_free(r->ov_named);
	hmap_free(r->ov_totals);
	hmap_free(r->ov_members);
	free(r);
}

/* ---- load: types, content types, tokens --------------------------------- */

static int load_one(const store_loader *l, const uint8_t *k, size_t klen,
                    const uint8_t *v, size_t vlen)
{
	switch (k[0]) {
	case META_TYPE:
		if (vlen != 3 || klen < 2)
			return TALLY_ECORRUPT;
		return l->type(l->arg, (const char *)k + 1, klen - 1,
		               be16_get(v), v[2]) ? TALLY_EINVAL : TALLY_OK;
	case META_CTYPE:
		if (vlen != 2 || klen < 2)
			return TALLY_ECORRUPT;
		return l->ctype(l->arg, (const char *)k + 1, klen - 1,
		                be16_get(v)) ? TALLY_EINVAL : TALLY_OK;
	case META_TOKEN: {
		int64_t result, expiry;

		if (klen < 2 || rocks_token_decode(v, vlen, &result, &expiry))
			return TALLY_ECORRUPT;
		return l->token(l->arg, k + 1, klen - 1, result, expiry)
		               ? TALLY_EINVAL : TALLY_OK;
	}
	case META_TOKEN_CLOCK: {
		int64_t ms;
		size_t used;

		/* The clock runs from a system clock's reading: one far
		 * from any is damage, and would overflow the sums on it. It
		 * is let be (the open resumes as in a folder without one,
		 * from the tokens' own times): the data is whole. */
		if (klen != 1 || varint_get_i64(v, vlen, &ms, &used) ||
		    used != vlen || ms < 0 || ms > TOKEN_CLOCK_MAX_MS)
			return TALLY_OK;
		return l->token_clock(l->arg, ms) ? TALLY_EINVAL : TALLY_OK;
	}
	default:
		return TALLY_OK; /* format, seq */
	}
}

static int rocks_load(store *s, const store_loader *l)
{
	rocks *r = (rocks *)s;
	rocksdb_iterator_t *it = rocksdb_create_iterator_cf(r->db, r->ro,
	                                                    r->cf[CF_META]);
	int rc = TALLY_OK;
	char *err = NULL;

	if (it == NULL)
		return TALLY_ENOMEM;
	for (rocksdb_iter_seek_to_first(it); rc == TALLY_OK &&
	     rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t klen, vlen;
		const char *k = rocksdb_iter_key(it, &klen);
		const char *v = rocksdb_iter_value(it, &vlen);

		if (klen == 0)
			rc = TALLY_ECORRUPT;
		else
			rc = load_one(l, (const uint8_t *)k, klen,
			              (const uint8_t *)v, vlen);
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err)
		return rocks_err(err);
	return rc;
}

/* fsync the folder that holds path. A parent that may be written but
 * not read (mode 0333) cannot be opened to sync it: left as it is, as
 * before this sync was made. */
static int parent_sync(const char *path)
{
	char dir[4096];
	size_t len = strlen(path);
	char *slash;
	int rc;

	if (len == 0 || len >= sizeof dir)
		return TALLY_EINVAL;
	memcpy(dir, path, len + 1);
	while (len > 1 && dir[len - 1] == '/')
		dir[--len] = '\0';
	slash = strrchr(dir, '/');
	if (slash == NULL)
		dir[0] = '.', dir[1] = '\0';
	else
		slash[slash == dir] = '\0'; /* "/name": the root */
	errno = 0;
	rc = rocks_dir_sync(dir);
	return rc != TALLY_OK && errno == EACCES ? TALLY_OK : rc;
}

/* Remove the folder of a backup that failed, and its files (a RocksDB
 * checkpoint and the journal's copies: no sub-folder). */
static void backup_discard(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char name[4096];

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (snprintf(name, sizeof name, "%s/%s", dir, e->d_name) <
		    (int)sizeof name)
			(void)unlink(name);
	}
	closedir(d);
	(void)rmdir(dir);
}

/* Rename tmp to dir, never over an existing dir. File systems without
 * RENAME_NOREPLACE (NFS, some FUSE ones) refuse the flag: a plain rename
 * after a look then (a folder made in between could be replaced). */
static int backup_rename(const char *tmp, const char *dir)
{
	struct stat st;

	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_NOREPLACE) == 0)
		return TALLY_OK;
	/* EINVAL: the flag; ENOSYS, EPERM: the call itself (an old kernel,
	 * a container's seccomp filter). */
	if ((errno == EINVAL || errno == ENOSYS || errno == EPERM) &&
	    lstat(dir, &st) != 0 && errno == ENOENT && rename(tmp, dir) == 0)
		return TALLY_OK;
	return errno == EEXIST ? TALLY_EIO : rocks_errno_code(errno);
}

#define BACKUP_PATH_MAX 4096

_Static_assert(TALLY_BACKUP_NAME_MAX + sizeof TALLY_BACKUP_PARTIAL - 1 ==
               NAME_MAX, "a backup's folder name leaves room for the suffix");

/* A backup's folder (dir) and the name it is made under (tmp), from the
 * path asked for; TALLY_EIO when either is there already. */
static int backup_names(const char *path, char dir[BACKUP_PATH_MAX],
                        char tmp[BACKUP_PATH_MAX])
{
	struct stat st;
	const char *name;
	size_t len = strlen(path);

	/* "out/" names the folder "out": the suffix goes after its name. */
	while (len > 1 && path[len - 1] == '/')
		len--;
	if (len == 0 || len >= BACKUP_PATH_MAX)
		return TALLY_EINVAL;
	memcpy(dir, path, len);
	dir[len] = '\0';
	name = strrchr(dir, '/');
	name = name != NULL ? name + 1 : dir;
	if (strlen(name) > TALLY_BACKUP_NAME_MAX ||
	    snprintf(tmp, BACKUP_PATH_MAX, "%s" TALLY_BACKUP_PARTIAL, dir) >=
	    BACKUP_PATH_MAX)
		return TALLY_EINVAL;
	/* Neither is touched when there: the partial one may be of a backup
	 * still running in another process. */
	if (lstat(dir, &st) == 0 || lstat(tmp, &st) == 0)
		return TALLY_EIO;
	return TALLY_OK;
}

/* The copy made in tmp (rc TALLY_OK), renamed to dir; or, rc or the rename
 * failing, removed. The copy is made whole under a name of its own, then
 * renamed: a failure (a disk full while the journal is copied) or a crash
 * never leaves dir holding a part of the data that opens as if it were
 * all. */
static int backup_finish(const char *tmp, const char *dir, int rc)
{
	if (rc == TALLY_OK)
		rc = backup_rename(tmp, dir);
	if (rc != TALLY_OK) {
		backup_discard(tmp);
		return rc;
	}
	/* Whole from here: a failed sync leaves it, and says so. */
	return parent_sync(dir);
}

static int rocks_backup(store *s, const char *path)
{
	rocks *r = (rocks *)s;
	char dir[BACKUP_PATH_MAX], tmp[BACKUP_PATH_MAX];
	char *err = NULL;
	rocksdb_checkpoint_t *cp;
	int rc = backup_names(path, dir, tmp);

	if (rc != TALLY_OK)
		return rc;
	cp = rocksdb_checkpoint_object_create(r->db, &err);
	if (err)
		return rocks_err(err);
	/* The journal files hold still from here on (the committer writes
	 * its records into RocksDB meanwhile), so the copy is every record
	 * up to the pause in the files plus every later one in RocksDB's. */
	rocks_jfile_pause(r, 1);
	/* log_size_for_flush 0: flush memtables so the copy is all in SSTs. */
	rocksdb_checkpoint_create(cp, tmp, 0, &err);
	rocksdb_checkpoint_object_destroy(cp);
	if (err) {
		/* RocksDB removes what it made (and made nothing when tmp
		 * came meanwhile, which is not ours to remove). A full disk
		 * is told apart when it is the copy's (on another file system
		 * every table file is copied): the message names the file.
		 * The store's own disk filling (the flush before the copy)
		 * is the store's error. */
		int full = strstr(err, "No space left") != NULL &&
		           strstr(err, tmp) != NULL;

		rocks_jfile_pause(r, 0);
		if (!full)
			return rocks_err(err);
		rocksdb_free(err);
		return TALLY_ENOSPC;
	}
	rc = rocks_jfile_copy(r, tmp);
	rocks_jfile_pause(r, 0);
	return backup_finish(tmp, dir, rc);
}

static int rocks_compact(store *s)
{
	rocks *r = (rocks *)s;
	rocksdb_compactoptions_t *co;
	uint64_t bg0 = 0, bg = 0;
	int rc = rocks_journal_spill(r);

	if (rc != TALLY_OK)
		return rc;
	co = rocksdb_compactoptions_create();
	if (co == NULL)
		return TALLY_ENOMEM;
	(void)rocksdb_property_int(r->db, "rocksdb.background-errors", &bg0);
	/* Force the bottom level to be rewritten too, so its compression
	 * and folded merges are what the numbers show. */
	rocksdb_compactoptions_set_bottommost_level_compaction(co, 2);
	for (int i = 0; i < CF_COUNT; i++)
		rocksdb_compact_range_cf_opt(r->db, r->cf[i], co, NULL, 0, NULL,
		                             0);
	rocksdb_compactoptions_destroy(co);
	/* The C API's compaction reports no error; RocksDB counts those of
	 * its flushes and compactions. One on the way fails the store (a
	 * reopen clears the count): the flush syncs the logs it closed, and
	 * after a failed sync librocksdb 7.8 aborts at the next one. A
	 * compaction short of space fails it too, once: nothing retries. */
	if (rocksdb_property_int(r->db, "rocksdb.background-errors", &bg) == 0 &&
	    bg > bg0)
		return rocks_logs_fail(r, TALLY_EIO);
	return TALLY_OK;
}

static int rocks_disk_usage(store *s, tally_disk_part *out, size_t cap,
                            size_t *n)
{
	rocks *r = (rocks *)s;
	const rocksdb_livefiles_t *lf = rocksdb_livefiles(r->db);
	int files;

	if (lf == NULL)
		return TALLY_ENOMEM;
	files = rocksdb_livefiles_count(lf);
	*n = CF_COUNT;
	for (int i = 0; i < CF_COUNT && (size_t)i < cap; i++) {
		memset(&out[i], 0, sizeof out[i]);
		snprintf(out[i].name, sizeof out[i].name, "%s", cf_names[i]);
	}
	for (int f = 0; f < files; f++) {
		const char *cf = rocksdb_livefiles_column_family_name(lf, f);

		for (int i = 0; i < CF_COUNT && (size_t)i < cap; i++) {
			if (strcmp(cf, cf_names[i]) != 0)
				continue;
			out[i].bytes += rocksdb_livefiles_size(lf, f);
			out[i].entries += rocksdb_livefiles_entries(lf, f);
		}
	}
	rocksdb_livefiles_destroy(lf);
	return TALLY_OK;
}

static void rocks_stats(store *s, store_stats *out)
{
	rocks *r = (rocks *)s;

	out->entries = atomic_load(&r->st_entries);
	out->checkpoint_entries = atomic_load(&r->st_ck_entries);
	out->syncs = atomic_load(&r->st_syncs);
	out->sync_ns = atomic_load(&r->st_sync_ns);
	out->last_seq = atomic_load(&r->st_seq);
	out->counters = atomic_load(&r->st_counters);
	out->dirty = atomic_load(&r->st_dirty);
	out->clean = atomic_load(&r->st_clean);
	out->checkpoints = atomic_load(&r->st_checkpoints);
	out->checkpoint_retries = atomic_load(&r->st_ck_retries);
	out->journal_dropped = r->jf.dropped; /* set at open, then fixed */
	for (int i = 0; i < TALLY_HIST_BUCKETS; i++)
		out->sync_hist[i] = atomic_load(&r->st_sync_hist[i]);
}

static const store_vt rocks_vt = {
	.name = "rocksdb",
	.apply = rocks_apply,
	.sync = rocks_sync,
	.get = rocks_get,
	.total = rocks_total,
	.total_at = rocks_total_at,
	.mtotal = rocks_mtotal,
	.mget = rocks_mget,
	.recent = rocks_recent,
	.has = rocks_has,
	.history = rocks_history,
	.scan_log = rocks_scan_log,
	.load = rocks_load,
	.token_get = rocks_token_get,
	.tokens_sweep = rocks_tokens_sweep,
	.backup = rocks_backup,
	.compact = rocks_compact,
	.disk_usage = rocks_disk_usage,
	.stats = rocks_stats,
	.close = rocks_close,
};

/* A read-only handle's own vtable (rocks_open()) writes nothing: the
 * writes the engine would still send (it refuses them first) fail, a sync
 * has nothing to do, and expired tokens are not swept. */
static int ro_apply(store *s, store_batch *b)
{
	(void)s;
	(void)b;
	return TALLY_EREADONLY;
}

static int ro_sync(store *s)
{
	(void)s;
	return TALLY_OK;
}

/* A table file is never changed once written: it is linked into the copy,
 * as RocksDB's checkpoint does, where the file system allows (the same
 * one, writable). Whether it was. */
static int sst_link(int dfd, const char *name, const char *to)
{
	size_t len = strlen(name);

	return len > 4 && strcmp(name + len - 4, ".sst") == 0 &&
	       linkat(dfd, name, AT_FDCWD, to, 0) == 0;
}

/* Copy the folder's regular files into tmp, but for the lock, RocksDB's
 * info logs and tally's own files (the journal, copied to its records'
 * end by rocks_jfile_copy(), and a probe). */
static int ro_copy_files(rocks *r, const char *tmp)
{
	int dfd = openat(r->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *e;
	int rc = TALLY_OK;

	if (d == NULL) {
		rc = rocks_errno_code(errno);
		if (dfd >= 0)
			close(dfd);
		return rc;
	}
	while (rc == TALLY_OK && (errno = 0, e = readdir(d)) != NULL) {
		char to[BACKUP_PATH_MAX];
		struct stat st;
		int fd;

		if (strcmp(e->d_name, "LOCK") == 0 ||
		    strncmp(e->d_name, "LOG", 3) == 0 ||
		    strncmp(e->d_name, "tally-", 6) == 0)
			continue;
		/* A file left out unseen would be a copy that does not
		 * open, reported whole. */
		if (fstatat(dirfd(d), e->d_name, &st,
		            AT_SYMLINK_NOFOLLOW) != 0)
			rc = rocks_errno_code(errno);
		else if (!S_ISREG(st.st_mode))
			continue;
		else if (snprintf(to, sizeof to, "%s/%s", tmp, e->d_name) >=
		         (int)sizeof to)
			rc = TALLY_EINVAL;
		else if (sst_link(dirfd(d), e->d_name, to))
			continue;
		else if ((fd = openat(dirfd(d), e->d_name,
		                      O_RDONLY | O_CLOEXEC)) < 0)
			rc = rocks_errno_code(errno);
		else {
			rc = rocks_copy_file(fd, (uint64_t)st.st_size, to);
			close(fd);
		}
	}
	if (rc == TALLY_OK && errno != 0)
		rc = rocks_errno_code(errno);
	closedir(d);
	return rc;
}

/* A read-only handle's backup is a copy of the folder's files (its table
 * files linked): under its locks nothing writes the folder, so they are
 * consistent as they lie, and the copy opens as the folder would
 * (replaying what a crash left). RocksDB's checkpoint would flush the
 * memtables. */
static int ro_backup(store *s, const char *path)
{
	rocks *r = (rocks *)s;
	char dir[BACKUP_PATH_MAX], tmp[BACKUP_PATH_MAX];
	int rc = backup_names(path, dir, tmp);

	if (rc != TALLY_OK)
		return rc;
	if (mkdir(tmp, 0755) != 0)
		return errno == EEXIST ? TALLY_EIO : rocks_errno_code(errno);
	rc = ro_copy_files(r, tmp);
	if (rc == TALLY_OK)
		rc = rocks_jfile_copy(r, tmp); /* and syncs tmp */
	return backup_finish(tmp, dir, rc);
}

static int ro_compact(store *s)
{
	(void)s;
	return TALLY_EREADONLY;
}

#define PROBE_NAME "tally-probe.tmp"
#define PROBE_BYTES 4096

int rocks_errno_code(int e)
{
	return e == ENOSPC || e == EDQUOT ? TALLY_ENOSPC : TALLY_EIO;
}

int rocks_probe(const char *path)
{
	char name[4096], buf[PROBE_BYTES];
	int fd, rc;

	if (snprintf(name, sizeof name, "%s/" PROBE_NAME, path) >=
	    (int)sizeof name)
		return TALLY_EINVAL;
	/* RocksDB ignores files whose names it does not know. */
	fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return rocks_errno_code(errno);
	/* A full page: a file system may accept a few bytes into space it
	 * holds anyway, and a page is what a WAL write needs at least. */
	memset(buf, 't', sizeof buf);
	rc = rocks_pwrite_all(fd, buf, sizeof buf, 0);
	if (rc == TALLY_OK && fsync(fd) != 0)
		rc = rocks_errno_code(errno);
	if (close(fd) != 0 && rc == TALLY_OK)
		rc = rocks_errno_code(errno);
	(void)unlink(name);
	return rc;
}

static int exists_db(const char *path)
{
	char buf[4096];
	struct stat st;

	if (snprintf(buf, sizeof buf, "%s/CURRENT", path) >= (int)sizeof buf)
		return 0;
	return stat(buf, &st) == 0;
}

/* Whether RocksDB's write-ahead log may hold writes to replay: a WAL file
 * (NNNNNN.log) that is not empty. A clean close flushes every table, so a
 * crash leaves one, or a close that could not flush (a failed store). A
 * log already flushed yet not deleted when the process died also counts:
 * that costs one open more, nothing else. 1 yes, 0 no; an unreadable
 * folder says no and leaves the error to the open. */
static int wal_pending(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int found = 0;

	if (d == NULL)
		return 0;
	while (!found && (e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);
		struct stat st;

		if (n > 4 && strcmp(e->d_name + n - 4, ".log") == 0 &&
		    fstatat(dirfd(d), e->d_name, &st, 0) == 0 && st.st_size > 0)
			found = 1;
	}
	closedir(d);
	return found;
}

/* Replays what a crash left in the write-ahead log, then closes. An open
 * after a crash inserts every entry of the log into the tables'
 * memtables, and with skiplists of millions of entries at random keys
 * that was most of a restart (docs/PERFORMANCE.md, "Restart after a
 * crash"). Vector memtables take the same entries as appends and sort
 * them once, when the recovery flushes them to level 0 at its end; they
 * would make every later lookup a sort, so the store is then opened
 * again as usual, with nothing left to replay. (A process that dies
 * between the two leaves RocksDB's newest OPTIONS file naming vector
 * memtables; tally does not read it, and the next open writes another.) */
static int wal_replay(rocks *r, const char *path)
{
	rocksdb_options_t *o[CF_COUNT] = { 0 };
	const rocksdb_options_t *cfo[CF_COUNT];
	rocksdb_column_family_handle_t *cf[CF_COUNT] = { 0 };
	rocksdb_t *db = NULL;
	char *err = NULL;
	int rc = TALLY_OK;

	for (int i = 0; i < CF_COUNT && rc == TALLY_OK; i++) {
		o[i] = rocksdb_options_create_copy(r->cf_opts[i]);
		if (o[i] == NULL)
			rc = TALLY_ENOMEM;
		else
			rocksdb_options_set_memtable_vector_rep(o[i]);
		cfo[i] = o[i];
	}
	if (rc == TALLY_OK)
		db = rocksdb_open_column_families(r->db_opts, path, CF_COUNT,
		                                  cf_names, cfo, cf, &err);
	if (err != NULL) {
		db = NULL;
		rc = rocks_err(err);
	}
	for (int i = 0; i < CF_COUNT; i++) {
		if (db != NULL && cf[i] != NULL)
			rocksdb_column_family_handle_destroy(cf[i]);
		if (o[i] != NULL)
			rocksdb_options_destroy(o[i]);
	}
	if (db != NULL)
		rocksdb_close(db);
	return rc;
}

static int maps_create(rocks *r, const store_options *so)
{
	int rc;

	r->cache_max = so->cache_entries_max;
	r->wb = rocksdb_writebatch_create();
	r->cache_named = hmap_create(sizeof(rocks_val));
	r->cache_totals = hmap_create(sizeof(rocks_val));
	r->ov_named = hmap_create_arena(sizeof(rocks_ov));
	r->ov_totals = hmap_create_arena(sizeof(rocks_ov));
	r->ov_members = hmap_create_arena(sizeof(rocks_mem));
	if (!r->wb || !r->cache_named || !r->cache_totals || !r->ov_named ||
	    !r->ov_totals || !r->ov_members)
		return TALLY_ENOMEM;
	/* Cleared after every batch: a burst's table would be walked by
	 * every small batch after it. */
	hmap_shrink_on_clear(r->ov_named);
	hmap_shrink_on_clear(r->ov_totals);
	hmap_shrink_on_clear(r->ov_members);
	rc = rocks_clock_init(r);
	if (rc != TALLY_OK)
		return rc;
	return rocks_journal_init(r, so->checkpoint_bytes);
}

/* The folder's own lock, held for the handle's life: shared by read-only
 * handles, exclusive for one that writes. flock() on the folder itself
 * needs no file in it (a backup has no LOCK file, and a read-only open
 * creates none), and, being the open file description's, it conflicts
 * between two handles of one process too and outlives any descriptor
 * closed elsewhere. RocksDB's own lock on LOCK is a process's POSIX lock,
 * which any close of LOCK in this process would drop: nothing here opens
 * LOCK while a handle of this process may hold it (ro_lock()). */
static int folder_lock(rocks *r, const char *path, int exclusive)
{
	r->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->dir_fd < 0)
		return errno == ENOENT ? TALLY_ENOTFOUND
		                       : rocks_errno_code(errno);
	if (flock(r->dir_fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0)
		return TALLY_OK;
	/* A file system without flock(): RocksDB's lock alone, as before,
	 * and no folder lock (dir_fd -1), which ro_lock() needs. */
	if (errno == ENOLCK || errno == EOPNOTSUPP || errno == EINVAL) {
		close(r->dir_fd);
		r->dir_fd = -1;
		return TALLY_OK;
	}
	return errno == EWOULDBLOCK ? TALLY_EBUSY : rocks_errno_code(errno);
}

/* A read-only open also takes a shared lock on the folder's LOCK file
 * (when it has one), so that a writer that knows only RocksDB's lock (a
 * process other than tally's, an older tally) neither holds the folder
 * now nor opens it meanwhile: an open file description's lock, which
 * conflicts with RocksDB's POSIX lock. Opening and closing LOCK is safe
 * here: under the folder's shared lock, no handle of this process writes
 * the folder, so this process holds no RocksDB lock on it to lose. */
static int ro_lock(rocks *r, const char *path)
{
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	char name[4096];

	/* Without the folder lock, a close of LOCK here could drop a
	 * writing handle's: a reader there relies on writers' locks alone. */
	if (r->dir_fd < 0)
		return TALLY_OK;
	if (snprintf(name, sizeof name, "%s/LOCK", path) >= (int)sizeof name)
		return TALLY_EINVAL;
	r->lock_fd = open(name, O_RDONLY | O_CLOEXEC);
	if (r->lock_fd < 0)
		return errno == ENOENT ? TALLY_OK : rocks_errno_code(errno);
	if (fcntl(r->lock_fd, F_OFD_SETLK, &fl) == 0)
		return TALLY_OK;
	return errno == EAGAIN || errno == EACCES ? TALLY_EBUSY
	                                          : rocks_errno_code(errno);
}

/* Read-only, RocksDB cannot create a column family the folder lacks
 * (one written before the family existed): such a folder is opened to
 * write once first. */
static int ro_families_check(rocks *r, const char *path)
{
	char *err = NULL, **names;
	size_t n = 0;
	int found = 0;

	names = rocksdb_list_column_families(r->db_opts, path, &n, &err);
	if (err != NULL)
		return rocks_err(err);
	for (int i = 0; i < CF_COUNT; i++)
		for (size_t k = 0; k < n; k++)
			if (strcmp(names[k], cf_names[i]) == 0) {
				found++;
				break;
			}
	rocksdb_list_column_families_destroy(names, n);
	return found == CF_COUNT ? TALLY_OK : TALLY_EVERSION;
}

int rocks_open(const char *path, const store_options *so, store **out)
{
	const rocksdb_options_t *cfo[CF_COUNT];
	char *err = NULL;
	rocks *r;
	int rc;

	rocks_counters_off();
	*out = NULL;
	if (!so->create && !exists_db(path))
		return TALLY_ENOTFOUND;
	if (so->create && mkdir(path, 0755) == 0) {
		/* The new folder's entry is made durable in its parent before
		 * anything in it is acknowledged: a machine crash would
		 * otherwise lose the whole folder. */
		rc = parent_sync(path);
		if (rc != TALLY_OK)
			return rc;
	} else if (so->create && errno != EEXIST) {
		return errno == ENOENT ? TALLY_ENOTFOUND : TALLY_EIO;
	}
	r = calloc(1, sizeof *r);
	if (r == NULL)
		return TALLY_ENOMEM;
	r->read_only = so->read_only;
	r->base.vt = &rocks_vt;
	if (r->read_only) {
		r->vt_ro = rocks_vt;
		r->vt_ro.apply = ro_apply;
		r->vt_ro.sync = ro_sync;
		r->vt_ro.tokens_sweep = NULL;
		r->vt_ro.backup = ro_backup;
		r->vt_ro.compact = ro_compact;
		r->base.vt = &r->vt_ro;
	}
	/* Before anything can fail: a close closes the files it holds. */
	r->lock_fd = -1;
	r->dir_fd = -1;
	rocks_jfile_init(r);
	rc = folder_lock(r, path, !r->read_only);
	if (rc == TALLY_OK && r->read_only)
		rc = ro_lock(r, path);
	if (rc == TALLY_OK)
		rc = options_create(r, so);
	if (rc == TALLY_OK)
		rc = maps_create(r, so);
	if (rc == TALLY_OK && r->read_only)
		rc = ro_families_check(r, path);
	if (rc != TALLY_OK)
		goto fail;
	if (!r->read_only && wal_pending(path)) {
		rc = wal_replay(r, path);
		if (rc != TALLY_OK)
			goto fail;
	}
	for (int i = 0; i < CF_COUNT; i++)
		cfo[i] = r->cf_opts[i];
	if (r->read_only)
		r->db = rocksdb_open_for_read_only_column_families(
			r->db_opts, path, CF_COUNT, cf_names, cfo, r->cf, 0,
			&err);
	else
		r->db = rocksdb_open_column_families(r->db_opts, path,
		                                     CF_COUNT, cf_names, cfo,
		                                     r->cf, &err);
	if (err) {
		r->db = NULL;
		rc = rocks_err(err);
		goto fail;
	}
	rc = format_check(r);
	if (rc == TALLY_OK)
		rc = seq_load(r);
	if (rc == TALLY_OK)
		rc = rocks_clock_load(r);
	if (rc == TALLY_OK)
		rc = rocks_journal_load(r, path);
	if (rc != TALLY_OK)
		goto fail;
	*out = &r->base;
	return TALLY_OK;
fail:
	rocks_close(&r->base);
	return rc;
}
