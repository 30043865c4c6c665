#!/usr/bin/env bash
# redis-cli and redis-benchmark (Debian's redis-tools) against a real
# tallyd: Redis commands with Redis's replies and error texts, every
# TALLY.* command, RESP3 (decoded by redis-cli -3 and as exact bytes),
# redis-cli fed through a pipe, and exact counts after redis-benchmark.
# With TALLY_TEST_STORE=redis-cluster, the same against the cluster store:
# what that store does not do (README) is checked to be refused.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli redis-benchmark curl

start_tallyd "$TMP/data"
say "tallyd pid $T_PID, RESP $T_RESP, HTTP $T_HTTP"

# -------------------------------------------------------------------------
section "connection commands"
assert_eq "PING" "PONG" "$(rcli ping)"
assert_eq "PING msg" '"hi there"' "$(rcn ping 'hi there')"
assert_eq "ECHO" '"hello world"' "$(rcn echo 'hello world')"
assert_eq "ECHO keeps binary-ish bytes" "a;b|c" "$(rcli echo 'a;b|c')"
assert_eq "PING arity" "(error) ERR wrong number of arguments for 'ping' command" \
	"$(rcn ping a b)"
assert_eq "SELECT 1 is out of range" "(error) ERR DB index is out of range" \
	"$(rcn select 1)"
assert_eq "SELECT 0" "OK" "$(rcli select 0)"
assert_eq "SELECT abc" "(error) ERR value is not an integer or out of range" \
	"$(rcn select abc)"
out=$(printf 'client setname it-tester\nclient getname\nclient id\nclient id\n' |
	timeout 10 redis-cli -p "$T_RESP" 2>&1 || true)
mapfile -t lines <<<"$out"
assert_eq "CLIENT SETNAME" "OK" "${lines[0]-}"
assert_eq "CLIENT GETNAME on the same connection" "it-tester" "${lines[1]-}"
assert_match "CLIENT ID is a positive integer" '^[1-9][0-9]*$' "${lines[2]-}"
assert_eq "CLIENT ID is stable on one connection" "${lines[2]-}" "${lines[3]-}"
other_id=$(rcli client id)
assert_ne "CLIENT ID differs between connections" "${lines[2]-}" "$other_id"
assert_eq "CLIENT GETNAME of an unnamed connection" "(nil)" "$(rcn client getname)"
assert_eq "CLIENT SETNAME refuses spaces" \
	"(error) ERR Client names cannot contain spaces, newlines or special characters." \
	"$(rcn client setname 'a b')"
count=$(rcli command count)
assert_match "COMMAND COUNT is an integer" '^[0-9]+$' "$count"
all=$(rcli command)
n_found=0
contract="ping echo quit hello auth select client command info dbsize incr
	incrby decr decrby get mget set del exists config tally.add tally.remove
	tally.count tally.mcount tally.counts tally.recent tally.has
	tally.history tally.type tally.types tally.shards tally.backup"
for c in $contract; do
	if grep -qx "$c" <<<"$all"; then n_found=$((n_found + 1)); else say "  COMMAND lacks $c"; fi
done
assert_eq "COMMAND lists every command of the contract" "32" "$n_found"
# Names are found in any case, and only whole: each command in upper case
# and in mixed case is known (its arity error at worst, or QUIT's OK).
n_known=0
for c in $contract; do
	mixed=$(sed -E 's/(.)(.)/\U\1\E\2/g' <<<"$c")
	for name in "${c^^}" "$mixed"; do
		r=$(timeout 10 redis-cli -p "$T_RESP" "$name" 2>&1 </dev/null || true)
		if [[ "$r" == *"unknown command"* ]]; then
			say "  $name is called unknown"
		else
			n_known=$((n_known + 1))
		fi
	done
done
assert_eq "every command is known in upper and in mixed case" "64" "$n_known"
for bad in 'PING\x00' 'PINGX' '\xd0ING' 'tally.historyxxxx' 'INC'; do
	assert_match "'$bad' is an unknown command" '^-ERR unknown command' \
		"$(raw_resp "$T_RESP" "*1\r\n\$$(printf "$bad" | wc -c)\r\n$bad\r\n" 1)"
done
assert_int_cmp "COMMAND COUNT >= commands listed" "$count" -ge "$n_found"
# TALLY.TYPE ADD changes the schema: a client routing readonly commands
# elsewhere must not route it.
assert_eq "COMMAND calls TALLY.TYPE a write" "write" \
	"$(grep -x -A2 tally.type <<<"$all" | sed -n 3p)"
assert_eq "COMMAND calls TALLY.COUNT readonly" "readonly" \
	"$(grep -x -A2 tally.count <<<"$all" | sed -n 3p)"
info=$(rcli info)
version=$("$TALLYD" --version | awk '{print $2}')
assert_contains "INFO has redis_version" "$info" "redis_version:"
assert_contains "INFO has tally_version = tallyd --version" "$info" "tally_version:$version"
assert_contains "INFO server section alone" "$(rcli info server)" "process_id:$T_PID"
assert_eq "INFO of a section that does not exist is empty (as in Redis)" "" \
	"$(rcli info nosuchsection)"
two=$(rcli info server clients | tr -d '\r')
assert_contains "INFO of two sections has the first" "$two" "# Server"
assert_contains "INFO of two sections has the second" "$two" "# Clients"
assert_not_contains "INFO of two sections has no third" "$two" "# Stats"
if on_cluster; then
	assert_not_contains "INFO names no data folder on the cluster store" \
		"$two" "data_dir:"
else
	assert_contains "INFO names the folder served, resolved" "$two" \
		"data_dir:$(realpath "$TMP/data")"
fi
# Without --requirepass, as Redis's default user with no password: named,
# it takes any password; the one-argument form is told there is none.
assert_eq "AUTH PASS without a password configured: Redis's error" \
	"(error) ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?" \
	"$(rcn auth whatever)"
assert_eq "AUTH default PASS without a password configured: OK" "OK" \
	"$(rcli auth default whatever)"
assert_eq "AUTH of another user: WRONGPASS" \
	"(error) WRONGPASS invalid username-password pair or user is disabled." \
	"$(rcn auth bob whatever)"
