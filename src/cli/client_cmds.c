/* client_cmds.c: the client subcommands with short replies (counters,
 * events, counts, types, ping). Each one checks its arguments strictly
 * before connecting, so a typo never reaches the server, then maps to
 * exactly one command of the RESP contract (docs: DESIGN.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "json.h"
#include "out.h"

/* Print one integer reply as `N` or {"<key>":N}. */
static int print_int(const cli_ctx *ctx, const char *cmd, const char *key,
                     redisReply *r)
{
	int64_t v;

	if (reply_i64(r, &v) != 0) {
		freeReplyObject(r);
		return client_bad_reply(cmd, "an integer");
	}
	freeReplyObject(r);
	if (ctx->json) {
		json_w w;
		json_start(&w, stdout);
		json_obj(&w);
		json_kv_i64(&w, key, v);
		json_obj_end(&w);
		json_finish(&w);
	} else {
		printf("%" PRId64 "\n", v);
	}
	return CLI_OK;
}

/* Send argv and print its integer reply. */
static int call_int(const cli_ctx *ctx, int argc, const char **argv,
                    const char *key)
{
	redisReply *r;
	int rc = client_once(ctx, argc, argv, &r);

	return rc != CLI_OK ? rc : print_int(ctx, argv[0], key, r);
}

int cmd_incr(const cli_ctx *ctx, const cli_args *a)
{
	char by[CLIENT_NUM_LEN] = "1";
	int64_t v;
	int rc = cli_arg_len("KEY", a->pos[0], TALLY_KEY_MAX);

	if (rc == CLI_OK && a->npos == 2) {
		rc = cli_arg_i64("BY", a->pos[1], INT64_MIN, INT64_MAX, &v);
		if (rc == CLI_OK)
			snprintf(by, sizeof by, "%" PRId64, v);
	}
	if (rc != CLI_OK)
		return rc;
	const char *argv[] = { "INCRBY", a->pos[0], by };
	return call_int(ctx, 3, argv, "value");
}

static void print_get(const cli_ctx *ctx, const redisReply *r)
{
	json_w w;
	int64_t v;
	int nil = r->type == REDIS_REPLY_NIL;
	int num = !nil && reply_i64(r, &v) == 0;
	char safe[OUT_CELL_MAX];

	if (!ctx->json) {
		if (!nil && !num)
			out_safe(safe, sizeof safe, r->str, r->len);
		if (nil)
			puts("(nil)");
		else if (num)
			printf("%" PRId64 "\n", v);
		else
			puts(safe);
		return;
	}
	json_start(&w, stdout);
	json_obj(&w);
	json_key(&w, "value");
	if (nil)
		json_null(&w);
	else if (num)
		json_i64(&w, v);
	else
		json_strn(&w, r->str, r->len);
	json_obj_end(&w);
	json_finish(&w);
}

int cmd_get(const cli_ctx *ctx, const cli_args *a)
{
	const char *argv[] = { "GET", a->pos[0] };
	redisReply *r;
	int rc = cli_arg_len("KEY", a->pos[0], TALLY_KEY_MAX);

	if (rc == CLI_OK)
		rc = client_once(ctx, 2, argv, &r);
	if (rc != CLI_OK)
		return rc;
	if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_INTEGER &&
	    r->type != REDIS_REPLY_STRING) {
		freeReplyObject(r);
		return client_bad_reply("GET", "a value or nil");
	}
	print_get(ctx, r);
	freeReplyObject(r);
	return CLI_OK;
}

/* TALLY.ADD / TALLY.REMOVE with canonical numbers (a server with Redis's
 * parsing refuses "007"). */
