#!/usr/bin/env bash
# tallyd's flags and limits, each on a real tallyd: --requirepass (RESP
# AUTH and HTTP Bearer), protected mode, --maxclients, the output buffer
# limit with a client that never reads, request-size limits,
# --idle-timeout, --help and --version.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli curl python3

CONFIG_C=$IT_DIR/../../src/server/config.c

# open_conn PORT: a bash fd connected to tallyd, in $FD
open_conn() {
	exec {FD}<>"/dev/tcp/127.0.0.1/$1"
}
# send_line FD TEXT: one inline command
send_line() {
	printf '%s\r\n' "$2" >&"$1"
}
# read_line FD [TIMEOUT]: one reply line without CR; "<EOF>" when closed,
# "<TIMEOUT>" when nothing came
read_line() {
	local line rc=0
	IFS= read -r -t "${2:-3}" line <&"$1" || rc=$?
	if [ $rc -eq 0 ]; then
		printf '%s' "${line%$'\r'}"
	elif [ $rc -gt 128 ]; then
		printf '<TIMEOUT>'
	else
		printf '<EOF>'
	fi
}
# is_closed FD [TIMEOUT]: the server closed the connection (reads EOF)
is_closed() {
	local junk rc=0
	while :; do
		rc=0
		IFS= read -r -t "${2:-3}" junk <&"$1" || rc=$?
		[ $rc -eq 0 ] && continue     # drain replies still buffered
		[ $rc -gt 128 ] && return 1   # timeout: still open
		return 0                      # EOF or reset
	done
}

# -------------------------------------------------------------------------
section "--help and --version"
help=$("$TALLYD" --help 2>&1) && rc=0 || rc=$?
assert_eq "--help exits 0" "0" "$rc"
assert_contains "--help starts with usage" "$help" "usage: tallyd"
# every flag of DESIGN.md's contract ...
for f in --data --bind --resp-port --http-port --threads --durability \
	--flush-ms --store --cluster --requirepass --maxclients --log-level \
	--help --version --max-output-bytes --idle-timeout; do
	assert_contains "--help lists $f" "$help" "$f"
done
# ... and every flag the parser knows (read from config.c)
if [ -f "$CONFIG_C" ]; then
	parsed=$(grep -oE 'strcmp\(f, "--[a-z-]+"\)' "$CONFIG_C" | grep -oE -- '--[a-z-]+' | sort -u)
	n=0
	for f in $parsed; do
		n=$((n + 1))
		assert_match "--help lists the parsed flag $f" "(^|[[:space:],])$f([[:space:],=]|\$)" "$help"
	done
	assert_int_cmp "config.c parses at least 18 flags" "$n" -ge 18
	# Each flag with a value, given last without it, is told to need one
	# (not called unknown): the list of such flags misses none.
	for f in $parsed; do
		case $f in --help | --version) continue ;; esac
		out=$("$TALLYD" "$f" 2>&1) && rc=0 || rc=$?
		assert_eq "$f without its value: exit 2, and says so" \
			"2 tallyd: $f needs a value (see tallyd --help)" "$rc $out"
	done
fi
out=$("$TALLYD" --no-such-flag 2>&1) && rc=0 || rc=$?
assert_eq "an unknown flag given last is called unknown" \
	"2 tallyd: unknown flag '--no-such-flag' (see tallyd --help)" "$rc $out"
out=$("$TALLYD" datadir 2>&1) && rc=0 || rc=$?
assert_eq "a bare word is not taken for a flag" \
	"2 tallyd: unexpected argument 'datadir': tallyd takes flags only (see tallyd --help)" \
	"$rc $out"
version=$("$TALLYD" --version 2>&1) && rc=0 || rc=$?
assert_eq "--version exits 0" "0" "$rc"
assert_match "--version prints 'tallyd X.Y.Z'" '^tallyd [0-9]+\.[0-9]+\.[0-9]+$' "$version"
# refused DESC MESSAGE FLAG...: tallyd refuses the flags at start with
# exit 2 and MESSAGE. Bounded, on ports of its own: a build that took them
# would serve (and fail here) rather than hang or take the default ports.
refused() {
	local desc=$1 want=$2 out rc
	shift 2
	out=$(timeout 10 "$TALLYD" --data "$TMP/refused" --bind 127.0.0.1 \
		--resp-port "$(pick_port)" --http-port "$(pick_port)" "$@" 2>&1) &&
		rc=0 || rc=$?
	assert_eq "$desc" "2 $want" "$rc $out"
}
refused "an unknown flag is refused, and named" \
	"tallyd: unknown flag '--no-such-flag' (see tallyd --help)" --no-such-flag 1
refused "--threads 0 is refused" \
	"tallyd: --threads wants a number in 1..64, got '0'" --threads 0
refused "--threads 65 is refused" \
	"tallyd: --threads wants a number in 1..64, got '65'" --threads 65
refused "both ports off is refused" \
	"tallyd: both ports are off; nothing to serve" --resp-port 0 --http-port 0
refused "--durability sometimes is refused" \
	"tallyd: --durability is sync or async" --durability sometimes
refused "a number with a sign is refused" \
	"tallyd: --resp-port wants a number in 0..65535, got '+7'" --resp-port=+7
refused "a number after a space is refused" \
	"tallyd: --threads wants a number in 1..64, got ' 2'" --threads ' 2'
cluster_only="tallyd: --cluster, --redis-wait, --hot-shard-ops and --hot-shards-max apply to --store redis-cluster only"
refused "--redis-wait with the rocksdb store is refused, even at 0" \
	"$cluster_only" --redis-wait 0
refused "--hot-shard-ops with the rocksdb store is refused" \
	"$cluster_only" --hot-shard-ops 5
refused "an empty --data is refused" "tallyd: --data must name a folder" --data=
printf 'x' >"$TMP/afile"
refused "a --data that is a file is refused, and said to be one" \
	"tallyd: --data $TMP/afile is not a folder" --data "$TMP/afile"
refused "a --data whose parent is missing is refused, and names the parent" \
	"tallyd: --data $TMP/no/such/dir: its parent folder $TMP/no/such is not there (tallyd creates the data folder, not its parents)" \
	--data "$TMP/no/such/dir"
assert_ok "... and nothing of it was created" test ! -e "$TMP/no"
ln -s "$TMP/gone" "$TMP/dangling"
refused "a --data that is a symbolic link to nothing is refused, and said to be one" \
	"tallyd: --data $TMP/dangling is a symbolic link to nothing" --data "$TMP/dangling"