assert_match "HELLO 3 AUTH default PASS without a password configured" \
	'^%7' "$(raw_resp "$T_RESP" 'HELLO 3 AUTH default whatever\r\nQUIT\r\n')"
help=$(rcli client help | paste -sd' ')
assert_match "CLIENT HELP lists its subcommands" \
	'^CLIENT <subcommand> .* ID GETNAME SETNAME SETINFO HELP$' "$help"
assert_match "CONFIG HELP lists GET" '^CONFIG <subcommand> .* GET HELP$' \
	"$(rcli config help | paste -sd' ')"
assert_match "COMMAND HELP lists COUNT and DOCS" \
	'^COMMAND <subcommand> .* COUNT DOCS HELP$' "$(rcli command help | paste -sd' ')"
assert_eq "CLIENT HELP takes no arguments, as in Redis" \
	"(error) ERR wrong number of arguments for 'client|help' command" \
	"$(rcn client help extra)"
assert_eq "CONFIG GET answers tally's equivalents of Redis's settings" \
	"save  appendonly yes appendfsync always maxclients 10000 timeout 0 port $T_RESP bind 127.0.0.1 databases 1 proto-max-bulk-len 1048576 tcp-keepalive 300" \
	"$(rcli config get '*' | paste -sd' ')"
assert_eq "CONFIG GET takes glob patterns, in any case" \
	"appendonly yes appendfsync always" "$(rcli config get 'APPEND*' | paste -sd' ')"
assert_eq "CONFIG GET takes several patterns, each setting once" \
	"maxclients 10000 port $T_RESP" \
	"$(rcli config get 'p?rt' 'max[a-c]*' '*clients' | paste -sd' ')"
assert_eq "CONFIG GET of a setting tally does not have: an empty map" \
	"" "$(rcli config get 'maxmemory*')"
# Each pattern is matched against every setting's name, at some 90 steps
# a byte: a 64 MiB command of patterns held its I/O thread for seconds.
long=$(printf '*[%04000d]' 0)
assert_eq "CONFIG GET of 4096 bytes of patterns is matched" "" \
	"$(rcli config get "$long" "$(printf '%093d' 0)")"
assert_eq "CONFIG GET of more is refused" \
	"(error) ERR CONFIG GET patterns are at most 4096 bytes in all" \
	"$(rcn config get "$long" "$(printf '%094d' 0)")"
if [ -z "$T_PASS" ]; then
	assert_eq "tally with TALLY_PASSWORD set empty sends no AUTH" "PONG" \
		"$(TALLY_PASSWORD= timeout 20 "$BUILD_DIR/tally" -p "$T_RESP" ping 2>&1)"
fi
assert_eq "CONFIG SET says why it is refused" \
	"(error) ERR CONFIG SET is not supported: tally is configured by flags (see tallyd --help)" \
	"$(rcn config set save '')"
assert_eq "CLIENT SETNAME too long names the limit" \
	"(error) ERR a client name is longer than 127 bytes" \
	"$(rcn client setname "$(printf 'x%.0s' $(seq 128))")"
assert_eq "CLIENT SETNAME of 127 bytes" "OK" \
	"$(rcli client setname "$(printf 'x%.0s' $(seq 127))")"
assert_eq "QUIT answers OK and closes (no reply to later commands)" \
	'+PONG\r\n+OK\r\n<EOF>' \
	"$(raw_resp "$T_RESP" 'PING\r\nQUIT\r\nPING\r\n')"

# -------------------------------------------------------------------------
section "named counters: Redis semantics"
assert_eq "INCR new key" "(integer) 1" "$(rcn incr c1)"
assert_eq "INCRBY" "(integer) 42" "$(rcn incrby c1 41)"
assert_eq "DECR" "(integer) 41" "$(rcn decr c1)"
assert_eq "DECRBY" "(integer) 1" "$(rcn decrby c1 40)"
assert_eq "INCRBY negative" "(integer) -9" "$(rcn incrby c1 -10)"
assert_eq "GET" '"-9"' "$(rcn get c1)"
assert_eq "GET missing key" "(nil)" "$(rcn get nosuchkey)"
# A key tally cannot hold holds nothing: GET answers nil, as MGET does
# and as Redis does for a missing key; a write of it is refused.
k513=$(head -c 513 /dev/zero | tr '\0' k)
assert_eq "GET of an empty key: nil" "(nil)" "$(rcn get "")"
assert_eq "GET of a 513-byte key: nil" "(nil)" "$(rcn get "$k513")"
assert_eq "INCR of a 513-byte key is refused" \
	"(error) ERR key must be 1..512 bytes" "$(rcn incr "$k513")"
assert_eq "DECR new key" "(integer) -1" "$(rcn decr c2)"
assert_eq "SET integer" "OK" "$(rcli set s1 100)"
assert_eq "GET after SET" "100" "$(rcli get s1)"
assert_eq "INCR after SET" "(integer) 101" "$(rcn incr s1)"
assert_eq "SET non-integer" "(error) ERR value is not an integer or out of range" \
	"$(rcn set s1 abc)"
assert_eq "failed SET changes nothing" "101" "$(rcli get s1)"
assert_eq "MGET with missing keys" $'1) "-9"\n2) (nil)\n3) "101"\n4) "-9"' \
	"$(rcn mget c1 nosuchkey s1 c1)"
# Past one read of 64 keys, with keys tally cannot hold (empty, too long)
# in between: each answer in its place.
long=(c1 "" nosuchkey s1)
for i in $(seq 1 70); do long+=("nosuch$i"); done
long+=(s1 "$(head -c 1100 /dev/zero | tr '\0' k)" c1)
out=$(rcli mget "${long[@]}")
assert_eq "MGET of 77 keys answers 77" "77" "$(wc -l <<<"$out")"
assert_eq "MGET of 77 keys: the first four" $'-9\n\n\n101' "$(sed -n 1,4p <<<"$out")"
assert_eq "MGET of 77 keys: the 70 missing ones are nil" "" "$(sed -n 5,74p <<<"$out" | tr -d '\n')"
assert_eq "MGET of 77 keys: the last three" $'101\n\n-9' "$(sed -n 75,77p <<<"$out")"
assert_eq "EXISTS counts repeats, skips missing" "(integer) 3" \
	"$(rcn exists c1 s1 nosuchkey c1)"
