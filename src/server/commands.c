/* commands.c: tallyd's command table and handlers: the Redis-compatible
 * commands (with Redis's semantics and error texts) and the TALLY.* ones.
 * Handlers parse arguments, read through the engine or queue writes with
 * ctx->submit, and build replies with the reply_* helpers; arity and
 * authentication are checked here, from the table, before any handler. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/glob.h"
#include "core/keys.h"
#include "core/parse.h"
#include "server/server.h"

enum cmd_flags {
	CMD_WRITE = 1 << 0,   /* queues writes */
	CMD_NOAUTH = 1 << 1,  /* allowed before AUTH */
	CMD_TEXT = 1 << 2,    /* arguments are names and numbers: a NUL byte
	                         in one would cut it short in the engine */
	CMD_SCHEMA = 1 << 3,  /* may change the schema (not through the write
	                         queue): COMMAND calls it a write */
};

typedef void cmd_fn(cmd_ctx *c, size_t argc, char **argv, size_t *lens);

typedef struct cmd_def {
	const char *name;     /* lower case */
	size_t len;           /* of name */
	int arity;            /* > 0 exact argc, < 0 at least -arity */
	int flags;
	cmd_fn *fn;
} cmd_def;

/* Longest name a command can have (tally.history's is 13): a longer one
 * is unknown without a look at the index. Two 8-byte words hold it. */
#define CMD_NAME_MAX 16

/* A table entry, its name's length counted by the compiler, which also
 * refuses a name longer than CMD_NAME_MAX (an array of size -1). */
#define CMD(name, arity, flags, fn)                                         \
	{ name,                                                              \
	  sizeof name - 1 +                                                  \
	          0 * sizeof(char[sizeof name - 1 <= CMD_NAME_MAX ? 1 : -1]), \
	  arity, flags, fn }

/* ---- argument parsing ---------------------------------------------------- */

/* Longest id argument. Longer than a u64's 20 digits because leading
 * zeros are allowed (tools such as redis-benchmark pad their random ids);
 * still bounded, so a huge argument is refused without a long scan. */
#define CMD_ID_LEN_MAX 64
_Static_assert(CMD_ID_LEN_MAX >= PARSE_U64_DIGITS, "every u64 fits unpadded");

/* An id, or LIMIT's and BEFORE's value: decimal digits only, leading zeros
 * allowed. Signed arguments use parse_i64_strict: Redis's rules. */
static int parse_u64_arg(const char *s, size_t len, uint64_t *out)
{
	return parse_u64_digits(s, len, CMD_ID_LEN_MAX, out);
}

static int arg_is(const char *arg, size_t len, const char *word)
{
	return strlen(word) == len && strncasecmp(arg, word, len) == 0;
}

/* A u64 id: an integer while it fits int64, else a decimal bulk string
 * (RESP integers are signed). */
static void reply_u64(rbuf *out, uint64_t v)
{
	char buf[24];
	int n;

	if (v <= (uint64_t)INT64_MAX) {
		reply_int(out, (int64_t)v);
		return;
	}
	n = snprintf(buf, sizeof buf, "%" PRIu64, v);
	reply_bulk(out, buf, (size_t)n);
}

static void reply_not_int(rbuf *out)
{
	reply_error(out, "ERR value is not an integer or out of range");
}

static void reply_syntax(rbuf *out)
{
	reply_error(out, "ERR syntax error");
}

void cmd_reply_tally_error(rbuf *out, int err)
{
	switch (err) {
	case TALLY_EOVERFLOW:
		reply_error(out, "ERR increment or decrement would overflow");
		break;
	case TALLY_EKEYSIZE:
		reply_errorf(out, "ERR key, name or id too long or empty "
		             "(keys 1..%d bytes, names 1..%d, ids 1..%d)",
		             TALLY_KEY_MAX, TALLY_NAME_MAX, TALLY_ID_MAX);
		break;
	case TALLY_EIO:
		reply_error(out, "ERR store write failed (I/O error): writes are "
		            "refused until the fault clears; reads are served");
		break;
	case TALLY_ENOSPC:
		reply_error(out, "ERR store write failed (no space left on "
		            "device): writes are refused until the fault "
		            "clears; reads are served");
		break;
	case TALLY_ECLOSED:
		reply_error(out, "ERR server is shutting down");
		break;
	case TALLY_ELIMIT:
		/* Of the writes, only an event naming a new content type
		 * meets a limit (TALLY.TYPE answers its own). */
		reply_errorf(out, "ERR limit reached: at most %d content types",
		             TALLY_CTYPES_MAX);
		break;
	default:
		reply_errorf(out, "ERR %s", tally_strerror(err));
	}
}

/* A key of a named counter must fit the engine's limit. */
static int key_ok(cmd_ctx *c, size_t len)
{
	if (len == 0 || len > TALLY_KEY_MAX) {
		reply_errorf(c->out, "ERR key must be 1..%d bytes",
		             TALLY_KEY_MAX);
		return 0;
	}
	return 1;
}

/* Redis's two answers for a container command (CLIENT, COMMAND, CONFIG):
 * a known subcommand with the wrong arity, or an unknown one. argc is the
 * command's, so HELP takes no arguments, as in Redis. */
static void reply_subcommand(cmd_ctx *c, const char *cmd, size_t argc,
                             const char *sub, size_t len,
                             const char *const *known)
{
	const char *upper = cmd[0] == 'c' && cmd[1] == 'l' ? "CLIENT" :
	                    cmd[2] == 'm' ? "COMMAND" : "CONFIG";

	/* X HELP, which the error below points to: the subcommands there are,
	 * one line each, as Redis lists them. */
	if (arg_is(sub, len, "help")) {
		size_t n = 0;
		char line[64];

		if (argc > 2) {
			reply_errorf(c->out, "ERR wrong number of arguments "
			             "for '%s|help' command", cmd);
			return;
		}

		while (known[n] != NULL)
			n++;
		reply_array(c->out, n + 2);
		snprintf(line, sizeof line, "%s <subcommand> [<arg> ...]. "
		         "Subcommands are:", upper);
		reply_cstr(c->out, line);
		for (size_t i = 0; i < n; i++) {
			size_t k = 0;

			for (; known[i][k] != '\0' && k + 1 < sizeof line; k++)
				line[k] = (char)toupper((unsigned char)known[i][k]);
			line[k] = '\0';
			reply_cstr(c->out, line);
		}
		reply_cstr(c->out, "HELP");
		return;
	}
	for (size_t i = 0; known[i] != NULL; i++) {
		if (!arg_is(sub, len, known[i]))
			continue;
		reply_errorf(c->out, "ERR wrong number of arguments for "
		             "'%s|%s' command", cmd, known[i]);
		return;
	}
	reply_errorf(c->out, "ERR unknown subcommand '%.128s'. Try %s HELP.",
	             sub, upper);
}

