#!/usr/bin/env bash
# Hostile clients against one tallyd (hostile_client.c): maxclients filled,
# hundreds of partial commands held, clients that never read, huge declared
# sizes, deep nesting, 100k arguments, garbage from 1000 connections, slow
# and oversized HTTP; a good client must be served, right and in time,
# throughout, and tallyd's peak RSS must stay under a bound.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli curl

CLIENT=$BUILD_DIR/hostile_client
[ -x "$CLIENT" ] || { fail "hostile_client is built ($CLIENT)"; finish; }

# The phases hold up to ~330 connections at once on each side; with
# tallyd's own files that is close to a default limit of 1024.
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# The bounds. RSS: every phase is bounded by a limit per client times the
# clients it holds (32 partial 1 MiB arguments, 12 clients at a 4 MiB
# output limit); 256 MiB leaves room for allocator slack and would still
# catch memory that grows with what clients declare or send unread
# (hundreds of MiB within seconds). Latency: 5 s for one reply is far
# beyond normal (a few ms), yet robust on a loaded 2-core machine.
# AddressSanitizer's redzones and quarantine (256 MiB by default) inflate
# memory, and it slows everything: scale both.
MAXCLIENTS=300
RSS_BOUND_KIB=$((256 * 1024))
LATENCY_MS=5000
if grep -q '^TALLY_SANITIZE:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
	RSS_BOUND_KIB=$((RSS_BOUND_KIB * 3))
	LATENCY_MS=15000
	say "(ASan build: RSS bound ${RSS_BOUND_KIB} KiB, latency bound ${LATENCY_MS} ms)"
fi

start_tallyd "$TMP/data" --maxclients "$MAXCLIENTS" --max-output-bytes 4194304
say "tallyd pid $T_PID, RESP $T_RESP, HTTP $T_HTTP, open files $(ulimit -n)"

rc=0
timeout 600 "$CLIENT" "$T_RESP" "$T_HTTP" "$T_PID" "$MAXCLIENTS" \
	"$RSS_BOUND_KIB" "$LATENCY_MS" >"$TMP/client.out" 2>&1 || rc=$?
grep -v -e '^ok   ' -e '^FAIL ' "$TMP/client.out" || true
while IFS= read -r line; do
	pass "${line#ok   }"
done < <(grep '^ok   ' "$TMP/client.out" || true)
while IFS= read -r line; do
	fail "${line#FAIL }"
done < <(grep '^FAIL ' "$TMP/client.out" || true)
assert_eq "hostile_client exits 0" "0" "$rc"
assert_int_cmp "hostile_client made at least 40 checks" \
	"$(grep -c -e '^ok   ' -e '^FAIL ' "$TMP/client.out" || true)" -ge 40

section "a client over its output limit gets no more of its pipeline run"
# 1 MiB of TALLY.RECENT LIMIT 1000 (each reply ~30 KB) in one go, never
# read: ~24000 commands. Only those whose replies fit the 4 MiB output
# limit and the socket buffers (a few hundred) should run; running the
# rest of each 64 KiB read (~1500 commands) after the limit would cost
# the loop's other clients their turn for nothing.
stat_cmds() { rcli info stats | sed -n 's/^total_commands_processed:\([0-9]*\).*/\1/p'; }
line='TALLY.RECENT article like 778 LIMIT 1000\r\n'
for ((i = 0; i < 24385; i++)); do printf "$line"; done >"$TMP/recent.req"
cmds0=$(stat_cmds)
closes0=$(metric tally_output_limit_closes_total)
exec {flood}<>"/dev/tcp/127.0.0.1/$T_RESP"
timeout 30 cat "$TMP/recent.req" >&"$flood" 2>/dev/null || true
closes1=$closes0
for ((i = 0; i < 100; i++)); do
	closes1=$(metric tally_output_limit_closes_total)
	[ "${closes1:-0}" -gt "${closes0:-0}" ] && break
	sleep 0.1
done
exec {flood}>&-
cmds1=$(stat_cmds)
ran=$((cmds1 - cmds0 - 1))   # less our own INFO
say "commands run for the flooding client: $ran of 24385"
assert_int_cmp "the flooding client was closed at the output limit" \
	"${closes1:-0}" -gt "${closes0:-0}"
assert_int_cmp "fewer than 1000 of its commands ran" "$ran" -lt 1000

section "after the abuse"
assert_alive
assert_eq "PING from a new client" "PONG" "$(rcli ping)"
good=$(rcli get hostile:good)
assert_match "the good client's counter is a number" '^[0-9]+$' "$good"
assert_eq "its like count equals its counter (every ack kept)" "$good" \
	"$(rcli tally.count article like 777)"
http GET /v1/counters/hostile:good
assert_eq "HTTP still answers" "200" "$HTTP_CODE"
assert_eq "no 5xx was seen" "0" "$HTTP_5XX"
stop_and_check
finish
