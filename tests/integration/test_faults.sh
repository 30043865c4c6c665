#!/usr/bin/env bash
# A real tallyd whose disk fails: tests/fault/faultfs.so (LD_PRELOAD) makes
# the writes and fsyncs of the data folder fail with EIO or ENOSPC while a
# control file says so.
#  1. under pipelined load (ack_load records every acknowledged write),
#     EIO on writes, ENOSPC on writes, then EIO on fsync, each switched on
#     and off again: writes get a clear error (RESP and HTTP 503), reads are
#     served, INFO and /metrics show it, and once the fault clears tallyd
#     recovers in process; then every acknowledged write is there and
#     counts equal memberships;
#  2. one failed fsync of the WAL: the writes of that batch are answered
#     with the error, never OK; after the recovery a retry with the same ID
#     is applied exactly once;
#  3. SIGTERM while the store is failed exits 0; recovery by restart;
#  4. load, EIO for good, kill -9, restart without the shim: every
#     acknowledged write of every round is there;
#  5. an I/O thread that cannot start (tests/fault/faultthread.so): tallyd
#     says which, stops the threads already running, closes the store and
#     exits 1; the data is intact on the next start;
#  6. a journal record damaged on disk (by hand, after kill -9): the
#     replay stops before it, and the records dropped after it are counted
#     (INFO, /metrics) and named in the log.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli curl

SHIM=$BUILD_DIR/faultfs.so
LOAD=$BUILD_DIR/ack_load
[ -f "$SHIM" ] || { fail "the fault shim is built ($SHIM)"; finish; }
[ -x "$LOAD" ] || { fail "ack_load is built ($LOAD)"; finish; }
DATA=$TMP/data
CTL=$TMP/fault.ctl
ACK=$TMP/ack
mkdir -p "$ACK"
echo off >"$CTL"
# A sanitized tallyd wants its runtime first among its libraries; the shim
# comes first here, and only forwards calls.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

start_with_shim() {
	LD_PRELOAD=$SHIM TALLY_FAULT_DIR=$DATA TALLY_FAULT_CTL=$CTL \
		start_tallyd "$DATA" "$@"
}

# The shim reads the control file again within 2 ms.
fault() {
	echo "$1" >"$CTL"
	sleep 0.05
}

store_status() {
	rcli info persistence | tr -d '\r' | sed -n 's/^store_status://p'
}

# wait_status WANT SECONDS: until INFO says the store is WANT.
wait_status() {
	local want=$1 deadline=$((SECONDS + $2)) s=""
	while [ $SECONDS -lt $deadline ]; do
		s=$(store_status)
		[ "$s" == "$want" ] && break
		sleep 0.1
	done
	assert_eq "store_status becomes $want (within $2 s)" "$want" "$s"
}

# check_refused CAUSE: a write is refused with the cause, over RESP and
# HTTP, and the reads still answer the values of before the fault.
check_refused() {
	local cause=$1 out
	out=$(rcli incr f:refused)
	assert_contains "$cause: INCR is refused" "$out" "ERR store write failed ($cause): writes are refused until the fault clears"
	out=$(rcn tally.add article like 1 99)
	assert_contains "$cause: TALLY.ADD is refused" "$out" "store write failed ($cause)"
	http POST /v1/counters/f:refused/incr '{"by":1}'
	assert_eq "$cause: HTTP write answers 503" "503" "$HTTP_CODE"
	assert_contains "$cause: HTTP error names the cause" "$HTTP_BODY" "store write failed ($cause)"
	http POST /v1/events '[{"ctype":"article","ktype":"like","content":1,"member":98},{"ctype":"article","ktype":"view","content":1,"member":0}]'
	assert_eq "$cause: an HTTP array whose writes all failed answers 503, not 207" "503" "$HTTP_CODE"
	assert_contains "... naming the cause" "$HTTP_BODY" "store write failed ($cause)"
	HTTP_5XX=0
	assert_eq "$cause: GET still answers" "10" "$(rcli get f:a)"
	assert_eq "$cause: TALLY.COUNT still answers" "(integer) 5" "$(rcn tally.count article like 1)"
	assert_match "$cause: TALLY.HAS still answers" '^[0-9]+$' "$(rcli tally.has article like 1 3)"
	http GET /v1/counters/f:a
	assert_eq "$cause: HTTP read answers 200" "200" "$HTTP_CODE"
	assert_eq "$cause: the refused writes changed nothing visible" "" "$(rcli get f:refused)"
	assert_eq "$cause: /metrics tally_store_failed" "1" "$(metric tally_store_failed)"
}

