/* client.h: one connection to tallyd over RESP (hiredis), with the CLI's
 * error reporting: unreachable server -> exit 3, error reply -> exit 1,
 * and typed accessors that check a reply's shape before it is used. */
#ifndef TALLY_CLI_CLIENT_H
#define TALLY_CLI_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cli.h"

/* Connecting gives up after this long (a dead host must not hang). */
#define CLIENT_CONNECT_TIMEOUT_MS 3000
/* A reply must come within this long; a server-side backup may take
 * longer and uses CLIENT_SLOW_TIMEOUT_MS. */
#define CLIENT_TIMEOUT_MS 30000
#define CLIENT_SLOW_TIMEOUT_MS 3600000
/* "host:port" as shown in messages. */
#define CLIENT_WHERE_MAX 320
/* Room for a u64 or int64 in decimal, sign and NUL included: a number
 * argument as the CLI sends it. */
#define CLIENT_NUM_LEN 24

typedef struct client {
	redisContext *rc;
	char where[CLIENT_WHERE_MAX];
	/* Called, when set, before the client prints a message to stderr,
	 * so that a progress line drawn there is ended first. NULL after
	 * client_open(). */
	void (*before_say)(void *arg);
	void *before_say_arg;
} client;

/* Connect and AUTH if a password is set. Returns CLI_OK, CLI_UNREACHABLE
 * or CLI_ERR (AUTH refused), after printing why. */
int client_open(client *c, const cli_ctx *ctx);
void client_close(client *c);
/* Change the reply timeout (ms). */
void client_timeout(client *c, int64_t ms);

/* Send one command, wait for its reply. CLI_OK with *out set (never an
 * error reply); CLI_ERR after printing the server's error; or
 * CLI_UNREACHABLE after printing why the connection failed. The caller
 * frees *out with freeReplyObject(). */
int client_call(client *c, int argc, const char **argv, redisReply **out);

/* Connect, call, close: the life of most subcommands. */
int client_once(const cli_ctx *ctx, int argc, const char **argv,
                redisReply **out);

/* Print "tally: unexpected reply to CMD: expected WHAT" and return
 * CLI_ERR: the server speaks another version of the contract. */
int client_bad_reply(const char *cmd, const char *what);

/* Check the object a command is about, CTYPE KTYPE CONTENT at
 * a->pos[0..2], in that order, and write CONTENT in canonical decimal to
 * content (a typed "007" is sent as "7"). CLI_OK, or CLI_USAGE after
 * printing why. */
int client_arg_object(const cli_args *a, char content[CLIENT_NUM_LEN]);

/* Reply accessors; 0 on success, -1 on a wrong type or value.
 * Integers come as RESP integers or as decimal strings. u64 fields
 * (members, contents, seq) that the server sent as a negative integer
 * are taken as the two's-complement u64 they are (ids past 2^63). */
int reply_i64(const redisReply *r, int64_t *out);
int reply_u64(const redisReply *r, uint64_t *out);
/* A string or status reply: its bytes and length. */
int reply_str(const redisReply *r, const char **s, size_t *len);
/* A string reply copied into buf (cap bytes) if it fits, NUL-terminated. */
int reply_strcpy(const redisReply *r, char *buf, size_t cap);
/* An array of exactly n elements (n 0: any length). */
int reply_array(const redisReply *r, size_t n);

#endif
