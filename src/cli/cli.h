/* cli.h: what the files of the `tally` command line share: exit codes, the
 * global options, the command table's shape, parsed arguments, strict
 * number parsing and every command's entry point. */
#ifndef TALLY_CLI_H
#define TALLY_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "tally.h"

/* Exit statuses, part of the CLI's contract (scripts test them). */
enum cli_exit {
	CLI_OK = 0,          /* success */
	CLI_ERR = 1,         /* an error reply from the server, or an offline
	                        tool failed (bad file, busy folder, I/O) */
	CLI_USAGE = 2,       /* the command line is wrong: nothing was done */
	CLI_UNREACHABLE = 3  /* the server could not be reached or hung up */
};

/* Most arguments on one command line: the largest command is mcount with
 * TALLY_MULTI_MAX contents plus its fixed arguments and options. */
#define CLI_ARGC_MAX (TALLY_MULTI_MAX + 16)
/* Longest single argument. Counter keys (TALLY_KEY_MAX) are the longest
 * thing a command sends; paths fit too. */
#define CLI_ARG_LEN_MAX 4096
/* Most options one command accepts. */
#define CLI_OPTS_MAX 6

#define CLI_DEFAULT_HOST "127.0.0.1"
#define CLI_DEFAULT_PORT 6380

/* Global options, given before the command. Read-only once parsed. */
typedef struct cli_ctx {
	const char *host;
	int port;
	const char *password; /* NULL: no AUTH */
	int json;             /* one JSON document on stdout */
} cli_ctx;

typedef struct cli_cmd cli_cmd;

/* A command's arguments after option parsing. pos points into argv, which
 * the parser compacts in place (positionals first, in order). */
typedef struct cli_args {
	const cli_cmd *cmd;
	char **pos;
	int npos;
	/* Per entry of cmd->opts: its value, "" for a flag that was given,
	 * NULL when absent. */
	const char *val[CLI_OPTS_MAX];
} cli_args;

typedef int (*cli_run_fn)(const cli_ctx *ctx, const cli_args *a);

/* One command: metadata is data, so arity and option errors come from the
 * table rather than from each handler. */
struct cli_cmd {
	const char *name;
	cli_run_fn run;
	int pos_min, pos_max;
	/* Options without their leading "--"; a trailing '=' means the option
	 * takes a value ("limit="), none means a flag ("progress"). */
	const char *opts[CLI_OPTS_MAX];
	const char *usage;   /* arguments, after the name */
	const char *summary; /* one line for `tally --help` */
	const char *help;    /* details for `tally COMMAND --help` */
};

/* ---- table.c: the command table and help ------------------------------- */
const cli_cmd *cli_cmd_find(const char *name);
void cli_help_all(void);
void cli_help_cmd(const cli_cmd *c);
/* Print "tally: MSG" and the command's usage line; returns CLI_USAGE. */
int cli_usage_error(const cli_cmd *c, const char *msg);

/* ---- args.c: option parsing and strict numbers ------------------------- */
/* Parse argv[0..argc) (the words after the command name). Handles
 * `--help` (sets *help) and `--json` (sets *json). Returns CLI_OK or
 * CLI_USAGE after printing why. */
int cli_args_parse(const cli_cmd *c, int argc, char **argv, cli_args *a,
                   int *help, int *json);
/* Value of option `name` (without "--" or '='), or NULL if absent. */
const char *cli_opt(const cli_args *a, const char *name);

/* Strict parsers: the whole string, decimal digits only (and a leading
 * '-' for int64), no spaces, no '+', no overflow; leading zeros and "-0"
 * are taken (core/parse.h's parse_*_digits). 0 or -1. */
int cli_parse_u64(const char *s, uint64_t *out);
int cli_parse_i64(const char *s, int64_t *out);
/* Parse `s` as an integer in [min, max] for the argument called `what`;
 * on failure print why and return CLI_USAGE. */
int cli_arg_u64(const char *what, const char *s, uint64_t min, uint64_t max,
                uint64_t *out);
int cli_arg_i64(const char *what, const char *s, int64_t min, int64_t max,
                int64_t *out);
/* 1 if s is a valid type name: 1..TALLY_NAME_MAX of [A-Za-z0-9_.:-]. */
int cli_name_ok(const char *s);
/* Check a type name (1..TALLY_NAME_MAX of [A-Za-z0-9_.:-]); CLI_OK or
 * CLI_USAGE after printing why. */
int cli_arg_name(const char *what, const char *s);
/* Check a length in [1, max]; CLI_OK or CLI_USAGE after printing why. */
int cli_arg_len(const char *what, const char *s, size_t max);

/* ---- client commands (client_cmds.c, client_pages.c) ------------------- */
int cmd_incr(const cli_ctx *ctx, const cli_args *a);
int cmd_get(const cli_ctx *ctx, const cli_args *a);
int cmd_add(const cli_ctx *ctx, const cli_args *a);
int cmd_remove(const cli_ctx *ctx, const cli_args *a);
int cmd_count(const cli_ctx *ctx, const cli_args *a);
int cmd_mcount(const cli_ctx *ctx, const cli_args *a);
int cmd_counts(const cli_ctx *ctx, const cli_args *a);
int cmd_has(const cli_ctx *ctx, const cli_args *a);
int cmd_types(const cli_ctx *ctx, const cli_args *a);
int cmd_type_add(const cli_ctx *ctx, const cli_args *a);
int cmd_ping(const cli_ctx *ctx, const cli_args *a);
int cmd_recent(const cli_ctx *ctx, const cli_args *a);
int cmd_history(const cli_ctx *ctx, const cli_args *a);

/* ---- offline tools (stats.c, backup.c, export.c, import.c) ------------- */
int cmd_stats(const cli_ctx *ctx, const cli_args *a);
int cmd_backup(const cli_ctx *ctx, const cli_args *a);
int cmd_export(const cli_ctx *ctx, const cli_args *a);
int cmd_import(const cli_ctx *ctx, const cli_args *a);

#endif
