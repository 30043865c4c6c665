/* typesfile.h: the OUT.types sidecar of an export, a text file with one
 * counting type per line, `ID NAME MODE` (e.g. `1 like unique`). Records
 * hold a type's numeric id only; ids differ between databases, names and
 * modes do not, so import maps ids to names through this file. */
#ifndef TALLY_CLI_TYPESFILE_H
#define TALLY_CLI_TYPESFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tally.h"

/* Longest line accepted: an id, a name of TALLY_NAME_MAX, a mode. */
#define TYPESFILE_LINE_MAX 256

typedef struct typesfile {
	size_t n;
	tally_type_info t[TALLY_TYPES_MAX];
} typesfile;

/* Write n types to path; 0, or -1 with errno set. */
int typesfile_write(const char *path, const tally_type_info *t, size_t n);
/* Read path into *f. 0, or -1 after printing "tally: PATH: line N: ..." or
 * the system error. Ids and names must be unique, names valid, modes
 * unique|total, at most TALLY_TYPES_MAX lines of types. */
int typesfile_read(const char *path, typesfile *f);
/* The same from an open stream (a file, or fmemopen() for the fuzzer);
 * path only names it in messages. The stream is not closed. */
int typesfile_read_stream(FILE *in, const char *path, typesfile *f);
/* The type with this id, or NULL. */
const tally_type_info *typesfile_find(const typesfile *f, uint16_t id);

const char *typesfile_mode_name(int mode);

#endif
