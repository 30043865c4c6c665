/* config.c: tallyd's command-line flags, their defaults and limits, the
 * protected-mode rule, logging and the password check. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "server/server.h"

static const char usage[] =
"usage: tallyd [flags]\n"
"\n"
"tally's server: exact, durable counters and counted events over RESP (any\n"
"Redis client) and HTTP/JSON.\n"
"\n"
"  --data DIR              data folder (./data)\n"
"  --bind ADDR             address to listen on (127.0.0.1); beyond loopback\n"
"                          only with --requirepass\n"
"  --resp-port N           RESP port (6380; 0 = off)\n"
"  --http-port N           HTTP port (8080; 0 = off)\n"
"  --threads N             I/O threads (cores - 1, at least 1; 1..64)\n"
"  --durability MODE       sync: ack after fsync (default); async: ack after\n"
"                          apply, fsync every --flush-ms\n"
"  --flush-ms N            async mode: fsync interval in ms (100; 1..60000)\n"
"  --checkpoint-kib N      rocksdb store: KiB of journal between\n"
"                          background checkpoints (65536; 4..4194304)\n"
"  --open-files-max N      rocksdb store: most files RocksDB keeps open\n"
"                          (512; 20..1048576)\n"
"  --store NAME            rocksdb (default) or redis-cluster\n"
"  --cluster HOST:PORT,... redis-cluster store: seed nodes\n"
"  --redis-wait N          redis-cluster store: acknowledge a write only\n"
"                          once N replicas have it (WAIT; 0 = off; 0..16)\n"
"  --hot-shard-ops N       redis-cluster store: a counter taking more than N\n"
"                          increments/s per shard on this tallyd for 2 s\n"
"                          gets more shards (100000; 0 = never)\n"
"  --hot-shards-max N      redis-cluster store: most shards that growth\n"
"                          gives (twice the masters; 1..256)\n"
"  --requirepass PASS      password: RESP AUTH, HTTP Authorization: Bearer\n"
"                          (wiped from the process's command line)\n"
"  --requirepass-file F    the same, read from file F (one line, at most\n"
"                          4096 bytes): never on any command line\n"
"  --maxclients N          most clients connected at once (10000)\n"
"  --max-bulk-bytes N      largest RESP argument (1048576)\n"
"  --max-args N            most arguments of one command (1048576)\n"
"  --max-request-bytes N   largest RESP command in all (67108864)\n"
"  --max-pipeline N        replies a client may owe before reading pauses\n"
"                          (65536)\n"
"  --max-output-bytes N    output a client may leave unread before it is\n"
"                          disconnected (67108864)\n"
"  --idle-timeout S        close clients idle for S seconds (0 = never)\n"
"  --tcp-keepalive S       TCP keepalive probes after S seconds of silence\n"
"                          (300; 0 = off), as Redis's tcp-keepalive\n"
"  --http-timeout S        an HTTP client's time to begin a request, to send\n"
"                          all of it, or to take its answer (60; 0 = never)\n"
"  --log-level LEVEL       error, warn, info (default) or debug\n"
"  --backup-dir DIR        TALLY.BACKUP writes only new folders directly\n"
"                          inside DIR (default: anywhere tallyd can write)\n"
"  --help, --version\n";

static void defaults(srv_config *c)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);

	*c = (srv_config){
		.data_dir = "./data", .bind = "127.0.0.1", .resp_port = 6380,
		.http_port = 8080, .threads = cores <= 2 ? 1 : cores > 65 ?
		64 : (int)cores - 1, .durability = TALLY_DURABILITY_SYNC,
		.flush_ms = 100, .store = "rocksdb", .maxclients = 10000,
		.max_bulk = 1u << 20, .max_args = 1u << 20,
		.max_request = 64u << 20, .max_pending = 65536,
		.max_output = 64u << 20, .idle_timeout_s = 0,
		.tcp_keepalive_s = 300, .http_timeout_s = 60,
		.log_level = LOG_INFO,
	};
}

static int num(const char *flag, const char *v, uint64_t lo, uint64_t hi,
               uint64_t *out)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	/* Digits only: strtoull() would also take a sign or white space. */
	if (errno || end == v || *end || v[0] < '0' || v[0] > '9' || x < lo ||
	    x > hi) {
		fprintf(stderr, "tallyd: %s wants a number in %" PRIu64 "..%"
		        PRIu64 ", got '%s'\n", flag, lo, hi, v);
		return -1;
	}
	*out = x;
	return 0;
}

