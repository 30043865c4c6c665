#!/usr/bin/env bash
# A real tallyd whose own allocations fail: tests/fault/faultmem.so
# (LD_PRELOAD) fails one allocation in K made from tallyd's code (and the
# libtally linked into it), picked at random, while switched on (SIGUSR2;
# SIGUSR1 ends it). Rounds on one data folder, K = 3 (three seeds), 23
# and 211, the round's number the seed:
#  1. under pipelined load (ack_load, reconnecting when tallyd closes a
#     connection), RESP commands of every kind on connections of their
#     own, and HTTP requests: tallyd stays up; what fails is answered with
#     an "out of memory" error (RESP) or 503 (HTTP), or the store's
#     refusal of writes it failed, or its connection is closed; the shim
#     counts failures;
#  2. faults off: it serves reads and writes again within a few seconds
#     (a store failed by them reopens), and SIGTERM exits 0;
#  3. restarted without the shim: every write acknowledged under faults
#     is there (ack_load's, and those on redis-cli's connections),
#     nothing counted twice, counts equal memberships; at 23 and 211
#     ack_load must have had writes acknowledged (at 3 nearly nothing is:
#     a store failed by a failed allocation refuses writes while its
#     recovery meets failures too). A failed allocation fails its batch
#     alone, except in a type's first use, which can still fail the store
#     (RELIABILITY.md, Memory exhaustion): the rounds at 23 and 211 name
#     their types before their faults.
# Not run on the sanitizer build (CMakeLists.txt): its allocator owns malloc.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli curl

SHIM=$BUILD_DIR/faultmem.so
LOAD=$BUILD_DIR/ack_load
[ -f "$SHIM" ] || { fail "the allocation fault shim is built ($SHIM)"; finish; }
[ -x "$LOAD" ] || { fail "ack_load is built ($LOAD)"; finish; }
DATA=$TMP/data
ACK=$TMP/ack
mkdir -p "$ACK"
# The shim goes to tallyd alone: the clients that check on it (redis-cli
# brings its own allocator) must not get it.
REAL_TALLYD=$TALLYD
WRAP=$TMP/tallyd-faultmem
printf '#!/bin/sh\nLD_PRELOAD=%q exec %q "$@"\n' "$SHIM" "$REAL_TALLYD" >"$WRAP"
chmod +x "$WRAP"

# cli_mix N ROUND: commands of every kind, each on a connection of its
# own (accepts and connection set-up allocate too). Prints every reply.
# Its writes touch keys and members of the round alone; those sent and
# those acknowledged (a number answered) go to $TMP/clisent.ROUND and
# $TMP/cliack.ROUND: "I key" for INCRBY 1, "L obj member" for a like.
cli_mix() {
	local i r key obj member
	for ((i = 1; i <= $1; i++)); do
		key="mem:$2:$((i % 7))"
		echo "I $key" >>"$TMP/clisent.$2"
		r=$(rcli incrby "$key" 1)
		echo "$r"
		[[ "$r" =~ ^[0-9]+$ ]] && echo "I $key" >>"$TMP/cliack.$2"
		obj=$((i % 5))
		member=$(($2 * 100000 + 5000 + i))
		echo "L $obj $member" >>"$TMP/clisent.$2"
		r=$(rcli tally.add article like "$obj" "$member")
		echo "$r"
		[[ "$r" =~ ^[0-9]+$ ]] && echo "L $obj $member" >>"$TMP/cliack.$2"
		rcli tally.add article view "$((i % 5))" 0 DELTA 2
		rcli tally.count article like 1
		rcli tally.recent article like 2
		rcli tally.has article like 3 5003
		rcli tally.history "$member" like
		rcli tally.mcount article like 1 2 3 4
		rcli mget "mem:$2:1" "mem:$2:2" "mem:$2:3"
		rcli info stats
	done
}

http_mix() {
	local i
	for ((i = 1; i <= $1; i++)); do
		http POST "/v1/counters/hmem:$((i % 3))/incr" '{"by":1}'
		echo "$HTTP_CODE $HTTP_BODY"
		http POST /v1/events "{\"ctype\":\"article\",\"ktype\":\"like\",\"content\":9,\"member\":$((7000 + i))}"
		echo "$HTTP_CODE $HTTP_BODY"
		http GET /v1/objects/article/1
		echo "$HTTP_CODE $HTTP_BODY"
		http GET /v1/objects/article/2/like/recent
		echo "$HTTP_CODE $HTTP_BODY"
		http GET /metrics
		echo "$HTTP_CODE"
	done
}

# wait_writable SECONDS: until an INCR is answered with a number (in
# PROBE).
wait_writable() {
	local deadline=$((SECONDS + $1))
	PROBE=""
	while [ $SECONDS -lt $deadline ]; do
		PROBE=$(rcli incr mem:probe)
		[[ "$PROBE" =~ ^[0-9]+$ ]] && break
		sleep 0.2
	done
	assert_match "writes are taken again once the faults end (within $1 s)" '^[0-9]+$' "$PROBE"
}

