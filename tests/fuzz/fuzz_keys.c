/* fuzz_keys.c: libFuzzer harness of the store's key and value layouts
 * (core/keys.c). Every decoder is run on arbitrary bytes of every length,
 * in a buffer of exactly that length (a read past it is an ASan report);
 * whatever decodes must encode back to the same key, or to a value that
 * decodes the same (chunks of events too); byte order of keys must be
 * numeric order. */
#include <string.h>

#include "core/keys.h"
#include "core/varint.h"
#include "fuzz.h"
#include "tally.h"

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int sign(int v)
{
	return (v > 0) - (v < 0);
}

/* Fixed-size keys at p[0, n): decode is exact-length, and decode then
 * encode gives the same bytes. */
static void keys_at(const uint8_t *p, size_t n)
{
	key_obj o;
	uint64_t seq, member;
	uint16_t ktype;
	uint8_t buf[KEY_MEMBER_LEN];

	int rc = key_log_decode(p, n, &o, &seq);
	FUZZ_CHECK((rc == 0) == (n == KEY_LOG_LEN));
	if (rc == 0) {
		key_log_encode(buf, &o, seq);
		FUZZ_CHECK(memcmp(buf, p, KEY_LOG_LEN) == 0);
		/* A log key is its object key, then the inverted seq. */
		key_obj_encode(buf, &o);
		FUZZ_CHECK(memcmp(buf, p, KEY_OBJ_LEN) == 0);
		key_member_encode(buf, &o, ~seq);
		FUZZ_CHECK(memcmp(buf, p, KEY_MEMBER_LEN) == 0);
	}
	rc = key_hist_decode(p, n, &member, &ktype, &seq);
	FUZZ_CHECK((rc == 0) == (n == KEY_HIST_LEN));
	if (rc == 0) {
		key_hist_encode(buf, member, ktype, seq);
		FUZZ_CHECK(memcmp(buf, p, KEY_HIST_LEN) == 0);
		key_hist_prefix_encode(buf, member, ktype);
		FUZZ_CHECK(memcmp(buf, p, KEY_HIST_PREFIX_LEN) == 0);
	}
	if (n >= KEY_OBJ_LEN) {
		key_obj_decode(p, &o);
		key_obj_encode(buf, &o);
		FUZZ_CHECK(memcmp(buf, p, KEY_OBJ_LEN) == 0);
	}
}

/* Values at p[0, n): what decodes re-encodes to at most n bytes that
 * decode to the same value. */
static void values_at(const uint8_t *p, size_t n)
{
	uint8_t buf[VAL_EVENT_MAX];
	val_log l, l2;
	val_hist h, h2;
	int64_t i, i2;

	if (val_log_decode(p, n, &l) == 0) {
		size_t k = val_log_encode(buf, &l);
		FUZZ_CHECK(k <= n);
		FUZZ_CHECK(val_log_decode(buf, k, &l2) == 0);
		FUZZ_CHECK(l.member == l2.member && l.at_ms == l2.at_ms);
		FUZZ_CHECK(l.delta == l2.delta && l.total == l2.total);
		/* One byte less is never a whole value. */
		FUZZ_CHECK(val_log_decode(buf, k - 1, &l2) != 0);
	}
	if (val_hist_decode(p, n, &h) == 0) {
		size_t k = val_hist_encode(buf, &h);
		FUZZ_CHECK(k <= n);
		FUZZ_CHECK(val_hist_decode(buf, k, &h2) == 0);
		FUZZ_CHECK(h.ctype == h2.ctype && h.content == h2.content);
		FUZZ_CHECK(h.at_ms == h2.at_ms && h.delta == h2.delta);
		FUZZ_CHECK(val_hist_decode(buf, k - 1, &h2) != 0);
	}
	if (val_i64_decode(p, n, &i) == 0) {
		size_t k = val_i64_encode(buf, i);
		FUZZ_CHECK(k <= n);
		FUZZ_CHECK(val_i64_decode(buf, k, &i2) == 0 && i2 == i);
	}
}

