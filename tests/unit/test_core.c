/* test_core.c: unit tests of the core layer (varints, key and value
 * layouts, the export record, the hash map, name validation). Pure code, so
 * every byte layout is checked against values worked out by hand. */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "core/glob.h"
#include "core/hmap.h"
#include "core/keys.h"
#include "core/record.h"
#include "core/varint.h"
#include "tally.h"

/* Deterministic pseudo-random numbers (xorshift64*); state passed in, so
 * no test depends on another's draws. */
static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

static int sign_of(int v)
{
	return (v > 0) - (v < 0);
}

static int cmp_u64(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

/* ---- varint -------------------------------------------------------------- */

static void test_varint_u64_boundaries_round_trip(void **state)
{
	(void)state;
	const uint64_t vals[] = { 0, 1, 127, 128, 16383, 16384,
		UINT64_C(1) << 32, (UINT64_C(1) << 63) - 1, UINT64_C(1) << 63,
		UINT64_MAX };
	const size_t lens[] = { 1, 1, 1, 2, 2, 3, 5, 9, 10, 10 };
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		uint8_t buf[VARINT_MAX + 4];
		memset(buf, 0xAA, sizeof(buf));
		size_t n = varint_put_u64(buf, vals[i]);
		assert_int_equal(n, lens[i]);
		assert_int_equal(buf[n], 0xAA); /* nothing written past n */
		uint64_t v = 0;
		size_t used = 0;
		assert_int_equal(varint_get_u64(buf, n, &v, &used), 0);
		assert_int_equal(used, n);
		assert_int_equal(v, vals[i]);
	}
}

static void test_varint_u64_exact_bytes(void **state)
{
	(void)state;
	uint8_t buf[VARINT_MAX];
	assert_int_equal(varint_put_u64(buf, 0), 1);
	assert_int_equal(buf[0], 0x00);
	assert_int_equal(varint_put_u64(buf, 127), 1);
	assert_int_equal(buf[0], 0x7f);
	assert_int_equal(varint_put_u64(buf, 128), 2);
	assert_memory_equal(buf, "\x80\x01", 2);
	assert_int_equal(varint_put_u64(buf, 300), 2);
	assert_memory_equal(buf, "\xac\x02", 2);
	assert_int_equal(varint_put_u64(buf, UINT64_C(1) << 63), 10);
	assert_memory_equal(buf, "\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
	                    10);
	assert_int_equal(varint_put_u64(buf, UINT64_MAX), 10);
	assert_memory_equal(buf, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
	                    10);
}

static void test_varint_zigzag_boundaries(void **state)
{
	(void)state;
	assert_int_equal(zigzag_encode(0), 0);
	assert_int_equal(zigzag_encode(-1), 1);
	assert_int_equal(zigzag_encode(1), 2);
	assert_int_equal(zigzag_encode(-2), 3);
	assert_int_equal(zigzag_encode(INT64_MAX), UINT64_MAX - 1);
	assert_int_equal(zigzag_encode(INT64_MIN), UINT64_MAX);
	const int64_t vals[] = { 0, 1, -1, 63, -64, 64, -65, INT32_MAX,
		INT32_MIN, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1 };
	const size_t lens[] = { 1, 1, 1, 1, 1, 2, 2, 5, 5, 10, 10, 10, 10 };
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		uint8_t buf[VARINT_MAX];
		size_t n = varint_put_i64(buf, vals[i]);
		assert_int_equal(n, lens[i]);
		int64_t v = 0;
		size_t used = 0;
		assert_int_equal(varint_get_i64(buf, n, &v, &used), 0);
		assert_int_equal(used, n);
		assert_int_equal(v, vals[i]);
		assert_int_equal(zigzag_decode(zigzag_encode(vals[i])),
		                 vals[i]);
	}
}

static void test_varint_random_round_trip(void **state)
{
	(void)state;
	uint64_t s = 0x9E3779B97F4A7C15u;
	for (int i = 0; i < 100000; i++) {
		/* Shift by a random amount so every length is exercised. */
		uint64_t r = rnd_next(&s);
		uint64_t u = r >> (rnd_next(&s) % 64);
		uint8_t buf[VARINT_MAX];
		size_t n = varint_put_u64(buf, u);
		uint64_t v = 0;
		size_t used = 0;
		assert_int_equal(varint_get_u64(buf, n, &v, &used), 0);
		assert_int_equal(v, u);
		assert_int_equal(used, n);
		int64_t sv = (int64_t)(u >> 1) * ((r & 1) ? -1 : 1);
		n = varint_put_i64(buf, sv);
		int64_t w = 0;
		assert_int_equal(varint_get_i64(buf, n, &w, &used), 0);
		assert_int_equal(w, sv);
	}
}

static void test_varint_truncated_rejected(void **state)
{
	(void)state;
	uint64_t v = 7;
	size_t used = 7;
	assert_int_equal(varint_get_u64(NULL, 0, &v, &used), -1);
	const uint64_t vals[] = { 128, 16384, UINT64_C(1) << 63, UINT64_MAX };
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		uint8_t buf[VARINT_MAX];
		size_t n = varint_put_u64(buf, vals[i]);
		for (size_t cut = 0; cut < n; cut++) {
			assert_int_equal(varint_get_u64(buf, cut, &v, &used),
			                 -1);
			int64_t sv = 0;
			assert_int_equal(varint_get_i64(buf, cut, &sv, &used),
			                 -1);
		}
	}
}

static void test_varint_overlong_rejected(void **state)
{
	(void)state;
	uint64_t v = 0;
	size_t used = 0;
	/* 11 bytes: longer than any 64-bit varint. */
	const uint8_t eleven[11] = { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
		0x80, 0x80, 0x80, 0x80, 0x00 };
	assert_int_equal(varint_get_u64(eleven, sizeof(eleven), &v, &used), -1);
	/* 10 bytes whose last one carries bits beyond bit 63. */
	uint8_t ten[10];
	memset(ten, 0xff, 9);
	ten[9] = 0x02;
	assert_int_equal(varint_get_u64(ten, 10, &v, &used), -1);
	ten[9] = 0x7f;
	assert_int_equal(varint_get_u64(ten, 10, &v, &used), -1);
	ten[9] = 0x01; /* exactly UINT64_MAX */
	assert_int_equal(varint_get_u64(ten, 10, &v, &used), 0);
	assert_int_equal(v, UINT64_MAX);
	/* Ten continuation bytes and a long buffer: still refused. */
	uint8_t many[16];
	memset(many, 0x80, sizeof(many));
	assert_int_equal(varint_get_u64(many, sizeof(many), &v, &used), -1);
}

static void test_varint_stops_at_its_end(void **state)
{
	(void)state;
	const uint8_t buf[] = { 0xac, 0x02, 0xff, 0xff };
	uint64_t v = 0;
	size_t used = 0;
	assert_int_equal(varint_get_u64(buf, sizeof(buf), &v, &used), 0);
	assert_int_equal(v, 300);
	assert_int_equal(used, 2);
}

