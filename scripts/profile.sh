#!/usr/bin/env bash
# profile.sh: where tallyd's time goes under one workload, with perf
# (sampled CPU, kernel included, per thread) or callgrind (instructions
# executed, counted exactly: a small change shows even when this machine's
# noise hides it in the rates). Run by `make profile`.
#
# Usage: scripts/profile.sh [--tool perf|callgrind] [--ops N] [--out DIR]
#                           WORKLOAD [BUILD_DIR] [-- TALLYD_FLAG...]
#   WORKLOAD   incr      INCR of random keys out of 1M, -c 50 -P 16
#              incr-hot  INCR of one key, -c 50 -P 16
#              incr-p1   INCR of random keys, -c 50 -P 1
#              like      TALLY.ADD article like __rand_int__ 1__rand_int__,
#                        -r 100000 (as make bench's like-p16: articles
#                        out of 100,000, members the same numbers behind
#                        a 1), -c 50 -P 16
#              mcount    TALLY.MCOUNT of 50 random articles of those,
#                        -c 50 -P 1
#   BUILD_DIR  a build holding tallyd (default build-prof, built here
#              optimised as the Release build, -O3, with symbols)
#   --tool     perf (default) or callgrind
#   --ops      commands measured (default 2,000,000 for perf and 300,000
#              for callgrind, which runs tallyd some 50 times slower;
#              mcount and incr-p1: a tenth of that)
#   --out      where perf.data or callgrind.out and report.txt go
#              (default BUILD_DIR/profile-WORKLOAD-TOOL)
#   -- ...     more tallyd flags, e.g. -- --threads 1 (not --data, the
#              ports, --bind or --log-level, which this script sets)
#
# A fresh data folder is loaded first (1M INCRs, or 1M likes; a fifth of
# that under callgrind), unmeasured; then only the measured commands are
# recorded. The report: tallyd's CPU per thread over the measured part
# (perf) and the top functions, self and inclusive (callgrind: also
# instructions per command).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench_lib.sh"

TOOL=perf
OPS=""
OUT=""
usage() { sed -n '/^# Usage:/,/^# A fresh/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--tool|--ops|--out)
		[ $# -ge 2 ] || { echo "profile: $1 needs a value" >&2; usage; }
		case $1 in --tool) TOOL=$2 ;; --ops) OPS=$2 ;; --out) OUT=$2 ;; esac
		shift 2 ;;
	-h|--help) usage ;;
	-*) echo "profile: unknown flag $1" >&2; usage ;;
	*) break ;;
	esac
done
WORKLOAD=${1:-}
BUILD=$ROOT/build-prof
[ $# -gt 0 ] && shift
if [ $# -gt 0 ] && [ "$1" != -- ]; then
	BUILD=$1
	shift
fi
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
EXTRA=()
if [ $# -gt 0 ]; then
	[ "$1" = -- ] || usage
	shift
	EXTRA=("$@")
fi
case $TOOL in perf|callgrind) ;; *) echo "profile: --tool is perf or callgrind, not '$TOOL'" >&2; exit 2 ;; esac
case $WORKLOAD in incr|incr-hot|incr-p1|like|mcount) ;; *) usage ;; esac
if [ -n "$OPS" ] && ! [[ $OPS =~ ^[1-9][0-9]{0,8}$ ]]; then
	echo "profile: --ops is a count from 1 to 999999999, not '$OPS'" >&2
	exit 2
fi
log() { echo "profile: $*" >&2; }

for cmd in redis-cli redis-benchmark python3; do
	command -v "$cmd" >/dev/null || { log "$cmd is missing (scripts/deps.sh installs it)"; exit 1; }
done
if [ "$TOOL" = perf ]; then
	command -v perf >/dev/null || { log "perf is missing (scripts/deps.sh --profile installs it)"; exit 1; }
else
	for cmd in valgrind callgrind_control callgrind_annotate; do
		command -v "$cmd" >/dev/null || { log "$cmd is missing (scripts/deps.sh --profile installs it)"; exit 1; }
	done
fi

if [ "$BUILD" = "$ROOT/build-prof" ]; then
	# The optimisation of the Release build make bench measures (-O3),
	# with symbols: RelWithDebInfo's own -O2 compiles some code apart
	# (GCC 12 keeps a byte loop at -O2 that -O3 makes one bswap).
	cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O3 -g -DNDEBUG" >/dev/null
	cmake --build "$BUILD" -j "$(nproc)" --target tallyd >/dev/null
fi
TALLYD=$BUILD/tallyd
[ -x "$TALLYD" ] || { log "no tallyd in $BUILD"; exit 1; }

# The measured and the loaded counts.
if [ -z "$OPS" ]; then
	OPS=2000000
	[ "$TOOL" = callgrind ] && OPS=300000
	case $WORKLOAD in incr-p1|mcount) OPS=$((OPS / 10)) ;; esac
fi
LOAD=1000000
[ "$TOOL" = callgrind ] && LOAD=200000
OUT=${OUT:-$BUILD/profile-$WORKLOAD-$TOOL}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

