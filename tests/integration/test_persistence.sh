#!/usr/bin/env bash
# Durability of a real tallyd on one data folder:
#  1. a clean restart (SIGTERM, exit 0) keeps everything, byte for byte as
#     clients see it, idempotency tokens included; so does SIGINT, and so
#     does SIGTERM in async mode (shutdown flushes);
#  2. kill -9 under pipelined load (ack_load: several connections, INCRBY,
#     likes with new members, views with DELTA), at a random moment after
#     some acks, then restart on the same folder: every acknowledged write
#     is there, nothing is counted twice, counts equal memberships.
#     TALLY_KILL_ROUNDS rounds (default 5), then one SIGTERM under load.
#  3. part 1's data is still there after every round;
#  4. idempotency tokens outlive steps of the system clock, while tallyd
#     runs and while it is stopped (tests/fault/faultclock.so).
# With TALLY_TEST_STORE=redis-cluster the data is in the cluster, not the
# folder: a restarted tallyd reads it all back from Redis, and kill -9 of
# tallyd must lose no acknowledged write there either (what survives a
# Redis node's crash is Redis's durability, tests/cluster). DBSIZE and
# COUNT ... AT, refused on that store, are refused alike before and after.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli curl

LOAD=$BUILD_DIR/ack_load
[ -x "$LOAD" ] || { fail "ack_load is built ($LOAD)"; finish; }
ROUNDS=${TALLY_KILL_ROUNDS:-5}
DATA=$TMP/data

# Everything a client can read about the data written in part 1.
dump_state() {
	echo "--- counters"
	rcli mget p:a p:b p:c p:gone p:neg p:max
	echo "--- dbsize"
	rcli dbsize
	echo "--- types"
	rcli tally.types
	local o m
	for o in 1 2 3; do
		echo "--- counts article $o"
		rcli tally.counts article "$o"
		echo "--- recent article $o like"
		rcli tally.recent article like "$o" LIMIT 1000
		echo "--- recent article $o clap"
		rcli tally.recent article clap "$o"
		echo "--- count at"
		rcli tally.count article like "$o" AT 1700000050000
	done
	for m in 1 2 3 4 5 6; do
		echo "--- has/history $m"
		rcli tally.has article like 1 "$m"
		rcli tally.history "$m" like
	done
	echo "--- http"
	timeout 10 curl -s "http://127.0.0.1:$T_HTTP/v1/objects/article/1"
	echo
	timeout 10 curl -s "http://127.0.0.1:$T_HTTP/v1/counters/p:a"
	echo
}

section "1. clean restart keeps everything"
start_tallyd "$DATA"
say "tallyd pid $T_PID, RESP $T_RESP, HTTP $T_HTTP"
{
	echo "incrby p:a 41"
	echo "incr p:a"
	echo "set p:b 1000"
	echo "decrby p:b 1"
	echo "incr p:gone"
	echo "del p:gone"
	echo "incrby p:neg -17"
	echo "set p:max 9223372036854775807"
	echo "tally.type add clap total"
	echo "tally.add article like 1 1 AT 1700000000000"
	echo "tally.add article like 1 2 AT 1700000100000"
	echo "tally.add article like 1 3"
	echo "tally.remove article like 1 2"
	echo "tally.add article like 2 1"
	echo "tally.add article like 2 4 ID tok-persist"
	echo "tally.add article view 1 0 DELTA 5"
	echo "tally.add article view 1 6 DELTA 2"
	echo "tally.remove article view 1 6"
	echo "tally.add article clap 3 5 DELTA 7"
	echo "tally.add video like 9 1"
} | timeout 30 redis-cli -p "$T_RESP" >"$TMP/writes.out" 2>&1 || true
assert_not_contains "setup writes succeed" "$(cat "$TMP/writes.out")" "ERR"
before=$(dump_state)
stop_tallyd TERM
assert_eq "SIGTERM: tallyd exits 0" "0" "$T_EXIT"
assert_log_clean
start_tallyd "$DATA"
after=$(dump_state)
assert_eq "after SIGTERM and restart every value reads the same" "$before" "$after"
assert_eq "a named counter" "42" "$(rcli get p:a)"
assert_eq "a deleted counter stays deleted" "" "$(rcli get p:gone)"
assert_eq "a custom type survives" "(integer) 7" "$(rcn tally.count article clap 3)"
assert_eq "an idempotency token survives a restart" "(integer) 2" \
	"$(rcn tally.add article like 2 5 ID tok-persist)"
