/* main.c: tallyd's entry point: flags, open the engine, start the network
 * workers, wait for SIGTERM or SIGINT, then shut down cleanly (in-flight
 * batches finish, everything is flushed, exit 0). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"

/* During a shutdown, which waits for owed writes (a store that does not
 * answer, a long backup) and for clients to read their replies, a SIGINT
 * (a second Ctrl-C) ends the process at once, as in Redis. Only SIGINT:
 * a process manager may send SIGTERM beside the Ctrl-C a terminal sends,
 * which must not cut the clean shutdown short. Acknowledged writes are
 * kept as after kill -9. */
typedef struct insist {
	const srv_config *cfg;
	sigset_t sigs;
} insist;

static void *insist_main(void *arg)
{
	insist *in = arg;
	int sig;

	while (sigwait(&in->sigs, &sig) != 0)
		;
	(void)sig;
	srv_log(in->cfg, LOG_WARN, "SIGINT during the shutdown: exiting now, "
	        "without waiting for it");
	fflush(NULL);
	_exit(1);
	return NULL;
}

static void banner(const srv *s)
{
	const srv_config *c = &s->cfg;
	/* Where a client on this machine reaches the listeners: a wildcard
	 * address (in any spelling) is no address to connect to; IPv6 goes
	 * in brackets in a URL, its zone's '%' written "%25" (RFC 6874);
	 * redis-cli needs -h for any host but its default. */
	struct sockaddr_storage ss;
	int bind6 = strchr(c->bind, ':') != NULL;
	int any = srv_addr_parse(c->bind, 0, &ss) == 0 &&
	          srv_addr_kind(&ss) == SRV_ADDR_ANY;
	const char *host = !any ? c->bind : bind6 ? "::1" : "127.0.0.1";
	int v6 = strchr(host, ':') != NULL;
	int h_flag = strcmp(host, "127.0.0.1") != 0;
	char url_host[192];
	size_t u = 0;

	for (const char *p = host; *p != '\0' && u + 4 < sizeof url_host; p++) {
		url_host[u++] = *p;
		if (*p == '%') {
			url_host[u++] = '2';
			url_host[u++] = '5';
		}
	}
	url_host[u] = '\0';

	printf("tallyd %s: data %s, durability %s, %d I/O thread%s\n",
	       TALLY_VERSION_STRING, c->data_dir,
	       c->durability ? "async" : "sync", s->workers_n,
	       s->workers_n == 1 ? "" : "s");
	if (c->resp_port)
		printf("  RESP on %s%s%s:%d    "
		       "connect: redis-cli %s%s%s-p %d%s\n",
		       bind6 ? "[" : "", c->bind, bind6 ? "]" : "",
		       c->resp_port, h_flag ? "-h " : "",
		       h_flag ? host : "", h_flag ? " " : "", c->resp_port,
		       c->requirepass ? " -a PASSWORD" : "");
	if (c->http_port)
		printf("  HTTP on %s%s%s:%d    "
		       "try:     curl http://%s%s%s:%d/healthz\n",
		       bind6 ? "[" : "", c->bind, bind6 ? "]" : "",
		       c->http_port, v6 ? "[" : "", url_host,
		       v6 ? "]" : "", c->http_port);
	printf("  stop with Ctrl-C or SIGTERM\n");
	fflush(stdout);
}

/* A --data that cannot hold the store, told before the open, whose own
 * errors would speak of the store ("I/O error", "not found"). The open
 * creates the folder itself, not its parents. 0, or -1 with the message
 * printed. */
static int data_dir_check(const char *dir)
{
	char path[PATH_MAX], parent[PATH_MAX];
	struct stat st;
	size_t n = strlen(dir);

	if (stat(dir, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		fprintf(stderr, "tallyd: --data %s is not a folder\n", dir);
		return -1;
	}
	if (errno != ENOENT) {
		fprintf(stderr, "tallyd: --data %s: %s\n", dir, strerror(errno));
		return -1;
	}
	/* The open would create the folder, and fail, at the link's own
	 * name. */
	if (lstat(dir, &st) == 0) {
		fprintf(stderr, "tallyd: --data %s is a symbolic link to "
		        "nothing\n", dir);
		return -1;
	}
	if (n >= sizeof parent) {
		fprintf(stderr, "tallyd: --data is longer than %zu bytes\n",
		        sizeof parent - 1);
		return -1;
	}
	memcpy(path, dir, n + 1);
	while (n > 1 && path[n - 1] == '/') /* "a/b/" is a/b */
		path[--n] = '\0';
	(void)srv_path_split(path, parent, sizeof parent);
	if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "tallyd: --data %s: its parent folder %s is not "
		        "there (tallyd creates the data folder, not its "
		        "parents)\n", dir, parent);
		return -1;
	}
	return 0;
}