section "the banner's connect hints work as printed"
# banner_try DESC BIND [PASS]: start tallyd on BIND (not through
# start_tallyd, whose readiness check connects to 127.0.0.1), with
# --requirepass PASS if given, then run the redis-cli and curl lines of its
# banner as they are printed (PASS for the banner's PASSWORD).
banner_try() {
	local desc=$1 bind=$2 pass=${3:-} log=$TMP/banner.$2.log pid line i rc=0
	local auth=()
	[ -z "$pass" ] || auth=(--requirepass "$pass")
	: >"$log"
	"$TALLYD" --data "$TMP/banner" --bind "$bind" --resp-port "$(pick_port)" \
		--http-port "$(pick_port)" "${auth[@]}" >"$log" 2>&1 &
	pid=$!
	TALLYD_PIDS+=("$pid")
	for ((i = 0; i < 300; i++)); do
		grep -q 'stop with' "$log" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	line=$(grep -o 'connect: redis-cli.*' "$log" | sed 's/^connect: //') || true
	[ -z "$pass" ] || line="${line/PASSWORD/$pass} --no-auth-warning"
	[ -n "$line" ] || line="false (no banner; log: $(head -c 300 "$log"))"
	assert_eq "$desc: redis-cli as the banner says answers" "PONG" \
		"$(timeout 10 $line ping 2>&1)"
	line=$(grep -o 'try: *curl .*' "$log" | sed 's/^try: *//') || true
	[ -n "$line" ] || line="false"
	assert_match "$desc: curl as the banner says answers" '"status": *"ok"' \
		"$(timeout 10 $line -s 2>&1)"
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || rc=$?
	_forget_pid "$pid"
	assert_eq "$desc: tallyd exits 0 on SIGTERM" 0 "$rc"
}
banner_try "--bind 127.0.0.2" 127.0.0.2
if python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
	banner_try "--bind ::1" ::1
	# The wildcard in another spelling: the hints name the loopback.
	banner_try "--bind ::0" ::0 pw
	# IPv4 loopback mapped into IPv6 is loopback: no password needed.
	banner_try "--bind ::ffff:127.0.0.1" ::ffff:127.0.0.1
	# A link-local address with its zone: curl's URL writes the zone's
	# '%' as %25.
	ll=$(awk '$4 == "20" && $6 != "lo" { print $1, $6; exit }' \
		/proc/net/if_inet6 2>/dev/null) || true
	if [ -n "$ll" ]; then
		ll=$(python3 -c 'import ipaddress, sys
print("%s%%%s" % (ipaddress.IPv6Address(bytes.fromhex(sys.argv[1])), sys.argv[2]))' $ll)
		banner_try "--bind $ll" "$ll" pw
		assert_contains "... whose curl line escapes the zone" \
			"$(cat "$TMP/banner.$ll.log")" "%25"
	else
		say "(no link-local IPv6 address here: a zoned --bind left out)"
	fi
else
	say "(no IPv6 loopback here: --bind ::1 left out)"
fi

section "protected mode"
out=$(timeout 20 "$TALLYD" --data "$TMP/pm" --bind 0.0.0.0 --resp-port "$(pick_port)" \
	--http-port "$(pick_port)" 2>&1) && rc=0 || rc=$?
assert_ne "--bind 0.0.0.0 without a password: refuses to start" "0" "$rc"
assert_ne "... and did not time out (it exits at once)" "124" "$rc"
assert_contains "the message mentions protected mode" "$out" "protected mode"
assert_contains "the message mentions --requirepass" "$out" "--requirepass"
out=$(timeout 20 "$TALLYD" --data "$TMP/pm" --bind 0:0::0 --resp-port "$(pick_port)" \
	--http-port "$(pick_port)" 2>&1) && rc=0 || rc=$?
assert_contains "--bind 0:0::0 (the wildcard) without a password: refused" "$out" \
	"protected mode"
out=$(timeout 20 "$TALLYD" --data "$TMP/pm" --bind 0.0.0.0 --requirepass '' 2>&1) && rc=0 || rc=$?
assert_ne "an empty --requirepass is refused" "0" "$rc"
out=$(timeout 20 "$TALLYD" --data "$TMP/pm" --bind 127.0.0.300 2>&1) && rc=0 || rc=$?
assert_eq "a --bind that is no address: exit 2" "2" "$rc"
assert_contains "... and says so" "$out" "--bind '127.0.0.300' is not an IPv4 or IPv6 address"
assert_ok "nothing was created by refused starts" test ! -e "$TMP/pm"

# -------------------------------------------------------------------------
section "--requirepass: RESP"
T_PASS=s3cret-pw
start_tallyd "$TMP/auth"
P=$T_RESP
noauth() { timeout 10 redis-cli --no-raw -p "$P" "$@" 2>&1 || true; }
assert_eq "PING before AUTH" "(error) NOAUTH Authentication required." "$(noauth ping)"
assert_eq "INCR before AUTH" "(error) NOAUTH Authentication required." "$(noauth incr guarded)"
assert_eq "TALLY.ADD before AUTH" "(error) NOAUTH Authentication required." \
	"$(noauth tally.add a like 1 1)"
assert_eq "an unknown command before AUTH" \
	"(error) ERR unknown command 'nosuch', with args beginning with: " "$(noauth nosuch)"
assert_eq "AUTH with a wrong password" \
	"(error) WRONGPASS invalid username-password pair or user is disabled." \
	"$(noauth auth wrong)"
assert_eq "AUTH default with a wrong password" \
	"(error) WRONGPASS invalid username-password pair or user is disabled." \
	"$(noauth auth default wrong)"
assert_eq "AUTH of another user with the right password" \
	"(error) WRONGPASS invalid username-password pair or user is disabled." \
	"$(noauth auth someone "$T_PASS")"
assert_eq "AUTH with a prefix of the password" \
	"(error) WRONGPASS invalid username-password pair or user is disabled." \
	"$(noauth auth "${T_PASS:0:5}")"
assert_eq "AUTH with the password and more" \
	"(error) WRONGPASS invalid username-password pair or user is disabled." \
	"$(noauth auth "${T_PASS}x")"
out=$(printf 'incr guarded\nauth %s\nincr guarded\nget guarded\n' "$T_PASS" |
	timeout 10 redis-cli --no-raw -p "$P" 2>&1 || true)
assert_eq "AUTH then commands on one connection" \
	$'(error) NOAUTH Authentication required.\nOK\n(integer) 1\n"1"' "$out"
out=$(printf 'auth default %s\nget guarded\n' "$T_PASS" |
	timeout 10 redis-cli -p "$P" 2>&1 || true)
assert_eq "AUTH default PASSWORD" $'OK\n1' "$out"
assert_eq "redis-cli -a" "PONG" "$(timeout 10 redis-cli -p "$P" -a "$T_PASS" --no-auth-warning ping 2>&1)"
assert_eq "the NOAUTH INCR changed nothing" "1" "$(rcli get guarded)"
raw=$(raw_resp "$P" 'HELLO 3\r\n')
assert_match "HELLO 3 before AUTH is refused" '^-NOAUTH HELLO must be called' "$raw"
raw=$(raw_resp "$P" "HELLO 3 AUTH default $T_PASS\r\nGET nothing\r\nQUIT\r\n")
assert_match "HELLO 3 AUTH default PASS authenticates" '^%7\\r\\n.*_\\r\\n\+OK\\r\\n<EOF>$' "$raw"
assert_eq "QUIT is allowed before AUTH" '+OK\r\n<EOF>' "$(raw_resp "$P" 'QUIT\r\n')"

section "--requirepass: HTTP"
H="http://127.0.0.1:$T_HTTP"
code=$(curl -s -o "$TMP/b" -w '%{http_code}' --max-time 10 "$H/v1/counters/guarded")
assert_eq "no Authorization: 401" "401" "$code"
assert_match "401 has a JSON error" '^\{"error":".+"\}$' "$(cat "$TMP/b")"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer wrong" "$H/v1/counters/guarded")
assert_eq "wrong Bearer: 401" "401" "$code"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Basic $T_PASS" "$H/v1/counters/guarded")
assert_eq "not Bearer: 401" "401" "$code"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer ${T_PASS}x" "$H/v1/counters/guarded")
assert_eq "Bearer with the password and more: 401" "401" "$code"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST -d '{"by":5}' "$H/v1/counters/guarded/incr")
assert_eq "POST without Authorization: 401" "401" "$code"
assert_eq "... and it changed nothing" "1" "$(rcli get guarded)"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$H/metrics")
assert_eq "/metrics without Authorization: 401" "401" "$code"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$H/nope")
assert_eq "an unknown route without Authorization: 401 (routes are not revealed)" "401" "$code"
body=$(curl -s --max-time 10 -H "Authorization: Bearer $T_PASS" "$H/v1/counters/guarded")
assert_eq "right Bearer: 200 with the value" '{"name":"guarded","value":1}' "$body"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$H/healthz")
assert_eq "/healthz is open" "200" "$code"
stop_and_check
T_PASS=""