/* Every flag that takes a value (flag_set() handles each): a flag given
 * last without its value is told apart from one that does not exist. */
static const char *const value_flags[] = {
	"--data", "--bind", "--resp-port", "--http-port", "--threads",
	"--flush-ms", "--store", "--cluster", "--checkpoint-kib",
	"--open-files-max",
	"--redis-wait", "--hot-shard-ops", "--hot-shards-max",
	"--requirepass", "--requirepass-file", "--backup-dir", "--maxclients",
	"--max-bulk-bytes", "--max-args", "--max-request-bytes",
	"--max-pipeline", "--max-output-bytes", "--idle-timeout",
	"--tcp-keepalive", "--http-timeout",
	"--durability", "--log-level", NULL
};

static int value_flag(const char *f)
{
	for (size_t i = 0; value_flags[i] != NULL; i++)
		if (!strcmp(f, value_flags[i]))
			return 1;
	return 0;
}

/* One flag with its value; returns 0, or -1 on a bad value. */
static int flag_set(srv_config *c, const char *f, const char *v)
{
	uint64_t n = 0;
	int rc = 0;

	/* Refused with another store even at a value that changes nothing
	 * there (--redis-wait 0): the command line asks for a cluster. */
	if (!strcmp(f, "--cluster") || !strcmp(f, "--redis-wait") ||
	    !strcmp(f, "--hot-shard-ops") || !strcmp(f, "--hot-shards-max"))
		c->cluster_flag = 1;
	if (!strcmp(f, "--data")) c->data_dir = v;
	else if (!strcmp(f, "--bind")) c->bind = v;
	else if (!strcmp(f, "--resp-port")) { rc = num(f, v, 0, 65535, &n); c->resp_port = (int)n; }
	else if (!strcmp(f, "--http-port")) { rc = num(f, v, 0, 65535, &n); c->http_port = (int)n; }
	else if (!strcmp(f, "--threads")) { rc = num(f, v, 1, 64, &n); c->threads = (int)n; }
	else if (!strcmp(f, "--flush-ms")) { rc = num(f, v, 1, 60000, &n); c->flush_ms = (uint32_t)n; }
	else if (!strcmp(f, "--store")) c->store = v;
	else if (!strcmp(f, "--cluster")) c->cluster = v;
	else if (!strcmp(f, "--checkpoint-kib")) { rc = num(f, v, 4, 1u << 22, &n); c->checkpoint_kib = (uint32_t)n; }
	else if (!strcmp(f, "--open-files-max")) { rc = num(f, v, 20, 1u << 20, &n); c->open_files_max = (uint32_t)n; }
	else if (!strcmp(f, "--redis-wait")) { rc = num(f, v, 0, 16, &n); c->redis_wait = (uint32_t)n; }
	else if (!strcmp(f, "--hot-shard-ops")) { rc = num(f, v, 0, 100000000, &n); c->hot_shard_ops = n ? (uint32_t)n : TALLY_HOT_SHARD_OFF; }
	else if (!strcmp(f, "--hot-shards-max")) { rc = num(f, v, 1, 256, &n); c->hot_shards_max = (uint32_t)n; }
	else if (!strcmp(f, "--requirepass")) c->requirepass = v;
	else if (!strcmp(f, "--requirepass-file")) c->requirepass_file = v;
	else if (!strcmp(f, "--backup-dir")) c->backup_dir = v;
	else if (!strcmp(f, "--maxclients")) { rc = num(f, v, 1, 1000000, &n); c->maxclients = (uint32_t)n; }
	else if (!strcmp(f, "--max-bulk-bytes")) { rc = num(f, v, 512, 1u << 30, &n); c->max_bulk = n; }
	else if (!strcmp(f, "--max-args")) { rc = num(f, v, 8, 1u << 24, &n); c->max_args = n; }
	else if (!strcmp(f, "--max-request-bytes")) { rc = num(f, v, 4096, 1u << 30, &n); c->max_request = n; }
	else if (!strcmp(f, "--max-pipeline")) { rc = num(f, v, 1, 1u << 24, &n); c->max_pending = n; }
	else if (!strcmp(f, "--max-output-bytes")) { rc = num(f, v, 65536, (uint64_t)1 << 34, &n); c->max_output = n; }
	else if (!strcmp(f, "--idle-timeout")) { rc = num(f, v, 0, 86400 * 365, &n); c->idle_timeout_s = (uint32_t)n; }
	/* Linux takes an idle time of at most 32767 s (TCP_KEEPIDLE). */
	else if (!strcmp(f, "--tcp-keepalive")) { rc = num(f, v, 0, 32767, &n); c->tcp_keepalive_s = (uint32_t)n; }
	else if (!strcmp(f, "--http-timeout")) { rc = num(f, v, 0, 86400 * 365, &n); c->http_timeout_s = (uint32_t)n; }
	else if (!strcmp(f, "--durability")) {
		if (!strcmp(v, "sync")) c->durability = TALLY_DURABILITY_SYNC;
		else if (!strcmp(v, "async")) c->durability = TALLY_DURABILITY_ASYNC;
		else { fprintf(stderr, "tallyd: --durability is sync or async\n"); rc = -1; }
	} else if (!strcmp(f, "--log-level")) {
		static const char *const names[] = { "error", "warn", "info", "debug" };
		rc = -1;
		for (int i = 0; i < 4; i++)
			if (!strcmp(v, names[i])) { c->log_level = i; rc = 0; }
		if (rc) fprintf(stderr, "tallyd: --log-level is error, warn, info or debug\n");
	} else {
		fprintf(stderr, "tallyd: unknown flag '%s' (see tallyd --help)\n", f);
		rc = -1;
	}
	return rc;
}

