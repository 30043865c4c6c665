#!/usr/bin/env bash
# test_cluster_store.sh: tallyd on the redis-cluster store, against a real
# 6-node Redis Cluster (3 masters, 3 replicas): counters, events and their
# queries, client ids retried on another tallyd, TALLY.SHARDS spreading a
# counter over masters, exact totals under concurrent increments from
# several tallyd instances sharing the cluster, and what this store refuses.
source "$(dirname "$0")/lib_cluster.sh" "$@"
need_cmd redis-cli curl

cluster_start no
CS=(--store redis-cluster --cluster "$CL_SEEDS")

section "counters"
start_tallyd "$TMP/a" "${CS[@]}"
A_RESP=$T_RESP A_PID=$T_PID
assert_eq "INCR on a new counter" "1" "$(rcli incr hits)"
assert_eq "INCRBY" "11" "$(rcli incrby hits 10)"
assert_eq "DECRBY" "8" "$(rcli decrby hits 3)"
assert_eq "GET" "8" "$(rcli get hits)"
assert_eq "GET of a missing counter is nil" "" "$(rcli get nothing)"
assert_eq "SET" "OK" "$(rcli set s1 41)"
assert_eq "INCR after SET" "42" "$(rcli incr s1)"
assert_eq "DEL" "1" "$(rcli del s1)"
assert_eq "GET after DEL" "" "$(rcli get s1)"
assert_eq "INCRBY to the int64 edge" "9223372036854775807" "$(rcli incrby big 9223372036854775807)"
assert_contains "overflow is refused" "$(rcli incr big)" "overflow"
assert_eq "overflow changed nothing" "9223372036854775807" "$(rcli get big)"
# The value really is in the cluster, under the documented key.
slot=$(ccli "${CL_PORTS[0]}" cluster keyslot 't:c:{hits}')
owner=$(cluster_master_of_slot "$slot")
assert_eq "shard 0 of hits is t:c:{hits} on its master" "8" "$(ccli "$owner" get 't:c:{hits}')"

section "events"
assert_eq "like" "1" "$(rcli tally.add article like 42 7)"
assert_eq "like again is a no-op" "1" "$(rcli tally.add article like 42 7)"
assert_eq "another member" "2" "$(rcli tally.add article like 42 8)"
for m in 9 10 11 12 13 14; do rcli tally.add article like 42 "$m" >/dev/null; done
assert_eq "COUNT after 8 members" "8" "$(rcli tally.count article like 42)"
assert_eq "unlike" "7" "$(rcli tally.remove article like 42 9)"
assert_eq "unlike a non-member is a no-op" "7" "$(rcli tally.remove article like 42 9)"
assert_match "HAS a member gives its time" '^[0-9]{13}$' "$(rcli tally.has article like 42 7)"
assert_eq "HAS a removed member is nil" "" "$(rcli tally.has article like 42 9)"
sum=0
for s in 0 1 2 3; do
	k="t:m:{article|#1|42#$s}"
	n=$(ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")" hlen "$k")
	sum=$((sum + n))
done
assert_eq "count = sum of HLEN over the sub-hashes" "7" "$sum"
recent=$(rcli tally.recent article like 42 limit 3)
assert_eq "RECENT newest first: the unlike of 9, then 14, 13" "9 14 13" \
	"$(echo "$recent" | awk 'NR % 4 == 1' | head -3 | tr '\n' ' ' | sed 's/ $//')"
assert_eq "view adds delta" "5" "$(rcli tally.add article view 42 7 delta 5)"
assert_eq "anonymous view" "6" "$(rcli tally.add article view 42 0)"
assert_eq "view remove" "4" "$(rcli tally.remove article view 42 7 delta 2)"
assert_eq "COUNT view" "4" "$(rcli tally.count article view 42)"
hist=$(rcli tally.history 7 like)
assert_contains "HISTORY of member 7 lists article 42" "$hist" "article"
assert_eq "MCOUNT" "7 0" "$(rcli tally.mcount article like 42 43 | tr '\n' ' ' | sed 's/ $//')"
assert_contains "COUNT AT is refused on this store" "$(rcli tally.count article like 42 at 1700000000000)" "not supported"

