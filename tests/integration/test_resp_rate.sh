#!/usr/bin/env bash
# test_resp_rate.sh: resp_rate, the open-loop RESP load generator make bench
# times reads at half load with, against a real tallyd and a real
# redis-server: it sends exactly the asked rate and every command once,
# times a reply from when its command was due (a server stopped for half a
# second shows in the percentiles, which a closed-loop client would hide),
# draws each __rand_int__ anew, and fails loudly on an error reply, a
# server that falls behind or goes away, and bad arguments.
source "$(dirname "$0")/lib.sh" "$@"

RATE=$BUILD_DIR/resp_rate
need_cmd redis-server redis-cli
[ -x "$RATE" ] || { fail "resp_rate is built at $RATE"; finish; }

field() { # JSON-LINE KEY: a top-level value of resp_rate's line
	printf '%s\n' "$1" | tr ',' '\n' | tr -d '{}"' |
		awk -F: -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print "missing" }'
}
num_cmp() { awk -v a="$1" -v b="$3" "BEGIN { print (a $2 b) ? 1 : 0 }"; }
run_rate() { # ARGS...: sets OUT, ERR, RC
	set +e
	OUT=$(timeout 60 "$RATE" "$@" 2>"$TMP/rate.err")
	RC=$?
	set -e
	ERR=$(cat "$TMP/rate.err")
}

start_tallyd "$TMP/data"

section "the asked rate, every command once"
run_rate -p "$T_RESP" -c 4 -R 2000 -s 2 INCR hot
assert_eq "exit 0" 0 "$RC"
assert_eq "2000/s for 2 s: 4000 sent" 4000 "$(field "$OUT" sent)"
assert_eq "4000 answered" 4000 "$(field "$OUT" answered)"
assert_eq "no error reply" 0 "$(field "$OUT" errors)"
assert_eq "every reply timed (no warm-up)" 4000 "$(field "$OUT" timed)"
assert_eq "tallyd counted each once" 4000 "$(rcli GET hot)"
assert_eq "its own send lag: p50 <= p99 <= max" 1 "$(awk -v a="$(field "$OUT" send_lag_p50_ms)" \
	-v b="$(field "$OUT" send_lag_p99_ms)" -v c="$(field "$OUT" send_lag_max_ms)" 'BEGIN { print (a <= b && b <= c) ? 1 : 0 }')"
assert_eq "p50 <= p99 <= max" 1 "$(awk -v a="$(field "$OUT" p50_ms)" \
	-v b="$(field "$OUT" p99_ms)" -v c="$(field "$OUT" max_ms)" 'BEGIN { print (a > 0 && a <= b && b <= c) ? 1 : 0 }')"

section "a warm-up: replies to commands due in it are not timed"
run_rate -p "$T_RESP" -c 2 -R 1000 -s 2 -w 1 INCR warm
assert_eq "exit 0" 0 "$RC"
assert_eq "all 2000 answered" 2000 "$(field "$OUT" answered)"
assert_eq "1000 timed" 1000 "$(field "$OUT" timed)"

section "__rand_int__: 12 digits, drawn anew for each occurrence"
run_rate -p "$T_RESP" -c 2 -R 1000 -s 1 -r 10 INCRBY k:__rand_int__:__rand_int__ 1
assert_eq "exit 0" 0 "$RC"
names=()
for a in $(seq 0 9); do
	for b in $(seq 0 9); do names+=("k:00000000000$a:00000000000$b"); done
done
vals=$(rcli MGET "${names[@]}")
assert_eq "1000 increments, all on keys of that form" 1000 \
	"$(printf '%s\n' "$vals" | awk '{ s += $1 } END { print s }')"
# 100 possible keys, 1000 draws: with one number shared by both
# occurrences only the 10 keys k:N:N could be hit.
assert_int_cmp "more than the 10 keys one shared draw would give" \
	"$(printf '%s\n' "$vals" | grep -c '^[1-9]')" -gt 10

