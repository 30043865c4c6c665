/* client_lists.c: the client subcommands that list things (recent,
 * history, types). A reply is checked and copied whole before anything is
 * printed, so a malformed reply never leaves half a table behind. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "json.h"
#include "out.h"

/* Page size when --limit is not given (the server's own default). The CLI
 * always sends LIMIT, so it knows when a page is full. */
#define PAGE_DEFAULT 20

/* One row of recent (ctype unused) or history (member unused). */
typedef struct entry {
	char ctype[TALLY_NAME_MAX + 1];
	uint64_t id;   /* recent: member; history: content */
	int64_t at_ms;
	int add;
	uint64_t seq;
} entry;

typedef struct page {
	const char *cmd;  /* for messages */
	int history;      /* rows carry a ctype */
	size_t limit;
	entry *e;
	size_t n;
} page;

static int op_of(const redisReply *r, int *add)
{
	char op[8];

	if (reply_strcpy(r, op, sizeof op) != 0)
		return -1;
	*add = strcmp(op, "add") == 0;
	return *add || strcmp(op, "remove") == 0 ? 0 : -1;
}

/* recent: [member, at_ms, op, seq]; history: [ctype, content, at_ms, op,
 * seq]. Extra trailing fields are allowed (the contract may grow). */
static int entry_of(const page *p, const redisReply *r, entry *e)
{
	size_t k = p->history ? 1 : 0;

	if (r->type != REDIS_REPLY_ARRAY || r->elements < 4 + k)
		return -1;
	if (p->history &&
	    reply_strcpy(r->element[0], e->ctype, sizeof e->ctype) != 0)
		return -1;
	if (!p->history)
		e->ctype[0] = '\0';
	if (reply_u64(r->element[k], &e->id) != 0 ||
	    reply_i64(r->element[k + 1], &e->at_ms) != 0 ||
	    op_of(r->element[k + 2], &e->add) != 0 ||
	    reply_u64(r->element[k + 3], &e->seq) != 0)
		return -1;
	return 0;
}

static int page_reply(page *p, const redisReply *r)
{
	const char *shape = p->history ?
	        "an array of [ctype, content, at_ms, op, seq]" :
	        "an array of [member, at_ms, op, seq]";

	if (r->type != REDIS_REPLY_ARRAY || r->elements > p->limit)
		return client_bad_reply(p->cmd, shape);
	p->n = r->elements;
	p->e = calloc(p->n ? p->n : 1, sizeof *p->e);
	if (p->e == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		return CLI_ERR;
	}
	for (size_t i = 0; i < p->n; i++)
		if (entry_of(p, r->element[i], &p->e[i]) != 0)
			return client_bad_reply(p->cmd, shape);
	return CLI_OK;
}

static void page_cell(const void *data, size_t row, size_t col, char *buf,
                      size_t cap)
{
	const page *p = data;
	const entry *e = &p->e[row];
	char when[OUT_TIME_LEN];

	if (!p->history)
		col++; /* recent has no CTYPE column */
	switch (col) {
	case 0: out_safe(buf, cap, e->ctype, strlen(e->ctype)); break;
	case 1: snprintf(buf, cap, "%" PRIu64, e->id); break;
	case 2: out_time(e->at_ms, when); snprintf(buf, cap, "%s", when); break;
	case 3: snprintf(buf, cap, "%" PRId64, e->at_ms); break;
	case 4: snprintf(buf, cap, "%s", e->add ? "add" : "remove"); break;
	default: snprintf(buf, cap, "%" PRIu64, e->seq); break;
	}
}

static void page_text(const page *p)
{
	static const char *const hhead[] = { "CTYPE", "CONTENT", "TIME (UTC)",
	                                     "AT_MS", "OP", "SEQ" };
	static const int hright[] = { 0, 1, 0, 1, 0, 1 };
	static const char *const rhead[] = { "MEMBER", "TIME (UTC)", "AT_MS",
	                                     "OP", "SEQ" };
	static const int rright[] = { 1, 0, 1, 0, 1 };
	out_table t = { p->history ? hhead : rhead,
	                p->history ? hright : rright, p->history ? 6u : 5u,
	                p->n, page_cell, p };

	if (p->n == 0) {
		puts("(no events)");
		return;
	}
	out_table_print(stdout, &t);
	if (p->n == p->limit)
		fprintf(stderr, "tally: more may follow: add --before %" PRIu64
		        " for the next page\n", p->e[p->n - 1].seq);
}

static void page_json(const page *p)
{
	char when[OUT_TIME_LEN];
	json_w w;

	json_start(&w, stdout);
	json_obj(&w);
	json_key(&w, "entries");
	json_arr(&w);
	for (size_t i = 0; i < p->n; i++) {
		const entry *e = &p->e[i];
		json_obj(&w);
		if (p->history)
			json_kv_str(&w, "ctype", e->ctype);
		json_kv_u64(&w, p->history ? "content" : "member", e->id);
		json_kv_i64(&w, "at_ms", e->at_ms);
		out_time(e->at_ms, when);
		json_kv_str(&w, "time", when);
		json_kv_str(&w, "op", e->add ? "add" : "remove");
		json_kv_u64(&w, "seq", e->seq);
		json_obj_end(&w);
	}
	json_arr_end(&w);
	/* Where the next page starts, or null when this one was not full. */
	json_key(&w, "next_before");
	if (p->n == p->limit)
		json_u64(&w, p->e[p->n - 1].seq);
	else
		json_null(&w);
	json_obj_end(&w);
	json_finish(&w);
}