static int event_cmd(const cli_ctx *ctx, const cli_args *a, const char *cmd)
{
	char content[CLIENT_NUM_LEN], member[CLIENT_NUM_LEN];
	char delta[CLIENT_NUM_LEN], at[CLIENT_NUM_LEN];
	const char *argv[11] = { cmd, a->pos[0], a->pos[1], content, member };
	const char *d = cli_opt(a, "delta"), *t = cli_opt(a, "at");
	const char *id = cli_opt(a, "id");
	uint64_t m;
	int64_t dv = 0, tv = 0;
	int argc = 5;
	int rc = client_arg_object(a, content);

	if (rc == CLI_OK)
		rc = cli_arg_u64("MEMBER", a->pos[3], 0, UINT64_MAX, &m);
	if (rc == CLI_OK && d != NULL)
		rc = cli_arg_i64("--delta", d, 1, INT64_MAX, &dv);
	if (rc == CLI_OK && t != NULL)
		rc = cli_arg_i64("--at", t, 1, TALLY_AT_MS_MAX, &tv);
	if (rc == CLI_OK && id != NULL)
		rc = cli_arg_len("--id", id, TALLY_ID_MAX);
	if (rc != CLI_OK)
		return rc;
	snprintf(member, sizeof member, "%" PRIu64, m);
	snprintf(delta, sizeof delta, "%" PRId64, dv);
	snprintf(at, sizeof at, "%" PRId64, tv);
	if (d != NULL) {
		argv[argc++] = "DELTA";
		argv[argc++] = delta;
	}
	if (t != NULL) {
		argv[argc++] = "AT";
		argv[argc++] = at;
	}
	if (id != NULL) {
		argv[argc++] = "ID";
		argv[argc++] = id;
	}
	return call_int(ctx, argc, argv, "count");
}

int cmd_add(const cli_ctx *ctx, const cli_args *a)
{
	return event_cmd(ctx, a, "TALLY.ADD");
}

int cmd_remove(const cli_ctx *ctx, const cli_args *a)
{
	return event_cmd(ctx, a, "TALLY.REMOVE");
}

int cmd_count(const cli_ctx *ctx, const cli_args *a)
{
	char content[CLIENT_NUM_LEN], at[CLIENT_NUM_LEN];
	const char *argv[6] = { "TALLY.COUNT", a->pos[0], a->pos[1], content,
	                        "AT", at };
	const char *t = cli_opt(a, "at");
	int64_t tv = 0;
	int rc = client_arg_object(a, content);

	if (rc == CLI_OK && t != NULL)
		rc = cli_arg_i64("--at", t, 1, TALLY_AT_MS_MAX, &tv);
	if (rc != CLI_OK)
		return rc;
	snprintf(at, sizeof at, "%" PRId64, tv);
	return call_int(ctx, t != NULL ? 6 : 4, argv, "count");
}

/* ---- mcount ------------------------------------------------------------- */

typedef struct mcount_rows {
	const uint64_t *ids;
	const int64_t *counts;
} mcount_rows;

static void mcount_cell(const void *data, size_t row, size_t col,
                        char *buf, size_t cap)
{
	const mcount_rows *m = data;

	if (col == 0)
		snprintf(buf, cap, "%" PRIu64, m->ids[row]);
	else
		snprintf(buf, cap, "%" PRId64, m->counts[row]);
}

static void mcount_print(const cli_ctx *ctx, const mcount_rows *m, size_t n)
{
	static const char *const head[] = { "CONTENT", "COUNT" };
	static const int right[] = { 1, 1 };
	out_table t = { head, right, 2, n, mcount_cell, m };
	json_w w;

	if (!ctx->json) {
		out_table_print(stdout, &t);
		return;
	}
	json_start(&w, stdout);
	json_obj(&w);
	json_key(&w, "counts");
	json_arr(&w);
	for (size_t i = 0; i < n; i++) {
		json_obj(&w);
		json_kv_u64(&w, "content", m->ids[i]);
		json_kv_i64(&w, "count", m->counts[i]);
		json_obj_end(&w);
	}
	json_arr_end(&w);
	json_obj_end(&w);
	json_finish(&w);
}

/* Read the reply into counts[n]; CLI_OK or CLI_ERR. */
static int mcount_reply(const redisReply *r, size_t n, int64_t *counts)
{
	if (reply_array(r, n) != 0)
		return client_bad_reply("TALLY.MCOUNT", "one count per content");
	for (size_t i = 0; i < n; i++)
		if (reply_i64(r->element[i], &counts[i]) != 0)
			return client_bad_reply("TALLY.MCOUNT", "integers");
	return CLI_OK;
}