# -------------------------------------------------------------------------
section "--maxclients 5"
start_tallyd "$TMP/mc" --maxclients 5
P=$T_RESP
# the start-up probes' connections are gone once INFO counts only itself
for ((i = 0; i < 50; i++)); do
	[ "$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')" == 1 ] && break
	sleep 0.1
done
fds=()
for i in 1 2 3 4 5; do
	open_conn "$P"
	fds+=("$FD")
	send_line "$FD" PING
	assert_eq "client $i is served" "+PONG" "$(read_line "$FD")"
done
open_conn "$P"
sixth=$FD
assert_eq "the 6th client is refused with Redis's text" "-ERR max number of clients reached" \
	"$(read_line "$sixth")"
if is_closed "$sixth" 3; then pass "the 6th client is disconnected"; else fail "the 6th client is disconnected"; fi
exec {sixth}>&-
# A burst of 60 more, held open by their clients: each gets the error,
# and tallyd keeps few of their descriptors (it kept every one for a
# second, outside every limit, so a burst could take those kept for the
# store).
fds0=$(ls "/proc/$T_PID/fd" | wc -l)
python3 - "$P" "$T_PID" >"$TMP/burst.out" 2>&1 <<'ZZ' || true
import os, socket, sys, time
port, pid = int(sys.argv[1]), sys.argv[2]
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
time.sleep(0.3)
print("fds", len(os.listdir("/proc/%s/fd" % pid)))
got = 0
for s in socks:
    s.settimeout(5)
    try:
        if s.recv(100).startswith(b"-ERR max number of clients reached"):
            got += 1
    except OSError:
        pass
print("refused", got)
ZZ
say "$(cat "$TMP/burst.out")"
assert_eq "each of a burst of 60 is refused with the error" "refused 60" \
	"$(grep '^refused' "$TMP/burst.out")"
fds1=$(awk '/^fds/ {print $2}' "$TMP/burst.out")
assert_int_cmp "... and tallyd holds at most 16 of them per I/O thread (and a few of its own)" \
	"$((${fds1:-999} - fds0))" -le 40
