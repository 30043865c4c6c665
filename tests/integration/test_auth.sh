#!/usr/bin/env bash
# test_auth.sh: the password against a real tallyd: RESP AUTH and HELLO
# AUTH, NOAUTH before it, HTTP Bearer tokens, protected mode, the password
# from a file, and that neither the password nor a wrong guess shows up in
# the log (at debug level), INFO, CONFIG GET, /metrics or the command line.
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli curl

PASS_W='Zq9-s3cret-T0ken#pw'
GUESS="g-${PASS_W}"              # a near miss: must not be logged either
DATA=$TMP/data

# redis-cli with no password; the commands come one per line on stdin and
# run in order on one connection. (redis-cli follows an error with an
# empty line here: those are dropped.)
rconn() { # LINES...
	printf '%s\n' "$@" | timeout 20 redis-cli -p "$T_RESP" 2>&1 | grep -v '^$' || true
}

section "RESP: nothing but AUTH, HELLO and QUIT before AUTH"
T_PASS=$PASS_W
start_tallyd "$DATA" --log-level debug
raw() { timeout 20 redis-cli -p "$T_RESP" "$@" 2>&1 || true; }
assert_eq "PING before AUTH is refused" \
	"NOAUTH Authentication required." "$(raw PING)"
assert_eq "GET before AUTH is refused" \
	"NOAUTH Authentication required." "$(raw GET k)"
assert_eq "INFO before AUTH is refused" \
	"NOAUTH Authentication required." "$(raw INFO)"
assert_eq "TALLY.ADD before AUTH is refused" \
	"NOAUTH Authentication required." "$(raw TALLY.ADD article like 1 7)"
assert_eq "INCRBY before AUTH is refused" \
	"NOAUTH Authentication required." "$(raw INCRBY k 5)"
assert_eq "a wrong argument count before AUTH: the arity error, as Redis 7" \
	"ERR wrong number of arguments for 'incr' command" "$(raw INCR)"
assert_eq "the refused TALLY.ADD changed nothing" "0" \
	"$(rcli TALLY.COUNT article like 1)"
assert_eq "the refused INCRBY changed nothing" "" "$(rcli GET k)"

section "RESP: Redis's caps on a client not yet authenticated"
# 11 arguments, or one of 16385 bytes, before AUTH: refused while the
# command is read, as Redis 7 does, and the connection closed.
args11='*11\r\n$4\r\nMGET\r\n'
for i in 1 2 3 4 5 6 7 8 9 10; do args11+='$1\r\nk\r\n'; done
assert_eq "11 arguments before AUTH" \
	'-ERR Protocol error: unauthenticated multibulk length\r\n<EOF>' \
	"$(raw_resp "$T_RESP" "$args11")"
big=$(head -c 16385 /dev/zero | tr '\0' x)
assert_eq "an argument of 16385 bytes before AUTH" \
	'-ERR Protocol error: unauthenticated bulk length\r\n<EOF>' \
	"$(raw_resp "$T_RESP" "*2\r\n\$4\r\nAUTH\r\n\$16385\r\n$big\r\n")"
ok16k=$(head -c 16384 /dev/zero | tr '\0' x)
assert_eq "an argument of 16384 bytes before AUTH: read, and refused" \
	'-NOAUTH Authentication required.\r\n' \
	"$(raw_resp "$T_RESP" "*2\r\n\$3\r\nGET\r\n\$16384\r\n$ok16k\r\n" 1)"
auth_cmd="*2\r\n\$4\r\nAUTH\r\n\$${#PASS_W}\r\n${PASS_W//\\/\\\\}\r\n"
assert_eq "after AUTH in the same pipeline, 11 arguments are read" \
	'+OK\r\n*10\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n' \
	"$(raw_resp "$T_RESP" "$auth_cmd$args11" 1)"

