/* keys.c: encoders and strict decoders for every stored key and value.
 * Keys are fixed-size big-endian so byte order is numeric order; values are
 * varints so they stay short. Decoders reject anything not exactly valid. */
#include "core/keys.h"

#include <assert.h>
#include <string.h>

#include "core/varint.h"
#include "tally.h"

/* Every key field lands inside its key; checked once at compile time. */
_Static_assert(KEY_OBJ_LEN == 2 + 2 + 8, "object key layout");
_Static_assert(KEY_MEMBER_LEN == KEY_OBJ_LEN + 8, "member key layout");
_Static_assert(KEY_LOG_LEN == KEY_OBJ_LEN + 8, "log key layout");
_Static_assert(KEY_HIST_PREFIX_LEN == 8 + 2, "hist prefix layout");
_Static_assert(KEY_HIST_LEN == KEY_HIST_PREFIX_LEN + 8, "hist key layout");
/* The longest value is four 10-byte varints (log) or 3 + 3 * 10 (hist). */
_Static_assert(VAL_EVENT_MAX >= 4 * VARINT_MAX, "log value room");
_Static_assert(VAL_EVENT_MAX >= 3 + 3 * VARINT_MAX, "hist value room");

void key_obj_encode(uint8_t out[KEY_OBJ_LEN], const key_obj *o)
{
	assert(out != NULL);
	assert(o != NULL);
	be16_put(out, o->ctype);
	be16_put(out + 2, o->ktype);
	be64_put(out + 4, o->content);
}

void key_obj_decode(const uint8_t in[KEY_OBJ_LEN], key_obj *o)
{
	assert(in != NULL);
	assert(o != NULL);
	o->ctype = be16_get(in);
	o->ktype = be16_get(in + 2);
	o->content = be64_get(in + 4);
}

void key_member_encode(uint8_t out[KEY_MEMBER_LEN], const key_obj *o,
                       uint64_t member)
{
	assert(out != NULL);
	assert(o != NULL);
	key_obj_encode(out, o);
	be64_put(out + KEY_OBJ_LEN, member);
}

void key_log_encode(uint8_t out[KEY_LOG_LEN], const key_obj *o, uint64_t seq)
{
	assert(out != NULL);
	assert(o != NULL);
	key_obj_encode(out, o);
	/* Inverted so that a forward scan of one object is newest first. */
	be64_put(out + KEY_OBJ_LEN, ~seq);
}

int key_log_decode(const uint8_t *in, size_t len, key_obj *o, uint64_t *seq)
{
	assert(o != NULL);
	assert(seq != NULL);
	if (in == NULL || len != KEY_LOG_LEN)
		return -1;
	key_obj_decode(in, o);
	*seq = ~be64_get(in + KEY_OBJ_LEN);
	return 0;
}

void key_hist_prefix_encode(uint8_t out[KEY_HIST_PREFIX_LEN], uint64_t member,
                            uint16_t ktype)
{
	assert(out != NULL);
	be64_put(out, member);
	be16_put(out + 8, ktype);
}

void key_hist_encode(uint8_t out[KEY_HIST_LEN], uint64_t member,
                     uint16_t ktype, uint64_t seq)
{
	assert(out != NULL);
	key_hist_prefix_encode(out, member, ktype);
	/* Inverted, as in the log: newest first within one member and type. */
	be64_put(out + KEY_HIST_PREFIX_LEN, ~seq);
}

int key_hist_decode(const uint8_t *in, size_t len, uint64_t *member,
                    uint16_t *ktype, uint64_t *seq)
{
	assert(member != NULL && ktype != NULL);
	assert(seq != NULL);
	if (in == NULL || len != KEY_HIST_LEN)
		return -1;
	*member = be64_get(in);
	*ktype = be16_get(in + 8);
	*seq = ~be64_get(in + KEY_HIST_PREFIX_LEN);
	return 0;
}

/* ---- values -------------------------------------------------------------- */

/* Times are stored relative to TALLY_EPOCH_MS so that today's times take
 * 6 bytes instead of 7. Callers pass real times (the API allows
 * 1..TALLY_AT_MS_MAX), so a time so early that the subtraction would
 * overflow is a broken invariant, not bad input. */