if on_cluster; then
	assert_eq "DBSIZE is refused on the cluster store" \
		"(error) ERR not supported by this store" "$(rcn dbsize)"
else
	assert_eq "DBSIZE" "(integer) 3" "$(rcn dbsize)"
fi
assert_eq "DEL counts deleted keys" "(integer) 2" "$(rcn del c1 c2 nosuchkey)"
assert_eq "EXISTS after DEL" "(integer) 0" "$(rcn exists c1 c2)"
assert_eq "GET after DEL" "(nil)" "$(rcn get c1)"
on_cluster || assert_eq "DBSIZE after DEL" "(integer) 1" "$(rcn dbsize)"
assert_eq "DEL of a missing key" "(integer) 0" "$(rcn del c1)"
assert_eq "INCR after DEL starts over" "(integer) 1" "$(rcn incr c1)"

section "named counters: overflow and bad integers (Redis's error texts)"
assert_eq "DECRBY INT64_MIN" "(error) ERR decrement would overflow" \
	"$(rcn decrby k1 -9223372036854775808)"
assert_eq "refused DECRBY created nothing" "(nil)" "$(rcn get k1)"
assert_eq "SET INT64_MAX" "OK" "$(rcli set big 9223372036854775807)"
assert_eq "INCR at INT64_MAX" "(error) ERR increment or decrement would overflow" \
	"$(rcn incr big)"
assert_eq "INCRBY past INT64_MAX" "(error) ERR increment or decrement would overflow" \
	"$(rcn incrby big 1)"
assert_eq "overflow changes nothing" "9223372036854775807" "$(rcli get big)"
assert_eq "SET INT64_MIN" "OK" "$(rcli set small -9223372036854775808)"
assert_eq "DECR at INT64_MIN" "(error) ERR increment or decrement would overflow" \
	"$(rcn decr small)"
assert_eq "INCRBY -1 at INT64_MIN" "(error) ERR increment or decrement would overflow" \
	"$(rcn incrby small -1)"
assert_eq "underflow changes nothing" "-9223372036854775808" "$(rcli get small)"
for bad in abc 1.5 9223372036854775808 -9223372036854775809 ' 1' '1 ' '+1' 01 -0 ''; do
	assert_eq "INCRBY k '$bad' is not an integer" \
		"(error) ERR value is not an integer or out of range" "$(rcn incrby k "$bad")"
done
assert_eq "refused INCRBYs created nothing" "(nil)" "$(rcn get k)"
assert_eq "DECRBY k abc" "(error) ERR value is not an integer or out of range" \
	"$(rcn decrby k abc)"

section "arity and unknown commands"
assert_eq "INCR without key" "(error) ERR wrong number of arguments for 'incr' command" \
	"$(rcn incr)"
assert_eq "INCR two keys" "(error) ERR wrong number of arguments for 'incr' command" \
	"$(rcn incr a b)"
assert_eq "INCRBY arity" "(error) ERR wrong number of arguments for 'incrby' command" \
	"$(rcn incrby a)"
assert_eq "GET arity" "(error) ERR wrong number of arguments for 'get' command" \
	"$(rcn get a b)"
assert_eq "MGET arity" "(error) ERR wrong number of arguments for 'mget' command" \
	"$(rcn mget)"
assert_eq "command names are case-insensitive" "(integer) 2" "$(rcn InCr c1)"
assert_eq "unknown command" \
	"(error) ERR unknown command 'foo', with args beginning with: 'a' 'b' " \
	"$(rcn foo a b)"
assert_eq "unknown command, no args" \
	"(error) ERR unknown command 'foo', with args beginning with: " \
	"$(rcn foo)"

# -------------------------------------------------------------------------
section "differential: the same commands against a real redis-server"
# Both fresh; every reply of this list must be byte-identical to Redis's.
if command -v redis-server >/dev/null 2>&1; then
	start_ref_redis
	assert_eq "the reference redis-server answers" PONG \
		"$(timeout 2 redis-cli -p "$RS_PORT" ping 2>&1)"
	T_SAVED_RESP=$T_RESP
	diff_cmds=(
		"incr d1" "incrby d1 41" "decrby d1 2" "decr d1" "get d1" "incrby d1 -100"
		"mget d1 d2 d1" "set d2 7" "exists d1 d2 d3 d2" "del d1 d3" "get d1"
		"incr" "incrby d1" "incrby d1 x" "incrby d1 -0" "incrby d1 007"
		"incrby d1 99999999999999999999" "decrby d1 -9223372036854775808"
		"set d3 9223372036854775807" "incr d3" "incrby d3 0" "decrby d3 -1"
		"set d4 -9223372036854775808" "decr d4" "decrby d4 1"
		"echo" "ping a b" "select 0" "select -1"
		"nosuchcmd x y z" "client getname" "hello 4" "get d4"
	)
	for c in "${diff_cmds[@]}"; do
		# shellcheck disable=SC2086
		want=$(timeout 10 redis-cli --no-raw -p "$RS_PORT" $c 2>&1 || true)
		# shellcheck disable=SC2086
		got=$(rcn $c)
		assert_eq "same reply as Redis: $c" "$want" "$got"
	done
	kill "$RS_PID" 2>/dev/null || true
else
	fail "redis-server is installed (scripts/deps.sh installs it)"
fi

# -------------------------------------------------------------------------
section "redis-cli fed through a pipe (commands read from stdin)"
out=$(printf 'incr piped\nincr piped\nget piped\nping\n' |
	timeout 10 redis-cli -p "$T_RESP" 2>&1 || true)
assert_eq "piped commands run in order on one connection" $'1\n2\n2\nPONG' "$out"
out=$(printf 'incrby piped 10\nincrby piped x\nget piped\n' |
	timeout 10 redis-cli --no-raw -p "$T_RESP" 2>&1 || true)