/* ---- connection commands --------------------------------------------------- */

static void cmd_ping(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	if (argc > 2) {
		reply_error(c->out,
		            "ERR wrong number of arguments for 'ping' command");
		return;
	}
	if (argc == 2)
		reply_bulk(c->out, argv[1], lens[1]);
	else
		reply_status(c->out, "PONG");
}

static void cmd_echo(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	(void)argc;
	reply_bulk(c->out, argv[1], lens[1]);
}

static void cmd_quit(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	(void)argc, (void)argv, (void)lens;
	reply_status(c->out, "OK");
	c->cl->close_after = 1;
}

static int auth_check(cmd_ctx *c, const char *user, size_t ulen,
                      const char *pass, size_t plen)
{
	int is_default = user == NULL ||
	                 (ulen == 7 && memcmp(user, "default", 7) == 0);

	/* As Redis without a password: its default user takes any password
	 * when named, and the one-argument form is told there is none. */
	if (c->s->cfg.requirepass == NULL && user == NULL) {
		reply_error(c->out, "ERR AUTH <password> called without any "
		            "password configured for the default user. Are you "
		            "sure your configuration is correct?");
		return 0;
	}
	if (!is_default || (c->s->cfg.requirepass != NULL &&
	                    !srv_password_ok(c->s, pass, plen))) {
		reply_error(c->out, "WRONGPASS invalid username-password pair "
		            "or user is disabled.");
		return 0;
	}
	c->cl->authed = 1;
	return 1;
}

static void cmd_auth(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	if (argc > 3) {
		reply_syntax(c->out);
		return;
	}
	if (argc == 2 ? auth_check(c, NULL, 0, argv[1], lens[1])
	              : auth_check(c, argv[1], lens[1], argv[2], lens[2]))
		reply_status(c->out, "OK");
}

/* A client name or library field: Redis's characters (no spaces, no
 * control bytes), and under cap bytes, the room kept for it. Replies the
 * reason (what: the field in Redis's text, plural for names; one: the
 * field alone) and returns 0 when it is not. */
static int name_ok(cmd_ctx *c, const char *what, const char *one,
                   const char *s, size_t len, size_t cap)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < '!' || s[i] > '~') {
			reply_errorf(c->out, "ERR %s cannot contain spaces, "
			             "newlines or special characters.", what);
			return 0;
		}
	if (len >= cap) {
		reply_errorf(c->out, "ERR %s is longer than %zu bytes", one,
		             cap - 1);
		return 0;
	}
	return 1;
}

static void hello_reply(cmd_ctx *c)
{
	reply_map(c->out, 7);
	reply_cstr(c->out, "server");
	reply_cstr(c->out, "tally");
	reply_cstr(c->out, "version");
	reply_cstr(c->out, TALLY_VERSION_STRING);
	reply_cstr(c->out, "proto");
	reply_int(c->out, c->cl->proto);
	reply_cstr(c->out, "id");
	reply_int(c->out, (int64_t)c->cl->id);
	reply_cstr(c->out, "mode");
	reply_cstr(c->out, "standalone");
	reply_cstr(c->out, "role");
	reply_cstr(c->out, "master");
	reply_cstr(c->out, "modules");
	reply_array(c->out, 0);
}

static void cmd_hello(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	int64_t ver = c->cl->proto;
	size_t i = 2;

	if (argc >= 2 && (parse_i64_strict(argv[1], lens[1], &ver) || ver < 2 ||
	                  ver > 3)) {
		if (parse_i64_strict(argv[1], lens[1], &ver))
			reply_error(c->out, "ERR Protocol version is not an "
			            "integer or out of range");
		else
			reply_error(c->out,
			            "NOPROTO unsupported protocol version");
		return;
	}
	/* Redis's order: every option checked, then AUTH, then NOAUTH, and
	 * only then the name set: a refused HELLO changes nothing. */
	size_t auth_at = 0, name_at = 0;

	for (; i < argc; i++) {
		if (arg_is(argv[i], lens[i], "auth") && i + 2 < argc) {
			auth_at = i + 1;
			i += 2;
		} else if (arg_is(argv[i], lens[i], "setname") && i + 1 < argc) {
			if (!name_ok(c, "Client names", "a client name",
			             argv[i + 1], lens[i + 1],
			             sizeof c->cl->name))
				return;
			name_at = i + 1;
			i++;
		} else {
			reply_errorf(c->out, "ERR Syntax error in HELLO option "
			             "'%.64s'", argv[i]);
			return;
		}
	}
	if (auth_at != 0 &&
	    !auth_check(c, argv[auth_at], lens[auth_at], argv[auth_at + 1],
	                lens[auth_at + 1]))
		return;
	if (c->s->cfg.requirepass != NULL && !c->cl->authed) {
		reply_error(c->out, "NOAUTH HELLO must be called with the "
		            "client already authenticated, otherwise the HELLO "
		            "<proto> AUTH <user> <pass> option can be used to "
		            "authenticate the client and select the RESP "
		            "protocol version at the same time");
		return;
	}
	if (name_at != 0)
		memcpy(c->cl->name, argv[name_at], lens[name_at] + 1);
	c->cl->proto = (int)ver;
	c->out->proto = (int)ver;
	hello_reply(c);
}

static void cmd_select(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	int64_t db;

	(void)argc;
	if (parse_i64_strict(argv[1], lens[1], &db))
		reply_error(c->out, "ERR value is not an integer or out of range");
	else if (db != 0)
		reply_error(c->out, "ERR DB index is out of range");
	else
		reply_status(c->out, "OK");
}

static void client_setinfo(cmd_ctx *c, size_t argc, char **argv,
                           size_t *lens)
{
	int lib = arg_is(argv[2], lens[2], "lib-name");

	if (argc != 4) {
		reply_error(c->out, "ERR wrong number of arguments for "
		            "'client|setinfo' command");
		return;
	}
	if (!lib && !arg_is(argv[2], lens[2], "lib-ver")) {
		reply_errorf(c->out, "ERR Unrecognized option '%.64s'", argv[2]);
		return;
	}
	char *dst = lib ? c->cl->lib_name : c->cl->lib_ver;
	size_t cap = lib ? sizeof c->cl->lib_name : sizeof c->cl->lib_ver;
	const char *what = lib ? "lib-name" : "lib-ver";

	if (!name_ok(c, what, what, argv[3], lens[3], cap))
		return;
	memcpy(dst, argv[3], lens[3] + 1);
	reply_status(c->out, "OK");
}