/* Parse --limit/--before into LIMIT n [BEFORE seq] at argv[*argc...]. */
static int page_args(const cli_args *a, page *p, char *lim, char *bef,
                     const char **argv, int *argc)
{
	const char *l = cli_opt(a, "limit"), *b = cli_opt(a, "before");
	uint64_t v = PAGE_DEFAULT, before = 0;
	int rc = CLI_OK;

	if (l != NULL)
		rc = cli_arg_u64("--limit", l, 1, TALLY_PAGE_MAX, &v);
	if (rc == CLI_OK && b != NULL)
		rc = cli_arg_u64("--before", b, 1, UINT64_MAX, &before);
	if (rc != CLI_OK)
		return rc;
	p->limit = (size_t)v;
	snprintf(lim, CLIENT_NUM_LEN, "%" PRIu64, v);
	snprintf(bef, CLIENT_NUM_LEN, "%" PRIu64, before);
	argv[(*argc)++] = "LIMIT";
	argv[(*argc)++] = lim;
	if (b != NULL) {
		argv[(*argc)++] = "BEFORE";
		argv[(*argc)++] = bef;
	}
	return CLI_OK;
}

static int page_run(const cli_ctx *ctx, page *p, int argc, const char **argv)
{
	redisReply *r = NULL;
	int rc = client_once(ctx, argc, argv, &r);

	if (rc == CLI_OK)
		rc = page_reply(p, r);
	if (rc == CLI_OK && ctx->json)
		page_json(p);
	else if (rc == CLI_OK)
		page_text(p);
	freeReplyObject(r);
	free(p->e);
	return rc;
}

int cmd_recent(const cli_ctx *ctx, const cli_args *a)
{
	char content[CLIENT_NUM_LEN], lim[CLIENT_NUM_LEN], bef[CLIENT_NUM_LEN];
	const char *argv[8] = { "TALLY.RECENT", a->pos[0], a->pos[1], content };
	page p = { .cmd = "TALLY.RECENT" };
	int argc = 4;
	int rc = client_arg_object(a, content);

	if (rc == CLI_OK)
		rc = page_args(a, &p, lim, bef, argv, &argc);
	if (rc != CLI_OK)
		return rc;
	return page_run(ctx, &p, argc, argv);
}

int cmd_history(const cli_ctx *ctx, const cli_args *a)
{
	char member[CLIENT_NUM_LEN], lim[CLIENT_NUM_LEN], bef[CLIENT_NUM_LEN];
	const char *argv[7] = { "TALLY.HISTORY", member, a->pos[1] };
	page p = { .cmd = "TALLY.HISTORY", .history = 1 };
	uint64_t m;
	int argc = 3;
	/* Member 0 is anonymous: never listed, so never asked for. */
	int rc = cli_arg_u64("MEMBER", a->pos[0], 1, UINT64_MAX, &m);

	if (rc == CLI_OK)
		rc = cli_arg_name("KTYPE", a->pos[1]);
	if (rc == CLI_OK)
		rc = page_args(a, &p, lim, bef, argv, &argc);
	if (rc != CLI_OK)
		return rc;
	snprintf(member, sizeof member, "%" PRIu64, m);
	return page_run(ctx, &p, argc, argv);
}

/* ---- types -------------------------------------------------------------- */

typedef struct type_row {
	char name[TALLY_NAME_MAX + 1];
	char mode[8];
} type_row;

static int types_reply(const redisReply *r, type_row *t, size_t *n)
{
	const char *shape = "an array of [name, mode]";

	if (r->type != REDIS_REPLY_ARRAY || r->elements > TALLY_TYPES_MAX)
		return client_bad_reply("TALLY.TYPES", shape);
	*n = r->elements;
	for (size_t i = 0; i < *n; i++) {
		const redisReply *e = r->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
		    reply_strcpy(e->element[0], t[i].name,
		                 sizeof t[i].name) != 0 ||
		    reply_strcpy(e->element[1], t[i].mode,
		                 sizeof t[i].mode) != 0)
			return client_bad_reply("TALLY.TYPES", shape);
	}
	return CLI_OK;
}

static void types_cell(const void *data, size_t row, size_t col, char *buf,
                       size_t cap)
{
	const type_row *t = &((const type_row *)data)[row];
	const char *s = col == 0 ? t->name : t->mode;

	out_safe(buf, cap, s, strlen(s));
}

static void types_print(const cli_ctx *ctx, const type_row *t, size_t n)
{
	static const char *const head[] = { "NAME", "MODE" };
	out_table tab = { head, NULL, 2, n, types_cell, t };
	json_w w;

	if (!ctx->json) {
		out_table_print(stdout, &tab);
		return;
	}
	json_start(&w, stdout);
	json_obj(&w);
	json_key(&w, "types");
	json_arr(&w);
	for (size_t i = 0; i < n; i++) {
		json_obj(&w);
		json_kv_str(&w, "name", t[i].name);
		json_kv_str(&w, "mode", t[i].mode);
		json_obj_end(&w);
	}
	json_arr_end(&w);
	json_obj_end(&w);
	json_finish(&w);
}

int cmd_types(const cli_ctx *ctx, const cli_args *a)
{
	const char *argv[] = { "TALLY.TYPES" };
	type_row *t = calloc(TALLY_TYPES_MAX, sizeof *t);
	redisReply *r = NULL;
	size_t n = 0;
	int rc = CLI_ERR;

	(void)a;
	if (t == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		return CLI_ERR;
	}
	rc = client_once(ctx, 1, argv, &r);
	if (rc == CLI_OK)
		rc = types_reply(r, t, &n);
	if (rc == CLI_OK)
		types_print(ctx, t, n);
	freeReplyObject(r);
	free(t);
	return rc;
}