static size_t put_at_ms(uint8_t *buf, int64_t at_ms)
{
	assert(at_ms >= INT64_MIN + TALLY_EPOCH_MS);
	return varint_put_i64(buf, at_ms - TALLY_EPOCH_MS);
}

/* A small cursor over a value being decoded: each read advances it, and the
 * decoder checks at the end that every byte was consumed. After the first
 * failure every read returns 0 and the error sticks. */
typedef struct val_reader {
	const uint8_t *p;
	size_t left;
	int err;
} val_reader;

static uint64_t read_u64(val_reader *r)
{
	uint64_t v = 0;
	size_t used = 0;
	if (r->err || varint_get_u64(r->p, r->left, &v, &used) != 0) {
		r->err = 1;
		return 0;
	}
	assert(used >= 1);
	assert(used <= r->left);
	r->p += used;
	r->left -= used;
	return v;
}

static int64_t read_i64(val_reader *r)
{
	return zigzag_decode(read_u64(r));
}

/* A relative time; adding the epoch back must not overflow int64 (only
 * corrupt bytes can ask for that). */
static int64_t read_at_ms(val_reader *r)
{
	int64_t rel = read_i64(r);
	if (rel > INT64_MAX - TALLY_EPOCH_MS) {
		r->err = 1;
		return 0;
	}
	return rel + TALLY_EPOCH_MS;
}

/* 0 when every read succeeded and no byte is left over. */
static int reader_done(const val_reader *r)
{
	return r->err || r->left != 0 ? -1 : 0;
}


size_t val_log_encode(uint8_t *buf, const val_log *v)
{
	assert(buf != NULL);
	assert(v != NULL);
	size_t n = varint_put_u64(buf, v->member);
	n += put_at_ms(buf + n, v->at_ms);
	n += varint_put_i64(buf + n, v->delta);
	n += varint_put_i64(buf + n, v->total);
	assert(n <= VAL_EVENT_MAX);
	return n;
}

/* One log value's fields, as val_log_encode() writes them. */
static void read_log(val_reader *r, val_log *v)
{
	v->member = read_u64(r);
	v->at_ms = read_at_ms(r);
	v->delta = read_i64(r);
	v->total = read_i64(r);
}

int val_log_decode(const uint8_t *buf, size_t len, val_log *v)
{
	assert(v != NULL);
	assert(buf != NULL || len == 0);
	val_reader r = { buf, len, 0 };
	val_log out;
	read_log(&r, &out);
	if (reader_done(&r) != 0)
		return -1;
	*v = out;
	return 0;
}

size_t val_hist_encode(uint8_t *buf, const val_hist *v)
{
	assert(buf != NULL);
	assert(v != NULL);
	size_t n = varint_put_u64(buf, v->ctype);
	n += varint_put_u64(buf + n, v->content);
	n += put_at_ms(buf + n, v->at_ms);
	n += varint_put_i64(buf + n, v->delta);
	assert(n <= VAL_EVENT_MAX);
	return n;
}

/* A ctype: a u16 as a varint (anything larger fails the reader). */
static uint16_t read_ctype(val_reader *r)
{
	uint64_t ctype = read_u64(r);

	if (ctype > UINT16_MAX)
		r->err = 1;
	return r->err ? 0 : (uint16_t)ctype;
}

/* One history value's fields, as val_hist_encode() writes them. */
static void read_hist(val_reader *r, val_hist *v)
{
	v->ctype = read_ctype(r);
	v->content = read_u64(r);
	v->at_ms = read_at_ms(r);
	v->delta = read_i64(r);
}

int val_hist_decode(const uint8_t *buf, size_t len, val_hist *v)
{
	assert(v != NULL);
	assert(buf != NULL || len == 0);
	val_reader r = { buf, len, 0 };
	val_hist out;
	read_hist(&r, &out);
	if (reader_done(&r) != 0)
		return -1;
	*v = out;
	return 0;
}

/* ---- the clock ----------------------------------------------------------- */