section "client ids, retried on another tallyd"
start_tallyd "$TMP/b" "${CS[@]}"
B_RESP=$T_RESP B_HTTP=$T_HTTP
assert_eq "like with an id on A" "8" "$(redis-cli -p "$A_RESP" tally.add article like 42 100 id tok-1 2>&1)"
assert_eq "the same id on B changes nothing" "8" "$(redis-cli -p "$B_RESP" tally.add article like 42 100 id tok-1 2>&1)"
assert_eq "view with an id on A" "9" "$(redis-cli -p "$A_RESP" tally.add article view 42 5 delta 5 id tok-2 2>&1)"
assert_eq "the same id on B returns the first result" "9" "$(redis-cli -p "$B_RESP" tally.add article view 42 5 delta 5 id tok-2 2>&1)"
assert_eq "counter incr with an id on B (HTTP)" '{"name":"hits","value":18}' \
	"$(curl -s -X POST -d '{"by":10,"id":"tok-3"}' "http://127.0.0.1:$B_HTTP/v1/counters/hits/incr")"
assert_eq "the same id again (HTTP)" '{"name":"hits","value":18}' \
	"$(curl -s -X POST -d '{"by":10,"id":"tok-3"}' "http://127.0.0.1:$B_HTTP/v1/counters/hits/incr")"
assert_eq "A reads what B wrote" "18" "$(redis-cli -p "$A_RESP" get hits)"

section "TALLY.SHARDS spreads a hot counter over the masters"
assert_eq "a counter starts with 1 shard" "1" "$(rcli tally.shards hot)"
assert_eq "grow to 6" "6" "$(rcli tally.shards hot 6)"
assert_eq "never shrinks" "6" "$(rcli tally.shards hot 2)"
assert_contains "SET of a sharded counter is refused" "$(rcli set hot 5)" "not supported"
masters=""
for i in 0 1 2 3 4 5; do
	if [ "$i" -eq 0 ]; then k='t:c:{hot}'; else k="t:c:{hot#$i}"; fi
	masters+="$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")"$'\n'
done
nm=$(printf '%s' "$masters" | sort -u | grep -c .)
assert_int_cmp "the 6 shards of hot are on more than one master" "$nm" -gt 1

section "several tallyd instances incrementing one sharded counter"
start_tallyd "$TMP/c" "${CS[@]}"
C_RESP=$T_RESP
# 3 instances x 2 clients x 400 INCRs, pipelined; the total must be exact.
LOAD=()
for p in "$A_RESP" "$B_RESP" "$C_RESP"; do
	for j in 1 2; do
		(for ((i = 0; i < 400; i++)); do echo "INCR hot"; echo "TALLY.ADD article view 77 $j"; done |
			timeout 120 redis-cli -p "$p" >/dev/null 2>&1) &
		LOAD+=($!)
		BG_PIDS+=($!)
	done
done
for pid in "${LOAD[@]}"; do wait "$pid" || true; done
assert_eq "hot is exact on A" "2400" "$(redis-cli -p "$A_RESP" get hot)"
assert_eq "hot is exact on C" "2400" "$(redis-cli -p "$C_RESP" get hot)"
assert_eq "views of 77 are exact" "2400" "$(redis-cli -p "$B_RESP" tally.count article view 77)"
used=0
for i in 0 1 2 3 4 5; do
	if [ "$i" -eq 0 ]; then k='t:c:{hot}'; else k="t:c:{hot#$i}"; fi
	v=$(ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")" get "$k")
	[ -n "$v" ] && [ "$v" != "0" ] && used=$((used + 1))
done
assert_int_cmp "increments landed on more than one shard" "$used" -gt 1

section "what this store refuses"
assert_contains "TALLY.BACKUP" "$(rcli tally.backup "$TMP/bk")" "not supported"
finish