assert_eq "... and its retry changed nothing" "(nil)" "$(rcn tally.has article like 2 5)"
old_seq=$(rcli tally.recent article like 1 LIMIT 1 | sed -n 4p)
rcli tally.add article like 1 7 >/dev/null
new_seq=$(rcli tally.recent article like 1 LIMIT 1 | sed -n 4p)
assert_int_cmp "event seqs keep growing after a restart" "$new_seq" -gt "$old_seq"
rcli tally.remove article like 1 7 >/dev/null
before=$(dump_state)

stop_tallyd INT
assert_eq "SIGINT: tallyd exits 0" "0" "$T_EXIT"
start_tallyd "$DATA" --durability async --flush-ms 60000
assert_eq "after SIGINT and restart every value reads the same" "$before" "$(dump_state)"
# async mode acknowledges before fsync; a clean stop must still flush.
seq 1 500 | sed 's/.*/incr p:async/' | timeout 30 redis-cli -p "$T_RESP" >/dev/null 2>&1 || true
rcli tally.add article like 3 99 >/dev/null
assert_eq "async writes are visible" "500" "$(rcli get p:async)"
# HTTP writes complete on the loop: through the committer, or at once.
H=http://127.0.0.1:$T_HTTP
assert_eq "async mode: HTTP incr answers its value" '{"name":"h:async","value":3}' \
	"$(curl -s --max-time 10 -XPOST -d '{"by":3}' "$H/v1/counters/h:async/incr")"
assert_eq "async mode: HTTP events answer their counts" '{"counts":[1,2,1]}' \
	"$(curl -s --max-time 10 -XPOST "$H/v1/events" -d '[{"ctype":"article","ktype":"view","content":9,"member":1},{"ctype":"article","ktype":"view","content":9,"member":2},{"ctype":"article","ktype":"like","content":9,"member":2}]')"
assert_eq "async mode: HTTP reads its writes" '{"name":"h:async","value":3}' \
	"$(curl -s --max-time 10 "$H/v1/counters/h:async")"
stop_tallyd TERM
assert_eq "async mode: SIGTERM exits 0" "0" "$T_EXIT"
start_tallyd "$DATA"
assert_eq "async mode: SIGTERM flushed every acknowledged write" "500" "$(rcli get p:async)"
assert_match "async mode: SIGTERM flushed the like" '^[0-9]+$' "$(rcli tally.has article like 3 99)"

section "2. kill -9 under pipelined load, $ROUNDS rounds"
ACK=$TMP/ack
mkdir -p "$ACK"