/* Parse the contents and build the command; buffers are the caller's. */
static int mcount_args(const cli_args *a, size_t n, uint64_t *ids,
                       char (*num)[CLIENT_NUM_LEN], const char **argv)
{
	int rc = cli_arg_name("CTYPE", a->pos[0]);

	if (rc == CLI_OK)
		rc = cli_arg_name("KTYPE", a->pos[1]);
	for (size_t i = 0; rc == CLI_OK && i < n; i++) {
		rc = cli_arg_u64("CONTENT", a->pos[2 + i], 0, UINT64_MAX,
		                 &ids[i]);
		snprintf(num[i], CLIENT_NUM_LEN, "%" PRIu64, ids[i]);
		argv[3 + i] = num[i];
	}
	argv[0] = "TALLY.MCOUNT";
	argv[1] = a->pos[0];
	argv[2] = a->pos[1];
	return rc;
}

int cmd_mcount(const cli_ctx *ctx, const cli_args *a)
{
	size_t n = (size_t)a->npos - 2;
	uint64_t *ids = calloc(n, sizeof *ids);
	int64_t *counts = calloc(n, sizeof *counts);
	char (*num)[CLIENT_NUM_LEN] = calloc(n, sizeof *num);
	const char **argv = calloc(n + 3, sizeof *argv);
	redisReply *r = NULL;
	int rc = CLI_ERR;

	if (ids == NULL || counts == NULL || num == NULL || argv == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		goto done;
	}
	rc = mcount_args(a, n, ids, num, argv);
	if (rc == CLI_OK)
		rc = client_once(ctx, (int)n + 3, argv, &r);
	if (rc == CLI_OK)
		rc = mcount_reply(r, n, counts);
	if (rc == CLI_OK)
		mcount_print(ctx, &(mcount_rows){ ids, counts }, n);
done:
	freeReplyObject(r);
	free(ids);
	free(counts);
	free(num);
	free(argv);
	return rc;
}

/* ---- counts ------------------------------------------------------------- */

typedef struct type_count {
	char name[TALLY_NAME_MAX + 1];
	int64_t count;
} type_count;

/* The map of TALLY.COUNTS: under RESP2 a flat array name, count, ...; a
 * list of [name, count] pairs is accepted too. */
static int counts_reply(const redisReply *r, type_count *out, size_t *n)
{
	int pairs = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
	            r->element[0]->type == REDIS_REPLY_ARRAY;
	size_t step = pairs ? 1 : 2;

	if (r->type != REDIS_REPLY_ARRAY || (!pairs && r->elements % 2) ||
	    r->elements / step > TALLY_TYPES_MAX)
		return client_bad_reply("TALLY.COUNTS", "a map ktype -> count");
	*n = r->elements / step;
	for (size_t i = 0; i < *n; i++) {
		const redisReply *k = pairs ? r->element[i] : r;
		size_t at = pairs ? 0 : 2 * i;

		if ((pairs && reply_array(k, 2) != 0) ||
		    reply_strcpy(k->element[at], out[i].name,
		                 sizeof out[i].name) != 0 ||
		    reply_i64(k->element[at + 1], &out[i].count) != 0)
			return client_bad_reply("TALLY.COUNTS",
			                        "a map ktype -> count");
	}
	return CLI_OK;
}

static void counts_cell(const void *data, size_t row, size_t col,
                        char *buf, size_t cap)
{
	const type_count *tc = data;

	if (col == 0)
		out_safe(buf, cap, tc[row].name, strlen(tc[row].name));
	else
		snprintf(buf, cap, "%" PRId64, tc[row].count);
}

static void counts_print(const cli_ctx *ctx, const type_count *tc, size_t n)
{
	static const char *const head[] = { "KTYPE", "COUNT" };
	static const int right[] = { 0, 1 };
	out_table t = { head, right, 2, n, counts_cell, tc };
	json_w w;

	if (!ctx->json) {
		out_table_print(stdout, &t);
		return;
	}
	json_start(&w, stdout);
	json_obj(&w);
	json_key(&w, "counts");
	json_obj(&w);
	for (size_t i = 0; i < n; i++)
		json_kv_i64(&w, tc[i].name, tc[i].count);
	json_obj_end(&w);
	json_obj_end(&w);
	json_finish(&w);
}

