/* table.c: the command table (names, arity, options, help) of `tally`.
 * Command metadata is data: arity and option errors are produced from
 * here by args.c, and `tally --help` is generated from the same rows. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The server's cap on one TALLY.MCOUNT (README): past it a usage error
 * here, not a round trip for a refusal. */
#define CLI_MCOUNT_MAX 1000

#define EVENT_HELP \
	"  CTYPE    content type name (article, video ...), 1..64 of\n" \
	"           [A-Za-z0-9_.:-]; registered on first use\n" \
	"  KTYPE    counting type (like, view ...; see `tally types`)\n" \
	"  CONTENT  content id, 0..2^64-1\n" \
	"  MEMBER   member id, 0..2^64-1; 0 is anonymous (counted, never\n" \
	"           listed; refused by unique types)\n" \
	"  --delta N  amount for total types (default 1); unique types: 1\n" \
	"  --at MS    event time, ms since the Unix epoch (default: now)\n" \
	"  --id TOKEN idempotency token (1..128 bytes): a retry with the\n" \
	"             same token within 10 minutes changes nothing\n" \
	"Prints the object's new count.\n"

#define PAGE_HELP \
	"  --limit N    entries per page, 1..1000 (default 20)\n" \
	"  --before SEQ only entries older than event number SEQ: pass the\n" \
	"               last SEQ of a page to get the next one\n"