int ev_clock_sample(const ev_clock *clk, uint64_t seq, int64_t *t)
{
	/* Seqs start at 1: slot k is the time of event k * EVERY + 1.
	 * Seq 0 wraps past any clock. */
	uint64_t k = (seq - 1) >> EV_CLOCK_SHIFT;
	const int64_t *block;

	assert(t != NULL);
	if (clk == NULL || k >= clk->n)
		return -1;
	assert(clk->n <= EV_CLOCK_SAMPLES_MAX);
	/* A clock that skipped whole blocks (a folder of an older format
	 * upgraded mid-block, seqs given back) has no memory for them. */
	block = clk->blocks[k >> EV_CLOCK_BLOCK_SHIFT];
	if (block == NULL || block[k & (EV_CLOCK_BLOCK - 1)] == EV_CLOCK_NONE)
		return -1;
	*t = block[k & (EV_CLOCK_BLOCK - 1)];
	return 0;
}

/* ---- chunks -------------------------------------------------------------- */

/* Each event: a seq varint and at most one single value's fields. */
_Static_assert(VAL_CHUNK_MAX >= EV_CHUNK_MAX * (VAL_EVENT_MAX + VARINT_MAX) +
                                EV_CHUNK_MARK_LEN,
               "chunk value room");

/* Format 5's first bytes: a non-minimal varint for 0. */
static const uint8_t chunk_mark[EV_CHUNK_MARK_LEN] = { 0x80, 0x00 };

/* Differences wrap (two's complement), so every pair of int64 codes
 * exactly, overflow or not. */
static int64_t wrap_sub(int64_t a, int64_t b)
{
	return (int64_t)((uint64_t)a - (uint64_t)b);
}

static int64_t wrap_add(int64_t a, int64_t b)
{
	return (int64_t)((uint64_t)a + (uint64_t)b);
}

/* The seq of event i (i >= 1) as the gap from the event before. */
static size_t put_seq(uint8_t *buf, const uint64_t *seq, size_t i)
{
	assert(seq[i - 1] > seq[i]);
	return varint_put_u64(buf, seq[i - 1] - seq[i]);
}

/* Event i's time, as the format codes it: format 5 (pred, one sample per
 * event) its residual from its sample; format 4 (pred NULL) the first's
 * from the epoch, the others' from the newer one's. */
static size_t put_time(uint8_t *buf, const int64_t *at, size_t i,
                       const int64_t *pred)
{
	if (pred != NULL)
		return varint_put_i64(buf, wrap_sub(at[i], pred[i]));
	if (i == 0)
		return put_at_ms(buf, at[0]);
	return varint_put_i64(buf, wrap_sub(at[i - 1], at[i]));
}

/* Format 5 when clk has every event's sample (into pred; returns pred),
 * else format 4 (NULL): a chunk never points at a sample that is not
 * there, so a missing one on read is damage, not a guess. */
static const int64_t *predict(const ev_clock *clk, const uint64_t *seq,
                              size_t n, int64_t *pred)
{
	if (clk == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (ev_clock_sample(clk, seq[i], &pred[i]) != 0)
			return NULL;
	return pred;
}

static size_t put_mark(uint8_t *buf, const int64_t *pred)
{
	if (pred == NULL)
		return 0;
	memcpy(buf, chunk_mark, sizeof chunk_mark);
	return sizeof chunk_mark;
}

size_t val_log_chunk_encode(uint8_t *buf, const uint64_t *seq,
                            const val_log *v, size_t n, const ev_clock *clk)
{
	int64_t at[EV_CHUNK_MAX], pbuf[EV_CHUNK_MAX];
	const int64_t *pred;
	size_t len;

	assert(buf != NULL && seq != NULL && v != NULL);
	assert(n >= 1 && n <= EV_CHUNK_MAX);
	for (size_t i = 0; i < n; i++)
		at[i] = v[i].at_ms;
	pred = predict(clk, seq, n, pbuf);
	len = put_mark(buf, pred);
	len += varint_put_u64(buf + len, v[0].member);
	len += put_time(buf + len, at, 0, pred);
	len += varint_put_i64(buf + len, v[0].delta);
	len += varint_put_i64(buf + len, v[0].total);
	for (size_t i = 1; i < n; i++) {
		int64_t implied = wrap_sub(v[i - 1].total, v[i - 1].delta);

		len += put_seq(buf + len, seq, i);
		len += varint_put_u64(buf + len, v[i].member);
		len += put_time(buf + len, at, i, pred);
		len += varint_put_i64(buf + len, v[i].delta);
		len += varint_put_i64(buf + len, wrap_sub(implied, v[i].total));
	}
	assert(len <= VAL_CHUNK_MAX);
	return len;
}

size_t val_hist_chunk_encode(uint8_t *buf, const uint64_t *seq,
                             const val_hist *v, size_t n,
                             const ev_clock *clk)
{
	int64_t at[EV_CHUNK_MAX], pbuf[EV_CHUNK_MAX];
	const int64_t *pred;
	size_t len;

	assert(buf != NULL && seq != NULL && v != NULL);
	assert(n >= 1 && n <= EV_CHUNK_MAX);
	for (size_t i = 0; i < n; i++)
		at[i] = v[i].at_ms;
	pred = predict(clk, seq, n, pbuf);
	len = put_mark(buf, pred);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			len += put_seq(buf + len, seq, i);
		len += varint_put_u64(buf + len, v[i].ctype);
		len += varint_put_u64(buf + len, v[i].content);
		len += put_time(buf + len, at, i, pred);
		len += varint_put_i64(buf + len, v[i].delta);
	}
	assert(len <= VAL_CHUNK_MAX);
	return len;
}