static void test_be_fixed_ints(void **state)
{
	(void)state;
	uint8_t b[8];
	be16_put(b, 0x0102);
	assert_memory_equal(b, "\x01\x02", 2);
	assert_int_equal(be16_get(b), 0x0102);
	be64_put(b, UINT64_C(0x0102030405060708));
	assert_memory_equal(b, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	assert_int_equal(be64_get(b), UINT64_C(0x0102030405060708));
}

/* ---- keys ---------------------------------------------------------------- */

static void test_key_obj_layout(void **state)
{
	(void)state;
	key_obj o = { 0x0102, 0x0304, UINT64_C(0x05060708090a0b0c) };
	uint8_t k[KEY_OBJ_LEN];
	key_obj_encode(k, &o);
	assert_memory_equal(k, "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"
	                       "\x0b\x0c", KEY_OBJ_LEN);
	key_obj d = { 0, 0, 0 };
	key_obj_decode(k, &d);
	assert_int_equal(d.ctype, o.ctype);
	assert_int_equal(d.ktype, o.ktype);
	assert_int_equal(d.content, o.content);
}

/* Small-range draws so equal fields (ties) are common too. */
static key_obj rnd_obj(uint64_t *s)
{
	key_obj o;
	o.ctype = (uint16_t)(rnd_next(s) % 3 ? rnd_next(s) % 4 : rnd_next(s));
	o.ktype = (uint16_t)(rnd_next(s) % 3 ? rnd_next(s) % 4 : rnd_next(s));
	o.content = rnd_next(s) % 2 ? rnd_next(s) % 300 : rnd_next(s);
	return o;
}

static int cmp_obj(const key_obj *a, const key_obj *b)
{
	if (a->ctype != b->ctype)
		return cmp_u64(a->ctype, b->ctype);
	if (a->ktype != b->ktype)
		return cmp_u64(a->ktype, b->ktype);
	return cmp_u64(a->content, b->content);
}

static void test_key_obj_and_member_sort_numerically(void **state)
{
	(void)state;
	uint64_t s = 12345;
	for (int i = 0; i < 200000; i++) {
		key_obj a = rnd_obj(&s), b = rnd_obj(&s);
		uint64_t ma = rnd_next(&s) % 2 ? rnd_next(&s) % 300 : rnd_next(&s);
		uint64_t mb = rnd_next(&s) % 2 ? rnd_next(&s) % 300 : rnd_next(&s);
		uint8_t ka[KEY_MEMBER_LEN], kb[KEY_MEMBER_LEN];
		key_obj_encode(ka, &a);
		key_obj_encode(kb, &b);
		assert_int_equal(sign_of(memcmp(ka, kb, KEY_OBJ_LEN)),
		                 cmp_obj(&a, &b));
		key_member_encode(ka, &a, ma);
		key_member_encode(kb, &b, mb);
		int want = cmp_obj(&a, &b);
		if (want == 0)
			want = cmp_u64(ma, mb);
		assert_int_equal(sign_of(memcmp(ka, kb, KEY_MEMBER_LEN)), want);
	}
}

static void test_key_member_layout(void **state)
{
	(void)state;
	key_obj o = { 1, 2, 3 };
	uint8_t k[KEY_MEMBER_LEN];
	key_member_encode(k, &o, UINT64_C(0x1122334455667788));
	assert_memory_equal(k, "\x00\x01\x00\x02\0\0\0\0\0\0\0\x03"
	                       "\x11\x22\x33\x44\x55\x66\x77\x88",
	                    KEY_MEMBER_LEN);
}

static void test_key_log_layout_and_round_trip(void **state)
{
	(void)state;
	key_obj o = { 1, 2, 3 };
	uint8_t k[KEY_LOG_LEN];
	key_log_encode(k, &o, 1);
	/* ~1 = 0xff..fe: the object prefix, then the inverted sequence. */
	assert_memory_equal(k, "\x00\x01\x00\x02\0\0\0\0\0\0\0\x03"
	                       "\xff\xff\xff\xff\xff\xff\xff\xfe",
	                    KEY_LOG_LEN);
	key_obj d;
	uint64_t seq = 0;
	assert_int_equal(key_log_decode(k, KEY_LOG_LEN, &d, &seq), 0);
	assert_int_equal(seq, 1);
	assert_int_equal(cmp_obj(&d, &o), 0);
	const uint64_t seqs[] = { 0, UINT64_MAX, UINT64_C(1) << 63 };
	for (size_t i = 0; i < 3; i++) {
		key_log_encode(k, &o, seqs[i]);
		assert_int_equal(key_log_decode(k, KEY_LOG_LEN, &d, &seq), 0);
		assert_int_equal(seq, seqs[i]);
	}
	assert_int_equal(key_log_decode(k, KEY_LOG_LEN - 1, &d, &seq), -1);
	assert_int_equal(key_log_decode(k, KEY_LOG_LEN + 1, &d, &seq), -1);
	assert_int_equal(key_log_decode(k, 0, &d, &seq), -1);
}

static void test_key_log_newest_first(void **state)
{
	(void)state;
	uint64_t s = 777;
	for (int i = 0; i < 100000; i++) {
		key_obj a = rnd_obj(&s), b = rnd_obj(&s);
		uint64_t sa = rnd_next(&s) % 2 ? rnd_next(&s) % 300 : rnd_next(&s);
		uint64_t sb = rnd_next(&s) % 2 ? rnd_next(&s) % 300 : rnd_next(&s);
		uint8_t ka[KEY_LOG_LEN], kb[KEY_LOG_LEN];
		key_log_encode(ka, &a, sa);
		key_log_encode(kb, &b, sb);
		int want = cmp_obj(&a, &b);
		if (want == 0)
			want = cmp_u64(sb, sa); /* higher seq first */
		assert_int_equal(sign_of(memcmp(ka, kb, KEY_LOG_LEN)), want);
	}
	/* The extremes of one object. */
	key_obj o = { 7, 7, 7 };
	uint8_t k0[KEY_LOG_LEN], kmax[KEY_LOG_LEN];
	key_log_encode(k0, &o, 0);
	key_log_encode(kmax, &o, UINT64_MAX);
	assert_true(memcmp(kmax, k0, KEY_LOG_LEN) < 0);
}

static void test_key_hist_layout_and_order(void **state)
{
	(void)state;
	uint8_t p[KEY_HIST_PREFIX_LEN], k[KEY_HIST_LEN];
	key_hist_prefix_encode(p, 0x0102, 0x0304);
	assert_memory_equal(p, "\0\0\0\0\0\0\x01\x02\x03\x04",
	                    KEY_HIST_PREFIX_LEN);
	key_hist_encode(k, 0x0102, 0x0304, 2);
	assert_memory_equal(k, p, KEY_HIST_PREFIX_LEN);
	assert_memory_equal(k + KEY_HIST_PREFIX_LEN,
	                    "\xff\xff\xff\xff\xff\xff\xff\xfd", 8);
	uint64_t member = 0, seq = 0;
	uint16_t ktype = 0;
	assert_int_equal(key_hist_decode(k, KEY_HIST_LEN, &member, &ktype,
	                                 &seq), 0);
	assert_int_equal(member, 0x0102);
	assert_int_equal(ktype, 0x0304);
	assert_int_equal(seq, 2);
	assert_int_equal(key_hist_decode(k, KEY_HIST_LEN - 1, &member, &ktype,
	                                 &seq), -1);
	assert_int_equal(key_hist_decode(k, KEY_HIST_LEN + 1, &member, &ktype,
	                                 &seq), -1);
	uint64_t s = 99;
	for (int i = 0; i < 100000; i++) {
		uint64_t ma = rnd_next(&s) % 4, mb = rnd_next(&s) % 4;
		uint16_t ta = (uint16_t)(rnd_next(&s) % 3);
		uint16_t tb = (uint16_t)(rnd_next(&s) % 3);
		uint64_t sa = rnd_next(&s) % 2 ? rnd_next(&s) % 9 : rnd_next(&s);
		uint64_t sb = rnd_next(&s) % 2 ? rnd_next(&s) % 9 : rnd_next(&s);
		uint8_t ka[KEY_HIST_LEN], kb[KEY_HIST_LEN];
		key_hist_encode(ka, ma, ta, sa);
		key_hist_encode(kb, mb, tb, sb);
		int want = cmp_u64(ma, mb);
		if (want == 0)
			want = cmp_u64(ta, tb);
		if (want == 0)
			want = cmp_u64(sb, sa);
		assert_int_equal(sign_of(memcmp(ka, kb, KEY_HIST_LEN)), want);
	}
}

/* ---- values -------------------------------------------------------------- */

static void check_val_log(const val_log *v)
{
	uint8_t buf[VAL_EVENT_MAX];
	size_t n = val_log_encode(buf, v);
	assert_in_range(n, 4, VAL_EVENT_MAX);
	val_log d;
	memset(&d, 0, sizeof(d));
	assert_int_equal(val_log_decode(buf, n, &d), 0);
	assert_int_equal(d.member, v->member);
	assert_int_equal(d.at_ms, v->at_ms);
	assert_int_equal(d.delta, v->delta);
	assert_int_equal(d.total, v->total);
	/* Every shorter prefix is truncated; one more byte is trailing. */
	for (size_t cut = 0; cut < n; cut++)
		assert_int_equal(val_log_decode(buf, cut, &d), -1);
	uint8_t longer[VAL_EVENT_MAX + 1];
	memcpy(longer, buf, n);
	longer[n] = 0;
	assert_int_equal(val_log_decode(longer, n + 1, &d), -1);
}

static void test_val_log_round_trip(void **state)
{
	(void)state;
	const val_log cases[] = {
		{ 0, TALLY_EPOCH_MS, 1, 1 },
		{ 1, 1, -1, 0 },
		{ 42, TALLY_AT_MS_MAX, 5, INT64_MAX },
		{ UINT64_MAX, INT64_MAX, INT64_MIN, INT64_MIN },
		{ UINT64_MAX, INT64_MIN + TALLY_EPOCH_MS, INT64_MAX, -1 },
		{ 12345, INT64_C(1700000000000), -3, 99 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_val_log(&cases[i]);
}

static void test_val_log_exact_bytes(void **state)
{
	(void)state;
	/* At the epoch the time is a single zero byte. */
	val_log v = { 0, TALLY_EPOCH_MS, 1, -1 };
	uint8_t buf[VAL_EVENT_MAX];
	assert_int_equal(val_log_encode(buf, &v), 4);
	assert_memory_equal(buf, "\x00\x00\x02\x01", 4);
	/* One ms before the epoch: zigzag(-1) = 1. */
	v.member = 300;
	v.at_ms = TALLY_EPOCH_MS - 1;
	assert_int_equal(val_log_encode(buf, &v), 5);
	assert_memory_equal(buf, "\xac\x02\x01\x02\x01", 5);
	/* The worst case fills VAL_EVENT_MAX exactly. */
	val_log w = { UINT64_MAX, INT64_MIN + TALLY_EPOCH_MS, INT64_MIN,
		INT64_MIN };
	assert_int_equal(val_log_encode(buf, &w), VAL_EVENT_MAX);
}

static void test_val_log_rejects_at_overflow(void **state)
{
	(void)state;
	/* A relative time one past what fits once the epoch is added. */
	uint8_t buf[VAL_EVENT_MAX];
	size_t n = varint_put_u64(buf, 0);
	n += varint_put_i64(buf + n, INT64_MAX - TALLY_EPOCH_MS + 1);
	n += varint_put_i64(buf + n, 1);
	n += varint_put_i64(buf + n, 1);
	val_log d;
	assert_int_equal(val_log_decode(buf, n, &d), -1);
	/* The largest relative time that fits decodes to INT64_MAX. */
	n = varint_put_u64(buf, 0);
	n += varint_put_i64(buf + n, INT64_MAX - TALLY_EPOCH_MS);
	n += varint_put_i64(buf + n, 1);
	n += varint_put_i64(buf + n, 1);
	assert_int_equal(val_log_decode(buf, n, &d), 0);
	assert_int_equal(d.at_ms, INT64_MAX);
	assert_int_equal(val_log_decode(NULL, 0, &d), -1);
}

static void check_val_hist(const val_hist *v)
{
	uint8_t buf[VAL_EVENT_MAX];
	size_t n = val_hist_encode(buf, v);
	assert_in_range(n, 4, VAL_EVENT_MAX);
	val_hist d;
	memset(&d, 0, sizeof(d));
	assert_int_equal(val_hist_decode(buf, n, &d), 0);
	assert_int_equal(d.ctype, v->ctype);
	assert_int_equal(d.content, v->content);
	assert_int_equal(d.at_ms, v->at_ms);
	assert_int_equal(d.delta, v->delta);
	for (size_t cut = 0; cut < n; cut++)
		assert_int_equal(val_hist_decode(buf, cut, &d), -1);
	uint8_t longer[VAL_EVENT_MAX + 1];
	memcpy(longer, buf, n);
	longer[n] = 0x01;
	assert_int_equal(val_hist_decode(longer, n + 1, &d), -1);
}

static void test_val_hist_round_trip(void **state)
{
	(void)state;
	const val_hist cases[] = {
		{ 0, 0, TALLY_EPOCH_MS, 1 },
		{ 1, 1, 1, -1 },
		{ UINT16_MAX, UINT64_MAX, INT64_MAX, INT64_MIN },
		{ 300, 5, INT64_MIN + TALLY_EPOCH_MS, INT64_MAX },
		{ 7, 123456789, TALLY_AT_MS_MAX, 2 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_val_hist(&cases[i]);
	uint8_t buf[VAL_EVENT_MAX];
	val_hist v = { 1, 2, TALLY_EPOCH_MS + 1, -1 };
	assert_int_equal(val_hist_encode(buf, &v), 4);
	assert_memory_equal(buf, "\x01\x02\x02\x01", 4);
}

static void test_val_hist_rejects_bad_fields(void **state)
{
	(void)state;
	uint8_t buf[VAL_EVENT_MAX];
	val_hist d;
	/* ctype 65536 does not fit u16. */
	size_t n = varint_put_u64(buf, UINT16_MAX + 1);
	n += varint_put_u64(buf + n, 1);
	n += varint_put_i64(buf + n, 0);
	n += varint_put_i64(buf + n, 1);
	assert_int_equal(val_hist_decode(buf, n, &d), -1);
	/* at_ms overflow. */
	n = varint_put_u64(buf, 1);
	n += varint_put_u64(buf + n, 1);
	n += varint_put_i64(buf + n, INT64_MAX);
	n += varint_put_i64(buf + n, 1);
	assert_int_equal(val_hist_decode(buf, n, &d), -1);
	/* An overlong varint inside. */
	memset(buf, 0x80, 11);
	buf[11] = 0;
	assert_int_equal(val_hist_decode(buf, 12, &d), -1);
	assert_int_equal(val_hist_decode(NULL, 0, &d), -1);
}

/* ---- chunks ---------------------------------------------------------------- */

/* Deterministic values that reach every byte length, extremes included. */
static uint64_t chunk_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	switch (*s % 5) {
	case 0: return *s >> (*s % 64);
	case 1: return 0;
	case 2: return UINT64_MAX - (*s % 3);
	default: return *s;
	}
}

/* n events newest first: seqs strictly decreasing from top, by gaps of
 * 1 to 1000, and one of 2^62 when top is UINT64_MAX (a gap of 9 bytes). */
static void chunk_seqs(uint64_t *seq, size_t n, uint64_t top, uint64_t *s)
{
	assert_true(top >= (uint64_t)n * 1000);
	seq[0] = top;
	for (size_t i = 1; i < n; i++)
		seq[i] = seq[i - 1] - 1 - chunk_rand(s) % 1000;
	if (top == UINT64_MAX && n > 2)
		for (size_t i = 1; i < n; i++)
			seq[i] -= UINT64_C(1) << 62;
}

static void check_log_events(const val_log *a, const val_log *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(a[i].member, b[i].member);
		assert_int_equal(a[i].at_ms, b[i].at_ms);
		assert_int_equal(a[i].delta, b[i].delta);
		assert_int_equal(a[i].total, b[i].total);
	}
}

static void test_chunk_log_round_trip(void **state)
{
	(void)state;
	uint64_t s = 88172645463325252ull, seq[EV_CHUNK_MAX + 1],
	         dseq[EV_CHUNK_MAX];
	val_log v[EV_CHUNK_MAX + 1], d[EV_CHUNK_MAX];
	uint8_t k[KEY_LOG_LEN], buf[VAL_CHUNK_MAX + VAL_EVENT_MAX + 10];
	key_obj o = { 3, 4, 0x0102030405060708ull }, od;
	size_t sizes[] = { 1, 2, 3, 17, EV_CHUNK_MAX }, got;

	for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
		size_t n = sizes[t], len;

		chunk_seqs(seq, n + 1, t % 2 ? UINT64_MAX : 5000000, &s);
		for (size_t i = 0; i <= n; i++) {
			v[i].member = chunk_rand(&s);
			/* The first time is stored whole (from the epoch),
			 * the others as differences: any int64 at all. */
			v[i].at_ms = (int64_t)chunk_rand(&s);
			v[i].delta = (int64_t)chunk_rand(&s);
			v[i].total = (int64_t)chunk_rand(&s);
		}
		v[0].at_ms = INT64_MIN + TALLY_EPOCH_MS + (int64_t)(t * 7);
		if (t == 1)
			v[0].at_ms = INT64_MAX;
		key_log_encode(k, &o, seq[n - 1]);
		len = val_log_chunk_encode(buf, seq, v, n, NULL);
		assert_in_range(len, 4, VAL_CHUNK_MAX);
		if (n == 1) { /* a chunk of one is the single value */
			uint8_t one[VAL_EVENT_MAX];

			assert_int_equal(val_log_encode(one, &v[0]), len);
			assert_memory_equal(one, buf, len);
		}
		assert_int_equal(log_entry_decode(k, sizeof k, buf, len, NULL,
		                                  &od, dseq, d, &got), 0);
		assert_int_equal(got, n);
		assert_int_equal(od.ctype, 3);
		assert_int_equal(od.content, o.content);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(dseq[i], seq[i]);
		check_log_events(d, v, n);
		/* A shorter value decodes only where an event ends, as the
		 * events before the cut (RocksDB's checksums, not this
		 * format, catch a value cut short). */
		for (size_t cut = 0; cut < len; cut++)
			if (log_entry_decode(k, sizeof k, buf, cut, NULL, &od,
			                     dseq, d, &got) == 0) {
				assert_true(got >= 1 && got < n);
				check_log_events(d, v, got);
			}
		buf[len] = 0;
		assert_int_equal(log_entry_decode(k, sizeof k, buf, len + 1,
		                                  NULL, &od, dseq, d, &got),
		                 -1);
		assert_int_equal(log_entry_decode(k, KEY_LOG_LEN - 1, buf,
		                                  len, NULL, &od, dseq, d,
		                                  &got), -1);
		assert_int_equal(log_entry_decode(k, KEY_LOG_LEN + 1, buf,
		                                  len, NULL, &od, dseq, d,
		                                  &got), -1);
	}
	/* EV_CHUNK_MAX + 1 events are refused: the readers' room. */
	size_t len = val_log_chunk_encode(buf, seq, v, EV_CHUNK_MAX, NULL);
	len += varint_put_u64(buf + len, 1);
	len += varint_put_u64(buf + len, 5);
	len += varint_put_i64(buf + len, 0);
	len += varint_put_i64(buf + len, 1);
	len += varint_put_i64(buf + len, 0);
	key_log_encode(k, &o, seq[EV_CHUNK_MAX - 1] - 1);
	assert_int_equal(log_entry_decode(k, sizeof k, buf, len, NULL, &od,
	                                  dseq, d, &got), -1);
	/* The key names the oldest; the newest is it plus the gaps, which
	 * may reach UINT64_MAX and not pass it. A gap of 0 is refused. */
	for (uint64_t gap = 0; gap <= 6; gap++) {
		len = val_log_encode(buf, &(val_log){ 1, 2, 3, 4 });
		len += varint_put_u64(buf + len, gap);
		len += varint_put_u64(buf + len, 5);
		len += varint_put_i64(buf + len, 0);
		len += varint_put_i64(buf + len, 1);
		len += varint_put_i64(buf + len, 0);
		key_log_encode(k, &o, UINT64_MAX - 5);
		assert_int_equal(log_entry_decode(k, sizeof k, buf, len, NULL,
		                                  &od, dseq, d, &got),
		                 gap >= 1 && gap <= 5 ? 0 : -1);
		if (gap >= 1 && gap <= 5) {
			assert_int_equal(got, 2);
			assert_int_equal(dseq[0], UINT64_MAX - 5 + gap);
			assert_int_equal(dseq[1], UINT64_MAX - 5);
			assert_int_equal(d[1].total, 4 - 3);
		}
	}
	assert_int_equal(log_entry_decode(NULL, 0, buf, 4, NULL, &od, dseq, d,
	                                  &got), -1);
}

static void test_chunk_hist_round_trip(void **state)
{
	(void)state;
	uint64_t s = 0x9E3779B97F4A7C15ull, seq[EV_CHUNK_MAX], dseq[EV_CHUNK_MAX];
	val_hist v[EV_CHUNK_MAX], d[EV_CHUNK_MAX];
	uint8_t k[KEY_HIST_LEN], buf[VAL_CHUNK_MAX];
	uint64_t member;
	uint16_t ktype;
	size_t sizes[] = { 1, 2, 5, EV_CHUNK_MAX }, got;

	for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
		size_t n = sizes[t], len;

		chunk_seqs(seq, n, 1000000 + t, &s);
		for (size_t i = 0; i < n; i++) {
			v[i].ctype = (uint16_t)chunk_rand(&s);
			v[i].content = chunk_rand(&s);
			v[i].at_ms = (int64_t)chunk_rand(&s);
			v[i].delta = (int64_t)chunk_rand(&s);
		}
		v[0].at_ms = TALLY_AT_MS_MAX;
		key_hist_encode(k, 77, 9, seq[n - 1]);
		len = val_hist_chunk_encode(buf, seq, v, n, NULL);
		assert_int_equal(hist_entry_decode(k, sizeof k, buf, len, NULL,
		                                   &member, &ktype, dseq, d,
		                                   &got), 0);
		assert_int_equal(got, n);
		assert_int_equal(member, 77);
		assert_int_equal(ktype, 9);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(dseq[i], seq[i]);
			assert_int_equal(d[i].ctype, v[i].ctype);
			assert_int_equal(d[i].content, v[i].content);
			assert_int_equal(d[i].at_ms, v[i].at_ms);
			assert_int_equal(d[i].delta, v[i].delta);
		}
		for (size_t cut = 0; cut < len; cut++)
			if (hist_entry_decode(k, sizeof k, buf, cut, NULL,
			                      &member, &ktype, dseq, d,
			                      &got) == 0)
				assert_true(got >= 1 && got < n);
	}
	/* A ctype past u16 in a next event is refused. */
	size_t len = val_hist_encode(buf, &(val_hist){ 1, 2, 3, 4 });
	len += varint_put_u64(buf + len, 1);
	len += varint_put_u64(buf + len, UINT16_MAX + 1u);
	len += varint_put_u64(buf + len, 2);
	len += varint_put_i64(buf + len, 0);
	len += varint_put_i64(buf + len, 1);
	key_hist_encode(k, 77, 9, 10);
	assert_int_equal(hist_entry_decode(k, sizeof k, buf, len, NULL, &member,
	                                   &ktype, dseq, d, &got), -1);
	assert_int_equal(hist_entry_decode(k, KEY_HIST_LEN + 1, buf, len, NULL,
	                                   &member, &ktype, dseq, d, &got), -1);
}

