/* rocks_jfile.c: the journal's own files. A batch that changes counters,
 * totals and events only (no request IDs, no types) writes its journal
 * record (rocks_journal.c) here instead of into RocksDB's WAL, over bytes already written, so that
 * its fdatasync writes the record alone: a WAL append changes the file's
 * size, and its fdatasync writes the inode as well (half the committer's
 * fsync samples at INCR -P 1, measured; 0.15 against 0.24 ms per 4 KiB).
 *
 * Two files take turns. Records are appended to the active one from its
 * start; once a checkpoint that covers every record written before it is
 * durable, the other file holds nothing the store needs, so it becomes the
 * active one and is written over from its start. At open each file is read
 * from its start while its records are whole and their numbers grow; the
 * records above the last checkpoint's number are replayed. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/varint.h"
#include "store/rocks_int.h"

/* Record header, then the payload:
 *   0  XXH3-64 of bytes 8 .. end of payload, be64
 *   8  magic, be32
 *  12  payload length, be32
 *  16  record number, be64 */
#define JF_MAGIC 0x744a7231u /* "tJr1" */
/* Files grow by this much at a time, zeros first, so that a record's own
 * fdatasync rarely changes the size. */
#define JF_GROW ((uint64_t)1 << 20)
#define JF_ZEROS 65536

static const uint8_t jf_zeros[JF_ZEROS];

static int jf_name(char *out, size_t cap, const char *dir, int i)
{
	int n = snprintf(out, cap, "%s/" ROCKS_JF_NAME, dir, i);

	return n < 0 || (size_t)n >= cap ? TALLY_EINVAL : TALLY_OK;
}

int rocks_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return rocks_errno_code(n < 0 ? errno : ENOSPC);
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return TALLY_OK;
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return TALLY_EIO;
		if (n == 0)
			return TALLY_ECORRUPT; /* shorter than its header says */
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return TALLY_OK;
}

/* ---- open: find the records ---------------------------------------------- */

static int recs_push(rocks_jfile *jf, uint64_t num, int file, uint64_t off,
                     uint32_t len)
{
	if (jf->nrecs == jf->caprecs) {
		size_t cap = jf->caprecs ? jf->caprecs * 2 : 64;
		rocks_jrec *p = realloc(jf->recs, cap * sizeof *p);

		if (p == NULL)
			return TALLY_ENOMEM;
		jf->recs = p;
		jf->caprecs = cap;
	}
	jf->recs[jf->nrecs++] = (rocks_jrec){ num, off, len, file };
	return TALLY_OK;
}

/* Walk file i from its start; remember the records above ckpt. Stops at
 * the first record that is torn, foreign or not newer than the one before
 * it: what follows is older, written over in part, or never written.
 * Or damaged: a record whose header holds but whose bytes do not match
 * their hash. Then the records after it that are whole, newer and not
 * covered by the checkpoint are counted in jf->dropped (they go with the
 * cut: a replay past a lost record would build on a value it never had),
 * so that the loss is reported, not silent. */
