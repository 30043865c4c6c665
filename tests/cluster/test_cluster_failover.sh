#!/usr/bin/env bash
# test_cluster_failover.sh: a real tallyd on the redis-cluster store while
# the cluster misbehaves. (1) A master paused (CLIENT PAUSE) and another
# stalled (DEBUG SLEEP) past the store's command timeout: tallyd resends its
# token-guarded scripts and every count is exact. (2) A master killed under
# load: with --redis-wait 1 no acknowledged write is lost, nothing is counted
# twice, and both tallyd instances serve again without a restart (the
# killed node restarted is what gives the promoted master a replica). (3) A
# master hung (SIGSTOP) until replaced, then woken: the same checks.
# The load and the checks are tests/cluster/failover_load.c.
source "$(dirname "$0")/lib_cluster.sh" "$@"
FL=$BUILD_DIR/failover_load
[ -x "$FL" ] || { fail "failover_load is built at $FL"; finish; }

cluster_start no
CS=(--store redis-cluster --cluster "$CL_SEEDS")

# load NAME RESP HTTP PREFIX CONTENT MEMBER_BASE ids|noids: a background
# loader writing journal $TMP/NAME.j until $TMP/NAME.stop appears.
declare -A LOADER=()
load() {
	local name=$1
	shift
	"$FL" load "$@" "$TMP/$name.stop" "$TMP/$name.j" >"$TMP/$name.out" 2>&1 &
	LOADER[$name]=$!
	BG_PIDS+=("$!")
}

# stop_loads NAME...: stop the loaders and wait (bounded: an ID still
# unanswered is retried for at most 60 s after the stop).
stop_loads() {
	local n
	for n in "$@"; do touch "$TMP/$n.stop"; done
	for n in "$@"; do
		wait_bg "${LOADER[$n]}" 150 "loader $n ends within 150 s of its stop"
		assert_eq "loader $n exits 0" 0 "$WAIT_RC"
		report "$TMP/$n.out"
	done
}

# verify RESP strict|loose LABEL LOADER...: the loaders' journals checked
# against the counts read through RESP.
verify() {
	local port=$1 how=$2 label=$3 n js=() rc=0
	shift 3
	for n in "$@"; do js+=("$TMP/$n.j"); done
	timeout 300 "$FL" verify "$port" "$how" "$label" "${js[@]}" \
		>"$TMP/verify.$label.out" 2>&1 || rc=$?
	report "$TMP/verify.$label.out"
	[ $rc -le 1 ] || fail "failover_load verify $label ran (exit $rc)"
}

# A write answered (an integer) through RESP port $1 within $2 s; prints
# the seconds it took, or fails.
write_within() {
	local port=$1 limit=$2 key=$3 t0 out i
	t0=$(now_ms)
	for ((i = 0; i < limit * 5; i++)); do
		out=$(timeout 30 redis-cli -p "$port" incrby "$key" 1 2>&1 || true)
		if [[ "$out" =~ ^[0-9]+$ ]]; then
			echo $(($(now_ms) - t0))
			return 0
		fi
		LAST_ERR=$out
		sleep 0.2
	done
	return 1
}

set_node_timeout() {
	local p
	for p in "${CL_PORTS[@]}"; do
		_cl_live "$p" && ccli "$p" config set cluster-node-timeout "$1" >/dev/null
	done
	return 0
}

section "a paused master and a sleeping master: resent writes count once"
start_tallyd "$TMP/t1" "${CS[@]}"
T1_RESP=$T_RESP
# Two loaders with IDs, two without sharing their keys (so that batches
# coalesce several clients' increments of one counter).
load t1i "$T_RESP" "$T_HTTP" t1i 1001 100000000 ids
load t1j "$T_RESP" "$T_HTTP" t1j 1003 110000000 ids
load t1n "$T_RESP" "$T_HTTP" t1n 1002 200000000 noids
load t1m "$T_RESP" "$T_HTTP" t1n 1002 210000000 noids
sleep 2
pm=$(owner_of_counter t1n.c)
# 3.5 s: past the store's 2 s command timeout, so the scripts in flight
# end CL_UNKNOWN and are resent on a new connection. A paused node drops
# the first copy with its closed connection: the resend must apply it.
say "CLIENT PAUSE 3500 ALL on master $pm"
cluster_pause "$pm" 3500
sleep 5
stop_loads t1i t1j t1n t1m

