/* args.c: a command's words into positionals and options, checked against
 * the command table, and strict number and name parsing, so a typo such as
 * `12x` or `1e3` is a usage error instead of a silently different id. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/parse.h"
#include "out.h"

/* The CLI's numbers (argv words, types files, reply strings) go through
 * core/parse.h's lenient parsers, on purpose not parse_i64_strict: what
 * is sent on is re-printed in canonical form first, so "007" and "-0" may
 * be taken here although the server's Redis rules refuse them. The scan
 * is bounded by the NUL-terminated string, as it always was. */
int cli_parse_u64(const char *s, uint64_t *out)
{
	if (s == NULL)
		return -1;
	return parse_u64_digits(s, strlen(s), PARSE_LEN_ANY, out);
}

int cli_parse_i64(const char *s, int64_t *out)
{
	if (s == NULL)
		return -1;
	return parse_i64_digits(s, strlen(s), PARSE_LEN_ANY, out);
}

int cli_arg_u64(const char *what, const char *s, uint64_t min, uint64_t max,
                uint64_t *out)
{
	char shown[OUT_QUOTE_MAX];

	if (cli_parse_u64(s, out) == 0 && *out >= min && *out <= max)
		return CLI_OK;
	out_quote(shown, sizeof shown, s, strlen(s));
	fprintf(stderr, "tally: %s must be an integer from %" PRIu64 " to %"
	        PRIu64 ", got %s\n", what, min, max, shown);
	return CLI_USAGE;
}

int cli_arg_i64(const char *what, const char *s, int64_t min, int64_t max,
                int64_t *out)
{
	char shown[OUT_QUOTE_MAX];

	if (cli_parse_i64(s, out) == 0 && *out >= min && *out <= max)
		return CLI_OK;
	out_quote(shown, sizeof shown, s, strlen(s));
	fprintf(stderr, "tally: %s must be an integer from %" PRId64 " to %"
	        PRId64 ", got %s\n", what, min, max, shown);
	return CLI_USAGE;
}

static int name_char_ok(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') || strchr("_.:-", ch) != NULL;
}

int cli_name_ok(const char *s)
{
	size_t n = strlen(s);
	int ok = n >= 1 && n <= TALLY_NAME_MAX;

	for (size_t i = 0; ok && i < n; i++)
		ok = name_char_ok(s[i]);
	return ok;
}

int cli_arg_name(const char *what, const char *s)
{
	char shown[OUT_QUOTE_MAX];

	if (cli_name_ok(s))
		return CLI_OK;
	out_quote(shown, sizeof shown, s, strlen(s));
	fprintf(stderr, "tally: %s must be 1..%d characters of "
	        "A-Z a-z 0-9 _ . : -, got %s\n", what, TALLY_NAME_MAX, shown);
	return CLI_USAGE;
}

int cli_arg_len(const char *what, const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n >= 1 && n <= max)
		return CLI_OK;
	fprintf(stderr, "tally: %s must be 1..%zu bytes, got %zu\n", what,
	        max, n);
	return CLI_USAGE;
}

/* Index of option `name` (n bytes) in c->opts, or -1. */
static int opt_index(const cli_cmd *c, const char *name, size_t n)
{
	for (int i = 0; i < CLI_OPTS_MAX && c->opts[i] != NULL; i++) {
		const char *o = c->opts[i];
		size_t on = strcspn(o, "=");

		if (on == n && memcmp(o, name, n) == 0)
			return i;
	}
	return -1;
}

const char *cli_opt(const cli_args *a, const char *name)
{
	int i = opt_index(a->cmd, name, strlen(name));

	return i < 0 ? NULL : a->val[i];
}

/* One "--name[=value]" word at argv[*i]; may consume the next word as its
 * value. Returns CLI_OK or CLI_USAGE. */
static int parse_option(const cli_cmd *c, int argc, char **argv, int *i,
                        cli_args *a)
{
	const char *word = argv[*i] + 2;
	const char *eq = strchr(word, '=');
	size_t n = eq ? (size_t)(eq - word) : strlen(word);
	char msg[160];
	int k = opt_index(c, word, n);

	if (k < 0) {
		snprintf(msg, sizeof msg, "unknown option --%.*s for '%s'",
		         (int)(n < 40 ? n : 40), word, c->name);
		return cli_usage_error(c, msg);
	}
	int takes_value = strchr(c->opts[k], '=') != NULL;
	if (!takes_value && eq != NULL) {
		snprintf(msg, sizeof msg, "--%s takes no value", c->opts[k]);
		return cli_usage_error(c, msg);
	}
	if (takes_value && eq == NULL && *i + 1 >= argc) {
		snprintf(msg, sizeof msg, "--%.*s needs a value", (int)n, word);
		return cli_usage_error(c, msg);
	}
	if (a->val[k] != NULL) {
		snprintf(msg, sizeof msg, "--%.*s given twice", (int)n, word);
		return cli_usage_error(c, msg);
	}
	a->val[k] = !takes_value ? "" : eq ? eq + 1 : argv[++*i];
	return CLI_OK;
}

/* Every word, options and values included, within CLI_ARG_LEN_MAX. */
static int check_lengths(const cli_cmd *c, int argc, char **argv)
{
	char msg[120];

	if (argc > CLI_ARGC_MAX) {
		snprintf(msg, sizeof msg, "more than %d arguments",
		         CLI_ARGC_MAX);
		return cli_usage_error(c, msg);
	}
	for (int i = 0; i < argc; i++) {
		if (strlen(argv[i]) > CLI_ARG_LEN_MAX) {
			snprintf(msg, sizeof msg, "argument %d is longer than "
			         "%d bytes", i + 1, CLI_ARG_LEN_MAX);
			return cli_usage_error(c, msg);
		}
	}
	return CLI_OK;
}

static int check_count(const cli_cmd *c, const cli_args *a)
{
	char msg[120];

	if (a->npos >= c->pos_min && a->npos <= c->pos_max)
		return CLI_OK;
	/* The bounds too: "1003 given" alone does not say that mcount
	 * takes at most 1000 contents. */
	if (c->pos_min == c->pos_max)
		snprintf(msg, sizeof msg, "wrong number of arguments for '%s' "
		         "(%d given; it takes %d)", c->name, a->npos,
		         c->pos_min);
	else
		snprintf(msg, sizeof msg, "wrong number of arguments for '%s' "
		         "(%d given; it takes %d to %d)", c->name, a->npos,
		         c->pos_min, c->pos_max);
	return cli_usage_error(c, msg);
}

int cli_args_parse(const cli_cmd *c, int argc, char **argv, cli_args *a,
                   int *help, int *json)
{
	int only_pos = 0;
	int rc = check_lengths(c, argc, argv);

	memset(a, 0, sizeof *a);
	a->cmd = c;
	a->pos = argv;
	if (rc != CLI_OK)
		return rc;
	for (int i = 0; i < argc; i++) {
		char *w = argv[i];
		/* Only "--word" is an option: "-5" stays a (negative) number. */
		int is_opt = !only_pos && w[0] == '-' && w[1] == '-';

		if (is_opt && w[2] == '\0') {
			only_pos = 1;
		} else if (is_opt && strcmp(w, "--help") == 0) {
			*help = 1;
		} else if (is_opt && strcmp(w, "--json") == 0) {
			*json = 1;
		} else if (is_opt) {
			rc = parse_option(c, argc, argv, &i, a);
			if (rc != CLI_OK)
				return rc;
		} else {
			/* Compaction in place: the write index never passes
			 * the read index. */
			argv[a->npos++] = w;
		}
	}
	return *help ? CLI_OK : check_count(c, a);
}