static const cli_cmd commands[] = {
	{ "incr", cmd_incr, 1, 2, { NULL }, "KEY [BY]",
	  "add BY (default 1, may be negative) to a named counter",
	  "Sends INCRBY KEY BY and prints the new value. KEY is 1..512 bytes;\n"
	  "BY any int64. A value that would overflow is refused.\n" },
	{ "get", cmd_get, 1, 1, { NULL }, "KEY",
	  "read a named counter",
	  "Sends GET KEY; prints the value, or (nil) (JSON null) when the\n"
	  "counter does not exist.\n" },
	{ "add", cmd_add, 4, 4, { "delta=", "at=", "id=" },
	  "CTYPE KTYPE CONTENT MEMBER [--delta N] [--at MS] [--id TOKEN]",
	  "record an event (MEMBER likes / views ... CONTENT)",
	  "Sends TALLY.ADD. For a unique type the member is put in (a no-op\n"
	  "if it is in already); a total type adds --delta.\n" EVENT_HELP },
	{ "remove", cmd_remove, 4, 4, { "delta=", "at=", "id=" },
	  "CTYPE KTYPE CONTENT MEMBER [--delta N] [--at MS] [--id TOKEN]",
	  "take an event back (unlike, ...)",
	  "Sends TALLY.REMOVE. For a unique type the member is taken out (a\n"
	  "no-op if it is not in); a total type subtracts --delta.\n"
	  EVENT_HELP },
	{ "count", cmd_count, 3, 3, { "at=" }, "CTYPE KTYPE CONTENT [--at MS]",
	  "the count of one object",
	  "Sends TALLY.COUNT. With --at MS: the count as of that time (ms\n"
	  "since the Unix epoch).\n" },
	{ "mcount", cmd_mcount, 3, 2 + CLI_MCOUNT_MAX, { NULL },
	  "CTYPE KTYPE CONTENT...",
	  "the counts of many objects of one type",
	  "Sends TALLY.MCOUNT and prints a CONTENT COUNT table; at most 1000\n"
	  "contents, as the server takes.\n" },
	{ "counts", cmd_counts, 2, 2, { NULL }, "CTYPE CONTENT",
	  "every counting type's count of one object",
	  "Sends TALLY.COUNTS and prints a KTYPE COUNT table, zero counts\n"
	  "included.\n" },
	{ "recent", cmd_recent, 3, 3, { "limit=", "before=" },
	  "CTYPE KTYPE CONTENT [--limit N] [--before SEQ]",
	  "who did it lately: an object's newest events",
	  "Sends TALLY.RECENT; prints MEMBER, TIME (UTC), AT_MS, OP and SEQ,\n"
	  "newest first. Anonymous events are counted, not listed.\n"
	  PAGE_HELP },
	{ "has", cmd_has, 4, 4, { NULL }, "CTYPE KTYPE CONTENT MEMBER",
	  "whether a member is in (unique types) and since when",
	  "Sends TALLY.HAS; prints `yes  TIME  AT_MS` or `no` (exit status\n"
	  "0 either way).\n" },
	{ "history", cmd_history, 2, 2, { "limit=", "before=" },
	  "MEMBER KTYPE [--limit N] [--before SEQ]",
	  "what a member did lately, newest first",
	  "Sends TALLY.HISTORY; prints CTYPE, CONTENT, TIME (UTC), AT_MS, OP\n"
	  "and SEQ. MEMBER must be non-zero.\n" PAGE_HELP },
	{ "types", cmd_types, 0, 0, { NULL }, "",
	  "list the counting types and their modes",
	  "Sends TALLY.TYPES and prints a NAME MODE table.\n" },
	{ "type-add", cmd_type_add, 2, 2, { NULL }, "NAME unique|total",
	  "add a counting type",
	  "Sends TALLY.TYPE ADD NAME MODE. unique: a member is in or out and\n"
	  "the count is the number in; total: every add adds its delta.\n"
	  "Adding a type that exists with the same mode is a no-op.\n" },
	{ "ping", cmd_ping, 0, 0, { NULL }, "",
	  "check that the server answers",
	  "Sends PING; prints PONG.\n" },
	{ "stats", cmd_stats, 0, 0, { "data=", "progress" },
	  "--data DIR [--progress]",
	  "offline: what a data folder holds",
	  "Opens the data folder read-only (tallyd must not be running on it;\n"
	  "no file in it changes) and prints its size on disk, the newest\n"
	  "event number, the counting types, and the events and objects per\n"
	  "content type and counting type, counted by scanning every event.\n"
	  "Progress goes to stderr every 1M events when stderr is a terminal,\n"
	  "or always with --progress.\n" },
	{ "export", cmd_export, 1, 1, { "data=", "ctype=", "progress" },
	  "--data DIR [--ctype NAME] [--progress] OUT",
	  "offline: write events as 24-byte reference records",
	  "Writes every event (of content type NAME, or of all content types)\n"
	  "to OUT as reference records: three big-endian int64 words,\n"
	  "  ktype(16) | increment(1) | ms since 2020-01-01 (41)\n"
	  "  content(32) | member(32)\n"
	  "  running total of the object after the event\n"
	  "object by object, each object's events oldest first; and OUT.types,\n"
	  "a text file `ID NAME MODE` per counting type (records hold the id).\n"
	  "DIR is the data folder (tallyd must not be running on it), opened\n"
	  "read-only: no file in it changes.\n"
	  "Records hold no content type, and an import puts a file under one:\n"
	  "without --ctype, each running total is the sum over the content\n"
	  "types of the totals its counting type and content reached so far,\n"
	  "so an import counts the sums of total types; a unique type's adds\n"
	  "and removes replay in the file's order (a member taken out under one\n"
	  "content type is out of the merged object). Export one content type\n"
	  "per file to keep them apart.\n"
	  "Events whose content or member do not fit 32 bits, or whose time is\n"
	  "outside 2020..2089, are skipped and counted, never truncated. Files\n"
	  "are written under temporary names and renamed when complete.\n"
	  "Progress goes to stderr every 1M events when stderr is a terminal,\n"
	  "or always with --progress.\n" },
	{ "import", cmd_import, 1, 1,
	  { "data=", "ctype=", "window=", "progress" },
	  "--data DIR --ctype NAME [--window N] [--progress] IN",
	  "offline: replay reference records into a data folder",
	  "Reads IN (24-byte records, see export) and IN.types. The whole file\n"
	  "is checked before anything is written: its size must be a multiple\n"
	  "of 24, every record well-formed, every type id listed in IN.types.\n"
	  "Missing counting types are added, then each record is replayed as an\n"
	  "add or remove of content type NAME at the record's time. For total\n"
	  "types the amount and the direction are the change of the object's\n"
	  "running total from its previous record (the first record: |total|,\n"
	  "or 1 if 0, the way the record's add/remove bit says).\n"
	  "--window N writes in flight at once (default 16384, 1..65536).\n"
	  "Records are written in groups of up to 1024, each with the import's\n"
	  "mark, a named counter tally.import:NAME:HASH (HASH of the records,\n"
	  "IN.types and NAME) saying how many records are in, all atomically:\n"
	  "an import that stopped half-way (killed, a crash, a write error) is\n"
	  "finished by running it again, which resumes after the records the\n"
	  "mark counts, and an import run again after it finished writes\n"
	  "nothing. The mark stays in the folder.\n"
	  "DIR is the data folder (tallyd must not be running on it); one that\n"
	  "does not exist is created, in a folder that must.\n"
	  "Reports records imported, no-ops (records that change no count) and\n"
	  "counts that differ from the file's totals (the folder held events of\n"
	  "those objects before, the export skipped some of their events, or a\n"
	  "unique type's member is in it under several content types).\n"
	  "Progress (records sent) goes to stderr every 1M records when stderr\n"
	  "is a terminal, or always with --progress.\n" },
	{ "backup", cmd_backup, 1, 1, { "data=", "progress" },
	  "--data DIR [--progress] OUT",
	  "offline: consistent copy of a data folder",
	  "Writes a consistent copy of DIR into the new folder OUT (which must\n"
	  "not exist): DIR's files, with DIR opened read-only (no file in it\n"
	  "changes). If tallyd is running on DIR, asks the server at -h/-p to\n"
	  "write it instead (TALLY.BACKUP, with OUT made absolute: the path is\n"
	  "on the server's machine; a bare name goes into the server's\n"
	  "--backup-dir when it has one). The copy opens with --data OUT.\n"
	  "Table files are linked into OUT when it is on DIR's file system, and\n"
	  "copied otherwise. Progress of the copy, offline or by tallyd (bytes\n"
	  "and files in OUT" TALLY_BACKUP_PARTIAL ", where it is made, or in\n"
	  "RocksDB's staging folder beside it) goes to stderr every second when\n"
	  "stderr is a terminal, or always with --progress, and a last line\n"
	  "gives what OUT holds.\n" },
};

