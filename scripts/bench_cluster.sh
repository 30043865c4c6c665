#!/bin/bash
# Hot-key INCR through tallyd on the redis-cluster store: one counter with
# 1 shard against one with 3 shards, on a 3-master Redis Cluster, plus one
# Redis master alone for reference. Starts and stops every server itself
# (loopback, data under a mktemp folder), alternates the configurations
# (A B C, then C B A), takes medians, checks every count is exact, reads
# each master's INFO commandstats and CPU time around every run, and writes
# its section of docs/BENCHMARKS.md (between the cluster:begin/end markers;
# appended when missing).
# Usage: scripts/bench_cluster.sh BUILD_DIR   (make bench: build-release)
# Environment: BENCH_RUNS (3), BENCH_SECONDS (4, length of one run),
# BENCH_OUT (docs/BENCHMARKS.md), BENCH_DIR (data parent; /tmp, or
# ./bench-data when /tmp is tmpfs), BENCH_REV (the tree the build comes
# from, when not this checkout).
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 BUILD_DIR" >&2
	exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench_lib.sh"
# make bench names the tree as it was built (BENCH_REV), and so does a
# build made elsewhere (e.g. from a clean export of a commit).
REV=${BENCH_REV:-$(tree_rev)}
BUILD=$(cd "$1" && pwd)
TALLYD=$BUILD/tallyd
RUNS=${BENCH_RUNS:-3}
SECS=${BENCH_SECONDS:-4}
OUT=${BENCH_OUT:-$ROOT/docs/BENCHMARKS.md}
CLIENTS=50
PIPE=16
TICK=$(getconf CLK_TCK)

[ -x "$TALLYD" ] || { echo "bench_cluster: no $TALLYD (build it first)" >&2; exit 1; }
for t in redis-server redis-benchmark redis-cli awk; do
	command -v "$t" >/dev/null 2>&1 || { echo "bench_cluster: $t missing (scripts/deps.sh)" >&2; exit 1; }
done
if [ -z "${BENCH_DIR:-}" ]; then
	if [ "$(stat -f -c %T /tmp 2>/dev/null)" = tmpfs ]; then BENCH_DIR=$ROOT/bench-data; else BENCH_DIR=/tmp; fi
fi
mkdir -p "$BENCH_DIR"
TMP=$(mktemp -d -p "$BENCH_DIR" tally-cluster-XXXXXX)
RAW=$TMP/raw.tsv     # round config n rps p50 p99 client_cpu_s
NODES=$TMP/nodes.tsv # round config node stat delta
: >"$RAW"; : >"$NODES"

