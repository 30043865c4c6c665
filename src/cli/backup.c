/* backup.c: `tally backup --data DIR OUT`: a consistent copy of a data
 * folder. Offline it is tally_backup(); when tallyd holds the folder the
 * copy is made by the server (TALLY.BACKUP), which can do it while
 * serving, so a backup never requires stopping the service. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "json.h"
#include "offline.h"
#include "out.h"

static void report(const cli_ctx *ctx, const char *dir, const char *out,
                   const char *server)
{
	json_w w;

	if (!ctx->json) {
		char shown[PATH_MAX];

		/* It may hold the server's --backup-dir: its bytes, made
		 * safe for a terminal. */
		out_safe(shown, sizeof shown, out, strlen(out));
		if (server != NULL)
			printf("backup of %s written to %s by tallyd at %s\n",
			       dir, shown, server);
		else
			printf("backup of %s written to %s\n", dir, shown);
		return;
	}
	json_start(&w, stdout);
	json_obj(&w);
	json_kv_str(&w, "data", dir);
	json_kv_str(&w, "backup", out);
	json_kv_str(&w, "via", server != NULL ? "server" : "offline");
	if (server != NULL)
		json_kv_str(&w, "server", server);
	json_obj_end(&w);
	json_finish(&w);
}

/* ---- progress of the copy -------------------------------------------------- */

/* How often the copy's size is shown. */
#define WATCH_EVERY_S 1

/* tally_backup() makes the copy in OUT + TALLY_BACKUP_PARTIAL and renames
 * it when whole, here or in tallyd (TALLY.BACKUP, given the same path):
 * a thread shows that folder's size while it grows. */
typedef struct watch {
	char partial[PATH_MAX];
	/* Where RocksDB stages its part of the copy (its checkpoint's
	 * name + ".tmp") before renaming it to partial, when the store is
	 * open for writes: tallyd's TALLY.BACKUP. */
	char staging[PATH_MAX];
	uint64_t most;            /* the source's bytes: the copy's bound */
	int tty;
	int stop;
	int stopped;              /* watch_stop() ran */
	int shown;                /* a line was drawn */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t th;
} watch;

static void watch_line(watch *w, const disk_use *u)
{
	char b[32], m[32];

	out_bytes(u->bytes, b, sizeof b);
	out_bytes(w->most, m, sizeof m);
	/* On a terminal the line is drawn again, and cleared to its end. */
	fprintf(stderr, w->tty ? "\rtally: the copy holds %s in %llu files (of "
	        "at most %s)\033[K" : "tally: the copy holds %s in %llu files "
	        "(of at most %s)\n", b, (unsigned long long)u->files, m);
	fflush(stderr);
	w->shown = 1;
}

