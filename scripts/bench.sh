#!/bin/sh
# Run the in-process benchmark (tally_bench) several times, workloads
# alternating, and write the median of every figure to docs/BENCHMARKS.md.
# Usage: scripts/bench.sh BUILD_DIR   (make bench: a Release build)
# Environment: BENCH_RUNS (3), BENCH_SECONDS (5), BENCH_LIKES (1000000),
# BENCH_WINDOW (1024), BENCH_DIR (data folder: /tmp, or ./bench-data when
# /tmp is tmpfs), BENCH_OUT (docs/BENCHMARKS.md).
set -eu

if [ $# -ne 1 ]; then
	echo "usage: $0 BUILD_DIR" >&2
	exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench_lib.sh"
# make bench names the tree as it was built (BENCH_REV).
REV=${BENCH_REV:-$(tree_rev)}
BIN=$(cd "$1" && pwd)/tally_bench
RUNS=${BENCH_RUNS:-3}
SECS=${BENCH_SECONDS:-5}
LIKES=${BENCH_LIKES:-1000000}
WINDOW=${BENCH_WINDOW:-1024}
OUT=${BENCH_OUT:-$ROOT/docs/BENCHMARKS.md}

[ -x "$BIN" ] || { echo "bench: no $BIN (build it first)" >&2; exit 1; }
for v in "$RUNS" "$SECS" "$LIKES" "$WINDOW"; do
	case $v in
	'' | *[!0-9]*) echo "bench: BENCH_* must be positive integers" >&2; exit 2 ;;
	esac
done
if [ "$RUNS" -lt 1 ] || [ "$RUNS" -gt 99 ]; then
	echo "bench: BENCH_RUNS must be 1..99" >&2
	exit 2
fi

# A data folder on a disk: fsync on tmpfs is free and would flatter every
# figure (tally_bench refuses it too).
if [ -z "${BENCH_DIR:-}" ]; then
	if [ "$(stat -f -c %T /tmp 2>/dev/null)" = tmpfs ]; then
		BENCH_DIR=$ROOT/bench-data
	else
		BENCH_DIR=/tmp
	fi
fi
mkdir -p "$BENCH_DIR"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
RAW=$TMP/raw.jsonl
: >"$RAW"

WORKLOADS=$("$BIN" --list | awk '{ print $1 }')
ARGS="--json --seconds $SECS --likes $LIKES --window $WINDOW --dir $BENCH_DIR"
T0=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)

# Alternate: every run goes through all workloads, odd runs forwards and
# even runs backwards, so slow drift (page cache, disk) spreads evenly.
run=1
while [ "$run" -le "$RUNS" ]; do
	if [ $((run % 2)) -eq 1 ]; then
		order=$WORKLOADS
	else
		order=$(printf '%s\n' "$WORKLOADS" | awk '{ l[NR] = $0 } END { for (i = NR; i >= 1; i--) print l[i] }')
	fi
	for w in $order; do
		# shellcheck disable=SC2086
		if ! "$BIN" $ARGS "$w" >"$TMP/one" 2>"$TMP/err"; then
			echo "bench: run $run: $w FAILED:" >&2
			cat "$TMP/err" >&2
			exit 1
		fi
		cat "$TMP/one" >>"$RAW"
		awk -v run="$run" -v runs="$RUNS" '{
			n = ""; o = ""
			if (match($0, /"name":"[^"]*"/)) n = substr($0, RSTART + 8, RLENGTH - 9)
			if (match($0, /"ops_per_s":[0-9.]+/)) o = substr($0, RSTART + 12, RLENGTH - 12)
			printf "bench: run %d/%d  %-32s %12.0f ops/s\n", run, runs, n, o
		}' "$TMP/one"
	done
	run=$((run + 1))
done
ELAPSED=$(( $(date +%s) - T0 ))
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)

