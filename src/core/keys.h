/* keys.h: the byte layout of every key and value in the store.
 * Keys are big-endian so that byte order is numeric order; sequence numbers
 * are stored inverted (~seq) so that a forward scan is newest first. */
#ifndef TALLY_CORE_KEYS_H
#define TALLY_CORE_KEYS_H

#include <stddef.h>
#include <stdint.h>

/* Object: ctype u16 | ktype u16 | content u64. */
#define KEY_OBJ_LEN 12
/* Membership of a unique type: object | member u64 -> value at_ms. */
#define KEY_MEMBER_LEN 20
/* Event log: object | ~seq u64 -> log value. */
#define KEY_LOG_LEN 20
/* A member's history: member u64 | ktype u16 | ~seq u64 -> hist value. */
#define KEY_HIST_PREFIX_LEN 10
#define KEY_HIST_LEN 18

/* Event times are stored relative to this epoch (2020-01-01T00:00:00Z, in
 * ms since the Unix epoch) so they encode short. */
#define TALLY_EPOCH_MS INT64_C(1577836800000)

typedef struct key_obj {
	uint16_t ctype;
	uint16_t ktype;
	uint64_t content;
} key_obj;

void key_obj_encode(uint8_t out[KEY_OBJ_LEN], const key_obj *o);
void key_obj_decode(const uint8_t in[KEY_OBJ_LEN], key_obj *o);

void key_member_encode(uint8_t out[KEY_MEMBER_LEN], const key_obj *o,
                       uint64_t member);

void key_log_encode(uint8_t out[KEY_LOG_LEN], const key_obj *o, uint64_t seq);
/* Returns 0, or -1 when len != KEY_LOG_LEN. */
int key_log_decode(const uint8_t *in, size_t len, key_obj *o, uint64_t *seq);

void key_hist_prefix_encode(uint8_t out[KEY_HIST_PREFIX_LEN], uint64_t member,
                            uint16_t ktype);
void key_hist_encode(uint8_t out[KEY_HIST_LEN], uint64_t member,
                     uint16_t ktype, uint64_t seq);
/* Returns 0, or -1 when len != KEY_HIST_LEN. */
int key_hist_decode(const uint8_t *in, size_t len, uint64_t *member,
                    uint16_t *ktype, uint64_t *seq);

/* Largest encoded log or hist value. */
#define VAL_EVENT_MAX 40

/* Value of a log entry: who, when, how much, and the object's count after
 * the event (the reference design's running total). */
typedef struct val_log {
	uint64_t member;
	int64_t at_ms;  /* ms since the Unix epoch */
	int64_t delta;  /* > 0 add, < 0 remove */
	int64_t total;  /* count after the event */
} val_log;

/* Encode into buf (room for VAL_EVENT_MAX); returns bytes written. at_ms
 * must be >= INT64_MIN + TALLY_EPOCH_MS (every real time is; asserted). */
size_t val_log_encode(uint8_t *buf, const val_log *v);
/* Returns 0, or -1 when the bytes are not exactly one valid value. */
int val_log_decode(const uint8_t *buf, size_t len, val_log *v);

/* Value of a history entry: which object, when, how much. */
typedef struct val_hist {
	uint16_t ctype;
	uint64_t content;
	int64_t at_ms;
	int64_t delta;
} val_hist;

/* As val_log_encode() and val_log_decode(). */
size_t val_hist_encode(uint8_t *buf, const val_hist *v);
int val_hist_decode(const uint8_t *buf, size_t len, val_hist *v);

/* The clock that format 5 codes event times against: the time of event
 * k * EV_CLOCK_EVERY + 1 (sample k; seqs start at 1) for every k, kept by
 * the store in memory and in META. A time is coded as its difference
 * from the sample of its block of EV_CLOCK_EVERY seqs (the residual):
 * under a steady load the events of a block fall within a few ms of its
 * first, so a residual takes a byte where a time took six, whatever the
 * order of the table (a member's history is in seq order only per
 * member). Samples are read through a two-level table whose blocks never
 * move, so that readers need no lock: the store publishes n after
 * filling samples below it. Capacity: EV_CLOCK_BLOCKS_MAX blocks of
 * EV_CLOCK_BLOCK samples, 2^42 events; past it, and where an event is
 * missing (seqs before the clock, seqs given back), there is no sample
 * and the chunks of those events are written in format 4. */
#define EV_CLOCK_SHIFT 10
#define EV_CLOCK_EVERY (UINT64_C(1) << EV_CLOCK_SHIFT)
#define EV_CLOCK_BLOCK_SHIFT 16
#define EV_CLOCK_BLOCK ((size_t)1 << EV_CLOCK_BLOCK_SHIFT)
#define EV_CLOCK_BLOCKS_MAX ((size_t)1 << 16)
#define EV_CLOCK_SAMPLES_MAX ((uint64_t)EV_CLOCK_BLOCKS_MAX * EV_CLOCK_BLOCK)
/* A sample slot with no event behind it. */
#define EV_CLOCK_NONE INT64_MIN