crc=0
code=$(curl -s -o "$TMP/b" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$T_HTTP/healthz") || crc=$?
assert_eq "an HTTP client past maxclients gets 503" "503" "$code"
assert_contains "... with a JSON error" "$(cat "$TMP/b")" '"error":"max number of clients reached"'
# a well-formed response: curl reads it whole (exit 18: Content-Length
# larger than the body; 56: connection reset before the response was read)
assert_eq "... which curl reads cleanly (curl exit 0)" "0" "$crc"
send_line "${fds[0]}" "INCR stillhere"
assert_eq "the 5 connected clients are still served" ":1" "$(read_line "${fds[0]}")"
fd=${fds[4]}
exec {fd}>&-
got=""
for ((i = 0; i < 50; i++)); do
	got=$(timeout 5 redis-cli -p "$P" ping 2>&1 || true)
	[ "$got" == PONG ] && break
	sleep 0.1
done
assert_eq "after one client leaves, a new one is served" "PONG" "$got"
for fd in "${fds[@]:0:4}"; do exec {fd}>&-; done
for ((i = 0; i < 50; i++)); do
	[ "$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')" == 1 ] && break
	sleep 0.1
done
rejected=$(metric tally_connections_rejected)
assert_int_cmp "tally_connections_rejected counts refusals (the 6th, the burst of 60)" \
	"${rejected:-0}" -ge 61
stats=$(rcli INFO stats | tr -d '\r')
assert_eq "INFO's rejected_connections agrees" "rejected_connections:$rejected" \
	"$(grep '^rejected_connections:' <<<"$stats")"
received=$(sed -n 's/^total_connections_received://p' <<<"$stats")
assert_int_cmp "total_connections_received leaves the refused out" \
	"${received:-999}" -lt "$rejected"
stop_and_check

# -------------------------------------------------------------------------
section "output limit: a client that never reads is disconnected"
start_tallyd "$TMP/out" --max-output-bytes 1048576 --max-bulk-bytes 1024 \
	--max-args 64 --max-request-bytes 8192 --max-pipeline 4
P=$T_RESP
# 1000 members on one object: each RECENT LIMIT 1000 reply is ~50 KB.
seq 1 1000 | sed 's/.*/tally.add big like 1 &/' |
	timeout 60 redis-cli -p "$P" >/dev/null 2>&1 || true
assert_eq "setup: 1000 members" "1000" "$(rcli tally.count big like 1)"
rcli set bigval -9223372036854775808 >/dev/null
reply_size=$(rcli tally.recent big like 1 LIMIT 1000 | wc -c)
assert_int_cmp "one RECENT reply is over 20 KB (as redis-cli prints it)" "$reply_size" -gt 20000
# 20000 requests (about 700 KB) would owe about 1 GB of replies.
req=$TMP/flood.req
for ((i = 0; i < 200; i++)); do
	printf 'TALLY.RECENT big like 1 LIMIT 1000\r\n%.0s' {1..90}
	printf 'MGET %s\r\n' "$(printf 'bigval %.0s' {1..60})"
	printf 'MGET %s\r\n' "$(printf 'bigval %.0s' {1..60})"
done >"$req"
say "flood request: $(wc -c <"$req") bytes"
rss0=$(proc_kib "$T_PID" VmRSS)
closes0=$(metric tally_output_limit_closes_total)
exec {flood}<>"/dev/tcp/127.0.0.1/$P"
# write everything (or until the server resets us), never read
timeout 30 cat "$req" >&"$flood" 2>/dev/null || true
served=$(timeout 10 redis-cli -p "$P" ping 2>&1 || true)
assert_eq "another client is served during the flood" "PONG" "$served"
closes1=$closes0
for ((i = 0; i < 100; i++)); do
	closes1=$(metric tally_output_limit_closes_total)
	[ "${closes1:-0}" -gt "${closes0:-0}" ] && break
	sleep 0.1
done
assert_int_cmp "the flooding client was closed at the output limit" \
	"${closes1:-0}" -gt "${closes0:-0}"
hwm=$(proc_kib "$T_PID" VmHWM)
rss1=$(proc_kib "$T_PID" VmRSS)
say "tallyd RSS before ${rss0} KiB, after ${rss1} KiB, peak ${hwm} KiB"
assert_int_cmp "peak RSS grew by less than 200 MiB" "$((hwm - rss0))" -lt 204800
exec {flood}>&-
clients=""
for ((i = 0; i < 50; i++)); do
	clients=$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')
	[ "$clients" == 1 ] && break
	sleep 0.1
done
assert_eq "the flooding client is gone (only ours is connected)" "1" "$clients"
assert_eq "data intact after the flood" "(integer) 1000" "$(rcn tally.count big like 1)"

section "--max-pipeline 4: a deep pipeline of writes is paced, not refused"
req=""
for ((i = 0; i < 2000; i++)); do req+='*2\r\n$4\r\nINCR\r\n$2\r\npp\r\n'; done
raw=$(raw_resp "$P" "${req}*2\r\n\$3\r\nGET\r\n\$2\r\npp\r\n*1\r\n\$4\r\nQUIT\r\n" 20)
expect=""
for ((i = 1; i <= 2000; i++)); do expect+=":$i\\r\\n"; done
expect+='$4\r\n2000\r\n+OK\r\n<EOF>'
assert_eq "2000 pipelined INCRs answered 1..2000 in order, then GET and QUIT" \
	"$(printf '%s' "$expect" | md5sum)" "$(printf '%s' "$raw" | md5sum)"
assert_eq "the counter after the pipeline" "2000" "$(rcli get pp)"

section "request size limits"
# Each request ends where tallyd detects the error: bytes after it would
# be unread at the close, and the kernel's reset could eat the reply.
# --max-bulk-bytes 1024
raw=$(raw_resp "$P" "*2\r\n\$4\r\nECHO\r\n\$1500\r\n")
assert_eq "an argument over --max-bulk-bytes: error and close" \
	'-ERR Protocol error: invalid bulk length\r\n<EOF>' "$raw"
short=$(head -c 1000 /dev/zero | tr '\0' x)
raw=$(raw_resp "$P" "*2\r\n\$4\r\nECHO\r\n\$1000\r\n$short\r\n*1\r\n\$4\r\nQUIT\r\n")
assert_eq "an argument under the limit is fine" "\$1000\\r\\n$short\\r\\n+OK\\r\\n<EOF>" "$raw"
# --max-args 64
raw=$(raw_resp "$P" "*65\r\n")
assert_eq "a command over --max-args: error and close" \
	'-ERR Protocol error: invalid multibulk length\r\n<EOF>' "$raw"
args=$(printf 'k%d ' $(seq 1 70))
raw=$(raw_resp "$P" "MGET $args\r\n")
assert_match "an inline command over --max-args: error and close" \
	'^-ERR Protocol error: too many arguments\\r\\n<EOF>$' "$raw"
# --max-request-bytes 8192: 20 arguments of 500 bytes; the 17th would
# pass the limit (15 + 17 * 508 > 8192), refused at its length line.
big=""
arg=$(head -c 500 /dev/zero | tr '\0' y)
for ((i = 0; i < 16; i++)); do big+="\$500\r\n$arg\r\n"; done
raw=$(raw_resp "$P" "*21\r\n\$4\r\nMGET\r\n$big\$500\r\n")
assert_eq "a command over --max-request-bytes: error and close" \
	'-ERR Protocol error: too big request\r\n<EOF>' "$raw"
assert_alive
stop_and_check

# -------------------------------------------------------------------------
# 2 s, with a client active every 0.4 s: a stall of the test's own shell
# on a loaded machine must last over 1.6 s to close it.
section "--idle-timeout 2"
start_tallyd "$TMP/idle" --idle-timeout 2
P=$T_RESP
open_conn "$P"
idle=$FD
send_line "$idle" PING
assert_eq "the idle client is served first" "+PONG" "$(read_line "$idle")"
open_conn "$P"
busy=$FD
t0=$SECONDS
closed_ok=0
for ((i = 0; i < 10; i++)); do
	send_line "$busy" PING
	r=$(read_line "$busy")
	[ "$r" == "+PONG" ] || break
	sleep 0.4
done
assert_eq "a client active every 0.4 s stays connected for 4 s" "10" "$i"
if is_closed "$idle" 8; then closed_ok=1; fi
assert_eq "the idle client was closed" "1" "$closed_ok"
idle_closes=$(metric tally_idle_closes_total)
assert_int_cmp "tally_idle_closes_total counts it" "${idle_closes:-0}" -ge 1
exec {idle}>&- {busy}>&-
# A client reading a long reply slowly is not idle: every byte sent counts
# (it was cut off mid-reply after a second with its reply unread).
python3 - "$P" <<'ZZ' >"$TMP/slow.out" 2>&1 || true
import socket, sys, time
n = 1000000
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"*%d\r\n$4\r\nMGET\r\n" % (n + 1) + b"$1\r\nk\r\n" * n)
want = len(b"*%d\r\n" % n) + 5 * n
got, t0 = 0, time.time()
while got < want:
    b = s.recv(65536)
    if not b:
        break
    got += len(b)
    time.sleep(0.005)
print("got", got, "of", want, "in %.1f s" % (time.time() - t0))
ZZ
say "$(cat "$TMP/slow.out")"
assert_match "a 5 MB reply read over more than the timeout arrives whole" \
	'^got ([0-9]+) of \1 in ([3-9]|[1-9][0-9])\.' "$(cat "$TMP/slow.out")"
assert_eq "new clients are served" "PONG" "$(rcli ping)"
# HTTP clients are closed at the idle timeout too; one midway through a
# request (the default --http-timeout, 60 s, far off) is told why.
python3 - "$T_HTTP" <<'ZZ' >"$TMP/idlehttp.out" 2>&1 || true
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /healthz HTTP/1.1\r\n")
t0, got = time.time(), b""
s.settimeout(10)
while True:
    b = s.recv(4096)
    if not b:
        break
    got += b
print("after %.0f s:" % (time.time() - t0), got.split(b"\r\n")[0].decode())
k = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
t0 = time.time()
k.settimeout(10)
b = k.recv(4096)
print("idle keep-alive %s after %.0f s" %
      ("closed" if b == b"" else "got bytes", time.time() - t0))
ZZ
say "$(cat "$TMP/idlehttp.out")"
assert_match "an HTTP request half sent is answered 408 at the idle timeout" \
	'^after [2-4] s: HTTP/1.1 408 ' "$(sed -n 1p "$TMP/idlehttp.out")"