section "RESP: AUTH"
WRONG="WRONGPASS invalid username-password pair or user is disabled."
assert_eq "AUTH with a wrong password" "$WRONG" "$(raw AUTH "$GUESS")"
assert_eq "AUTH with a prefix of the password" "$WRONG" \
	"$(raw AUTH "${PASS_W:0:${#PASS_W}-1}")"
assert_eq "AUTH with the password and one more byte" "$WRONG" \
	"$(raw AUTH "${PASS_W}x")"
assert_eq "AUTH with the password in another case" "$WRONG" \
	"$(raw AUTH "${PASS_W^^}")"
assert_eq "AUTH with an empty password" "$WRONG" "$(raw AUTH "")"
assert_eq "AUTH as another user" "$WRONG" "$(raw AUTH admin "$PASS_W")"
assert_contains "AUTH with too many arguments" "$(raw AUTH a b c)" "ERR syntax"
assert_eq "AUTH, then commands run on that connection" \
	$'OK\nPONG\n5\n1' \
	"$(rconn "AUTH $PASS_W" PING "INCRBY k 5" "TALLY.ADD article like 1 7")"
assert_eq "AUTH default PASS" $'OK\n5' \
	"$(rconn "AUTH default $PASS_W" "GET k")"
assert_eq "a wrong AUTH leaves the connection refused" \
	"$WRONG"$'\nNOAUTH Authentication required.' \
	"$(rconn "AUTH $GUESS" "GET k")"
assert_eq "a wrong AUTH after a right one keeps it authenticated" \
	$'OK\n'"$WRONG"$'\n5' \
	"$(rconn "AUTH $PASS_W" "AUTH $GUESS" "GET k")"

section "RESP: HELLO"
assert_contains "HELLO 3 before AUTH is refused" "$(raw HELLO 3)" \
	"NOAUTH HELLO must be called with the client already authenticated"
out=$(raw HELLO 3 AUTH default "$PASS_W")
assert_match "HELLO 3 AUTH default PASS answers the server map" '^server' "$out"
assert_not_contains "... not an error" "$out" "NOAUTH"
assert_contains "... with protocol 3" "$out" 'proto 3'
assert_eq "HELLO 3 AUTH with a wrong password" "$WRONG" \
	"$(raw HELLO 3 AUTH default "$GUESS")"
assert_eq "HELLO 3 AUTH as another user" "$WRONG" \
	"$(raw HELLO 3 AUTH admin "$PASS_W")"
assert_eq "HELLO AUTH authenticates the connection" "5" \
	"$(rconn "HELLO 2 AUTH default $PASS_W" "GET k" | tail -n 1)"
assert_eq "HELLO AUTH with a bad option after it authenticates nothing" \
	"ERR Syntax error in HELLO option 'BOGUS'"$'\nNOAUTH Authentication required.' \
	"$(rconn "HELLO 2 AUTH default $PASS_W BOGUS" "GET k")"
out=$(rconn "HELLO 2 SETNAME sneaky" "AUTH $PASS_W" "CLIENT GETNAME")
assert_contains "HELLO SETNAME before AUTH is refused" "$out" "NOAUTH HELLO"
assert_not_contains "... and sets no name" "$out" "sneaky"
assert_eq "redis-cli -a works" "PONG" "$(rcli PING)"

section "HTTP: Authorization: Bearer"
# code_of CURL_ARGS...: the status of one request, no password added.
code_of() {
	curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$@" || true
}
URL=http://127.0.0.1:$T_HTTP
out=$(curl -s -i --max-time 20 "$URL/v1/objects/article/1" | tr -d '\r' || true)
assert_match "no Authorization header: 401" '^HTTP/1.1 401' "$out"
assert_contains "... with WWW-Authenticate: Bearer" "$out" \
	'WWW-Authenticate: Bearer realm="tally"'
assert_contains "... and a JSON error" "$out" '{"error":"authentication required"}'
assert_eq "wrong token: 401" "401" \
	"$(code_of -H "Authorization: Bearer $GUESS" "$URL/v1/objects/article/1")"
assert_eq "a prefix of the token: 401" "401" \
	"$(code_of -H "Authorization: Bearer ${PASS_W:0:10}" "$URL/v1/objects/article/1")"
assert_eq "an empty token: 401" "401" \
	"$(code_of -H "Authorization: Bearer " "$URL/v1/objects/article/1")"
assert_eq "the password with Basic: 401" "401" \
	"$(code_of -u "default:$PASS_W" "$URL/v1/objects/article/1")"
assert_eq "the password without a scheme: 401" "401" \
	"$(code_of -H "Authorization: $PASS_W" "$URL/v1/objects/article/1")"
assert_eq "the right token: 200" "200" \
	"$(code_of -H "Authorization: Bearer $PASS_W" "$URL/v1/objects/article/1")"
assert_eq "'bearer' in lower case: 200" "200" \
	"$(code_of -H "Authorization: bearer $PASS_W" "$URL/v1/objects/article/1")"
assert_eq "'BEARER' in upper case: 200" "200" \
	"$(code_of -H "Authorization: BEARER $PASS_W" "$URL/v1/objects/article/1")"
assert_eq "white space after the token (RFC 9110 5.5): 200" "200" \
	"$(code_of -H "Authorization: Bearer $PASS_W  " "$URL/v1/objects/article/1")"
assert_eq "a tab between scheme and token: 200" "200" \
	"$(code_of -H "$(printf 'Authorization: Bearer\t%s' "$PASS_W")" "$URL/v1/objects/article/1")"
assert_eq "the token with a byte more: 401" "401" \
	"$(code_of -H "Authorization: Bearer ${PASS_W}x" "$URL/v1/objects/article/1")"
# A chunked body's trailer is not a header: a credential there is ignored.
out=$(printf 'POST /v1/counters/trailer/incr HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nAuthorization: Bearer %s\r\n\r\n' "$PASS_W" |
	timeout 20 bash -c "exec 3<>/dev/tcp/127.0.0.1/$T_HTTP; cat >&3; cat <&3" | tr -d '\r' || true)
assert_match "the token in a chunked trailer: 401" '^HTTP/1.1 401' "$out"
assert_eq "... and nothing was written" "" "$(rcli GET trailer)"
# Expect: 100-continue: the password is checked on the head, before the
# body is asked for; a refused client gets its 401 at once, and the
# connection closes without waiting for the body it announced.
expect_head() { # AUTH_HEADER_LINE (\r\n escaped): the answer to a head whose body waits
	timeout 20 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 9
		printf "POST /v1/counters/cont/incr HTTP/1.1\r\nHost: x\r\n%bExpect: 100-continue\r\nContent-Length: 8\r\n\r\n" "$2" >&3
		IFS= read -r -t 5 line <&3 || { echo "no answer"; exit 0; }
		printf "%s" "$line"
		if [ "${line:9:3}" != 100 ]; then
			timeout 5 cat <&3 >/dev/null && echo "|closed" || echo "|open"
		fi' _ "$T_HTTP" "$1" | tr -d '\r' || true
}
assert_eq "Expect: 100-continue without the token: 401 before the body, closed" \
	"HTTP/1.1 401 Unauthorized|closed" "$(expect_head "")"
assert_eq "... with a wrong token: the same" \
	"HTTP/1.1 401 Unauthorized|closed" \
	"$(expect_head "Authorization: Bearer $GUESS\r\n")"
assert_eq "... with the right token: 100 Continue" "HTTP/1.1 100 Continue" \
	"$(expect_head "Authorization: Bearer $PASS_W\r\n")"
assert_eq "... and nothing was written by them" "" "$(rcli GET cont)"
# Without Expect too: a body announced by a client without the token is
# refused on the head, before it is sent (1 MiB per connection could be
# held until the 401; what a client sends after it is read and dropped).
python3 - "$T_HTTP" <<'ZZ' >"$TMP/body401.out" 2>&1 || true
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\n"
          b"Content-Length: 1048576\r\n\r\n" + b" " * 1000)
s.settimeout(5)
try:
    print(s.recv(4096).split(b"\r\n")[0].decode() or "closed")
except socket.timeout:
    print("no answer")
ZZ
assert_eq "a body announced without the token: 401 before it is sent" \
	"HTTP/1.1 401 Unauthorized" "$(cat "$TMP/body401.out")"
# A client that sends its whole body anyway (as most do, not reading
# before they are done) over more than a second still reads its 401: the
# connection is drained while the body comes, not reset after a second.
python3 - "$T_HTTP" <<'ZZ' >"$TMP/slow401.out" 2>&1 || true
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
try:
    s.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 1048576\r\n\r\n")
    for i in range(16):
        s.sendall(b" " * 65536)
        time.sleep(0.15)
    s.settimeout(5)
    print(s.recv(4096).split(b"\r\n")[0].decode() or "closed")
except OSError as e:
    print("error:", e)
ZZ
assert_eq "a body sent whole over 2.4 s without the token: its 401 is read" \
	"HTTP/1.1 401 Unauthorized" "$(cat "$TMP/slow401.out")"
assert_eq "/metrics needs the token" "401" "$(code_of "$URL/metrics")"
assert_eq "unknown paths need the token too (they would tell routes)" "401" \
	"$(code_of "$URL/v1/nothing")"
assert_eq "/healthz needs none" "200" "$(code_of "$URL/healthz")"
assert_eq "another method on /healthz: 405, without the token" "405" \
	"$(code_of -XPOST "$URL/healthz")"
assert_eq "POST /v1/events without the token: 401" "401" \
	"$(code_of -XPOST -d '{"ctype":"article","ktype":"like","content":2,"member":9}' \
	  "$URL/v1/events")"
assert_eq "... and nothing was written" "0" "$(rcli TALLY.COUNT article like 2)"
http POST /v1/events '{"ctype":"article","ktype":"like","content":2,"member":9}'
assert_eq "POST /v1/events with the token" "200 {\"count\":1}" \
	"$HTTP_CODE $HTTP_BODY"

section "no secret where it could be read"
# Everything that shows state: none of it may hold the password or a guess.
for what in "INFO" "INFO all" "INFO everything" "CONFIG GET *" \
	"CONFIG GET requirepass" "CLIENT LIST" "CLIENT GETNAME"; do
	# shellcheck disable=SC2086
	out=$(rcli $what)
	assert_not_contains "$what holds no password" "$out" "$PASS_W"
done
assert_eq "CONFIG GET requirepass does not answer it" "" \
	"$(rcli CONFIG GET requirepass)"
http GET /metrics
assert_eq "/metrics answers" "200" "$HTTP_CODE"
assert_not_contains "/metrics holds no password" "$HTTP_BODY" "$PASS_W"
assert_not_contains "/metrics holds no guess" "$HTTP_BODY" "$GUESS"
cmdline=$(tr '\0' ' ' <"/proc/$T_PID/cmdline")
assert_contains "the command line is tallyd's" "$cmdline" "--requirepass"
assert_not_contains "--requirepass is wiped from /proc/PID/cmdline" \
	"$cmdline" "$PASS_W"
out=$(ps -o args= -p "$T_PID" || true)
assert_not_contains "... and from ps" "$out" "$PASS_W"
stop_and_check
assert_match "the debug-level log has lines" "tallyd" "$(cat "$T_LOG")"
assert_not_contains "the log holds no password" "$(cat "$T_LOG")" "$PASS_W"
assert_not_contains "the log holds no guess" "$(cat "$T_LOG")" "$GUESS"
# RocksDB writes its own LOG and OPTIONS files into the data folder.
assert_eq "no file of the data folder holds the password" "" \
	"$(grep -rlF -- "$PASS_W" "$DATA" || true)"

section "--requirepass given twice: the last counts, both are wiped"
SAVED_PASS=$T_PASS
T_PASS=new-pw-77d0   # start_tallyd gives it first; the two below follow
start_tallyd "$TMP/twice" --requirepass old-pw-1e9c --requirepass=new-pw-77d0
assert_eq "the last value is the password" "PONG" \
	"$(timeout 10 redis-cli -p "$T_RESP" -a new-pw-77d0 --no-auth-warning ping 2>&1)"
cmdline=$(tr '\0' ' ' <"/proc/$T_PID/cmdline")
assert_not_contains "the first value is wiped from /proc/PID/cmdline" "$cmdline" "old-pw-1e9c"
assert_not_contains "... and the last" "$cmdline" "new-pw-77d0"
stop_and_check
T_PASS=$SAVED_PASS

section "--requirepass-file"
PWFILE=$TMP/password
printf '%s\n' "$PASS_W" >"$PWFILE"
T_PASS=""
start_file_tallyd() { # like start_tallyd, with the password from a file
	local deadline
	T_RESP=$(pick_port)
	T_HTTP=$(pick_port)
	T_LOG=$TMP/tallyd.file.log
	"$TALLYD" --data "$DATA" --resp-port "$T_RESP" --http-port "$T_HTTP" \
		--threads 2 --log-level debug --requirepass-file "$PWFILE" \
		>"$T_LOG" 2>&1 &
	T_PID=$!
	TALLYD_PIDS+=("$T_PID")
	deadline=$((SECONDS + 30))
	while [ $SECONDS -lt $deadline ] && kill -0 "$T_PID" 2>/dev/null; do
		[ "$(timeout 3 redis-cli -p "$T_RESP" -a "$PASS_W" --no-auth-warning \
			PING 2>/dev/null)" == "PONG" ] && return 0
		sleep 0.1
	done
	cat "$T_LOG"
	return 1
}
start_file_tallyd
assert_eq "the file's line (without its newline) is the password" $'OK\n5' \
	"$(rconn "AUTH $PASS_W" "GET k")"
assert_eq "the newline is not part of it" "$WRONG" "$(raw AUTH "$PASS_W"$'\n')"
assert_eq "HTTP takes it as the token" "200" \
	"$(code_of -H "Authorization: Bearer $PASS_W" \
	  "http://127.0.0.1:$T_HTTP/v1/objects/article/1")"
assert_not_contains "the password is on no command line" \
	"$(tr '\0' ' ' <"/proc/$T_PID/cmdline")" "$PASS_W"
stop_and_check

section "tally -a: the password leaves the CLI's command line too"
# A listener that accepts and never answers holds the CLI in its AUTH.
SINK=$(pick_port)
perl -MIO::Socket::INET -e '
	my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1",
		LocalPort => $ARGV[0], Listen => 5, ReuseAddr => 1) or exit 1;
	my $c = $s->accept; sleep 30' "$SINK" &
