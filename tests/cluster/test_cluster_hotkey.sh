#!/usr/bin/env bash
# test_cluster_hotkey.sh: automatic shard growth of a hot counter on the
# redis-cluster store (--hot-shard-ops), against a real 6-node Redis
# Cluster: a counter driven hot by redis-benchmark grows past one shard (at
# most twice the masters), its shards hold data on more than one master,
# its total stays exact; a cold counter and a tallyd with growth off keep
# one shard.
source "$(dirname "$0")/lib_cluster.sh" "$@"
need_cmd redis-cli redis-benchmark

# Low enough that any machine drives the hot key far above it, high enough
# that the cold loop below (about 20 increments/s) stays under it.
HOT_OPS=200
ROUND=20000    # INCRs per redis-benchmark round
# Growth needs a streak of whole busy seconds, so the load runs for a time,
# not a number of rounds (a fast machine ends 15 rounds in under 2 s); the
# bound only stops a machine where growth never comes.
LOAD_SECONDS_MAX=60

section "flags"
out=$(timeout 10 "$TALLYD" --data "$TMP/x" --hot-shard-ops 10 2>&1) && rc=0 || rc=$?
assert_ne "--hot-shard-ops on the rocksdb store is refused" "0" "$rc"
assert_contains "... saying where it applies" "$out" "redis-cluster only"
out=$(timeout 10 "$TALLYD" --store redis-cluster --cluster 127.0.0.1:1 \
	--hot-shard-ops 100000001 2>&1) && rc=0 || rc=$?
assert_contains "--hot-shard-ops above 100000000 is refused" "$out" "wants a number"
out=$(timeout 10 "$TALLYD" --store redis-cluster --cluster 127.0.0.1:1 \
	--hot-shards-max 257 2>&1) && rc=0 || rc=$?
assert_contains "--hot-shards-max above 256 is refused" "$out" "wants a number"

cluster_start no
CS=(--store redis-cluster --cluster "$CL_SEEDS")

# bench PORT KEY: one round of ROUND pipelined INCRs of KEY; prints the
# number of increments acknowledged (ROUND, or 0 if redis-benchmark failed).
# It runs in a command substitution, where fail would count nowhere: a
# failed round is noted in a file that bench_check turns into a failure.
bench() {
	local out
	if out=$(timeout 120 redis-benchmark -p "$1" -n "$ROUND" -c 20 -P 16 -q \
		INCR "$2" 2>&1); then
		echo "$ROUND"
	else
		printf 'redis-benchmark INCR %s: %s\n' "$2" "$out" >>"$TMP/bench_failed"
		echo 0
	fi
}

bench_check() {
	if [ -s "$TMP/bench_failed" ]; then
		fail "every redis-benchmark round exits 0" "$(cat "$TMP/bench_failed")"
		: >"$TMP/bench_failed"
	else
		pass "every redis-benchmark round exits 0"
	fi
}

# shard_masters KEY N: the masters whose shard of KEY (shards 0..N-1)
# holds a non-zero value, and the sum of every shard, as "MASTERS SUM".
shard_masters() {
	local key=$1 n=$2 i k v owner sum=0 masters=""
	for ((i = 0; i < n; i++)); do
		if [ "$i" -eq 0 ]; then k="t:c:{$key}"; else k="t:c:{$key#$i}"; fi
		owner=$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")
		v=$(ccli "$owner" get "$k")
		[ -n "$v" ] || v=0
		sum=$((sum + v))
		[ "$v" != 0 ] && masters+="$owner"$'\n'
	done
	echo "$(printf '%s' "$masters" | sort -u | grep -c .) $sum"
}

info_field() { # PORT FIELD
	redis-cli -p "$1" info stats 2>/dev/null | tr -d '\r' |
		awk -F: -v f="$2" '$1 == f { print $2 }'
}

