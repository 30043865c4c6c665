/* tokens.c: idempotency tokens remembered for the retention window. The
 * committer owns the table: a hash for lookups and a FIFO (oldest first)
 * so that expiry costs O(expired). Persistence is the store's, in the same
 * batch as the write a token guards.
 *
 * A FIFO entry carries the expiry it was queued with. A token used again
 * after its window (before its purge) gets a new expiry and a new entry
 * at the tail; its old entry, no longer matching the table, is dropped
 * when it reaches the head. Moving nothing, a renewed token at the head
 * held back the expiry of every token behind it for a whole window. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

int tokens_init(tokens *k, uint32_t retention_ms, uint32_t max)
{
	assert(max >= 1);
	memset(k, 0, sizeof *k);
	k->retention_ms = retention_ms;
	k->max = max;
	k->clock_ms = eng_now_ms();
	k->clock_ns = eng_now_ns();
	k->loaded_max_ms = INT64_MIN;
	k->loaded_clock_ms = INT64_MIN;
	k->map = hmap_create(sizeof(tok_val));
	return k->map ? TALLY_OK : TALLY_ENOMEM;
}

void tokens_free(tokens *k)
{
	for (size_t i = 0; i < k->fifo_len; i++)
		free(k->fifo[(k->fifo_head + i) % k->fifo_cap]);
	free(k->fifo);
	hmap_free(k->map);
	memset(k, 0, sizeof *k);
}

/* An entry: the token's length, the expiry it was queued with, the
 * token. */
enum { ENTRY_HEAD = 1 + sizeof(int64_t) };

static int64_t entry_expiry(const uint8_t *e)
{
	int64_t x;

	memcpy(&x, e + 1, sizeof x);
	return x;
}

/* The table's value of the entry's token when the entry is its live one;
 * NULL for an entry left behind by a renewal or an eviction. */
static const tok_val *entry_live(const tokens *k, const uint8_t *e)
{
	const tok_val *v = hmap_get(k->map, e + ENTRY_HEAD, e[0]);

	return v != NULL && v->expiry_ms == entry_expiry(e) ? v : NULL;
}

static void fifo_pop(tokens *k)
{
	assert(k->fifo_len > 0);
	free(k->fifo[k->fifo_head]);
	k->fifo_head = (k->fifo_head + 1) % k->fifo_cap;
	k->fifo_len--;
}

static int fifo_push(tokens *k, const uint8_t *tok, size_t len,
                     int64_t expiry_ms)
{
	uint8_t *e;

	assert(len > 0 && len <= TALLY_ID_MAX);
	if (k->fifo_len == k->fifo_cap) {
		size_t cap = k->fifo_cap ? k->fifo_cap * 2 : 1024;
		uint8_t **f = malloc(cap * sizeof *f);

		if (f == NULL)
			return TALLY_ENOMEM;
		for (size_t i = 0; i < k->fifo_len; i++)
			f[i] = k->fifo[(k->fifo_head + i) % k->fifo_cap];
		free(k->fifo);
		k->fifo = f;
		k->fifo_cap = cap;
		k->fifo_head = 0;
	}
	e = malloc(ENTRY_HEAD + len);
	if (e == NULL)
		return TALLY_ENOMEM;
	e[0] = (uint8_t)len;
	memcpy(e + 1, &expiry_ms, sizeof expiry_ms);
	memcpy(e + ENTRY_HEAD, tok, len);
	k->fifo[(k->fifo_head + k->fifo_len++) % k->fifo_cap] = e;
	return TALLY_OK;
}

/* A token still in its window leaves memory: until its expiry, a token
 * not found here must be looked for in the store. */
static void forget(tokens *k, int64_t expiry_ms)
{
	if (expiry_ms > k->forgot_until_ms)
		k->forgot_until_ms = expiry_ms;
	/* Its stored copy is deleted by the sweep once expired. */
	if (expiry_ms > k->sweep_until_ms)
		k->sweep_until_ms = expiry_ms;
}

void tokens_remember(tokens *k, const uint8_t *tok, size_t len,
                     int64_t result, int64_t expiry_ms)
{
	int inserted;
	tok_val *v;

	/* Past k->max the oldest go early, to bound memory; the store keeps
	 * them (tokens_forgotten()). Entries left behind go on the way. */
	while (hmap_count(k->map) >= k->max && k->fifo_len > 0 &&
	       hmap_get(k->map, tok, len) == NULL) {
		uint8_t *old = k->fifo[k->fifo_head];
		const tok_val *ov = entry_live(k, old);

		if (ov != NULL) {
			forget(k, ov->expiry_ms);
			hmap_del(k->map, old + ENTRY_HEAD, old[0]);
		}
		fifo_pop(k);
	}
	v = hmap_put(k->map, tok, len, &inserted);
	if (v == NULL) {
		forget(k, expiry_ms); /* out of memory: the store answers */
		return;
	}
	if (!inserted && v->expiry_ms == expiry_ms) {
		v->result = result; /* its entry stands as it is */
		return;
	}
	v->result = result;
	v->expiry_ms = expiry_ms;
	if (fifo_push(k, tok, len, expiry_ms) != TALLY_OK) {
		hmap_del(k->map, tok, len);
		forget(k, expiry_ms);
	}
}

int tokens_forgotten(const tokens *k, int64_t now_ms)
{
	return k->forgot_until_ms > now_ms;
}

