/* test_rc_hot.c: unit tests of hot-counter detection on the redis-cluster
 * store (store/rc_hot.c), with made-up seconds: when a counter counts as
 * hot, how far it grows, and that cold counters churning through the
 * table do not push a hot one out. tests/cluster/test_cluster_hotkey.sh
 * drives the same code through tallyd on a real cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/rc_int.h"

#define K(s) (const uint8_t *)(s), sizeof(s) - 1

static rcs *hot_new(uint32_t ops, uint32_t max)
{
	rcs *r = calloc(1, sizeof *r);

	assert_non_null(r);
	assert_int_equal(pthread_mutex_init(&r->shards_lock, NULL), 0);
	r->shards = hmap_create(sizeof(uint32_t));
	assert_non_null(r->shards);
	r->hot_ops = ops;
	r->hot_max = max; /* never 0 here: that asks the cluster */
	return r;
}

static void hot_free(rcs *r)
{
	hmap_free(r->shards);
	pthread_mutex_destroy(&r->shards_lock);
	free(r);
}

/* n increments of key in second sec, as batches of 100; the largest
 * growth asked for. */
static uint32_t drive(rcs *r, const uint8_t *key, size_t len, uint32_t n,
                      uint64_t sec)
{
	uint32_t want = 0, w;

	for (uint32_t i = 0; i < n; i += 100) {
		w = rc_hot_note(r, key, len, n - i < 100 ? n - i : 100, sec);
		if (w > want)
			want = w;
	}
	return want;
}

/* What rc_apply.c does with a GROW script's reply. */
static void grown(rcs *r, const uint8_t *key, size_t len, uint32_t now)
{
	redisReply rep = { .type = REDIS_REPLY_INTEGER, .integer = now };

	rc_hot_grown(r, key, len, &rep);
}

static void test_two_whole_seconds_above(void **state)
{
	rcs *r = hot_new(1000, 6);

	(void)state;
	/* Second 10 above; judged at 11: streak 1, not yet. */
	assert_int_equal(drive(r, K("hot"), 3500, 10), 0);
	assert_int_equal(drive(r, K("hot"), 3500, 11), 0);
	/* Judged at 12: two whole seconds above, grow to 3500/1000 up. */
	assert_int_equal(rc_hot_note(r, K("hot"), 1, 12), 4);
	/* Asked once: not again within the second. */
	assert_int_equal(drive(r, K("hot"), 3500, 12), 0);
	grown(r, K("hot"), 4);
	assert_int_equal(rc_shards_get(r, K("hot")), 4);
	assert_int_equal(atomic_load(&r->st_shard_growths), 1);
	/* Now judged per shard: 3500 < 4 x 1000, never again. */
	for (uint64_t s = 13; s < 20; s++)
		assert_int_equal(drive(r, K("hot"), 3500, s), 0);
	hot_free(r);
}

static void test_one_second_or_a_gap_is_not_hot(void **state)
{
	rcs *r = hot_new(1000, 6);

	(void)state;
	/* Bursts with a quiet second between them never make a streak. */
	for (uint64_t s = 100; s < 120; s += 2) {
		assert_int_equal(drive(r, K("bursty"), 5000, s), 0);
		assert_int_equal(drive(r, K("bursty"), 10, s + 1), 0);
	}
	/* A second with no increment at all breaks a streak too. */
	assert_int_equal(drive(r, K("gap"), 5000, 200), 0);
	assert_int_equal(drive(r, K("gap"), 5000, 202), 0);
	assert_int_equal(drive(r, K("gap"), 5000, 204), 0);
	/* At the threshold is not above it. */
	for (uint64_t s = 300; s < 310; s++)
		assert_int_equal(drive(r, K("edge"), 1000, s), 0);
	assert_int_equal(rc_shards_get(r, K("edge")), 1);
	hot_free(r);
}

static void test_growth_is_capped_and_off_is_off(void **state)
{
	rcs *r = hot_new(100, 6), *off = hot_new(0, 6);
	uint32_t want = 0;

	(void)state;
	for (uint64_t s = 1; s <= 3; s++) {
		want = drive(r, K("very"), 100000, s);
		assert_int_equal(drive(off, K("very"), 100000, s), 0);
	}
	assert_int_equal(want, 6); /* 1000 wanted, capped at 6 */
	grown(r, K("very"), 6);
	/* At the cap it asks for nothing more. */
	for (uint64_t s = 4; s < 10; s++)
		assert_int_equal(drive(r, K("very"), 100000, s), 0);
	/* A GROW answering the count already known (another tallyd grew
	 * it first) is not counted as a growth. */
	grown(r, K("very"), 6);
	assert_int_equal(atomic_load(&r->st_shard_growths), 1);
	/* An error reply teaches nothing. */
	{
		redisReply e = { .type = REDIS_REPLY_ERROR, .str = "ERR x",
		                 .len = 5 };

		rc_hot_grown(r, K("other"), &e);
		assert_int_equal(rc_shards_get(r, K("other")), 1);
	}
	hot_free(r);
	hot_free(off);
}

static void test_cold_churn_keeps_the_hot_entry(void **state)
{
	rcs *r = hot_new(1000, 6);
	uint32_t want = 0;
	char name[32];

	(void)state;
	/* Each second: the hot counter, then 5000 cold counters once each
	 * (20 times the table), then the hot one again. */
	for (uint64_t s = 1; s <= 3 && want == 0; s++) {
		want = drive(r, K("hot"), 1500, s);
		for (int i = 0; i < 5000; i++) {
			int n = snprintf(name, sizeof name, "cold-%d", i);

			assert_int_equal(rc_hot_note(r, (const uint8_t *)name,
			                             (size_t)n, 1, s), 0);
		}
		if (want == 0)
			want = drive(r, K("hot"), 1500, s);
	}
	assert_int_equal(want, 3); /* 3000/s over 1000 */
	hot_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_whole_seconds_above),
		cmocka_unit_test(test_one_second_or_a_gap_is_not_hot),
		cmocka_unit_test(test_growth_is_capped_and_off_is_off),
		cmocka_unit_test(test_cold_churn_keeps_the_hot_entry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