/* A clock of two blocks' worth of slots, n filled: slot k holds base +
 * 1000 k, every fifth missing if holes. */
typedef struct test_clock {
	int64_t *blocks[EV_CLOCK_BLOCKS_MAX];
	ev_clock clk;
} test_clock;

static test_clock *test_clock_new(uint64_t n, int64_t base, int holes)
{
	test_clock *t = calloc(1, sizeof *t);

	assert_non_null(t);
	for (size_t b = 0; b < 2; b++) {
		t->blocks[b] = malloc(EV_CLOCK_BLOCK * sizeof *t->blocks[b]);
		assert_non_null(t->blocks[b]);
		for (size_t i = 0; i < EV_CLOCK_BLOCK; i++) {
			uint64_t k = b * EV_CLOCK_BLOCK + i;

			t->blocks[b][i] = holes && k % 5 == 4
			                          ? EV_CLOCK_NONE
			                          : base + (int64_t)k * 1000;
		}
	}
	assert_true(n <= 2 * EV_CLOCK_BLOCK);
	t->clk.blocks = t->blocks;
	t->clk.n = n;
	return t;
}

static void test_clock_free(test_clock *t)
{
	free(t->blocks[0]);
	free(t->blocks[1]);
	free(t);
}

/* The sample of seq, or -1 for none. */
static int64_t sample_or(const ev_clock *c, uint64_t seq)
{
	int64_t t = 0;

	if (ev_clock_sample(c, seq, &t) != 0)
		return -1;
	assert_true(t != -1);
	return t;
}