assert_match "an HTTP connection that sends nothing is closed at it" \
	'^idle keep-alive closed after [2-4] s' "$(sed -n 2p "$TMP/idlehttp.out")"
stop_and_check

section "--http-timeout 3"
# An HTTP client gets 3 s from its connection or its last answer to begin
# a request, and 3 s from a request's first byte to send all of it: one
# trickling a request a byte at a time is answered 408 and closed (it held
# its place for as long as it kept trickling); one idle after an answer is
# closed (keep-alive's end); one that waits 2 s, then sends a request over
# 1.5 s, is served (the wait did not count against the request); one
# sending a request a second is served throughout; RESP is not concerned.
start_tallyd "$TMP/httpto" --http-timeout 3
python3 - "$T_HTTP" "$T_RESP" <<'ZZ' >"$TMP/httpto.out" 2>&1 || true
import socket, sys, threading, time
http, resp = int(sys.argv[1]), int(sys.argv[2])
out = {}

def read_all(s, limit):
    s.settimeout(limit)
    data = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                return data, "closed"
            data += b
    except socket.timeout:
        return data, "open"
    except OSError:
        return data, "closed"

def trickle():
    # When the answer comes is what counts: tallyd then drains what the
    # client still sends (lingering), so its sends go on succeeding.
    s = socket.create_connection(("127.0.0.1", http))
    t0 = time.time()
    req = b"GET /v1/counters/x HTTP/1.1\r\nHost: a\r\nX-Pad: " + b"p" * 60
    data, at = b"", None
    for ch in req:
        try:
            s.send(bytes([ch]))
        except OSError:
            break
        time.sleep(0.25)
        try:
            got = s.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            got = None
        except OSError:
            got = b""
        if got:
            data, at = got, time.time() - t0
            break
        if got == b"" or time.time() - t0 > 12:
            break
    rest, state = read_all(s, 12)
    out["trickle"] = "%s %s %s" % ((data + rest).split(b"\r\n")[0].decode(),
                                   state, "%.0f" % at if at else "never")

def idle_after_answer():
    s = socket.create_connection(("127.0.0.1", http))
    t0 = time.time()
    s.sendall(b"GET /v1/counters/x HTTP/1.1\r\nHost: a\r\n\r\n")
    data, state = read_all(s, 9)
    out["idle"] = "%d %s %.0f" % (data.count(b"HTTP/1.1 "), state,
                                  time.time() - t0)

def pause_then_slow_request():
    s = socket.create_connection(("127.0.0.1", http))
    s.sendall(b"GET /v1/counters/x HTTP/1.1\r\nHost: a\r\n\r\n")
    s.settimeout(5)
    first = s.recv(4096)
    time.sleep(2)
    s.sendall(b"POST /v1/counters/slow/incr HTTP/1.1\r\nHost: a\r\n"
              b"Content-Length: 8\r\n\r\n")
    time.sleep(1.5)
    s.sendall(b'{"by":2}')
    data, state = read_all(s, 3)
    out["pause"] = "%s %s" % (first.split(b"\r\n")[0].decode(),
                              data.split(b"\r\n")[0].decode())

def blank_lines():
    # Blank lines before a request are skipped by the parser: they begin
    # nothing, and must not restart the time (they held a connection for
    # as long as they kept coming).
    s = socket.create_connection(("127.0.0.1", http))
    t0, at = time.time(), None
    while time.time() - t0 < 10:
        try:
            s.send(b"\r\n")
            time.sleep(1)
            if s.recv(64, socket.MSG_DONTWAIT) == b"":
                at = time.time() - t0
                break
        except BlockingIOError:
            pass
        except OSError:
            at = time.time() - t0
            break
    out["blank"] = "closed %.0f" % at if at else "open"

def steady():
    s = socket.create_connection(("127.0.0.1", http))
    n = 0
    for i in range(6):
        s.sendall(b"GET /v1/counters/x HTTP/1.1\r\nHost: a\r\n\r\n")
        s.settimeout(3)
        try:
            if s.recv(4096).startswith(b"HTTP/1.1 404"):
                n += 1
        except OSError:
            break
        time.sleep(1)
    out["steady"] = str(n)

def resp_idle():
    s = socket.create_connection(("127.0.0.1", resp))
    time.sleep(6)
    s.sendall(b"PING\r\n")
    s.settimeout(3)
    out["resp"] = s.recv(64).decode().strip()

ts = [threading.Thread(target=f) for f in (trickle, idle_after_answer,
                                             pause_then_slow_request,
                                             blank_lines, steady,
                                             resp_idle)]
for t in ts:
    t.start()
for t in ts:
    t.join()
for k in sorted(out):
    print(k, out[k])
ZZ
say "$(cat "$TMP/httpto.out")"
assert_match "a request trickled past 3 s: 408 within 3 to 8 s, then closed" \
	'^trickle HTTP/1.1 408 Request Timeout closed [3-8]$' \
	"$(grep '^trickle' "$TMP/httpto.out")"
assert_match "a keep-alive client idle after its answer: closed, within 3 to 8 s" \
	'^idle 1 closed [3-8]$' "$(grep '^idle' "$TMP/httpto.out")"
assert_match "blank lines a second from a new client: closed within 3 to 8 s" \
	'^blank closed [3-8]$' "$(grep '^blank' "$TMP/httpto.out")"
assert_eq "a request begun after 2 s of keep-alive, sent over 1.5 s: served" \
	"pause HTTP/1.1 404 Not Found HTTP/1.1 200 OK" \
	"$(grep '^pause' "$TMP/httpto.out")"
assert_eq "a client sending a request every second: all 6 answered" \
	"steady 6" "$(grep '^steady' "$TMP/httpto.out")"
assert_eq "a RESP client idle for 6 s is still served" \
	"resp +PONG" "$(grep '^resp' "$TMP/httpto.out")"
assert_eq "new HTTP clients are served" "404" \
	"$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$T_HTTP/v1/counters/x")"
stop_and_check
refused "--http-timeout past a year is refused" \
	"tallyd: --http-timeout wants a number in 0..31536000, got '31536001'" \
	--http-timeout 31536001

section "--tcp-keepalive"
# The keepalive timer of tallyd's side of a client connection, from
# /proc/net/tcp (timer 2 is keepalive): on by default, off with 0.
keepalive_timer() { # PORT: "tr" of the established socket bound to it
	python3 - "$1" <<'ZZ'
import sys
port = "%04X" % int(sys.argv[1])
for line in open("/proc/net/tcp").readlines()[1:]:
    f = line.split()
    if f[1].endswith(":" + port) and f[3] == "01":
        print(f[5].split(":")[0])
        break
ZZ
}
start_tallyd "$TMP/ka"
open_conn "$T_RESP"
ka=$FD
send_line "$ka" PING
read_line "$ka" >/dev/null
assert_eq "a client connection has a keepalive timer by default" "02" \
	"$(keepalive_timer "$T_RESP")"
assert_eq "CONFIG GET tcp-keepalive" "tcp-keepalive 300" \
	"$(rcli config get tcp-keepalive | paste -sd' ')"