assert_eq "an error in the middle does not stop the rest" \
	$'(integer) 12\n(error) ERR value is not an integer or out of range\n"12"' "$out"

# -------------------------------------------------------------------------
section "TALLY.ADD / REMOVE / HAS (unique type: like)"
t0=$(now_ms)
assert_eq "ADD like" "(integer) 1" "$(rcn tally.add article like 42 7)"
assert_eq "ADD of a member already in is a no-op" "(integer) 1" \
	"$(rcn tally.add article like 42 7)"
assert_eq "ADD another member" "(integer) 2" "$(rcn tally.add article like 42 8)"
assert_eq "REMOVE" "(integer) 1" "$(rcn tally.remove article like 42 8)"
assert_eq "REMOVE of a member not in is a no-op" "(integer) 1" \
	"$(rcn tally.remove article like 42 8)"
t1=$(now_ms)
at=$(rcli tally.has article like 42 7)
assert_match "HAS gives at_ms" '^[0-9]+$' "$at"
assert_int_cmp "HAS at_ms is the time of the ADD (>= start)" "$at" -ge "$((t0 - 1000))"
assert_int_cmp "HAS at_ms is the time of the ADD (<= end)" "$at" -le "$((t1 + 1000))"
assert_eq "HAS of a removed member" "(nil)" "$(rcn tally.has article like 42 8)"
assert_eq "HAS of a member never in" "(nil)" "$(rcn tally.has article like 42 9999)"
assert_eq "COUNT" "(integer) 1" "$(rcn tally.count article like 42)"
assert_eq "COUNT of an object with no events" "(integer) 0" \
	"$(rcn tally.count article like 4242)"
assert_eq "COUNT of an unknown ctype" "(integer) 0" "$(rcn tally.count nosuchctype like 1)"
assert_eq "COUNT of an unknown type" "(error) ERR unknown counting type 'nosuchtype'" \
	"$(rcn tally.count article nosuchtype 42)"
assert_match "ADD of an unknown type is an error" '^\(error\) ERR .*unknown counting type' \
	"$(rcn tally.add article nosuchtype 42 1)"
assert_match "DELTA 2 on a unique type is an error" '^\(error\) ERR ' \
	"$(rcn tally.add article like 42 9 DELTA 2)"
assert_match "member 0 on a unique type is an error" '^\(error\) ERR ' \
	"$(rcn tally.add article like 42 0)"
assert_eq "bad content id" "(error) ERR content is not an unsigned 64-bit integer" \
	"$(rcn tally.add article like x 1)"
assert_eq "bad member id" "(error) ERR member is not an unsigned 64-bit integer" \
	"$(rcn tally.add article like 1 -1)"
assert_eq "refused events changed nothing" "(integer) 1" "$(rcn tally.count article like 42)"
assert_eq "content id 2^64-1 works" "(integer) 1" \
	"$(rcn tally.add article like 18446744073709551615 18446744073709551615)"
assert_match "HAS with u64 max ids" '^[0-9]+$' \
	"$(rcli tally.has article like 18446744073709551615 18446744073709551615)"
assert_eq "TALLY.ADD arity" "(error) ERR wrong number of arguments for 'tally.add' command" \
	"$(rcn tally.add article like 42)"

section "TALLY.ADD / REMOVE with DELTA (total type: view)"
assert_eq "ADD view DELTA 5" "(integer) 5" "$(rcn tally.add article view 42 0 DELTA 5)"
assert_eq "ADD view by the same member counts again" "(integer) 6" \
	"$(rcn tally.add article view 42 9)"
assert_eq "ADD view again" "(integer) 7" "$(rcn tally.add article view 42 9)"
assert_eq "REMOVE view DELTA 2" "(integer) 5" "$(rcn tally.remove article view 42 9 DELTA 2)"
assert_eq "DELTA 0 is an error" "(error) ERR DELTA must be a positive integer" \
	"$(rcn tally.add article view 42 1 DELTA 0)"
assert_eq "DELTA -1 is an error" "(error) ERR DELTA must be a positive integer" \
	"$(rcn tally.add article view 42 1 DELTA -1)"
opts_err="(error) ERR syntax error (options: DELTA n, AT ms, ID token, each with its value)"
assert_eq "dangling option is a syntax error, naming the options" "$opts_err" \
	"$(rcn tally.add article view 42 1 DELTA)"
assert_eq "unknown option is a syntax error, naming the options" "$opts_err" \
	"$(rcn tally.add article view 42 1 FOO 1)"
assert_match "HAS on a total type is an error" "^\(error\) ERR 'view' is a total type" \
	"$(rcn tally.has article view 42 9)"
assert_eq "view count" "(integer) 5" "$(rcn tally.count article view 42)"

section "AT: event times and COUNT ... AT"
assert_eq "ADD AT t1" "(integer) 1" "$(rcn tally.add post like 1 101 AT 1700000000000)"
assert_eq "ADD AT t2" "(integer) 2" "$(rcn tally.add post like 1 102 AT 1700000100000)"
assert_eq "REMOVE AT t3" "(integer) 1" "$(rcn tally.remove post like 1 101 AT 1700000200000)"
assert_eq "HAS gives the AT time" "1700000100000" "$(rcli tally.has post like 1 102)"
if on_cluster; then
	assert_eq "COUNT AT is refused on the cluster store" \
		"(error) ERR not supported by this store" \
		"$(rcn tally.count post like 1 AT 1700000150000)"
else
	assert_eq "COUNT AT before any event" "(integer) 0" "$(rcn tally.count post like 1 AT 1699999999999)"
	assert_eq "COUNT AT t1" "(integer) 1" "$(rcn tally.count post like 1 AT 1700000000000)"
	assert_eq "COUNT AT between t2 and t3" "(integer) 2" "$(rcn tally.count post like 1 AT 1700000150000)"
	assert_eq "COUNT AT after t3" "(integer) 1" "$(rcn tally.count post like 1 AT 1800000000000)"
fi
assert_eq "COUNT now" "(integer) 1" "$(rcn tally.count post like 1)"
assert_eq "AT 0 is an error" \
	"(error) ERR AT must be a time in ms since the epoch, 1..4102444800000 (before 2100)" \
	"$(rcn tally.count post like 1 AT 0)"