static void test_clock_sample(void **state)
{
	(void)state;
	const int64_t base = TALLY_EPOCH_MS + 123456789;
	test_clock *t = test_clock_new(EV_CLOCK_BLOCK + 10, base, 1);
	const ev_clock *c = &t->clk;

	/* Slot k holds event k * EV_CLOCK_EVERY + 1 and serves the
	 * EV_CLOCK_EVERY events from it on. */
	assert_int_equal(sample_or(c, 1), base);
	assert_int_equal(sample_or(c, EV_CLOCK_EVERY), base);
	assert_int_equal(sample_or(c, EV_CLOCK_EVERY + 1), base + 1000);
	assert_int_equal(sample_or(c, 3 * EV_CLOCK_EVERY + 1), base + 3000);
	/* The second block. */
	assert_int_equal(sample_or(c, EV_CLOCK_BLOCK * EV_CLOCK_EVERY + 1),
	                 base + (int64_t)EV_CLOCK_BLOCK * 1000);
	/* No sample: a missing slot, one past n, seq 0, no clock. */
	assert_int_equal(sample_or(c, 4 * EV_CLOCK_EVERY + 1), -1);
	assert_int_equal(sample_or(c, (EV_CLOCK_BLOCK + 10) * EV_CLOCK_EVERY +
	                                  1),
	                 -1);
	assert_int_equal(sample_or(c, UINT64_MAX), -1);
	assert_int_equal(sample_or(c, 0), -1);
	assert_int_equal(sample_or(NULL, 1), -1);
	/* A block passed over whole (never allocated) below n: none, not a
	 * read through NULL. */
	free(t->blocks[0]);
	t->blocks[0] = NULL;
	assert_int_equal(sample_or(c, 1), -1);
	assert_int_equal(sample_or(c, (EV_CLOCK_BLOCK - 1) * EV_CLOCK_EVERY),
	                 -1);
	assert_int_equal(sample_or(c, EV_CLOCK_BLOCK * EV_CLOCK_EVERY + 1),
	                 base + (int64_t)EV_CLOCK_BLOCK * 1000);
	test_clock_free(t);
}

static void test_chunk_clock(void **state)
{
	(void)state;
	const int64_t base = TALLY_EPOCH_MS + 2000000000;
	test_clock *t = test_clock_new(128, base, 0);
	test_clock *h = test_clock_new(128, base, 1);
	uint64_t s = 0x2545F4914F6CDD1Dull;
	uint64_t seq[EV_CHUNK_MAX], dseq[EV_CHUNK_MAX];
	val_log v[EV_CHUNK_MAX], d[EV_CHUNK_MAX];
	val_hist hv[EV_CHUNK_MAX], hd[EV_CHUNK_MAX];
	uint8_t k[KEY_LOG_LEN], hk[KEY_HIST_LEN], buf[VAL_CHUNK_MAX],
	        old[VAL_CHUNK_MAX];
	key_obj o = { 1, 2, 42 }, od;
	size_t len, olen, got;
	uint64_t member;
	uint16_t ktype;

	/* Seqs with samples, times any int64 (a time far from its sample
	 * still codes exactly). */
	for (size_t n = 1; n <= EV_CHUNK_MAX; n = n * 3 + 1) {
		for (size_t i = 0; i < n; i++)
			seq[i] = 70 * EV_CLOCK_EVERY - 1 - i * 500;
		for (size_t i = 0; i < n; i++) {
			v[i].member = chunk_rand(&s);
			v[i].at_ms = i % 4 == 3 ? (int64_t)chunk_rand(&s)
			                        : sample_or(&t->clk, seq[i]) +
			                                  (int64_t)(i % 9);
			v[i].delta = 1;
			v[i].total = (int64_t)(n - i);
			hv[i] = (val_hist){ 7, chunk_rand(&s), v[i].at_ms,
			                    i % 2 ? -1 : 1 };
		}
		key_log_encode(k, &o, seq[n - 1]);
		len = val_log_chunk_encode(buf, seq, v, n, &t->clk);
		assert_true(val_chunk_clocked(buf, len));
		assert_int_equal(log_entry_decode(k, sizeof k, buf, len,
		                                  &t->clk, &od, dseq, d, &got),
		                 0);
		assert_int_equal(got, n);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(dseq[i], seq[i]);
		check_log_events(d, v, n);
		/* Format 4 still reads as it was written, clock or not. */
		olen = val_log_chunk_encode(old, seq, v, n, NULL);
		assert_false(val_chunk_clocked(old, olen));
		assert_int_equal(log_entry_decode(k, sizeof k, old, olen,
		                                  &t->clk, &od, dseq, d, &got),
		                 0);
		check_log_events(d, v, got);
		/* A clock lacking a sample of the chunk (seq[0]'s block,
		 * 69, is one h lacks): format 4, read back whole; and a
		 * format 5 value read against it is refused, not given a
		 * time from nowhere. */
		olen = val_log_chunk_encode(old, seq, v, n, &h->clk);
		assert_false(val_chunk_clocked(old, olen));
		assert_int_equal(log_entry_decode(k, sizeof k, old, olen,
		                                  &h->clk, &od, dseq, d, &got),
		                 0);
		check_log_events(d, v, got);
		assert_int_equal(log_entry_decode(k, sizeof k, buf, len,
		                                  &h->clk, &od, dseq, d, &got),
		                 -1);
		assert_int_equal(log_entry_decode(k, sizeof k, buf, len, NULL,
		                                  &od, dseq, d, &got),
		                 -1);
		/* Cut short where an event ends, a value decodes the
		 * events before the cut with the wrong seqs (the key names
		 * the oldest), so with the wrong times too: RocksDB's
		 * checksums catch a value cut short, not this format. */
		for (size_t cut = 0; cut < len; cut++)
			if (log_entry_decode(k, sizeof k, buf, cut, &t->clk,
			                     &od, dseq, d, &got) == 0) {
				assert_true(got >= 1 && got < n);
				for (size_t i = 0; i < got; i++)
					assert_int_equal(d[i].member,
					                 v[i].member);
			}

		key_hist_encode(hk, 5, 2, seq[n - 1]);
		len = val_hist_chunk_encode(buf, seq, hv, n, &t->clk);
		assert_int_equal(hist_entry_decode(hk, sizeof hk, buf, len,
		                                   &t->clk, &member, &ktype,
		                                   dseq, hd, &got), 0);
		assert_int_equal(got, n);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(dseq[i], seq[i]);
			assert_int_equal(hd[i].content, hv[i].content);
			assert_int_equal(hd[i].at_ms, hv[i].at_ms);
			assert_int_equal(hd[i].delta, hv[i].delta);
		}
		assert_int_equal(hist_entry_decode(hk, sizeof hk, buf, len,
		                                   &h->clk, &member, &ktype,
		                                   dseq, hd, &got), -1);
	}
	/* A time within a byte's reach of its sample takes one byte: mark,
	 * ctype, content, residual, delta. */
	seq[0] = 3 * EV_CLOCK_EVERY + 5;
	hv[0] = (val_hist){ 1, 100, base + 3000 + 17, 1 };
	assert_int_equal(val_hist_chunk_encode(buf, seq, hv, 1, &t->clk),
	                 EV_CHUNK_MARK_LEN + 4);
	/* Format 4 took five bytes for it (2e9 ms after the epoch). */
	assert_int_equal(val_hist_chunk_encode(buf, seq, hv, 1, NULL), 8);
	/* A value that is only the mark, or the mark and a cut event, is
	 * refused. */
	assert_int_equal(hist_entry_decode(hk, sizeof hk, buf, 0, &t->clk,
	                                   &member, &ktype, dseq, hd, &got),
	                 -1);
	len = val_hist_chunk_encode(buf, seq, hv, 1, &t->clk);
	for (size_t cut = 0; cut < len; cut++)
		assert_int_equal(hist_entry_decode(hk, sizeof hk, buf, cut,
		                                   &t->clk, &member, &ktype,
		                                   dseq, hd, &got), -1);
	test_clock_free(h);
	test_clock_free(t);
}

