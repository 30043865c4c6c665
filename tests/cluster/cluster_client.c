/* cluster_client.c: drives the cluster client (src/store/cluster.c) against
 * a real Redis Cluster started by tests/cluster/test_cluster_client.sh.
 * One mode per behaviour; each prints "ok ..." / "FAIL ..." lines and exits
 * non-zero on any failure. Raw hiredis connections play the operator
 * (resharding a slot, pausing a node, flushing scripts). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "store/cluster.h"
#include "store/rc_lua.h"

static int failures;

static void check(int cond, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf(cond ? "ok   " : "FAIL ");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	if (!cond)
		failures++;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static cluster *open_or_die(const char *seeds, int command_timeout_ms)
{
	cluster_options o = {.command_timeout_ms = command_timeout_ms};
	cluster *c = NULL;
	int rc = cluster_open(seeds, &o, &c);
	if (rc != TALLY_OK) {
		printf("FAIL cluster_open(%s): %d\n", seeds, rc);
		exit(1);
	}
	return c;
}

/* A raw connection to one node, for the operator's side. */
static redisContext *raw(const char *addr)
{
	char host[CLUSTER_ADDR_MAX];
	const char *colon = strrchr(addr, ':');
	struct timeval tv = {10, 0};
	redisContext *r;

	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		exit(1);
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	r = redisConnectWithTimeout(host, atoi(colon + 1), tv);
	if (!r || r->err) {
		printf("FAIL connect %s\n", addr);
		exit(1);
	}
	redisSetTimeout(r, tv);
	return r;
}

/* Runs one operator command; dies if it is not what was expected. */
static redisReply *op(redisContext *r, const char *fmt, ...)
{
	va_list ap;
	redisReply *x;
	va_start(ap, fmt);
	x = redisvCommand(r, fmt, ap);
	va_end(ap);
	if (!x || x->type == REDIS_REPLY_ERROR) {
		printf("FAIL operator command %s: %s\n", fmt,
		       x ? x->str : r->errstr);
		if (x)
			freeReplyObject(x);
		exit(1);
	}
	return x;
}

static void node_id(const char *addr, char id[64])
{
	redisContext *r = raw(addr);
	redisReply *x = op(r, "CLUSTER MYID");
	snprintf(id, 64, "%s", x->str);
	freeReplyObject(x);
	redisFree(r);
}

/* A key of the form PREFIX<i> whose slot is owned by the master at addr
 * (or by any other master when other is set). */
static void key_on(cluster *c, const char *prefix, const char *addr, int other,
                   char *key, size_t len)
{
	char a[CLUSTER_ADDR_MAX];
	for (int i = 0; i < 100000; i++) {
		snprintf(key, len, "%s%d", prefix, i);
		if (cluster_slot_addr(c, cluster_slot(key, strlen(key)), a,
		                      sizeof(a)) != TALLY_OK)
			continue;
		if ((strcmp(a, addr) == 0) != (other != 0))
			return;
	}
	printf("FAIL no key for %s\n", addr);
	exit(1);
}

static void cmd_set(cluster_cmd *m, const char **argv, const char *verb,
                    const char *key, const char *val)
{
	argv[0] = verb;
	argv[1] = key;
	argv[2] = val;
	m->argc = val ? 3 : 2;
	m->argv = argv;
	m->argvlen = NULL;
	m->slot = cluster_slot(key, strlen(key));
}

/* ---- slots: print the client's slot of each key, for the script ---- */

static int mode_slots(int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		printf("%u\n", (unsigned)cluster_slot(argv[i], strlen(argv[i])));
	return 0;
}

/* ---- batch: many keys over every master, pipelined ---- */

#define BATCH_N 3000