/* Open files kept back from clients besides the store's tables: the
 * journal and RocksDB's other files, the listeners, the threads'
 * wake-ups and a backup's copies. */
enum { FD_SERVER = 512 };
/* The least the store may be given (tally_options.open_files_max's). */
enum { STORE_FILES_MIN = 20 };

/* Every client holds a descriptor, and so does every file of the store:
 * clients that took the last ones would leave the store unable to open a
 * table (writes refused) and later clients waiting, unanswered, in the
 * listen backlog. So the soft limit on open files is raised as far as
 * --maxclients and --open-files-max need (up to the hard limit), and
 * where that is not far enough, fewer clients are served, as Redis does,
 * the store keeps fewer files open, and the log says so. Returns how many
 * files the store may keep open. */
static uint32_t fit_maxclients(srv_config *cfg, uint32_t files)
{
	struct rlimit rl;
	rlim_t keep = (rlim_t)files + FD_SERVER;
	rlim_t want = (rlim_t)cfg->maxclients + keep, reserve, fit, left;
	uint32_t store;
	int lowered;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return files;
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
		return files;
	/* The store gets half of what the clients leave, and at least its
	 * least, which under a tiny limit comes off the clients. */
	reserve = rl.rlim_cur / 2 < keep ? rl.rlim_cur / 2 : keep;
	if (reserve < 2 * STORE_FILES_MIN)
		reserve = 2 * STORE_FILES_MIN;
	/* Never more clients than asked for, never none. */
	fit = rl.rlim_cur > reserve ? rl.rlim_cur - reserve : 1;
	lowered = fit < cfg->maxclients;
	if (lowered)
		cfg->maxclients = (uint32_t)fit;
	left = rl.rlim_cur > cfg->maxclients ? rl.rlim_cur - cfg->maxclients
	                                     : 0;
	store = left / 2 < STORE_FILES_MIN ? STORE_FILES_MIN
	        : left / 2 < files         ? (uint32_t)(left / 2)
	                                   : files;
	srv_log(cfg, lowered ? LOG_WARN : LOG_INFO,
	        "--maxclients %llu and --open-files-max %u need %llu open "
	        "files and this process may open %llu (ulimit -n, hard limit "
	        "%llu): %s %u clients, the store keeping at most %u files "
	        "open",
	        (unsigned long long)(want - keep), files,
	        (unsigned long long)want, (unsigned long long)rl.rlim_cur,
	        (unsigned long long)rl.rlim_max,
	        lowered ? "serving at most" : "serving all", cfg->maxclients,
	        store);
	return store;
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
	cmd_index_build(&s);
	if (strcmp(s.cfg.store, "redis-cluster") != 0 &&
	    data_dir_check(s.cfg.data_dir) != 0)
		return 2;
	if (s.cfg.requirepass != NULL &&
	    secret_init(&s.pass, s.cfg.requirepass,
	                strlen(s.cfg.requirepass)) != 0) {
		fprintf(stderr, "tallyd: cannot set up the password check (no "
		        "random numbers?)\n");
		return 1;
	}
	o.open_files_max = fit_maxclients(&s.cfg, s.cfg.open_files_max
	                                              ? s.cfg.open_files_max
	                                              : 512);
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
	{
		tally_stats st;

		if (tally_stats_get(s.t, &st) == TALLY_OK &&
		    st.journal_records_dropped > 0)
			srv_log(&s.cfg, LOG_WARN, "the journal held a damaged "
			        "record: %" PRIu64 " whole records after it were "
			        "dropped with it (writes acknowledged in sync "
			        "durability lost; check the disk)",
			        st.journal_records_dropped);
	}
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
	srv_log(&s.cfg, LOG_INFO, "%s: finishing in-flight writes (SIGINT, "
	        "a second Ctrl-C, exits at once)",
	        sig == SIGTERM ? "SIGTERM" : "SIGINT");
	{
		static insist in;
		pthread_t th;

		in.cfg = &s.cfg;
		sigemptyset(&in.sigs);
		sigaddset(&in.sigs, SIGINT);
		if (pthread_create(&th, NULL, insist_main, &in) == 0)
			pthread_detach(th);
	}
	net_stop(&s);
	net_wait(&s);
	tally_close(s.t);
	net_free(&s);
	secret_clear(&s.pass);
	srv_log(&s.cfg, LOG_INFO, "stopped cleanly");
	return 0;
}
