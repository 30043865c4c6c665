#!/usr/bin/env bash
# Crash matrix: kill -9 of a real tallyd (sync durability, the default) at
# random points of a mixed write load, then restart and prove that every
# acknowledged write survived, none applied twice, counts equal
# memberships, token retries apply once, created types exist, and that an
# acknowledged TALLY.BACKUP opens in a second tallyd and is consistent.
#
# Each point, on one data folder that lives across all points:
#  1. crash_driver load: 4 writer connections pipelining INCR, INCRBY,
#     DECR, DECRBY, SET and DEL on their own counters, INCRBY on a shared
#     one, likes and unlikes (TALLY.ADD/REMOVE, unique type), view adds and
#     removes (total type, DELTA), type creation (TALLY.TYPE ADD) and writes
#     on the new types; two connections writing only with ID tokens and
#     re-sending some (RESP: likes, unlikes, views; HTTP: counter
#     increments); a thread taking TALLY.BACKUP checkpoints. Every op is on
#     file before it is sent, every reply after it came.
#  2. kill -9 after a random delay (0..1.5 s after the first acknowledged
#     write; on odd points after the first acknowledged backup), restart
#     on the same folder.
#  3. crash_driver verify: per connection, some prefix of its ops between
#     the acknowledged ones and the sent ones explains every value read
#     back; the shared counter fits; COUNT == members found by HAS; the
#     token ops in flight, re-sent, answer as if applied once and leave
#     every op applied exactly once; values of earlier points unchanged.
#  4. the last acknowledged backup of the point: a second tallyd on it,
#     crash_driver verify-backup (same checks, bounded by what was
#     acknowledged before BACKUP and sent before its OK).
#
# Env: TALLY_CRASH_POINTS (default 20), TALLY_CRASH_SEED (default: from the
# clock; printed). A seed replays the same ops and kill delays; where the
# kill lands still depends on timing. TALLY_CRASH_TALLYD_ARGS: more tallyd
# flags for the crashed tallyd (e.g. "--durability async", which must
# fail). TALLY_CRASH_SELFTEST: see crash_driver.c.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli

DRIVER=$BUILD_DIR/crash_driver
[ -x "$DRIVER" ] || { fail "crash_driver is built ($DRIVER)"; finish; }
POINTS=${TALLY_CRASH_POINTS:-20}
SEED=${TALLY_CRASH_SEED:-$(( $(date +%s%N) % 1000000000 ))}
[[ "$SEED" =~ ^[0-9]+$ ]] || { fail "TALLY_CRASH_SEED is a number"; finish; }
read -r -a XARGS <<<"${TALLY_CRASH_TALLYD_ARGS:-}"
DATA=$TMP/data
WORK=$TMP/work
mkdir -p "$WORK"