check_recovered() {
	local what=$1
	wait_status ok 60
	assert_eq "$what: INCR is acknowledged again" "11" "$(rcli incr f:a)"
	assert_eq "$what: ... and read back" "11" "$(rcli get f:a)"
	rcli decr f:a >/dev/null
	assert_eq "$what: /metrics tally_store_failed" "0" "$(metric tally_store_failed)"
}

# verify ROUND: ack_load's checks against the running tallyd.
verify() {
	local round=$1 vrc=0
	timeout 300 "$LOAD" verify "$T_RESP" "$round" "$ACK" >"$ACK/verify.$round.out" 2>&1 || vrc=$?
	report "$ACK/verify.$round.out"
	assert_eq "round $round: verify exits 0" "0" "$vrc"
}

# wait_acks ROUND N: until the load of ROUND has N acknowledgements.
wait_acks() {
	local deadline=$((SECONDS + 60)) lines=0
	while [ $SECONDS -lt $deadline ]; do
		lines=$(wc -l 2>/dev/null <"$ACK/ack.$1" || echo 0)
		[ "$lines" -ge "$2" ] && break
		sleep 0.1
	done
	assert_int_cmp "round $1: $2 writes acknowledged before the fault" "$lines" -ge "$2"
}

section "1. faults under load, recovery in process"
# Counters checkpoint every few batches, so faults also hit the checkpoint
# thread's writes, not only the committer's.
start_with_shim --checkpoint-kib 4
say "tallyd pid $T_PID, RESP $T_RESP, HTTP $T_HTTP"
{
	for i in $(seq 1 10); do echo "incr f:a"; done
	for m in 1 2 3 4 5; do echo "tally.add article like 1 $m"; done
} | timeout 30 redis-cli -p "$T_RESP" >"$TMP/setup.out" 2>&1 || true
assert_not_contains "setup writes succeed" "$(cat "$TMP/setup.out")" "ERR"
assert_eq "store_status is ok at start" "ok" "$(store_status)"

"$LOAD" load "$T_RESP" 1 25 4 "$ACK" >"$ACK/load.1.out" 2>&1 &
load_pid=$!
BG_PIDS+=("$load_pid")
wait_acks 1 500

fault eio-write
check_refused "I/O error"
assert_eq "INFO says why" "failed-io-error" "$(store_status)"
sleep 1.5
assert_eq "the store stays failed while the fault lasts" "failed-io-error" "$(store_status)"
out=$(rcli tally.backup "$TMP/bk-during-fault" 2>&1 || true)
assert_contains "a backup while the store is failed says so" "$out" "store write failed"
fault off
check_recovered "after EIO on writes"

fault enospc-write
rcli incr f:trigger >/dev/null
check_refused "no space left on device"
assert_eq "INFO says why" "failed-no-space" "$(store_status)"
fault off
check_recovered "after ENOSPC on writes"

fault eio-fsync
rcli incr f:trigger >/dev/null
check_refused "I/O error"
fault off
check_recovered "after EIO on fsync"
assert_int_cmp "/metrics counts the recoveries" "$(metric tally_store_recoveries_total)" -ge 3
assert_int_cmp "/metrics counts the failures" "$(metric tally_store_failures_total)" -ge 3

lrc=0
wait "$load_pid" || lrc=$?
assert_eq "round 1: load generator exits 0" "0" "$lrc"
cat "$ACK/load.1.out"
assert_match "round 1: some writes got an error reply" 'acknowledged, [1-9][0-9]* error' "$(cat "$ACK/load.1.out")"
verify 1
assert_alive

section "2. one failed fsync of a journal file, then of the WAL"
# A batch of counters alone is synced in a journal file; a like with its
# entries in RocksDB's WAL.
fault "eio-fsync-once .journal"
out=$(rcli incr f:once)
assert_contains "the write whose fsync failed is not acknowledged" "$out" "ERR store write failed (I/O error)"
assert_eq "the fault was consumed by that write" "off" "$(cat "$CTL")"
wait_status ok 60
once=$(rcli get f:once)
assert_match "its outcome is unknown: absent or applied once" '^(|1)$' "$once"
if [ -n "$once" ]; then
	say "(the failed write is there after the reopen: its data had reached the page cache)"
else
	say "(the failed write is absent after the reopen)"
fi

