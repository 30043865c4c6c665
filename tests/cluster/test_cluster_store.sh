#!/usr/bin/env bash
# test_cluster_store.sh: tallyd on the redis-cluster store, against a real
# 6-node Redis Cluster (3 masters, 3 replicas): counters, events and their
# queries, client ids retried on another tallyd, TALLY.SHARDS spreading a
# counter over masters, exact totals under concurrent increments from
# several tallyd instances sharing the cluster, pipelined bursts of one
# counter answered with their running values (one INCRBY of the batch's sum
# on the master, per-delta only past the int64 edge), and what this store
# refuses.
source "$(dirname "$0")/lib_cluster.sh" "$@"
need_cmd redis-cli curl redis-benchmark


# resp ARG...: one command in RESP, with \r\n written as printf %b escapes.
resp() {
	local a out="*$#\\r\\n"
	for a in "$@"; do out+="\$${#a}\\r\\n$a\\r\\n"; done
	printf '%s' "$out"
}
# pipe PORT COPIES NCMDS UNIT: UNIT (NCMDS commands made by resp) COPIES
# times in one write, so that tallyd queues them together; prints the
# replies in order, one a line, without their ':' or '-'.
pipe() {
	timeout 60 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 9
		buf=""
		for ((i = 0; i < $2; i++)); do buf+=$4; done
		printf "%b" "$buf" >&3
		for ((i = 0; i < $2 * $3; i++)); do
			IFS= read -r l <&3 || exit 1
			l=${l%$(printf "\r")}
			printf "%s\n" "${l#[:-]}"
		done' _ "$@" || echo "(pipe failed)"
}
tstat() { # FIELD of the current tallyd's INFO stats
	rcli info stats | tr -d '\r' | awk -F: -v f="$1" '$1 == f { print $2 }'
}
# The calls of commands CMD... summed over every master's INFO commandstats.
mcalls() {
	local p c n=0 v
	for p in $(cluster_masters); do
		for c in "$@"; do
			v=$(ccli "$p" info commandstats | tr -d '\r' |
				awk -F'[:,=]' -v c="cmdstat_$c" '$1 == c { print $3 }')
			n=$((n + ${v:-0}))
		done
	done
	echo "$n"
}

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

section "a pipelined burst of one counter: running values, the int64 edge"
assert_eq "1000 pipelined INCRBY 1 answer 1..1000 in order" "$(seq 1 1000)" \
	"$(pipe "$T_RESP" 1000 1 "$(resp INCRBY burst 1)")"
assert_eq "200 pipelined DECRBY 2 answer 998..600 in order" "$(seq 998 -2 600)" \
	"$(pipe "$T_RESP" 200 1 "$(resp DECRBY burst 2)")"
assert_eq "mixed signs (INCRBY 5, DECRBY 3) x 100: running values" \
	"$(for ((i = 0; i < 100; i++)); do echo $((600 + 2 * i + 5)); echo $((600 + 2 * i + 2)); done)" \
	"$(pipe "$T_RESP" 100 2 "$(resp INCRBY burst 5)$(resp DECRBY burst 3)")"
assert_eq "GET after the bursts" "800" "$(rcli get burst)"
assert_eq "an object total in a burst: 300 anonymous views answer 1..300" "$(seq 1 300)" \
	"$(pipe "$T_RESP" 300 1 "$(resp TALLY.ADD article view 55 0)")"
assert_eq "a 3-shard counter: 300 pipelined INCRs answer its total 1..300" "$(seq 1 300)" \
	"$(rcli tally.shards burst3 3 >/dev/null; pipe "$T_RESP" 300 1 "$(resp INCR burst3)")"
# edge DESC START COPIES NCMDS UNIT REPLIES FINAL: counter edge SET to
# START, then UNIT (NCMDS commands) COPIES times pipelined must answer
# REPLIES (overflow errors as x) and leave FINAL. The case is about one
# batch, so the burst is sent while tallyd's committer waits on a batch of
# its own (an INCR of another counter, held by CLIENT PAUSE on every
# master): it all queues and goes in the next batch. tallyd's batch count
# checks that (2 batches); tried up to 3 times, every try checked.
edge() {
	local desc=$1 start=$2 copies=$3 ncmds=$4 unit=$5 want=$6 final=$7
	local one=0 try b0 out p fill
	for ((try = 0; try < 3 && one == 0; try++)); do
		rcli set edge "$start" >/dev/null
		b0=$(tstat batches)
		for p in $(cluster_masters); do cluster_pause "$p" 1000; done
		timeout 20 redis-cli -p "$T_RESP" incr edgefill >/dev/null 2>&1 &
		fill=$!
		sleep 0.3
		out=$(pipe "$T_RESP" "$copies" "$ncmds" "$unit")
		wait "$fill" || true
		[ "$(($(tstat batches) - b0))" -eq 2 ] && one=1
		assert_eq "$desc" "$want" \
			"$(sed 's/^ERR.*overflow.*/x/' <<<"$out" | tr '\n' ' ' | sed 's/ $//')"
		assert_eq "... and the counter ends at $final" "$final" "$(rcli get edge)"
	done
	assert_eq "... the burst went in one batch (at most 3 tries)" "1" "$one"
}
# The sum overflows, so the script adds them one by one: 3 fit, 2 fail.
edge "INT64_MAX-10 + 5 x INCRBY 3: 3 values, then 2 overflow errors" \
	9223372036854775797 5 1 "$(resp INCRBY edge 3)" \
	"9223372036854775800 9223372036854775803 9223372036854775806 x x" 9223372036854775806
