#!/usr/bin/env bash
# The hiredis + cmocka client (resp_client.c) against a real tallyd:
# 10k pipelined commands, error texts, RESP3 bytes, bad protocol input
# and 1000 garbage connections. Each cmocka test counts as one check here;
# then tallyd must still be up, serve a new client, and stop cleanly.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli

CLIENT=$BUILD_DIR/resp_client
[ -x "$CLIENT" ] || { fail "resp_client is built ($CLIENT)"; finish; }

start_tallyd "$TMP/data"
say "tallyd pid $T_PID, RESP $T_RESP"

rss0=$(proc_kib "$T_PID" VmRSS)
rc=0
timeout 300 "$CLIENT" "$T_RESP" >"$TMP/client.out" 2>&1 || rc=$?
cat "$TMP/client.out"
say ""
n_ok=0
while read -r name; do
	pass "resp_client: $name"
	n_ok=$((n_ok + 1))
done < <(sed -n 's/^\[       OK \] //p' "$TMP/client.out")
while read -r name; do
	fail "resp_client: $name"
done < <(sed -n 's/^\[  FAILED  \] \([a-z_0-9]*\)$/\1/p' "$TMP/client.out" | sort -u)
assert_eq "resp_client ran its 7 tests" "7" "$(grep -c '^\[ RUN      \]' "$TMP/client.out" || true)"
assert_eq "resp_client exits 0" "0" "$rc"

section "after the abuse"
assert_alive
assert_eq "PING from a new client" "PONG" "$(rcli ping)"
assert_match "the witness counter is intact" '^[0-9]+$' "$(rcli get witness)"
rss1=$(proc_kib "$T_PID" VmRSS)
say "tallyd RSS ${rss0} KiB before, ${rss1} KiB after"
assert_int_cmp "tallyd RSS grew by less than 200 MiB" "$((rss1 - rss0))" -lt 204800
for ((i = 0; i < 100; i++)); do
	clients=$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')
	[ "$clients" == 1 ] && break
	sleep 0.1
done
assert_eq "every abusive connection is gone (only ours is connected)" "1" "$clients"
stop_and_check
finish
