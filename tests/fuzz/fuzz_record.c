/* fuzz_record.c: libFuzzer harness of the reference record codec
 * (core/record.c) and of varints (core/varint.c). Arbitrary bytes are
 * decoded; whatever decodes must encode back to the same value (and to the
 * same bytes where the encoding is canonical); whatever is refused must be
 * out of range by an independent reading of the format. */
#include <string.h>

#include "core/record.h"
#include "core/varint.h"
#include "fuzz.h"

/* Input bytes from *off as a big-endian integer of n bytes (0 past the
 * end), advancing *off. */
static uint64_t take(const uint8_t *d, size_t size, size_t *off, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		v = v << 8 | (*off < size ? d[*off] : 0);
		(*off)++;
	}
	return v;
}

/* The first 24 bytes as a packed record: unpack, decode, encode, pack
 * must give the same bytes back, or the top 6 bits must be set. */
static void packed_round_trip(const uint8_t *data, size_t size)
{
	int64_t w[3], w2[3];
	uint8_t again[RECORD_SIZE];
	record r;

	if (size < RECORD_SIZE)
		return;
	record_unpack(data, w);
	record_pack(w, again);
	FUZZ_CHECK(memcmp(again, data, RECORD_SIZE) == 0);
	int rc = record_decode(w, &r);
	FUZZ_CHECK(rc == RECORD_OK || rc == RECORD_EFORMAT);
	FUZZ_CHECK((rc == RECORD_EFORMAT) == ((data[0] >> 2) != 0));
	if (rc != RECORD_OK)
		return;
	FUZZ_CHECK(r.increment == 0 || r.increment == 1);
	FUZZ_CHECK(r.content <= UINT32_MAX && r.member <= UINT32_MAX);
	FUZZ_CHECK(r.at_ms >= RECORD_EPOCH_MS);
	FUZZ_CHECK(record_encode(&r, w2) == RECORD_OK);
	FUZZ_CHECK(memcmp(w, w2, sizeof w) == 0);
}

/* The input as record fields: encode must succeed exactly when every
 * field fits its bits, and then decode to the same fields. */
static void fields_round_trip(const uint8_t *data, size_t size)
{
	size_t off = 0;
	record r, back;
	int64_t w[3];

	memset(&r, 0, sizeof r);
	r.ktype = (uint16_t)take(data, size, &off, 2);
	r.increment = (int)(take(data, size, &off, 1) % 3); /* 2 is invalid */
	r.at_ms = (int64_t)take(data, size, &off, 8);
	r.content = take(data, size, &off, 8);
	r.member = take(data, size, &off, 8);
	r.total = (int64_t)take(data, size, &off, 8);
	/* Small contents, members and times are the interesting ones: let a
	 * flag byte pull them into range. */
	uint64_t flags = take(data, size, &off, 1);
	if (flags & 1)
		r.content &= UINT32_MAX;
	if (flags & 2)
		r.member &= UINT32_MAX;
	if (flags & 4)
		r.at_ms = RECORD_EPOCH_MS + (r.at_ms & INT64_C(0x3ffffffffff));
	int fits = r.increment <= 1 && r.content <= UINT32_MAX &&
	           r.member <= UINT32_MAX && r.at_ms >= RECORD_EPOCH_MS &&
	           r.at_ms - RECORD_EPOCH_MS < (INT64_C(1) << RECORD_TS_BITS);
	int rc = record_encode(&r, w);
	FUZZ_CHECK(rc == RECORD_OK || rc == RECORD_ERANGE);
	FUZZ_CHECK((rc == RECORD_OK) == fits);
	if (rc != RECORD_OK)
		return;
	FUZZ_CHECK(record_decode(w, &back) == RECORD_OK);
	FUZZ_CHECK(back.ktype == r.ktype && back.increment == r.increment);
	FUZZ_CHECK(back.at_ms == r.at_ms && back.total == r.total);
	FUZZ_CHECK(back.content == r.content && back.member == r.member);
}

/* An independent LEB128 reader: 0 and the value, or -1. */
static int ref_varint(const uint8_t *p, size_t n, uint64_t *v, size_t *used)
{
	uint64_t acc = 0;
	for (size_t i = 0; i < n && i < VARINT_MAX; i++) {
		uint64_t bits = p[i] & 0x7f;
		/* Byte 10 holds bit 63 only, and must be the last. */
		if (i == VARINT_MAX - 1 && (bits > 1 || (p[i] & 0x80)))
			return -1;
		acc |= bits << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = acc;
			*used = i + 1;
			return 0;
		}
	}
	return -1;
}

/* A varint at p: decoders agree with the reference, and re-encoding the
 * value gives the shortest form, equal to the input when it was short. */
static void varint_at(const uint8_t *p, size_t n)
{
	uint64_t v = 0, rv = 0, v2 = 0;
	int64_t s = 0;
	size_t used = 0, rused = 0, used2 = 0, sused = 0;
	uint8_t enc[VARINT_MAX];

	int rc = varint_get_u64(p, n, &v, &used);
	int rrc = ref_varint(p, n, &rv, &rused);
	FUZZ_CHECK(rc == rrc);
	FUZZ_CHECK(varint_get_i64(p, n, &s, &sused) == rc);
	if (rc != 0)
		return;
	FUZZ_CHECK(v == rv && used == rused);
	FUZZ_CHECK(used >= 1 && used <= n && used <= VARINT_MAX);
	FUZZ_CHECK(s == zigzag_decode(v) && sused == used);
	size_t k = varint_put_u64(enc, v);
	FUZZ_CHECK(k >= 1 && k <= used);
	FUZZ_CHECK(varint_get_u64(enc, k, &v2, &used2) == 0);
	FUZZ_CHECK(v2 == v && used2 == k);
	/* Canonical: the last byte of a multi-byte form is not 0. */
	if (used == 1 || p[used - 1] != 0)
		FUZZ_CHECK(k == used && memcmp(enc, p, k) == 0);
	/* Truncated by one byte, it must not decode to the same length. */
	if (used > 1)
		FUZZ_CHECK(varint_get_u64(p, used - 1, &v2, &used2) != 0);
	k = varint_put_i64(enc, s);
	FUZZ_CHECK(varint_get_i64(enc, k, &s, &used2) == 0);
	FUZZ_CHECK(s == zigzag_decode(v) && used2 == k);
	FUZZ_CHECK(zigzag_encode(s) == v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	packed_round_trip(data, size);
	fields_round_trip(data, size);
	/* A varint at every offset, each with exactly the bytes left, so a
	 * read past them is an ASan report. */
	for (size_t off = 0; off <= size; off++)
		varint_at(data + off, size - off);
	return 0;
}
