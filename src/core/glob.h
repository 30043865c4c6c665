/* glob.h: Redis's glob-style patterns (CONFIG GET, as stringmatchlen()
 * reads them), matched without recursion. Pure: no I/O, no allocation. */
#ifndef TALLY_CORE_GLOB_H
#define TALLY_CORE_GLOB_H

#include <stddef.h>

/* Whether s[0, slen) matches pat[0, plen): '*' any run of bytes, '?' one
 * byte, '[abc]' '[^abc]' '[a-z]' one byte of a set (or not of it), '\x'
 * the byte x; every other byte itself (nocase: ASCII letters either case).
 * A '[' with no ']' takes the rest of the pattern as its set, and a
 * trailing '\' is a '\', as in Redis; unlike Redis, a '-' just before a
 * set's ']' is a '-' (Redis reads "[a-]" as a range up to ']'). Time: at most plen * slen steps
 * (Redis's own matcher recursed, and a pattern of many stars could take
 * exponential time). */
int glob_match(const char *pat, size_t plen, const char *s, size_t slen,
               int nocase);

#endif