edge "INT64_MIN+10 - 5 x DECRBY 3: 3 values, then 2 overflow errors" \
	-9223372036854775798 5 1 "$(resp DECRBY edge 3)" \
	"-9223372036854775801 -9223372036854775804 -9223372036854775807 x x" -9223372036854775807
# Opposite signs are added one by one even when their sum would fit.
edge "INT64_MAX-2 + (INCRBY 5, DECRBY 5): an overflow error, then INT64_MAX-7" \
	9223372036854775805 1 2 "$(resp INCRBY edge 5)$(resp DECRBY edge 5)" \
	"x 9223372036854775800" 9223372036854775800
# A sum out of int64 in tallyd is not sent either.
edge "0 + 2 x INCRBY INT64_MAX: INT64_MAX, then an overflow error" \
	0 2 1 "$(resp INCRBY edge 9223372036854775807)" \
	"9223372036854775807 x" 9223372036854775807
# Master work per batch, not per increment: scripts and INCRBYs on the
# masters per increment (about 2 per batch whatever its size).
c0=$(mcalls evalsha incrby)
n=20000
if timeout 120 redis-benchmark -p "$T_RESP" -n "$n" -c 20 -P 16 -q INCR hotb >/dev/null 2>&1; then
	pass "redis-benchmark INCR hotb exits 0"
else
	fail "redis-benchmark INCR hotb exits 0"
fi
calls=$(($(mcalls evalsha incrby) - c0))
assert_eq "hotb is exact" "$n" "$(rcli get hotb)"
say "     ($calls EVALSHA + INCRBY calls on the masters for $n increments)"
assert_int_cmp "masters ran under 0.5 scripts-or-INCRBY per increment (x1000)" \
	"$((calls * 1000 / n))" -lt 500

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
# IDs are any bytes and tags can coincide; no ID may find another write's
# token. ID "cid" stores tokens for a view's write and its recent entry;
# "cid:r" is another ID.
assert_eq "a view with ID cid" "1" "$(rcli tally.add article view 50 5 id cid)"
assert_eq "a view with ID cid:r is another write" "2" \
	"$(rcli tally.add article view 50 6 id cid:r)"
assert_eq "a like by member 77 with ID k7" "1" "$(rcli tally.add article like 51 77 id k7)"
assert_eq "counter u77 (member 77's history tag) with ID k7:h is another write" \
	'{"name":"u77","value":1}' \
	"$(curl -s -X POST -d '{"id":"k7:h"}' "http://127.0.0.1:$B_HTTP/v1/counters/u77/incr")"
# A counter named like the sub-hash that holds member 9 of article 52's
# likes, written on B with ID k8; then a like of member 9 with ID k8 on A
# (whose own memory of IDs has no k8): a write of another kind, under its
# own token key.
assert_eq "counter article|#1|52#0 with ID k8 on B" \
	'{"name":"article|#1|52#0","value":1}' \
	"$(curl -s -X POST -d '{"id":"k8"}' "http://127.0.0.1:$B_HTTP/v1/counters/article%7C%231%7C52%230/incr")"
assert_eq "a like with ID k8 on A is applied" "1" \
	"$(redis-cli -p "$A_RESP" tally.add article like 52 9 id k8)"
assert_match "and member 9 is in" '^[0-9]{13}$' \
	"$(redis-cli -p "$A_RESP" tally.has article like 52 9)"
k='t:m:{article|#1|52#0}'
assert_match "in the sub-hash the counter is named like" '^[0-9]{13}$' \
	"$(ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")" hget "$k" 9)"
assert_eq "the like retried on A is answered as first run" "1" \
	"$(redis-cli -p "$A_RESP" tally.add article like 52 9 id k8)"