static int jf_scan(rocks_jfile *jf, int i, uint64_t ckpt, uint64_t *last)
{
	uint8_t hdr[ROCKS_JF_HDR];
	uint8_t *buf = NULL;
	size_t bufcap = 0;
	uint64_t off = 0, prev = 0, walk = 0, newest = 0;
	int rc = TALLY_OK, damaged = 0;

	while (off + ROCKS_JF_HDR <= jf->size[i]) {
		rc = pread_all(jf->fd[i], hdr, sizeof hdr, off);
		if (rc != TALLY_OK)
			break;
		uint32_t len = be32_get(hdr + 12);
		uint64_t num = be64_get(hdr + 16);

		if (be32_get(hdr + 8) != JF_MAGIC || num <= prev ||
		    len > jf->size[i] - off - ROCKS_JF_HDR)
			break;
		if (bufcap < ROCKS_JF_HDR + (size_t)len) {
			uint8_t *p = realloc(buf, ROCKS_JF_HDR + (size_t)len);

			if (p == NULL) {
				rc = TALLY_ENOMEM;
				break;
			}
			buf = p;
			bufcap = ROCKS_JF_HDR + (size_t)len;
		}
		memcpy(buf, hdr, sizeof hdr);
		rc = pread_all(jf->fd[i], buf + ROCKS_JF_HDR, len,
		               off + ROCKS_JF_HDR);
		if (rc != TALLY_OK)
			break;
		if (XXH3_64bits(buf + 8, ROCKS_JF_HDR - 8 + (size_t)len) !=
		    be64_get(buf)) {
			if (!damaged) {
				/* Go on past it, counting only. */
				damaged = 1;
				walk = off;
				newest = prev;
				prev = num;
				off += ROCKS_JF_HDR + (uint64_t)len;
				continue;
			}
			break;
		}
		if (damaged) {
			/* Those the checkpoint covers are not lost. */
			if (num > ckpt)
				jf->dropped++;
			prev = num;
			off += ROCKS_JF_HDR + (uint64_t)len;
			continue;
		}
		if (num > ckpt)
			rc = recs_push(jf, num, i, off + ROCKS_JF_HDR, len);
		if (rc != TALLY_OK)
			break;
		prev = num;
		off += ROCKS_JF_HDR + (uint64_t)len;
	}
	free(buf);
	if (rc == TALLY_ECORRUPT) /* a header past the end: a torn tail */
		rc = TALLY_OK;
	if (damaged) {
		/* The cut goes where the damaged record starts; what stopped
		 * the count past it changes nothing. */
		off = walk;
		prev = newest;
		rc = TALLY_OK;
	}
	jf->end[i] = off;
	*last = prev;
	return rc;
}

static int rec_cmp(const void *a, const void *b)
{
	const rocks_jrec *x = a, *y = b;

	return (x->num > y->num) - (x->num < y->num);
}

int rocks_dir_sync(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = TALLY_OK;

	if (fd < 0)
		return rocks_errno_code(errno);
	if (fsync(fd) != 0)
		rc = rocks_errno_code(errno);
	close(fd);
	return rc;
}

void rocks_jfile_init(rocks *r)
{
	for (int i = 0; i < ROCKS_JF_FILES; i++)
		r->jf.fd[i] = -1;
}

/* Bytes copied at a time by jf_rewrite(). */
#define REWRITE_CHUNK (1u << 20)

/* Write file i's records, up to its end, over themselves (the caller
 * fdatasyncs). An fdatasync alone would not do: after a failed writeback
 * (a failed fsync, in this process or the one before) the kernel marks
 * those pages clean, so an fdatasync now writes nothing and succeeds,
 * while the disk holds older bytes; once the pages left the cache a later
 * scan would stop there, short of the records appended after it. Every
 * record from the file's start, not only those replayed: the scan stops
 * at the first bad one, covered by the checkpoint or not. */
static int jf_rewrite(rocks_jfile *jf, int i)
{
	uint64_t off;
	uint8_t *buf;
	int rc = TALLY_OK;

	if (jf->end[i] == 0)
		return TALLY_OK;
	buf = malloc(REWRITE_CHUNK);
	if (buf == NULL)
		return TALLY_ENOMEM;
	for (off = 0; off < jf->end[i] && rc == TALLY_OK;) {
		size_t n = jf->end[i] - off < REWRITE_CHUNK
		           ? (size_t)(jf->end[i] - off) : REWRITE_CHUNK;

		rc = pread_all(jf->fd[i], buf, n, off);
		if (rc == TALLY_OK)
			rc = rocks_pwrite_all(jf->fd[i], buf, n, off);
		off += n;
	}
	free(buf);
	return rc;
}

