/* client.c: the RESP connection of the client subcommands. Every failure
 * is reported here once, in the CLI's words, with the exit status that
 * tells a script what went wrong (3: no server, 1: the server said no). */
#include "client.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "out.h"

/* Longest server error text shown; longer ones are cut, marked. */
#define CLIENT_ERRMSG_MAX 600

static struct timeval ms_to_tv(int64_t ms)
{
	struct timeval tv;

	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
	return tv;
}

static void unreachable(const client *c, const char *why)
{
	char safe[CLIENT_ERRMSG_MAX];

	out_safe(safe, sizeof safe, why, strlen(why));
	fprintf(stderr, "tally: cannot reach tallyd at %s: %s\n"
	        "tally: is it running? Start it with `make run` (or "
	        "`build/tallyd --data DIR`), or point -h/-p at it.\n",
	        c->where, safe);
}

static void print_error_reply(const redisReply *r)
{
	char safe[CLIENT_ERRMSG_MAX];

	out_safe(safe, sizeof safe, r->str, r->len);
	fprintf(stderr, "tally: %s\n", safe);
	if (strncmp(r->str, "NOAUTH", 6) == 0)
		fprintf(stderr, "tally: give the password with -a PASSWORD "
		        "or the TALLY_PASSWORD environment variable\n");
}

void client_timeout(client *c, int64_t ms)
{
	redisSetTimeout(c->rc, ms_to_tv(ms));
}

static int client_auth(client *c, const char *password)
{
	const char *argv[2] = { "AUTH", password };
	redisReply *r = NULL;
	int rc = client_call(c, 2, argv, &r);

	freeReplyObject(r);
	return rc;
}

int client_open(client *c, const cli_ctx *ctx)
{
	int v6 = strchr(ctx->host, ':') != NULL;

	c->before_say = NULL;
	c->before_say_arg = NULL;
	snprintf(c->where, sizeof c->where, v6 ? "[%.256s]:%d" : "%.256s:%d",
	         ctx->host, ctx->port);
	c->rc = redisConnectWithTimeout(ctx->host, ctx->port,
	                                ms_to_tv(CLIENT_CONNECT_TIMEOUT_MS));
	if (c->rc == NULL) {
		unreachable(c, "out of memory");
		return CLI_UNREACHABLE;
	}
	if (c->rc->err) {
		unreachable(c, c->rc->errstr);
		client_close(c);
		return CLI_UNREACHABLE;
	}
	client_timeout(c, CLIENT_TIMEOUT_MS);
	if (ctx->password != NULL) {
		int rc = client_auth(c, ctx->password);
		if (rc != CLI_OK) {
			client_close(c);
			return rc;
		}
	}
	return CLI_OK;
}

void client_close(client *c)
{
	if (c->rc != NULL)
		redisFree(c->rc);
	c->rc = NULL;
}

int client_call(client *c, int argc, const char **argv, redisReply **out)
{
	size_t lens[CLI_ARGC_MAX];
	redisReply *r;

	*out = NULL;
	if (argc < 1 || argc > CLI_ARGC_MAX)
		return CLI_USAGE;
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = redisCommandArgv(c->rc, argc, argv, lens);
	if ((r == NULL || r->type == REDIS_REPLY_ERROR) && c->before_say)
		c->before_say(c->before_say_arg);
	if (r == NULL) {
		char safe[CLIENT_ERRMSG_MAX];

		out_safe(safe, sizeof safe, c->rc->errstr,
		         strlen(c->rc->errstr));
		fprintf(stderr, "tally: lost the connection to tallyd at %s: "
		        "%s\n", c->where, safe);
		return CLI_UNREACHABLE;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		print_error_reply(r);
		freeReplyObject(r);
		return CLI_ERR;
	}
	*out = r;
	return CLI_OK;
}

int client_once(const cli_ctx *ctx, int argc, const char **argv,
                redisReply **out)
{
	client c;
	int rc = client_open(&c, ctx);

	*out = NULL;
	if (rc != CLI_OK)
		return rc;
	rc = client_call(&c, argc, argv, out);
	client_close(&c);
	return rc;
}

int client_bad_reply(const char *cmd, const char *what)
{
	fprintf(stderr, "tally: unexpected reply to %s: expected %s (is the "
	        "server a tallyd of this version?)\n", cmd, what);
	return CLI_ERR;
}

int client_arg_object(const cli_args *a, char content[CLIENT_NUM_LEN])
{
	uint64_t c;
	int rc = cli_arg_name("CTYPE", a->pos[0]);

	if (rc == CLI_OK)
		rc = cli_arg_name("KTYPE", a->pos[1]);
	if (rc == CLI_OK)
		rc = cli_arg_u64("CONTENT", a->pos[2], 0, UINT64_MAX, &c);
	if (rc == CLI_OK)
		snprintf(content, CLIENT_NUM_LEN, "%" PRIu64, c);
	return rc;
}

int reply_i64(const redisReply *r, int64_t *out)
{
	char buf[24];

	if (r->type == REDIS_REPLY_INTEGER) {
		*out = (int64_t)r->integer;
		return 0;
	}
	if (reply_strcpy(r, buf, sizeof buf) != 0)
		return -1;
	return cli_parse_i64(buf, out);
}

int reply_u64(const redisReply *r, uint64_t *out)
{
	char buf[24];

	if (r->type == REDIS_REPLY_INTEGER) {
		/* Conversion to unsigned is defined: modulo 2^64. */
		*out = (uint64_t)r->integer;
		return 0;
	}
	if (reply_strcpy(r, buf, sizeof buf) != 0)
		return -1;
	return cli_parse_u64(buf, out);
}

int reply_str(const redisReply *r, const char **s, size_t *len)
{
	if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)
		return -1;
	*s = r->str;
	*len = r->len;
	return 0;
}

int reply_strcpy(const redisReply *r, char *buf, size_t cap)
{
	const char *s;
	size_t len;

	if (reply_str(r, &s, &len) != 0 || len >= cap ||
	    memchr(s, '\0', len) != NULL)
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return 0;
}

int reply_array(const redisReply *r, size_t n)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	return n == 0 || r->elements == n ? 0 : -1;
}