static int mode_batch(const char *seeds)
{
	static char keys[BATCH_N][32], vals[BATCH_N][32];
	static const char *argv[BATCH_N][3];
	static cluster_cmd cmds[BATCH_N];
	char seen[3][CLUSTER_ADDR_MAX];
	size_t n_seen = 0;
	cluster *c = open_or_die(seeds, 5000);
	int rc, good = 0;

	check(cluster_master_count(c) == 3, "3 masters in the slot map (%zu)",
	      cluster_master_count(c));
	for (int i = 0; i < BATCH_N; i++) {
		char a[CLUSTER_ADDR_MAX];
		snprintf(keys[i], sizeof(keys[i]), "batch:%d", i);
		snprintf(vals[i], sizeof(vals[i]), "%d", i * 7);
		cmd_set(&cmds[i], argv[i], "SET", keys[i], vals[i]);
		if (cluster_slot_addr(c, cmds[i].slot, a, sizeof(a)) != TALLY_OK)
			continue;
		size_t k;
		for (k = 0; k < n_seen && strcmp(seen[k], a) != 0; k++)
			;
		if (k == n_seen && n_seen < 3)
			memcpy(seen[n_seen++], a, sizeof(a));
	}
	check(n_seen == 3, "the batch's keys span all 3 masters");
	rc = cluster_exec(c, cmds, BATCH_N, 20000);
	for (int i = 0; i < BATCH_N; i++)
		good += cmds[i].outcome == CL_DONE &&
		        cmds[i].reply->type == REDIS_REPLY_STATUS;
	check(rc == TALLY_OK && good == BATCH_N, "%d pipelined SETs done (%d)",
	      BATCH_N, good);
	/* INCRBY then GET of the same key in one exec: per-node order is
	 * kept, so each GET sees its own INCRBY. */
	for (int i = 0; i < BATCH_N; i += 2) {
		cmd_set(&cmds[i], argv[i], "INCRBY", keys[i], "5");
		cmd_set(&cmds[i + 1], argv[i + 1], "GET", keys[i], NULL);
	}
	rc = cluster_exec(c, cmds, BATCH_N, 20000);
	good = 0;
	for (int i = 0; i < BATCH_N; i += 2) {
		char want[32];
		snprintf(want, sizeof(want), "%d", i * 7 + 5);
		good += cmds[i].outcome == CL_DONE &&
		        cmds[i].reply->type == REDIS_REPLY_INTEGER &&
		        cmds[i].reply->integer == i * 7 + 5 &&
		        cmds[i + 1].outcome == CL_DONE &&
		        cmds[i + 1].reply->type == REDIS_REPLY_STRING &&
		        strcmp(cmds[i + 1].reply->str, want) == 0;
	}
	check(rc == TALLY_OK && good == BATCH_N / 2,
	      "every reply is its own command's (%d of %d pairs)", good,
	      BATCH_N / 2);
	/* An error reply of a command's own is a completed command. */
	cmd_set(&cmds[0], argv[0], "INCR", keys[1], NULL);
	cmd_set(&cmds[1], argv[1], "LPUSH", keys[1], "x");
	rc = cluster_exec(c, cmds, 2, 5000);
	check(rc == TALLY_OK && cmds[1].outcome == CL_DONE &&
	      cmds[1].reply->type == REDIS_REPLY_ERROR &&
	      strncmp(cmds[1].reply->str, "WRONGTYPE", 9) == 0,
	      "WRONGTYPE comes back as a done command's reply");
	for (int i = 0; i < BATCH_N; i++)
		cluster_cmd_reset(&cmds[i]);
	cluster_close(c);
	return failures != 0;
}

/* ---- migrate: ASK during a slot migration, MOVED after it ---- */