# cli_verify ROUND: after a restart, the round's acknowledged INCRBYs and
# likes (cli_mix) are there, and no counter holds more than was sent.
cli_verify() {
	local key acked sent v lost=0 over=0 likes=0 kind a b
	touch "$TMP/cliack.$1"
	for key in $(awk '$1 == "I" { print $2 }' "$TMP/clisent.$1" | sort -u); do
		acked=$(grep -cx "I $key" "$TMP/cliack.$1" || true)
		sent=$(grep -cx "I $key" "$TMP/clisent.$1" || true)
		v=$(rcli get "$key")
		[ -z "$v" ] && v=0
		if [ "$v" -lt "$acked" ]; then lost=$((lost + 1)); fi
		if [ "$v" -gt "$sent" ]; then over=$((over + 1)); fi
	done
	while read -r kind a b; do
		[ "$kind" == L ] || continue
		likes=$((likes + 1))
		[[ "$(rcli tally.has article like "$a" "$b")" =~ ^[0-9]+$ ]] ||
			lost=$((lost + 1))
	done <"$TMP/cliack.$1"
	say "round $1: $(wc -l <"$TMP/cliack.$1") writes acknowledged on redis-cli's connections ($likes likes)"
	assert_eq "round $1: every INCRBY and like acknowledged to redis-cli is there" 0 "$lost"
	assert_eq "round $1: no counter holds more than redis-cli sent" 0 "$over"
}

round=0
for every in 3 3 3 23 211; do
	round=$((round + 1))
	section "$round. one allocation of tallyd in $every fails (seed $round)"
	TALLYD=$WRAP
	TALLY_FAULT_MEM_EVERY=$every TALLY_FAULT_MEM_SEED=$round start_tallyd "$DATA"
	TALLYD=$REAL_TALLYD
	# A type's first use can still fail the store for memory on purpose
	# (its entry in memory not made, or its record failing even when
	# written alone: its id would be given out with no name on disk, and
	# only a reopen reloads the types), and a reopen meets the faults
	# too: a round at 23 or 211 whose first batch named a type could see
	# nothing acked, whatever else holds. So before those rounds' faults, the four names
	# exist, through objects no client here uses.
	if [ "$every" -ge 23 ]; then
		for ct in ack article; do
			assert_eq "round $round: the likes of $ct are named before the faults" 1 \
				"$(rcli tally.add "$ct" like 999999 1)"
			rcli tally.add "$ct" view 999999 0 DELTA 1 >/dev/null
		done
	fi
	kill -USR2 "$T_PID"
	ACK_LOAD_RECONNECT=1 "$LOAD" load "$T_RESP" "$round" 4 4 "$ACK" \
		>"$TMP/load.$round" 2>&1 &
	load_pid=$!
	cli_mix 25 "$round" >"$TMP/cli.$round" 2>&1
	http_mix 25 >"$TMP/http.$round" 2>&1
	wait_bg "$load_pid" 60 "ack_load ends (round $round)"
	assert_eq "ack_load exits 0 (round $round)" 0 "$WAIT_RC"
	kill -USR1 "$T_PID" 2>/dev/null || true
	sleep 0.2
	cat "$TMP/load.$round"
	acked=$(sed -n 's/.*: \([0-9]*\) writes acknowledged.*/\1/p' "$TMP/load.$round")
	# At one in 3 nearly nothing is acknowledged (the store, failed by a
	# failed allocation, refuses writes while its recovery meets failures
	# too): the rounds at 23 and 211 are the ones that check acknowledged
	# load.
	if [ "$every" -ge 23 ]; then
		assert_int_cmp "ack_load had writes acknowledged under faults (1 in $every)" "${acked:-0}" -gt 0
	fi
	assert_alive "tallyd is still running after the faults (1 in $every)"
	failed=$(sed -n 's/^faultmem: \([0-9]*\) of .*/\1/p' "$T_LOG" | tail -n 1)
	say "$(grep '^faultmem:' "$T_LOG" | tail -n 1)"
	assert_int_cmp "allocations failed under load (1 in $every)" "${failed:-0}" -gt 0
	cli=$(cat "$TMP/cli.$round")
	# Every error reply says what went wrong: out of memory, or the
	# store refusing writes after one failed it. (A connection closed
	# for want of memory shows as redis-cli's own "Error: ..." line.)
	oom=$(grep -c 'out of memory' <<<"$cli" || true)
	say "RESP: $(wc -l <<<"$cli") reply lines, $oom out of memory"
	other=$(grep -E '^[A-Z]+ ' <<<"$cli" | grep -E '^(ERR|[A-Z]+ERR|WRONGTYPE)' |
		grep -v -e 'out of memory' -e 'store write failed (I/O error)' || true)
	assert_eq "RESP errors under faults are out of memory or a store refusing writes (1 in $every)" "" "$other"
	https=$(cat "$TMP/http.$round")
	# 000: curl saw the connection closed.
	bad=$(grep -E '^[0-9]{3}' <<<"$https" | awk '$1 !~ /^(200|503|000)$/' || true)
	assert_eq "HTTP answers 200, or 503 when out of memory or refusing writes (1 in $every)" "" "$bad"
	if [ "$every" -le 23 ]; then
		assert_int_cmp "some RESP requests were refused for memory (1 in $every)" \
			"$((oom + $(grep -c 'out of memory' <<<"$https" || true)))" -gt 0
	fi
	wait_writable 10
	assert_eq "a read after the faults sees the write before it" "$PROBE" "$(rcli get mem:probe)"
	http GET /healthz
	assert_eq "HTTP healthz after the faults" "200" "$HTTP_CODE"
	stop_and_check

	start_tallyd "$DATA"
	vrc=0
	"$LOAD" verify "$T_RESP" "$round" "$ACK" >"$TMP/verify.$round" 2>&1 || vrc=$?
	report "$TMP/verify.$round"
	assert_eq "ack_load verify exits 0 (round $round)" 0 "$vrc"
	cli_verify "$round"
	stop_and_check
done

finish
