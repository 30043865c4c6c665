/* fuzz_commands.c: libFuzzer harness of tallyd's command layer
 * (server/commands.c) behind its RESP parser, against a real engine on a
 * temporary folder: the input is a client's byte stream; every command it
 * parses to is dispatched as the network layer would, with writes applied
 * synchronously. Properties: no crash or leak, and each command answers
 * exactly one well-formed RESP2 reply (read back with hiredis's reader).
 * TALLY.BACKUP is not dispatched: it would write checkpoints to disk. */
#define _XOPEN_SOURCE 700 /* nftw, FTW_DEPTH, FTW_PHYS */
#include <ftw.h>
#include <string.h>
#include <strings.h>

#include <hiredis/hiredis.h>

#include "fuzz.h"
#include "server/resp.h"
#include "server/server.h"

/* Commands dispatched per input: each may write, so bounded for speed. */
#define FUZZ_CMDS_MAX 32

static char data_dir[64];
static srv server;
static srv_stats stats;

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void engine_close(void)
{
	tally_closep(&server.t);
	if (data_dir[0] != '\0')
		(void)nftw(data_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	int n = snprintf(data_dir, sizeof data_dir, "%s/tally-fuzz-cmd.XXXXXX",
	                 tmp != NULL && strlen(tmp) < 32 ? tmp : "/tmp");
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof data_dir);
	FUZZ_CHECK(mkdtemp(data_dir) != NULL);
	tally_options o = { .durability = TALLY_DURABILITY_ASYNC,
	                    .flush_interval_ms = 1000, .block_cache_mb = 8 };
	FUZZ_CHECK(tally_open(data_dir, &o, &server.t) == TALLY_OK);
	FUZZ_CHECK(atexit(engine_close) == 0);
	/* tallyd's defaults (config.c), with no network and no password. */
	server.cfg = (srv_config){
		.data_dir = data_dir, .bind = "127.0.0.1", .threads = 1,
		.durability = TALLY_DURABILITY_ASYNC, .flush_ms = 1000,
		.store = "rocksdb", .maxclients = 10000,
		.max_bulk = 1u << 20, .max_args = 1u << 20,
		.max_request = 64u << 20, .max_pending = 65536,
		.max_output = 64u << 20,
	};
	cmd_index_build(&server);
	return 0;
}

/* conn_submit and slot_format of net.c, synchronously: the reply takes
 * its place in the output now. */
static int submit(void *conn, const tally_write *ws, size_t n, int fmt)
{
	rbuf *out = conn;
	int64_t sum = 0, result = 0;
	int err = TALLY_OK;

	FUZZ_CHECK(n > 0);
	for (size_t i = 0; i < n; i++) {
		int rc = tally_write_sync(server.t, &ws[i], &result);
		if (i == 0 && rc != TALLY_OK && rc != TALLY_ENOTFOUND)
			return rc; /* nothing queued: the handler replies */
		if (rc != TALLY_OK && err == TALLY_OK)
			err = rc;
		sum += rc == TALLY_OK && fmt == FMT_SUM ? result : 0;
	}
	if (err != TALLY_OK && !(fmt == FMT_SUM && err == TALLY_ENOTFOUND))
		cmd_reply_tally_error(out, err);
	else if (fmt == FMT_OK)
		reply_status(out, "OK");
	else
		reply_int(out, fmt == FMT_SUM ? sum : result);
	return TALLY_OK;
}

/* Exactly one RESP2 reply in b[0, n). */
static void check_one_reply(const char *b, size_t n)
{
	redisReader *r = redisReaderCreate();
	void *reply = NULL;

	FUZZ_CHECK(r != NULL);
	FUZZ_CHECK(n > 0);
	FUZZ_CHECK(redisReaderFeed(r, b, n) == REDIS_OK);
	FUZZ_CHECK(redisReaderGetReply(r, &reply) == REDIS_OK);
	FUZZ_CHECK(reply != NULL);
	freeReplyObject(reply);
	reply = NULL;
	FUZZ_CHECK(redisReaderGetReply(r, &reply) == REDIS_OK);
	FUZZ_CHECK(reply == NULL); /* nothing left over */
	redisReaderFree(r);
}

static int is_backup(const resp_cmd *cmd)
{
	return cmd->lens[0] == 12 && strcasecmp(cmd->argv[0], "tally.backup") == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	resp_limits lim = { server.cfg.max_bulk, server.cfg.max_args, 0,
	                    server.cfg.max_request };
	client_info cl = { .id = 1, .proto = 2 };
	rbuf out;
	resp_cmd cmd;
	size_t ncmd = 0;

	resp_parser *p = resp_parser_create(&lim);
	FUZZ_CHECK(p != NULL);
	FUZZ_CHECK(resp_parser_feed(p, (const char *)data, size) == RESP_OK);
	rbuf_init(&out, server.cfg.max_output, 2);
	cmd_ctx c = { .s = &server, .st = &stats, .cl = &cl, .out = &out,
	              .conn = &out, .submit = submit, .offload = NULL };
	while (ncmd < FUZZ_CMDS_MAX && !cl.close_after &&
	       resp_parser_next(p, &cmd) == RESP_OK) {
		if (is_backup(&cmd))
			continue;
		int proto = cl.proto;
		size_t before = out.len;
		cmd_dispatch(&c, cmd.argc, cmd.argv, cmd.lens);
		ncmd++;
		FUZZ_CHECK(!out.overflow);
		/* hiredis reads RESP2 only: after HELLO 3, replies go
		 * unchecked. */
		if (proto == 2 && cl.proto == 2)
			check_one_reply(out.data + before, out.len - before);
		FUZZ_CHECK(cl.proto == 2 || cl.proto == 3);
	}
	rbuf_free(&out);
	resp_parser_free(p);
	return 0;
}