TMP=$(mktemp -d)
PID=""
cleanup() {
	if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
		kill -TERM "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

PORT=$(free_port)
TARGS=(--data "$TMP/data" --bind 127.0.0.1 --resp-port "$PORT" --http-port 0 --log-level warn
	${EXTRA[@]+"${EXTRA[@]}"})
if [ "$TOOL" = callgrind ]; then
	valgrind --tool=callgrind --instr-atstart=no \
		--callgrind-out-file="$OUT/callgrind.out" "$TALLYD" "${TARGS[@]}" \
		>"$OUT/tallyd.log" 2>&1 &
else
	"$TALLYD" "${TARGS[@]}" >"$OUT/tallyd.log" 2>&1 &
fi
PID=$!
wait_ping "$PORT"

# rb N CLIENTS PIPELINE ARGS...: redis-benchmark, its rate on stdout
rb() {
	local n=$1 c=$2 p=$3 out
	shift 3
	out=$(redis-benchmark -p "$PORT" -n "$n" -c "$c" -P "$p" -q "$@" 2>&1) ||
		{ log "redis-benchmark failed: $out"; return 1; }
	tr '\r' '\n' <<<"$out" | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}
MCOUNT=(TALLY.MCOUNT article like)
for i in $(seq 1 50); do MCOUNT+=(__rand_int__); done
case $WORKLOAD in
incr|incr-hot|incr-p1)
	log "loading $LOAD INCRs of random keys"
	rb "$LOAD" 50 16 -r 1000000 INCR key:__rand_int__ >/dev/null ;;
like|mcount)
	log "loading $LOAD likes"
	rb "$LOAD" 50 16 -r 100000 TALLY.ADD article like __rand_int__ 1__rand_int__ >/dev/null ;;
esac
# What the load left for the background threads (checkpoints, flushes) is
# not what the measured commands cost.
sleep 3

measure() {
	case $WORKLOAD in
	incr) rb "$OPS" 50 16 -r 1000000 INCR key:__rand_int__ ;;
	incr-hot) rb "$OPS" 50 16 INCR hot ;;
	incr-p1) rb "$OPS" 50 1 -r 1000000 INCR key:__rand_int__ ;;
	like) rb "$OPS" 50 16 -r 100000 TALLY.ADD article like __rand_int__ 1__rand_int__ ;;
	mcount) rb "$OPS" 50 1 -r 100000 "${MCOUNT[@]}" ;;
	esac
}
# thread_ticks: "name/tid ticks" per thread of tallyd (user + system, in
# 1/100 s)
thread_ticks() {
	for t in /proc/"$PID"/task/*; do
		printf '%s/%s %s\n' "$(cat "$t/comm")" "${t##*/}" "$(awk '{ print $14 + $15 }' "$t/stat")"
	done | LC_ALL=C sort -k1,1
}

REPORT=$OUT/report.txt
{
	echo "tallyd $("$TALLYD" --version | awk '{ print $2 }'), tree $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "workload $WORKLOAD, $OPS commands measured after $LOAD loaded; tool $TOOL${EXTRA[*]+; tallyd flags: ${EXTRA[*]}}"
	echo "machine: $(nproc) CPUs ($CPU), $MEM; load average $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$REPORT"

if [ "$TOOL" = perf ]; then
	thread_ticks >"$TMP/t0"
	rm -f "$OUT/perf.data"
	perf record -q -g -o "$OUT/perf.data" -p "$PID" >"$OUT/perf.log" 2>&1 &
	PERF=$!
	sleep 0.5
	kill -0 "$PERF" 2>/dev/null ||
		{ log "perf record failed: $(cat "$OUT/perf.log")"; exit 1; }
	RATE=$(measure)
	kill -INT "$PERF" 2>/dev/null || true
	wait "$PERF" || true
	[ -s "$OUT/perf.data" ] ||
		{ log "perf record wrote nothing: $(cat "$OUT/perf.log")"; exit 1; }
	thread_ticks >"$TMP/t1"
	{
		echo "rate: $RATE commands/s (under perf)"
		echo
		echo "tallyd's CPU per thread over the measured commands:"
		LC_ALL=C join "$TMP/t0" "$TMP/t1" | awk -v n="$OPS" '$3 > $2 {
			printf "  %-20s %6.2f s  %6.3f us per command\n", $1, ($3 - $2) / 100, ($3 - $2) * 1e4 / n }'
		echo
		echo "share of samples per thread:"
		perf report -i "$OUT/perf.data" --no-children --sort comm --stdio -g none \
			>"$TMP/by_comm" 2>/dev/null || true
		awk '!/^#/ && /%/' "$TMP/by_comm" | sed -n 1,12p
		echo
		echo "top functions (self), by thread:"
		perf report -i "$OUT/perf.data" --no-children --sort comm,dso,sym --stdio -g none \
			>"$TMP/by_sym" 2>/dev/null || true
		awk '!/^#/ && /%/' "$TMP/by_sym" | sed -n 1,40p
	} >>"$REPORT"
else
	callgrind_control -i on "$PID" >/dev/null
	RATE=$(measure)
	callgrind_control -i off "$PID" >/dev/null
	kill -TERM "$PID"
	wait "$PID" || true
	PID=""
	callgrind_annotate "$OUT/callgrind.out" >"$TMP/self" 2>/dev/null || true
	TOTAL=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }' "$TMP/self")
	[ -n "$TOTAL" ] || { log "no totals in $OUT/callgrind.out"; exit 1; }
	{
		echo "rate: $RATE commands/s (under valgrind: only the instruction counts mean anything)"
		echo "instructions: $(commas "$TOTAL") in all, $(commas "$((TOTAL / OPS))") per command (every thread of tallyd; kernel not counted)"
		echo
		echo "top functions (self):"
		awk '/file:function/ { on = 1; next } on && NF' "$TMP/self" | sed -n 1,30p | cut -c1-160
		echo
		echo "top functions (inclusive):"
		callgrind_annotate --inclusive=yes "$OUT/callgrind.out" >"$TMP/incl" 2>/dev/null || true
		awk '/file:function/ { on = 1; next } on && NF' "$TMP/incl" | sed -n 1,30p | cut -c1-160
	} >>"$REPORT"
fi
cat "$REPORT"
log "report: $REPORT"