assert_eq "AT beyond 2100 is refused" \
	"(error) ERR AT must be a time in ms since the epoch, 1..4102444800000 (before 2100)" \
	"$(rcn tally.add post like 1 103 AT 99999999999999)"

section "ID: idempotency tokens"
assert_eq "ADD with a token" "(integer) 1" "$(rcn tally.add article like 44 1 ID tok-a)"
assert_eq "retried token returns the first result" "(integer) 1" \
	"$(rcn tally.add article like 44 2 ID tok-a)"
assert_eq "retried token changed nothing" "(nil)" "$(rcn tally.has article like 44 2)"
assert_eq "a new token applies" "(integer) 2" "$(rcn tally.add article like 44 3 ID tok-b)"
assert_eq "ID given twice is refused (which would count?)" "(error) ERR ID given twice" \
	"$(rcn tally.add article like 44 9 ID tok-c id tok-d)"
assert_eq "... and so are DELTA and AT" "(error) ERR DELTA given twice|(error) ERR AT given twice" \
	"$(rcn tally.add article view 44 0 DELTA 1 DELTA 2)|$(rcn tally.add article view 44 0 AT 5 at 6)"
assert_eq "... and nothing was counted" "(nil)" "$(rcn tally.has article like 44 9)"
assert_eq "REMOVE with a token" "(integer) 1" "$(rcn tally.remove article like 44 3 ID tok-c)"
assert_eq "REMOVE retried" "(integer) 1" "$(rcn tally.remove article like 44 1 ID tok-c)"
assert_eq "count after tokens" "(integer) 1" "$(rcn tally.count article like 44)"
assert_eq "DELTA with a retried token on a total type" "(integer) 3" \
	"$(rcn tally.add article view 44 0 DELTA 3 ID tok-v)"
assert_eq "DELTA retried" "(integer) 3" "$(rcn tally.add article view 44 0 DELTA 3 ID tok-v)"

section "TALLY.MCOUNT and TALLY.COUNTS"
assert_eq "MCOUNT" $'1) (integer) 1\n2) (integer) 1\n3) (integer) 0\n4) (integer) 1' \
	"$(rcn tally.mcount article like 42 44 4242 18446744073709551615)"
assert_eq "MCOUNT arity" "(error) ERR wrong number of arguments for 'tally.mcount' command" \
	"$(rcn tally.mcount article like)"
counts=$(rcli tally.counts article 42 | paste -sd' ')
assert_contains "COUNTS has like 1" " $counts " " like 1 "
assert_contains "COUNTS has view 5" " $counts " " view 5 "
assert_contains "COUNTS has share 0 (every type)" " $counts " " share 0 "
types_n=$(rcli tally.types | paste -sd' ' | wc -w)
counts_n=$(wc -w <<<"$counts")
assert_eq "COUNTS has one entry per type" "$types_n" "$counts_n"

section "TALLY.RECENT with LIMIT / BEFORE paging"
# events on one object: +1 +2 +3 -2 +4, newest first: +4 -2 +3 +2 +1
for ev in "add 1" "add 2" "add 3" "remove 2" "add 4" "add 1"; do
	set -- $ev
	rcli "tally.$1" article like 45 "$2" >/dev/null
done
page=$(rcli tally.recent article like 45 LIMIT 2 | paste -sd' ')
assert_match "RECENT LIMIT 2: newest first" '^4 [0-9]+ add [0-9]+ 2 [0-9]+ remove [0-9]+$' "$page"
seq_last=$(awk '{print $8}' <<<"$page")
seq_first=$(awk '{print $4}' <<<"$page")
assert_int_cmp "RECENT seqs decrease" "$seq_first" -gt "$seq_last"
page2=$(rcli tally.recent article like 45 LIMIT 2 BEFORE "$seq_last" | paste -sd' ')
assert_match "RECENT page 2 via BEFORE" '^3 [0-9]+ add [0-9]+ 2 [0-9]+ add [0-9]+$' "$page2"
seq_last2=$(awk '{print $8}' <<<"$page2")
page3=$(rcli tally.recent article like 45 LIMIT 2 BEFORE "$seq_last2" | paste -sd' ')
assert_match "RECENT page 3 (the no-op ADD of 1 is not an event)" '^1 [0-9]+ add [0-9]+$' "$page3"
seq_last3=$(awk '{print $4}' <<<"$page3")
assert_eq "RECENT past the oldest is empty" "(empty array)" \
	"$(rcn tally.recent article like 45 BEFORE "$seq_last3")"
assert_eq "RECENT default shows all 5 events" "5" \
	"$(rcli tally.recent article like 45 | wc -l | awk '{print $1/4}')"
assert_match "RECENT LIMIT 0 is an error" '^\(error\) ERR syntax error' \
	"$(rcn tally.recent article like 45 LIMIT 0)"
assert_match "RECENT LIMIT 1001 is an error" '^\(error\) ERR syntax error' \
	"$(rcn tally.recent article like 45 LIMIT 1001)"
for bad in "LIMIT x" "BEFORE x" "BEFORE -1" "LIMIT" "AFTER 3"; do
	assert_eq "RECENT ... $bad: the error gives the rules" \
		"(error) ERR syntax error (LIMIT 1..1000, BEFORE seq, a sequence number from an entry before)" \
		"$(rcn tally.recent article like 45 $bad)"
done
assert_eq "RECENT with LIMIT twice is refused" "(error) ERR LIMIT given twice" \
	"$(rcn tally.recent article like 45 LIMIT 1 LIMIT 2)"
assert_eq "HISTORY with BEFORE twice is refused" "(error) ERR BEFORE given twice" \
	"$(rcn tally.history 7 like BEFORE 9 before 9)"

section "TALLY.HISTORY"
rcli tally.add article like 46 77 >/dev/null
rcli tally.add video like 5 77 >/dev/null
rcli tally.add video view 5 77 >/dev/null
h=$(rcli tally.history 77 like | paste -sd' ')
assert_match "HISTORY newest first, only that type" \
	'^video 5 [0-9]+ add [0-9]+ article 46 [0-9]+ add [0-9]+$' "$h"
