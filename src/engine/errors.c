/* errors.c: text for every error code, ours and errno's. */
#include <string.h>

#include "tally.h"

static const char *const messages[] = {
	"invalid argument",
	"key or name empty or too long",
	"increment or decrement would overflow",
	"not found",
	"unknown counting type",
	"counting type exists with another mode",
	"operation needs a counting type of the other mode",
	"limit reached",
	"out of memory",
	"store write failed (I/O error): writes are refused until the store "
	"recovers",
	"stored data is corrupt",
	"handle is closing",
	"database is in use by another handle or process",
	"database written by an incompatible version",
	"store write failed (no space left on device): writes are refused "
	"until the store recovers",
	"not supported by this store",
	"handle is read-only",
};

_Static_assert(sizeof messages / sizeof messages[0] ==
               (size_t)(TALLY_ERROR_END - TALLY_EINVAL),
               "one message per error code");

const char *tally_strerror(int err)
{
	if (err == TALLY_OK)
		return "success";
	if (err >= TALLY_EINVAL && err < TALLY_ERROR_END)
		return messages[err - TALLY_EINVAL];
	if (err > 0) {
		/* strerror's text is static for known errno values in glibc;
		 * unknown ones are named below. */
		const char *s = strerror(err);
		return s != NULL ? s : "unknown error";
	}
	return "unknown error";
}