exec {ka}>&-
stop_and_check
start_tallyd "$TMP/ka0" --tcp-keepalive 0
open_conn "$T_RESP"
ka=$FD
send_line "$ka" PING
read_line "$ka" >/dev/null
assert_eq "--tcp-keepalive 0: none" "00" "$(keepalive_timer "$T_RESP")"
exec {ka}>&-
stop_and_check
refused "--tcp-keepalive 32768 is refused" \
	"tallyd: --tcp-keepalive wants a number in 0..32767, got '32768'" \
	--tcp-keepalive 32768

# -------------------------------------------------------------------------
section "--threads 3: connections spread over the I/O threads"
start_tallyd "$TMP/spread" --threads 3
P=$T_RESP
# thread_clients: the three tally_io_thread_clients samples, "a b c"
thread_clients() {
	timeout 10 curl -s "http://127.0.0.1:$T_HTTP/metrics" |
		awk '/^tally_io_thread_clients\{/ { printf "%s ", $2 }'
}
# spread_ok "a b c": the counts differ by at most one
spread_ok() {
	awk '{ mn = $1; mx = $1; for (i = 2; i <= NF; i++) { if ($i < mn) mn = $i; if ($i > mx) mx = $i }
	       exit !(NF == 3 && mx - mn <= 1) }' <<<"$1"
}
for ((i = 0; i < 50; i++)); do
	[ "$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')" == 1 ] && break
	sleep 0.1
done
fds=()
for ((i = 0; i < 30; i++)); do
	open_conn "$P"
	fds+=("$FD")
done
served=0
for fd in "${fds[@]}"; do
	send_line "$fd" "INCR spread"
	[[ "$(read_line "$fd")" == :* ]] && served=$((served + 1))
done
assert_eq "30 clients opened one by one are each served" "30" "$served"
assert_eq "... and counted once each" "30" "$(rcli get spread)"
counts=$(thread_clients)
say "   connections per I/O thread: $counts(the /metrics request included)"
if spread_ok "$counts"; then
	pass "30 clients (and the /metrics request) are spread evenly over 3 threads"
else
	fail "30 clients (and the /metrics request) are spread evenly over 3 threads" "$counts"
fi
for fd in "${fds[@]}"; do exec {fd}>&-; done
# A burst: redis-benchmark's idle mode opens 60 connections at once.
redis-benchmark -p "$P" -c 60 -I >/dev/null 2>&1 &
burst=$!
n=0
for ((i = 0; i < 100; i++)); do
	n=$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')
	[ "${n:-0}" -ge 61 ] && break
	sleep 0.1
done
assert_int_cmp "the burst's 60 clients are connected" "${n:-0}" -ge 61
counts=$(thread_clients)
say "   connections per I/O thread: $counts"
if spread_ok "$counts"; then
	pass "60 clients connecting at once are spread evenly over 3 threads"
else
	fail "60 clients connecting at once are spread evenly over 3 threads" "$counts"
fi
kill "$burst" 2>/dev/null || true
wait "$burst" 2>/dev/null || true
counts=""
for ((i = 0; i < 50; i++)); do
	counts=$(thread_clients)
	[ "$(awk '{ print $1 + $2 + $3 }' <<<"$counts")" == 1 ] && break
	sleep 0.1
done
assert_eq "once they close, only the /metrics request is counted" "1" \
	"$(awk '{ print $1 + $2 + $3 }' <<<"$counts")"
assert_eq "three HTTP requests in a row are each served" "200 200 200" \
	"$(for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$T_HTTP/healthz"; done | sed 's/ $//')"
stop_and_check

# -------------------------------------------------------------------------
section "SIGTERM while 200 clients connect"
start_tallyd "$TMP/burst" --threads 3
redis-benchmark -p "$T_RESP" -c 200 -I >/dev/null 2>&1 &
burst=$!
sleep 0.05 # some accepted, some on their way to a thread, some in the backlog
stop_and_check
kill "$burst" 2>/dev/null || true
wait "$burst" 2>/dev/null || true

# -------------------------------------------------------------------------
section "out of file descriptors: accepting pauses, then resumes"
need_cmd prlimit
start_tallyd "$TMP/nofile"
P=$T_RESP
for ((i = 0; i < 50; i++)); do
	[ "$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')" == 1 ] && break
	sleep 0.1