static int mode_migrate(const char *seeds)
{
	cluster *c = open_or_die(seeds, 5000);
	char a_addr[CLUSTER_ADDR_MAX], b_addr[CLUSTER_ADDR_MAX], now[CLUSTER_ADDR_MAX];
	char a_id[64], b_id[64], k1[64], k2[64], bhost[CLUSTER_ADDR_MAX];
	const char *argv[2][3];
	cluster_cmd cmds[2];
	cluster_stats st;
	uint16_t slot;
	redisContext *ra, *rb;
	int rc;

	memset(cmds, 0, sizeof(cmds));
	/* Two keys of one slot (same tag); the slot moves from A to B. */
	snprintf(k1, sizeof(k1), "{mig}:1");
	snprintf(k2, sizeof(k2), "{mig}:2");
	slot = cluster_slot(k1, strlen(k1));
	if (cluster_slot_addr(c, slot, a_addr, sizeof(a_addr)) != TALLY_OK)
		return 1;
	key_on(c, "other", a_addr, 1, bhost, sizeof(bhost));
	cluster_slot_addr(c, cluster_slot(bhost, strlen(bhost)), b_addr,
	                  sizeof(b_addr));
	node_id(a_addr, a_id);
	node_id(b_addr, b_id);
	cmd_set(&cmds[0], argv[0], "SET", k1, "one");
	cmd_set(&cmds[1], argv[1], "SET", k2, "two");
	rc = cluster_exec(c, cmds, 2, 5000);
	cmd_set(&cmds[0], argv[0], "DEL", "{mig}:n", NULL);
	rc |= cluster_exec(c, cmds, 1, 5000);
	check(rc == TALLY_OK, "keys of slot %u set on %s", (unsigned)slot, a_addr);

	ra = raw(a_addr);
	rb = raw(b_addr);
	freeReplyObject(op(rb, "CLUSTER SETSLOT %u IMPORTING %s", (unsigned)slot, a_id));
	freeReplyObject(op(ra, "CLUSTER SETSLOT %u MIGRATING %s", (unsigned)slot, b_id));
	{
		const char *colon = strrchr(b_addr, ':');
		char h[CLUSTER_ADDR_MAX];
		memcpy(h, b_addr, (size_t)(colon - b_addr));
		h[colon - b_addr] = '\0';
		freeReplyObject(op(ra, "MIGRATE %s %s %s 0 5000", h, colon + 1, k1));
	}
	cmd_set(&cmds[0], argv[0], "GET", k1, NULL);
	cmd_set(&cmds[1], argv[1], "GET", k2, NULL);
	rc = cluster_exec(c, cmds, 2, 5000);
	cluster_get_stats(c, &st);
	check(rc == TALLY_OK && cmds[0].reply->type == REDIS_REPLY_STRING &&
	      strcmp(cmds[0].reply->str, "one") == 0,
	      "mid-migration: the migrated key is read through ASK (%d: %s)",
	      cmds[0].outcome, cmds[0].reply && cmds[0].reply->str ?
	      cmds[0].reply->str : "-");
	check(rc == TALLY_OK && cmds[1].reply->type == REDIS_REPLY_STRING &&
	      strcmp(cmds[1].reply->str, "two") == 0,
	      "mid-migration: the key not yet moved is read on the source");
	check(st.ask >= 1, "an ASK was followed (%" PRIu64 ")", st.ask);
	cluster_get_stats(c, &st);
	uint64_t moved0 = st.moved;
	{
		const char *colon = strrchr(b_addr, ':');
		char h[CLUSTER_ADDR_MAX];
		memcpy(h, b_addr, (size_t)(colon - b_addr));
		h[colon - b_addr] = '\0';
		freeReplyObject(op(ra, "MIGRATE %s %s %s 0 5000", h, colon + 1, k2));
	}
	freeReplyObject(op(rb, "CLUSTER SETSLOT %u NODE %s", (unsigned)slot, b_id));
	freeReplyObject(op(ra, "CLUSTER SETSLOT %u NODE %s", (unsigned)slot, b_id));
	cmd_set(&cmds[0], argv[0], "INCR", "{mig}:n", NULL);
	cmd_set(&cmds[1], argv[1], "GET", k2, NULL);
	rc = cluster_exec(c, cmds, 2, 5000);
	cluster_get_stats(c, &st);
	check(rc == TALLY_OK && cmds[0].reply->type == REDIS_REPLY_INTEGER &&
	      cmds[0].reply->integer == 1,
	      "after the move: a write runs once on the new owner");
	check(rc == TALLY_OK && cmds[1].reply->type == REDIS_REPLY_STRING &&
	      strcmp(cmds[1].reply->str, "two") == 0,
	      "after the move: the read finds the key");
	check(st.moved > moved0, "MOVED was followed (%" PRIu64 ")", st.moved);
	cluster_slot_addr(c, slot, now, sizeof(now));
	check(strcmp(now, b_addr) == 0, "slot map says %s owns the slot (%s)",
	      b_addr, now);
	/* Put the slot back, so later modes see the usual layout. */
	freeReplyObject(op(ra, "CLUSTER SETSLOT %u IMPORTING %s", (unsigned)slot, b_id));
	freeReplyObject(op(rb, "CLUSTER SETSLOT %u MIGRATING %s", (unsigned)slot, a_id));
	{
		const char *colon = strrchr(a_addr, ':');
		char h[CLUSTER_ADDR_MAX];
		memcpy(h, a_addr, (size_t)(colon - a_addr));
		h[colon - a_addr] = '\0';
		freeReplyObject(op(rb, "MIGRATE %s %s %s 0 5000 KEYS %s %s %s", h,
		                   colon + 1, "", k1, k2, "{mig}:n"));
	}
	freeReplyObject(op(ra, "CLUSTER SETSLOT %u NODE %s", (unsigned)slot, a_id));
	freeReplyObject(op(rb, "CLUSTER SETSLOT %u NODE %s", (unsigned)slot, a_id));
	redisFree(ra);
	redisFree(rb);
	cluster_cmd_reset(&cmds[0]);
	cluster_cmd_reset(&cmds[1]);
	cluster_close(c);
	return failures != 0;
}

