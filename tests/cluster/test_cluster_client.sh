#!/usr/bin/env bash
# test_cluster_client.sh: the cluster client (src/store/cluster.c) against a
# real 6-node Redis Cluster: key slots equal CLUSTER KEYSLOT, a pipelined
# batch over all masters, ASK and MOVED while a slot migrates, NOSCRIPT and
# WAIT on every master, a paused node giving CL_UNKNOWN instead of a hang,
# and a master killed under load (writes confirmed by WAIT survive, no write
# is counted twice, service resumes after the replica is promoted).
source "$(dirname "$0")/lib_cluster.sh" "$@"
CC=$BUILD_DIR/cluster_client
[ -x "$CC" ] || { fail "cluster_client is built at $CC"; finish; }

# run_mode DESC ARGS...: a cluster_client mode, its lines shown, exit 0.
run_mode() {
	local desc=$1 out rc=0
	shift
	out=$(timeout 180 "$CC" "$@" 2>&1) || rc=$?
	say "$out" | sed 's/^/    /'
	if [ $rc -eq 0 ]; then
		pass "$desc"
	else
		fail "$desc" "cluster_client $1 exited $rc"
	fi
}

section "key slots equal CLUSTER KEYSLOT"
# Keys with and without hash tags, odd braces, and random bytes (hex).
keys=(a "" "{" "}" "{}" "{}x" "x{}" "{a}{b}" "a{b}c" "a{{b}}" "t:c:{hits#7}")
for ((i = 0; i < 300; i++)); do
	keys+=("k$RANDOM:{$((RANDOM % 50))}.$i" "$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')")
done
cluster_start no
p0=${CL_PORTS[0]}
# One redis-cli for all keys (quoted: the empty key is "").
theirs=$(for k in "${keys[@]}"; do printf 'cluster keyslot "%s"\n' "$k"; done |
	timeout 30 redis-cli -h 127.0.0.1 -p "$p0" 2>&1 || true)
ours=$("$CC" slots "${keys[@]}")
assert_eq "client slots equal the cluster's for ${#keys[@]} keys" "$theirs" "$ours"

section "pipelined batch over all masters"
run_mode "batch" batch "$CL_SEEDS"

section "slot migration: ASK, then MOVED"
run_mode "migrate" migrate "$CL_SEEDS"

section "scripts and WAIT on every master"
run_mode "scripts" scripts "$CL_SEEDS"

section "the add script's tokens: a refusal kept for its batch's resend only"
run_mode "addscript" addscript "$CL_SEEDS"

section "a paused node"
run_mode "pause" pause "$CL_SEEDS"

section "a master killed under load"
"$CC" failover "$CL_SEEDS" "$TMP/stop" "$TMP/ready" >"$TMP/failover.out" 2>&1 &
FO=$!
BG_PIDS+=("$FO")
for ((i = 0; i < 100; i++)); do
	[ -e "$TMP/ready" ] && break
	sleep 0.1
done
sleep 1
victim=$(cluster_masters | head -n 1)
t0=$(now_ms)
promoted=$(cluster_kill_master "$victim") || promoted=""
say "killed master $victim; replica ${promoted:-?} promoted in $(( $(now_ms) - t0 )) ms"
assert_ne "a replica took over" "" "$promoted"
touch "$TMP/stop"
wait_bg "$FO" 120 "the failover driver stops within 120 s of being told"
rc=$WAIT_RC
sed 's/^/    /' "$TMP/failover.out"
assert_eq "failover: exact bounds held, service resumed" 0 "$rc"

finish