assert_eq "the store still takes writes" "1" "$(rcli incr after-ids)"
# An add with an ID runs a script of its own; after an add without one to
# the same total, in one pipeline, it is still applied second.
unit=$(resp TALLY.ADD article view 70 0 DELTA 5)$(resp TALLY.ADD article view 70 0 DELTA 1 ID ord1)
assert_eq "pipelined adds to one total, the second with an ID, answer in order" \
	"$(printf '5\n6\n8\n9')" \
	"$(pipe "$A_RESP" 1 2 "$unit"; pipe "$A_RESP" 1 2 "$(resp TALLY.ADD article view 70 0 DELTA 2)$(resp TALLY.ADD article view 70 0 DELTA 1 ID ord2)")"

# A retry answered from Redis's token (here on another tallyd, whose
# memory has not seen the ID) made its like before: the writes queued
# ahead of it in the same batch are answered without it. They were
# answered one short (1 then 2), as if the retry had liked again now.
redis-cli -p "$A_RESP" tally.add article like 60 100 id rb-x >/dev/null
assert_eq "a like, then the retry of another's like, in one pipeline on B" \
	"$(printf '2\n2')" \
	"$(pipe "$B_RESP" 1 2 "$(resp TALLY.ADD article like 60 200 ID rb-y)$(resp TALLY.ADD article like 60 100 ID rb-x)")"
redis-cli -p "$A_RESP" tally.add article like 61 400 id rb-w >/dev/null
assert_eq "... with a like and a remove that changes nothing before it" \
	"$(printf '2\n2\n2')" \
	"$(pipe "$B_RESP" 1 3 "$(resp TALLY.ADD article like 61 500)$(resp TALLY.REMOVE article like 61 300)$(resp TALLY.ADD article like 61 400 ID rb-w)")"
assert_eq "and the counts are those" "2 2" \
	"$(redis-cli -p "$A_RESP" tally.count article like 60) $(redis-cli -p "$A_RESP" tally.count article like 61)"

# A retry answered from a token whose first run stopped short of its
# log entries (their tokens gone here) writes them as the change they
# are: an add, not the batch's no-change (they were written as removes).
redis-cli -p "$A_RESP" tally.add article view 72 42 delta 3 id rv-1 >/dev/null
redis-cli -p "$A_RESP" tally.add article like 73 42 id rv-2 >/dev/null
for p in $(cluster_masters); do
	for k in $(ccli "$p" --scan --pattern 't:i[rh]:*rv-[12]'); do
		ccli "$p" del "$k" >/dev/null
	done
done
assert_eq "the retry on B answers the first result" "3 1" \
	"$(redis-cli -p "$B_RESP" tally.add article view 72 42 delta 3 id rv-1) $(redis-cli -p "$B_RESP" tally.add article like 73 42 id rv-2)"
assert_eq "... and its recent entries are adds" "add add add add" \
	"$(redis-cli -p "$B_RESP" tally.recent article view 72 | sed -n '3p;7p' | paste -sd' ') $(redis-cli -p "$B_RESP" tally.recent article like 73 | sed -n '3p;7p' | paste -sd' ')"
assert_eq "... and so are its history entries" "0" \
	"$(redis-cli -p "$B_RESP" tally.history 42 view | grep -c remove || true)"

section "content types another instance created"
# A and B run; each creates a content type the other has not seen. B's
# first content type after start takes the same id as A's new one: the
# shared schema keeps both names, and every instance reads both.
assert_eq "a video like on A" "1" "$(redis-cli -p "$A_RESP" tally.add video like 1 7)"
assert_eq "B reads A's new content type" "1" \
	"$(redis-cli -p "$B_RESP" tally.count video like 1)"
assert_match "B: HAS" '^[0-9]{13}$' "$(redis-cli -p "$B_RESP" tally.has video like 1 7)"
assert_eq "B: RECENT" "7" "$(redis-cli -p "$B_RESP" tally.recent video like 1 | head -1)"
assert_eq "B: MCOUNT" "1 0" \
	"$(redis-cli -p "$B_RESP" tally.mcount video like 1 2 | tr '\n' ' ' | sed 's/ $//')"
assert_eq "a photo like on B" "1" "$(redis-cli -p "$B_RESP" tally.add photo like 1 7)"
assert_eq "A reads B's" "1" "$(redis-cli -p "$A_RESP" tally.count photo like 1)"
assert_contains "A: HISTORY of member 7 lists video and photo" \
	"$(redis-cli -p "$A_RESP" tally.history 7 like | tr '\n' ' ')" "photo 1"