static void cmd_client(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	if (arg_is(argv[1], lens[1], "id") && argc == 2) {
		reply_int(c->out, (int64_t)c->cl->id);
	} else if (arg_is(argv[1], lens[1], "getname") && argc == 2) {
		if (c->cl->name[0])
			reply_cstr(c->out, c->cl->name);
		else
			reply_nil(c->out);
	} else if (arg_is(argv[1], lens[1], "setname") && argc == 3) {
		if (!name_ok(c, "Client names", "a client name", argv[2],
		             lens[2], sizeof c->cl->name))
			return;
		memcpy(c->cl->name, argv[2], lens[2] + 1);
		reply_status(c->out, "OK");
	} else if (arg_is(argv[1], lens[1], "setinfo") && argc >= 3) {
		client_setinfo(c, argc, argv, lens);
	} else {
		static const char *const known[] = { "id", "getname", "setname",
		                                     "setinfo", NULL };

		reply_subcommand(c, "client", argc, argv[1], lens[1],
		                 known);
	}
}

/* ---- server commands -------------------------------------------------------- */

static cmd_fn cmd_command;

static void cmd_info(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	size_t len;
	char *text;

	(void)lens;
	text = info_text(c->s, argc - 1, argv + 1, &len);
	if (text == NULL) {
		reply_error(c->out, "ERR out of memory");
		return;
	}
	reply_verbatim(c->out, text, len);
	free(text);
}

static void cmd_dbsize(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	tally_stats st;

	(void)argc, (void)argv, (void)lens;
	/* The redis-cluster store keeps no count of its counters (one would
	 * be a key every new counter writes): an error, never a false 0. */
	if (!strcmp(c->s->cfg.store, "redis-cluster")) {
		reply_error(c->out, "ERR not supported by this store");
		return;
	}
	tally_stats_get(c->s->t, &st);
	reply_int(c->out, (int64_t)st.counters);
}

/* CONFIG GET, for tools and clients that read settings (redis-benchmark
 * reads the persistence ones): the Redis parameters tally has an
 * equivalent of, answered with it; patterns as Redis takes them (one or
 * more, glob-style, any case). The password is never answered. CONFIG
 * SET is not supported: tally is configured by flags. */
enum { CONFIG_PARAMS = 10 };
/* The patterns of one CONFIG GET, in bytes in all. Each is matched
 * against every parameter's name, and a '*' retried at each place of a
 * name walks the rest of the pattern again, some 90 steps per byte: a
 * 64 MiB command of patterns held its I/O thread for seconds. */
#define CONFIG_PATTERNS_MAX 4096

static void cmd_config(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	const srv_config *cfg = &c->s->cfg;
	int sync = cfg->durability == TALLY_DURABILITY_SYNC;
	char maxclients[16], timeout[16], port[16], bulk[24], keepalive[16];
	const char *names[CONFIG_PARAMS] = {
		"save", "appendonly", "appendfsync", "maxclients", "timeout",
		"port", "bind", "databases", "proto-max-bulk-len",
		"tcp-keepalive"
	};
	const char *vals[CONFIG_PARAMS] = {
		"", "yes", sync ? "always" : "everysec", maxclients, timeout,
		port, cfg->bind, "1", bulk, keepalive
	};
	size_t hit[CONFIG_PARAMS], n = 0;

	if (arg_is(argv[1], lens[1], "set")) {
		reply_error(c->out, "ERR CONFIG SET is not supported: tally "
		            "is configured by flags (see tallyd --help)");
		return;
	}
	if (argc < 3 || !arg_is(argv[1], lens[1], "get")) {
		static const char *const known[] = { "get", NULL };

		reply_subcommand(c, "config", argc, argv[1], lens[1],
		                 known);
		return;
	}
	for (size_t i = 2, sum = 0; i < argc; i++) {
		sum += lens[i];
		if (sum > CONFIG_PATTERNS_MAX) {
			reply_errorf(c->out, "ERR CONFIG GET patterns are at "
			             "most %d bytes in all",
			             CONFIG_PATTERNS_MAX);
			return;
		}
	}
	snprintf(maxclients, sizeof maxclients, "%" PRIu32, cfg->maxclients);
	snprintf(timeout, sizeof timeout, "%" PRIu32, cfg->idle_timeout_s);
	snprintf(port, sizeof port, "%d", cfg->resp_port);
	snprintf(bulk, sizeof bulk, "%zu", cfg->max_bulk);
	snprintf(keepalive, sizeof keepalive, "%" PRIu32, cfg->tcp_keepalive_s);
	for (size_t k = 0; k < CONFIG_PARAMS; k++)
		for (size_t i = 2; i < argc; i++)
			if (glob_match(argv[i], lens[i], names[k],
			               strlen(names[k]), 1)) {
				hit[n++] = k;
				break;
			}
	reply_map(c->out, n);
	for (size_t i = 0; i < n; i++) {
		reply_cstr(c->out, names[hit[i]]);
		reply_cstr(c->out, vals[hit[i]]);
	}
}

/* ---- named counters ------------------------------------------------------- */

static void incr_generic(cmd_ctx *c, const char *key, size_t klen,
                         int64_t delta)
{
	tally_write w = { .kind = TALLY_W_INCRBY, .key = key, .key_len = klen,
	                  .value = delta };
	int rc;

	if (!key_ok(c, klen))
		return;
	rc = c->submit(c->conn, &w, 1, FMT_INT);
	if (rc != TALLY_OK)
		cmd_reply_tally_error(c->out, rc);
}

static void cmd_incr(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	(void)argc;
	incr_generic(c, argv[1], lens[1], 1);
}

static void cmd_decr(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	(void)argc;
	incr_generic(c, argv[1], lens[1], -1);
}

static void cmd_incrby(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	int64_t by;

	(void)argc;
	if (parse_i64_strict(argv[2], lens[2], &by)) {
		reply_not_int(c->out);
		return;
	}
	incr_generic(c, argv[1], lens[1], by);
}

static void cmd_decrby(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	int64_t by;

	(void)argc;
	if (parse_i64_strict(argv[2], lens[2], &by)) {
		reply_not_int(c->out);
		return;
	}
	if (by == INT64_MIN) {
		reply_error(c->out, "ERR decrement would overflow");
		return;
	}
	incr_generic(c, argv[1], lens[1], -by);
}

