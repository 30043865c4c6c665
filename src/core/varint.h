/* varint.h: LEB128 varints, zigzag signed integers and big-endian fixed
 * integers, the byte-level building blocks of every stored key and value.
 * Pure functions; no I/O, no allocation. */
#ifndef TALLY_CORE_VARINT_H
#define TALLY_CORE_VARINT_H

#include <stddef.h>
#include <stdint.h>

/* Longest encoding of a 64-bit varint. */
#define VARINT_MAX 10

/* Write v as a varint into buf (room for VARINT_MAX bytes). Returns the
 * number of bytes written (1..10). */
size_t varint_put_u64(uint8_t *buf, uint64_t v);

/* Read a varint from buf[0..len). On success stores the value and the
 * bytes used and returns 0. Returns -1 for truncated input, an encoding
 * longer than 10 bytes, or one whose value exceeds 64 bits. Bytes after
 * the varint are not read (callers check *used). A non-minimal encoding of
 * at most 10 bytes (e.g. 0x80 0x00 for 0) is accepted; writers never make
 * one. */
int varint_get_u64(const uint8_t *buf, size_t len, uint64_t *v, size_t *used);

/* Signed variants through zigzag (small magnitudes stay short). */
size_t varint_put_i64(uint8_t *buf, int64_t v);
int varint_get_i64(const uint8_t *buf, size_t len, int64_t *v, size_t *used);

static inline uint64_t zigzag_encode(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t zigzag_decode(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline void be16_put(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline uint16_t be16_get(const uint8_t *p)
{
	return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline void be32_put(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline uint32_t be32_get(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* Spelled out, not as loops: GCC 12 keeps be64_put's loop of byte stores
 * at -O2 (some 40 instructions run) and be64_get's of loads and shifts at
 * -O3 too (23); these forms are one bswap each at either level. */
static inline void be64_put(uint8_t *p, uint64_t v)
{
	p[0] = (uint8_t)(v >> 56);
	p[1] = (uint8_t)(v >> 48);
	p[2] = (uint8_t)(v >> 40);
	p[3] = (uint8_t)(v >> 32);
	p[4] = (uint8_t)(v >> 24);
	p[5] = (uint8_t)(v >> 16);
	p[6] = (uint8_t)(v >> 8);
	p[7] = (uint8_t)v;
}

static inline uint64_t be64_get(const uint8_t *p)
{
	return (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 |
	       (uint64_t)p[2] << 40 | (uint64_t)p[3] << 32 |
	       (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 |
	       (uint64_t)p[6] << 8 | p[7];
}

#endif
