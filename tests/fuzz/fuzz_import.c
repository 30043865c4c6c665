/* fuzz_import.c: libFuzzer harness of what `tally import` reads: the
 * OUT.types text (cli/typesfile.c) and the records checked by the import's
 * first pass (cli/import.c), on memory instead of files. Input: the types
 * text, a line "%%", then the records' bytes; without that line the whole
 * input is records and the types are a fixed pair. Properties: no crash;
 * accepted types obey the file's rules; the first refused record is the
 * one an independent reading of the rules refuses. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cli/import.h"
#include "cli/typesfile.h"
#include "core/keys.h"
#include "core/record.h"
#include "core/varint.h"
#include "fuzz.h"

static const char default_types[] = "1 like unique\n2 view total\n";
static const char sep[] = "\n%%\n";

/* Every accepted type: id 1..65535, a valid name, a mode, no id or name
 * listed twice. */
static void check_types(const typesfile *f)
{
	FUZZ_CHECK(f->n <= TALLY_TYPES_MAX);
	for (size_t i = 0; i < f->n; i++) {
		const tally_type_info *t = &f->t[i];
		FUZZ_CHECK(t->id >= 1);
		FUZZ_CHECK(name_valid(t->name, strlen(t->name)));
		FUZZ_CHECK(t->mode == TALLY_MODE_UNIQUE ||
		           t->mode == TALLY_MODE_TOTAL);
		for (size_t j = 0; j < i; j++) {
			FUZZ_CHECK(f->t[j].id != t->id);
			FUZZ_CHECK(strcmp(f->t[j].name, t->name) != 0);
		}
	}
}

static const tally_type_info *find(const typesfile *f, uint16_t id)
{
	for (size_t i = 0; i < f->n; i++)
		if (f->t[i].id == id)
			return &f->t[i];
	return NULL;
}

/* The rules of a records file read independently of import.c: the index
 * of the first record they refuse, or the number of records. */
static size_t ref_first_bad(const typesfile *f, const uint8_t *d, size_t n)
{
	/* Objects seen and their last totals; few records fit max_len. */
	enum { OBJS_MAX = 1024 };
	static uint64_t keys[OBJS_MAX];
	static int64_t totals[OBJS_MAX];
	size_t nobj = 0, nrec = n / RECORD_SIZE;

	for (size_t i = 0; i < nrec; i++) {
		const uint8_t *raw = d + i * RECORD_SIZE;
		if (raw[0] >> 2)
			return i; /* top 6 bits of word 0 */
		uint16_t ktype = (uint16_t)(raw[0] << 14 | raw[1] << 6 |
		                            raw[2] >> 2);
		uint64_t content = be64_get(raw + 8) >> 32;
		uint64_t member = be64_get(raw + 8) & UINT32_MAX;
		int64_t total = (int64_t)be64_get(raw + 16);
		const tally_type_info *t = find(f, ktype);
		if (t == NULL)
			return i;
		if (t->mode == TALLY_MODE_UNIQUE && member == 0)
			return i;
		uint64_t key = (uint64_t)ktype << 32 | content;
		size_t k = 0;
		while (k < nobj && keys[k] != key)
			k++;
		int64_t prev = k < nobj ? totals[k] : 0;
		if (k == nobj) {
			FUZZ_CHECK(nobj < OBJS_MAX);
			keys[nobj++] = key;
		}
		totals[k] = total;
		/* The change must fit an int64, for total types. */
		if (t->mode == TALLY_MODE_TOTAL &&
		    ((prev < 0 && total > INT64_MAX + prev) ||
		     (prev > 0 && total < INT64_MIN + prev) ||
		     (total - prev == INT64_MIN)))
			return i;
	}
	return nrec;
}

/* The first "\n%%\n" in d[0, n), or NULL. */
static const uint8_t *find_sep(const uint8_t *d, size_t n)
{
	size_t k = sizeof sep - 1;
	for (size_t i = 0; i + k <= n; i++)
		if (memcmp(d + i, sep, k) == 0)
			return d + i;
	return NULL;
}

/* /dev/null, where the types reader's messages go while fuzzing: one
 * line per refused input would slow the run and drown its report. */
static int devnull = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	devnull = open("/dev/null", O_WRONLY);
	FUZZ_CHECK(devnull >= 0);
	return 0;
}

/* Parse the types text; 0 when accepted. */
static int read_types(const uint8_t *d, size_t n, typesfile *f)
{
	f->n = 0;
	if (n == 0)
		return 0;
	FILE *in = fmemopen((void *)(uintptr_t)d, n, "r");
	FUZZ_CHECK(in != NULL);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	FUZZ_CHECK(saved >= 0 && dup2(devnull, STDERR_FILENO) >= 0);
	int rc = typesfile_read_stream(in, "fuzz", f);
	fflush(stderr);
	FUZZ_CHECK(dup2(saved, STDERR_FILENO) >= 0 && close(saved) == 0);
	fclose(in);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static typesfile types;
	const uint8_t *types_txt = (const uint8_t *)default_types;
	size_t types_len = sizeof default_types - 1;
	const uint8_t *rec = data;
	size_t rec_len = size;
	char msg[IMPORT_MSG_MAX];
	uint64_t bad = 0;

	const uint8_t *cut = find_sep(data, size);
	if (cut != NULL) {
		types_txt = data;
		types_len = (size_t)(cut - data) + 1; /* with its newline */
		rec = cut + sizeof sep - 1;
		rec_len = size - (size_t)(rec - data);
	}
	if (read_types(types_txt, types_len, &types) != 0)
		return 0;
	check_types(&types);
	int rc = import_check_records(&types, "fuzz", rec, rec_len, &bad, msg);
	if (rec_len % RECORD_SIZE != 0) {
		FUZZ_CHECK(rc != 0);
		return 0;
	}
	size_t want = ref_first_bad(&types, rec, rec_len);
	if (want == rec_len / RECORD_SIZE) {
		FUZZ_CHECK(rc == 0);
	} else {
		FUZZ_CHECK(rc != 0);
		FUZZ_CHECK(bad == want);
		FUZZ_CHECK(memchr(msg, '\0', sizeof msg) != NULL && msg[0]);
	}
	return 0;
}