done
sleep 0.3 # that INFO's connection closes too
nfd=$(find "/proc/$T_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
limit=$((nfd + 8))
soft=$(prlimit --pid "$T_PID" --nofile --output SOFT --noheadings | tr -d ' ')
prlimit --pid "$T_PID" --nofile="$limit:" # the soft limit: raised again below
fds=()
for ((i = 0; i < 16; i++)); do
	open_conn "$P" # the kernel completes the handshake; accepting is tallyd's
	fds+=("$FD")
done
served=0
for fd in "${fds[@]}"; do
	send_line "$fd" PING
	[ "$(read_line "$fd" 1)" == "+PONG" ] && served=$((served + 1))
done
say "   $served of 16 clients served with $limit descriptors ($nfd in use before)"
assert_int_cmp "with no descriptor left, some clients wait" "$served" -lt 16
assert_int_cmp "... and those accepted before are served" "$served" -ge 1
assert_contains "tallyd says why it stops accepting" "$(cat "$T_LOG")" \
	"cannot accept: Too many open files; accepting again in a second"
assert_alive "tallyd, out of descriptors"
# Free the descriptors: those waiting in the backlog are accepted now.
for fd in "${fds[@]:0:$served}"; do exec {fd}>&-; done
late=0
for fd in "${fds[@]:$served}"; do
	[ "$(read_line "$fd" 5)" == "+PONG" ] && late=$((late + 1))
done
assert_eq "once descriptors are free, every waiting client is served" \
	"$((16 - served))" "$late"
for fd in "${fds[@]:$served}"; do exec {fd}>&-; done
prlimit --pid "$T_PID" --nofile="$soft:"
stop_and_check

section "a client that QUITs gives its place up at once"
start_tallyd "$TMP/quit" --maxclients 1
# start_tallyd's readiness checks hold the one place until tallyd has seen
# them close, which a slow (sanitized) tallyd may not have yet: a client
# that comes first is refused, and tries again.
for ((i = 0; i < 50; i++)); do
	open_conn "$T_RESP"
	q=$FD
	send_line "$q" QUIT
	quit=$(read_line "$q")
	[ "$quit" != "-ERR max number of clients reached" ] && break
	exec {q}>&-
	sleep 0.1
done
assert_eq "QUIT is answered" "+OK" "$quit"
# The client keeps its socket open: tallyd drains it for a second, and
# counted it against --maxclients 1 all that time.
assert_eq "the next client is served at once" "PONG" "$(rcli ping)"
exec {q}>&-
stop_and_check

section "--maxclients fitted to the open-file limit"
# Under a hard limit of 300 files, --maxclients 10000 would let clients take
# the store's descriptors: tallyd serves at most 150 and says so.
REAL_TALLYD=$TALLYD
printf '#!/bin/sh\nexec prlimit --nofile=300:300 "%s" "$@"\n' "$REAL_TALLYD" >"$TMP/tallyd-300"
chmod +x "$TMP/tallyd-300"
TALLYD=$TMP/tallyd-300
start_tallyd "$TMP/fit"
TALLYD=$REAL_TALLYD
assert_contains "the log says how many clients it serves" "$(cat "$T_LOG")" \
	"--maxclients 10000 and --open-files-max 512 need 11024 open files and this process may open 300 (ulimit -n, hard limit 300): serving at most 150 clients, the store keeping at most 75 files open"
assert_contains "INFO shows the fitted maxclients" "$(rcli info clients)" "maxclients:150"
# The probes' and INFO's connections are gone once INFO counts only itself.
for ((i = 0; i < 50; i++)); do
	[ "$(rcli info clients | sed -n 's/^connected_clients:\([0-9]*\).*/\1/p')" == 1 ] && break
	sleep 0.1
done
sleep 0.3 # that INFO's connection closes too
fds=()
for ((i = 0; i < 150; i++)); do
	open_conn "$T_RESP"
	fds+=("$FD")
done
send_line "${fds[149]}" PING
assert_eq "the 150th client is served" "+PONG" "$(read_line "${fds[149]}")"
open_conn "$T_RESP"
sixth=$FD
assert_eq "the 151st is refused, not left waiting" \
	"-ERR max number of clients reached" "$(read_line "$sixth" 5)"
exec {sixth}>&-
send_line "${fds[0]}" "INCR fitted"
assert_eq "with every client slot taken, writes go on" ":1" "$(read_line "${fds[0]}")"
if ! on_cluster; then
	send_line "${fds[1]}" "TALLY.BACKUP $TMP/fit-copy"
	assert_eq "... and a backup" "+OK" "$(read_line "${fds[1]}" 30)"
fi
for fd in "${fds[@]}"; do exec {fd}>&-; done
stop_and_check
if ! on_cluster; then
	# --open-files-max is what RocksDB is given when the limit allows.
	start_tallyd "$TMP/files64" --open-files-max 64
	stop_and_check
	assert_contains "--open-files-max 64 reaches RocksDB" \
		"$(cat "$TMP"/files64/OPTIONS-*)" "max_open_files=64"
	refused "--open-files-max 19 is refused, naming the range" \
		"tallyd: --open-files-max wants a number in 20..1048576, got '19'" \
		--open-files-max 19
	out=$("$TALLYD" --store redis-cluster --cluster 127.0.0.1:1 \
		--open-files-max 64 2>&1) && rc=0 || rc=$?
	assert_eq "--open-files-max with the cluster store: exit 2, and says why" \
		"2 tallyd: --checkpoint-kib and --open-files-max apply to --store rocksdb only" \
		"$rc $out"
	# The store keeps to half of what the clients leave: RocksDB holds
	# at most (300 - 150) / 2 files open.
	assert_contains "RocksDB's open table files fit the limit too" \
		"$(cat "$TMP"/fit/OPTIONS-*)" "max_open_files=75"
fi
# A soft limit below what --maxclients needs is raised to it.
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 2024 ]; then
	printf '#!/bin/sh\nexec prlimit --nofile=256:%s "%s" "$@"\n' "$hard" \
		"$REAL_TALLYD" >"$TMP/tallyd-soft"
	chmod +x "$TMP/tallyd-soft"
	TALLYD=$TMP/tallyd-soft
	start_tallyd "$TMP/fit2" --maxclients 1000
	TALLYD=$REAL_TALLYD
	assert_eq "a low soft limit is raised to maxclients + 1024" "2024" \
		"$(prlimit --pid "$T_PID" --nofile --output SOFT --noheadings | tr -d ' ')"
	assert_contains "... and all of maxclients is served" "$(rcli info clients)" "maxclients:1000"
	stop_and_check
	if ! on_cluster; then
		assert_contains "... and RocksDB keeps at most 512 table files open" \
			"$(cat "$TMP"/fit2/OPTIONS-*)" "max_open_files=512"
	fi
fi
# A limit that holds fewer than N + 1024 but more than asked for keeps N.
TALLYD=$TMP/tallyd-300
start_tallyd "$TMP/fit3" --maxclients 100
TALLYD=$REAL_TALLYD
assert_contains "--maxclients 100 under 300 files stays 100" "$(rcli info clients)" "maxclients:100"
assert_not_contains "... with no warning" "$(cat "$T_LOG")" "serving at most"
stop_and_check
if ! on_cluster; then
	assert_contains "... and RocksDB gets half of the other 200 files" \
		"$(cat "$TMP"/fit3/OPTIONS-*)" "max_open_files=100"
fi

section "a client that shuts its write side gets every reply, then EOF"
# 200 INCRs (and, with GET, a read deferred behind them), the start of a
# command the shutdown cuts off, then shutdown(SHUT_WR): every whole command
# is run and answered, and the server closes. Writes complete after the
# loop may have read the EOF (on the committer thread in async durability,
# after the cluster's round trips on the redis-cluster store).
half_close() { # PORT KEY [GET] -> "ok" or what came back
	python3 - "$1" "$2" "${3-}" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
k = sys.argv[2].encode()
get = sys.argv[3] == "GET"
n = 200
s.sendall(b"".join(b"INCR " + k + b"\r\n" for _ in range(n)) +
          (b"GET " + k + b"\r\n" if get else b"") + b"*2\r\n$3\r\nGE")
s.shutdown(socket.SHUT_WR)
s.settimeout(10)
buf = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        buf += d
except socket.timeout:
    buf += b"<no EOF within 10 s>"
want = b"".join(b":%d\r\n" % i for i in range(1, n + 1))
if get:
    want += b"$3\r\n200\r\n"
print("ok" if buf == want else "got %d of %d bytes, ending %r" %
      (len(buf), len(want), buf[-40:]))
PY
}
for mode in async sync; do
	start_tallyd "$TMP/half-$mode" --durability "$mode"
	bad=""
	for ((i = 0; i < 10; i++)); do
		r=$(half_close "$T_RESP" "hc$i" "$( ((i % 2)) && echo GET)")
		[ "$r" = ok ] || bad="$r"
	done
	assert_eq "--durability $mode: 10 half-closed clients, every reply, then EOF" "" "$bad"
	stop_and_check
done

section "a large command's buffers leave once it is answered"
# 20 connections each send an MGET of three 900 KB names and one of
# 20,000 names, get their answers and stay open: tallyd gives back the
# read buffer and argument table each grew to (they stayed, about 4.5 MB
# per connection, for the connection's life). A fresh tallyd, under ASan
# without its quarantine, which would keep the freed memory as RSS.
saved_asan=${ASAN_OPTIONS-}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
T_PASS=""
start_tallyd "$TMP/bigcmd"
export ASAN_OPTIONS="$saved_asan"
python3 - "$TMP/bigcmd.req" <<'ZZ'
import sys
name = b"x" * 900000
req = b"*4\r\n$4\r\nMGET\r\n" + (b"$%d\r\n%s\r\n" % (len(name), name)) * 3
req += b"*20001\r\n$4\r\nMGET\r\n" + b"$1\r\nk\r\n" * 20000
open(sys.argv[1], "wb").write(req)
ZZ
want=$((19 + 8 + 20000 * 5))
rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$T_PID/status")
big_fds=()
answered=0
for ((i = 0; i < 20; i++)); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$T_RESP"
	cat "$TMP/bigcmd.req" >&"$fd"
	got=$(timeout 20 head -c "$want" <&"$fd" | wc -c)
	[ "$got" -eq "$want" ] && answered=$((answered + 1))
	big_fds+=("$fd")
