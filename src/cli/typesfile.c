/* typesfile.c: reading and writing the OUT.types sidecar. The reader is
 * strict (bounded lines, checked ids, names and modes) because a wrong
 * mapping would replay likes as views without any other error. */
#include "typesfile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "offline.h"
#include "out.h"

const char *typesfile_mode_name(int mode)
{
	return mode == TALLY_MODE_UNIQUE ? "unique" : "total";
}

int typesfile_write(const char *path, const tally_type_info *t, size_t n)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		return -1;
	fprintf(f, "# tally counting types: ID NAME MODE, one per line; "
	        "records of the export name a type by its ID\n");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%u %s %s\n", (unsigned)t[i].id, t[i].name,
		        typesfile_mode_name(t[i].mode));
	/* Synced like the records file it goes with: renamed into place,
	 * it must not come back empty after a crash. */
	return offline_close_synced(f);
}

const tally_type_info *typesfile_find(const typesfile *f, uint16_t id)
{
	for (size_t i = 0; i < f->n; i++)
		if (f->t[i].id == id)
			return &f->t[i];
	return NULL;
}

static const tally_type_info *find_name(const typesfile *f, const char *s)
{
	for (size_t i = 0; i < f->n; i++)
		if (strcmp(f->t[i].name, s) == 0)
			return &f->t[i];
	return NULL;
}

/* Parse one `ID NAME MODE` line into e. NULL, or what is wrong. */
static const char *parse_line(char *line, const typesfile *f,
                              tally_type_info *e)
{
	char *save = NULL;
	char *id = strtok_r(line, " \t", &save);
	char *name = strtok_r(NULL, " \t", &save);
	char *mode = strtok_r(NULL, " \t", &save);
	uint64_t v;

	if (mode == NULL || strtok_r(NULL, " \t", &save) != NULL)
		return "expected `ID NAME MODE`";
	if (cli_parse_u64(id, &v) != 0 || v < 1 || v > UINT16_MAX)
		return "the ID must be an integer from 1 to 65535";
	if (!cli_name_ok(name))
		return "the NAME must be 1..64 characters of A-Z a-z 0-9 _ . : -";
	if (strcmp(mode, "unique") != 0 && strcmp(mode, "total") != 0)
		return "the MODE must be unique or total";
	e->id = (uint16_t)v;
	e->mode = mode[0] == 'u' ? TALLY_MODE_UNIQUE : TALLY_MODE_TOTAL;
	strcpy(e->name, name);
	if (typesfile_find(f, e->id) != NULL)
		return "this ID is listed twice";
	if (find_name(f, e->name) != NULL)
		return "this NAME is listed twice";
	return NULL;
}

/* One raw line (with its newline, if any); 0, or -1 after printing. */
static int read_line(const char *path, unsigned lineno, char *line,
                     typesfile *f)
{
	size_t len = strlen(line);
	const char *why = NULL;

	if (len > 0 && line[len - 1] == '\n')
		line[--len] = '\0';
	if (len > 0 && line[len - 1] == '\r')
		line[--len] = '\0';
	if (len == 0 || line[strspn(line, " \t")] == '\0' || line[0] == '#')
		return 0;
	if (f->n == TALLY_TYPES_MAX)
		why = "more types than a database can hold (1024)";
	else
		why = parse_line(line, f, &f->t[f->n]);
	if (why == NULL) {
		f->n++;
		return 0;
	}
	fprintf(stderr, "tally: %s: line %u: %s\n", path, lineno, why);
	return -1;
}

int typesfile_read_stream(FILE *in, const char *path, typesfile *f)
{
	char line[TYPESFILE_LINE_MAX + 2];
	unsigned lineno = 0;
	int rc = 0;

	f->n = 0;
	while (rc == 0 && fgets(line, sizeof line, in) != NULL) {
		lineno++;
		if (strchr(line, '\n') == NULL && !feof(in)) {
			fprintf(stderr, "tally: %s: line %u is longer than %d "
			        "bytes\n", path, lineno, TYPESFILE_LINE_MAX);
			rc = -1;
		} else {
			rc = read_line(path, lineno, line, f);
		}
	}
	if (rc == 0 && ferror(in)) {
		fprintf(stderr, "tally: cannot read %s\n", path);
		rc = -1;
	}
	return rc;
}

int typesfile_read(const char *path, typesfile *f)
{
	FILE *in = fopen(path, "r");
	int rc;

	f->n = 0;
	if (in == NULL) {
		fprintf(stderr, "tally: cannot open %s: %s (an export writes "
		        "it next to the records: it maps type ids to names)\n",
		        path, strerror(errno));
		return -1;
	}
	rc = typesfile_read_stream(in, path, f);
	fclose(in);
	return rc;
}
