/* import.h: the checks of `tally import` (its first pass) on records held
 * in memory, with no file and no data folder, so that they can be driven
 * directly (the fuzzer does) with exactly the rules the command applies. */
#ifndef TALLY_CLI_IMPORT_H
#define TALLY_CLI_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "typesfile.h"

/* Longest message of a refused record. */
#define IMPORT_MSG_MAX 200

/* Check buf[0, len) as the content of a records file named `name` (for
 * messages) whose types are `types`: a whole number of reference records,
 * each decodable, of a listed type, with a member for unique types and a
 * running total whose change fits an int64. Returns 0, or -1 with *index
 * the first refused record and msg saying why. Prints nothing. */
int import_check_records(typesfile *types, const char *name,
                         const uint8_t *buf, size_t len, uint64_t *index,
                         char msg[IMPORT_MSG_MAX]);

#endif