/* A clock with samples 1000 ms apart, every seventh slot missing, for
 * the chunks of format 5. */
static const ev_clock *fuzz_clock(void)
{
	static int64_t *blocks[EV_CLOCK_BLOCKS_MAX];
	static int64_t block[EV_CLOCK_BLOCK];
	static ev_clock clk;

	if (blocks[0] == NULL) {
		for (size_t k = 0; k < EV_CLOCK_BLOCK; k++)
			block[k] = k % 7 == 3
			                   ? EV_CLOCK_NONE
			                   : TALLY_EPOCH_MS + (int64_t)k * 1000;
		blocks[0] = block;
		clk.blocks = blocks;
		clk.n = 1000;
	}
	return &clk;
}

/* A log or history entry: its key, then its value, from p[0, n). What
 * decodes encodes back, in the same format, to the same key and to a
 * value of at most the bytes given that decodes the same. */
static void log_entry_at(const uint8_t *p, size_t n)
{
	static uint64_t seq[EV_CHUNK_MAX], seq2[EV_CHUNK_MAX];
	static val_log v[EV_CHUNK_MAX], v2[EV_CHUNK_MAX];
	static uint8_t k[KEY_LOG_LEN], buf[VAL_CHUNK_MAX];
	const ev_clock *clk = fuzz_clock(), *as;
	key_obj o, o2;
	size_t cnt, cnt2, len;

	if (n < KEY_LOG_LEN ||
	    log_entry_decode(p, KEY_LOG_LEN, p + KEY_LOG_LEN, n - KEY_LOG_LEN,
	                     clk, &o, seq, v, &cnt) != 0)
		return;
	as = val_chunk_clocked(p + KEY_LOG_LEN, n - KEY_LOG_LEN) ? clk : NULL;
	FUZZ_CHECK(cnt >= 1 && cnt <= EV_CHUNK_MAX);
	for (size_t i = 1; i < cnt; i++)
		FUZZ_CHECK(seq[i] < seq[i - 1]);
	key_log_encode(k, &o, seq[cnt - 1]);
	len = val_log_chunk_encode(buf, seq, v, cnt, as);
	FUZZ_CHECK(memcmp(k, p, KEY_LOG_LEN) == 0);
	FUZZ_CHECK(len <= n - KEY_LOG_LEN);
	FUZZ_CHECK(log_entry_decode(k, KEY_LOG_LEN, buf, len, clk, &o2, seq2,
	                            v2, &cnt2) == 0 && cnt2 == cnt);
	for (size_t i = 0; i < cnt; i++) {
		FUZZ_CHECK(seq2[i] == seq[i] && v2[i].member == v[i].member);
		FUZZ_CHECK(v2[i].at_ms == v[i].at_ms);
		FUZZ_CHECK(v2[i].delta == v[i].delta);
		FUZZ_CHECK(v2[i].total == v[i].total);
	}
}

static void hist_entry_at(const uint8_t *p, size_t n)
{
	static uint64_t seq[EV_CHUNK_MAX], seq2[EV_CHUNK_MAX];
	static val_hist v[EV_CHUNK_MAX], v2[EV_CHUNK_MAX];
	static uint8_t k[KEY_HIST_LEN], buf[VAL_CHUNK_MAX];
	uint64_t member, member2;
	uint16_t ktype, ktype2;
	const ev_clock *clk = fuzz_clock(), *as;
	size_t cnt, cnt2, len;

	if (n < KEY_HIST_LEN ||
	    hist_entry_decode(p, KEY_HIST_LEN, p + KEY_HIST_LEN,
	                      n - KEY_HIST_LEN, clk, &member, &ktype, seq, v,
	                      &cnt) != 0)
		return;
	as = val_chunk_clocked(p + KEY_HIST_LEN, n - KEY_HIST_LEN) ? clk : NULL;
	FUZZ_CHECK(cnt >= 1 && cnt <= EV_CHUNK_MAX);
	key_hist_encode(k, member, ktype, seq[cnt - 1]);
	len = val_hist_chunk_encode(buf, seq, v, cnt, as);
	FUZZ_CHECK(memcmp(k, p, KEY_HIST_LEN) == 0);
	FUZZ_CHECK(len <= n - KEY_HIST_LEN);
	FUZZ_CHECK(hist_entry_decode(k, KEY_HIST_LEN, buf, len, clk, &member2,
	                             &ktype2, seq2, v2, &cnt2) == 0 &&
	           cnt2 == cnt);
	for (size_t i = 0; i < cnt; i++) {
		FUZZ_CHECK(seq2[i] == seq[i] && v2[i].ctype == v[i].ctype);
		FUZZ_CHECK(v2[i].content == v[i].content);
		FUZZ_CHECK(v2[i].at_ms == v[i].at_ms);
		FUZZ_CHECK(v2[i].delta == v[i].delta);
	}
}