/* ---- pause: a node that stops answering gives CL_UNKNOWN, not a hang ---- */

static int mode_pause(const char *seeds)
{
	cluster *c = open_or_die(seeds, 500);
	char p_addr[CLUSTER_ADDR_MAX], kp[64], ko[64];
	const char *argv[3][3];
	cluster_cmd cmds[3];
	redisContext *rp;
	redisReply *x;
	int64_t t0, took;
	int rc;

	memset(cmds, 0, sizeof(cmds));
	if (cluster_slot_addr(c, cluster_slot("pz", 2), p_addr,
	                      sizeof(p_addr)) != TALLY_OK)
		return 1;
	key_on(c, "pz:", p_addr, 0, kp, sizeof(kp));
	key_on(c, "po:", p_addr, 1, ko, sizeof(ko));
	/* Connections made before the pause: the commands are surely sent. */
	cmd_set(&cmds[0], argv[0], "DEL", kp, NULL);
	cmd_set(&cmds[1], argv[1], "DEL", ko, NULL);
	check(cluster_exec(c, cmds, 2, 5000) == TALLY_OK, "keys cleared");
	rp = raw(p_addr);
	freeReplyObject(op(rp, "CLIENT PAUSE 5000 ALL"));
	cmd_set(&cmds[0], argv[0], "INCR", kp, NULL);
	cmd_set(&cmds[1], argv[1], "INCR", ko, NULL);
	cmd_set(&cmds[2], argv[2], "INCR", kp, NULL);
	t0 = mono_ms();
	rc = cluster_exec(c, cmds, 3, 3000);
	took = mono_ms() - t0;
	check(rc == TALLY_EIO, "exec reports a failure (%d)", rc);
	check(cmds[0].outcome == CL_UNKNOWN && cmds[2].outcome == CL_UNKNOWN,
	      "writes sent to the paused node are CL_UNKNOWN (%d, %d)",
	      cmds[0].outcome, cmds[2].outcome);
	check(cmds[1].outcome == CL_DONE && cmds[1].reply->integer == 1,
	      "the write to another master is done");
	/* Bounded by the 500 ms command timeout, far below the 5 s pause. */
	check(took < 4000, "exec returned before the pause ended (%" PRId64 " ms)",
	      took);
	/* Redis drops a paused client's unread commands when it goes away,
	 * so here "unknown" turns out "not run"; what must hold is that the
	 * client did not send them again: at most 2. */
	for (int i = 0; i < 40; i++) {
		cmd_set(&cmds[0], argv[0], "GET", kp, NULL);
		rc = cluster_exec(c, cmds, 1, 3000);
		if (rc == TALLY_OK)
			break;
	}
	x = cmds[0].reply;
	check(rc == TALLY_OK && (x->type == REDIS_REPLY_NIL ||
	      (x->type == REDIS_REPLY_STRING && atoi(x->str) <= 2)),
	      "after the pause: no unknown write was sent twice (%s)",
	      rc == TALLY_OK && x->type == REDIS_REPLY_STRING ? x->str : "nil");

	/* DEBUG SLEEP stalls the node with our bytes in its socket: they run
	 * when it wakes, after our timeout. Unknown, then run exactly once.
	 * 1.5 s: past the 500 ms command timeout, short of the 2 s node
	 * timeout that would start a failover. */
	cmd_set(&cmds[0], argv[0], "DEL", kp, NULL);
	check(cluster_exec(c, cmds, 1, 10000) == TALLY_OK, "key cleared");
	if (redisAppendCommand(rp, "DEBUG SLEEP 1.5") != REDIS_OK)
		return 1;
	{
		int done = 0;
		while (!done)
			if (redisBufferWrite(rp, &done) != REDIS_OK)
				return 1;
	}
	usleep(200000);
	cmd_set(&cmds[0], argv[0], "INCR", kp, NULL);
	cmd_set(&cmds[1], argv[1], "INCR", kp, NULL);
	t0 = mono_ms();
	rc = cluster_exec(c, cmds, 2, 2000);
	took = mono_ms() - t0;
	check(rc == TALLY_EIO && cmds[0].outcome == CL_UNKNOWN &&
	      cmds[1].outcome == CL_UNKNOWN,
	      "writes to a sleeping node are CL_UNKNOWN (%d, %d)",
	      cmds[0].outcome, cmds[1].outcome);
	printf("     (exec took %" PRId64 " ms)\n", took);
	if (redisGetReply(rp, (void **)&x) == REDIS_OK)
		freeReplyObject(x);
	for (int i = 0; i < 40; i++) {
		cmd_set(&cmds[0], argv[0], "GET", kp, NULL);
		rc = cluster_exec(c, cmds, 1, 3000);
		if (rc == TALLY_OK)
			break;
	}
	x = cmds[0].reply;
	check(rc == TALLY_OK && x->type == REDIS_REPLY_STRING &&
	      strcmp(x->str, "2") == 0,
	      "the unknown writes ran when the node woke, once each (%s)",
	      rc == TALLY_OK && x->type == REDIS_REPLY_STRING ? x->str : "?");
	for (int i = 0; i < 3; i++)
		cluster_cmd_reset(&cmds[i]);
	redisFree(rp);
	cluster_close(c);
	return failures != 0;
}

