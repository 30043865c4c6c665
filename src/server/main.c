/* main.c: tallyd's entry point: flags, open the engine, start the network
 * workers, wait for SIGTERM or SIGINT, then shut down cleanly (in-flight
 * batches finish, everything is flushed, exit 0). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "server/server.h"

static void banner(const srv *s)
{
	const srv_config *c = &s->cfg;

	printf("tallyd %s: data %s, durability %s, %d I/O thread%s\n",
	       TALLY_VERSION_STRING, c->data_dir,
	       c->durability ? "async" : "sync", s->workers_n,
	       s->workers_n == 1 ? "" : "s");
	if (c->resp_port)
		printf("  RESP on %s:%d    connect: redis-cli -p %d%s\n",
		       c->bind, c->resp_port, c->resp_port,
		       c->requirepass ? " -a PASSWORD" : "");
	if (c->http_port)
		printf("  HTTP on %s:%d    try:     curl http://%s:%d/healthz\n",
		       c->bind, c->http_port, c->bind, c->http_port);
	printf("  stop with Ctrl-C or SIGTERM\n");
	fflush(stdout);
}

/* Open files kept back from clients for the store (RocksDB's tables, the
 * journal), the listeners, the threads' wake-ups and a backup's copies. */
enum { FD_RESERVE = 1024 };
/* Of those, table files RocksDB may keep open (tally_options'
 * open_files_max: its default, and its least). */
enum { STORE_FILES_MAX = 512, STORE_FILES_MIN = 20 };

/* Table files the store may keep open: half of what is left beside the
 * clients, at most the store's default. */
static uint32_t store_files(rlim_t limit, uint32_t maxclients)
{
	rlim_t left;

	if (limit == RLIM_INFINITY || limit >= (rlim_t)maxclients + FD_RESERVE)
		return STORE_FILES_MAX;
	left = limit > maxclients ? limit - maxclients : 0;
	return left / 2 < STORE_FILES_MIN ? STORE_FILES_MIN : (uint32_t)(left / 2);
}

/* Every client holds a descriptor, and so does every file of the store:
 * clients that took the last ones would leave the store unable to open a
 * table (writes refused) and later clients waiting, unanswered, in the
 * listen backlog. So the soft limit on open files is raised as far as
 * --maxclients needs (up to the hard limit), and where that is not far
 * enough, fewer clients are served, as Redis does, and the log says so.
 * Returns how many table files the store may keep open. */
static uint32_t fit_maxclients(srv_config *cfg)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)cfg->maxclients + FD_RESERVE, reserve, fit;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return STORE_FILES_MAX;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		struct rlimit up = rl;

		up.rlim_cur = rl.rlim_max == RLIM_INFINITY ||
		                              rl.rlim_max >= want
		                      ? want
		                      : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl.rlim_cur = up.rlim_cur;
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return STORE_FILES_MAX;
	reserve = rl.rlim_cur / 2 < FD_RESERVE ? rl.rlim_cur / 2 : FD_RESERVE;
	/* Never more clients than asked for, never none. */
	fit = rl.rlim_cur - reserve > 0 ? rl.rlim_cur - reserve : 1;
	if (fit >= cfg->maxclients)
		return store_files(rl.rlim_cur, cfg->maxclients);
	srv_log(cfg, LOG_WARN,
	        "--maxclients %u needs %llu open files and this process may "
	        "open %llu (ulimit -n, hard limit %llu): serving at most %llu "
	        "clients, %llu files kept for the store",
	        cfg->maxclients, (unsigned long long)want,
	        (unsigned long long)rl.rlim_cur,
	        (unsigned long long)rl.rlim_max, (unsigned long long)fit,
	        (unsigned long long)reserve);
	cfg->maxclients = (uint32_t)fit;
	return store_files(rl.rlim_cur, cfg->maxclients);
}

int main(int argc, char **argv)
{
	static srv s;
	tally_options o = { 0 };
	sigset_t sigs;
	struct timespec t0, t1;
	const char *where;
	int rc, sig;

	rc = config_parse(&s.cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (s.cfg.requirepass != NULL &&
	    secret_init(&s.pass, s.cfg.requirepass,
	                strlen(s.cfg.requirepass)) != 0) {
		fprintf(stderr, "tallyd: cannot set up the password check (no "
		        "random numbers?)\n");
		return 1;
	}
	o.open_files_max = fit_maxclients(&s.cfg);
	/* Signals are taken by sigwait below, never by a worker thread. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	o.durability = s.cfg.durability;
	o.flush_interval_ms = s.cfg.flush_ms;
	if (!strcmp(s.cfg.store, "redis-cluster")) {
		o.store = TALLY_STORE_REDIS_CLUSTER;
		o.cluster_seeds = s.cfg.cluster;
		o.redis_wait = s.cfg.redis_wait;
		o.hot_shard_ops = s.cfg.hot_shard_ops;
		o.hot_shards_max = s.cfg.hot_shards_max;
	}
	o.checkpoint_kib = s.cfg.checkpoint_kib;
	/* The I/O threads commit their own writes (net.c, point 9) when
	 * each batch waits for its fsync anyway; not over the network (a
	 * cluster's round trips would hold up every client of the thread),
	 * nor in async mode, whose periodic flush, under the commit lock,
	 * would then hold up the loops instead of only the committer. */
	if (o.store == TALLY_STORE_ROCKSDB &&
	    o.durability == TALLY_DURABILITY_SYNC) {
		o.flags |= TALLY_OPEN_CALLER_COMMITS;
		s.caller_commits = 1;
	}
	/* An open after a crash replays what the store had not yet put in
	 * its tables (seconds for millions of writes): say what is going
	 * on, and how long it took, as Redis does for its AOF. */
	where = o.store ? s.cfg.cluster : s.cfg.data_dir;
	srv_log(&s.cfg, LOG_INFO, "opening %s", where);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = tally_open(s.cfg.data_dir, &o, &s.t);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc != TALLY_OK) {
		fprintf(stderr, "tallyd: cannot open %s: %s\n", where,
		        tally_strerror(rc));
		return 1;
	}
	srv_log(&s.cfg, LOG_INFO, "store open in %.3f s",
	        (double)(t1.tv_sec - t0.tv_sec) +
	                (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	if (net_start(&s) != 0) {
		fprintf(stderr, "tallyd: cannot start the network\n");
		tally_close(s.t);
		net_free(&s);
		secret_clear(&s.pass);
		return 1;
	}
	banner(&s);
	do
		rc = sigwait(&sigs, &sig);
	while (rc != 0);
	srv_log(&s.cfg, LOG_INFO, "%s: finishing in-flight writes",
	        sig == SIGTERM ? "SIGTERM" : "SIGINT");
	net_stop(&s);
	net_wait(&s);
	tally_close(s.t);
	net_free(&s);
	secret_clear(&s.pass);
	srv_log(&s.cfg, LOG_INFO, "stopped cleanly");
	return 0;
}