static void entries_at(const uint8_t *p, size_t n)
{
	log_entry_at(p, n);
	hist_entry_at(p, n);
}

/* Two object keys and seqs from the input: memcmp order of the encoded
 * keys is the numeric order of (ctype, ktype, content), and within one
 * object a larger seq sorts first (newest first). */
static void key_order(const uint8_t *p, size_t n)
{
	key_obj a, b;
	uint8_t ka[KEY_LOG_LEN], kb[KEY_LOG_LEN];

	if (n < 2 * KEY_LOG_LEN)
		return;
	key_obj_decode(p, &a);
	key_obj_decode(p + KEY_LOG_LEN, &b);
	uint64_t sa = be64_get(p + KEY_OBJ_LEN);
	uint64_t sb = be64_get(p + KEY_LOG_LEN + KEY_OBJ_LEN);
	/* Often the same object, so the seq order is exercised. */
	if (p[0] & 1)
		b = a;
	int want = cmp_u64(a.ctype, b.ctype);
	if (want == 0)
		want = cmp_u64(a.ktype, b.ktype);
	if (want == 0)
		want = cmp_u64(a.content, b.content);
	key_obj_encode(ka, &a);
	key_obj_encode(kb, &b);
	FUZZ_CHECK(sign(memcmp(ka, kb, KEY_OBJ_LEN)) == want);
	key_log_encode(ka, &a, sa);
	key_log_encode(kb, &b, sb);
	if (want == 0)
		want = cmp_u64(sb, sa);
	FUZZ_CHECK(sign(memcmp(ka, kb, KEY_LOG_LEN)) == want);
}

/* name_valid against its definition: 1..TALLY_NAME_MAX of
 * [A-Za-z0-9_.:-]. */
static void names(const uint8_t *p, size_t n)
{
	int want = n >= 1 && n <= TALLY_NAME_MAX;
	for (size_t i = 0; i < n && want; i++)
		want = (p[i] >= 'a' && p[i] <= 'z') ||
		       (p[i] >= 'A' && p[i] <= 'Z') ||
		       (p[i] >= '0' && p[i] <= '9') || p[i] == '_' ||
		       p[i] == '.' || p[i] == ':' || p[i] == '-';
	FUZZ_CHECK(name_valid((const char *)p, n) == want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	/* A copy of exactly each length, so that a decoder reading one byte
	 * past what it was given is caught even mid-input. */
	uint8_t *copy = malloc(size);
	FUZZ_CHECK(copy != NULL);
	for (size_t n = 0; n <= size && n <= 2 * KEY_LOG_LEN + 8; n++) {
		uint8_t *p = copy + (size - n);
		memcpy(p, data, n);
		keys_at(p, n);
		values_at(p, n);
		names(p, n);
	}
	/* And the whole input once more, whatever its length. */
	keys_at(data, size);
	values_at(data, size);
	entries_at(data, size);
	names(data, size);
	key_order(data, size);
	free(copy);
	return 0;
}
