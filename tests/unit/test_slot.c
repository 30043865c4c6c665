/* test_slot.c: unit tests of Redis Cluster key slots (core/slot.c). Every
 * expected slot below was answered by a real redis-server 7.0
 * (CLUSTER KEYSLOT); tests/cluster/test_cluster_client.sh compares many
 * more keys against a live cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/slot.h"

static void test_crc16_xmodem_check_value(void **state)
{
	(void)state;
	/* The standard check value of CRC-16/XMODEM. */
	assert_int_equal(slot_crc16("123456789", 9), 0x31C3);
	assert_int_equal(slot_crc16("", 0), 0);
}

struct slot_case {
	const char *key;
	size_t len;
	uint16_t slot;
};

#define C(s, n) { s, sizeof(s) - 1, n }

static const struct slot_case slot_cases[] = {
	C("", 0),
	C("foo", 12182),
	C("bar", 5061),
	C("123456789", 12739),
	C("hello world", 15332),
	C("x\tz", 5356),
	/* A tag picks the bytes hashed. */
	C("{user1000}.following", 3443),
	C("{user1000}.followers", 3443),
	C("foo{bar}{zap}", 5061),      /* first tag only: "bar" */
	C("foo{{bar}}zap", 4015),      /* tag is "{bar" */
	C("a}b{c}", 7365),             /* '}' before the '{' does not count */
	/* No usable tag: the whole key. */
	C("foo{}{bar}", 8363),         /* empty first tag: whole key */
	C("{}", 15257),
	C("{", 4092),
	C("}", 12090),
	C("a{b", 13340),
	/* The shard keys of the cluster store. */
	C("t:c:{hits#0}", 4032),
	C("t:c:{hits#1}", 8161),
	C("t:c:{hits#2}", 12162),
	/* Binary keys: NUL and high bytes hash like any other byte. */
	C("a\0b\xff", 7390),
	C("{\0\xfe}z", 3793),
};

static void test_slot_matches_redis(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(slot_cases) / sizeof(slot_cases[0]); i++) {
		const struct slot_case *t = &slot_cases[i];
		uint16_t got = slot_of_key(t->key, t->len);
		if (got != t->slot)
			fail_msg("case %zu: slot %u, redis says %u", i,
			         (unsigned)got, (unsigned)t->slot);
	}
}

static void test_slot_tag_equals_bare_key(void **state)
{
	(void)state;
	/* What the store relies on: "{X}" anywhere routes like X. */
	assert_int_equal(slot_of_key("pre{abc}post", 12),
	                 slot_of_key("abc", 3));
	assert_int_equal(slot_of_key("{abc}", 5), slot_of_key("abc", 3));
	assert_int_equal(slot_of_key(NULL, 0), 0);
}

static void test_slot_always_in_range(void **state)
{
	uint8_t buf[64];
	uint64_t s = 88172645463325252ULL;
	(void)state;
	for (int i = 0; i < 100000; i++) {
		size_t len = (size_t)(s % sizeof(buf));
		for (size_t j = 0; j < len; j++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			buf[j] = (uint8_t)s;
		}
		assert_true(slot_of_key(buf, len) < SLOT_COUNT);
		s += 0x9E3779B97F4A7C15ULL;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16_xmodem_check_value),
		cmocka_unit_test(test_slot_matches_redis),
		cmocka_unit_test(test_slot_tag_equals_bare_key),
		cmocka_unit_test(test_slot_always_in_range),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
