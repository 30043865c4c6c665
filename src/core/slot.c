/* slot.c: Redis Cluster key slots. The table-driven CRC16-XMODEM is the
 * one Redis ships (src/crc16.c); the hash tag rule mirrors keyHashSlot() in
 * Redis's cluster.c, byte for byte, so a key always lands where a real
 * cluster puts it. */
#include "core/slot.h"

#include <assert.h>

static uint16_t crc16_table[256];
static int crc16_ready;

/* Built on first use rather than spelled out: 256 constants are easy to
 * mistype, and the loop is the definition. Racing first callers compute
 * the same bytes, so the race is benign; the flag is written last. */
static void crc16_init(void)
{
	for (unsigned i = 0; i < 256; i++) {
		uint16_t crc = (uint16_t)(i << 8);
		for (int b = 0; b < 8; b++) {
			if (crc & 0x8000)
				crc = (uint16_t)((crc << 1) ^ 0x1021);
			else
				crc = (uint16_t)(crc << 1);
		}
		crc16_table[i] = crc;
	}
	__atomic_store_n(&crc16_ready, 1, __ATOMIC_RELEASE);
}

uint16_t slot_crc16(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint16_t crc = 0;

	assert(p != NULL || len == 0);
	if (!__atomic_load_n(&crc16_ready, __ATOMIC_ACQUIRE))
		crc16_init();
	for (size_t i = 0; i < len; i++)
		crc = (uint16_t)((crc << 8) ^
		                 crc16_table[((crc >> 8) ^ p[i]) & 0xff]);
	return crc;
}

uint16_t slot_of_key(const void *key, size_t len)
{
	const uint8_t *k = key;
	size_t s, e;

	assert(k != NULL || len == 0);
	for (s = 0; s < len; s++)
		if (k[s] == '{')
			break;
	if (s == len)
		return (uint16_t)(slot_crc16(k, len) & (SLOT_COUNT - 1));
	for (e = s + 1; e < len; e++)
		if (k[e] == '}')
			break;
	/* No '}' after the '{', or "{}" with nothing inside: the whole key. */
	if (e == len || e == s + 1)
		return (uint16_t)(slot_crc16(k, len) & (SLOT_COUNT - 1));
	return (uint16_t)(slot_crc16(k + s + 1, e - s - 1) & (SLOT_COUNT - 1));
}
