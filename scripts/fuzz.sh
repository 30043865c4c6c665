#!/bin/sh
# Build the libFuzzer harnesses of tests/fuzz with clang (ASan + UBSan) and
# run each for a fixed time, seeded with tests/fuzz/corpus/<harness>.
# Usage: scripts/fuzz.sh [SECONDS]   (per harness; default 20)
# Environment:
#   FUZZ_BUILD    build folder (default build-fuzz); it keeps the corpus
#                 each harness grew (corpus/<harness>), the logs
#                 (logs/<harness>.log) and any crash, leak or timeout input
#                 (artifacts/<harness>/).
#   FUZZ_TARGETS  harnesses to run (default: all six).
#   FUZZ_JOBS     build parallelism (default: nproc).
# Exits non-zero if a harness found a crash, a leak, a timeout or ran out of
# memory; the input that did it is in artifacts/ and the report in the log.
# Reproduce one: FUZZ_BUILD/tests/fuzz/fuzz_X FUZZ_BUILD/artifacts/X/crash-...
# (fuzz_http and fuzz_commands keep one engine for the whole run, so one of
# their findings may need the engine state earlier inputs left). Once
# fixed, copy the input into tests/fuzz/corpus/X/: ctest replays it.
set -eu
cd "$(dirname "$0")/.."

SECONDS_EACH=${1:-20}
case $SECONDS_EACH in
'' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
BUILD=${FUZZ_BUILD:-build-fuzz}
TARGETS=${FUZZ_TARGETS:-"resp commands http record keys import"}
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}

CC=clang cmake -S . -B "$BUILD" -DTALLY_FUZZ=ON \
	-DCMAKE_BUILD_TYPE=RelWithAsserts >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target fuzzers >/dev/null

# Longest input per harness: requests and pipelines need a few KiB; a
# record, a key or a value is a few dozen bytes, so short inputs keep
# those fuzzers on the formats' edges.
max_len() {
	case $1 in
	resp | commands | http) echo 8192 ;;
	import) echo 4096 ;;
	*) echo 256 ;;
	esac
}

status=0
printf '%-8s %6s %12s %10s %6s %8s %12s %8s\n' harness secs execs \
	execs/s cov ft corpus rss_mb
for h in $TARGETS; do
	bin="$BUILD/tests/fuzz/fuzz_$h"
	seeds="tests/fuzz/corpus/$h"
	work="$BUILD/corpus/$h"
	art="$BUILD/artifacts/$h"
	log="$BUILD/logs/$h.log"
	if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
		echo "fuzz: no harness or seed corpus for '$h'" >&2
		exit 2
	fi
	mkdir -p "$work" "$art" "$(dirname "$log")"
	dict=""
	if [ -f "tests/fuzz/$h.dict" ]; then
		dict="-dict=tests/fuzz/$h.dict"
	fi
	# New inputs go to the build folder's corpus; the seeds stay as
	# committed. -timeout is per input and generous: CI machines are
	# shared.
	rc=0
	# shellcheck disable=SC2086
	"$bin" "$work" "$seeds" $dict -max_total_time="$SECONDS_EACH" \
		-max_len="$(max_len "$h")" -timeout=30 -rss_limit_mb=2048 \
		-print_final_stats=1 \
		-artifact_prefix="$art/" >"$log" 2>&1 || rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
	last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
	cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
	corp=$(echo "$last" | sed -n 's/.* corp: \([^ ]*\).*/\1/p')
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
	printf '%-8s %6s %12s %10s %6s %8s %12s %8s\n' "$h" "$SECONDS_EACH" \
		"${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
		"${rss:-?}"
	if [ "$rc" -ne 0 ]; then
		echo "fuzz: fuzz_$h FAILED (exit $rc); log: $log; inputs:" >&2
		ls "$art" >&2 || true
		grep -E -A 40 '^==[0-9]+==|property failed|runtime error|ERROR: libFuzzer' \
			"$log" | head -n 80 >&2 || true
		status=1
	fi
done
exit $status