/* ---- scripts: loaded on every master, NOSCRIPT answered by a reload ---- */

static const char script_src[] =
	"return redis.call('INCRBY', KEYS[1], ARGV[1])";

static int mode_scripts(const char *seeds)
{
	cluster *c = open_or_die(seeds, 5000);
	char sha[41], sha2[41], keys[3][64];
	const char *argv[3][5];
	cluster_cmd cmds[3];
	cluster_master_reply *r = NULL;
	cluster_stats st;
	size_t m = 0;
	int rc, good = 0;

	memset(cmds, 0, sizeof(cmds));
	rc = cluster_script_load(c, script_src, strlen(script_src), sha, 5000);
	check(rc == TALLY_OK && strlen(sha) == 40, "script loaded on all masters");
	rc = cluster_script_load(c, "return (", 8, sha2, 5000);
	check(rc == TALLY_EINVAL, "a script that does not compile is EINVAL (%d)",
	      rc);
	/* One key per master. */
	{
		char used[3][CLUSTER_ADDR_MAX];
		int nu = 0;
		for (int i = 0; nu < 3 && i < 100000; i++) {
			char k[64], a[CLUSTER_ADDR_MAX];
			int dup = 0;
			snprintf(k, sizeof(k), "s:%d", i);
			cluster_slot_addr(c, cluster_slot(k, strlen(k)), a, sizeof(a));
			for (int u = 0; u < nu; u++)
				dup |= strcmp(used[u], a) == 0;
			if (dup)
				continue;
			memcpy(used[nu], a, sizeof(a));
			snprintf(keys[nu], sizeof(keys[nu]), "%s", k);
			nu++;
		}
		/* Flush the script cache of one master: its EVALSHA gets
		 * NOSCRIPT, which did not run, so a reload and re-send is
		 * safe. */
		redisContext *ra = raw(used[1]);
		freeReplyObject(op(ra, "SCRIPT FLUSH"));
		redisFree(ra);
	}
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 3; i++) {
			argv[i][0] = "EVALSHA";
			argv[i][1] = sha;
			argv[i][2] = "1";
			argv[i][3] = keys[i];
			argv[i][4] = "10";
			cmds[i] = (cluster_cmd){.argc = 5, .argv = argv[i],
			        .slot = cluster_slot(keys[i], strlen(keys[i]))};
		}
		rc = cluster_exec(c, cmds, 3, 5000);
		good = 0;
		for (int i = 0; i < 3; i++)
			good += cmds[i].outcome == CL_DONE &&
			        cmds[i].reply->type == REDIS_REPLY_INTEGER &&
			        cmds[i].reply->integer == 10 * (round + 1);
		check(rc == TALLY_OK && good == 3,
		      "round %d: EVALSHA on every master ran once each (%d)",
		      round, good);
		for (int i = 0; i < 3; i++)
			cluster_cmd_reset(&cmds[i]);
	}
	cluster_get_stats(c, &st);
	check(st.noscript == 1, "one NOSCRIPT answered by a reload (%" PRIu64 ")",
	      st.noscript);
	{
		const char *w[3] = {"WAIT", "1", "2000"};
		rc = cluster_each_master(c, NULL, 0, 3, w, NULL, 5000, &r, &m);
		good = 0;
		for (size_t i = 0; i < m; i++)
			good += r[i].outcome == CL_DONE &&
			        r[i].reply->type == REDIS_REPLY_INTEGER &&
			        r[i].reply->integer >= 1;
		check(rc == TALLY_OK && m == 3 && good == 3,
		      "WAIT 1 on every master: each has its replica (%d)", good);
		cluster_master_replies_free(r, m);
	}
	cluster_close(c);
	return failures != 0;
}

