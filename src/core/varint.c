/* varint.c: LEB128 varint encoding and decoding, unsigned and zigzag signed.
 * Decoding is strict about length so that corrupt stored bytes are reported
 * rather than silently wrapped. */
#include "core/varint.h"

#include <assert.h>

size_t varint_put_u64(uint8_t *buf, uint64_t v)
{
	assert(buf != NULL);
	size_t n = 0;
	while (v >= 0x80) {
		buf[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	buf[n++] = (uint8_t)v;
	assert(n >= 1 && n <= VARINT_MAX);
	return n;
}

/* The slow path: multi-byte values. The 10th byte may carry only bit 63,
 * so any larger value there (or an 11th byte) is not a 64-bit varint. */
static int varint_get_long(const uint8_t *buf, size_t len, uint64_t *v,
                           size_t *used)
{
	uint64_t acc = 0;
	size_t limit = len < VARINT_MAX ? len : VARINT_MAX;
	for (size_t i = 0; i < limit; i++) {
		uint8_t b = buf[i];
		if (i == VARINT_MAX - 1 && b > 1)
			return -1; /* over 64 bits, or an 11th byte would follow */
		acc |= (uint64_t)(b & 0x7f) << (7 * i);
		if (b < 0x80) {
			*v = acc;
			*used = i + 1;
			return 0;
		}
	}
	return -1; /* truncated: ran out of input with the high bit set */
}

int varint_get_u64(const uint8_t *buf, size_t len, uint64_t *v, size_t *used)
{
	assert(v != NULL);
	assert(used != NULL);
	if (len == 0)
		return -1;
	assert(buf != NULL);
	/* Most stored numbers are small: one byte, no loop. */
	if (buf[0] < 0x80) {
		*v = buf[0];
		*used = 1;
		return 0;
	}
	return varint_get_long(buf, len, v, used);
}

size_t varint_put_i64(uint8_t *buf, int64_t v)
{
	assert(buf != NULL);
	return varint_put_u64(buf, zigzag_encode(v));
}

int varint_get_i64(const uint8_t *buf, size_t len, int64_t *v, size_t *used)
{
	assert(v != NULL);
	uint64_t u = 0;
	if (varint_get_u64(buf, len, &u, used) != 0)
		return -1;
	*v = zigzag_decode(u);
	return 0;
}