int rocks_jfile_open(rocks *r, const char *dir, uint64_t ckpt, uint64_t cap)
{
	rocks_jfile *jf = &r->jf;
	uint64_t last[ROCKS_JF_FILES] = { 0, 0 };
	int created = 0, rc = TALLY_OK;

	jf->cap = cap;
	if (pthread_mutex_init(&jf->mu, NULL) != 0)
		return TALLY_ENOMEM;
	jf->mu_ok = 1;
	for (int i = 0; i < ROCKS_JF_FILES && rc == TALLY_OK; i++) {
		char name[4096];
		struct stat st;

		rc = jf_name(name, sizeof name, dir, i);
		if (rc != TALLY_OK)
			break;
		if (stat(name, &st) != 0) {
			if (r->read_only && errno == ENOENT)
				continue; /* no records: as an empty file */
			created = 1;
		}
		jf->fd[i] = open(name, r->read_only ? O_RDONLY | O_CLOEXEC :
		                 O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (jf->fd[i] < 0 || fstat(jf->fd[i], &st) != 0) {
			rc = rocks_errno_code(errno);
			break;
		}
		jf->size[i] = (uint64_t)st.st_size;
		rc = jf_scan(jf, i, ckpt, &last[i]);
	}
	/* Read-only: the records are replayed from where they lie; nothing
	 * is created, rewritten, synced or cut. */
	if (rc == TALLY_OK && r->read_only) {
		if (jf->nrecs > 1)
			qsort(jf->recs, jf->nrecs, sizeof *jf->recs, rec_cmp);
		return TALLY_OK;
	}
	if (rc == TALLY_OK && created)
		rc = rocks_dir_sync(dir);
	if (rc != TALLY_OK)
		return rc;
	/* Carry on in the file that holds the newest record, after it. */
	jf->active = last[1] > last[0];
	if (jf->nrecs == 0) {
		/* Every record in the files is covered by the checkpoint
		 * (after a clean close, always): new ones start over in the
		 * other file rather than after bytes that may be only in the
		 * page cache (jf_rewrite()). */
		if (jf->end[jf->active] > 0) {
			jf->active ^= 1;
			jf->end[jf->active] = 0;
		}
	}
	/* A record written but not synced before a kill (or whose sync
	 * failed) is replayed now, and later records build on what it holds:
	 * make it durable before they are, in each file holding one (the
	 * active file, and the other when the last turn came after records
	 * the checkpoint before it did not cover). Some tens of MB at most,
	 * and only after a crash or a failure. */
	for (int i = 0; i < ROCKS_JF_FILES && rc == TALLY_OK; i++) {
		if (last[i] <= ckpt) /* every record of it is covered */
			continue;
		rc = jf_rewrite(jf, i);
		if (rc == TALLY_OK && fdatasync(jf->fd[i]) != 0)
			rc = rocks_errno_code(errno);
	}
	if (rc != TALLY_OK)
		return rc;
	/* Cut each file at the end of its scan. Past it lie zeros, older
	 * records, or (async durability, after a machine crash that kept
	 * some pages of a write and lost others) whole records written after
	 * the one that ends the scan. New records take that one's number and
	 * place: were one the same length as what it replaces, the next
	 * open would read on into the stale records after it, whose numbers
	 * grow too, and replay values from before this open over newer ones.
	 * After the cut, every byte a file holds is a record numbered at or
	 * below jseq, or zeros that jf_grow() writes. */
	for (int i = 0; i < ROCKS_JF_FILES && rc == TALLY_OK; i++) {
		if (jf->size[i] <= jf->end[i])
			continue;
		if (ftruncate(jf->fd[i], (off_t)jf->end[i]) != 0 ||
		    fsync(jf->fd[i]) != 0)
			rc = rocks_errno_code(errno);
		else
			jf->size[i] = jf->end[i];
	}
	if (rc != TALLY_OK)
		return rc;
	if (jf->nrecs > 1) /* recs is NULL when none were found */
		qsort(jf->recs, jf->nrecs, sizeof *jf->recs, rec_cmp);
	return TALLY_OK;
}

int rocks_jfile_read(rocks *r, const rocks_jrec *rec, uint8_t **buf,
                     size_t *cap)
{
	if (*cap < rec->len) {
		uint8_t *p = realloc(*buf, rec->len ? rec->len : 1);

		if (p == NULL)
			return TALLY_ENOMEM;
		*buf = p;
		*cap = rec->len;
	}
	return pread_all(r->jf.fd[rec->file], *buf, rec->len, rec->off);
}

int rocks_jfile_cut(rocks *r, uint64_t num)
{
	rocks_jfile *jf = &r->jf;
	int newest = -1;

	for (int i = 0; i < ROCKS_JF_FILES; i++) {
		for (size_t k = 0; k < jf->nrecs; k++) {
			const rocks_jrec *rec = &jf->recs[k];

			if (rec->file != i)
				continue;
			if (rec->num < num)
				continue;
			/* Records of one file grow in number with their place:
			 * this one and every one after it go. */
			assert(rec->off >= ROCKS_JF_HDR &&
			       rec->off - ROCKS_JF_HDR <= jf->end[i]);
			jf->end[i] = rec->off - ROCKS_JF_HDR;
			if (r->read_only) /* the replay stops there all the same */
				break;
			if (ftruncate(jf->fd[i], (off_t)jf->end[i]) != 0 ||
			    fsync(jf->fd[i]) != 0)
				return rocks_errno_code(errno);
			jf->size[i] = jf->end[i];
			break;
		}
	}
	/* recs is sorted by number: the last one below num is the newest. */
	for (size_t k = 0; k < jf->nrecs && jf->recs[k].num < num; k++)
		newest = jf->recs[k].file;
	if (newest >= 0) {
		jf->active = newest;
	} else if (jf->end[jf->active] > 0) {
		/* Nothing above the checkpoint is left: as at open. */
		jf->active ^= 1;
		jf->end[jf->active] = 0;
	}
	return TALLY_OK;
}

void rocks_jfile_loaded(rocks *r)
{
	free(r->jf.recs);
	r->jf.recs = NULL;
	r->jf.nrecs = r->jf.caprecs = 0;
}

/* ---- the committer's writes ---------------------------------------------- */

/* Zeros from the file's end up to the next JF_GROW boundary past want. */
static int jf_grow(rocks_jfile *jf, int i, uint64_t want)
{
	uint64_t to = (want + JF_GROW - 1) / JF_GROW * JF_GROW;

	if (to > jf->cap)
		to = jf->cap;
	while (jf->size[i] < to) {
		size_t n = to - jf->size[i] < JF_ZEROS ?
		           (size_t)(to - jf->size[i]) : JF_ZEROS;
		int rc = rocks_pwrite_all(jf->fd[i], jf_zeros, n, jf->size[i]);

		if (rc != TALLY_OK)
			return rc;
		jf->size[i] += n;
	}
	return TALLY_OK;
}

/* Before a record (jf->mu held): what async writes left unsynced before it,
 * records in RocksDB's WAL or the other file, is synced now (sync mode
 * leaves nothing unsynced). Records hold absolute values: were this one to
 * survive a machine crash without an earlier one, the values of the keys
 * both touch would include the lost batch, and its others and its token
 * would be gone, so a retry would count it twice. Costs an fsync only when
 * async writes switch from one file to another. */
static int order_before(rocks *r, int a)
{
	rocks_jfile *jf = &r->jf;

	if (r->wal_unsynced) {
		int rc = rocks_wal_sync(r);

		if (rc != TALLY_OK)
			return rc;
		r->wal_unsynced = 0;
	}
	for (int i = 0; i < ROCKS_JF_FILES; i++) {
		if (i == a || !jf->unsynced[i])
			continue;
		/* Kept, as rocks_jfile_sync() keeps its own: a sync after
		 * it could succeed with the pages lost. */
		if (fdatasync(jf->fd[i]) != 0)
			return rocks_logs_fail(r, jf->sync_err =
			                       rocks_errno_code(errno));
		jf->unsynced[i] = 0;
	}
	return TALLY_OK;
}

int rocks_jfile_append(rocks *r, uint64_t num, int sync)
{
	rocks_jfile *jf = &r->jf;
	uint8_t *rec = r->jbuf;
	size_t len = ROCKS_JF_HDR + r->jlen;
	int a, rc = TALLY_OK;

	assert(r->jlen > 0 && r->jlen <= UINT32_MAX);
	pthread_mutex_lock(&jf->mu);
	if (jf->sync_err != TALLY_OK) {
		pthread_mutex_unlock(&jf->mu);
		return jf->sync_err;
	}
	a = jf->active;
	if (jf->paused || jf->end[a] + len > jf->cap) {
		pthread_mutex_unlock(&jf->mu);
		return ROCKS_JF_FULL;
	}
	rc = order_before(r, a);
	if (rc != TALLY_OK) {
		pthread_mutex_unlock(&jf->mu);
		return rc;
	}
	be32_put(rec + 8, JF_MAGIC);
	be32_put(rec + 12, (uint32_t)r->jlen);
	be64_put(rec + 16, num);
	be64_put(rec, XXH3_64bits(rec + 8, len - 8));
	if (jf->end[a] + len > jf->size[a])
		rc = jf_grow(jf, a, jf->end[a] + len);
	if (rc == TALLY_OK)
		rc = rocks_pwrite_all(jf->fd[a], rec, len, jf->end[a]);
	if (rc == TALLY_OK && sync) {
		uint64_t t0 = rocks_now_ns();

		if (fdatasync(jf->fd[a]) != 0)
			rc = rocks_logs_fail(r, jf->sync_err =
			                     rocks_errno_code(errno));
		else
			rocks_sync_count(r, rocks_now_ns() - t0);
	}
	if (rc == TALLY_OK) {
		jf->end[a] += len;
		jf->unsynced[a] |= !sync;
	}
	pthread_mutex_unlock(&jf->mu);
	return rc;
}

int rocks_jfile_sync(rocks *r)
{
	rocks_jfile *jf = &r->jf;
	int rc = TALLY_OK;

	pthread_mutex_lock(&jf->mu);
	rc = jf->sync_err;
	for (int i = 0; i < ROCKS_JF_FILES && rc == TALLY_OK; i++) {
		if (!jf->unsynced[i])
			continue;
		if (fdatasync(jf->fd[i]) != 0)
			rc = jf->sync_err = rocks_errno_code(errno);
		else
			jf->unsynced[i] = 0;
	}
	pthread_mutex_unlock(&jf->mu);
	return rc;
}

void rocks_jfile_turn(rocks *r)
{
	rocks_jfile *jf = &r->jf;

	pthread_mutex_lock(&jf->mu);
	if (!jf->paused && jf->end[jf->active] > 0) {
		jf->active ^= 1;
		jf->end[jf->active] = 0;
	}
	pthread_mutex_unlock(&jf->mu);
}

/* ---- backup and close ---------------------------------------------------- */

void rocks_jfile_pause(rocks *r, int paused)
{
	pthread_mutex_lock(&r->jf.mu);
	/* A count: backups may overlap, and the files hold still until the
	 * last of them has copied them. */
	if (paused) {
		r->jf.paused++;
	} else {
		assert(r->jf.paused > 0);
		r->jf.paused--;
	}
	pthread_mutex_unlock(&r->jf.mu);
}

int rocks_copy_file(int from, uint64_t len, const char *to)
{
	uint8_t *buf = malloc(JF_ZEROS);
	uint64_t off = 0;
	int fd, rc = TALLY_OK;

	if (buf == NULL)
		return TALLY_ENOMEM;
	fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		free(buf);
		return rocks_errno_code(errno);
	}
	while (rc == TALLY_OK && off < len) {
		size_t n = len - off < JF_ZEROS ? (size_t)(len - off) : JF_ZEROS;

		rc = pread_all(from, buf, n, off);
		if (rc == TALLY_OK)
			rc = rocks_pwrite_all(fd, buf, n, off);
		off += n;
	}
	free(buf);
	if (rc == TALLY_OK && fsync(fd) != 0)
		rc = rocks_errno_code(errno);
	if (close(fd) != 0 && rc == TALLY_OK)
		rc = rocks_errno_code(errno);
	return rc;
}