static void test_val_i64(void **state)
{
	(void)state;
	const int64_t vals[] = { 0, 1, -1, INT64_MAX, INT64_MIN, 1000000 };
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		uint8_t buf[VARINT_MAX + 1];
		size_t n = val_i64_encode(buf, vals[i]);
		int64_t v = 0;
		assert_int_equal(val_i64_decode(buf, n, &v), 0);
		assert_int_equal(v, vals[i]);
		buf[n] = 0;
		assert_int_equal(val_i64_decode(buf, n + 1, &v), -1);
		for (size_t cut = 0; cut < n; cut++)
			assert_int_equal(val_i64_decode(buf, cut, &v), -1);
	}
	uint8_t one[1];
	assert_int_equal(val_i64_encode(one, -1), 1);
	assert_int_equal(one[0], 1);
}

/* ---- names --------------------------------------------------------------- */

static void test_name_valid(void **state)
{
	(void)state;
	assert_true(name_valid("a", 1));
	assert_true(name_valid("like", 4));
	assert_true(name_valid("Az09_.:-", 8));
	assert_true(name_valid("-", 1));
	char longest[TALLY_NAME_MAX + 2];
	memset(longest, 'x', sizeof(longest));
	assert_true(name_valid(longest, TALLY_NAME_MAX));
	assert_false(name_valid(longest, TALLY_NAME_MAX + 1));
	assert_false(name_valid("", 0));
	assert_false(name_valid(NULL, 0));
	assert_false(name_valid(NULL, 3));
	assert_false(name_valid("a b", 3));
	assert_false(name_valid("a/b", 3));
	assert_false(name_valid("a@b", 3));
	assert_false(name_valid("a\0b", 3));
	assert_false(name_valid("caf\xc3\xa9", 5));
	assert_false(name_valid("tab\t", 4));
	/* Only len bytes are read: a bad byte beyond them does not matter. */
	assert_true(name_valid("ok bad", 2));
	/* Every byte value, against the rule written out. */
	for (int c = 0; c < 256; c++) {
		char b = (char)c;
		int want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		           (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		           c == ':' || c == '-';

		assert_int_equal(name_valid(&b, 1), want);
	}
}

/* ---- record -------------------------------------------------------------- */

static void test_record_exact_layout(void **state)
{
	(void)state;
	record r = { 0x1234, 1, RECORD_EPOCH_MS + 5, 0xDEADBEEF, 0x01020304,
		-7 };
	int64_t w[3] = { 0, 0, 0 };
	assert_int_equal(record_encode(&r, w), RECORD_OK);
	/* 0x1234 << 42 = 0x0048d000'00000000, 1 << 41 = 0x00000200'00000000 */
	assert_int_equal((uint64_t)w[0], UINT64_C(0x0048D20000000005));
	assert_int_equal((uint64_t)w[1], UINT64_C(0xDEADBEEF01020304));
	assert_int_equal(w[2], -7);
	uint8_t p[RECORD_SIZE];
	record_pack(w, p);
	assert_memory_equal(p, "\x00\x48\xd2\x00\x00\x00\x00\x05"
	                       "\xde\xad\xbe\xef\x01\x02\x03\x04"
	                       "\xff\xff\xff\xff\xff\xff\xff\xf9", RECORD_SIZE);
	/* All zero fields at the epoch: all zero words. */
	record z = { 0, 0, RECORD_EPOCH_MS, 0, 0, 0 };
	assert_int_equal(record_encode(&z, w), RECORD_OK);
	assert_int_equal(w[0], 0);
	assert_int_equal(w[1], 0);
	assert_int_equal(w[2], 0);
	/* Every field at its maximum: 58 one bits, then 64. */
	record m = { UINT16_MAX, 1,
		RECORD_EPOCH_MS + (INT64_C(1) << RECORD_TS_BITS) - 1, UINT32_MAX,
		UINT32_MAX, INT64_MIN };
	assert_int_equal(record_encode(&m, w), RECORD_OK);
	assert_int_equal((uint64_t)w[0], UINT64_C(0x03FFFFFFFFFFFFFF));
	assert_int_equal(w[1], -1);
	assert_int_equal(w[2], INT64_MIN);
	/* The increment bit alone, and the content alone. */
	record i = { 0, 1, RECORD_EPOCH_MS, 1, 0, 0 };
	assert_int_equal(record_encode(&i, w), RECORD_OK);
	assert_int_equal(w[0], INT64_C(0x0000020000000000));
	assert_int_equal(w[1], INT64_C(0x0000000100000000));
}

static void check_record_round_trip(const record *r)
{
	int64_t w[3];
	assert_int_equal(record_encode(r, w), RECORD_OK);
	uint8_t p[RECORD_SIZE];
	int64_t u[3];
	record_pack(w, p);
	record_unpack(p, u);
	assert_memory_equal(u, w, sizeof(w));
	record d;
	memset(&d, 0xAA, sizeof(d));
	assert_int_equal(record_decode(u, &d), RECORD_OK);
	assert_int_equal(d.ktype, r->ktype);
	assert_int_equal(d.increment, r->increment);
	assert_int_equal(d.at_ms, r->at_ms);
	assert_int_equal(d.content, r->content);
	assert_int_equal(d.member, r->member);
	assert_int_equal(d.total, r->total);
}

static void test_record_round_trip(void **state)
{
	(void)state;
	uint64_t s = 4242;
	for (int i = 0; i < 100000; i++) {
		record r;
		r.ktype = (uint16_t)rnd_next(&s);
		r.increment = (int)(rnd_next(&s) & 1);
		r.at_ms = RECORD_EPOCH_MS +
		          (int64_t)(rnd_next(&s) >> (64 - RECORD_TS_BITS));
		r.content = rnd_next(&s) >> 32;
		r.member = rnd_next(&s) & UINT32_MAX;
		r.total = (int64_t)(rnd_next(&s) >> 1) *
		          ((rnd_next(&s) & 1) ? -1 : 1);
		check_record_round_trip(&r);
	}
}

static void test_record_refuses_out_of_range(void **state)
{
	(void)state;
	const record ok = { 3, 1, RECORD_EPOCH_MS + 1000, 5, 6, 7 };
	const int64_t ts_end = RECORD_EPOCH_MS + (INT64_C(1) << RECORD_TS_BITS);
	record bad[10];
	for (size_t i = 0; i < 10; i++)
		bad[i] = ok;
	bad[0].content = UINT64_C(1) << 32;
	bad[1].member = UINT64_C(1) << 32;
	bad[2].at_ms = RECORD_EPOCH_MS - 1;
	bad[3].at_ms = ts_end;
	bad[4].at_ms = INT64_MIN;
	bad[5].at_ms = INT64_MAX;
	bad[6].increment = 2;
	bad[7].increment = -1;
	bad[8].content = UINT64_MAX;
	bad[9].at_ms = 0;
	for (size_t i = 0; i < 10; i++) {
		int64_t w[3] = { 11, 22, 33 };
		assert_int_equal(record_encode(&bad[i], w), RECORD_ERANGE);
		/* Refused means untouched, never truncated. */
		assert_int_equal(w[0], 11);
		assert_int_equal(w[1], 22);
		assert_int_equal(w[2], 33);
	}
	record edge = ok;
	edge.at_ms = ts_end - 1;
	check_record_round_trip(&edge);
}

static void test_record_decode_rejects_top_bits(void **state)
{
	(void)state;
	record r;
	for (int bit = 58; bit < 64; bit++) {
		int64_t w[3] = { 0, 0, 0 };
		w[0] = (int64_t)(UINT64_C(1) << bit);
		if (bit == 63)
			w[0] = INT64_MIN;
		assert_int_equal(record_decode(w, &r), RECORD_EFORMAT);
	}
	int64_t neg[3] = { -1, 0, 0 };
	assert_int_equal(record_decode(neg, &r), RECORD_EFORMAT);
	/* Bit 57 is the top bit of ktype: valid. Words 1 and 2 are free. */
	int64_t w[3] = { INT64_C(1) << 57, -1, INT64_MIN };
	assert_int_equal(record_decode(w, &r), RECORD_OK);
	assert_int_equal(r.ktype, 0x8000);
	assert_int_equal(r.increment, 0);
	assert_int_equal(r.at_ms, RECORD_EPOCH_MS);
	assert_int_equal(r.content, UINT32_MAX);
	assert_int_equal(r.member, UINT32_MAX);
	assert_int_equal(r.total, INT64_MIN);
}

static void test_record_pack_unpack(void **state)
{
	(void)state;
	const int64_t w[3] = { INT64_C(0x0102030405060708), -2, INT64_MIN };
	uint8_t p[RECORD_SIZE];
	record_pack(w, p);
	assert_memory_equal(p, "\x01\x02\x03\x04\x05\x06\x07\x08"
	                       "\xff\xff\xff\xff\xff\xff\xff\xfe"
	                       "\x80\x00\x00\x00\x00\x00\x00\x00", RECORD_SIZE);
	int64_t u[3] = { 0, 0, 0 };
	record_unpack(p, u);
	assert_int_equal(u[0], w[0]);
	assert_int_equal(u[1], w[1]);
	assert_int_equal(u[2], w[2]);
}

/* ---- hmap ---------------------------------------------------------------- */

static void test_hash_bytes_is_xxh3(void **state)
{
	(void)state;
	assert_int_equal(hash_bytes("abc", 3), XXH3_64bits("abc", 3));
	assert_int_equal(hash_bytes(NULL, 0), XXH3_64bits("", 0));
	assert_true(hash_bytes("abc", 3) != hash_bytes("abd", 3));
}

/* Every hmap test runs on both kinds of map: state is the creator. */
typedef hmap *(*map_creator)(size_t value_size);
static map_creator mk_plain = hmap_create;
static map_creator mk_arena = hmap_create_arena;

static hmap *map_new(void **state, size_t value_size)
{
	return (*(map_creator *)*state)(value_size);
}

static void test_hmap_put_get_del(void **state)
{
	hmap *m = map_new(state, sizeof(int64_t));
	assert_non_null(m);
	assert_int_equal(hmap_count(m), 0);
	assert_null(hmap_get(m, "k", 1));
	int ins = -1;
	int64_t *v = hmap_put(m, "k", 1, &ins);
	assert_non_null(v);
	assert_int_equal(ins, 1);
	assert_int_equal(*v, 0); /* zero-filled */
	*v = 41;
	v = hmap_put(m, "k", 1, &ins);
	assert_int_equal(ins, 0);
	assert_int_equal(*v, 41);
	*v = 42;
	assert_int_equal(*(int64_t *)hmap_get(m, "k", 1), 42);
	assert_non_null(hmap_put(m, "kk", 2, NULL));
	assert_int_equal(hmap_count(m), 2);
	assert_int_equal(hmap_del(m, "k", 1), 1);
	assert_int_equal(hmap_del(m, "k", 1), 0);
	assert_null(hmap_get(m, "k", 1));
	assert_non_null(hmap_get(m, "kk", 2));
	assert_int_equal(hmap_count(m), 1);
	/* Re-inserting a deleted key starts from zero again. */
	v = hmap_put(m, "k", 1, &ins);
	assert_int_equal(ins, 1);
	assert_int_equal(*v, 0);
	hmap_free(m);
	hmap_free(NULL);
}

/* The _h forms, given a key's hash_bytes(), find what the plain forms
 * put, and the reverse, across maps; iteration gives each entry's hash. */
static void test_hmap_hashed_forms(void **state)
{
	hmap *a = map_new(state, sizeof(int64_t));
	hmap *b = hmap_create(sizeof(int64_t));
	char key[32];
	int ins;

	assert_non_null(a);
	assert_non_null(b);
	for (int i = 0; i < 1000; i++) {
		int n = snprintf(key, sizeof key, "key:%d", i);
		uint64_t h = hash_bytes(key, (size_t)n);
		int64_t *v = i % 2 ? hmap_put_h(a, key, (size_t)n, h, &ins)
		                   : hmap_put(a, key, (size_t)n, &ins);

		assert_non_null(v);
		assert_int_equal(ins, 1);
		*v = i;
		assert_non_null(hmap_put_h(b, key, (size_t)n, h, NULL));
	}
	for (int i = 0; i < 1000; i++) {
		int n = snprintf(key, sizeof key, "key:%d", i);
		uint64_t h = hash_bytes(key, (size_t)n);
		int64_t *v = hmap_get_h(a, key, (size_t)n, h);

		assert_non_null(v);
		assert_int_equal(*v, i);
		assert_ptr_equal(v, hmap_get(a, key, (size_t)n));
		assert_non_null(hmap_get_h(b, key, (size_t)n, h));
	}
	size_t pos = 0, len, seen = 0;
	const void *k;
	void *val;
	uint64_t h;

	while (hmap_next_h(a, &pos, &k, &len, &val, &h)) {
		assert_true(h == hash_bytes(k, len));
		seen++;
	}
	assert_int_equal(seen, 1000);
	for (int i = 0; i < 1000; i += 2) {
		int n = snprintf(key, sizeof key, "key:%d", i);

		assert_int_equal(hmap_del_h(a, key, (size_t)n,
		                            hash_bytes(key, (size_t)n)), 1);
		assert_null(hmap_get(a, key, (size_t)n));
	}
	assert_int_equal(hmap_count(a), 500);
	/* A key past the bound is in no map, whatever hash comes with it. */
	static char big[HMAP_KEY_MAX + 1];
	assert_null(hmap_put_h(a, big, sizeof big, 0, &ins));
	assert_null(hmap_get_h(a, big, sizeof big, 0));
	assert_int_equal(hmap_del_h(a, big, sizeof big, 0), 0);
	hmap_free(a);
	hmap_free(b);
}

static void test_hmap_value_sizes_and_alignment(void **state)
{
	const size_t sizes[] = { 1, 3, 8, 17, 256 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		hmap *m = map_new(state, sizes[i]);
		assert_non_null(m);
		for (int k = 0; k < 100; k++) {
			const uint8_t key[2] = { 'k', (uint8_t)k };
			uint8_t *v = hmap_put(m, key, sizeof(key), NULL);
			assert_non_null(v);
			assert_int_equal((uintptr_t)v % alignof(max_align_t), 0);
			memset(v, 0xEE, sizes[i]); /* whole value writable */
		}
		hmap_free(m);
	}
}

static void test_hmap_clear(void **state)
{
	hmap *m = map_new(state, 8);
	assert_non_null(m);
	for (uint64_t i = 0; i < 1000; i++)
		assert_non_null(hmap_put(m, &i, sizeof(i), NULL));
	assert_int_equal(hmap_count(m), 1000);
	hmap_clear(m);
	assert_int_equal(hmap_count(m), 0);
	size_t pos = 0;
	const void *k;
	size_t len;
	void *v;
	assert_int_equal(hmap_next(m, &pos, &k, &len, &v), 0);
	for (uint64_t i = 0; i < 1000; i++)
		assert_null(hmap_get(m, &i, sizeof(i)));
	int ins = 0;
	uint64_t key = 5;
	assert_non_null(hmap_put(m, &key, sizeof(key), &ins));
	assert_int_equal(ins, 1);
	assert_int_equal(hmap_count(m), 1);
	hmap_clear(m);
	hmap_clear(m); /* twice is fine */
	hmap_free(m);
}

/* put n keys from base on, then clear. */
static void fill_and_clear(hmap *m, uint64_t base, uint64_t n)
{
	for (uint64_t i = base; i < base + n; i++)
		assert_non_null(hmap_put(m, &i, sizeof(i), NULL));
	assert_int_equal(hmap_count(m), n);
	hmap_clear(m);
	assert_int_equal(hmap_count(m), 0);
}

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

/* Bytes the allocator holds for the program: unchanged across code that
 * allocates and frees nothing. Under AddressSanitizer, its allocator's
 * own count (glibc's does not see its allocations). */
#ifdef TEST_ASAN
size_t __sanitizer_get_current_allocated_bytes(void);

static size_t malloc_held(void)
{
	return __sanitizer_get_current_allocated_bytes();
}
#else
static size_t malloc_held(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}
#endif

/* The reserve test's key i: 9 to 24 bytes, i's bytes then a filler. */
static size_t reserve_key(uint8_t key[24], uint64_t i)
{
	memset(key, 0xA5, 24);
	memcpy(key, &i, sizeof i);
	return 9 + (size_t)(i % 16);
}

/* hmap_reserve: the next n inserts allocate nothing (an arena map's
 * entries included), so that the store's commit after its journal write
 * cannot fail for memory. A map that does not reserve does allocate over
 * the same inserts, so the check can fail. */
static void test_hmap_reserve_then_inserts_allocate_nothing(void **state)
{
	map_creator mk = *(map_creator *)*state;
	int arena = mk == mk_arena;

	for (int reserve = 1; reserve >= 0; reserve--) {
		hmap *m = map_new(state, sizeof(uint64_t));
		uint8_t key[24];
		size_t cap, held;

		assert_non_null(m);
		for (uint64_t i = 0; i < 1000; i++)
			assert_non_null(hmap_put(m, &i, sizeof i, NULL));
		if (reserve) {
			assert_int_equal(hmap_reserve(m, 50000, sizeof key), 0);
			/* Room already there: a second asks for nothing. */
			cap = hmap_capacity(m);
			held = malloc_held();
			assert_int_equal(hmap_reserve(m, 50000, sizeof key), 0);
			assert_int_equal(hmap_capacity(m), cap);
			assert_int_equal(malloc_held(), held);
			assert_int_equal(hmap_reserve(m, 0, 0), 0);
		}
		cap = hmap_capacity(m);
		held = malloc_held();
		/* Keys of 9 to 24 bytes, none longer than reserved. */
		for (uint64_t i = 0; i < 50000; i++) {
			uint64_t *v = hmap_put(m, key, reserve_key(key, i),
			                       NULL);

			assert_non_null(v);
			*v = i;
		}
		if (reserve) {
			assert_int_equal(hmap_capacity(m), cap);
			if (arena)
				assert_int_equal(malloc_held(), held);
		} else {
			assert_true(hmap_capacity(m) > cap);
			assert_true(malloc_held() > held);
		}
		assert_int_equal(hmap_count(m), 51000);
		for (uint64_t i = 0; i < 50000; i += 997) {
			uint64_t *v = hmap_get(m, key, reserve_key(key, i));

			assert_non_null(v);
			assert_int_equal(*v, i);
		}
		/* More than any table could take: refused, the map as it was. */
		assert_int_equal(hmap_reserve(m, SIZE_MAX, 8), -1);
		assert_int_equal(hmap_count(m), 51000);
		hmap_free(m);
	}
}

/* A map that asks gives back a table grown by one burst after a run of 16
 * small clears (not before, and not when a big clear breaks the run), and
 * the smaller table works as any; a map that does not ask keeps it. */
static void test_hmap_clear_shrinks_after_small_clears(void **state)
{
	hmap *m = map_new(state, 8);
	size_t big;

	assert_non_null(m);
	/* Without asking, a map keeps its table. */
	fill_and_clear(m, 0, 10000);
	for (int i = 0; i < 20; i++)
		fill_and_clear(m, 100000 + (uint64_t)i * 20, 20);
	assert_int_equal(hmap_capacity(m), 16384);
	hmap_shrink_on_clear(m);
	fill_and_clear(m, 0, 10000);
	big = hmap_capacity(m);
	assert_int_equal(big, 16384); /* 61% full: within the load limit */
	for (int i = 0; i < 15; i++)
		fill_and_clear(m, 100000 + (uint64_t)i * 20, 20);
	assert_int_equal(hmap_capacity(m), big);
	/* A big clear ends the run: 15 more small ones keep the table. */
	fill_and_clear(m, 0, 5000);
	for (int i = 0; i < 15; i++)
		fill_and_clear(m, 200000 + (uint64_t)(i * 400), i == 7 ? 300 : 20);
	assert_int_equal(hmap_capacity(m), big);
	/* The 16th in a row: twice the table that takes the run's largest
	 * count (300, not the last one's 20: 512 slots). */
	fill_and_clear(m, 300000, 20);
	assert_int_equal(hmap_capacity(m), 1024);
	/* A new run starts from its own counts. */
	for (int i = 0; i < 16; i++)
		fill_and_clear(m, 400000 + (uint64_t)i * 20, 20);
	assert_int_equal(hmap_capacity(m), 64);
	size_t pos = 0, len;
	const void *k;
	void *v;
	assert_int_equal(hmap_next(m, &pos, &k, &len, &v), 0);
	for (uint64_t i = 0; i < 3000; i++) {
		uint64_t *val = hmap_put(m, &i, sizeof(i), NULL);

		assert_non_null(val);
		*val = i * 3;
	}
	for (uint64_t i = 0; i < 3000; i++) {
		uint64_t *val = hmap_get(m, &i, sizeof(i));

		assert_non_null(val);
		assert_int_equal(*val, i * 3);
	}
	assert_int_equal(hmap_count(m), 3000);
	hmap_free(m);
}

/* A prefetch is a hint: whatever the key (present, deleted, absent, empty,
 * too long) and whichever pass, the map reads the same afterwards. */
static void test_hmap_prefetch_changes_nothing(void **state)
{
	hmap *m = map_new(state, sizeof(uint64_t));
	assert_non_null(m);
	uint8_t big[HMAP_KEY_MAX + 1];
	memset(big, 'b', sizeof big);
	for (int deep = 0; deep < 2; deep++) { /* on the empty table too */
		hmap_prefetch(m, "k", 1, deep);
		hmap_prefetch(m, NULL, 0, deep);
	}
	for (uint64_t i = 0; i < 5000; i++)
		*(uint64_t *)hmap_put(m, &i, sizeof(i), NULL) = i + 1;
	for (uint64_t i = 0; i < 5000; i += 3)
		assert_int_equal(hmap_del(m, &i, sizeof(i)), 1);
	size_t count = hmap_count(m);
	for (int deep = 0; deep < 2; deep++) {
		for (uint64_t i = 0; i < 10000; i++)
			hmap_prefetch(m, &i, sizeof(i), deep);
		hmap_prefetch(m, NULL, 0, deep);
		hmap_prefetch(m, big, sizeof big, deep);
	}
	assert_int_equal(hmap_count(m), count);
	for (uint64_t i = 0; i < 10000; i++) {
		uint64_t *v = hmap_get(m, &i, sizeof(i));
		if (i >= 5000 || i % 3 == 0) {
			assert_null(v);
		} else {
			assert_non_null(v);
			assert_int_equal(*v, i + 1);
		}
	}
	hmap_free(m);
}

static void test_hmap_grows_to_a_million(void **state)
{
	const uint64_t n = 1000000;
	hmap *m = map_new(state, sizeof(uint64_t));
	assert_non_null(m);
	for (uint64_t i = 0; i < n; i++) {
		int ins = 0;
		uint64_t *v = hmap_put(m, &i, sizeof(i), &ins);
		assert_non_null(v);
		assert_int_equal(ins, 1);
		*v = i * 3;
	}
	assert_int_equal(hmap_count(m), n);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t *v = hmap_get(m, &i, sizeof(i));
		assert_non_null(v);
		assert_int_equal(*v, i * 3);
	}
	uint64_t missing = n;
	assert_null(hmap_get(m, &missing, sizeof(missing)));
	/* A key of another length with the same leading bytes is distinct. */
	uint64_t zero = 0;
	assert_null(hmap_get(m, &zero, 4));
	for (uint64_t i = 0; i < n; i += 2)
		assert_int_equal(hmap_del(m, &i, sizeof(i)), 1);
	assert_int_equal(hmap_count(m), n / 2);
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(hmap_get(m, &i, sizeof(i)) != NULL, i % 2);
	/* Cleared and filled again: an arena map reuses its blocks, the
	 * huge ones past its first 2 MiB included, and the slot table. */
	hmap_clear(m);
	assert_int_equal(hmap_count(m), 0);
	for (uint64_t i = n; i-- > 0;) {
		uint64_t *v = hmap_put(m, &i, sizeof(i), NULL);
		assert_non_null(v);
		assert_int_equal((uintptr_t)v % alignof(max_align_t), 0);
		*v = i + 7;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t *v = hmap_get(m, &i, sizeof(i));
		assert_non_null(v);
		assert_int_equal(*v, i + 7);
	}
	hmap_free(m);
}