h1=$(rcli tally.history 77 like LIMIT 1 | paste -sd' ')
assert_match "HISTORY LIMIT 1" '^video 5 [0-9]+ add [0-9]+$' "$h1"
hseq=$(awk '{print $5}' <<<"$h1")
assert_match "HISTORY BEFORE" '^article 46 [0-9]+ add [0-9]+$' \
	"$(rcli tally.history 77 like LIMIT 1 BEFORE "$hseq" | paste -sd' ')"
assert_eq "HISTORY of a member with none" "(empty array)" "$(rcn tally.history 78 like)"
assert_eq "HISTORY member 0" "(error) ERR member must be non-zero" "$(rcn tally.history 0 like)"

section "TALLY.TYPE ADD / TYPES / SHARDS"
assert_eq "TYPE ADD total" "OK" "$(rcli tally.type add clap total)"
assert_eq "TYPE ADD again, same mode" "OK" "$(rcli tally.type add clap total)"
assert_eq "TYPE ADD with the other mode" "(error) ERR counting type 'clap' exists with the other mode" \
	"$(rcn tally.type add clap unique)"
assert_eq "TYPE ADD bad name" "(error) ERR type names are 1..64 bytes of [A-Za-z0-9_.:-]" \
	"$(rcn tally.type add 'a b' unique)"
assert_eq "TYPE ADD bad mode" "(error) ERR mode must be unique or total" \
	"$(rcn tally.type add zz sometimes)"
assert_eq "TYPE ADD unique" "OK" "$(rcli tally.type add bookmark unique)"
types=$(rcli tally.types | paste -sd' ')
for t in "like unique" "favorite unique" "praise unique" "down unique" "report unique" \
	"view total" "read total" "comment total" "forward total" "share total" \
	"buy total" "sale total" "taste total" "clap total" "bookmark unique"; do
	assert_contains "TYPES has '$t'" " $types " " $t "
done
assert_eq "a new total type counts" "(integer) 3" "$(rcn tally.add article clap 1 0 DELTA 3)"
assert_eq "a new unique type counts" "(integer) 1" "$(rcn tally.add article bookmark 1 5)"
assert_eq "SHARDS of a counter" "(integer) 1" "$(rcn tally.shards somecounter)"
assert_eq "SHARDS with too many arguments" \
	"(error) ERR wrong number of arguments for 'tally.shards' command" \
	"$(rcn tally.shards somecounter 2 3)"

section "TALLY.* errors say which rule an argument broke"
errs0=$(metric tally_command_errors_total)
assert_eq "a bad content type name, COUNT" \
	"(error) ERR content type must be 1..64 bytes of [A-Za-z0-9_.:-]" \
	"$(rcn tally.count 'bad name' like 42)"
assert_eq "a bad content type name, MCOUNT" \
	"(error) ERR content type must be 1..64 bytes of [A-Za-z0-9_.:-]" \
	"$(rcn tally.mcount 'bad name' like 1 2)"
assert_eq "a bad content type name, COUNTS" \
	"(error) ERR content type must be 1..64 bytes of [A-Za-z0-9_.:-]" \
	"$(rcn tally.counts 'bad name' 1)"
assert_eq "a bad content type name, ADD" \
	"(error) ERR content type must be 1..64 bytes of [A-Za-z0-9_.:-]" \
	"$(rcn tally.add 'bad name' like 1 5)"
long65=$(printf 'c%.0s' $(seq 65))
assert_eq "a content type of 65 bytes, ADD: its own rule" \
	"(error) ERR content type must be 1..64 bytes of [A-Za-z0-9_.:-]" \
	"$(rcn tally.add "$long65" like 1 5)"
assert_eq "a content type of 65 bytes, COUNT: its own rule" \
	"(error) ERR content type must be 1..64 bytes of [A-Za-z0-9_.:-]" \
	"$(rcn tally.count "$long65" like 1)"
assert_eq "AT after 2100, COUNT" \
	"(error) ERR AT must be a time in ms since the epoch, 1..4102444800000 (before 2100)" \
	"$(rcn tally.count article like 42 AT 4102444800001)"
assert_eq "AT after 2100, ADD" \
	"(error) ERR AT must be a time in ms since the epoch, 1..4102444800000 (before 2100)" \
	"$(rcn tally.add article view 42 0 AT 9999999999999)"
assert_eq "member 0 on a unique type" \
	"(error) ERR 'like' is a unique type: it needs a member, not 0" \
	"$(rcn tally.add article like 42 0)"
assert_eq "DELTA 2 on a unique type" \
	"(error) ERR 'like' is a unique type: DELTA must be 1" \
	"$(rcn tally.add article like 42 9 DELTA 2)"
assert_eq "HAS of member 0" "(error) ERR member must be non-zero" \
	"$(rcn tally.has article like 42 0)"
assert_eq "the refused events changed nothing" "(integer) 1" \
	"$(rcn tally.count article like 42)"
# 11 errors above, then one of a write queued behind another write (its
# reply waits in order), one unknown command and one arity error.
raw=$(raw_resp "$T_RESP" 'TALLY.ADD article view 42 0\r\nTALLY.ADD article like 42 0\r\nNOSUCHCMD\r\nINCR\r\nQUIT\r\n')
assert_match "a queued write's error comes in order" \
	'^:[0-9]+\\r\\n-ERR .like. is a unique type.*-ERR unknown command.*-ERR wrong number.*\+OK' "$raw"
assert_eq "/metrics counts every error reply, answered at once or queued" \
	"$((${errs0:-0} + 14))" "$(metric tally_command_errors_total)"