# Medians: one line per (workload, figure):
# name TAB key TAB median TAB runs TAB min TAB max.
awk '
function median(name, key,    n, i, j, a, t) {
	n = cnt[name, key]
	for (i = 1; i <= n; i++) a[i] = val[name, key, i]
	for (i = 2; i <= n; i++) {       # insertion sort: n is the run count
		t = a[i]
		for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
		a[j + 1] = t
	}
	lo = a[1]; hi = a[n]
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	line = $0
	gsub(/^[{]|[}]$/, "", line)
	nf = split(line, kv, ",")
	name = ""
	for (i = 1; i <= nf; i++) {
		split(kv[i], p, ":"); k = p[1]; v = p[2]
		gsub(/"/, "", k); gsub(/"/, "", v)
		if (k == "name") name = v
		f[i] = k; g[i] = v
	}
	if (!(name in seen)) { seen[name] = 1; names[++nn] = name }
	for (i = 1; i <= nf; i++) {
		k = f[i]
		if (k == "name" || g[i] !~ /^-?[0-9.]+$/) continue
		if (!((name, k) in cnt)) keys[name, ++nk[name]] = k
		val[name, k, ++cnt[name, k]] = g[i]
	}
}
END {
	for (a = 1; a <= nn; a++)
		for (b = 1; b <= nk[names[a]]; b++) {
			k = keys[names[a], b]
			md = median(names[a], k)
			printf "%s\t%s\t%.6f\t%d\t%.6f\t%.6f\n", names[a], k, md, cnt[names[a], k], lo, hi
		}
}' "$RAW" >"$TMP/medians.tsv"

# The machine, for the record.
FS=$(df -PT "$BENCH_DIR" | awk 'NR == 2 { print $2 " (" $1 ")" }')
ROCKS=$(pkg-config --modversion rocksdb 2>/dev/null || echo unknown)
CCV=$(cc --version 2>/dev/null | head -n 1 || echo unknown)

mkdir -p "$(dirname "$OUT")"
awk -F'\t' \
	-v date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
	-v cmd="scripts/bench.sh $1" \
	-v bin="$(basename "$1")/tally_bench $ARGS WORKLOAD" \
	-v runs="$RUNS" -v elapsed="$ELAPSED" -v bin_short="$(basename "$1")/tally_bench" \
	-v nproc="$(nproc)" -v cpu="${CPU:-unknown}" -v mem="${MEM:-unknown}" \
	-v fs="$FS" -v dir="$BENCH_DIR" -v kernel="$(uname -sr)" \
	-v rocks="$ROCKS" -v ccv="$CCV" -v rev="$REV" \
	-v load0="$LOAD0" -v load1="$LOAD1" '