/* Whether a Bearer token can carry the password: a header field's value
 * loses its leading and trailing white space (RFC 9110 section 5.5) and
 * holds no control byte but a tab. */
static int password_http_ok(const char *p)
{
	size_t n = strlen(p);

	if (n > 0 && (p[0] == ' ' || p[0] == '\t' || p[n - 1] == ' ' ||
	              p[n - 1] == '\t'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char b = (unsigned char)p[i];

		if ((b < 0x20 && b != '\t') || b == 0x7f)
			return 0;
	}
	return 1;
}

static int config_check(const srv_config *c)
{
	if (strcmp(c->store, "rocksdb") != 0 &&
	    strcmp(c->store, "redis-cluster") != 0) {
		fprintf(stderr, "tallyd: --store is rocksdb or redis-cluster\n");
		return -1;
	}
	if (!strcmp(c->store, "redis-cluster") &&
	    (c->cluster == NULL || c->cluster[0] == '\0')) {
		fprintf(stderr, "tallyd: --store redis-cluster needs --cluster "
		        "HOST:PORT[,HOST:PORT...]\n");
		return -1;
	}
	if (strcmp(c->store, "redis-cluster") != 0 && c->cluster_flag) {
		fprintf(stderr, "tallyd: --cluster, --redis-wait, "
		        "--hot-shard-ops and --hot-shards-max apply to "
		        "--store redis-cluster only\n");
		return -1;
	}
	if (!strcmp(c->store, "redis-cluster") &&
	    (c->checkpoint_kib != 0 || c->open_files_max != 0)) {
		fprintf(stderr, "tallyd: --checkpoint-kib and --open-files-max "
		        "apply to --store rocksdb only\n");
		return -1;
	}
	if (c->data_dir[0] == '\0') {
		fprintf(stderr, "tallyd: --data must name a folder\n");
		return -1;
	}
	if (c->resp_port == 0 && c->http_port == 0) {
		fprintf(stderr, "tallyd: both ports are off; nothing to serve\n");
		return -1;
	}
	/* Checked here, before the store opens (and perhaps replays for
	 * seconds): a bad address refuses the start and creates nothing. */
	struct sockaddr_storage ss;
	if (srv_addr_parse(c->bind, 0, &ss) != 0) {
		fprintf(stderr, "tallyd: --bind '%s' is not an IPv4 or IPv6 "
		        "address (or localhost)\n", c->bind);
		return -1;
	}
	if (srv_addr_kind(&ss) != SRV_ADDR_LOOPBACK && c->requirepass == NULL) {
		fprintf(stderr, "tallyd: refusing to listen on %s without a "
		        "password (protected mode). Anyone who can reach this "
		        "address could change your counts. Either set "
		        "--requirepass PASS, or --bind 127.0.0.1 to serve this "
		        "machine only.\n", c->bind);
		return -1;
	}
	if (c->requirepass != NULL && c->requirepass[0] == '\0') {
		if (c->requirepass_file != NULL)
			fprintf(stderr, "tallyd: the first line of %s (from "
			        "--requirepass-file) is empty: no password\n",
			        c->requirepass_file);
		else
			fprintf(stderr, "tallyd: --requirepass must not be "
			        "empty\n");
		return -1;
	}
	if (c->requirepass != NULL &&
	    strlen(c->requirepass) > SRV_PASSWORD_MAX) {
		fprintf(stderr, "tallyd: --requirepass is at most %d bytes\n",
		        SRV_PASSWORD_MAX);
		return -1;
	}
	/* RESP alone carries any bytes: only a served HTTP port needs it. */
	if (c->requirepass != NULL && c->http_port != 0 &&
	    !password_http_ok(c->requirepass)) {
		fprintf(stderr, "tallyd: the password must not begin or end "
		        "with a space or tab, nor hold a control character: "
		        "an HTTP Authorization header cannot carry it (serve "
		        "RESP alone with --http-port 0 to keep it)\n");
		return -1;
	}
	return 0;
}

/* The password from --requirepass-file: the file's first line, without
 * its line end. Kept for the life of the process. 0 or -1 (printed). */
static int password_from_file(srv_config *c)
{
	char buf[SRV_PASSWORD_MAX + 2];
	size_t n, line = 0;
	FILE *f;

	if (c->requirepass != NULL) {
		fprintf(stderr, "tallyd: give --requirepass or "
		        "--requirepass-file, not both\n");
		return -1;
	}
	f = fopen(c->requirepass_file, "rb");
	if (f == NULL) {
		fprintf(stderr, "tallyd: --requirepass-file %s: %s\n",
		        c->requirepass_file, strerror(errno));
		return -1;
	}
	n = fread(buf, 1, sizeof buf - 1, f);
	if (ferror(f)) {
		fprintf(stderr, "tallyd: --requirepass-file %s: cannot read "
		        "it\n", c->requirepass_file);
		fclose(f);
		return -1;
	}
	fclose(f);
	/* The first line, by bytes: a NUL inside would cut the password
	 * short without a word, so it is refused like an overlong line. */
	while (line < n && buf[line] != '\n' && buf[line] != '\r')
		line++;
	if (line > SRV_PASSWORD_MAX || memchr(buf, '\0', line) != NULL) {
		memset(buf, 0, sizeof buf);
		fprintf(stderr, "tallyd: --requirepass-file %s: the password "
		        "must be one line of at most %d bytes, without NUL\n",
		        c->requirepass_file, SRV_PASSWORD_MAX);
		return -1;
	}
	buf[line] = '\0';
	c->requirepass = strdup(buf);
	memset(buf, 0, sizeof buf);
	if (c->requirepass == NULL) {
		fprintf(stderr, "tallyd: out of memory\n");
		return -1;
	}
	return 0;
}

/* A password given on the command line is visible to every user of the
 * machine through ps and /proc/PID/cmdline: keep a copy and overwrite the
 * original in argv, which is what those show. (Until this runs, i.e. for
 * the first moments of the process, it is visible: --requirepass-file
 * avoids that.) 0 or -1 (printed). */
static int password_off_argv(srv_config *c, int argc, char **argv)
{
	char *orig = NULL;

	for (int i = 1; i < argc && orig == NULL; i++)
		if (c->requirepass >= argv[i] &&
		    c->requirepass <= argv[i] + strlen(argv[i]))
			orig = argv[i] + (c->requirepass - argv[i]);
	if (orig == NULL)
		return 0;
	c->requirepass = strdup(orig);
	if (c->requirepass == NULL) {
		fprintf(stderr, "tallyd: out of memory\n");
		return -1;
	}
	/* Every value given, not only the one that counts: an earlier one
	 * (a wrapper's default, overridden) may be a real password too.
	 * The walk is config_parse()'s, so another flag's value that reads
	 * like "--requirepass" is left alone. */
	for (int i = 1; i < argc; i++) {
		char *v = NULL;

		if (strchr(argv[i], '=') != NULL) {
			if (!strncmp(argv[i], "--requirepass=", 14))
				v = argv[i] + 14;
		} else if (value_flag(argv[i]) && i + 1 < argc) {
			if (!strcmp(argv[i], "--requirepass"))
				v = argv[i + 1];
			i++;
		}
		if (v != NULL)
			memset(v, 0, strlen(v));
	}
	return 0;
}

/* --backup-dir must be a folder now; it is kept with symbolic links
 * resolved, the form TALLY.BACKUP compares paths in. 0 or -1 (printed). */
static int backup_dir_resolve(srv_config *c)
{
	struct stat st;
	char *real = realpath(c->backup_dir, NULL);

	if (real == NULL || stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "tallyd: --backup-dir %s: %s\n", c->backup_dir,
		        real == NULL ? strerror(errno) : strerror(ENOTDIR));
		free(real);
		return -1;
	}
	c->backup_dir = real;
	return 0;
}

