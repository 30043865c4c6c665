/* replay.c: runs a libFuzzer harness over files without libFuzzer, so the
 * ordinary builds (gcc, and the ASan + UBSan suite) replay the seed corpora
 * and every crash input kept there as regression tests.
 * Usage: fuzz_replay_X DIR_OR_FILE...; exits 1 if a file cannot be read
 * (a failing property aborts). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Defined by the harnesses that set something up (an engine). */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Inputs are small: libFuzzer's -max_len for these is at most 8 KiB. */
#define REPLAY_INPUT_MAX ((size_t)1 << 20)

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = malloc(REPLAY_INPUT_MAX);
	size_t n = 0;
	int rc = -1;

	if (f != NULL && buf != NULL) {
		n = fread(buf, 1, REPLAY_INPUT_MAX, f);
		if (!ferror(f) && feof(f)) {
			/* An exact-size copy, so a read past the input is an
			 * ASan report, as under libFuzzer. */
			uint8_t *exact = malloc(n ? n : 1);
			if (exact != NULL) {
				if (n > 0)
					memcpy(exact, buf, n);
				LLVMFuzzerTestOneInput(exact, n);
				free(exact);
				rc = 0;
			}
		}
	}
	if (rc != 0)
		fprintf(stderr, "replay: cannot read %s\n", path);
	if (f != NULL)
		fclose(f);
	free(buf);
	return rc;
}

static int run_path(const char *path, size_t *count)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "replay: no such file: %s\n", path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		(*count)++;
		return run_file(path);
	}
	DIR *d = opendir(path);
	if (d == NULL)
		return -1;
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		char sub[4096];
		if (e->d_name[0] == '.')
			continue;
		int k = snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
		if (k < 0 || (size_t)k >= sizeof sub)
			rc = -1;
		else
			rc = run_path(sub, count);
	}
	closedir(d);
	return rc;
}

int main(int argc, char **argv)
{
	size_t count = 0;
	if (LLVMFuzzerInitialize != NULL)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++)
		if (run_path(argv[i], &count) != 0)
			return 1;
	printf("replayed %zu inputs\n", count);
	return 0;
}