BG_PIDS+=("$!")
# tcp_state PORT STATE: a socket on PORT (local or remote) in STATE (0A
# listening, 01 established), from /proc/net/tcp.
tcp_state() {
	awk -v p="$(printf ':%04X' "$1")" -v st="$2" \
		'NR > 1 && $4 == st && (index($2, p) || index($3, p)) { f = 1 } END { exit !f }' \
		/proc/net/tcp
}
for ((i = 0; i < 200; i++)); do tcp_state "$SINK" 0A && break; sleep 0.05; done
# No timeout wrapper: its own command line would hold the password. The
# CLI's reply timeout, the sink's 30 s and the cleanup each bound it.
"$BUILD_DIR/tally" -p "$SINK" -a "$PASS_W" ping >/dev/null 2>&1 &
CLI_PID=$!
BG_PIDS+=("$CLI_PID")
# Connected: past its parse of the flags, waiting in its AUTH.
for ((i = 0; i < 200; i++)); do tcp_state "$SINK" 01 && break; sleep 0.05; done
cmdline=$(tr '\0' ' ' <"/proc/$CLI_PID/cmdline" 2>/dev/null || true)
assert_contains "the CLI is waiting with -a on its command line" "$cmdline" " -a "
assert_not_contains "... and without the password" "$cmdline" "$PASS_W"
_kill_pid "$CLI_PID"