static void reply_value(rbuf *out, int64_t v)
{
	char buf[24];
	int n = snprintf(buf, sizeof buf, "%" PRId64, v);

	reply_bulk(out, buf, (size_t)n);
}

static void cmd_get(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	int64_t v;
	int rc;

	(void)argc;
	/* A key tally cannot hold holds nothing: nil, as MGET answers. */
	if (lens[1] == 0 || lens[1] > TALLY_KEY_MAX) {
		reply_nil(c->out);
		return;
	}
	rc = tally_get(c->s->t, argv[1], lens[1], &v);
	if (rc == TALLY_OK)
		reply_value(c->out, v);
	else if (rc == TALLY_ENOTFOUND)
		reply_nil(c->out);
	else
		cmd_reply_tally_error(c->out, rc);
}

/* Keys per tally_mget() call: the store's lookups within one call
 * overlap, and the arrays stay on the stack. */
#define MGET_CHUNK 64

static void cmd_mget(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	/* A failed read answers the command with its error, as GET does,
	 * never nil for a key that may hold a value: what the chunks before
	 * it put in the reply is taken back. */
	size_t mark = c->out->len;
	int overflow = c->out->overflow;

	reply_array(c->out, argc - 1);
	for (size_t at = 1; at < argc; at += MGET_CHUNK) {
		size_t end = argc - at < MGET_CHUNK ? argc : at + MGET_CHUNK;
		const void *keys[MGET_CHUNK];
		size_t klens[MGET_CHUNK], k = 0;
		int64_t vals[MGET_CHUNK];
		int found[MGET_CHUNK];
		int rc = TALLY_OK;

		/* A key tally cannot hold holds nothing: nil, as Redis
		 * answers for a key of another type. */
		for (size_t i = at; i < end; i++)
			if (lens[i] > 0 && lens[i] <= TALLY_KEY_MAX) {
				keys[k] = argv[i];
				klens[k++] = lens[i];
			}
		if (k > 0)
			rc = tally_mget(c->s->t, keys, klens, k, vals, found);
		if (rc != TALLY_OK) {
			c->out->len = mark;
			c->out->overflow = overflow;
			cmd_reply_tally_error(c->out, rc);
			return;
		}
		k = 0;
		for (size_t i = at; i < end; i++) {
			if (lens[i] == 0 || lens[i] > TALLY_KEY_MAX)
				reply_nil(c->out);
			else if (found[k++])
				reply_value(c->out, vals[k - 1]);
			else
				reply_nil(c->out);
		}
	}
}

static void cmd_exists(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	int64_t n = 0, v;

	for (size_t i = 1; i < argc; i++) {
		int rc;

		if (lens[i] == 0 || lens[i] > TALLY_KEY_MAX)
			continue;
		rc = tally_get(c->s->t, argv[i], lens[i], &v);
		if (rc == TALLY_OK) {
			n++;
		} else if (rc != TALLY_ENOTFOUND) {
			/* Not "absent": the key may hold a value. */
			cmd_reply_tally_error(c->out, rc);
			return;
		}
	}
	reply_int(c->out, n);
}

static void cmd_set(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	tally_write w = { .kind = TALLY_W_SET, .key = argv[1],
	                  .key_len = lens[1] };
	int rc;

	if (argc != 3) {
		reply_error(c->out, "ERR tally SET takes KEY VALUE only "
		            "(no expiry or conditions)");
		return;
	}
	if (parse_i64_strict(argv[2], lens[2], &w.value)) {
		reply_not_int(c->out);
		return;
	}
	if (!key_ok(c, lens[1]))
		return;
	rc = c->submit(c->conn, &w, 1, FMT_OK);
	if (rc != TALLY_OK)
		cmd_reply_tally_error(c->out, rc);
}

/* Most keys one DEL takes (one reply sums them). */
#define DEL_KEYS_MAX 1024

static void cmd_del(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	tally_write w[DEL_KEYS_MAX];
	size_t n = 0;
	int rc;

	if (argc - 1 > DEL_KEYS_MAX) {
		reply_errorf(c->out, "ERR DEL takes at most %d keys",
		             DEL_KEYS_MAX);
		return;
	}
	for (size_t i = 1; i < argc; i++) {
		/* Keys tally cannot hold do not exist: Redis counts 0. */
		if (lens[i] == 0 || lens[i] > TALLY_KEY_MAX)
			continue;
		w[n++] = (tally_write){ .kind = TALLY_W_DEL, .key = argv[i],
		                        .key_len = lens[i] };
	}
	if (n == 0) {
		reply_int(c->out, 0);
		return;
	}
	rc = c->submit(c->conn, w, n, FMT_SUM);
	if (rc != TALLY_OK)
		cmd_reply_tally_error(c->out, rc);
}

/* ---- TALLY.* --------------------------------------------------------------- */

static int parse_id_arg(cmd_ctx *c, const char *what, const char *s,
                        size_t len, uint64_t *out)
{
	if (parse_u64_arg(s, len, out) == 0)
		return 1;
	reply_errorf(c->out, "ERR %s is not an unsigned 64-bit integer", what);
	return 0;
}

/* TALLY_EINVAL of a read or an event names a bad content type: 1 when
 * that is what it was (replied), 0 when not. */
static int reply_bad_ctype(cmd_ctx *c, const char *ctype)
{
	if (name_valid(ctype, strlen(ctype)))
		return 0;
	reply_errorf(c->out, "ERR content type must be 1..%d bytes of "
	             "[A-Za-z0-9_.:-]", TALLY_NAME_MAX);
	return 1;
}

/* AT: 1..TALLY_AT_MS_MAX; 1 when *at is set, 0 when refused (replied). */
static int at_arg(cmd_ctx *c, const char *s, size_t len, int64_t *at)
{
	if (parse_i64_strict(s, len, at) == 0 && *at > 0 &&
	    *at <= TALLY_AT_MS_MAX)
		return 1;
	reply_errorf(c->out, "ERR AT must be a time in ms since the epoch, "
	             "1..%" PRId64 " (before 2100)", TALLY_AT_MS_MAX);
	return 0;
}

/* The mode of counting type name, 0 when unknown (or out of memory):
 * read on an error path only, to say which rule an event broke. */
static int type_mode(tally *t, const char *name)
{
	tally_type_info *ty;
	size_t n = 0;
	int mode = 0;

	if (tally_types(t, NULL, 0, &n) != TALLY_OK || n == 0 ||
	    (ty = calloc(n, sizeof *ty)) == NULL)
		return 0;
	if (tally_types(t, ty, n, &n) == TALLY_OK)
		for (size_t i = 0; i < n && mode == 0; i++)
			if (!strcmp(ty[i].name, name))
				mode = ty[i].mode;
	free(ty);
	return mode;
}

