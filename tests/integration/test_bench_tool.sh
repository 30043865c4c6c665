#!/usr/bin/env bash
# test_bench_tool.sh: tally_bench, the in-process benchmark make bench runs:
# its disk-flush probe (one durable write's cost on this disk, reported
# next to the comparison with Redis), a short run of a counting workload
# and of bytes-per-like (each checks its own counts and fails on a wrong
# one), its refusal of a memory filesystem and of bad options, and that it
# leaves no folder behind.
source "$(dirname "$0")/lib.sh" "$@"

BENCH=$BUILD_DIR/tally_bench
# tally_bench refuses a memory filesystem (fsync is free there): where the
# temp folder is one, work in the build folder, as bench.sh falls back to
# a folder of the tree.
if [ "$(stat -f -c %T "$TMP")" = tmpfs ]; then
	DIR=$(mktemp -d "$BUILD_DIR/bench-it.XXXXXX")
	# Removed at exit too, before lib.sh's cleanup, which keeps the status.
	trap 'st=$?; rm -rf "$DIR"; (exit $st); _on_exit' EXIT
else
	DIR=$TMP/bench
	mkdir -p "$DIR"
fi

field() { # JSON-LINE KEY: a top-level value of tally_bench --json
	printf '%s\n' "$1" | tr ',' '\n' | tr -d '{}"' |
		awk -F: -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print "missing" }'
}
# An awk comparison of two numbers, as 1 or 0.
num_cmp() { awk -v a="$1" -v b="$3" "BEGIN { print (a $2 b) ? 1 : 0 }"; }

section "--list names every workload, disk-flush included"
list=$("$BENCH" --list)
assert_contains "disk-flush listed" "$list" "disk-flush"
assert_contains "bytes-per-like listed" "$list" "bytes-per-like"

section "disk-flush: durable writes timed, one at a time"
out=$("$BENCH" --json --seconds 1 --dir "$DIR" disk-flush)
assert_eq "one JSON line" 1 "$(printf '%s\n' "$out" | wc -l)"
assert_eq "name" disk-flush "$(field "$out" name)"
assert_eq "3000 bytes per write" 3000 "$(field "$out" write_bytes)"
assert_eq "one write at a time" 1 "$(field "$out" window)"
ops=$(field "$out" ops)
assert_int_cmp "some writes in 1 s" "$ops" -gt 0
assert_eq "one fdatasync per write" "$ops" "$(field "$out" syncs)"
assert_eq "writes=0: libtally is not involved" 0 "$(field "$out" writes)"
ms=$(field "$out" fsync_ms)
p50=$(field "$out" fsync_p50_ms)
p99=$(field "$out" fsync_p99_ms)
assert_eq "a write takes time" 1 "$(num_cmp "$ms" '>' 0)"
assert_eq "p50 <= p99" 1 "$(num_cmp "$p50" '<=' "$p99")"
# ops in 1 s at ms each: the average and the rate agree (within 20%:
# the loop's own time is outside the timed writes).
secs=$(field "$out" seconds)
assert_eq "rate and average agree" 1 \
	"$(awk -v o="$ops" -v m="$ms" -v s="$secs" 'BEGIN { t = o * m / 1000; print (t <= s * 1.001 && t >= s * 0.8) ? 1 : 0 }')"
assert_eq "its folder is removed" "" "$(ls "$DIR")"

section "disk-flush on a disk that fails while it times: the error, no figure"
# tests/fault/faultfs.so fails every sync of files in DIR once the control
# file says so: switched on after tally_bench says its file is ready, so
# that a timed fdatasync is what fails, not the fsync of the setup. (The
# shim loads before the ASan runtime in the sanitizer build, as in
# test_faults.sh.)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
echo off >"$TMP/ctl"
LD_PRELOAD=$BUILD_DIR/faultfs.so TALLY_FAULT_DIR=$DIR TALLY_FAULT_CTL=$TMP/ctl \
	"$BENCH" --json --seconds 60 --dir "$DIR" disk-flush >"$TMP/out" 2>"$TMP/err" &
bench_pid=$!
BG_PIDS+=("$bench_pid")
for _ in $(seq 600); do
	grep -q "ready, timing writes" "$TMP/err" && break
	sleep 0.05
done
assert_contains "it says when the timed writes begin" "$(cat "$TMP/err")" \
	"ready, timing writes for 60 s"
echo eio-fsync >"$TMP/ctl"
set +e
wait "$bench_pid"
rc=$?
set -e
assert_eq "a failed fdatasync fails the probe" 1 "$rc"
assert_eq "and prints no figure" "" "$(cat "$TMP/out")"
assert_contains "it names the file and the error" "$(cat "$TMP/err")" \
	"flush.dat: Input/output error"
assert_eq "its folder is removed all the same" "" "$(ls "$DIR")"

section "a counting workload and bytes-per-like: exact, folders removed"
out=$("$BENCH" --json --seconds 1 --dir "$DIR" incr-hot-sync-1t)
assert_eq "hot INCR acknowledged every write it counted" \
	"$(field "$out" ops)" "$(field "$out" writes)"
assert_int_cmp "hot INCR: some writes" "$(field "$out" ops)" -gt 0
out=$("$BENCH" --json --likes 20000 --dir "$DIR" bytes-per-like)
assert_eq "bytes-per-like loaded 20000 likes" 20000 "$(field "$out" likes)"
assert_eq "bytes on disk measured" 1 \
	"$(num_cmp "$(field "$out" compacted_bytes_per_stored_like)" '>' 0)"
assert_eq "no folder left" "" "$(ls "$DIR")"

section "refusals: a memory filesystem, bad options"
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
	set +e
	err=$("$BENCH" --seconds 1 --dir /dev/shm disk-flush 2>&1)
	rc=$?
	set -e
	assert_eq "tmpfs refused" 1 "$rc"
	assert_contains "and why" "$err" "fsync costs nothing"
else
	say "NOTE no tmpfs at /dev/shm on this machine: the refusal is not checked here"
fi
set +e
err=$("$BENCH" --seconds 0 disk-flush 2>&1)
rc=$?
set -e
assert_eq "--seconds 0: usage error" 2 "$rc"
assert_contains "and its range" "$err" "--seconds needs a number"
set +e
err=$("$BENCH" no-such-workload 2>&1)
rc=$?
set -e
assert_eq "an unknown workload: usage error" 2 "$rc"
assert_contains "named" "$err" "no workload no-such-workload"

finish