section "protected mode and bad password flags"
# Each must exit at once with code 2 and a message; if one started
# instead, timeout ends it and the test fails.
refused() { # DESC MESSAGE FLAGS...
	local desc=$1 msg=$2 out rc=0
	shift 2
	out=$(timeout 20 "$TALLYD" --data "$TMP/never" --resp-port "$(pick_port)" \
		--http-port "$(pick_port)" "$@" 2>&1) || rc=$?
	assert_eq "$desc: exit 2" "2" "$rc"
	assert_contains "$desc: says why" "$out" "$msg"
}
refused "--bind 0.0.0.0 without a password" "protected mode" --bind 0.0.0.0
refused "--bind :: without a password" "protected mode" --bind ::
refused "--bind of a non-loopback address" "without a password" \
	--bind 192.0.2.1
refused "an empty --requirepass" "must not be empty" --requirepass ""
refused "a --requirepass of 4097 bytes" "--requirepass is at most 4096 bytes" \
	--requirepass "$(printf '%04097d' 0)"
refused "a password ending with a space (HTTP cannot carry it)" \
	"must not begin or end with a space" --requirepass "pw "
refused "a password beginning with a tab" "must not begin or end" \
	--requirepass "$(printf '\tpw')"
refused "a password holding a line feed" "nor hold a control character" \
	--requirepass "$(printf 'p\nw')"