static void reply_event_error(cmd_ctx *c, int rc, const tally_event *ev)
{
	if (rc == TALLY_ENOTYPE) {
		reply_errorf(c->out, "ERR unknown counting type '%.64s'",
		             ev->ktype);
	} else if (rc == TALLY_EINVAL) {
		int mode = type_mode(c->s->t, ev->ktype);

		if (reply_bad_ctype(c, ev->ctype))
			return;
		if (mode == TALLY_MODE_UNIQUE && ev->member == 0)
			reply_errorf(c->out, "ERR '%.64s' is a unique type: it "
			             "needs a member, not 0", ev->ktype);
		else if (mode == TALLY_MODE_UNIQUE && ev->delta > 1)
			reply_errorf(c->out, "ERR '%.64s' is a unique type: "
			             "DELTA must be 1", ev->ktype);
		else
			reply_error(c->out, "ERR invalid event: unique types "
			            "need a member and DELTA 1; total types a "
			            "DELTA > 0; AT is ms since the epoch, before "
			            "2100; names are [A-Za-z0-9_.:-]");
	} else if (rc != TALLY_EKEYSIZE || !reply_bad_ctype(c, ev->ctype)) {
		/* A content type too long is told its own rule, not the
		 * length rules of every key, name and id. */
		cmd_reply_tally_error(c->out, rc);
	}
}

/* TALLY.ADD|REMOVE ctype ktype content member [DELTA n] [AT ms] [ID t] */
static void event_cmd(cmd_ctx *c, size_t argc, char **argv, size_t *lens,
                      int kind)
{
	tally_write w = { .kind = kind };
	tally_event *ev = &w.event;
	unsigned seen = 0;
	int rc;

	ev->ctype = argv[1];
	ev->ktype = argv[2];
	if (!parse_id_arg(c, "content", argv[3], lens[3], &ev->content) ||
	    !parse_id_arg(c, "member", argv[4], lens[4], &ev->member))
		return;
	for (size_t i = 5; i < argc; i += 2) {
		unsigned opt = arg_is(argv[i], lens[i], "delta") ? 1u
		               : arg_is(argv[i], lens[i], "at")  ? 2u
		               : arg_is(argv[i], lens[i], "id")  ? 4u
		                                                 : 0u;

		if (i + 1 >= argc || opt == 0) {
			reply_error(c->out, "ERR syntax error (options: DELTA n, "
			            "AT ms, ID token, each with its value)");
			return;
		}
		/* Which of two would count is a guess (an ID above all): as
		 * Redis does with a repeated option, refuse. */
		if (seen & opt) {
			reply_errorf(c->out, "ERR %s given twice",
			             opt == 1 ? "DELTA" : opt == 2 ? "AT" : "ID");
			return;
		}
		seen |= opt;
		if (arg_is(argv[i], lens[i], "delta")) {
			if (parse_i64_strict(argv[i + 1], lens[i + 1],
			                     &ev->delta) != 0 || ev->delta <= 0) {
				reply_error(c->out, "ERR DELTA must be a "
				            "positive integer");
				return;
			}
		} else if (arg_is(argv[i], lens[i], "at")) {
			if (!at_arg(c, argv[i + 1], lens[i + 1], &ev->at_ms))
				return;
		} else {
			assert(opt == 4);
			w.id = argv[i + 1];
			w.id_len = lens[i + 1];
		}
	}
	rc = c->submit(c->conn, &w, 1, FMT_INT);
	if (rc != TALLY_OK)
		reply_event_error(c, rc, ev);
}

static void cmd_tadd(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	event_cmd(c, argc, argv, lens, TALLY_W_ADD);
}

static void cmd_tremove(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	event_cmd(c, argc, argv, lens, TALLY_W_REMOVE);
}

static void reply_read_error(cmd_ctx *c, int rc, const char *ctype,
                             const char *ktype)
{
	if ((rc == TALLY_EINVAL || rc == TALLY_EKEYSIZE) && ctype != NULL &&
	    reply_bad_ctype(c, ctype))
		return;
	if (rc == TALLY_ENOTYPE)
		reply_errorf(c->out, "ERR unknown counting type '%.64s'", ktype);
	else if (rc == TALLY_EMODE)
		reply_errorf(c->out, "ERR '%.64s' is a total type: membership "
		             "is kept for unique types only", ktype);
	else
		cmd_reply_tally_error(c->out, rc);
}

static void cmd_tcount(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	uint64_t content;
	int64_t at = 0, n;
	int rc;

	if (!parse_id_arg(c, "content", argv[3], lens[3], &content))
		return;
	if (argc == 6 && arg_is(argv[4], lens[4], "at")) {
		if (!at_arg(c, argv[5], lens[5], &at))
			return;
	} else if (argc != 4) {
		reply_syntax(c->out);
		return;
	}
	rc = at ? tally_count_at(c->s->t, argv[1], argv[2], content, at, &n)
	        : tally_count(c->s->t, argv[1], argv[2], content, &n);
	if (rc == TALLY_OK)
		reply_int(c->out, n);
	else
		reply_read_error(c, rc, argv[1], argv[2]);
}

/* Objects per TALLY.MCOUNT, within the engine's TALLY_MULTI_MAX. */
#define MCOUNT_MAX 1000