static void *watch_main(void *arg)
{
	watch *w = arg;
	struct timespec at;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		disk_use u;

		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_sec += WATCH_EVERY_S;
		while (!w->stop &&
		       pthread_cond_timedwait(&w->cv, &w->mu, &at) == 0)
			;
		if (w->stop)
			break;
		/* Not made yet, or renamed whole: the last line says. */
		if (offline_disk_use(w->partial, &u) ||
		    offline_disk_use(w->staging, &u))
			watch_line(w, &u);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Starts the thread when stderr is a terminal or progress is forced: 1,
 * or 0 when none runs (not asked, or it could not start: the copy goes
 * on without). */
static int watch_start(watch *w, const char *dir, const char *out, int force)
{
	disk_use src;
	pthread_condattr_t a;
	size_t len = strlen(out);
	int ok;

	memset(w, 0, sizeof *w);
	w->tty = isatty(STDERR_FILENO);
	/* OUT/ names OUT, as tally_backup() and TALLY.BACKUP take it. */
	while (len > 1 && out[len - 1] == '/')
		len--;
	if ((!force && !w->tty) || len > INT_MAX ||
	    snprintf(w->partial, sizeof w->partial, "%.*s" TALLY_BACKUP_PARTIAL,
	             (int)len, out) >= (int)sizeof w->partial ||
	    snprintf(w->staging, sizeof w->staging, "%s.tmp", w->partial) >=
	    (int)sizeof w->staging)
		return 0;
	/* The journal files are copied to their records' end, not whole:
	 * the folder's size bounds the copy's. */
	(void)offline_disk_use(dir, &src);
	w->most = src.bytes;
	if (pthread_condattr_init(&a) != 0)
		return 0;
	ok = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 &&
	     pthread_cond_init(&w->cv, &a) == 0;
	pthread_condattr_destroy(&a);
	if (!ok)
		return 0;
	if (pthread_mutex_init(&w->mu, NULL) != 0) {
		pthread_cond_destroy(&w->cv);
		return 0;
	}
	if (pthread_create(&w->th, NULL, watch_main, w) != 0) {
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		return 0;
	}
	return 1;
}

/* Stops the thread; with the copy made (out given), a last line says
 * what it holds. Once: a second call does nothing. */
static void watch_stop(watch *w, const char *out)
{
	disk_use u;

	if (w->stopped)
		return;
	w->stopped = 1;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->th, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	if (out != NULL && offline_disk_use(out, &u))
		watch_line(w, &u);
	if (w->shown && w->tty)
		fputc('\n', stderr);
}

/* The server resolves paths against its own working directory: send an
 * absolute one. CLI_OK or CLI_ERR. */
static int absolute(const char *path, char *buf, size_t cap)
{
	char cwd[PATH_MAX];
	int n;

	if (path[0] == '/') {
		n = snprintf(buf, cap, "%s", path);
	} else {
		if (getcwd(cwd, sizeof cwd) == NULL) {
			fprintf(stderr, "tally: cannot find the current "
			        "folder: %s\n", strerror(errno));
			return CLI_ERR;
		}
		n = snprintf(buf, cap, "%s/%s", cwd, path);
	}
	if (n < 0 || (size_t)n >= cap) {
		fprintf(stderr, "tally: the backup path is too long\n");
		return CLI_ERR;
	}
	return CLI_OK;
}

/* One field of an INFO reply, into buf: 1, or 0 when the reply has none
 * (or one too long for buf). */
static int info_field(const redisReply *r, const char *name, char *buf,
                      size_t cap)
{
	char key[32];
	const char *p, *end;

	snprintf(key, sizeof key, "\n%s:", name);
	if (r->type != REDIS_REPLY_STRING || (p = strstr(r->str, key)) == NULL)
		return 0;
	p += strlen(key);
	end = strpbrk(p, "\r\n");
	if (end == NULL || (size_t)(end - p) >= cap)
		return 0;
	memcpy(buf, p, (size_t)(end - p));
	buf[end - p] = '\0';
	return 1;
}

/* What the server reached says of itself (INFO server): the folder it
 * serves, and its --backup-dir folder (empty: none). CLI_OK; *found 0
 * when it names no folder served; or the error of the call (printed by
 * client_call()). */
static int served_dirs(client *c, char *served, char *backups, size_t cap,
                       int *found)
{
	const char *argv[2] = { "INFO", "server" };
	redisReply *r = NULL;
	int rc = client_call(c, 2, argv, &r);

	*found = 0;
	backups[0] = '\0';
	if (rc != CLI_OK)
		return rc;
	*found = info_field(r, "data_dir", served, cap);
	(void)info_field(r, "backup_dir", backups, cap); /* "" when absent */
	freeReplyObject(r);
	return CLI_OK;
}

/* CLI_OK when the server reached serves dir: any tallyd may listen on
 * the port asked (the default one included), and a backup of another
 * folder than the one named would be reported as the one asked for.
 * backups receives the server's --backup-dir folder, or "". */
static int same_server(client *c, const char *dir, char *backups,
                       size_t cap)
{
	char mine[PATH_MAX], served[PATH_MAX];
	int found, rc;

	if (realpath(dir, mine) == NULL) {
		fprintf(stderr, "tally: %s: %s\n", dir, strerror(errno));
		return CLI_ERR;
	}
	rc = served_dirs(c, served, backups, cap, &found);
	if (rc != CLI_OK)
		return rc; /* said by client_call() */
	if (found && strcmp(mine, served) == 0)
		return CLI_OK;
	if (found) {
		char shown[PATH_MAX];

		/* The server's words: a terminal may act on its bytes. */
		out_safe(shown, sizeof shown, served, strlen(served));
		fprintf(stderr, "tally: the tallyd at %s serves %s, not %s: "
		        "name the server holding %s with -h and -p\n",
		        c->where, shown, mine, dir);
	}
	else
		fprintf(stderr, "tally: the server at %s does not say which "
		        "folder it serves: name the tallyd holding %s with "
		        "-h and -p\n", c->where, dir);
	return CLI_ERR;
}

/* The client is about to print an error: the progress line ends first. */
static void watch_halt(void *arg)
{
	watch_stop(arg, NULL);
}

static int backup_remote(const cli_ctx *ctx, const char *dir,
                         const char *out, int progress)
{
	char path[PATH_MAX], backups[PATH_MAX], where[PATH_MAX];
	const char *argv[2] = { "TALLY.BACKUP", path };
	redisReply *r = NULL;
	client c;
	watch w;
	int rc, watching;

	fprintf(stderr, "tally: %s is in use by a running tallyd: asking the "
	        "server at %s:%d for the backup\n", dir, ctx->host, ctx->port);
	rc = client_open(&c, ctx);
	if (rc == CLI_UNREACHABLE)
		fprintf(stderr, "tally: if no tallyd serves %s, a tally import "
		        "is writing it: run the backup once it is done\n",
		        dir);
	if (rc != CLI_OK)
		return rc;
	rc = same_server(&c, dir, backups, sizeof backups);
	if (rc != CLI_OK) {
		client_close(&c);
		return rc;
	}
	/* A server kept to its --backup-dir puts a bare name there, as
	 * TALLY.BACKUP does; anything else is a path from here. */
	if (backups[0] != '\0' && strchr(out, '/') == NULL) {
		int n = snprintf(where, sizeof where, "%s/%s", backups, out);

		if (n < 0 || (size_t)n >= sizeof where ||
		    strlen(out) >= sizeof path) {
			fprintf(stderr, "tally: the backup path is too long\n");
			client_close(&c);
			return CLI_ERR;
		}
		snprintf(path, sizeof path, "%s", out);
	} else {
		rc = absolute(out, path, sizeof path);
		if (rc != CLI_OK) {
			client_close(&c);
			return rc;
		}
		snprintf(where, sizeof where, "%s", path);
	}
	client_timeout(&c, CLIENT_SLOW_TIMEOUT_MS);
	/* The server checked above holds dir on this machine, so its
	 * copy, at where, is in view from here. */
	watching = watch_start(&w, dir, where, progress);
	if (watching) {
		c.before_say = watch_halt;
		c.before_say_arg = &w;
	}
	rc = client_call(&c, 2, argv, &r);
	if (watching)
		watch_stop(&w, rc == CLI_OK ? where : NULL);
	if (rc == CLI_OK && r->type != REDIS_REPLY_STATUS &&
	    r->type != REDIS_REPLY_STRING)
		rc = client_bad_reply("TALLY.BACKUP", "OK");
	if (rc == CLI_OK)
		report(ctx, dir, where, c.where);
	freeReplyObject(r);
	client_close(&c);
	return rc;
}

int cmd_backup(const cli_ctx *ctx, const cli_args *a)
{
	const char *dir, *out = a->pos[0];
	struct stat st;
	tally *t = NULL;
	watch w;
	int progress = cli_opt(a, "progress") != NULL;
	int busy, watching, rc = offline_data_dir(a, &dir);

	if (rc != CLI_OK)
		return rc;
	/* Read-only: the folder's files are copied as they are, and stay
	 * so; readers (stats, export, other backups) may share it. */
	rc = offline_open(dir, 0, &(tally_options){
	                          .flags = TALLY_OPEN_READ_ONLY },
	                  &t, &busy);
	/* A bare name may go into the server's --backup-dir: it checks its
	 * own target. */
	if (busy)
		return backup_remote(ctx, dir, out, progress);
	if (rc != CLI_OK)
		return rc;
	if (lstat(out, &st) == 0) {
		tally_close(t);
		fprintf(stderr, "tally: %s exists: a backup is written into a "
		        "new folder\n", out);
		return CLI_ERR;
	}
	watching = watch_start(&w, dir, out, progress);
	rc = tally_backup(t, out);
	if (watching)
		watch_stop(&w, rc == TALLY_OK ? out : NULL);
	tally_close(t);
	if (rc == TALLY_ENOSPC) {
		fprintf(stderr, "tally: backup of %s failed: no space left on "
		        "the device of %s (nothing was left there; %s is "
		        "unchanged)\n", dir, out, dir);
		return CLI_ERR;
	}
	if (rc == TALLY_EINVAL) {
		fprintf(stderr, "tally: backup of %s failed: %s names no new "
		        "folder, or one whose name is too long (at most %d "
		        "bytes)\n", dir, out, TALLY_BACKUP_NAME_MAX);
		return CLI_ERR;
	}
	if (rc == TALLY_EIO) {
		/* Not tally_strerror(): it speaks of the store's own disk,
		 * which served the copy. */
		fprintf(stderr, "tally: backup of %s failed: I/O error reading "
		        "it or writing %s (the parent of OUT must exist and be "
		        "writable, and "
		        "neither OUT nor OUT" TALLY_BACKUP_PARTIAL ", which an "
		        "interrupted backup leaves, may exist; %s is "
		        "unchanged)\n", dir, out, dir);
		return CLI_ERR;
	}
	if (rc != TALLY_OK)
		return offline_fail(dir, "backup failed", rc);
	report(ctx, dir, out, NULL);
	return CLI_OK;
}