/* One key per master, in keys[0..2]; returns how many masters were found. */
static int keys_per_master(cluster *c, const char *prefix, char keys[3][64])
{
	char used[3][CLUSTER_ADDR_MAX];
	int nu = 0;
	for (int i = 0; nu < 3 && i < 100000; i++) {
		char k[64], a[CLUSTER_ADDR_MAX];
		int dup = 0;
		snprintf(k, sizeof(k), "%s%d", prefix, i);
		if (cluster_slot_addr(c, cluster_slot(k, strlen(k)), a,
		                      sizeof(a)) != TALLY_OK)
			continue;
		for (int u = 0; u < nu; u++)
			dup |= strcmp(used[u], a) == 0;
		if (dup)
			continue;
		memcpy(used[nu], a, sizeof(a));
		snprintf(keys[nu], 64, "%s", k);
		nu++;
	}
	return nu;
}

/* ---- failover: a master killed under load (the script kills it) ----
 * INCRs on one key per master, each followed by WAIT 1 on the masters
 * that took them. A write done and confirmed by WAIT must survive the
 * failover; one done but unconfirmed, or unknown, may or may not be there;
 * one not run must not be. So for each key:
 *   confirmed <= final value <= confirmed + unconfirmed + unknown.
 * Runs until STOPFILE exists, then until 20 rounds in a row succeed. */