int cmd_counts(const cli_ctx *ctx, const cli_args *a)
{
	char content[CLIENT_NUM_LEN];
	const char *argv[] = { "TALLY.COUNTS", a->pos[0], content };
	type_count *tc = NULL;
	redisReply *r = NULL;
	uint64_t c;
	size_t n = 0;
	int rc = cli_arg_name("CTYPE", a->pos[0]);

	if (rc == CLI_OK)
		rc = cli_arg_u64("CONTENT", a->pos[1], 0, UINT64_MAX, &c);
	if (rc != CLI_OK)
		return rc;
	snprintf(content, sizeof content, "%" PRIu64, c);
	tc = calloc(TALLY_TYPES_MAX, sizeof *tc);
	if (tc == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		return CLI_ERR;
	}
	rc = client_once(ctx, 3, argv, &r);
	if (rc == CLI_OK)
		rc = counts_reply(r, tc, &n);
	if (rc == CLI_OK)
		counts_print(ctx, tc, n);
	freeReplyObject(r);
	free(tc);
	return rc;
}

/* ---- has, type-add, ping ------------------------------------------------ */

static void has_print(const cli_ctx *ctx, int has, int64_t at)
{
	char when[OUT_TIME_LEN];
	json_w w;

	out_time(at, when);
	if (!ctx->json) {
		if (has)
			printf("yes  %s  %" PRId64 "\n", when, at);
		else
			puts("no");
		return;
	}
	json_start(&w, stdout);
	json_obj(&w);
	json_key(&w, "has");
	json_bool(&w, has);
	if (has) {
		json_kv_i64(&w, "at_ms", at);
		json_kv_str(&w, "time", when);
	}
	json_obj_end(&w);
	json_finish(&w);
}

int cmd_has(const cli_ctx *ctx, const cli_args *a)
{
	char content[CLIENT_NUM_LEN], member[CLIENT_NUM_LEN];
	const char *argv[] = { "TALLY.HAS", a->pos[0], a->pos[1], content,
	                       member };
	redisReply *r;
	uint64_t m;
	int64_t at = 0;
	int rc = client_arg_object(a, content);

	if (rc == CLI_OK)
		rc = cli_arg_u64("MEMBER", a->pos[3], 1, UINT64_MAX, &m);
	if (rc != CLI_OK)
		return rc;
	snprintf(member, sizeof member, "%" PRIu64, m);
	rc = client_once(ctx, 5, argv, &r);
	if (rc != CLI_OK)
		return rc;
	int has = r->type != REDIS_REPLY_NIL;
	if (has && reply_i64(r, &at) != 0) {
		freeReplyObject(r);
		return client_bad_reply("TALLY.HAS", "a time in ms, or nil");
	}
	freeReplyObject(r);
	has_print(ctx, has, at);
	return CLI_OK;
}

/* Print a status reply such as OK or PONG. */
static int print_status(const cli_ctx *ctx, const char *cmd, redisReply *r)
{
	char safe[OUT_CELL_MAX];
	const char *s;
	size_t len;
	json_w w;

	if (reply_str(r, &s, &len) != 0) {
		freeReplyObject(r);
		return client_bad_reply(cmd, "a status reply");
	}
	if (ctx->json) {
		json_start(&w, stdout);
		json_obj(&w);
		json_key(&w, "reply");
		json_strn(&w, s, len);
		json_obj_end(&w);
		json_finish(&w);
	} else {
		out_safe(safe, sizeof safe, s, len);
		puts(safe);
	}
	freeReplyObject(r);
	return CLI_OK;
}

int cmd_type_add(const cli_ctx *ctx, const cli_args *a)
{
	const char *argv[] = { "TALLY.TYPE", "ADD", a->pos[0], a->pos[1] };
	redisReply *r;
	int rc = cli_arg_name("NAME", a->pos[0]);

	if (rc != CLI_OK)
		return rc;
	if (strcmp(a->pos[1], "unique") != 0 && strcmp(a->pos[1], "total"))
		return cli_usage_error(a->cmd, "MODE must be unique or total");
	rc = client_once(ctx, 4, argv, &r);
	return rc != CLI_OK ? rc : print_status(ctx, "TALLY.TYPE", r);
}

int cmd_ping(const cli_ctx *ctx, const cli_args *a)
{
	const char *argv[] = { "PING" };
	redisReply *r;
	int rc;

	(void)a;
	rc = client_once(ctx, 1, argv, &r);
	return rc != CLI_OK ? rc : print_status(ctx, "PING", r);
}