section "NUL bytes: refused in names and numbers, taken in an ID token"
# A content type may be called "id": the argument after it is the counting
# type, checked like any other, not an ID token.
raw=$(raw_resp "$T_RESP" '*5\r\n$9\r\nTALLY.ADD\r\n$2\r\nid\r\n$9\r\nlike\x00junk\r\n$1\r\n1\r\n$1\r\n2\r\n*7\r\n$9\r\nTALLY.ADD\r\n$2\r\nid\r\n$4\r\nlike\r\n$1\r\n1\r\n$1\r\n3\r\n$2\r\nID\r\n$3\r\na\x00b\r\n*1\r\n$4\r\nQUIT\r\n')
assert_match "a NUL in the counting type after a content type named id" \
	'^-ERR argument 2 contains a NUL byte' "$raw"
assert_contains "... while an ID token may hold one" "$raw" ':1\r\n+OK'
assert_eq "... and only the second was counted" "(integer) 1" \
	"$(rcn tally.count id like 1)"

# A named counter's name may hold a NUL byte: "nul\0b" is not "nul" (the
# cluster store cut it there, and counted both in one).
raw=$(raw_resp "$T_RESP" '*3\r\n$6\r\nINCRBY\r\n$3\r\nnul\r\n$1\r\n5\r\n*3\r\n$6\r\nINCRBY\r\n$5\r\nnul\x00b\r\n$1\r\n1\r\n*2\r\n$3\r\nGET\r\n$3\r\nnul\r\n*1\r\n$4\r\nQUIT\r\n')
assert_contains "a counter whose name holds a NUL is a counter of its own" "$raw" \
	':5\r\n:1\r\n$1\r\n5\r\n+OK'
# ... and TALLY.SHARDS takes its name too (the shard count of a counter is
# 1 until it grows, on either store).
raw=$(raw_resp "$T_RESP" '*2\r\n$12\r\nTALLY.SHARDS\r\n$5\r\nnul\x00b\r\n*1\r\n$4\r\nQUIT\r\n')
assert_eq "TALLY.SHARDS of a counter whose name holds a NUL" ':1\r\n+OK\r\n<EOF>' "$raw"
if ! on_cluster; then
	assert_eq "rocksdb: TALLY.SHARDS n of 1 answers 1" "1" "$(rcli TALLY.SHARDS nul 1)"
	assert_eq "rocksdb: TALLY.SHARDS n above 1 is refused" \
		"ERR TALLY.SHARDS n applies to the redis-cluster store; the rocksdb store needs no shards" \
		"$(rcli TALLY.SHARDS nul 2)"
	assert_eq "... and the counter keeps 1 shard" "1" "$(rcli TALLY.SHARDS nul)"
	info_keys=$(rcli INFO keyspace | tr -d '\r' | grep '^db0:keys=')
	assert_eq "INFO keyspace counts the named counters as /metrics does" \
		"db0:keys=$(metric tally_counters),expires=0" "$info_keys"
	assert_eq "... which DBSIZE gives too" "${info_keys#db0:keys=}" \
		"$(rcli DBSIZE),expires=0"
fi

section "an ID whose write was refused is free for its retry"
rcli tally.type add ovf total >/dev/null
assert_eq "a count at int64's top" "(integer) 9223372036854775807" \
	"$(rcn tally.add page ovf 5 0 DELTA 9223372036854775807)"
assert_match "one more with an ID: refused" '^\(error\) ' \
	"$(rcn tally.add page ovf 5 0 DELTA 1 ID retry-ovf)"
assert_eq "room made" "(integer) 9223372036854775797" \
	"$(rcn tally.remove page ovf 5 0 DELTA 10)"
assert_eq "the retry with the same ID is a first run" "(integer) 9223372036854775798" \
	"$(rcn tally.add page ovf 5 0 DELTA 1 ID retry-ovf)"
assert_eq "... whose own retry changes nothing" "(integer) 9223372036854775798" \
	"$(rcn tally.add page ovf 5 0 DELTA 1 ID retry-ovf)"

section "RESP3"
hello=$(timeout 10 redis-cli -3 --no-raw -p "$T_RESP" hello 3 2>&1 || true)
assert_contains "HELLO 3 is a map (redis-cli -3)" "$hello" '1# "server" => "tally"'
assert_contains "HELLO 3 proto 3" "$hello" '"proto" => (integer) 3'
assert_contains "HELLO 3 version" "$hello" "\"version\" => \"$version\""
assert_eq "nil after HELLO 3 (redis-cli -3)" "(nil)" \
	"$(timeout 10 redis-cli -3 --no-raw -p "$T_RESP" get nosuchkey 2>&1 || true)"
c3=$(timeout 10 redis-cli -3 --no-raw -p "$T_RESP" tally.counts article 42 2>&1 || true)
assert_contains "TALLY.COUNTS is a map in RESP3" "$c3" '1# "like" => (integer) 1'
# exact bytes
Q='*1\r\n$4\r\nQUIT\r\n'
raw=$(raw_resp "$T_RESP" "*2\r\n\$5\r\nHELLO\r\n\$1\r\n3\r\n*2\r\n\$3\r\nGET\r\n\$9\r\nnosuchkey\r\n$Q")
assert_match "HELLO 3 reply starts with %7" '^%7\\r\\n\$6\\r\\nserver\\r\\n\$5\\r\\ntally\\r\\n' "$raw"
assert_contains "RESP3 nil is _" "$raw" '*0\r\n_\r\n+OK\r\n<EOF>'
raw=$(raw_resp "$T_RESP" "HELLO 3\r\nMGET c1 nosuchkey\r\nTALLY.HAS article like 42 8\r\nTALLY.COUNT article like 42\r\nHELLO 2\r\nGET nosuchkey\r\nTALLY.HAS article like 42 8\r\n$Q")
assert_contains "RESP3 MGET with a nil" "$raw" '*2\r\n$1\r\n2\r\n_\r\n'
assert_contains "RESP3 TALLY.HAS nil then integer" "$raw" '_\r\n:1\r\n*14\r\n'
assert_contains "HELLO 2 goes back to RESP2 nils" "$raw" ':2\r\n$2\r\nid\r\n'
assert_contains "RESP2 nil after HELLO 2" "$raw" '$-1\r\n$-1\r\n+OK\r\n<EOF>'
raw=$(raw_resp "$T_RESP" "HELLO 3\r\nTALLY.COUNTS article 45\r\n$Q")
assert_match "RESP3 TALLY.COUNTS is a map (%)" '\*0\\r\\n%[0-9]+\\r\\n\$4\\r\\nlike\\r\\n:3\\r\\n' "$raw"
raw=$(raw_resp "$T_RESP" "TALLY.COUNTS article 45\r\nGET nosuchkey\r\n$Q")
assert_match "RESP2 TALLY.COUNTS is a flat array" '^\*[0-9]+\\r\\n\$4\\r\\nlike\\r\\n:3\\r\\n' "$raw"
n2=$(rcli tally.types | wc -l)
assert_match "RESP2 map is a flat array of 2 per type" "^\\*${n2}\\\\r\\\\n" "$raw"
raw=$(raw_resp "$T_RESP" "HELLO 3\r\nINFO server\r\n$Q")
assert_match "RESP3 INFO is a verbatim string" '=[0-9]+\\r\\ntxt:# Server' "$raw"
assert_match "HELLO 4 is refused" '^-NOPROTO' "$(raw_resp "$T_RESP" "HELLO 4\r\n$Q")"
assert_match "HELLO without a version answers in the current protocol (2)" \
	'"proto" +[0-9]+\) \(integer\) 2' "$(rcn hello | sed -n '5p;6p' | paste -sd' ')"

