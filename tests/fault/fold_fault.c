/* fold_fault.c: in async durability, tally_counter_add()'s adds survive a
 * store failure during their fold (test_faults.sh runs it under faultfs).
 * A fold whose write fails has an unknown outcome; the recovery reads the
 * fold's mark back and folds again what did not land, so the counter ends
 * at exactly the adds acknowledged.
 *
 *   fold_fault DIR CTL [MODE]
 *     DIR, a new data folder under TALLY_FAULT_DIR; CTL, faultfs's control
 *     file; MODE, the fault (default eio-write). THREADS threads add 1 to
 *     one counter without pause; after a while every write under DIR
 *     fails (or every sync, with eio-fsync) for FAULT_MS, then
 *     the disk mends; the adds go on until the store has recovered, then
 *     stop. After a close and a reopen the counter must equal the adds
 *     that returned TALLY_OK. Prints the figures; exits 0 when they match,
 *     1 when not, 2 when the run could not be made. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fault_ctl.h"
#include "tally.h"

#define THREADS 4
#define BEFORE_MS 800     /* adds before the fault */
#define FAULT_MS 400      /* the disk failing */
#define RECOVER_MS 15000  /* the most the recovery may take */
#define AFTER_MS 500      /* adds after it */

typedef struct run {
	tally *t;
	atomic_int stop;
	atomic_uint_fast64_t ok, refused;
} run;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

static void *adder(void *arg)
{
	run *r = arg;

	while (!atomic_load(&r->stop)) {
		if (tally_counter_add(r->t, "hot", 3, 1) == TALLY_OK)
			atomic_fetch_add(&r->ok, 1);
		else
			atomic_fetch_add(&r->refused, 1);
	}
	return NULL;
}

static uint64_t recoveries(tally *t)
{
	tally_stats st;

	return tally_stats_get(t, &st) == TALLY_OK ? st.store_recoveries : 0;
}

int main(int argc, char **argv)
{
	tally_options o = { 0 };
	pthread_t th[THREADS];
	run r = { 0 };
	int64_t v = 0;
	uint64_t failures = 0;
	tally_stats st;
	int rc, waited = 0;

	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: fold_fault DIR CTL [MODE]\n");
		return 2;
	}
	o.durability = TALLY_DURABILITY_ASYNC;
	rc = tally_open(argv[1], &o, &r.t);
	if (rc != TALLY_OK) {
		fprintf(stderr, "open: %s\n", tally_strerror(rc));
		return 2;
	}
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&th[i], NULL, adder, &r) != 0)
			return 2;
	sleep_ms(BEFORE_MS);
	if (set_fault(argv[2], argc == 4 ? argv[3] : "eio-write") != 0)
		return 2;
	sleep_ms(FAULT_MS);
	if (set_fault(argv[2], "off") != 0)
		return 2;
	while (recoveries(r.t) == 0 && waited < RECOVER_MS) {
		sleep_ms(50);
		waited += 50;
	}
	if (recoveries(r.t) == 0) {
		/* Not what this program checks (test_faults does): the fold
		 * would stay in limbo, and the close drop it. */
		fprintf(stderr, "no recovery within %d ms\n", RECOVER_MS);
		atomic_store(&r.stop, 1);
		for (int i = 0; i < THREADS; i++)
			pthread_join(th[i], NULL);
		tally_close(r.t);
		return 2;
	}
	sleep_ms(AFTER_MS);
	atomic_store(&r.stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	if (tally_stats_get(r.t, &st) == TALLY_OK)
		failures = st.store_failures;
	printf("adds acknowledged %" PRIu64 ", refused %" PRIu64
	       "; store failures %" PRIu64 ", recoveries %" PRIu64 "\n",
	       (uint64_t)atomic_load(&r.ok), (uint64_t)atomic_load(&r.refused),
	       failures, recoveries(r.t));
	tally_close(r.t);
	r.t = NULL;
	rc = tally_open(argv[1], &o, &r.t);
	if (rc == TALLY_OK)
		rc = tally_get(r.t, "hot", 3, &v);
	tally_close(r.t);
	printf("after a reopen: %s, hot = %" PRId64 "\n", tally_strerror(rc),
	       v);
	if (rc != TALLY_OK || failures == 0)
		return 2;
	return (uint64_t)v == (uint64_t)atomic_load(&r.ok) ? 0 : 1;
}