assert_contains "B: HISTORY too" \
	"$(redis-cli -p "$B_RESP" tally.history 7 like | tr '\n' ' ')" "video 1"
names=$(ccli "${CL_PORTS[0]}" -c hvals t:schema | sort | tr '\n' ' ')
assert_contains "the shared schema holds photo" "$names" "photo"
assert_contains "... and video" "$names" "video"
# Counting types too: A and B each add one, under the same local id.
assert_eq "A adds the type star" "OK" "$(redis-cli -p "$A_RESP" tally.type add star total)"
assert_eq "B adds the type flag" "OK" "$(redis-cli -p "$B_RESP" tally.type add flag total)"
kt=$(ccli "${CL_PORTS[0]}" -c hgetall t:schema | tr '\n' ' ')
assert_contains "the shared schema holds star" "$kt" ":star"
assert_contains "... and flag" "$kt" ":flag"
# A third instance, started after both, knows them all from the schema (B
# stays the current tallyd of the sections below).
saved=("$T_RESP" "$T_HTTP" "$T_PID" "$T_LOG" "$T_DATA")
start_tallyd "$TMP/c2" "${CS[@]}"
assert_eq "C counts video" "1" "$(rcli tally.count video like 1)"
assert_eq "C counts photo" "1" "$(rcli tally.count photo like 1)"
assert_eq "C: COUNTS of a photo" "1" "$(rcli tally.counts photo 1 | sed -n 2p)"
assert_eq "C knows star" "2" "$(rcli tally.add article star 1 0 delta 2)"
assert_eq "C knows flag" "3" "$(rcli tally.add article flag 1 0 delta 3)"
stop_tallyd
T_RESP=${saved[0]} T_HTTP=${saved[1]} T_PID=${saved[2]} T_LOG=${saved[3]}
T_DATA=${saved[4]}

section "a counting type's mode is the same on every instance"
# B started before A adds the type: B's own schema does not know it.
assert_eq "bookmark added on A, unique" "OK" "$(redis-cli -p "$A_RESP" tally.type add bookmark unique)"
assert_contains "B cannot add bookmark as a total type" \
	"$(redis-cli -p "$B_RESP" tally.type add bookmark total 2>&1)" "exists with the other mode"
assert_contains "B does not know bookmark after the refusal" \
	"$(redis-cli -p "$B_RESP" tally.add article bookmark 60 5 2>&1)" "unknown counting type"
assert_eq "B adds it with its mode" "OK" "$(redis-cli -p "$B_RESP" tally.type add bookmark unique)"
assert_eq "a bookmark on B" "1" "$(redis-cli -p "$B_RESP" tally.add article bookmark 60 5)"
assert_eq "the same member on A changes nothing" "1" \
	"$(redis-cli -p "$A_RESP" tally.add article bookmark 60 5)"
assert_eq "A counts what B stored" "1" "$(redis-cli -p "$A_RESP" tally.count article bookmark 60)"

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

section "a counter whose name holds '#' is not another counter's shard"
# Shard 2 of hot is t:c:{hot#2}; the counter "hot#2" is t:c:{hot%232}.
before=$(rcli get hot)
assert_eq "INCRBY hot#2" "1000" "$(rcli incrby 'hot#2' 1000)"
assert_eq "hot is unchanged" "$before" "$(rcli get hot)"
assert_eq "SET hot#2 (one shard of its own)" "OK" "$(rcli set 'hot#2' 5)"
assert_eq "GET hot#2" "5" "$(rcli get 'hot#2')"
assert_eq "hot is still unchanged" "$before" "$(rcli get hot)"
k='t:c:{hot%232}'
assert_eq "stored under its escaped name" "5" \
	"$(ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")" get "$k")"

section "a shard tally did not write fails only the writes that read it"
# cz has 2 shards and shard 1 holds "abc". Two INCRs, in two batches,
# write shard 0 and shard 1 (in either order): the one that writes shard
# 0 reads shard 1 for its answer. Before, that read failed the store.
assert_eq "cz: 2 shards" "2" "$(rcli tally.shards cz 2)"
k='t:c:{cz#1}'
ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")" set "$k" abc >/dev/null
r1=$(rcli incr cz 2>&1)
r2=$(rcli incr cz 2>&1)
assert_contains "the INCR of cz that writes shard 1 answers that it is corrupt" "$r1 / $r2" "corrupt"
# The other: "corrupt" too; it said "would overflow" before.
assert_not_contains "neither says overflow" "$r1 / $r2" "overflow"
assert_contains "the first INCR of cz is answered corrupt" "$r1" "corrupt"
assert_contains "the second INCR of cz is answered corrupt" "$r2" "corrupt"
assert_eq "the store still takes writes" "1" "$(rcli incr czok)"
assert_eq "... and reads" "1" "$(rcli get czok)"