typedef struct ev_clock {
	int64_t *const *blocks; /* EV_CLOCK_BLOCKS_MAX pointers; NULL: none */
	uint64_t n;             /* samples 0..n-1 are filled */
} ev_clock;

/* The sample that event seq's time is coded against, into *t. Returns 0,
 * or -1 when there is none: clk NULL, seq 0, past clk->n, a block never
 * filled, or a slot of EV_CLOCK_NONE. */
int ev_clock_sample(const ev_clock *clk, uint64_t seq, int64_t *t);

/* Chunks: up to EV_CHUNK_MAX events of one object's log (or of one
 * member's history of one type) in one entry, written by a checkpoint for
 * the events it holds of that object, so that a like costs a fraction of
 * a log entry instead of one. The key is the single-event key of the
 * chunk's oldest event: a forward scan still meets newer events first,
 * and a seek to ~seq lands on the entry holding seq or on an older one.
 *
 * Format 4 (written by builds before the clock, read by every build): the
 * value holds the events newest first: the first as val_log_encode() (or
 * val_hist_encode()) codes it, so that a single event's value is a chunk
 * of one; then for each next one, how much smaller its seq is (>= 1) and
 * its fields, times as the difference from the event before (newer) and,
 * in the log, the running total as its difference from the one the newer
 * event implies (its total less its delta: 0 unless the object was
 * changed without an event). The newest's seq is the oldest's plus every
 * gap.
 *
 * Format 5: a mark of EV_CHUNK_MARK_LEN bytes, which no format 4 value
 * starts with (a two-byte varint for 0: writers never make one), then
 * the same fields, each time (the first's too) as the zigzag residual
 * from its own seq's ev_clock_sample(). Only the times change, so the
 * two share the rest of the decoder. A chunk is written in format 5 only
 * when the clock has every one of its events' samples. */
#define EV_CHUNK_MAX 128
#define EV_CHUNK_MARK_LEN 2
/* Room for any chunk's value. */
#define VAL_CHUNK_MAX \
	(EV_CHUNK_MAX * (VAL_EVENT_MAX + 10) + EV_CHUNK_MARK_LEN)

/* n events (1..EV_CHUNK_MAX), newest first (seq strictly decreasing), into
 * buf (room for VAL_CHUNK_MAX); the key is the one of seq[n - 1]. With
 * clk holding every event's sample, format 5; otherwise (clk NULL: tests
 * of folders written before the clock) format 4. Returns bytes written. */
size_t val_log_chunk_encode(uint8_t *buf, const uint64_t *seq,
                            const val_log *v, size_t n, const ev_clock *clk);
size_t val_hist_chunk_encode(uint8_t *buf, const uint64_t *seq,
                             const val_hist *v, size_t n,
                             const ev_clock *clk);

/* Whether a chunk's value is of format 5 (starts with the mark). */
int val_chunk_clocked(const uint8_t *v, size_t len);

/* One log entry from its key and value: the object, and *n events
 * (1..EV_CHUNK_MAX) newest first into seq[] and v[] (room for
 * EV_CHUNK_MAX each). A format 5 value's times are read against clk
 * (NULL: no samples). Returns 0, or -1 when the bytes are not exactly a
 * valid entry (more than EV_CHUNK_MAX events, a newest seq past
 * UINT64_MAX, or a format 5 event whose sample clk lacks, included). */
int log_entry_decode(const uint8_t *k, size_t klen, const uint8_t *v,
                     size_t vlen, const ev_clock *clk, key_obj *o,
                     uint64_t *seq, val_log *out, size_t *n);
/* Whether n decoded events hold only what a write gives: seqs from 1,
 * times in 1..TALLY_AT_MS_MAX, and (history) content type ids from 1.
 * Decoding checks the bytes' form only: readers that answer with events
 * check this too (anything else is damage), while the event scan, which
 * salvages what it can, hands them on for its caller to skip. */
int log_entry_sane(const uint64_t *seq, const val_log *v, size_t n);
/* Whether a time is one a write gives (AT's range, which default and
 * imported times keep to). */
int ev_time_ok(int64_t at_ms);
int hist_entry_sane(const uint64_t *seq, const val_hist *v, size_t n);
/* The same for a history entry: its member and type, and its events. */
int hist_entry_decode(const uint8_t *k, size_t klen, const uint8_t *v,
                      size_t vlen, const ev_clock *clk, uint64_t *member,
                      uint16_t *ktype, uint64_t *seq, val_hist *out,
                      size_t *n);

/* A counter value or a merge operand: a zigzag varint. */
size_t val_i64_encode(uint8_t *buf, int64_t v);
int val_i64_decode(const uint8_t *buf, size_t len, int64_t *v);

/* A type or content-type name: 1..TALLY_NAME_MAX bytes of
 * [A-Za-z0-9_.:-]. Returns 1 if valid. */
int name_valid(const char *name, size_t len);

#endif