static int mode_failover(const char *seeds, const char *stopfile,
                         const char *readyfile)
{
	cluster *c = open_or_die(seeds, 1000);
	char keys[3][64];
	const char *argv[3][3];
	cluster_cmd cmds[3];
	int64_t confirmed[3] = {0}, maybe[3] = {0};
	int64_t t_end = mono_ms() + 120000;
	long rounds = 0, failed_rounds = 0, streak = 0;
	int stopping = 0;
	FILE *f;

	memset(cmds, 0, sizeof(cmds));
	check(keys_per_master(c, "fo:", keys) == 3, "one key per master");
	for (int i = 0; i < 3; i++)
		cmd_set(&cmds[i], argv[i], "DEL", keys[i], NULL);
	check(cluster_exec(c, cmds, 3, 5000) == TALLY_OK, "keys cleared");
	f = fopen(readyfile, "w");
	if (f)
		fclose(f);
	while (mono_ms() < t_end && !(stopping && streak >= 20)) {
		uint16_t slots[3];
		size_t ns = 0;
		int ok = 1;

		if (!stopping && access(stopfile, F_OK) == 0)
			stopping = 1;
		for (int i = 0; i < 3; i++)
			cmd_set(&cmds[i], argv[i], "INCR", keys[i], NULL);
		if (cluster_exec(c, cmds, 3, 1000) != TALLY_OK)
			ok = 0;
		for (int i = 0; i < 3; i++) {
			if (cmds[i].outcome == CL_UNKNOWN)
				maybe[i]++;
			if (cmds[i].outcome == CL_DONE)
				slots[ns++] = cmds[i].slot;
		}
		if (ns > 0) {
			const char *w[3] = {"WAIT", "1", "500"};
			cluster_master_reply *r = NULL;
			size_t m = 0;
			int rc = cluster_each_master(c, slots, ns, 3, w, NULL, 2000,
			                             &r, &m);
			for (int i = 0; i < 3; i++) {
				char a[CLUSTER_ADDR_MAX];
				int conf = 0;
				if (cmds[i].outcome != CL_DONE)
					continue;
				if ((rc == TALLY_OK || rc == TALLY_EIO) &&
				    cluster_slot_addr(c, cmds[i].slot, a, sizeof(a)) ==
				    TALLY_OK)
					for (size_t k = 0; k < m; k++)
						conf |= strcmp(r[k].addr, a) == 0 &&
						        r[k].outcome == CL_DONE &&
						        r[k].reply->type == REDIS_REPLY_INTEGER &&
						        r[k].reply->integer >= 1;
				if (conf)
					confirmed[i]++;
				else
					maybe[i]++;
			}
			if (rc == TALLY_OK || rc == TALLY_EIO)
				cluster_master_replies_free(r, m);
		}
		rounds++;
		if (ok) {
			streak++;
		} else {
			failed_rounds++;
			streak = 0;
		}
		for (int i = 0; i < 3; i++)
			cluster_cmd_reset(&cmds[i]);
		usleep(5000);
	}
	printf("rounds %ld, failed %ld\n", rounds, failed_rounds);
	check(stopping && streak >= 20, "after the promotion 20 rounds in a row succeed");
	check(failed_rounds > 0, "the kill was felt (some rounds failed)");
	for (int i = 0; i < 3; i++)
		cmd_set(&cmds[i], argv[i], "GET", keys[i], NULL);
	check(cluster_exec(c, cmds, 3, 10000) == TALLY_OK, "final reads");
	for (int i = 0; i < 3; i++) {
		long long v = -1;
		if (cmds[i].outcome == CL_DONE &&
		    cmds[i].reply->type == REDIS_REPLY_STRING)
			v = atoll(cmds[i].reply->str);
		check(v >= confirmed[i] && v <= confirmed[i] + maybe[i],
		      "key %s: confirmed %" PRId64 " <= value %lld <= %" PRId64,
		      keys[i], confirmed[i], v, confirmed[i] + maybe[i]);
		cluster_cmd_reset(&cmds[i]);
	}
	cluster_close(c);
	return failures != 0;
}