/* The gap from event i - 1 to event i (i >= 1), >= 1, kept in seq[i] as
 * the distance from the newest until seqs_fix() turns distances into
 * seqs: the key names the oldest, so the newest is the oldest plus the
 * span of the gaps, which must not pass UINT64_MAX. */
static void read_gap(val_reader *r, uint64_t *seq, size_t i, uint64_t oldest)
{
	uint64_t d = read_u64(r);

	if (d == 0 || d > UINT64_MAX - oldest - seq[i - 1])
		r->err = 1;
	seq[i] = r->err ? 0 : seq[i - 1] + d;
}

static void seqs_fix(uint64_t *seq, size_t n, uint64_t oldest)
{
	uint64_t span = seq[n - 1];

	for (size_t i = 0; i < n; i++)
		seq[i] = oldest + (span - seq[i]);
}

int val_chunk_clocked(const uint8_t *v, size_t len)
{
	assert(v != NULL || len == 0);
	return len >= sizeof chunk_mark &&
	       memcmp(v, chunk_mark, sizeof chunk_mark) == 0;
}

/* Whether the value is format 5; if so, the reader skips its mark. */
static int read_mark(val_reader *r)
{
	if (!val_chunk_clocked(r->p, r->left))
		return 0;
	r->p += sizeof chunk_mark;
	r->left -= sizeof chunk_mark;
	return 1;
}

/* Event i's time as put_time() wrote it; format 5 keeps the residual in
 * at[i] until times_fix() knows the seqs. */
static int64_t read_time(val_reader *r, const int64_t *at, size_t i, int v5)
{
	if (v5)
		return read_i64(r);
	if (i == 0)
		return read_at_ms(r);
	return wrap_sub(at[i - 1], read_i64(r));
}

/* Format 5: each residual in at[] plus its event's sample; -1 when one
 * is missing (the writer had them all: META lost an entry). */
static int times_fix(int64_t *at, const uint64_t *seq, size_t n,
                     const ev_clock *clk)
{
	int64_t pbuf[EV_CHUNK_MAX];
	const int64_t *pred = predict(clk, seq, n, pbuf);

	assert(n <= EV_CHUNK_MAX);
	if (pred == NULL)
		return -1;
	for (size_t i = 0; i < n; i++)
		at[i] = wrap_add(at[i], pred[i]);
	return 0;
}