/* When a token that expires at expiry_ms began its window; a damaged
 * expiry near INT64_MIN saturates. */
static int64_t window_began(const tokens *k, int64_t expiry_ms)
{
	return expiry_ms < INT64_MIN + (int64_t)k->retention_ms
	       ? INT64_MIN : expiry_ms - (int64_t)k->retention_ms;
}

int tokens_load(void *arg, const uint8_t *tok, size_t len, int64_t result,
                int64_t expiry_ms)
{
	eng_loaded *l = arg;

	if (len == 0 || len > TALLY_ID_MAX)
		return -1;
	/* Which have expired is known once the newest is (tokens_loaded()):
	 * until then each is kept, within tokens_max. Those that expired
	 * both by the system clock and before a token seen began its window
	 * are let go at once: a token let go is still answered from the
	 * store until its expiry on the clock the load picks, and the
	 * store's sweep deletes it after. */
	if (expiry_ms > l->tok->loaded_max_ms)
		l->tok->loaded_max_ms = expiry_ms;
	if (expiry_ms <= window_began(l->tok, l->tok->loaded_max_ms) &&
	    expiry_ms <= eng_now_ms())
		forget(l->tok, expiry_ms);
	else
		tokens_remember(l->tok, tok, len, result, expiry_ms);
	return 0;
}

int tokens_load_clock(void *arg, int64_t ms)
{
	eng_loaded *l = arg;

	l->tok->loaded_clock_ms = ms;
	return 0;
}

int tokens_stored(const tokens *k, int64_t now_ms)
{
	return hmap_count(k->map) > 0 || k->sweep_until_ms != 0 ||
	       tokens_forgotten(k, now_ms);
}

int64_t tokens_now(const tokens *k)
{
	return k->clock_ms + (int64_t)((eng_now_ns() - k->clock_ns) / 1000000u);
}

typedef struct tok_order {
	int64_t expiry_ms;
	uint8_t *entry;
} tok_order;

static int by_expiry(const void *a, const void *b)
{
	const tok_order *x = a, *y = b;

	return (x->expiry_ms > y->expiry_ms) - (x->expiry_ms < y->expiry_ms);
}

/* Tokens load in key order; make the FIFO oldest-first. */
static void tokens_sort(tokens *k)
{
	tok_order *o;

	if (k->fifo_len == 0)
		return;
	o = malloc(k->fifo_len * sizeof *o);
	if (o == NULL)
		return; /* unsorted only delays expiry */
	for (size_t i = 0; i < k->fifo_len; i++) {
		uint8_t *e = k->fifo[(k->fifo_head + i) % k->fifo_cap];

		o[i] = (tok_order){ entry_expiry(e), e };
	}
	qsort(o, k->fifo_len, sizeof *o, by_expiry);
	for (size_t i = 0; i < k->fifo_len; i++)
		k->fifo[i] = o[i].entry;
	k->fifo_head = 0;
	free(o);
}

/* tokens_expire()'s fn at a load: the token leaves memory, and the
 * sweep deletes its stored copy. */
static void let_go(void *arg, const uint8_t *tok, size_t len)
{
	tokens *k = arg;
	const tok_val *v = hmap_get(k->map, tok, len);

	assert(v != NULL);
	forget(k, v->expiry_ms);
}

void tokens_loaded(tokens *k, int resume)
{
	/* Where the clock was stored: with every token, and once a second
	 * while tokens are stored, so no later than every token's start and
	 * at most a second before the close (or the crash). The time the
	 * folder spent closed, or a clock stepped meanwhile, would otherwise
	 * end every window early, and a retry after a long outage count
	 * twice. A folder whose tokens were written before the clock was
	 * stored: where the newest began its window, and no later than the
	 * system clock (the windows were on it). */
	if (resume && k->loaded_clock_ms != INT64_MIN) {
		k->clock_ns = eng_now_ns();
		k->clock_ms = k->loaded_clock_ms;
	} else if (resume && k->loaded_max_ms != INT64_MIN) {
		int64_t at = window_began(k, k->loaded_max_ms);

		k->clock_ns = eng_now_ns();
		k->clock_ms = eng_now_ms();
		if (at < k->clock_ms)
			k->clock_ms = at;
	}
	tokens_sort(k);
	/* Expired ones answer nothing and would take room in memory: let
	 * go, the store's sweep deletes them. */
	(void)tokens_expire(k, tokens_now(k), SIZE_MAX, let_go, k);
}

const tok_val *tokens_find(tokens *k, const uint8_t *tok, size_t len,
                           int64_t now_ms)
{
	const tok_val *v = hmap_get(k->map, tok, len);

	return v != NULL && v->expiry_ms > now_ms ? v : NULL;
}

size_t tokens_expire(tokens *k, int64_t now_ms, size_t max,
                     void (*fn)(void *arg, const uint8_t *tok, size_t len),
                     void *arg)
{
	size_t n = 0;

	while (n < max && k->fifo_len > 0) {
		uint8_t *e = k->fifo[k->fifo_head];
		const tok_val *v = entry_live(k, e);

		if (v != NULL && v->expiry_ms > now_ms)
			break;
		if (v != NULL) {
			fn(arg, e + ENTRY_HEAD, e[0]);
			hmap_del(k->map, e + ENTRY_HEAD, e[0]);
		}
		fifo_pop(k);
		n++;
	}
	return n;
}