/* Fills m with n 8-byte keys whose value is their own number. */
static void fill_numbered(hmap *m, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t *v = hmap_put(m, &i, sizeof(i), NULL);
		assert_non_null(v);
		*v = i;
	}
}

static void test_hmap_iteration_visits_each_once(void **state)
{
	const uint64_t n = 20000;
	hmap *m = map_new(state, sizeof(uint64_t));
	assert_non_null(m);
	fill_numbered(m, n);
	uint8_t *seen = calloc(n, 1);
	assert_non_null(seen);
	size_t pos = 0, visits = 0, len = 0;
	const void *k;
	void *v;
	while (hmap_next(m, &pos, &k, &len, &v)) {
		uint64_t key;
		assert_int_equal(len, sizeof(key));
		memcpy(&key, k, sizeof(key));
		assert_int_equal(key, *(uint64_t *)v);
		assert_true(key < n);
		assert_int_equal(seen[key], 0);
		seen[key] = 1;
		visits++;
	}
	assert_int_equal(visits, n);
	/* The end is sticky. */
	assert_int_equal(hmap_next(m, &pos, &k, &len, &v), 0);
	free(seen);
	hmap_free(m);
}

static void test_hmap_delete_during_iteration(void **state)
{
	const uint64_t n = 50000;
	hmap *m = map_new(state, sizeof(uint64_t));
	assert_non_null(m);
	fill_numbered(m, n);
	uint8_t *seen = calloc(n, 1);
	assert_non_null(seen);
	/* First walk: delete the odd keys as they come. */
	size_t pos = 0, len = 0, visits = 0;
	const void *k;
	void *v;
	while (hmap_next(m, &pos, &k, &len, &v)) {
		uint64_t key = *(uint64_t *)v;
		assert_int_equal(seen[key], 0);
		seen[key] = 1;
		visits++;
		if (key % 2)
			assert_int_equal(hmap_del(m, k, len), 1);
	}
	assert_int_equal(visits, n);
	assert_int_equal(hmap_count(m), n / 2);
	/* Second walk: only even keys are left; delete them all. */
	pos = 0;
	visits = 0;
	while (hmap_next(m, &pos, &k, &len, &v)) {
		uint64_t key = *(uint64_t *)v;
		assert_int_equal(key % 2, 0);
		visits++;
		assert_int_equal(hmap_del(m, k, len), 1);
	}
	assert_int_equal(visits, n / 2);
	assert_int_equal(hmap_count(m), 0);
	pos = 0;
	assert_int_equal(hmap_next(m, &pos, &k, &len, &v), 0);
	/* The emptied map works as new. */
	fill_numbered(m, 100);
	assert_int_equal(hmap_count(m), 100);
	free(seen);
	hmap_free(m);
}

