/* slot.h: Redis Cluster key slots (CRC16-XMODEM of the key or its hash tag,
 * modulo 16384), so the cluster store can route and spread keys without
 * asking a node. Pure functions; no I/O. */
#ifndef TALLY_CORE_SLOT_H
#define TALLY_CORE_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SLOT_COUNT 16384

/* CRC16-XMODEM (polynomial 0x1021, initial 0, no reflection): the CRC that
 * Redis Cluster uses. slot_crc16("123456789", 9) == 0x31C3. */
uint16_t slot_crc16(const void *buf, size_t len);

/* The slot of a key, by Redis's rules: if the key has a '{' and, after it,
 * a '}' with at least one byte between them, only the bytes between the
 * first '{' and the first '}' after it are hashed; otherwise the whole key.
 * key may be NULL when len is 0. */
uint16_t slot_of_key(const void *key, size_t len);

#endif
