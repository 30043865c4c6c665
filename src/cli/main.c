/* main.c: entry point of `tally`: global options (-h -p -a --json), then
 * one command from the table, whose handler returns the exit status.
 * No global state: the parsed options travel in a cli_ctx. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "out.h"

static void version(void)
{
	printf("tally %s (libtally %s, hiredis %d.%d.%d)\n", TALLY_VERSION_STRING,
	       TALLY_VERSION_STRING, HIREDIS_MAJOR, HIREDIS_MINOR,
	       HIREDIS_PATCH);
}

/* The value of a global option at argv[*i]; NULL (after printing why) when
 * it is missing. */
/* -a's value, copied off the command line (freed at the end of main). */
static char *password_copy;

static const char *global_value(int argc, char **argv, int *i)
{
	if (*i + 1 < argc && strlen(argv[*i + 1]) <= CLI_ARG_LEN_MAX)
		return argv[++*i];
	fprintf(stderr, "tally: %s needs a value%s\n", argv[*i],
	        strcmp(argv[*i], "-h") == 0 ? " (HOST; help is --help)" : "");
	return NULL;
}

/* One global option at argv[*i]. Returns CLI_OK, CLI_USAGE, CLI_ERR, or
 * -1 when the option was --help/--version and the program is done. */
static int global_option(cli_ctx *ctx, int argc, char **argv, int *i)
{
	const char *o = argv[*i], *v;
	uint64_t port;

	if (strcmp(o, "--help") == 0) {
		cli_help_all();
		return -1;
	}
	if (strcmp(o, "--version") == 0) {
		version();
		return -1;
	}
	if (strcmp(o, "--json") == 0) {
		ctx->json = 1;
		return CLI_OK;
	}
	if (strcmp(o, "-h") && strcmp(o, "-p") && strcmp(o, "-a")) {
		char shown[OUT_QUOTE_MAX], msg[OUT_QUOTE_MAX + 160];
		out_quote(shown, sizeof shown, o, strlen(o));
		snprintf(msg, sizeof msg, "unknown global option %s: they are "
		         "-h HOST, -p PORT, -a PASSWORD, --json (a command's "
		         "own options go after the COMMAND)", shown);
		return cli_usage_error(NULL, msg);
	}
	if ((v = global_value(argc, argv, i)) == NULL)
		return CLI_USAGE;
	if (o[1] == 'h')
		ctx->host = v;
	else if (o[1] == 'a') {
		/* Everyone on the machine can read a command line (ps): keep
		 * a copy and wipe the original, as tallyd does. */
		free(password_copy);
		password_copy = strdup(v);
		if (password_copy == NULL) {
			fprintf(stderr, "tally: out of memory\n");
			return CLI_ERR;
		}
		memset(argv[*i], 0, strlen(argv[*i]));   /* v is argv[*i] */
		ctx->password = password_copy;
	}
	else if (cli_arg_u64("PORT", v, 1, 65535, &port) != CLI_OK)
		return CLI_USAGE;
	else
		ctx->port = (int)port;
	return CLI_OK;
}

/* rc, or CLI_ERR if stdout could not be written: a full disk or a closed
 * pipe must not look like success. */
static int stdout_done(int rc)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "tally: could not write the output\n");
		return rc != CLI_OK ? rc : CLI_ERR;
	}
	return rc;
}

static int run_command(const cli_ctx *ctx0, int argc, char **argv)
{
	cli_ctx ctx = *ctx0;
	const cli_cmd *c;
	cli_args a;
	int help = 0;
	char shown[OUT_QUOTE_MAX];

	if (strcmp(argv[0], "help") == 0) {
		c = argc > 1 ? cli_cmd_find(argv[1]) : NULL;
		if (argc > 1 && c == NULL) {
			char msg[OUT_QUOTE_MAX + 32];
			out_quote(shown, sizeof shown, argv[1], strlen(argv[1]));
			snprintf(msg, sizeof msg, "no help for %s: not a "
			         "command", shown);
			return cli_usage_error(NULL, msg);
		}
		if (c != NULL)
			cli_help_cmd(c);
		else
			cli_help_all();
		return stdout_done(CLI_OK);
	}
	c = cli_cmd_find(argv[0]);
	if (c == NULL) {
		char msg[OUT_QUOTE_MAX + 32];
		out_quote(shown, sizeof shown, argv[0], strlen(argv[0]));
		snprintf(msg, sizeof msg, "unknown command %s", shown);
		return cli_usage_error(NULL, msg);
	}
	int rc = cli_args_parse(c, argc - 1, argv + 1, &a, &help, &ctx.json);
	if (rc != CLI_OK)
		return rc;
	if (help) {
		cli_help_cmd(c);
		return stdout_done(CLI_OK);
	}
	return stdout_done(c->run(&ctx, &a));
}

int main(int argc, char **argv)
{
	cli_ctx ctx = { .host = CLI_DEFAULT_HOST, .port = CLI_DEFAULT_PORT,
	                .password = getenv("TALLY_PASSWORD") };
	int i = 1, rc = CLI_OK;

	/* An empty TALLY_PASSWORD is none: AUTH "" fails on every server. */
	if (ctx.password != NULL && ctx.password[0] == '\0')
		ctx.password = NULL;
	for (; i < argc && argv[i][0] == '-' && rc == CLI_OK; i++) {
		if (strcmp(argv[i], "--") == 0) { /* ends options here too */
			i++;
			break;
		}
		rc = global_option(&ctx, argc, argv, &i);
	}
	if (rc != CLI_OK)
		rc = rc < 0 ? stdout_done(CLI_OK) : rc;
	else if (i >= argc)
		rc = cli_usage_error(NULL, "no command given");
	else
		rc = run_command(&ctx, argc - i, argv + i);
	free(password_copy);
	return rc;
}
