/* compact_fault.c: a WAL fsync that fails during tally_compact() (in its
 * own sync of the logs, or in RocksDB's flush, which syncs the logs it
 * closed) must neither crash the process nor lose or double a write
 * (test_faults.sh runs it under faultfs). librocksdb 7.8 aborts on a WAL
 * sync after a failed one, and a sync that succeeds after a failed one
 * proves nothing: the store must fail and reopen instead.
 *
 *   compact_fault DIR CTL
 *     DIR, a folder under TALLY_FAULT_DIR; CTL, faultfs's control file.
 *     ROUNDS times, each in a new folder DIR/N: in async durability, a
 *     like with an ID (its record goes to RocksDB's WAL, unsynced), then
 *     "eio-fsync-once .log", tally_compact(), an INCRBY and a close
 *     (the store has failed by then, wherever the fault landed, so the
 *     INCRBY is refused: test_faults.sh counts the refusals); then the
 *     fault off, a reopen, and the like retried with its ID: it must
 *     count 1, once. Prints each step; exits 0 when every round held, 1
 *     when one did not; an abort is the failure it guards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_ctl.h"
#include "tally.h"

#define ROUNDS 5

static int round_run(const char *dir, const char *ctl)
{
	tally_options o = { 0 };
	tally_event ev = { .ctype = "article", .ktype = "like", .content = 7,
	                   .member = 9, .id = "req-1", .id_len = 5 };
	tally *t = NULL;
	int64_t v = 0;
	int rc;

	o.durability = TALLY_DURABILITY_ASYNC;
	o.flush_interval_ms = 60000; /* no periodic sync of the WAL */
	rc = tally_open(dir, &o, &t);
	if (rc == TALLY_OK)
		rc = tally_add(t, &ev, &v);
	printf("%s: like with an ID: %s, count %lld\n", dir,
	       tally_strerror(rc), (long long)v);
	if (rc != TALLY_OK || set_fault(ctl, "eio-fsync-once .log") != 0) {
		tally_close(t);
		return 1;
	}
	printf("  compact: %s\n", tally_strerror(tally_compact(t)));
	printf("  incrby: %s\n", tally_strerror(tally_incrby(t, "k", 1, 1,
	                                                      &v)));
	tally_close(t);
	if (set_fault(ctl, "off") != 0)
		return 1;
	t = NULL;
	o.durability = TALLY_DURABILITY_SYNC;
	rc = tally_open(dir, &o, &t);
	if (rc == TALLY_OK)
		rc = tally_add(t, &ev, &v);
	printf("  reopened, the like retried: %s, count %lld\n",
	       tally_strerror(rc), (long long)v);
	if (rc == TALLY_OK && v == 1)
		rc = tally_count(t, "article", "like", 7, &v);
	printf("  count: %lld\n", (long long)v);
	tally_close(t);
	return rc == TALLY_OK && v == 1 ? 0 : 1;
}

int main(int argc, char **argv)
{
	char dir[4096];
	int bad = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: compact_fault DIR CTL\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i <= ROUNDS; i++) {
		if (snprintf(dir, sizeof dir, "%s/%d", argv[1], i) >=
		    (int)sizeof dir)
			return 2;
		bad |= round_run(dir, argv[2]);
	}
	return bad;
}