#define COMMANDS_N (sizeof commands / sizeof commands[0])

const cli_cmd *cli_cmd_find(const char *name)
{
	for (size_t i = 0; i < COMMANDS_N; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

void cli_help_all(void)
{
	printf("tally %s: command line of the tally counting service\n\n"
	       "usage: tally [-h HOST] [-p PORT] [-a PASSWORD] [--json] "
	       "COMMAND [ARGS]\n"
	       "       tally COMMAND --help | tally --help | tally --version\n\n"
	       "global options (before COMMAND):\n"
	       "  -h HOST      tallyd's host (default %s)\n"
	       "  -p PORT      tallyd's RESP port (default %d)\n"
	       "  -a PASSWORD  AUTH with this password (else the\n"
	       "               TALLY_PASSWORD environment variable, if set)\n"
	       "  --json       print one JSON document instead of text (also\n"
	       "               accepted after COMMAND)\n\ncommands:\n",
	       TALLY_VERSION_STRING, CLI_DEFAULT_HOST, CLI_DEFAULT_PORT);
	for (size_t i = 0; i < COMMANDS_N; i++)
		printf("  %-9s %s\n", commands[i].name, commands[i].summary);
	printf("\nClient commands talk to tallyd over RESP; offline commands\n"
	       "(stats, export, import, backup) open a data folder directly.\n"
	       "Numbers are strict decimal integers: 12x, +5 or 1e3 are errors.\n"
	       "`--` ends options (for arguments that start with --).\n\n"
	       "exit status: 0 success; 1 error reply from the server, or an\n"
	       "offline tool failed; 2 usage error (nothing was done); 3 the\n"
	       "server could not be reached.\n");
}

void cli_help_cmd(const cli_cmd *c)
{
	printf("usage: tally [global options] %s %s\n\n%s.\n\n%s", c->name,
	       c->usage, c->summary, c->help);
	printf("\nGlobal options and exit statuses: tally --help\n");
}

int cli_usage_error(const cli_cmd *c, const char *msg)
{
	fprintf(stderr, "tally: %s\n", msg);
	if (c != NULL)
		fprintf(stderr, "usage: tally %s %s\n(more: tally %s --help)\n",
		        c->name, c->usage, c->name);
	else
		fprintf(stderr, "(more: tally --help)\n");
	return CLI_USAGE;
}