# Servers we started, by pid, so that any exit stops them (and only them).
declare -A NODE_PID=()
TALLY_PID=""
cleanup() {
	local p
	if [ -n "$TALLY_PID" ]; then
		kill -TERM "$TALLY_PID" 2>/dev/null || true
		wait "$TALLY_PID" 2>/dev/null || true
	fi
	for p in "${NODE_PID[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${NODE_PID[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

log() { echo "bench_cluster: $*" >&2; }
die() { log "$*"; exit 1; }
rc() { timeout 20 redis-cli -h 127.0.0.1 -p "$@" 2>&1 | tr -d '\r'; }

# A free loopback port below the ephemeral range (no outgoing connection
# can take it meanwhile), never one picked before: each node needs two
# (clients and cluster bus).
PICKED=" "
pick_port() {
	local hi p i
	hi=$(awk '{ print $1 - 1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32767)
	[ "$hi" -gt 21000 ] || hi=32767
	for ((i = 0; i < 500; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % (hi - 20000)))
		[[ "$PICKED" == *" $p "* ]] && continue
		grep -qi -- "$(printf ':%04X ' "$p")" /proc/net/tcp /proc/net/tcp6 2>/dev/null && continue
		PICKED+="$p "
		echo "$p"
		return 0
	done
	die "no free port"
}
wait_ping() { # port pid log: until PONG, at most 60 s, while pid lives
	local i
	for ((i = 0; i < 600; i++)); do
		[ "$(rc "$1" ping)" = PONG ] && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$3" >&2
	die "no PONG on port $1"
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# ---- the cluster: 3 masters, no replicas ------------------------------
MASTERS=()
SEEDS=""
start_cluster() {
	local i p addrs=() dir
	for ((i = 0; i < 3; i++)); do
		p=$(pick_port)
		dir=$TMP/redis.$p
		mkdir -p "$dir"
		redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
			--cluster-port "$(pick_port)" --cluster-config-file nodes.conf \
			--cluster-node-timeout 5000 --appendonly no --save '' \
			--dir "$dir" --logfile "$dir/redis.log" --daemonize no >/dev/null 2>&1 &
		NODE_PID[$p]=$!
		MASTERS+=("$p")
		addrs+=("127.0.0.1:$p")
	done
	for p in "${MASTERS[@]}"; do wait_ping "$p" "${NODE_PID[$p]}" "$TMP/redis.$p/redis.log"; done
	timeout 60 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 \
		--cluster-yes >"$TMP/create.log" 2>&1 || { cat "$TMP/create.log" >&2; die "cluster create failed"; }
	for ((i = 0; i < 300; i++)); do
		local ok=1
		for p in "${MASTERS[@]}"; do
			rc "$p" cluster info | grep -q '^cluster_state:ok' || ok=0
		done
		[ $ok -eq 1 ] && break
		sleep 0.2
	done
	[ $ok -eq 1 ] || die "the cluster is not ok after 60 s"
	SEEDS=$(IFS=,; echo "${addrs[*]}")
}
# "start end port" of every master's slot ranges, from CLUSTER NODES.
slot_map() {
	rc "${MASTERS[0]}" cluster nodes | awk '$3 ~ /master/ {
		split($2, a, "@"); n = split(a[1], b, ":")
		for (i = 9; i <= NF; i++) {
			if ($i ~ /^\[/) continue
			m = split($i, r, "-"); print r[1], (m > 1 ? r[2] : r[1]), b[n] }
	}' >"$TMP/slots"
}
master_of() { # key -> port of the master owning its slot
	local s
	s=$(rc "${MASTERS[0]}" cluster keyslot "$1")
	awk -v s="$s" '$1 <= s && s <= $2 { print $3; exit }' "$TMP/slots"
}
shard_key() { # name i -> the store's key of shard i (rc_int.h)
	if [ "$2" -eq 0 ]; then echo "t:c:{$1}"; else echo "t:c:{$1#$2}"; fi
}
shard_masters() { # name n -> the master of each shard, in shard order
	local i
	for ((i = 0; i < $2; i++)); do master_of "$(shard_key "$1" "$i")"; done
}

# ---- tallyd -------------------------------------------------------------
TPORT=""
start_tallyd() {
	TPORT=$(pick_port)
	mkdir -p "$TMP/tally"
	# --hot-shard-ops 0: the 1-shard counter must stay at 1 shard however
	# fast this machine drives it, or the comparison compares nothing.
	"$TALLYD" --data "$TMP/tally" --bind 127.0.0.1 --resp-port "$TPORT" --http-port 0 \
		--store redis-cluster --cluster "$SEEDS" --hot-shard-ops 0 >"$TMP/tallyd.log" 2>&1 &
	TALLY_PID=$!
	wait_ping "$TPORT" "$TALLY_PID" "$TMP/tallyd.log"
}

# ---- counters of every process, before and after a run ----------------
# snap FILE: "node stat value" for each master (commandstats calls, total
# commands, CPU ticks) and for tallyd (writes, batches, store entries, CPU).
snap() {
	local p
	{
		for p in "${MASTERS[@]}"; do
			rc "$p" info commandstats | awk -F'[:,=]' -v p="$p" '/^cmdstat_/ { sub(/^cmdstat_/, "", $1); print p, $1, $3 }'
			rc "$p" info stats | awk -F: -v p="$p" '$1 == "total_commands_processed" { print p, "total", $2 }'
			echo "$p cpu $(cpu_ticks "${NODE_PID[$p]}")"
		done
		rc "$TPORT" info stats | awk -F: '$1 ~ /^(writes|batches|store_entries)$/ { print "tallyd", $1, $2 }'
		echo "tallyd cpu $(cpu_ticks "$TALLY_PID")"
	} >"$1"
}
# delta BEFORE AFTER round config: appends "round config node stat delta".
delta() {
	awk -v r="$3" -v c="$4" 'NR == FNR { b[$1 " " $2] = $3; next }
		{ d = $3 - b[$1 " " $2]; if (d != 0) print r "\t" c "\t" $1 "\t" $2 "\t" d }' "$1" "$2" >>"$NODES"
}

# ---- runs ---------------------------------------------------------------
# redis-benchmark --csv: "test","rps","avg","min","p50","p95","p99","max";
# its own CPU time (user + sys, s) from bash's time.
rb() { # port n key -> "rps p50 p99 cpu_s"
	local out cpu
	out=$TMP/rb.out
	TIMEFORMAT='%3U %3S'
	# Bounded: a server that stops answering must not hang the script.
	{ time timeout 600 redis-benchmark -h 127.0.0.1 -p "$1" -n "$2" -c $CLIENTS -P $PIPE --precision 3 --csv \
		INCR "$3" >"$out" 2>"$TMP/rb.err"; } 2>"$TMP/rb.time"
	cpu=$(awk '{ print $1 + $2 }' "$TMP/rb.time")
	awk -F'","' -v cpu="$cpu" 'NR == 2 { gsub(/"/, "", $NF); print $2, $5, $7, cpu }' "$out"
}

# The configurations: where the INCRs go, and how the count is read back.
# t1, t3: tallyd (key hot1: 1 shard; hot3: 3 shards); redis: a master.
declare -A PORT KEY SENT NREQ
KEY[t1]=hot1; KEY[t3]=hot3; KEY[redis]=hot
SENT[t1]=0; SENT[t3]=0; SENT[redis]=0
SHARDS_T3=3

# Read the count back both ways after each run: it must equal every
# increment sent so far (the probe included).
check_count() { # config
	local c=$1 want=${SENT[$1]} got direct=0 i k v n=1
	if [ "$c" = redis ]; then
		got=$(rc "${PORT[redis]}" get hot)
		direct=$got
	else
		got=$(rc "$TPORT" get "${KEY[$c]}")
		n=$(rc "$TPORT" tally.shards "${KEY[$c]}")
		for ((i = 0; i < n; i++)); do
			k=$(shard_key "${KEY[$c]}" "$i")
			v=$(rc "$(master_of "$k")" get "$k")
			direct=$((direct + ${v:-0}))
		done
	fi
	[ "$got" = "$want" ] || die "$c: ${KEY[$c]} reads $got, $want increments were sent"
	[ "$direct" = "$want" ] || die "$c: the shards of ${KEY[$c]} sum to $direct on the masters, $want were sent"
}

run() { # round config
	local r=$1 c=$2 res
	snap "$TMP/before"
	res=$(rb "${PORT[$c]}" "${NREQ[$c]}" "${KEY[$c]}")
	snap "$TMP/after"
	[ -n "$res" ] || { cat "$TMP/rb.err" >&2; die "$c: redis-benchmark gave no figures"; }
	SENT[$c]=$((SENT[$c] + NREQ[$c]))
	delta "$TMP/before" "$TMP/after" "$r" "$c"
	check_count "$c"
	printf '%s\t%s\t%s\t%s\n' "$r" "$c" "${NREQ[$c]}" "$(echo "$res" | tr ' ' '\t')" >>"$RAW"
	log "round $r  $(printf '%-6s' "$c") $(echo "$res" | awk '{ printf "%10.0f ops/s  p50 %.3f ms  p99 %.3f ms", $1, $2, $3 }')"
}

T0=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
start_cluster
slot_map
start_tallyd
PORT[t1]=$TPORT; PORT[t3]=$TPORT

# hot3: the first of hot3, hot3a, hot3b, ... whose 3 shards are on 3
# different masters, so that the spread shows; hot1 and hot as they come.
for suffix in "" a b c d e f g h i j k l m n o p q r s t u v w x y z; do
	KEY[t3]=hot3$suffix
	[ "$(shard_masters "${KEY[t3]}" 3 | sort -u | wc -l)" -eq 3 ] && break
done
[ "$(shard_masters "${KEY[t3]}" 3 | sort -u | wc -l)" -eq 3 ] || die "no name with 3 shards on 3 masters"
[ "$(rc "$TPORT" tally.shards "${KEY[t3]}" $SHARDS_T3)" = $SHARDS_T3 ] || die "TALLY.SHARDS ${KEY[t3]} $SHARDS_T3 refused"
PORT[redis]=$(master_of hot)
log "masters ${MASTERS[*]}; ${KEY[t1]} on $(master_of "$(shard_key "${KEY[t1]}" 0)"), ${KEY[t3]} on $(shard_masters "${KEY[t3]}" 3 | tr '\n' ' ')hot on ${PORT[redis]}"

# Request counts: about SECS seconds each, from two probes per
# configuration (interleaved; the faster counts, a probe slowed by other
# work on the machine would make every run too short). Both tallyd
# configurations get the same count.
declare -A RATE=()
for c in t1 t3 redis t1 t3 redis; do
	n=$((CLIENTS * PIPE * 100))
	res=$(rb "${PORT[$c]}" "$n" "${KEY[$c]}")
	[ -n "$res" ] || { cat "$TMP/rb.err" >&2; die "$c: the probe run gave no figures"; }
	SENT[$c]=$((SENT[$c] + n))
	check_count "$c"
	RATE[$c]=$(awk -v a="${RATE[$c]:-0}" -v b="${res%% *}" 'BEGIN { print (b > a ? b : a) }')
done
RATE[t1]=$(awk -v a="${RATE[t1]}" -v b="${RATE[t3]}" 'BEGIN { print (b > a ? b : a) }')
RATE[t3]=${RATE[t1]}
for c in t1 t3 redis; do
	# A multiple of CLIENTS x PIPE: redis-benchmark sends whole pipelines,
	# so with -P 16 it sends -n rounded up to a multiple of 16.
	NREQ[$c]=$(awk -v r="${RATE[$c]}" -v s="$SECS" -v u=$((CLIENTS * PIPE)) 'BEGIN { n = int(r * s / u); if (n < 20) n = 20; print n * u }')
done

CONFIGS="t1 t3 redis"
for r in $(seq 1 "$RUNS"); do
	if [ $((r % 2)) -eq 1 ]; then order=$CONFIGS; else order=$(echo "$CONFIGS" | tr ' ' '\n' | tac | tr '\n' ' '); fi
	for c in $order; do run "$r" "$c"; done
done
SHARDS_T1_END=$(rc "$TPORT" tally.shards "${KEY[t1]}")
SHARDS_T3_END=$(rc "$TPORT" tally.shards "${KEY[t3]}")
ELAPSED=$(( $(date +%s) - T0 ))
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- figures --------------------------------------------------------------
# Median, min and max of a column of RAW for a configuration.
med() { # config column -> "median min max"
	awk -F'\t' -v c="$1" -v k="$2" '$2 == c { v[++n] = $k }
		END {
			for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
			m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
			print m, v[1], v[n]
		}' "$RAW"
}
# Sum over the rounds of one stat of one node (or "masters": every master).
tot() { # config node stat
	awk -F'\t' -v c="$1" -v n="$2" -v s="$3" '$2 == c && ($3 == n || (n == "masters" && $3 != "tallyd")) && $4 == s { t += $5 }
		END { print t + 0 }' "$NODES"
}
sent() { awk -F'\t' -v c="$1" '$2 == c { t += $3 } END { print t + 0 }' "$RAW"; }
cmds() { echo $(( $(tot "$1" "$2" total) - $(tot "$1" "$2" info) )); } # INFO: ours
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b > 0) printf f, a / b; else printf "n/a" }'; }
us_per() { awk -v t="$1" -v n="$2" -v k="$TICK" 'BEGIN { if (n > 0) printf "%.2f", t / k * 1e6 / n; else printf "n/a" }'; }
client_cpu() { awk -F'\t' -v c="$1" '$2 == c { t += $7 } END { print t + 0 }' "$RAW"; }
name() { case $1 in t1) echo "tallyd, 1 shard (\`${KEY[t1]}\`)" ;; t3) echo "tallyd, 3 shards (\`${KEY[t3]}\`)" ;; redis) echo "one Redis master alone (\`hot\`)" ;; esac; }
# Commands shown one by one in the per-master table; the rest is "other".
# Calls a Lua script makes (redis.call) count in commandstats and in
# total_commands_processed as well as the EVALSHA itself.
CMDCOLS="evalsha incrby get set incr"
other() { # config node: commands not in CMDCOLS
	local o k
	o=$(cmds "$1" "$2")
	for k in $CMDCOLS; do o=$((o - $(tot "$1" "$2" "$k"))); done
	echo "$o"
}