function get(n, k) { return ((n, k) in m) ? m[n, k] : -1 }
function commas(x,    s, r) {          # 1234567 -> 1,234,567
	s = sprintf("%.0f", x); r = ""
	while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
	return s r
}
function row(n,    none, e, b) {
	# A workload without libtally writes (disk-flush) has no entries or
	# batches to show.
	none = get(n, "writes") == 0
	e = none ? "-" : sprintf("%.4f", get(n, "entries_per_op"))
	b = none ? "-" : sprintf("%.1f", get(n, "avg_batch"))
	printf "| %s | %s | %s - %s | %d | %s | %s | %.2f |\n", n, commas(get(n, "ops_per_s")),
	       commas(lo_of[n]), commas(hi_of[n]), runs_of[n], e, b, get(n, "fsync_ms")
}
function stage(label, s) {
	printf "| %s | %s | %.1f | %.1f |\n", label, commas(get(B, s "_bytes")),
	       get(B, s "_bytes_per_like"), get(B, s "_bytes_per_stored_like")
}
{
	m[$1, $2] = $3
	if ($2 == "ops_per_s") {
		names[++nn] = $1; runs_of[$1] = $4; lo_of[$1] = $5; hi_of[$1] = $6
	}
}
END {
	B = "bytes-per-like"; L = "likes-sync"; H = "incr-hot-sync-1t"
	print "# Benchmarks"
	print ""
	print "In-process benchmark of libtally (`bench/tally_bench.c`). Written by"
	print "`scripts/bench.sh` (run by `make bench`); the next run rewrites this file."
	print ""
	printf "- Command: `make bench`, i.e. `%s`, which runs\n", cmd
	printf "  `%s` for every workload, %d run(s), alternating order\n", bin, runs
	print  "  (odd runs forwards, even runs backwards); each figure is the median of the runs."
	printf "- Date: %s; whole benchmark took %d s.\n", date, elapsed
	printf "- Machine: %d CPUs (%s), %s RAM, %s; data folder %s on %s.\n", nproc, cpu, mem, kernel, dir, fs
	printf "- Load average (1, 5, 15 min) before: %s, after: %s. Other work on the\n", load0, load1
	print  "  machine (builds, tests) competes for its cores and skews the figures."
	printf "- Build: Release, %s, RocksDB %s, tree %s.\n", ccv, rocks, rev
	print ""
	print "## Throughput"
	print ""
	print "| workload | median ops/s | min - max ops/s | runs | entries per op | avg batch | fsync ms |"
	print "|---|---:|---:|---:|---:|---:|---:|"
	for (i = 1; i <= nn; i++) row(names[i])
	print ""
	print "- ops/s: acknowledged writes / time from the first write to the last"
	printf "  acknowledgement. `sync` workloads keep a window of %d writes in flight\n", m[H, "window"]
	print "  per thread with `tally_write_async` (a server with pipelined clients),"
	print "  so one hot key is bound by window / batch time, not by engine CPU;"
	print "  `async` ones make blocking calls (`counter_add` lands in striped cells)."
	print "  bytes-per-like: the rate of its load (see below). disk-flush runs no"
	print "  libtally: 3,000 bytes written in place and fdatasynced, one at a time, as"
	print "  the journal writes a batch; its fsync ms is what every synced batch above"
	print "  waits for on this disk, at the time of the run."
	print "- entries per op: RocksDB entries (puts, merges, deletes) per"
	print "  acknowledged write, those the batches write themselves plus those of"
	print "  the checkpoints that ran during the workload: counters, totals and"
	print "  events go to the journal first and reach their tables at checkpoints,"
	print "  a value changed many times between two of them once (the checkpoint"
	print "  at close is not counted). avg batch: writes per store batch (striped"
	print "  adds are not batched writes and are left out)."
	print "- fsync ms: time of one synced store write, i.e. the journal record"
	print "  of the batch written (to the journal files, or to the RocksDB WAL with"
	print "  the entries of the batch) and fdatasynced, not the fdatasync alone; its"
	print "  time above that of disk-flush is the work of the batch within that write (and"
	print "  the CPU of the other threads on 2 shared cores)."
	print "  In async rows it is the periodic WAL fsync (every 100 ms and at the end)."
	print "- Every workload checks its counts for exactness (hot key = acknowledged"
	print "  increments, every random key, every article count, stored events ="
	print "  distinct likes, membership of a sample) before and after a reopen."
	print ""
	if ((B, "likes") in m) {
		print "## Bytes per like on disk"
		print ""
		printf "%s random likes (article 1..100000, member 1..10000000) loaded\n", commas(m[B, "likes"])
		printf "pipelined in sync mode (%s likes/s), %s stored (no-ops, i.e. a member\n", commas(m[B, "ops_per_s"]), commas(m[B, "stored"])
		printf "liking the same article again: %s), %.2f RocksDB entries per like written by the batches and the checkpoints that ran during the load.\n", commas(m[B, "noops"]), m[B, "entries_per_op"]
		print "Sizes are the sum of file sizes in the data folder, every index included."
		print ""
		print "| state | bytes | per like | per stored like |"
		print "|---|---:|---:|---:|"
		stage("closed (a clean close checkpoints and flushes: L0 SSTs, ZSTD level 1)", "closed")
		stage("reopened, then closed again", "reopened")
		stage("compacted (bottom level, ZSTD)", "compacted")
		print ""
		print "Per column family, compacted (SST bytes from RocksDB live-file metadata):"
		print ""
		print "| column family | bytes | entries | bytes per stored like |"
		print "|---|---:|---:|---:|"
		for (k in m) {
			split(k, kk, SUBSEP)
			if (kk[1] == B && kk[2] ~ /^cf_.*_bytes$/) {
				cf = substr(kk[2], 4, length(kk[2]) - 9)
				cfs[++ncf] = cf
			}
		}
		for (i = 2; i <= ncf; i++) {   # sort by name, for a stable table
			t = cfs[i]
			for (j = i - 1; j >= 1 && cfs[j] > t; j--) cfs[j + 1] = cfs[j]
			cfs[j + 1] = t
		}
		for (i = 1; i <= ncf; i++)
			printf "| %s | %s | %s | %.2f |\n", cfs[i], commas(m[B, "cf_" cfs[i] "_bytes"]),
			       commas(m[B, "cf_" cfs[i] "_entries"]), m[B, "cf_" cfs[i] "_bytes_per_stored_like"]
		print ""
	}
	print "## Where we stand"
	print ""
	lk = get(L, "ops_per_s"); le = get(L, "entries_per_op")
	lb = get(L, "avg_batch"); lf = get(L, "fsync_ms"); hf = get(H, "fsync_ms")
	bl = get(B, "compacted_bytes_per_stored_like")
	printf "- Sync likes in-process: **%s likes/s** against the target of 400,000/s", commas(lk)
	printf " (%.0f%%; %s).", 100 * lk / 400000, (lk >= 400000 ? "met" : "not met")
	printf " %.2f RocksDB entries per like, nearly all written by checkpoints (memberships, log and history entries, and totals).", le
	if (lb > 0 && lf > 0 && hf > 0 && lk > 0)
		printf " A synced batch of %.0f likes takes %.1f ms in the store write (its fsync about %.2f ms, see incr-hot-sync-1t), %.0f%% of the %.1f ms between batches at this rate: %s", lb, lf, hf, 100 * lf / (1000 * lb / lk), 1000 * lb / lk, (lf < 500 * lb / lk ? "the rest, the apply on the committer and the client side, is the bound, not the disk." : "the store write is the bound.")
	print ""
	printf "- Bytes on disk per stored like, every index included: **%.1f** after compaction", bl
	printf " against the target of 24 (%s); %.1f after a clean close, %.1f after a reopen (L0 SSTs).\n", (bl >= 0 && bl <= 24 ? "met" : "not met"), get(B, "closed_bytes_per_stored_like"), get(B, "reopened_bytes_per_stored_like")
	printf "- One hot key, sync: %s increments/s with one thread, %s with two; %.5f store entries and %.5f fsyncs per increment (group commit: batches of %.0f).\n", commas(get(H, "ops_per_s")), commas(get("incr-hot-sync-2t", "ops_per_s")), get(H, "entries_per_op"), get(H, "syncs") / get(H, "ops"), get(H, "avg_batch")
	printf "- Async hot key: %s adds/s through striped cells (`tally_counter_add`, 1 thread), against %s/s for blocking `tally_incrby` (one committer round trip per call).\n", commas(get("incr-hot-async-1t/counter_add", "ops_per_s")), commas(get("incr-hot-async-1t/incrby", "ops_per_s"))
	print "- Where the time of a workload goes: `perf record -g " bin_short " --seconds 10 likes-sync`, then `perf report`. docs/PERFORMANCE.md holds the profiles behind each target and what would lift those not reached."
}' "$TMP/medians.tsv" >"$TMP/doc.md"

{
	cat "$TMP/doc.md"
	echo ""
	echo "## Raw results"
	echo ""
	echo "One JSON line per workload and run, as printed by \`tally_bench --json\`."
	echo ""
	echo '```'
	cat "$RAW"
	echo '```'
} >"$OUT"

echo "bench: medians written to $OUT"
awk '/^## Throughput/,/^- ops\/s/' "$OUT" | sed '$d'