static void cmd_tmcount(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	uint64_t ids[MCOUNT_MAX] = { 0 };
	int64_t counts[MCOUNT_MAX];
	size_t n = argc - 3;
	int rc;

	if (n > MCOUNT_MAX) {
		reply_errorf(c->out, "ERR TALLY.MCOUNT takes at most %d objects",
		             MCOUNT_MAX);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (!parse_id_arg(c, "content", argv[3 + i], lens[3 + i],
		                  &ids[i]))
			return;
	rc = tally_mcount(c->s->t, argv[1], argv[2], ids, n, counts);
	if (rc != TALLY_OK) {
		reply_read_error(c, rc, argv[1], argv[2]);
		return;
	}
	reply_array(c->out, n);
	for (size_t i = 0; i < n; i++)
		reply_int(c->out, counts[i]);
}

static void cmd_tcounts(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	tally_type_count tc[TALLY_TYPES_MAX];
	uint64_t content;
	size_t n;
	int rc;

	(void)argc;
	if (!parse_id_arg(c, "content", argv[2], lens[2], &content))
		return;
	rc = tally_counts(c->s->t, argv[1], content, tc, TALLY_TYPES_MAX, &n);
	if (rc != TALLY_OK) {
		if (rc != TALLY_EINVAL || !reply_bad_ctype(c, argv[1]))
			cmd_reply_tally_error(c->out, rc);
		return;
	}
	reply_map(c->out, n);
	for (size_t i = 0; i < n; i++) {
		reply_cstr(c->out, tc[i].ktype);
		reply_int(c->out, tc[i].count);
	}
}

/* [LIMIT n] [BEFORE seq] from argv[from], each at most once; defaults
 * limit 20, before 0. Any mistake gets the rules in its error. */
static int page_args(cmd_ctx *c, size_t argc, char **argv, size_t *lens,
                     size_t from, size_t *limit, uint64_t *before)
{
	int seen_limit = 0, seen_before = 0;

	*limit = 20;
	*before = 0;
	for (size_t i = from; i < argc; i += 2) {
		int is_limit = arg_is(argv[i], lens[i], "limit");
		int is_before = !is_limit && arg_is(argv[i], lens[i], "before");
		uint64_t v = 0;

		if (!(is_limit || is_before) || i + 1 >= argc ||
		    parse_u64_arg(argv[i + 1], lens[i + 1], &v) != 0 ||
		    (is_limit && (v < 1 || v > TALLY_PAGE_MAX))) {
			reply_errorf(c->out, "ERR syntax error (LIMIT 1..%d, "
			             "BEFORE seq, a sequence number from an "
			             "entry before)", TALLY_PAGE_MAX);
			return 0;
		}
		if (is_limit ? seen_limit++ : seen_before++) {
			reply_errorf(c->out, "ERR %s given twice",
			             is_limit ? "LIMIT" : "BEFORE");
			return 0;
		}
		if (is_limit)
			*limit = (size_t)v;
		else
			*before = v;
	}
	return 1;
}

static void cmd_trecent(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	tally_entry e[TALLY_PAGE_MAX];
	uint64_t content, before;
	size_t limit, n;
	int rc;

	if (!parse_id_arg(c, "content", argv[3], lens[3], &content) ||
	    !page_args(c, argc, argv, lens, 4, &limit, &before))
		return;
	rc = tally_recent(c->s->t, argv[1], argv[2], content, limit, before, e,
	                  &n);
	if (rc != TALLY_OK) {
		reply_read_error(c, rc, argv[1], argv[2]);
		return;
	}
	reply_array(c->out, n);
	for (size_t i = 0; i < n; i++) {
		reply_array(c->out, 4);
		reply_u64(c->out, e[i].member);
		reply_int(c->out, e[i].at_ms);
		reply_cstr(c->out, e[i].delta > 0 ? "add" : "remove");
		reply_u64(c->out, e[i].seq);
	}
}

static void cmd_thas(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	uint64_t content, member;
	int64_t at;
	int rc;

	(void)argc;
	if (!parse_id_arg(c, "content", argv[3], lens[3], &content) ||
	    !parse_id_arg(c, "member", argv[4], lens[4], &member))
		return;
	rc = tally_has(c->s->t, argv[1], argv[2], content, member, &at);
	if (rc == TALLY_OK)
		reply_int(c->out, at);
	else if (rc == TALLY_ENOTFOUND)
		reply_nil(c->out);
	else if (rc == TALLY_EINVAL && member == 0)
		reply_error(c->out, "ERR member must be non-zero");
	else
		reply_read_error(c, rc, argv[1], argv[2]);
}

static void cmd_thistory(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	static _Thread_local tally_history_entry h[TALLY_PAGE_MAX];
	uint64_t member, before;
	size_t limit, n;
	int rc;

	if (!parse_id_arg(c, "member", argv[1], lens[1], &member) ||
	    !page_args(c, argc, argv, lens, 3, &limit, &before))
		return;
	if (member == 0) {
		reply_error(c->out, "ERR member must be non-zero");
		return;
	}
	rc = tally_history(c->s->t, member, argv[2], limit, before, h, &n);
	if (rc != TALLY_OK) {
		reply_read_error(c, rc, NULL, argv[2]);
		return;
	}
	reply_array(c->out, n);
	for (size_t i = 0; i < n; i++) {
		reply_array(c->out, 5);
		reply_cstr(c->out, h[i].ctype);
		reply_u64(c->out, h[i].content);
		reply_int(c->out, h[i].at_ms);
		reply_cstr(c->out, h[i].delta > 0 ? "add" : "remove");
		reply_u64(c->out, h[i].seq);
	}
}

static void cmd_ttype(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	int mode, rc;

	if (argc != 4 || !arg_is(argv[1], lens[1], "add")) {
		reply_error(c->out, "ERR usage: TALLY.TYPE ADD name "
		            "unique|total");
		return;
	}
	if (arg_is(argv[3], lens[3], "unique"))
		mode = TALLY_MODE_UNIQUE;
	else if (arg_is(argv[3], lens[3], "total"))
		mode = TALLY_MODE_TOTAL;
	else {
		reply_error(c->out, "ERR mode must be unique or total");
		return;
	}
	rc = tally_type_add(c->s->t, argv[2], mode);
	if (rc == TALLY_OK)
		reply_status(c->out, "OK");
	else if (rc == TALLY_ETYPEEXISTS)
		reply_errorf(c->out, "ERR counting type '%.64s' exists with "
		             "the other mode", argv[2]);
	else if (rc == TALLY_EINVAL)
		reply_error(c->out, "ERR type names are 1..64 bytes of "
		            "[A-Za-z0-9_.:-]");
	else if (rc == TALLY_ELIMIT)
		reply_errorf(c->out, "ERR limit reached: at most %d counting "
		             "types", TALLY_TYPES_MAX);
	else
		cmd_reply_tally_error(c->out, rc);
}

static void cmd_ttypes(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	tally_type_info ti[TALLY_TYPES_MAX];
	size_t n;

	(void)argc, (void)argv, (void)lens;
	tally_types(c->s->t, ti, TALLY_TYPES_MAX, &n);
	reply_array(c->out, n);
	for (size_t i = 0; i < n; i++) {
		reply_array(c->out, 2);
		reply_cstr(c->out, ti[i].name);
		reply_cstr(c->out, ti[i].mode == TALLY_MODE_UNIQUE ? "unique"
		                                                   : "total");
	}
}

static void cmd_tshards(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	/* The rocksdb store keeps one record per counter (hot keys are
	 * coalesced by group commit and striped cells) and answers 1; the
	 * redis-cluster store spreads a counter over shards on many nodes. */
	int64_t n = 0;
	uint32_t now;
	int rc;

	if (argc > 3) {
		reply_error(c->out, "ERR wrong number of arguments for "
		            "'tally.shards' command");
		return;
	}
	if (!key_ok(c, lens[1]))
		return;
	if (argc == 3 && (parse_i64_strict(argv[2], lens[2], &n) || n < 1 ||
	                  n > 256)) {
		reply_error(c->out, "ERR shard count must be 1..256");
		return;
	}
	rc = tally_shards(c->s->t, argv[1], lens[1], (uint32_t)n, &now);
	if (rc == TALLY_ENOTSUP)
		reply_error(c->out, "ERR TALLY.SHARDS n applies to the "
		            "redis-cluster store; the rocksdb store needs no "
		            "shards");
	else if (rc != TALLY_OK)
		cmd_reply_tally_error(c->out, rc);
	else
		reply_int(c->out, now);
}

typedef struct backup_job {
	tally *t;
	char path[SRV_BACKUP_PATH_MAX + 1];
} backup_job;

/* Runs on a pool thread when the network layer can offload it: a
 * checkpoint flushes memtables and links files, which may take seconds,
 * and the loop's other clients must not wait for it. */
static void backup_run(void *arg, rbuf *out)
{
	backup_job *j = arg;
	int rc = tally_backup(j->t, j->path);

	tally_stats st;

	/* The path was checked before; a failure here is the disk's, or the
	 * store had failed already (then say that, as writes do). */
	if (rc == TALLY_OK)
		reply_status(out, "OK");
	else if (tally_stats_get(j->t, &st) == TALLY_OK &&
	         st.store_error != TALLY_OK)
		cmd_reply_tally_error(out, st.store_error);
	else if (rc == TALLY_ENOSPC)
		reply_errorf(out, "ERR backup to '%.200s' failed: no space "
		             "left on its device (nothing was left there; "
		             "the store serves on)", j->path);
	else if (rc == TALLY_EIO)
		reply_errorf(out, "ERR backup to '%.200s' failed: I/O error "
		             "while writing the checkpoint (a disk failing, "
		             "the folder created meanwhile, or its "
		             ".tally-partial folder left by an interrupted "
		             "backup)", j->path);
	else
		cmd_reply_tally_error(out, rc);
	free(j);
}

static void cmd_tbackup(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	char err[512];
	backup_job *j = malloc(sizeof *j);

	(void)argc;
	if (j == NULL) {
		reply_error(c->out, "ERR out of memory");
		return;
	}
	j->t = c->s->t;
	if (backup_target(&c->s->cfg, argv[1], lens[1], j->path,
	                  sizeof j->path, err, sizeof err) != 0) {
		free(j);
		reply_error(c->out, err);
		return;
	}
	if (c->offload == NULL || c->offload(c->conn, backup_run, j) != 0)
		backup_run(j, c->out);
}

/* ---- the table ----------------------------------------------------------------- */

static const cmd_def table[] = {
	CMD("ping", -1, 0, cmd_ping),
	CMD("echo", 2, 0, cmd_echo),
	CMD("quit", -1, CMD_NOAUTH, cmd_quit),
	CMD("hello", -1, CMD_NOAUTH, cmd_hello),
	CMD("auth", -2, CMD_NOAUTH, cmd_auth),
	CMD("select", 2, 0, cmd_select),
	CMD("client", -2, 0, cmd_client),
	CMD("command", -1, 0, cmd_command),
	CMD("info", -1, 0, cmd_info),
	CMD("dbsize", 1, 0, cmd_dbsize),
	CMD("config", -2, 0, cmd_config),
	CMD("incr", 2, CMD_WRITE, cmd_incr),
	CMD("incrby", 3, CMD_WRITE, cmd_incrby),
	CMD("decr", 2, CMD_WRITE, cmd_decr),
	CMD("decrby", 3, CMD_WRITE, cmd_decrby),
	CMD("get", 2, 0, cmd_get),
	CMD("mget", -2, 0, cmd_mget),
	CMD("set", -3, CMD_WRITE, cmd_set),
	CMD("del", -2, CMD_WRITE, cmd_del),
	CMD("exists", -2, 0, cmd_exists),
	CMD("tally.add", -5, CMD_WRITE | CMD_TEXT, cmd_tadd),
	CMD("tally.remove", -5, CMD_WRITE | CMD_TEXT, cmd_tremove),
	CMD("tally.count", -4, CMD_TEXT, cmd_tcount),
	CMD("tally.mcount", -4, CMD_TEXT, cmd_tmcount),
	CMD("tally.counts", 3, CMD_TEXT, cmd_tcounts),
	CMD("tally.recent", -4, CMD_TEXT, cmd_trecent),
	CMD("tally.has", 5, CMD_TEXT, cmd_thas),
	CMD("tally.history", -3, CMD_TEXT, cmd_thistory),
	CMD("tally.type", -2, CMD_TEXT | CMD_SCHEMA, cmd_ttype),
	CMD("tally.types", 1, CMD_TEXT, cmd_ttypes),
	CMD("tally.shards", -2, 0, cmd_tshards),
	CMD("tally.backup", 2, CMD_TEXT, cmd_tbackup),
};
static const size_t table_n = sizeof table / sizeof table[0];

_Static_assert(sizeof table / sizeof table[0] <= CMD_TABLE_MAX,
               "command statistics have room for every command");

static void command_info(cmd_ctx *c, const cmd_def *d)
{
	int keyed = d->name[0] != 't' && (d->flags & CMD_WRITE ||
	            !strcmp(d->name, "get") || !strcmp(d->name, "mget") ||
	            !strcmp(d->name, "exists"));

	reply_array(c->out, 6);
	reply_cstr(c->out, d->name);
	reply_int(c->out, d->arity);
	reply_array(c->out, 1);
	reply_status(c->out, d->flags & (CMD_WRITE | CMD_SCHEMA) ?
	             "write" : "readonly");
	reply_int(c->out, keyed ? 1 : 0);
	reply_int(c->out, keyed ? (d->arity < 0 && strcmp(d->name, "set") ?
	                           -1 : 1) : 0);
	reply_int(c->out, keyed ? 1 : 0);
}

static void cmd_command(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	if (argc == 1) {
		reply_array(c->out, table_n);
		for (size_t i = 0; i < table_n; i++)
			command_info(c, &table[i]);
	} else if (arg_is(argv[1], lens[1], "count") && argc == 2) {
		reply_int(c->out, (int64_t)table_n);
	} else if (arg_is(argv[1], lens[1], "docs")) {
		/* No docs: redis-cli then uses its own hints. */
		reply_map(c->out, 0);
	} else {
		static const char *const known[] = { "count", "docs", NULL };

		reply_subcommand(c, "command", argc, argv[1], lens[1],
		                 known);
	}
}

const char *cmd_name(size_t i)
{
	return i < table_n ? table[i].name : NULL;
}

_Static_assert(CMD_TABLE_MAX < CMD_INDEX_SLOTS && CMD_TABLE_MAX < 255,
               "the index has an empty slot, and a byte holds entry + 1");
_Static_assert(CMD_INDEX_SLOTS == 128, "cmd_slot() takes 7 bits");

/* The name lower-cased into w (bytes past len zero); 0 when it is empty
 * or longer than any command's. ASCII letters only are folded, as
 * strncasecmp() does in the C locale; eight bytes at a time: a byte
 * 'A'..'Z' (high bit clear) gets 0x20 added. */
static int name_fold(const char *name, size_t len, uint64_t w[2])
{
	const uint64_t high = 0x8080808080808080u;
	char buf[CMD_NAME_MAX] = { 0 };

	if (len == 0 || len > CMD_NAME_MAX)
		return 0;
	memcpy(buf, name, len);
	memcpy(w, buf, sizeof buf);
	for (int i = 0; i < 2; i++) {
		uint64_t x = w[i], low7 = x & ~high;
		uint64_t from_a = low7 + 0x3f3f3f3f3f3f3f3fu; /* >= 'A' */
		uint64_t past_z = low7 + 0x2525252525252525u; /* > 'Z' */

		w[i] = x | ((from_a & ~past_z & ~x & high) >> 2);
	}
	return 1;
}

static size_t cmd_slot(const uint64_t w[2])
{
	return (size_t)((w[0] * 0x9e3779b97f4a7c15u ^
	                 w[1] * 0xc2b2ae3d27d4eb4fu) >> 57);
}

void cmd_index_build(srv *s)
{
	const size_t mask = CMD_INDEX_SLOTS - 1;

	memset(s->cmd_index, 0, sizeof s->cmd_index);
	for (size_t i = 0; i < table_n; i++) {
		uint64_t *w = s->cmd_words[i];
		size_t j;
		int ok = name_fold(table[i].name, table[i].len, w);

		/* Names are stored lower case, within CMD_NAME_MAX. */
		assert(ok && memcmp(w, table[i].name, table[i].len) == 0);
		(void)ok;
		for (j = cmd_slot(w); s->cmd_index[j] != 0; j = (j + 1) & mask)
			;
		s->cmd_index[j] = (uint8_t)(i + 1);
	}
}

/* Every command's name is looked up once or twice (a write's, while
 * replies are owed). A walk of the table, a strncasecmp() for each entry
 * of the right length and first letter, was some 450 instructions of an
 * INCR's 5,100 (callgrind); a probe of the index is a fold of the name's
 * two words and a compare of them. */
static const cmd_def *lookup(const srv *s, const char *name, size_t len)
{
	const size_t mask = CMD_INDEX_SLOTS - 1;
	uint64_t w[2];

	if (!name_fold(name, len, w))
		return NULL;
	for (size_t j = cmd_slot(w); s->cmd_index[j] != 0; j = (j + 1) & mask) {
		size_t i = s->cmd_index[j] - 1u;

		/* The length too: "incr\0" folds to incr's words. */
		if (s->cmd_words[i][0] == w[0] && s->cmd_words[i][1] == w[1] &&
		    table[i].len == len)
			return &table[i];
	}
	return NULL;
}

int cmd_find(const srv *s, const char *name, size_t len)
{
	const cmd_def *d = lookup(s, name, len);

	return d != NULL ? (int)(d - table) : -1;
}

int cmd_writes(int i)
{
	return i >= 0 && (table[i].flags & CMD_WRITE);
}

/* Every argument of a CMD_TEXT command is free of NUL bytes, except an
 * idempotency token (the value of TALLY.ADD's or TALLY.REMOVE's ID
 * option), which may be any bytes. Their options come in name-value
 * pairs from argument 5 on; only a name there is taken as ID, never an
 * argument before (a content type may be called "id"). */
static int text_args_ok(const cmd_def *d, cmd_ctx *c, size_t argc,
                        char **argv, size_t *lens)
{
	int event = d->fn == cmd_tadd || d->fn == cmd_tremove;

	for (size_t i = 1; i < argc; i++) {
		if (event && i >= 6 && (i - 6) % 2 == 0 &&
		    arg_is(argv[i - 1], lens[i - 1], "id"))
			continue;
		if (memchr(argv[i], '\0', lens[i]) != NULL) {
			reply_errorf(c->out, "ERR argument %zu contains a NUL "
			             "byte; names and numbers cannot", i);
			return 0;
		}
	}
	return 1;
}

static void reply_unknown(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	char args[160];
	size_t used = 0;

	args[0] = '\0';
	for (size_t i = 1; i < argc && used < 128; i++) {
		int n = snprintf(args + used, sizeof args - used, "'%.*s' ",
		                 (int)(lens[i] < 128 - used ? lens[i] : 128 - used),
		                 argv[i]);
		if (n < 0 || (size_t)n >= sizeof args - used)
			break;
		used += (size_t)n;
	}
	reply_errorf(c->out, "ERR unknown command '%.128s', with args "
	             "beginning with: %s", argv[0], args);
}

void cmd_run(cmd_ctx *c, int i, size_t argc, char **argv, size_t *lens)
{
	const cmd_def *d = i >= 0 ? &table[i] : NULL;

	assert(argc >= 1);
	assert(i < (int)table_n && i == cmd_find(c->s, argv[0], lens[0]));
	if (d == NULL) {
		reply_unknown(c, argc, argv, lens);
		return;
	}
	stat_add(&c->st->cmd_calls[d - table], 1);
	/* Redis 7's order: the command, its arity, then the password. */
	if ((d->arity > 0 && argc != (size_t)d->arity) ||
	    (d->arity < 0 && argc < (size_t)-d->arity)) {
		reply_errorf(c->out, "ERR wrong number of arguments for '%s' "
		             "command", d->name);
		return;
	}
	if (c->s->cfg.requirepass && !c->cl->authed &&
	    !(d->flags & CMD_NOAUTH)) {
		reply_error(c->out, "NOAUTH Authentication required.");
		return;
	}
	if ((d->flags & CMD_TEXT) && !text_args_ok(d, c, argc, argv, lens))
		return;
	d->fn(c, argc, argv, lens);
}

void cmd_dispatch(cmd_ctx *c, size_t argc, char **argv, size_t *lens)
{
	assert(argc >= 1);
	cmd_run(c, cmd_find(c->s, argv[0], lens[0]), argc, argv, lens);
}