section "a batch that reads more shards than one pipeline holds"
# 257 counters of 256 shards each, incremented in one pipelined write:
# the batch's sums read 65,792 shards, past the cluster client's 65,536
# commands per exec, so its reads go in two parts.
for ((i = 0; i < 257; i++)); do echo "TALLY.SHARDS wide$i 256"; done |
	redis-cli -p "$A_RESP" >/dev/null
assert_eq "the last of them, wide256, has 256 shards" "256" "$(rcli tally.shards wide256)"
unit=""
for ((i = 0; i < 257; i++)); do unit+=$(resp INCR "wide$i"); done
got=$(pipe "$A_RESP" 1 257 "$unit")
assert_eq "each of the 257 INCRs answers 1" "$(printf '1\n%.0s' $(seq 257))" "$got"
assert_eq "wide200 reads 1" "1" "$(rcli get wide200)"
assert_eq "the store still takes writes" "2" "$(rcli incr wide0)"

section "MGET: many counters in one pipeline, shards another tallyd added"
# 70 counters cross the 64-key pipeline chunk; g's shards grow on B
# while A knows one, and two of them are written in the cluster itself.
args=() want=""
for ((i = 1; i <= 70; i++)); do
	args+=("SET m$i $((i * 3))")
	want+="$((i * 3))"$'\n'
done
printf '%s\n' "${args[@]}" | redis-cli -p "$A_RESP" >/dev/null
assert_eq "INCRBY g on A" "10" "$(redis-cli -p "$A_RESP" incrby g 10)"
assert_eq "g grows to 4 shards on B" "4" "$(redis-cli -p "$B_RESP" tally.shards g 4)"
for i in 2 3; do
	k="t:c:{g#$i}"
	ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")" set "$k" "$((i * 2))" >/dev/null
done
keys=()
for ((i = 1; i <= 70; i++)); do keys+=("m$i"); done
got=$(redis-cli -p "$A_RESP" mget "${keys[@]}" nothing g hits 2>&1)
assert_eq "MGET of 73 counters on A: each value in its place, nil for none" \
	"${want}"$'\n'"20"$'\n'"18" "$got"
assert_eq "GET g on A sums the 4 shards" "20" "$(redis-cli -p "$A_RESP" get g)"
assert_eq "MGET of one missing counter" "" "$(redis-cli -p "$A_RESP" mget nothing)"

section "an INCR's answer counts the shards another tallyd added"
# A knows 8 shards of w1 and w2; B grows them to 16 and shards 8..15
# get 100 each. A writes one of its 8 known shards (shard 0 only one
# time in 8, and its script alone reads the count): its answer must
# still sum all 16 (it summed its 8 before: 11 and 12).
for c in w1 w2; do
	assert_eq "$c: 8 shards on A" "8" "$(redis-cli -p "$A_RESP" tally.shards $c 8)"
	assert_eq "$c: INCRBY 10 on A" "10" "$(redis-cli -p "$A_RESP" incrby $c 10)"
	assert_eq "$c: 16 shards on B" "16" "$(redis-cli -p "$B_RESP" tally.shards $c 16)"
	for ((i = 8; i < 16; i++)); do
		k="t:c:{$c#$i}"
		ccli "$(cluster_master_of_slot "$(ccli "${CL_PORTS[0]}" cluster keyslot "$k")")" set "$k" 100 >/dev/null
	done
	assert_eq "$c: INCR on A counts B's shards" "811" "$(redis-cli -p "$A_RESP" incr $c)"
	assert_eq "$c: and again" "812" "$(redis-cli -p "$A_RESP" incr $c)"
	assert_eq "$c: GET on A" "812" "$(redis-cli -p "$A_RESP" get $c)"
done

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

section "a read that fails answers an error, never nil or 0"
# The last section: every node killed. MGET and EXISTS of a counter
# that held 5 fail (as GET does); none says the counter is missing.
rcli set mg:a 5 >/dev/null
assert_eq "MGET while the nodes run" "5" "$(rcli mget mg:a mg:none | head -n 1)"
assert_eq "EXISTS while the nodes run" "1" "$(rcli exists mg:a mg:none)"
for p in "${CL_PORTS[@]}"; do
	_kill_pid "${CL_PID[$p]}"
	unset "CL_PID[$p]"
	echo "$p" >>"$TMP/cl_dead"
done
assert_contains "MGET once no node runs" "$(rcli mget mg:a mg:none)" "ERR"
assert_contains "EXISTS once no node runs" "$(rcli exists mg:a)" "ERR"
finish
