#!/usr/bin/env bash
# test_cluster_wait.sh: with --redis-wait 1 an acknowledgement means a
# replica holds the write, also for a retried ID whose first run the master
# applied and the replica never saw: the token the retry finds is answered
# only once the replica has caught up with it. The replica is stopped
# (SIGSTOP), so its master still lists it as online with its last offset.
source "$(dirname "$0")/lib_cluster.sh" "$@"
need_cmd curl

cluster_start no
m=$(cluster_masters | head -n 1)
rep=$(cluster_replica_of "$m")
[ -n "$rep" ] || { fail "master $m has a replica"; finish; }
k=$(probe_on "$m") || { fail "a probe counter on master $m"; finish; }
start_tallyd "$TMP/t" --store redis-cluster --cluster "$CL_SEEDS" --redis-wait 1

# incr ID: the counter's increment over HTTP with that ID.
incr() { http POST "/v1/counters/$k/incr" "{\"id\":\"$1\"}" --max-time 60; }

section "a write with the replica up"
incr w0
assert_eq "acknowledged (200)" 200 "$HTTP_CODE"
assert_contains "its value" "$HTTP_BODY" '"value":1'

section "the replica of master $m stopped: nothing acknowledged"
echo "$rep" >>"$TMP/cl_dead"
kill -STOP "${CL_PID[$rep]}"
incr w1
assert_ne "the write is not acknowledged (WAIT finds no replica)" 200 "$HTTP_CODE"
say "    $HTTP_CODE $HTTP_BODY"
# The master applied w1 and kept its token. The retries run on the store
# reopened after the failure, on new connections that have written nothing:
# a WAIT there is satisfied by the stopped replica's old offset unless the
# retry's own run writes.
acked=0 tries=0 recovered=0
t0=$SECONDS
while [ $((SECONDS - t0)) -lt 40 ] && [ $tries -lt 6 ]; do
	incr w1
	tries=$((tries + 1))
	[ "$HTTP_CODE" = 200 ] && { acked=$((acked + 1)); say "    retry acknowledged: $HTTP_BODY"; }
	recovered=$(rcli info persistence | tr -d '\r' | awk -F: '$1 == "store_recoveries" { print $2 }')
	[ "${recovered:-0}" -ge 2 ] && break
	sleep 1
done
say "    $tries retries, store reopened ${recovered:-0} times"
assert_int_cmp "the store was reopened during the retries" "${recovered:-0}" -ge 1
assert_eq "no retry of w1 is acknowledged while the replica is stopped" 0 "$acked"

section "the replica woken: the retry is acknowledged, counted once"
kill -CONT "${CL_PID[$rep]}"
grep -vx "$rep" "$TMP/cl_dead" >"$TMP/cl_dead.new" || true
mv "$TMP/cl_dead.new" "$TMP/cl_dead"
ok=0
for ((i = 0; i < 60; i++)); do
	incr w1
	[ "$HTTP_CODE" = 200 ] && { ok=1; break; }
	sleep 1
done
assert_eq "w1 retried is acknowledged once the replica is back" 1 "$ok"
assert_contains "with the value of its one run" "$HTTP_BODY" '"value":2'
incr w1
assert_contains "a further retry answers the same" "$HTTP_BODY" '"value":2'
assert_eq "the counter holds both writes once" 2 "$(rcli get "$k")"
assert_eq "the replica holds them too" 2 \
	"$(printf 'READONLY\nGET t:c:{%s}\n' "$k" | ccli "$rep" | tail -n 1 | tr -d '\r')"

stop_and_check
finish