int log_entry_decode(const uint8_t *k, size_t klen, const uint8_t *v,
                     size_t vlen, const ev_clock *clk, key_obj *o,
                     uint64_t *seq, val_log *out, size_t *n)
{
	val_reader r = { v, vlen, 0 };
	int64_t at[EV_CHUNK_MAX];
	uint64_t oldest;
	size_t cnt = 0;
	int v5;

	assert(o != NULL && seq != NULL && out != NULL && n != NULL);
	assert(v != NULL || vlen == 0);
	if (key_log_decode(k, klen, o, &oldest) != 0)
		return -1;
	v5 = read_mark(&r);
	seq[0] = 0;
	do {
		val_log *e = &out[cnt];

		if (cnt == EV_CHUNK_MAX)
			return -1;
		if (cnt > 0)
			read_gap(&r, seq, cnt, oldest);
		e->member = read_u64(&r);
		at[cnt] = read_time(&r, at, cnt, v5);
		e->delta = read_i64(&r);
		e->total = read_i64(&r);
		/* After the first, the running total is coded against the
		 * one the newer event implies. */
		if (cnt > 0)
			e->total = wrap_sub(wrap_sub(out[cnt - 1].total,
			                             out[cnt - 1].delta),
			                    e->total);
		cnt++;
	} while (!r.err && r.left > 0);
	if (reader_done(&r) != 0)
		return -1;
	seqs_fix(seq, cnt, oldest);
	if (v5 && times_fix(at, seq, cnt, clk) != 0)
		return -1;
	for (size_t i = 0; i < cnt; i++)
		out[i].at_ms = at[i];
	*n = cnt;
	return 0;
}

int hist_entry_decode(const uint8_t *k, size_t klen, const uint8_t *v,
                      size_t vlen, const ev_clock *clk, uint64_t *member,
                      uint16_t *ktype, uint64_t *seq, val_hist *out,
                      size_t *n)
{
	val_reader r = { v, vlen, 0 };
	int64_t at[EV_CHUNK_MAX];
	uint64_t oldest;
	size_t cnt = 0;
	int v5;

	assert(member != NULL && ktype != NULL && seq != NULL);
	assert(out != NULL && n != NULL);
	assert(v != NULL || vlen == 0);
	if (key_hist_decode(k, klen, member, ktype, &oldest) != 0)
		return -1;
	v5 = read_mark(&r);
	seq[0] = 0;
	do {
		val_hist *e = &out[cnt];

		if (cnt == EV_CHUNK_MAX)
			return -1;
		if (cnt > 0)
			read_gap(&r, seq, cnt, oldest);
		e->ctype = read_ctype(&r);
		e->content = read_u64(&r);
		at[cnt] = read_time(&r, at, cnt, v5);
		e->delta = read_i64(&r);
		cnt++;
	} while (!r.err && r.left > 0);
	if (reader_done(&r) != 0)
		return -1;
	seqs_fix(seq, cnt, oldest);
	if (v5 && times_fix(at, seq, cnt, clk) != 0)
		return -1;
	for (size_t i = 0; i < cnt; i++)
		out[i].at_ms = at[i];
	*n = cnt;
	return 0;
}

int ev_time_ok(int64_t at_ms)
{
	return at_ms >= 1 && at_ms <= TALLY_AT_MS_MAX;
}

int log_entry_sane(const uint64_t *seq, const val_log *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (seq[i] == 0 || !ev_time_ok(v[i].at_ms))
			return 0;
	return 1;
}

int hist_entry_sane(const uint64_t *seq, const val_hist *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (seq[i] == 0 || v[i].ctype == 0 || !ev_time_ok(v[i].at_ms))
			return 0;
	return 1;
}

size_t val_i64_encode(uint8_t *buf, int64_t v)
{
	assert(buf != NULL);
	size_t n = varint_put_i64(buf, v);
	assert(n >= 1 && n <= VARINT_MAX);
	return n;
}

int val_i64_decode(const uint8_t *buf, size_t len, int64_t *v)
{
	assert(v != NULL);
	assert(buf != NULL || len == 0);
	int64_t out = 0;
	size_t used = 0;
	if (varint_get_i64(buf, len, &out, &used) != 0 || used != len)
		return -1;
	*v = out;
	return 0;
}

/* ---- names --------------------------------------------------------------- */

/* ASCII only, by range: isalnum() would depend on the locale. */
static int name_char_valid(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
	       c == '-';
}

int name_valid(const char *name, size_t len)
{
	if (name == NULL || len == 0 || len > TALLY_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (!name_char_valid((unsigned char)name[i]))
			return 0;
	}
	return 1;
}