int srv_addr_parse(const char *host, int port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (strcmp(host, "localhost") == 0)
		host = "127.0.0.1";
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
		return 0;
	if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
		return 0;
	return -1;
}

int srv_addr_kind(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr);

		return a == INADDR_ANY ? SRV_ADDR_ANY :
		       (a >> 24) == 127 ? SRV_ADDR_LOOPBACK : SRV_ADDR_OTHER;
	}
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a =
			&((const struct sockaddr_in6 *)ss)->sin6_addr;

		if (IN6_IS_ADDR_UNSPECIFIED(a))
			return SRV_ADDR_ANY;
		if (IN6_IS_ADDR_LOOPBACK(a) ||
		    (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127))
			return SRV_ADDR_LOOPBACK;
	}
	return SRV_ADDR_OTHER;
}

int config_parse(srv_config *c, int argc, char **argv)
{
	defaults(c);
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i], *eq = strchr(f, '=');
		char name[64];

		if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
			fputs(usage, stdout);
			return 1;
		}
		if (!strcmp(f, "--version")) {
			printf("tallyd %s\n", TALLY_VERSION_STRING);
			return 1;
		}
		if (eq != NULL && (size_t)(eq - f) < sizeof name) {
			memcpy(name, f, (size_t)(eq - f));
			name[eq - f] = '\0';
			if (flag_set(c, name, eq + 1))
				return -1;
			continue;
		}
		if (!value_flag(f)) {
			fprintf(stderr, "tallyd: %s '%s'%s (see tallyd --help)\n",
			        f[0] == '-' ? "unknown flag" : "unexpected argument",
			        f, f[0] == '-' ? "" : ": tallyd takes flags only");
			return -1;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "tallyd: %s needs a value (see tallyd "
			        "--help)\n", f);
			return -1;
		}
		if (flag_set(c, f, argv[++i]))
			return -1;
	}
	if (c->requirepass_file != NULL && password_from_file(c) != 0)
		return -1;
	if (c->requirepass != NULL && c->requirepass_file == NULL &&
	    password_off_argv(c, argc, argv) != 0)
		return -1;
	if (c->backup_dir != NULL && backup_dir_resolve(c) != 0)
		return -1;
	return config_check(c);
}

void srv_log(const srv_config *cfg, int level, const char *fmt, ...)
{
	static const char *const tag[] = { "error", "warn", "info", "debug" };
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;

	if (level > cfg->log_level)
		return;
	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(stderr, "%s tallyd %s: ", when, tag[level]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int srv_password_ok(const srv *s, const char *given, size_t len)
{
	return secret_matches(&s->pass, given, len);
}