fault "eio-fsync-once .log"
out=$(rcli tally.add article like 7 77 ID once-tok)
assert_contains "a write with an ID whose fsync failed gets the error" "$out" "ERR store write failed"
wait_status ok 60
assert_eq "its retry with the same ID is answered with a count" "1" "$(rcli tally.add article like 7 77 ID once-tok)"
assert_eq "a second retry changes nothing" "1" "$(rcli tally.add article like 7 77 ID once-tok)"
assert_eq "the like is counted exactly once" "1" "$(rcli tally.count article like 7)"

section "2b. async mode: a record reaches its file only after those before it"
# Records hold absolute values: a machine crash that kept a later record
# and lost an earlier one in the other file would keep half of a batch.
# So in async mode a record in a journal file waits for the WAL's earlier
# ones to be synced, and the other way round: a fault on that sync fails
# the write that needed it. (--flush-ms 60000: no periodic sync meanwhile.)
stop_and_check
start_with_shim --durability async --flush-ms 60000
assert_eq "async: a like with an ID (its record in RocksDB's WAL)" "1" \
	"$(rcli tally.add article like 8 88 ID async-tok)"
fault "eio-fsync-once .log"
out=$(rcli incr f:async)
assert_contains "a journal file record after it syncs the WAL first: its failure fails the write" \
	"$out" "ERR store write failed"
assert_eq "the fault was consumed by that write" "off" "$(cat "$CTL")"
wait_status ok 60
assert_eq "async: a counter alone (its record in a journal file)" "1" \
	"$(rcli incr f:async2)"
fault "eio-fsync-once .journal"
out=$(rcli tally.add article like 8 89 ID async-tok2)
assert_contains "a WAL record after it syncs the journal file first: its failure fails the write" \
	"$out" "ERR store write failed"
assert_eq "the fault was consumed by that write" "off" "$(cat "$CTL")"
wait_status ok 60
# Nothing is left unsynced in the journal files now: a WAL record after
# it needs no fsync of them, so one failing does not fail it.
fault "eio-fsync .journal"
assert_eq "with nothing unsynced before it, a record needs no sync of the other file" \
	"1" "$(rcli tally.add article like 11 91 ID async-tok4)"
fault off
assert_eq "the retried ID is answered from its first result" "1" \
	"$(rcli tally.add article like 8 88 ID async-tok)"
# A write with an ID that changes nothing (a like again) puts its token
# alone, and is kept in order all the same: a retry is answered from it.
assert_eq "async: a counter alone, again" "1" "$(rcli incr f:async3)"
fault "eio-fsync-once .journal"
out=$(rcli tally.add article like 11 91 ID async-tok5)
assert_contains "a token alone after it syncs the journal file first: its failure fails the write" \
	"$out" "ERR store write failed"
assert_eq "the fault was consumed by that write" "off" "$(cat "$CTL")"
wait_status ok 60
assert_eq "the like again, retried, changes nothing" "1" \
	"$(rcli tally.add article like 11 91 ID async-tok5)"
assert_eq "the counter before it is kept" "1" "$(rcli get f:async3)"
stop_and_check
start_with_shim

section "2c. a WAL fsync that fails during tally_compact()"
# In its own sync of the logs or in RocksDB's flush (which syncs the logs
# it closed), wherever the timing puts it: librocksdb 7.8 aborted the
# process at the next sync of the WAL (the close's, here), and a sync
# that succeeds after a failed one proves nothing.
# (Its own folder and control file: tallyd's fault stays off.)
mkdir -p "$TMP/cf"
echo off >"$TMP/cf.ctl"
out=$(LD_PRELOAD=$SHIM TALLY_FAULT_DIR=$TMP/cf TALLY_FAULT_CTL=$TMP/cf.ctl \
	timeout 300 "$BUILD_DIR/compact_fault" "$TMP/cf" "$TMP/cf.ctl" 2>&1) && rc=0 || rc=$?
say "$out"
assert_eq "5 rounds: no abort, and the like retried counts once" "0" "$rc"
assert_eq "the store failed in each round (a write after it is refused)" "5" \
	"$(grep -c 'incrby: store write failed' <<<"$out")"
rm -rf "$TMP/cf"