static void test_hmap_empty_key(void **state)
{
	hmap *m = map_new(state, 4);
	assert_non_null(m);
	int ins = 0;
	uint8_t *v = hmap_put(m, NULL, 0, &ins);
	assert_non_null(v);
	assert_int_equal(ins, 1);
	v[0] = 9;
	/* Any pointer with length 0 names the same key. */
	assert_ptr_equal(hmap_get(m, "x", 0), v);
	assert_null(hmap_get(m, "\0", 1));
	assert_non_null(hmap_put(m, "\0", 1, &ins));
	assert_int_equal(ins, 1);
	assert_int_equal(hmap_count(m), 2);
	size_t pos = 0, len = 99, zero_len = 0;
	const void *k;
	void *val;
	while (hmap_next(m, &pos, &k, &len, &val))
		zero_len += len == 0;
	assert_int_equal(zero_len, 1);
	assert_int_equal(hmap_del(m, NULL, 0), 1);
	assert_null(hmap_get(m, NULL, 0));
	assert_int_equal(hmap_count(m), 1);
	hmap_free(m);
}

static void test_hmap_key_max(void **state)
{
	hmap *m = map_new(state, 8);
	assert_non_null(m);
	uint8_t key[HMAP_KEY_MAX + 1];
	memset(key, 'q', sizeof(key));
	int ins = 7;
	assert_null(hmap_put(m, key, HMAP_KEY_MAX + 1, &ins));
	assert_int_equal(ins, 0);
	assert_null(hmap_get(m, key, HMAP_KEY_MAX + 1));
	assert_int_equal(hmap_del(m, key, HMAP_KEY_MAX + 1), 0);
	assert_int_equal(hmap_count(m), 0);
	assert_non_null(hmap_put(m, key, HMAP_KEY_MAX, &ins));
	assert_int_equal(ins, 1);
	/* Keys that differ only in their last byte are distinct. */
	key[HMAP_KEY_MAX - 1] = 'r';
	assert_null(hmap_get(m, key, HMAP_KEY_MAX));
	assert_non_null(hmap_put(m, key, HMAP_KEY_MAX, &ins));
	assert_int_equal(ins, 1);
	assert_int_equal(hmap_count(m), 2);
	size_t pos = 0, len = 0;
	const void *k;
	void *v;
	while (hmap_next(m, &pos, &k, &len, &v)) {
		assert_int_equal(len, HMAP_KEY_MAX);
		assert_memory_equal(k, key, HMAP_KEY_MAX - 1);
	}
	hmap_free(m);
}