section "TALLY.BACKUP (and a tallyd started on the backup has the data)"
if on_cluster; then
	assert_eq "BACKUP is refused on the cluster store" \
		"(error) ERR not supported by this store" "$(rcn tally.backup "$TMP/backup")"
	assert_ok "a refused BACKUP made no folder" test ! -e "$TMP/backup"
else
	assert_eq "BACKUP" "OK" "$(rcli tally.backup "$TMP/backup")"
	assert_ok "backup folder exists" test -d "$TMP/backup"
	assert_match "BACKUP to an existing folder is an error" '^\(error\) ERR backup folder .* already exists' \
		"$(rcn tally.backup "$TMP/backup")"
fi

# -------------------------------------------------------------------------
section "redis-benchmark: exact counts"
# Fewer requests on the cluster store, where each batch is Lua scripts on
# three masters: the same exactness, in less CI time.
BENCH_N=100000
on_cluster && BENCH_N=20000
rcli del counter:__rand_int__ >/dev/null
incr_calls0=$(metric 'tally_command_calls_total{cmd="incr"}')
bench_out=$(timeout 180 redis-benchmark -p "$T_RESP" -t incr -n "$BENCH_N" -c 50 -P 16 -q 2>&1) ||
	fail "redis-benchmark -t incr -n $BENCH_N -c 50 -P 16 exits 0" "$bench_out"
assert_eq "$BENCH_N pipelined INCRs of one hot key from 50 clients" "$BENCH_N" \
	"$(rcli get counter:__rand_int__)"
on_cluster || d0=$(rcli dbsize)
bench_out=$(timeout 180 redis-benchmark -p "$T_RESP" -t incr -n "$BENCH_N" -c 50 -P 16 -r 1000 -q 2>&1) ||
	fail "redis-benchmark -r 1000 exits 0" "$bench_out"
keys=()
mapfile -t keys < <(seq -f "counter:%012g" 0 999)
vals=$(rcli mget "${keys[@]}")
sum=$(awk '$1 != "" { s += $1 } END { print s + 0 }' <<<"$vals")
nonnil=$(awk '$1 != "" { n++ } END { print n + 0 }' <<<"$vals")
assert_eq "sum of counter:000000000000..999 after -r 1000 equals the requests" "$BENCH_N" "$sum"
# 50 clients spread over the workers, each counting its own commands.
assert_eq "/metrics counted every INCR of both runs, over all workers" \
	"$((2 * BENCH_N))" \
	"$(($(metric 'tally_command_calls_total{cmd="incr"}') - ${incr_calls0:-0}))"
if on_cluster; then
	assert_int_cmp "redis-benchmark -r 1000 used most of its 1000 keys" "$nonnil" -gt 900
else
	d1=$(rcli dbsize)
	assert_eq "DBSIZE grew by the keys redis-benchmark used" "$nonnil" "$((d1 - d0))"
	clean=$(rcli info persistence | tr -d '\r' | sed -n 's/^store_clean://p')
	assert_match "INFO persistence shows store_clean, the values as of the last checkpoint in memory" \
		'^[0-9]+$' "$clean"
	assert_match "/metrics shows tally_store_clean" '^[0-9]+$' "$(metric tally_store_clean)"
fi

# -------------------------------------------------------------------------
if on_cluster; then
	# No backup: a new tallyd on the same cluster has everything.
	section "shutdown; a new tallyd on the same cluster has all the data"
	assert_alive
	expected_like=$(rcli tally.count article like 42)
	stop_and_check
	start_tallyd "$TMP/data"
	assert_eq "restart: like count" "$expected_like" "$(rcli tally.count article like 42)"
	assert_eq "restart: named counter" "101" "$(rcli get s1)"
	assert_eq "restart: custom type" "3" "$(rcli tally.count article clap 1)"
	assert_eq "restart: the hot counter of redis-benchmark" "$BENCH_N" \
		"$(rcli get counter:__rand_int__)"
	stop_and_check
	# lib.sh: a tallyd on a new data folder starts on an emptied cluster.
	start_tallyd "$TMP/fresh"
	assert_eq "a new data folder: the cluster was emptied" "" "$(rcli get s1)"
	assert_eq "a new data folder: no custom type" \
		"ERR unknown counting type 'clap'" "$(rcli tally.count article clap 1)"
	stop_and_check
else
	section "shutdown; a tallyd on the backup folder has the data of backup time"
	assert_alive
	expected_like=$(rcli tally.count article like 42)
	stop_and_check
	start_tallyd "$TMP/backup"
	assert_eq "backup: like count" "$expected_like" "$(rcli tally.count article like 42)"
	assert_eq "backup: named counter" "101" "$(rcli get s1)"
	assert_eq "backup: custom type" "3" "$(rcli tally.count article clap 1)"
	assert_eq "backup: nothing after backup time" "" "$(rcli get counter:__rand_int__)"
	stop_and_check
fi

finish