section "2d. async adds whose fold fails: folded again if, and only if, it did not land"
# tally_counter_add()'s adds wait in cells; a fold whose write fails has
# an unknown outcome. Its mark, read back by the recovery, tells. Before,
# the cells let go of those adds and they were lost (1.27M to 1.53M of
# some 16M). "eio-write-after-once .log": the next write to RocksDB's WAL
# is made, then reported failed (a fold's, as a rule).
for mode in eio-write eio-fsync "eio-write-after-once .log"; do
	mkdir -p "$TMP/ff"
	echo off >"$TMP/ff.ctl"
	out=$(LD_PRELOAD=$SHIM TALLY_FAULT_DIR=$TMP/ff TALLY_FAULT_CTL=$TMP/ff.ctl \
		timeout 300 "$BUILD_DIR/fold_fault" "$TMP/ff" "$TMP/ff.ctl" "$mode" 2>&1) && rc=0 || rc=$?
	say "$mode: $out"
	assert_eq "$mode: the counter equals the adds acknowledged, after a store failure and its recovery" "0" "$rc"
	rm -rf "$TMP/ff"
done

section "3. SIGTERM while failed; recovery by restart"
# (RocksDB writes at open: tallyd cannot start while the disk refuses
# writes, so the restart is once the fault cleared.)
fault eio-write
rcli incr f:trigger >/dev/null
assert_eq "the store is failed" "failed-io-error" "$(store_status)"
stop_tallyd TERM
assert_eq "SIGTERM with a failed store: exit 0" "0" "$T_EXIT"
assert_log_clean
fault off
start_with_shim
assert_eq "restarted: the reads answer" "10" "$(rcli get f:a)"
assert_eq "restarted: the store is ok" "ok" "$(store_status)"
assert_eq "restarted: writes are acknowledged" "11" "$(rcli incr f:a)"
rcli decr f:a >/dev/null
verify 1

section "3b. SIGTERM while an HTTP write waits for its fsync"
# The write is queued and its fsync held: the shutdown must still send
# its answer before closing the connection. Only the journal files' syncs
# are held: the write's record goes there, and a background sync (the
# token clock's, a flush's) held first would let the SIGTERM come before
# the write was sent (a run saw curl answered 000 and no write).
rm -f "$CTL.stalled"
fault "stall-fsync .journal"
curl -s --max-time 30 -o "$TMP/stall.body" -w '%{http_code}' -X POST \
	-d '{"by":2}' "http://127.0.0.1:$T_HTTP/v1/counters/f:stall/incr" \
	>"$TMP/stall.code" 2>/dev/null &
cpid=$!
BG_PIDS+=("$cpid")
# faultfs marks the first sync it holds: the write is in its commit.
for ((i = 0; i < 300; i++)); do [ -e "$CTL.stalled" ] && break; sleep 0.02; done
assert_eq "the write's sync is held" yes "$([ -e "$CTL.stalled" ] && echo yes)"
kill -TERM "$T_PID"
sleep 0.5
fault off
wait "$cpid" || true
assert_eq "the write held at shutdown is answered 200" "200" "$(cat "$TMP/stall.code")"
assert_eq "with its value" '{"name":"f:stall","value":2}' "$(cat "$TMP/stall.body")"
stop_tallyd TERM
assert_eq "then tallyd exits 0" "0" "$T_EXIT"
start_with_shim
assert_eq "restarted: the held write is there" "2" "$(rcli get f:stall)"
rcli del f:stall >/dev/null

section "4. EIO for good under load, kill -9, restart without the shim"
"$LOAD" load "$T_RESP" 2 8 4 "$ACK" >"$ACK/load.2.out" 2>&1 &
load_pid=$!
BG_PIDS+=("$load_pid")
wait_acks 2 500
fault eio-write
sleep 1
assert_contains "the load's writes are refused" "$(rcli incr f:refused)" "store write failed"
kill9_tallyd
assert_eq "tallyd was killed by SIGKILL" "137" "$T_EXIT"
lrc=0
wait "$load_pid" || lrc=$?
assert_eq "round 2: load generator exits 0" "0" "$lrc"
cat "$ACK/load.2.out"
fault off
start_tallyd "$DATA"
assert_eq "without the shim: the store is ok" "ok" "$(store_status)"
verify 2
assert_eq "the counter of part 1 is intact" "10" "$(rcli get f:a)"
assert_eq "the like of part 2 is there once" "1" "$(rcli tally.count article like 7)"
stop_and_check

