/* glob.c: Redis's glob-style patterns. One backtracking point, the last
 * '*' seen, is all a glob needs: a later star can match whatever an
 * earlier one would have, so no earlier choice is ever revisited. */
#include <assert.h>
#include <stddef.h>

#include "core/glob.h"

static unsigned char fold(unsigned char c, int nocase)
{
	return nocase && c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* The set starting at pat[*p] (just past '['): whether c is in it
 * (or, for "[^", not in it). Leaves *p past its ']', or at plen. */
static int set_match(const char *pat, size_t plen, size_t *p,
                     unsigned char c, int nocase)
{
	size_t i = *p;
	int neg = 0, hit = 0;

	if (i < plen && pat[i] == '^') {
		neg = 1;
		i++;
	}
	while (i < plen && pat[i] != ']') {
		unsigned char lo = (unsigned char)pat[i];

		if (lo == '\\' && i + 1 < plen) {
			i++;
			hit |= fold((unsigned char)pat[i], nocase) == c;
			i++;
		} else if (i + 2 < plen && pat[i + 1] == '-' &&
		           pat[i + 2] != ']') {
			unsigned char a = fold(lo, nocase);
			unsigned char b = fold((unsigned char)pat[i + 2], nocase);

			if (a > b) {
				unsigned char t = a;

				a = b;
				b = t;
			}
			hit |= c >= a && c <= b;
			i += 3;
		} else {
			hit |= fold(lo, nocase) == c;
			i++;
		}
	}
	*p = i < plen ? i + 1 : plen;
	return neg ? !hit : hit;
}

int glob_match(const char *pat, size_t plen, const char *s, size_t slen,
               int nocase)
{
	size_t p = 0, i = 0;
	size_t star_p = 0, star_i = 0;
	int star = 0;

	assert(pat != NULL || plen == 0);
	assert(s != NULL || slen == 0);
	while (i < slen || p < plen) {
		if (p < plen) {
			unsigned char c = (unsigned char)pat[p];

			if (c == '*') {
				/* Runs of stars are one star. */
				while (p < plen && pat[p] == '*')
					p++;
				star = 1;
				star_p = p;
				star_i = i;
				continue;
			}
			if (i < slen) {
				unsigned char sc = fold((unsigned char)s[i],
				                        nocase);
				size_t q = p + 1;
				int ok;

				if (c == '?') {
					ok = 1;
				} else if (c == '[') {
					ok = set_match(pat, plen, &q, sc,
					               nocase);
				} else if (c == '\\' && p + 1 < plen) {
					ok = fold((unsigned char)pat[p + 1],
					          nocase) == sc;
					q = p + 2;
				} else {
					ok = fold(c, nocase) == sc;
				}
				if (ok) {
					p = q;
					i++;
					continue;
				}
			}
		}
		/* A mismatch: the last star takes one more byte, if any. */
		if (!star || star_i >= slen)
			return 0;
		star_i++;
		p = star_p;
		i = star_i;
	}
	return 1;
}