# RESP alone carries any bytes: such a password serves with --http-port 0.
rport=$(pick_port)
"$TALLYD" --data "$TMP/respalone" --resp-port "$rport" --http-port 0 \
	--requirepass "pw " --log-level error >"$TMP/respalone.log" 2>&1 &
rpid=$!
TALLYD_PIDS+=("$rpid")
got=""
for _ in $(seq 100); do
	got=$(redis-cli -p "$rport" -a "pw " --no-auth-warning ping 2>/dev/null) || true
	[ "$got" == PONG ] && break
	sleep 0.1
done
assert_eq "with --http-port 0, a password ending with a space serves RESP" \
	"PONG" "$got"
kill -TERM "$rpid"
wait "$rpid" && rc=0 || rc=$?
_forget_pid "$rpid"
assert_eq "... and that tallyd exits 0" "0" "$rc"
refused "--requirepass and --requirepass-file" "not both" \
	--requirepass x --requirepass-file "$PWFILE"
refused "--requirepass-file of a missing file" "No such file" \
	--requirepass-file "$TMP/none"
: >"$TMP/empty"
refused "--requirepass-file of an empty file" \
	"the first line of $TMP/empty (from --requirepass-file) is empty" \
	--requirepass-file "$TMP/empty"
head -c 5000 /dev/zero | tr '\0' 'a' >"$TMP/long"
refused "--requirepass-file of a 5000-byte line" "at most 4096 bytes" \
	--requirepass-file "$TMP/long"
printf 'abc\0def\n' >"$TMP/nul"
refused "--requirepass-file with a NUL in its line" "without NUL" \
	--requirepass-file "$TMP/nul"
assert_eq "no refused tallyd made a data folder" "no" \
	"$([ -e "$TMP/never" ] && echo yes || echo no)"

finish