# One round of load against the running tallyd; stops it with SIG when
# some writes were acknowledged, plus a random delay; then restarts on the
# same folder and verifies.
load_round() { # ROUND SIG
	local round=$1 sig=$2 pid lines deadline delay i
	"$LOAD" load "$T_RESP" "$round" 30 4 "$ACK" >"$ACK/load.$round.out" 2>&1 &
	pid=$!
	BG_PIDS+=("$pid")
	deadline=$((SECONDS + 20))
	lines=0
	while [ $SECONDS -lt $deadline ]; do
		lines=$(wc -l 2>/dev/null <"$ACK/ack.$round" || echo 0)
		[ "$lines" -ge 500 ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	delay=$((RANDOM % 1000))
	sleep "$(printf '0.%03d' "$delay")"
	lines=$(wc -l 2>/dev/null <"$ACK/ack.$round" || echo 0)
	say "round $round: SIG$sig after ~${lines} acks (+${delay} ms)"
	stop_tallyd "$sig"
	if [ "$sig" == KILL ]; then
		assert_eq "round $round: tallyd was killed by SIGKILL" "137" "$T_EXIT"
	else
		assert_eq "round $round: SIGTERM under load exits 0" "0" "$T_EXIT"
		assert_log_clean
	fi
	# the load generator notices the closed connections and stops
	wait_bg "$pid" 30 "round $round: load generator stops within 30 s of the server going away"
	assert_eq "round $round: load generator stopped by itself, exit 0" "0" "$WAIT_RC"
	cat "$ACK/load.$round.out"
	assert_int_cmp "round $round: some writes were acknowledged" \
		"$(wc -l <"$ACK/ack.$round")" -ge 500
	start_tallyd "$DATA"
	assert_match "round $round: the restart logs how long the open took" \
		'tallyd info: store open in [0-9]+\.[0-9]{3} s' "$(cat "$T_LOG")"
	local vrc=0
	timeout 300 "$LOAD" verify "$T_RESP" "$round" "$ACK" >"$ACK/verify.$round.out" 2>&1 || vrc=$?
	report "$ACK/verify.$round.out"
	assert_eq "round $round: verify exits 0" "0" "$vrc"
}

# (the tallyd of part 1 is running on $DATA)
for ((r = 1; r <= ROUNDS; r++)); do
	load_round "$r" KILL
done
load_round $((ROUNDS + 1)) TERM

section "3. the data of part 1 is still there"
assert_eq "named counter after all rounds" "42" "$(rcli get p:a)"
assert_eq "like count after all rounds" "(integer) 2" "$(rcn tally.count article like 1)"
assert_alive
stop_and_check

section "4. a stepped clock ends no token's window"
# tests/fault/faultclock.so steps tallyd's system clock by the seconds its
# file holds. A token's window runs on the monotonic clock while tallyd
# runs, and a restart resumes it: the steps here (2 hours running, a day
# more while stopped) are far past the 10-minute window, and each retry
# must still be answered with the first result, applied once.
CLOCK=$BUILD_DIR/faultclock.so
CLK=$TMP/clock.offset
[ -f "$CLOCK" ] || { fail "the clock shim is built ($CLOCK)"; finish; }
echo 0 >"$CLK"
start_stepped() {
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		LD_PRELOAD=$CLOCK TALLY_FAULT_CLOCK=$CLK start_tallyd "$TMP/clockdata"
}
# step SECONDS: the shim reads its file again within 2 ms.
step() {
	echo "$1" >"$CLK"
	sleep 0.05
}
clk_incr() {
	curl -s --max-time 10 -XPOST -d "{\"by\":5,\"id\":\"$1\"}" \
		"http://127.0.0.1:$T_HTTP/v1/counters/clk/incr"
}
# How far, in whole seconds, the time of a like added now lies from this
# shell's clock plus SECONDS.
like_at_offset() {
	local m=$1 off=$2 now
	rcli tally.add article like 77 "$m" >/dev/null
	now=$(date +%s%3N)
	now=$(( ($(rcli tally.has article like 77 "$m") - now) / 1000 - off ))
	echo "${now#-}"
}
start_stepped
assert_eq "a counter increment with an id" '{"name":"clk","value":5}' "$(clk_incr step-1)"
assert_eq "an event with an id" "(integer) 3" \
	"$(rcn tally.add article view 77 1 DELTA 3 ID step-2)"
step 7200
assert_int_cmp "the shim steps tallyd's clock: a like is stamped 2 h ahead" \
	"$(like_at_offset 1 7200)" -le 5
assert_eq "2 h later by the clock, the increment's retry answers the first result" \
	'{"name":"clk","value":5}' "$(clk_incr step-1)"
assert_eq "... and the event's" "(integer) 3" \
	"$(rcn tally.add article view 77 1 DELTA 3 ID step-2)"
assert_eq "the counter was incremented once" "5" "$(rcli get clk)"
assert_eq "the views were added once" "(integer) 3" "$(rcn tally.count article view 77)"
assert_eq "a new id after the step applies" '{"name":"clk","value":10}' "$(clk_incr step-3)"
stop_tallyd KILL
step 93600
start_stepped
assert_int_cmp "restarted a day later by the clock: a like is stamped 26 h ahead" \
	"$(like_at_offset 2 93600)" -le 5
assert_eq "after kill -9 and the step, each retry answers the first result" \
	'{"name":"clk","value":5}|{"name":"clk","value":10}|(integer) 3' \
	"$(clk_incr step-1)|$(clk_incr step-3)|$(rcn tally.add article view 77 1 DELTA 3 ID step-2)"
assert_eq "nothing was applied twice" "10|(integer) 3" \
	"$(rcli get clk)|$(rcn tally.count article view 77)"
step 0
assert_eq "the clock stepped back: the retries still answer" \
	'{"name":"clk","value":5}|(integer) 3' \
	"$(clk_incr step-1)|$(rcn tally.add article view 77 1 DELTA 3 ID step-2)"
assert_alive
stop_and_check
finish