done
rss1=$(awk '/^VmRSS/ {print $2}' "/proc/$T_PID/status")
assert_eq "20 connections' large MGETs answered" "20" "$answered"
assert_int_cmp "... and tallyd holds under 8 MB more with them open (KiB)" \
	"$((rss1 - rss0))" -lt 8000
for fd in "${big_fds[@]}"; do exec {fd}>&-; done
stop_and_check

section "SIGTERM with a client that never reads: tallyd exits after the grace"
start_tallyd "$TMP/grace"
P=$T_RESP
seq 1 1000 | sed 's/.*/tally.add big like 1 &/' |
	timeout 60 redis-cli -p "$P" >/dev/null 2>&1 || true
assert_eq "setup: 1000 members" "1000" "$(rcli tally.count big like 1)"
# 200 RECENT LIMIT 1000 replies: about 10 MB, past what the sockets hold,
# below --max-output-bytes (64 MiB): the client is not closed for them.
exec {stuck}<>"/dev/tcp/127.0.0.1/$P"
printf 'TALLY.RECENT big like 1 LIMIT 1000\r\n%.0s' {1..200} >&"$stuck"
sleep 1
t0=$SECONDS
kill -TERM "$T_PID"
if _gone_within "$T_PID" 30; then
	pass "tallyd exits with the client still not reading"
else
	fail "tallyd exits with the client still not reading" "still running 30 s after SIGTERM"
fi
took=$((SECONDS - t0))
say "exited $took s after SIGTERM"
assert_int_cmp "it waited for the client first (10 s grace)" "$took" -ge 9
stop_tallyd TERM
assert_eq "tallyd exits 0" "0" "$T_EXIT"
assert_log_clean
exec {stuck}>&-

section "a SIGINT during the shutdown exits at once; a second SIGTERM does not"
start_tallyd "$TMP/grace2"
P=$T_RESP
seq 1 1000 | sed 's/.*/tally.add big like 1 &/' |
	timeout 60 redis-cli -p "$P" >/dev/null 2>&1 || true
exec {stuck}<>"/dev/tcp/127.0.0.1/$P"
printf 'TALLY.RECENT big like 1 LIMIT 1000\r\n%.0s' {1..200} >&"$stuck"
sleep 1
kill -TERM "$T_PID"
sleep 1
kill -TERM "$T_PID"
sleep 1
assert_alive "a second SIGTERM leaves the shutdown waiting"
kill -INT "$T_PID"
if _gone_within "$T_PID" 5; then
	pass "tallyd exits within 5 s of a SIGINT"
else
	fail "tallyd exits within 5 s of a SIGINT" "still running"
fi
stop_tallyd TERM
assert_eq "... with exit code 1" "1" "$T_EXIT"
assert_contains "... and says so" "$(cat "$T_LOG")" "SIGINT during the shutdown: exiting now"
exec {stuck}>&-
start_tallyd "$TMP/grace2"
assert_eq "the folder opens again with every like" "1000" "$(rcli tally.count big like 1)"
stop_and_check


# -------------------------------------------------------------------------
section "the type limits: 1024 counting types, 65535 content types"
start_tallyd "$TMP/typelimits"
ntypes=$(rcli TALLY.TYPES | grep -cxE 'unique|total')
for ((i = ntypes + 1; i <= 1024; i++)); do
	echo "TALLY.TYPE ADD k$i total"
done | timeout 120 redis-cli -p "$T_RESP" >"$TMP/typeadd.out" 2>&1 || true
assert_eq "counting types up to 1024 are added" "$((1024 - ntypes)) OK" \
	"$(sort "$TMP/typeadd.out" | uniq -c | awk '{ print $1, $2 }')"
assert_eq "TALLY.TYPES lists 1024" 1024 "$(rcli TALLY.TYPES | grep -cxE 'unique|total')"
assert_eq "the 1025th counting type is refused, naming the limit" \
	"ERR limit reached: at most 1024 counting types" \
	"$(rcli TALLY.TYPE ADD onemore total)"
assert_eq "the last one added counts" 3 "$(rcli TALLY.ADD post k1024 1 0 DELTA 3)"
# Content types need no declaration: each new name in an event takes an id.
# (On the rocksdb store only: the cluster store registers each in a round
# trip to Redis, and CI time is bounded.)
if ! on_cluster; then
for ((i = 1; i <= 65534; i++)); do
	echo "TALLY.ADD c$i view 1 0"
done | timeout 300 redis-cli -p "$T_RESP" >"$TMP/ctypes.out" 2>&1 || true
assert_eq "65534 content types more (post was the first)" "65534 1" \
	"$(sort "$TMP/ctypes.out" | uniq -c | awk '{ print $1, $2 }')"
assert_eq "the 65536th content type is refused, naming the limit" \
	"ERR limit reached: at most 65535 content types" \
	"$(rcli TALLY.ADD onemore view 1 0)"
assert_eq "a content type it holds still counts" 2 "$(rcli TALLY.ADD c65534 view 1 0)"
assert_eq "HTTP: a new content type at the limit is 409" \
	'409 {"error":"limit reached: at most 65535 content types"}' \
	"$(curl -s -o "$TMP/lim.json" -w '%{http_code}' -X POST \
		"http://127.0.0.1:$T_HTTP/v1/events" \
		-d '{"ctype":"twomore","ktype":"view","content":1,"member":0}') $(cat "$TMP/lim.json")"
code=$(curl -s -o "$TMP/lim.json" -w '%{http_code}' -X POST \
	"http://127.0.0.1:$T_HTTP/v1/events" \
	-d '[{"ctype":"c7","ktype":"view","content":1,"member":0},{"ctype":"twomore","ktype":"view","content":1,"member":0}]')
assert_eq "HTTP: an array whose new content type is past it is 207, the event before it counted" \
	"207 2" "$code $(rcli TALLY.COUNT c7 view 1)"
assert_contains "... naming the limit for the event past it" "$(cat "$TMP/lim.json")" "limit reached"
stop_and_check
start_tallyd "$TMP/typelimits"
assert_eq "after a restart: still refused" \
	"ERR limit reached: at most 65535 content types" \
	"$(rcli TALLY.ADD onemore view 1 0)"
assert_eq "after a restart: the types it holds count on" "4 3" \
	"$(rcli TALLY.ADD c65534 view 1 0 DELTA 2) $(rcli TALLY.COUNT post k1024 1)"
fi
stop_and_check

finish
