/* record.c: the reference design's three-word event record, for export and
 * import. Every field is range-checked on the way in: a value that does not
 * fit its bits is refused, because truncating it would corrupt a count. */
#include "core/record.h"

#include <assert.h>

#include "core/varint.h"

#define RECORD_TS_MASK ((UINT64_C(1) << RECORD_TS_BITS) - 1)
#define RECORD_INC_SHIFT RECORD_TS_BITS
#define RECORD_KTYPE_SHIFT (RECORD_TS_BITS + 1)
/* ktype (16) + increment (1) + timestamp (41) leave the top 6 bits free. */
#define RECORD_TOP_MASK (~UINT64_C(0) << (RECORD_KTYPE_SHIFT + 16))

_Static_assert(RECORD_KTYPE_SHIFT + 16 == 58, "word 0 is 58 bits wide");
_Static_assert(RECORD_SIZE == 3 * 8, "three packed 64-bit words");

/* Two's-complement reinterpretation without implementation-defined casts:
 * word 1 holds a 32-bit content id in its top half, so it is often
 * "negative" as an int64. Compilers reduce both to a plain move. */
static int64_t u64_to_i64(uint64_t v)
{
	if (v <= (uint64_t)INT64_MAX)
		return (int64_t)v;
	return -(int64_t)(~v) - 1;
}

static uint64_t i64_to_u64(int64_t v)
{
	return (uint64_t)v; /* well defined: reduction modulo 2^64 */
}

/* RECORD_OK when every field fits its bits. */
static int record_check(const record *r)
{
	if (r->increment != 0 && r->increment != 1)
		return RECORD_ERANGE;
	if (r->at_ms < RECORD_EPOCH_MS)
		return RECORD_ERANGE;
	/* Subtracting only after the check above cannot overflow. */
	if ((uint64_t)(r->at_ms - RECORD_EPOCH_MS) > RECORD_TS_MASK)
		return RECORD_ERANGE;
	if (r->content > UINT32_MAX || r->member > UINT32_MAX)
		return RECORD_ERANGE;
	return RECORD_OK;
}

int record_encode(const record *r, int64_t out[3])
{
	assert(r != NULL);
	assert(out != NULL);
	int rc = record_check(r);
	if (rc != RECORD_OK)
		return rc;
	uint64_t ts = (uint64_t)(r->at_ms - RECORD_EPOCH_MS);
	uint64_t w0 = (uint64_t)r->ktype << RECORD_KTYPE_SHIFT |
	              (uint64_t)r->increment << RECORD_INC_SHIFT | ts;
	assert((w0 & RECORD_TOP_MASK) == 0);
	out[0] = u64_to_i64(w0);
	out[1] = u64_to_i64(r->content << 32 | r->member);
	out[2] = r->total;
	return RECORD_OK;
}

int record_decode(const int64_t in[3], record *r)
{
	assert(in != NULL);
	assert(r != NULL);
	uint64_t w0 = i64_to_u64(in[0]);
	if ((w0 & RECORD_TOP_MASK) != 0)
		return RECORD_EFORMAT;
	uint64_t w1 = i64_to_u64(in[1]);
	r->ktype = (uint16_t)(w0 >> RECORD_KTYPE_SHIFT);
	r->increment = (int)((w0 >> RECORD_INC_SHIFT) & 1);
	/* 41 bits plus the epoch is far below INT64_MAX: no overflow. */
	r->at_ms = RECORD_EPOCH_MS + (int64_t)(w0 & RECORD_TS_MASK);
	r->content = w1 >> 32;
	r->member = w1 & UINT32_MAX;
	r->total = in[2];
	assert(record_check(r) == RECORD_OK);
	return RECORD_OK;
}

void record_pack(const int64_t w[3], uint8_t out[RECORD_SIZE])
{
	assert(w != NULL);
	assert(out != NULL);
	for (int i = 0; i < 3; i++)
		be64_put(out + 8 * i, i64_to_u64(w[i]));
}

void record_unpack(const uint8_t in[RECORD_SIZE], int64_t w[3])
{
	assert(in != NULL);
	assert(w != NULL);
	for (int i = 0; i < 3; i++)
		w[i] = u64_to_i64(be64_get(in + 8 * i));
}