section "5. an I/O thread that cannot start"
TSHIM=$BUILD_DIR/faultthread.so
[ -f "$TSHIM" ] || { fail "the thread shim is built ($TSHIM)"; finish; }
# The first thread fails (nothing started), then the second (the first
# is running, serving the listening sockets, and must be stopped before
# the store closes).
for nth in 1 2; do
	T_LOG=$TMP/thread.$nth.log
	# A port taken between its pick and the listen (a test running
	# beside this one; the two picks, each in a subshell, may even
	# agree) is no thread failure: another pair, at most three times.
	for _ in 1 2 3; do
		rc=0
		LD_PRELOAD=$TSHIM TALLY_FAULT_UV_THREAD=$nth timeout 60 \
			"$TALLYD" --data "$DATA" --bind 127.0.0.1 \
			--resp-port "$(pick_port)" --http-port "$(pick_port)" \
			--threads 2 "${STORE_ARGS[@]}" >"$T_LOG" 2>&1 || rc=$?
		grep -q 'Address already in use' "$T_LOG" || break
	done
	log=$(cat "$T_LOG")
	running=$((nth - 1))
	assert_eq "thread $nth of 2 fails: tallyd exits 1" "1" "$rc"
	assert_contains "thread $nth: the log says which" "$log" \
		"cannot start I/O thread $nth of 2 (tally-io-$running): resource temporarily unavailable"
	if [ "$running" -gt 0 ]; then
		assert_contains "thread $nth: the one running was stopped first" \
			"$log" "stopped the 1 I/O thread already running"
	else
		assert_not_contains "thread $nth: none was running to stop" \
			"$log" "stopped the"
	fi
	assert_contains "thread $nth: and that the network did not start" \
		"$log" "tallyd: cannot start the network"
	assert_log_clean
done
start_tallyd "$DATA"
assert_eq "after the failed starts: the counter is intact" "10" "$(rcli get f:a)"
assert_eq "and the like" "1" "$(rcli tally.count article like 7)"
stop_and_check

section "6. a journal record damaged on disk: what follows it is dropped, and said"
# Twenty INCRs, each its own batch and journal record, then kill -9 (no
# checkpoint covers them); the payload of the 11th is damaged by hand.
DMG=$TMP/damaged
start_tallyd "$DMG"
for i in $(seq 1 20); do rcli incr dmg >/dev/null; done
assert_eq "20 INCRs acknowledged" "20" "$(rcli get dmg)"
kill9_tallyd
out=$(python3 - "$DMG" <<'PY'
import os, struct, sys
# A record: hash (8), magic "tJr1" (4), payload length (4), number (8),
# payload (src/store/rocks_jfile.c).
best = None
for name in ("tally-counters-0.journal", "tally-counters-1.journal"):
    path = os.path.join(sys.argv[1], name)
    data = bytearray(open(path, "rb").read())
    off, recs = 0, []
    while off + 24 <= len(data) and data[off + 8:off + 12] == b"tJr1":
        recs.append(off)
        off += 24 + struct.unpack(">I", data[off + 12:off + 16])[0]
    if best is None or len(recs) > len(best[1]):
        best = (path, recs, data)
path, recs, data = best
if len(recs) < 20:
    print("only %d records" % len(recs))
    sys.exit(1)
data[recs[-10] + 24] ^= 0xFF
with open(path, "r+b") as f:
    f.write(data)
print("damaged record %d of %d" % (len(recs) - 9, len(recs)))
PY
) || fail "a journal record damaged by hand" "$out"
say "$out"
start_tallyd "$DMG"
assert_eq "the value is the one before the damaged record" "10" "$(rcli get dmg)"
assert_eq "INFO counts the 9 whole records dropped after it" "9" \
	"$(rcli info persistence | tr -d '\r' | sed -n 's/^journal_records_dropped://p')"
assert_eq "so does /metrics" "9" "$(metric tally_journal_records_dropped_total)"
assert_contains "the log warns of it" "$(cat "$T_LOG")" \
	"the journal held a damaged record: 9 whole records after it were dropped"
stop_and_check
start_tallyd "$DMG"
assert_eq "a clean restart after it reports nothing" "0" \
	"$(rcli info persistence | tr -d '\r' | sed -n 's/^journal_records_dropped://p')"
# With memory to spare no checkpoint is tried twice (test_oom fails them).
assert_eq "INFO has the checkpoints' retries, none" "0" \
	"$(rcli info persistence | tr -d '\r' | sed -n 's/^store_checkpoint_retries://p')"
assert_eq "so does /metrics" "0" "$(metric tally_store_checkpoint_retries_total)"
stop_and_check
finish