REDISV=$(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/')
read -r MED1 MIN1 MAX1 <<<"$(med t1 4)"
read -r MED3 MIN3 MAX3 <<<"$(med t3 4)"
read -r MEDR _ _ <<<"$(med redis 4)"

{
	echo "<!-- cluster:begin (written by scripts/bench_cluster.sh; the next run rewrites it) -->"
	echo "## Hot-key INCR on a Redis Cluster: 1 shard against 3"
	echo ""
	echo "Written by \`scripts/bench_cluster.sh BUILD_DIR\` (\`make bench\` runs it on build-release"
	echo "after the comparison above; it also runs alone). Every server is started and stopped"
	echo "by the script, on loopback, data in a temporary folder under \`$BENCH_DIR\`."
	echo ""
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); this part took $ELAPSED s."
	echo "- Machine: $(nproc) CPUs ($CPU), $MEM RAM, $(uname -sr). The 3 Redis"
	echo "  masters, tallyd and the client share these $(nproc) cores. Load average before:"
	echo "  $LOAD0, after: $LOAD1; other builds and tests ran on the machine at the"
	echo "  same time: treat differences under ~20% as noise."
	echo "- Cluster: Redis $REDISV, 3 masters, no replicas: \`redis-server --cluster-enabled yes"
	echo "  --appendonly no --save ''\`, made a cluster by \`redis-cli --cluster create ... --cluster-replicas 0\`."
	echo "  No replicas because on $(nproc) cores their replication would take CPU from"
	echo "  the masters without being what is compared; nothing here uses \`--redis-wait\`."
	echo "- tallyd: Release build, tree $REV, \`tallyd --store redis-cluster --cluster"
	echo "  SEEDS --resp-port P --http-port 0 --hot-shard-ops 0\` (no automatic shard growth;"
	echo "  defaults otherwise: $(( $(nproc) > 2 ? $(nproc) - 1 : 1 )) I/O thread(s))."
	echo "- Client: redis-benchmark $REDISV, \`redis-benchmark -c $CLIENTS -P $PIPE -n N INCR KEY\`"
	echo "  against tallyd (KEY \`${KEY[t1]}\`, and \`${KEY[t3]}\` after \`TALLY.SHARDS ${KEY[t3]} 3\`), and against the"
	echo "  master owning the slot of \`hot\` for reference (no tallyd in the path)."
	echo "  N is calibrated to about $SECS s from the faster of two probe runs per configuration,"
	echo "  the same N for both tallyd configurations"
	echo "  (t1 ${NREQ[t1]}, t3 ${NREQ[t3]}, redis ${NREQ[redis]})."
	echo "- $RUNS rounds, configurations alternating (odd rounds \`1 shard, 3 shards, Redis\`,"
	echo "  even rounds reversed); figures are medians. After every run the count is"
	echo "  read back through tallyd and, shard by shard, straight from the masters:"
	echo "  both equal every increment sent (the script stops otherwise)."
	echo "- Placement: \`${KEY[t3]}\` is the first of hot3, hot3a, ... whose 3 shard keys"
	echo "  (\`t:c:{${KEY[t3]}}\`, \`t:c:{${KEY[t3]}#1}\`, \`t:c:{${KEY[t3]}#2}\`) are on 3 different masters:"
	echo "  ports $(shard_masters "${KEY[t3]}" 3 | tr '\n' ' ' | sed 's/ $//'); \`t:c:{${KEY[t1]}}\` is on $(master_of "$(shard_key "${KEY[t1]}" 0)"), \`hot\` on ${PORT[redis]}."
	echo "  Shard counts at the end: ${KEY[t1]} $SHARDS_T1_END, ${KEY[t3]} $SHARDS_T3_END."
	echo ""
	echo "### Throughput (median ops/s of $RUNS rounds)"
	echo ""
	echo "| configuration | median ops/s | min - max ops/s | p50 ms | p99 ms |"
	echo "|---|---:|---:|---:|---:|"
	for c in t1 t3 redis; do
		read -r m lo hi <<<"$(med "$c" 4)"
		printf '| %s | %s | %s - %s | %s | %s |\n' "$(name "$c")" "$(commas "$m")" "$(commas "$lo")" "$(commas "$hi")" \
			"$(med "$c" 5 | cut -d' ' -f1)" "$(med "$c" 6 | cut -d' ' -f1)"
	done
	echo ""
	echo "3 shards / 1 shard: $(div "$MED3" "$MED1")x; tallyd with 1 shard / one Redis master alone: $(div "$MED1" "$MEDR")x."
	if awk -v a="$MIN1" -v b="$MAX1" -v c="$MIN3" -v d="$MAX3" 'BEGIN { exit !(a <= d && c <= b) }'; then
		echo "The min - max ranges of 1 and 3 shards overlap: on this machine the"
		echo "difference between them is within the noise (see the prediction below)."
	else
		echo "The min - max ranges of 1 and 3 shards do not overlap in this run."
	fi
	echo ""
	echo "### Where the commands went"
	echo ""
	echo "Per master, summed over the $RUNS timed runs of each configuration: the calls"
	echo "of \`INFO commandstats\` and \`total_commands_processed\` of \`INFO stats\`, after"
	echo "minus before each run (the script's own INFO calls left out), and the"
	echo "process's CPU time (user + system, /proc/PID/stat)."
	echo ""
	echo "| configuration | master | shards on it | commands | evalsha | incrby | get | set | incr | other | share of commands | CPU s |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for c in t1 t3 redis; do
		all=$(cmds "$c" masters)
		for p in "${MASTERS[@]}"; do
			case $c in
			t1) on=$(shard_masters "${KEY[t1]}" 1 | grep -c "^$p$" || true) ;;
			t3) on=$(shard_masters "${KEY[t3]}" 3 | grep -c "^$p$" || true) ;;
			redis) on=$([ "$p" = "${PORT[redis]}" ] && echo "key" || echo 0) ;;
			esac
			printf '| %s | %s | %s | %s | %s%s | %s%% | %s |\n' "$c" "$p" "$on" "$(commas "$(cmds "$c" "$p")")" \
				"$(for k in $CMDCOLS; do printf '%s | ' "$(commas "$(tot "$c" "$p" "$k")")"; done)" \
				"$(commas "$(other "$c" "$p")")" \
				"$(div "$(( $(cmds "$c" "$p") * 100 ))" "$all" %.0f)" "$(div "$(tot "$c" "$p" cpu)" "$TICK")"
		done
	done
	echo ""
	echo "Commands include those the Lua scripts call (Redis counts each \`redis.call\`"
	echo "in commandstats and in the total); \`other\` is everything else (CLUSTER,"
	echo "PING, ...)."
	echo ""
	echo "### Coalescing in tallyd, and the cost of one increment"
	echo ""
	echo "Client increments are what redis-benchmark sent; tallyd's batches and"
	echo "writes come from its \`INFO stats\` (after minus before each run); Lua calls"
	echo "are the EVALSHA calls of every master. CPU per increment: each process's"
	echo "CPU time over the runs divided by the increments of those runs."
	echo ""
	echo "| configuration | client increments | tallyd batches | increments per batch | EVALSHA calls | increments per Lua call | master commands per 1000 increments | CPU us per increment: tallyd | masters | client |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for c in t1 t3 redis; do
		n=$(sent "$c")
		if [ "$c" = redis ]; then
			printf '| %s | %s | - | - | - | - | %s | - | %s | %s |\n' "$c" "$(commas "$n")" \
				"$(div "$(( $(cmds "$c" masters) * 1000 ))" "$n" %.1f)" "$(us_per "$(tot "$c" masters cpu)" "$n")" \
				"$(awk -v t="$(client_cpu "$c")" -v n="$n" 'BEGIN { printf "%.2f", t * 1e6 / n }')"
			continue
		fi
		w=$(tot "$c" tallyd writes); b=$(tot "$c" tallyd batches); e=$(tot "$c" masters evalsha)
		printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$c" "$(commas "$n")" "$(commas "$b")" \
			"$(div "$w" "$b" %.0f)" "$(commas "$e")" "$(div "$n" "$e" %.0f)" \
			"$(div "$(( $(cmds "$c" masters) * 1000 ))" "$n" %.1f)" \
			"$(us_per "$(tot "$c" tallyd cpu)" "$n")" "$(us_per "$(tot "$c" masters cpu)" "$n")" \
			"$(awk -v t="$(client_cpu "$c")" -v n="$n" 'BEGIN { printf "%.2f", t * 1e6 / n }')"
	done
	echo ""
	TUS1=$(us_per "$(tot t1 tallyd cpu)" "$(sent t1)")
	TUS3=$(us_per "$(tot t3 tallyd cpu)" "$(sent t3)")
	MUS1=$(us_per "$(tot t1 masters cpu)" "$(sent t1)")
	MUS3=$(us_per "$(tot t3 masters cpu)" "$(sent t3)")
	RUSR=$(us_per "$(tot redis masters cpu)" "$(sent redis)")
	IPB1=$(div "$(tot t1 tallyd writes)" "$(tot t1 tallyd batches)" %.0f)
	IPB3=$(div "$(tot t3 tallyd writes)" "$(tot t3 tallyd batches)" %.0f)
	CPI1=$(div "$(cmds t1 masters)" "$(sent t1)" %.2f)
	SH3=$(for p in "${MASTERS[@]}"; do printf '%s%% ' "$(div "$(( $(tot t3 "$p" evalsha) * 100 ))" "$(tot t3 masters evalsha)" %.0f)"; done | sed 's/ $//')
	CPB1=$(div "$(cmds t1 masters)" "$(tot t1 tallyd batches)" %.1f)
	CPB3=$(div "$(cmds t3 masters)" "$(tot t3 tallyd batches)" %.1f)
	MUSB1=$(awk -v u="$MUS1" -v b="$IPB1" 'BEGIN { printf "%.1f", u * b }')
	KB1=$(awk -v u="$MUS1" 'BEGIN { if (u > 0) printf "%.0f", 1e6 / u / 1000; else print "n/a" }')
	KBT=$(awk -v u="$TUS1" 'BEGIN { if (u > 0) printf "%.0f", 1e6 / u / 1000; else print "n/a" }')
	echo "### What these figures predict for separate machines"
	echo ""
	echo "On this machine the 3 masters, tallyd and redis-benchmark share $(nproc) cores,"
	echo "so the throughput table cannot show what 3 shards buy: work moved from one"
	echo "master to three still runs on the same cores. What carries over to separate"
	echo "machines is the work each process does per increment (CPU us per"
	echo "increment above) and where the commands land (the per-master table)."
	echo "These are estimates from CPU time measured under contention, not"
	echo "measurements on separate machines."
	echo ""
	echo "- Coalescing: tallyd's committer turns all the INCRs of a hot key waiting"
	echo "  in its queue into one EVALSHA per batch: $IPB1 client increments per batch"
	echo "  (and per Lua call) with 1 shard, $IPB3 with 3 shards, out of at most"
	echo "  $CLIENTS x $PIPE = $((CLIENTS * PIPE)) in flight. The script adds the batch's sum with one"
	echo "  INCRBY and reads the value back with one GET (Lua numbers are doubles, so"
	echo "  it is read as a string), and tallyd works out each increment's reply from"
	echo "  it; only a sum that would overflow int64 is added one increment at a time."
	echo "  So a master's work is per batch: $CPB1 commands per batch with 1 shard"
	echo "  (EVALSHA; GETs of the batch token, of the shard count and of the value;"
	echo "  INCRBY; SET of the token), i.e. $CPI1 per client increment, and ${MUS1} us"
	echo "  of CPU per increment (${MUSB1} us per batch), against ${RUSR} us for a plain"
	echo "  INCR sent straight to it."
	echo "- One hot key, 1 shard: every batch lands on one master's single thread."
	echo "  At $IPB1 increments per batch that thread would carry about"
	echo "  1 / ${MUS1} us = ${KB1}k increments/s, and more with bigger batches: its work grows"
	echo "  with batches, not increments. The front ends reach their bound first"
	echo "  (next point), so more tallyd instances on their own machines raise a"
	echo "  key's rate until that master's thread is busy with their batches."
	echo "- 3 shards on 3 masters: each batch writes one shard (the shard turns"
	echo "  from batch to batch, and instances start at different shards) and reads"
	echo "  the 3 back for the reply, an INCR answering the total. The Lua calls split"
	echo "  $SH3 over the masters here, so each master carries about a third of the"
	echo "  batches (the reads add 3 GETs per batch: $CPB3 commands per batch in all)."
	echo "  The masters spent ${MUS3} us of CPU per increment in all with 3 shards,"
	echo "  against ${MUS1} with 1: per-batch work spread over three processes that each"
	echo "  wake per batch on $(nproc) shared cores. Shards matter once many front ends'"
	echo "  batches would fill one master's thread."
	echo "- One tallyd front end: ${TUS1} us of its CPU per increment with 1 shard"
	echo "  (${TUS3} with 3), i.e. about ${KBT}k increments/s per core it gets, spread over"
	echo "  its I/O threads (parsing and answering pipelined clients) and one"
	echo "  committer thread, which waits for the cluster once per batch with 1"
	echo "  shard (the script) and twice with 3 (the script, then the reads of every"
	echo "  shard): at most batch size / (round trips x RTT + Redis time) per key."
	echo "  Across machines the RTT grows from loopback's microseconds to a fraction"
	echo "  of a millisecond; more increments then wait per batch, so the rate holds"
	echo "  while enough are in flight (here at most $((CLIENTS * PIPE))), and each reply waits"
	echo "  one or two RTTs more."
	echo "- Prediction: tallyd spends about ${TUS1} / ${MUS1} = $(div "$TUS1" "$MUS1" %.0f) times the master's CPU per"
	echo "  increment, so with 1 shard one master keeps up with about that many"
	echo "  tallyd cores at this batch size: the front ends, not the master, are the"
	echo "  bound, and 3 shards change little for one tallyd. With several tallyd"
	echo "  instances on their own machines writing one key, the rate grows with"
	echo "  their number up to about ${KB1}k increments/s per master at this batch"
	echo "  size (higher with bigger batches), and 3 shards on 3 masters raise that"
	echo "  about 3x, until the network is the bound."
	echo ""
	echo "### What this benchmark does not do (yet)"
	echo ""
	echo "- One tallyd front end only; several front ends sharing the cluster, where"
	echo "  shards should matter, are covered for exactness by"
	echo "  \`tests/cluster/test_cluster_store.sh\`, not measured."
	echo "- Everything on one $(nproc)-core machine over loopback: no network latency,"
	echo "  no per-machine parallelism; redis-benchmark itself takes a large part of a core."
	echo "- No replicas, no persistence on the masters, no \`--redis-wait\`: the cost"
	echo "  of replication and of WAIT is not measured."
	echo "- Only hot-key INCR; no reads, events or unique types on the cluster store."
	echo ""
	echo "### Raw runs"
	echo ""
	echo "round, configuration, increments sent, ops/s, p50 ms, p99 ms, client CPU s:"
	echo ""
	echo '```'
	cat "$RAW"
	echo '```'
	echo ""
	echo "Per run and node (masters by port, and tallyd): round, configuration, node,"
	echo "stat (commandstats calls by command, total commands, CPU ticks of 1/$TICK s,"
	echo "tallyd's writes, batches, store entries), after minus before:"
	echo ""
	echo '```'
	cat "$NODES"
	echo '```'
	echo "<!-- cluster:end -->"
} >"$TMP/section.md"

doc_section cluster "$TMP/section.md" "$OUT"
log "written to $OUT"
sed -n '/^### Throughput/,/^### What these/p' "$TMP/section.md"