int rocks_jfile_copy(rocks *r, const char *dir)
{
	rocks_jfile *jf = &r->jf;
	int rc = TALLY_OK;

	/* Paused, or read-only: nothing writes either file, so their ends
	 * hold. */
	assert(jf->paused || r->read_only);
	for (int i = 0; i < ROCKS_JF_FILES && rc == TALLY_OK; i++) {
		char name[4096];

		if (jf->end[i] == 0)
			continue;
		rc = jf_name(name, sizeof name, dir, i);
		if (rc == TALLY_OK)
			rc = rocks_copy_file(jf->fd[i], jf->end[i], name);
	}
	if (rc == TALLY_OK)
		rc = rocks_dir_sync(dir);
	return rc;
}

void rocks_jfile_close(rocks *r, int covered)
{
	rocks_jfile *jf = &r->jf;

	for (int i = 0; i < ROCKS_JF_FILES; i++) {
		if (jf->fd[i] < 0)
			continue;
		/* Every record is below a durable checkpoint: the files hold
		 * nothing, and a closed data folder shows its real size. */
		if (covered)
			(void)ftruncate(jf->fd[i], 0);
		close(jf->fd[i]);
		jf->fd[i] = -1;
	}
	rocks_jfile_loaded(r);
	if (jf->mu_ok)
		pthread_mutex_destroy(&jf->mu);
	jf->mu_ok = 0;
}
