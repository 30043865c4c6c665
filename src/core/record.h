/* record.h: the reference design's event record, three int64 words, used by
 * `tally export` / `tally import` as an interchange format.
 *
 *   word 0: counting_type (16 bits) << 42 | increment (1 bit) << 41
 *           | timestamp (41 bits, ms since RECORD_EPOCH_MS)
 *   word 1: content_id (32 bits) << 32 | member_id (32 bits)
 *   word 2: running total (int64)
 *
 * The top 6 bits of word 0 are zero. Values that do not fit are refused,
 * never truncated. */
#ifndef TALLY_CORE_RECORD_H
#define TALLY_CORE_RECORD_H

#include <stddef.h>
#include <stdint.h>

/* 2020-01-01T00:00:00Z; 41 bits of ms reach into 2089. */
#define RECORD_EPOCH_MS INT64_C(1577836800000)
#define RECORD_TS_BITS 41
#define RECORD_SIZE 24 /* packed bytes */

typedef struct record {
	uint16_t ktype;
	int increment;     /* 1 add, 0 remove */
	int64_t at_ms;     /* ms since the Unix epoch */
	uint64_t content;  /* must fit 32 bits */
	uint64_t member;   /* must fit 32 bits */
	int64_t total;
} record;

enum { RECORD_OK = 0, RECORD_ERANGE = -1, RECORD_EFORMAT = -2 };

/* Encode; RECORD_ERANGE if at_ms is before the epoch or beyond 41 bits,
 * content or member over 32 bits, or increment not 0/1. */
int record_encode(const record *r, int64_t out[3]);
/* Decode; RECORD_EFORMAT if the top 6 bits of word 0 are not zero. */
int record_decode(const int64_t in[3], record *r);
/* The three words as 24 big-endian bytes and back. */
void record_pack(const int64_t w[3], uint8_t out[RECORD_SIZE]);
void record_unpack(const uint8_t in[RECORD_SIZE], int64_t w[3]);

#endif