# A generator of our own: lib.sh draws ports from $RANDOM, which must not
# shift the sequence a seed gives.
RNG=$((SEED * 2 + 1))
RND=0
rnd() { # N: RND = a number in [0, N)
	RNG=$(((RNG * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff))
	RND=$(((RNG >> 20) % $1))
}

# Start a second tallyd on backup N of point P and check it; the main
# tallyd keeps running.
check_backup() { # P N
	local p=$1 n=$2 s_pid=$T_PID s_resp=$T_RESP s_http=$T_HTTP s_log=$T_LOG \
		s_data=$T_DATA vrc=0
	if ! start_tallyd "$WORK/bk/p${p}_$n"; then
		fail "point $p: a tallyd starts on backup $n"
	else
		timeout 120 "$DRIVER" verify-backup "$T_RESP" "$T_HTTP" "$WORK" "$p" "$n" \
			>"$WORK/vbackup.$p.out" 2>&1 || vrc=$?
		report "$WORK/vbackup.$p.out"
		assert_eq "point $p: verify-backup exits 0" "0" "$vrc"
		stop_tallyd TERM
		assert_eq "point $p: the backup's tallyd exits 0 on SIGTERM" "0" "$T_EXIT"
		assert_log_clean "point $p: the backup's tallyd log has no sanitizer report"
	fi
	T_PID=$s_pid T_RESP=$s_resp T_HTTP=$s_http T_LOG=$s_log T_DATA=$s_data
}

START=$SECONDS
ACKED=0
TYPES=0
BACKUPS=0
BACKUP_MS=
BACKUPS_CHECKED=0
KILL_IN_BACKUP=0
KILL_IN_TYPE=0
KILL_TOKENS=0
say "crash matrix: $POINTS points, seed $SEED (TALLY_CRASH_SEED=$SEED replays it)"
start_tallyd "$DATA" "${XARGS[@]}"

for ((p = 1; p <= POINTS; p++)); do
	section "point $p"
	rnd 1000000000
	pseed=$RND
	rnd 1500
	delay=$RND
	"$DRIVER" load "$T_RESP" "$T_HTTP" "$WORK" "$p" "$pseed" 60 >"$WORK/load.$p.out" 2>&1 &
	lpid=$!
	BG_PIDS+=("$lpid")
	# The random delay runs from the first acknowledged write; on odd
	# points from the first acknowledged backup, so that at least every
	# other point has a backup to check whatever a checkpoint costs.
	if ((p % 2)); then
		first="^B" firstf=$WORK/p$p/backups.log what="backup"
	else
		first="^A" firstf=$WORK/p$p/c0.log what="ack"
	fi
	deadline=$((SECONDS + 60))
	until grep -q "$first" "$firstf" 2>/dev/null; do
		if [ $SECONDS -ge $deadline ] || ! kill -0 "$lpid" 2>/dev/null; then
			break
		fi
		sleep 0.02
	done
	# A point with nothing acknowledged checks nothing.
	if grep -q "$first" "$firstf" 2>/dev/null; then
		pass "point $p: a first $what before the kill"
	else
		fail "point $p: a first $what within 60 s"
	fi
	sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
	kill9_tallyd
	assert_eq "point $p: tallyd killed by SIGKILL $delay ms after the first $what" "137" "$T_EXIT"
	wait_bg "$lpid" 60 "point $p: the load ends within 60 s"
	report "$WORK/load.$p.out"
	assert_eq "point $p: load exits 0" "0" "$WAIT_RC"
	line=$(grep -m1 '^load point' "$WORK/load.$p.out" || true)
	[[ "$line" =~ ([0-9]+)\ acknowledged,\ ([0-9]+)\ types,\ ([0-9]+)\ backups ]] &&
		ACKED=$((ACKED + BASH_REMATCH[1])) TYPES=$((TYPES + BASH_REMATCH[2])) \
		BACKUPS=$((BACKUPS + BASH_REMATCH[3]))
	line=$(grep -m1 '^in flight' "$WORK/load.$p.out" || true)
	[[ "$line" == *"backup 1"* ]] && KILL_IN_BACKUP=$((KILL_IN_BACKUP + 1))
	[[ "$line" == *"type creation 1"* ]] && KILL_IN_TYPE=$((KILL_IN_TYPE + 1))
	[[ "$line" =~ ([0-9]+)\ with\ a\ token ]] && [ "${BASH_REMATCH[1]}" -gt 0 ] &&
		KILL_TOKENS=$((KILL_TOKENS + 1))

	# Every other restart checkpoints counters every few batches (the
	# default bound is never reached here), so kills land in both.
	ck=()
	((p % 2)) && ck=(--checkpoint-kib 4)
	start_tallyd "$DATA" "${XARGS[@]}" "${ck[@]}"
	vrc=0
	timeout 300 "$DRIVER" verify "$T_RESP" "$T_HTTP" "$WORK" "$p" >"$WORK/verify.$p.out" 2>&1 || vrc=$?
	report "$WORK/verify.$p.out"
	assert_eq "point $p: verify exits 0" "0" "$vrc"

	n=$(awk '$1 == "B" { n = $2 } END { print n + 0 }' "$WORK/p$p/backups.log")
	BACKUP_MS+=" $(awk '$1 == "B" { printf " %s", $NF }' "$WORK/p$p/backups.log")"
	if [ "$n" -gt 0 ]; then
		check_backup "$p" "$n"
		BACKUPS_CHECKED=$((BACKUPS_CHECKED + 1))
	else
		say "point $p: no backup was acknowledged before the kill"
	fi
	rm -rf "$WORK/bk" "$WORK/p$p"
done

section "summary"
say "points $POINTS, seed $SEED, $ACKED writes acknowledged in all, $((SECONDS - START)) s"
say "types created and acknowledged: $TYPES; backups acknowledged: $BACKUPS"
if [ -n "${BACKUP_MS// /}" ]; then
	say "TALLY.BACKUP under load, ms (min median max): $(tr ' ' '\n' <<<"$BACKUP_MS" |
		grep . | sort -n | awk '{ v[NR] = $1 } END { print v[1], v[int((NR + 1) / 2)], v[NR] }')"
fi
say "kills with a backup in flight: $KILL_IN_BACKUP, with a type creation in flight: $KILL_IN_TYPE, with token writes in flight: $KILL_TOKENS"
say "acknowledged backups opened and checked: $BACKUPS_CHECKED"
assert_int_cmp "most points had a backup to check" "$BACKUPS_CHECKED" -ge $((POINTS / 2))
assert_alive
stop_and_check
finish