/* RC_LUA_ADD run with EVAL on the node of its keys: args ttl, run, "",
 * then one delta once. */
static redisReply *eval_add(redisContext *r, const char *vk, const char *tk,
                            const char *run, const char *delta)
{
	return redisCommand(r, "EVAL %s 2 %s %s 60 %s %s %s 1", RC_LUA_ADD, vk,
	                    tk, run, "", delta);
}

static int reply_is(const redisReply *x, const char *want)
{
	return x != NULL && x->type == REDIS_REPLY_STRING &&
	       strcmp(x->str, want) == 0;
}

/* One run of the add script (adding 5) in batch run: its answer, and the
 * value after it. */
static void expect_add(redisContext *r, const char *vk, const char *tk,
                       const char *run, const char *answer,
                       const char *value, const char *what)
{
	redisReply *x = eval_add(r, vk, tk, run, "5");
	redisReply *v = op(r, "GET %s", vk);

	check(reply_is(x, answer) && reply_is(v, value), "%s (%s, then %s)",
	      what, x && x->type == REDIS_REPLY_STRING ? x->str : "?",
	      v->type == REDIS_REPLY_STRING ? v->str : "?");
	freeReplyObject(x);
	freeReplyObject(v);
}

/* A run of the add script that changed nothing keeps its refusal for a
 * resend of its batch (the writes after it were made on top of it) and
 * not for a client's retry, which comes in another batch. */
static int mode_addscript(const char *seeds)
{
	cluster *c = open_or_die(seeds, 5000);
	const char *vk = "{addscript}v", *tk = "{addscript}t";
	char a[CLUSTER_ADDR_MAX];
	redisContext *r;

	cluster_slot_addr(c, cluster_slot(vk, strlen(vk)), a, sizeof(a));
	r = raw(a);
	freeReplyObject(op(r, "DEL %s %s", vk, tk));
	freeReplyObject(op(r, "SET %s 9223372036854775804", vk));
	expect_add(r, vk, tk, "i:1", "1|E", "9223372036854775804",
	           "an add past int64 is refused");
	/* A write after it in the same batch. */
	freeReplyObject(op(r, "INCRBY %s -10", vk));
	expect_add(r, vk, tk, "i:1", "1|E", "9223372036854775794",
	           "a resend of that batch is answered with the refusal, "
	           "nothing added");
	expect_add(r, vk, tk, "i:2", "1|9223372036854775799",
	           "9223372036854775799",
	           "a retry in another batch is a first run, and adds");
	expect_add(r, vk, tk, "i:3", "=1|9223372036854775799",
	           "9223372036854775799",
	           "... and its own retry is answered from the token, "
	           "marked as a saved answer");
	freeReplyObject(op(r, "DEL %s %s", vk, tk));
	redisFree(r);
	cluster_close(c);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "slots") == 0)
		return mode_slots(argc - 2, argv + 2);
	if (argc == 3 && strcmp(argv[1], "batch") == 0)
		return mode_batch(argv[2]);
	if (argc == 3 && strcmp(argv[1], "migrate") == 0)
		return mode_migrate(argv[2]);
	if (argc == 3 && strcmp(argv[1], "pause") == 0)
		return mode_pause(argv[2]);
	if (argc == 3 && strcmp(argv[1], "scripts") == 0)
		return mode_scripts(argv[2]);
	if (argc == 3 && strcmp(argv[1], "addscript") == 0)
		return mode_addscript(argv[2]);
	if (argc == 5 && strcmp(argv[1], "failover") == 0)
		return mode_failover(argv[2], argv[3], argv[4]);
	fprintf(stderr, "usage: cluster_client slots KEY... | "
	        "batch|migrate|pause|scripts|addscript SEEDS | "
	        "failover SEEDS STOPFILE READYFILE\n");
	return 2;
}