static void test_hmap_tombstone_churn(void **state)
{
	/* Many inserts and deletes of fresh keys with few live at a time:
	 * tombstones must be swept, or probes would never end. */
	hmap *m = map_new(state, sizeof(uint64_t));
	assert_non_null(m);
	uint64_t s = 1;
	for (uint64_t i = 0; i < 300000; i++) {
		uint64_t *v = hmap_put(m, &i, sizeof(i), NULL);
		assert_non_null(v);
		*v = i;
		if (i >= 10) {
			uint64_t old = i - 10;
			assert_int_equal(hmap_del(m, &old, sizeof(old)), 1);
		}
		/* And some misses, which walk the whole probe run. */
		uint64_t miss = rnd_next(&s) | (UINT64_C(1) << 63);
		assert_null(hmap_get(m, &miss, sizeof(miss)));
	}
	assert_int_equal(hmap_count(m), 10);
	for (uint64_t i = 300000 - 10; i < 300000; i++)
		assert_int_equal(*(uint64_t *)hmap_get(m, &i, sizeof(i)), i);
	hmap_free(m);
}

static void test_hmap_random_against_model(void **state)
{
	/* A random mix of operations on a small key space, checked against a
	 * plain array: the map must agree after every step. */
	enum { KEYS = 512 };
	int64_t model[KEYS];
	uint8_t present[KEYS];
	memset(present, 0, sizeof(present));
	hmap *m = map_new(state, sizeof(int64_t));
	assert_non_null(m);
	uint64_t s = 2024;
	size_t live = 0;
	for (int step = 0; step < 200000; step++) {
		uint16_t k = (uint16_t)(rnd_next(&s) % KEYS);
		uint64_t op = rnd_next(&s) % 10;
		if (op < 5) {
			int ins = 0;
			int64_t *v = hmap_put(m, &k, sizeof(k), &ins);
			assert_non_null(v);
			assert_int_equal(ins, !present[k]);
			live += ins;
			present[k] = 1;
			*v = model[k] = step;
		} else if (op < 8) {
			assert_int_equal(hmap_del(m, &k, sizeof(k)), present[k]);
			live -= present[k];
			present[k] = 0;
		} else {
			int64_t *v = hmap_get(m, &k, sizeof(k));
			assert_int_equal(v != NULL, present[k]);
			if (v != NULL)
				assert_int_equal(*v, model[k]);
		}
		assert_int_equal(hmap_count(m), live);
	}
	hmap_free(m);
}

/* ------------------------------------------------------------------------
 * glob_match
 * --------------------------------------------------------------------- */

static int gm(const char *pat, const char *s, int nocase)
{
	return glob_match(pat, strlen(pat), s, strlen(s), nocase);
}

static void test_glob_stars_and_marks(void **state)
{
	(void)state;
	assert_true(gm("*", "", 0));
	assert_true(gm("*", "appendonly", 0));
	assert_true(gm("", "", 0));
	assert_false(gm("", "a", 0));
	assert_true(gm("append*", "appendonly", 0));
	assert_true(gm("append*", "appendfsync", 0));
	assert_true(gm("append*", "append", 0));
	assert_false(gm("append*", "appen", 0));
	assert_true(gm("*only", "appendonly", 0));
	assert_true(gm("a*d*y", "appendonly", 0));
	assert_false(gm("a*d*x", "appendonly", 0));
	assert_true(gm("***", "x", 0));
	assert_true(gm("?ave", "save", 0));
	assert_false(gm("?ave", "ave", 0));
	assert_false(gm("sav?", "sav", 0));
	assert_true(gm("*?", "a", 0));
	assert_false(gm("*?", "", 0));
	/* The star backtracks past a partial match. */
	assert_true(gm("*ab", "aab", 0));
	assert_true(gm("*aab", "aaab", 0));
	assert_false(gm("*ab", "aba", 0));
}

static void test_glob_sets_escapes_and_case(void **state)
{
	(void)state;
	assert_true(gm("[sa]ave", "save", 0));
	assert_false(gm("[^s]ave", "save", 0));
	assert_true(gm("[^x]ave", "save", 0));
	assert_true(gm("port[0-9]", "port7", 0));
	assert_true(gm("port[9-0]", "port7", 0));
	assert_false(gm("port[0-6]", "port7", 0));
	assert_true(gm("a[\\]]b", "a]b", 0));
	assert_true(gm("a\\*b", "a*b", 0));
	assert_false(gm("a\\*b", "axb", 0));
	assert_true(gm("a\\", "a\\", 0));
	/* A '[' left open takes the rest of the pattern as its set. */
	assert_true(gm("a[bc", "ac", 0));
	assert_false(gm("a[bc", "ad", 0));
	assert_true(gm("SAVE", "save", 1));
	assert_false(gm("SAVE", "save", 0));
	assert_true(gm("[A-Z]ave", "save", 1));
	assert_false(gm("[A-Z]ave", "save", 0));
	/* Bytes past len are not read; a NUL is a byte. */
	assert_true(glob_match("abX", 2, "abY", 2, 0));
	assert_true(glob_match("a?c", 3, "a\0c", 3, 0));
}

static void test_glob_many_stars_stay_quick(void **state)
{
	char pat[4001], s[4001];

	(void)state;
	/* "*a*a*a...*b" against "aaaa...": a recursive matcher takes
	 * exponential time; this one at most plen * slen steps. */
	for (int i = 0; i < 2000; i++) {
		pat[2 * i] = '*';
		pat[2 * i + 1] = 'a';
	}
	pat[3999] = 'b';
	pat[4000] = '\0';
	memset(s, 'a', 4000);
	s[4000] = '\0';
	assert_false(gm(pat, s, 0));
	pat[3999] = 'a';
	assert_true(gm(pat, s, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_glob_stars_and_marks),
		cmocka_unit_test(test_glob_sets_escapes_and_case),
		cmocka_unit_test(test_glob_many_stars_stay_quick),
		cmocka_unit_test(test_varint_u64_boundaries_round_trip),
		cmocka_unit_test(test_varint_u64_exact_bytes),
		cmocka_unit_test(test_varint_zigzag_boundaries),
		cmocka_unit_test(test_varint_random_round_trip),
		cmocka_unit_test(test_varint_truncated_rejected),
		cmocka_unit_test(test_varint_overlong_rejected),
		cmocka_unit_test(test_varint_stops_at_its_end),
		cmocka_unit_test(test_be_fixed_ints),
		cmocka_unit_test(test_key_obj_layout),
		cmocka_unit_test(test_key_obj_and_member_sort_numerically),
		cmocka_unit_test(test_key_member_layout),
		cmocka_unit_test(test_key_log_layout_and_round_trip),
		cmocka_unit_test(test_key_log_newest_first),
		cmocka_unit_test(test_key_hist_layout_and_order),
		cmocka_unit_test(test_val_log_round_trip),
		cmocka_unit_test(test_val_log_exact_bytes),
		cmocka_unit_test(test_val_log_rejects_at_overflow),
		cmocka_unit_test(test_val_hist_round_trip),
		cmocka_unit_test(test_val_hist_rejects_bad_fields),
		cmocka_unit_test(test_chunk_log_round_trip),
		cmocka_unit_test(test_chunk_hist_round_trip),
		cmocka_unit_test(test_clock_sample),
		cmocka_unit_test(test_chunk_clock),
		cmocka_unit_test(test_val_i64),
		cmocka_unit_test(test_name_valid),
		cmocka_unit_test(test_record_exact_layout),
		cmocka_unit_test(test_record_round_trip),
		cmocka_unit_test(test_record_refuses_out_of_range),
		cmocka_unit_test(test_record_decode_rejects_top_bits),
		cmocka_unit_test(test_record_pack_unpack),
		cmocka_unit_test(test_hash_bytes_is_xxh3),
		cmocka_unit_test_prestate(test_hmap_put_get_del, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_put_get_del, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_reserve_then_inserts_allocate_nothing, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_reserve_then_inserts_allocate_nothing, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_hashed_forms, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_hashed_forms, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_value_sizes_and_alignment, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_value_sizes_and_alignment, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_clear, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_clear, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_clear_shrinks_after_small_clears, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_clear_shrinks_after_small_clears, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_prefetch_changes_nothing, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_prefetch_changes_nothing, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_grows_to_a_million, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_grows_to_a_million, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_iteration_visits_each_once, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_iteration_visits_each_once, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_delete_during_iteration, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_delete_during_iteration, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_empty_key, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_empty_key, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_key_max, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_key_max, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_tombstone_churn, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_tombstone_churn, &mk_arena),
		cmocka_unit_test_prestate(test_hmap_random_against_model, &mk_plain),
		cmocka_unit_test_prestate(test_hmap_random_against_model, &mk_arena),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