section "a hot counter grows, a cold one does not"
start_tallyd "$TMP/a" "${CS[@]}" --hot-shard-ops "$HOT_OPS"
A_RESP=$T_RESP A_HTTP=$T_HTTP A_PID=$T_PID A_LOG=$T_LOG
assert_eq "hot starts with 1 shard" "1" "$(rcli tally.shards hot)"
assert_eq "shard_growths starts at 0" "0" "$(info_field "$A_RESP" shard_growths)"

# The cold counter: about 20 increments a second for as long as the load.
echo 0 >"$TMP/cold.n"
(
	n=0
	while [ ! -e "$TMP/cold.stop" ]; do
		[ "$(timeout 10 redis-cli -p "$A_RESP" incr cold 2>/dev/null)" = $((n + 1)) ] &&
			n=$((n + 1)) && echo "$n" >"$TMP/cold.n"
		sleep 0.05
	done
) &
COLD=$!
BG_PIDS+=("$COLD")

sent=0
shards=1
r=0
load_end=$((SECONDS + LOAD_SECONDS_MAX))
while [ "$SECONDS" -lt "$load_end" ]; do
	sent=$((sent + $(bench "$A_RESP" hot)))
	r=$((r + 1))
	shards=$(rcli tally.shards hot)
	[ "$shards" -gt 1 ] 2>/dev/null && break
done
say "hot: $shards shards after $r rounds of $ROUND INCRs"
# One more round, so that increments land on the new shards.
sent=$((sent + $(bench "$A_RESP" hot)))
touch "$TMP/cold.stop"
wait "$COLD" || true

bench_check
assert_int_cmp "hot grew past 1 shard" "$shards" -gt 1
assert_int_cmp "hot has at most twice the masters (6) shards" "$shards" -le 6
assert_int_cmp "INFO shard_growths counts the growth" \
	"$(info_field "$A_RESP" shard_growths)" -ge 1
assert_int_cmp "/metrics tally_shard_growths_total counts it" \
	"$(metric tally_shard_growths_total)" -ge 1
assert_eq "TALLY.SHARDS on the cluster's own key agrees" "$shards" \
	"$(ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot 't:cfg:{hot}')")" get 't:cfg:{hot}')"
assert_eq "hot is exact: every acknowledged INCR counted once" "$sent" "$(rcli get hot)"
read -r nm sum <<<"$(shard_masters hot "$shards")"
assert_eq "the shards in Redis sum to the same total" "$sent" "$sum"
assert_int_cmp "hot's shards hold data on more than one master" "$nm" -gt 1
assert_contains "SET of a counter that grew is refused" "$(rcli set hot 5)" "not supported"
cold_n=$(cat "$TMP/cold.n")
assert_int_cmp "the cold counter was incremented during the load" "$cold_n" -gt 0
assert_eq "the cold counter kept 1 shard" "1" "$(rcli tally.shards cold)"
assert_eq "the cold counter is exact" "$cold_n" "$(rcli get cold)"

section "another tallyd sees the grown counter"
start_tallyd "$TMP/b" "${CS[@]}" --hot-shard-ops 0
B_RESP=$T_RESP
assert_eq "B reads the same shard count" "$shards" "$(rcli tally.shards hot)"
assert_eq "B reads the exact total" "$sent" "$(rcli get hot)"

section "--hot-shard-ops 0: no growth however hot"
off_sent=0
for ((r = 0; r < 3; r++)); do
	off_sent=$((off_sent + $(bench "$B_RESP" hot2)))
done
bench_check
assert_eq "hot2 kept 1 shard" "1" "$(rcli tally.shards hot2)"
assert_eq "shard_growths stays 0 with growth off" "0" "$(info_field "$B_RESP" shard_growths)"
assert_eq "hot2 is exact" "$off_sent" "$(rcli get hot2)"

section "both tallyd stop cleanly"
stop_and_check
T_PID=$A_PID T_LOG=$A_LOG T_HTTP=$A_HTTP T_RESP=$A_RESP
stop_and_check
finish