# A sleeping node runs the first copy when it wakes, then the resend,
# which must find the token. For the stalled batch to surely hold writes
# to it, the loaders now only increment plain counters living there (no
# shard sums or logs, which touch every master): with and without IDs.
sm=$(cluster_masters | grep -vx "$pm" | head -n 1)
pk=() # counter prefixes X whose X.c lives on master $sm
for ((k = 1; k < 300 && ${#pk[@]} < 2; k++)); do
	[ "$(owner_of_counter "s$k.c")" = "$sm" ] && pk+=("s$k")
done
[ ${#pk[@]} -eq 2 ] || { fail "two counters on master $sm"; finish; }
load t1k "$T_RESP" "$T_HTTP" "${pk[0]}" 1009 0 incr
load t1l "$T_RESP" "$T_HTTP" "${pk[0]}" 1009 0 incr
load t1o "$T_RESP" "$T_HTTP" "${pk[1]}" 1010 0 incrid
sleep 1.5
# DEBUG SLEEP stalls the cluster bus too: a node timeout longer than the
# sleep keeps the node from being failed over meanwhile.
set_node_timeout 15000
say "DEBUG SLEEP 3 on master $sm"
assert_eq "DEBUG SLEEP is allowed on the nodes" OK "$(ccli "$sm" debug sleep 3 | tr -d '\r')"
set_node_timeout 2000
sleep 1.5
stop_loads t1k t1l t1o
assert_eq "no ID stayed unanswered" "0 0" \
	"$(awk '$1 == "c" || $1 == "v" { u += $4 } $1 == "l" && $4 == "u" { l++ }
		END { print u + 0, l + 0 }' "$TMP/t1i.j" "$TMP/t1j.j" "$TMP/t1o.j")"
# With nothing unknown, the two bounds make every count exact.
verify "$T1_RESP" strict paused t1i t1j t1n t1m t1k t1l t1o
assert_alive "tallyd served through the pause and the sleep"
stop_and_check

section "a master killed under load, with --redis-wait 1"
if ! cluster_wait_ok 60; then
	fail "the cluster is ok again after the sleep"
fi
for ((i = 0; i < 150; i++)); do
	_cl_replicas_synced && break
	sleep 0.2
done
start_tallyd "$TMP/a" "${CS[@]}" --redis-wait 1
A_RESP=$T_RESP A_HTTP=$T_HTTP A_PID=$T_PID A_LOG=$T_LOG
start_tallyd "$TMP/b" "${CS[@]}"
B_RESP=$T_RESP B_HTTP=$T_HTTP B_PID=$T_PID B_LOG=$T_LOG
load fa1 "$A_RESP" "$A_HTTP" fa1 2001 300000000 ids
load fa2 "$A_RESP" "$A_HTTP" fa2 2002 400000000 ids
load fb "$B_RESP" "$B_HTTP" fb 2003 500000000 ids
load fbn "$B_RESP" "$B_HTTP" fbn 2004 600000000 noids
sleep 3
# The first node of the list when it is a master (redis-cli --cluster
# create makes it one): the node the harness would ask first if it took a
# dead node for a live one.
victim=$(cluster_masters | grep -x "${CL_PORTS[0]}" || owner_of_counter fa1.c)
# The bus port, to start the node again later on its own folder.
vbus=$(ccli "$victim" cluster nodes | awk '$3 ~ /myself/ { split($2, a, "@"); split(a[2], b, ","); print b[1] }')
t_kill=$(now_ms)
promoted=$(cluster_kill_master "$victim") || promoted=""
t_prom=$(now_ms)
say "killed master $victim; replica ${promoted:-?} promoted after $((t_prom - t_kill)) ms"
assert_ne "a replica took over" "" "$promoted"
[ -n "$promoted" ] || finish
assert_eq "the harness sees the promoted master and not the killed one" \
	"$(cluster_masters | grep -cx "$promoted") $(cluster_masters | grep -cx "$victim")" "1 0"
pk=$(probe_on "$promoted") || { fail "a probe counter on master $promoted"; finish; }

LAST_ERR=""
if took=$(write_within "$B_RESP" 60 "$pk"); then
	pass "tallyd B (no --redis-wait) takes writes on the promoted master's slots again, no restart"
	say "    B: a write acknowledged $(($(now_ms) - t_kill)) ms after the kill (probe took $took ms)"
else
	fail "tallyd B takes writes again within 60 s of the promotion" "last error: $LAST_ERR"
fi
assert_match "tallyd B reads the failed-over slots" '^[0-9]+$' "$(timeout 30 redis-cli -p "$B_RESP" get "$pk" 2>&1)"
assert_match "tallyd A (--redis-wait 1) reads them too" '^[0-9]+$' "$(timeout 30 redis-cli -p "$A_RESP" get "$pk" 2>&1)"
# The promoted master has no replica: WAIT 1 cannot be met there, so A
# must not acknowledge a write on its slots.
out=$(timeout 60 redis-cli -p "$A_RESP" incrby "$pk" 1 2>&1 || true)
assert_contains "A refuses to acknowledge a write no replica has" "$out" "ERR"
say "    A, while the promoted master has no replica: $out"

# The killed node comes back on its folder: the cluster makes it a replica
# of the promoted master, and WAIT 1 can be met again.
t_back=$(now_ms)
_cl_start_node "$victim" "$vbus" no
back=0
for ((i = 0; i < 300; i++)); do
	if ccli "$victim" role | head -n 1 | grep -q '^slave' &&
		ccli "$promoted" info replication | tr -d '\r' | grep -q '^slave0:.*state=online'; then
		back=1
		break
	fi
	sleep 0.2
done
assert_eq "the killed node rejoins as a replica of $promoted" 1 "$back"
say "    node $victim in sync as a replica $(($(now_ms) - t_back)) ms after its restart"
LAST_ERR=""
if took=$(write_within "$A_RESP" 60 "$pk"); then
	pass "tallyd A acknowledges writes there again, no restart"
	say "    A: a write acknowledged $took ms after the replica was back ($(($(now_ms) - t_kill)) ms after the kill)"
else
	fail "tallyd A acknowledges writes within 60 s of a replica coming back" "last error: $LAST_ERR"
fi
sleep 2
stop_loads fa1 fa2 fb fbn
say "(loader figures: 'ended at' is wall-clock ms; the kill was at $t_kill)"

section "a master hung (SIGSTOP) past the node timeout, then woken"
# Its connections stay open and silent: tallyd's commands time out instead
# of failing fast, and the woken node may run what it had read, as a master
# that no longer is one, before it learns it was replaced.
if ! cluster_wait_ok 60; then
	fail "the cluster is ok again before the hang"
fi
load fa3 "$A_RESP" "$A_HTTP" fa3 2005 700000000 ids
load fb3 "$B_RESP" "$B_HTTP" fb3 2006 800000000 ids
load fbn3 "$B_RESP" "$B_HTTP" fbn3 2007 900000000 noids
sleep 2
hung=$(owner_of_counter fa3.c)
hrep=$(cluster_replica_of "$hung")
# Nobody asks the hung node anything meanwhile (the harness skips it).
echo "$hung" >>"$TMP/cl_dead"
t_stop=$(now_ms)
kill -STOP "${CL_PID[$hung]}"
took=""
for ((i = 0; i < 300; i++)); do
	if ccli "$hrep" role | head -n 1 | grep -q '^master'; then
		took=$(($(now_ms) - t_stop))
		break
	fi
	sleep 0.2
done
assert_ne "the replica $hrep of the hung master $hung took over" "" "$took"
say "    replica $hrep promoted $took ms after the hang"
pk3=$(probe_on "$hrep") || { fail "a probe counter on master $hrep"; finish; }
LAST_ERR=""
if took=$(write_within "$B_RESP" 60 "$pk3"); then
	pass "tallyd B takes writes on the hung master's slots again"
	say "    B: a write acknowledged $(($(now_ms) - t_stop)) ms after the hang"
else
	fail "tallyd B takes writes again within 60 s of the promotion" "last error: $LAST_ERR"
fi
t_cont=$(now_ms)
kill -CONT "${CL_PID[$hung]}"
grep -vx "$hung" "$TMP/cl_dead" >"$TMP/cl_dead.new" || true
mv "$TMP/cl_dead.new" "$TMP/cl_dead"
back=0
for ((i = 0; i < 300; i++)); do
	if ccli "$hung" role | head -n 1 | grep -q '^slave' &&
		ccli "$hrep" info replication | tr -d '\r' | grep -q '^slave0:.*state=online'; then
		back=1
		break
	fi
	sleep 0.2
done
assert_eq "the woken node rejoins as a replica of $hrep" 1 "$back"
say "    node $hung in sync as a replica $(($(now_ms) - t_cont)) ms after it was woken"
LAST_ERR=""
if took=$(write_within "$A_RESP" 60 "$pk3"); then
	pass "tallyd A acknowledges writes there again"
	say "    A: a write acknowledged $(($(now_ms) - t_stop)) ms after the hang"
else
	fail "tallyd A acknowledges writes within 60 s of the replica being back" "last error: $LAST_ERR"
fi
sleep 2
stop_loads fa3 fb3 fbn3

section "a master hung and not replaced: reads elsewhere go on"
# A write to it fails once tallyd's resends run out (15 s); the engine
# then refuses writes and tries every second to reopen the store. While
# the node cannot answer, a reopen could not succeed: the store that still
# serves the other masters' slots must be kept, not dropped.
if ! cluster_wait_ok 60; then
	fail "the cluster is ok again before the second hang"
fi
set_node_timeout 60000 # no failover this time
stuck=$(cluster_masters | head -n 1)
other=$(cluster_masters | grep -vx "$stuck" | head -n 1)
sk=$(probe_on "$stuck") && hk=$(probe_on "$other") ||
	{ fail "probe counters on masters $stuck and $other"; finish; }
assert_match "B writes a counter on master $other" '^[0-9]+$' \
	"$(timeout 30 redis-cli -p "$B_RESP" incrby "$hk" 1 2>&1)"
echo "$stuck" >>"$TMP/cl_dead"
kill -STOP "${CL_PID[$stuck]}"
out=$(timeout 60 redis-cli -p "$B_RESP" incrby "$sk" 1 2>&1 || true)
assert_contains "a write to the hung master is answered with an error" "$out" "ERR"
say "    B: $out"
bad=0
for ((i = 0; i < 10; i++)); do
	out=$(timeout 30 redis-cli -p "$B_RESP" get "$hk" 2>&1 || true)
	[[ "$out" =~ ^[0-9]+$ ]] || { bad=$((bad + 1)); LAST_ERR=$out; }
	sleep 1
done
assert_eq "B keeps reading master $other's slots for 10 s after the failed write" 0 "$bad"
[ "$bad" -eq 0 ] || say "    last read: $LAST_ERR"
kill -CONT "${CL_PID[$stuck]}"
grep -vx "$stuck" "$TMP/cl_dead" >"$TMP/cl_dead.new" || true
mv "$TMP/cl_dead.new" "$TMP/cl_dead"
set_node_timeout 2000
LAST_ERR=""
if took=$(write_within "$B_RESP" 60 "$sk"); then
	pass "B takes writes again once the node answers"
	say "    B: a write acknowledged $took ms after the node was woken"
else
	fail "B takes writes again within 60 s of the node waking" "last error: $LAST_ERR"
fi
st=$(timeout 10 redis-cli -p "$B_RESP" info persistence 2>&1 | tr -d '\r')
assert_contains "B's store is ok again (INFO persistence)" "$st" "store_status:ok"
say "    B: $(grep -E '^store_(failures|recoveries):' <<<"$st" | tr '\n' ' ')"

section "every acknowledged write is there"
verify "$A_RESP" strict redis-wait-1 fa1 fa2
# Without WAIT a write acknowledged just before the kill may be lost with
# the master (asynchronous replication): measured, not failed; still
# nothing may be counted twice.
verify "$B_RESP" loose no-wait fb fbn
verify "$A_RESP" strict hang-redis-wait-1 fa3
verify "$B_RESP" loose hang-no-wait fb3 fbn3
T_PID=$A_PID T_LOG=$A_LOG
assert_alive "tallyd A is still running"
stop_and_check
T_PID=$B_PID T_LOG=$B_LOG
assert_alive "tallyd B is still running"
stop_and_check
finish