section "open loop: a server stopped for 0.5 s is charged for every command that waited"
(sleep 1; kill -STOP "$T_PID"; sleep 0.5; kill -CONT "$T_PID") &
BG_PIDS+=("$!")
run_rate -p "$T_RESP" -c 4 -R 2000 -s 3 INCR stopped
kill -CONT "$T_PID" 2>/dev/null || true
assert_eq "exit 0" 0 "$RC"
assert_eq "6000 answered" 6000 "$(field "$OUT" answered)"
assert_eq "counted each once" 6000 "$(rcli GET stopped)"
# 1000 of 6000 commands fell due while it was stopped, waiting 0 to 500
# ms: the p99 is among them. A client timing from the send would have
# had 4 in flight and charged only those.
assert_eq "p99 >= 250 ms" 1 "$(num_cmp "$(field "$OUT" p99_ms)" '>=' 250)"
assert_eq "max >= 400 ms" 1 "$(num_cmp "$(field "$OUT" max_ms)" '>=' 400)"
assert_eq "p50 under 100 ms" 1 "$(num_cmp "$(field "$OUT" p50_ms)" '<' 100)"

section "a real redis-server, the read make bench times"
start_ref_redis
assert_eq "redis-server answers" PONG "$(timeout 2 redis-cli -p "$RS_PORT" ping 2>&1)"
mget=(MGET)
for _ in $(seq 50); do mget+=(like:__rand_int__); done
run_rate -p "$RS_PORT" -c 8 -R 4000 -s 1 "${mget[@]}"
assert_eq "exit 0" 0 "$RC"
assert_eq "4000 MGETs of 50 answered" 4000 "$(field "$OUT" answered)"
mcount=(TALLY.MCOUNT article like)
for _ in $(seq 50); do mcount+=(__rand_int__); done
run_rate -p "$T_RESP" -c 8 -R 4000 -s 1 "${mcount[@]}"
assert_eq "and tallyd's MCOUNTs of 50" 4000 "$(field "$OUT" answered)"

section "failures are loud"
run_rate -p "$T_RESP" -c 2 -R 500 -s 1 NO.SUCH.COMMAND x
assert_eq "an error reply: exit 1" 1 "$RC"
assert_contains "the first error is named" "$ERR" "500 error replies, the first: ERR unknown command"
kill -STOP "$T_PID"
run_rate -p "$T_RESP" -c 1 -R 100000 -s 5 INCR behind
kill -CONT "$T_PID"
assert_eq "a server that falls behind: exit 1" 1 "$RC"
assert_contains "said so" "$ERR" "4096 commands unanswered on a connection: the server does not keep up with 100000/s"
assert_eq "and no figure for a load it did not take" "" "$OUT"
(sleep 1; kill -KILL "$RS_PID") &
BG_PIDS+=("$!")
run_rate -p "$RS_PORT" -c 2 -R 1000 -s 4 INCR gone
assert_eq "a server that goes away: exit 1" 1 "$RC"
assert_contains "said so" "$ERR" "the server closed a connection"
CLOSED=$(pick_port)
run_rate -p "$CLOSED" -R 10 INCR x
assert_eq "nothing listening: exit 1" 1 "$RC"
assert_contains "said so" "$ERR" "cannot connect to 127.0.0.1:$CLOSED"
assert_alive

section "bad arguments: usage, exit 2"
run_rate -p "$T_RESP" INCR x
assert_eq "no -R" 2 "$RC"
assert_contains "named" "$ERR" "-R RATE is required"
run_rate -p "$T_RESP" -R 10 -c 0 INCR x
assert_eq "-c 0" 2 "$RC"
assert_contains "its range" "$ERR" "-c 0: want a whole number from 1 to 1000"
run_rate -p "$T_RESP" -R 10 -c 1.5 INCR x
assert_eq "-c 1.5" 2 "$RC"
assert_contains "a whole number" "$ERR" "-c 1.5: want a whole number"
run_rate -p "$T_RESP" -R 10
assert_eq "no command" 2 "$RC"
assert_contains "named" "$ERR" "want a command of 1 to 256 words"
run_rate -p "$T_RESP" -R 10 -s 1 -w 1 INCR x
assert_eq "a warm-up as long as the run" 2 "$RC"
run_rate -p "$T_RESP" -R 10 -q 1 INCR x
assert_eq "an unknown flag" 2 "$RC"
assert_contains "named" "$ERR" "unknown flag -q"

stop_and_check
finish
