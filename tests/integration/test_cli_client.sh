#!/usr/bin/env bash
# test_cli_client.sh: the `tally` command line against a real tallyd: every
# client command of README's table, its text and --json output, and its
# exit status (0 success, 1 an error reply, 2 a usage error, 3 the server
# cannot be reached), with -a and TALLY_PASSWORD.
source "$(dirname "$0")/lib.sh" "$@"
need_cmd redis-cli python3

TALLY=$BUILD_DIR/tally
[ -x "$TALLY" ] || { fail "tally is built at $TALLY"; finish; }

# tc ARGS...: run the CLI against the current tallyd; sets OUT, ERR, RC.
tc() {
	RC=0
	OUT=$(timeout 20 "$TALLY" -p "$T_RESP" "$@" 2>"$TMP/err") || RC=$?
	ERR=$(cat "$TMP/err")
}

# json_get EXPR: a Python expression of d, the JSON document in OUT.
json_get() {
	python3 -c 'import json, sys
d = json.loads(sys.argv[1])
print(eval(sys.argv[2]))' "$OUT" "$1"
}

start_tallyd "$TMP/data"
AT=1700000000000
ISO=2023-11-14T22:13:20.000Z

section "named counters"
tc incr c:1
assert_eq "incr prints the new value" "0 1" "$RC $OUT"
tc incr c:1 41
assert_eq "incr BY" "0 42" "$RC $OUT"
tc get c:1
assert_eq "get reads it back" "0 42" "$RC $OUT"
assert_eq "redis-cli sees the same value" "42" "$(rcli get c:1)"
tc get c:none
assert_eq "get of a counter never written: (nil)" "0 (nil)" "$RC $OUT"
tc --json get c:1
assert_eq "--json get" '{"value":42}' "$OUT"
tc --json get c:none
assert_eq "--json get of an absent counter" '{"value":null}' "$OUT"
tc --json incr c:1 -2
assert_eq "--json incr with a negative BY" '{"value":40}' "$OUT"
tc incr c:1 x
assert_eq "a BY that is no integer is a usage error (2)" 2 "$RC"
assert_contains "the usage error names BY" "$ERR" "BY must be an integer"
tc incr c:max 9223372036854775807
tc incr c:max
assert_eq "an overflow is an error reply (1)" 1 "$RC"
assert_contains "the error reply is printed" "$ERR" "would overflow"
assert_eq "the counter kept its value" "9223372036854775807" "$(rcli get c:max)"

section "events: add, remove, count"
tc add article like 42 7
assert_eq "add prints the object's new count" "0 1" "$RC $OUT"
tc add article like 42 8 --at "$AT"
assert_eq "add --at" "0 2" "$RC $OUT"
tc add article like 42 7
assert_eq "liking twice counts once" "0 2" "$RC $OUT"
tc count article like 42
assert_eq "count" "0 2" "$RC $OUT"
assert_eq "TALLY.COUNT agrees" "2" "$(rcli TALLY.COUNT article like 42)"
tc count article like 42 --at "$AT"
assert_eq "count --at: the running total after the newest event at or before it" "0 2" "$RC $OUT"
tc count article like 42 --at $((AT - 1))
assert_eq "count --at before every event" "0 0" "$RC $OUT"
tc remove article like 42 7
assert_eq "remove prints the new count" "0 1" "$RC $OUT"
tc --json remove article like 42 7
assert_eq "--json remove of a member not in" '{"count":1}' "$OUT"
tc add article view 42 0 --delta 5 --id tok-1
assert_eq "add --delta --id" "0 5" "$RC $OUT"
tc add article view 42 0 --delta 5 --id tok-1
assert_eq "the same --id again counts once" "0 5" "$RC $OUT"
tc add article view 42 0 --delta 5 --id tok-2
assert_eq "another --id counts" "0 10" "$RC $OUT"
tc --json count article view 42
assert_eq "--json count" '{"count":10}' "$OUT"
tc add article nosuch 42 1
assert_eq "an unknown counting type is an error reply (1)" 1 "$RC"
assert_contains "its message" "$ERR" "unknown counting type 'nosuch'"
tc --json add article nosuch 42 1
assert_eq "--json: an error reply exits 1 too" 1 "$RC"
tc count article like
assert_eq "too few arguments is a usage error (2)" 2 "$RC"
assert_contains "the usage line is printed" "$ERR" "usage: tally count CTYPE KTYPE CONTENT"

section "mcount and counts"
tc mcount article like 42 43
assert_eq "mcount: a table, one row per content" \
	"$(printf 'CONTENT  COUNT\n     42      1\n     43      0')" "$OUT"
tc --json mcount article like 42 43
assert_eq "--json mcount" '{"counts":[{"content":42,"count":1},{"content":43,"count":0}]}' "$OUT"
# shellcheck disable=SC2046
tc mcount article like $(seq 1 1000)
assert_eq "mcount of 1000 contents" 0 "$RC"
assert_eq "1000 rows and a header" 1001 "$(printf '%s\n' "$OUT" | wc -l)"
# shellcheck disable=SC2046
tc mcount article like $(seq 1 1001)
assert_eq "mcount of 1001 contents is a usage error (2)" 2 "$RC"
assert_contains "... whose message gives the bounds" "$ERR" \
	"wrong number of arguments for 'mcount' (1003 given; it takes 3 to 1002)"
tc has article like 42
assert_contains "a count short of an exact one gives it" "$ERR" \
	"wrong number of arguments for 'has' (3 given; it takes 4)"
tc counts article 42
assert_match "counts lists like" $'(^|\n)like +1($|\n)' "$OUT"
assert_match "counts lists view" $'(^|\n)view +10($|\n)' "$OUT"
tc --json counts article 42
assert_eq "--json counts: like" 1 "$(json_get 'd["counts"]["like"]')"
assert_eq "--json counts: view" 10 "$(json_get 'd["counts"]["view"]')"

section "recent, has, history"
tc recent article like 42
assert_eq "recent exits 0" 0 "$RC"
assert_eq "recent: a header and one row per event" 4 "$(printf '%s\n' "$OUT" | wc -l)"
assert_match "recent: the header" '^MEMBER +TIME \(UTC\) +AT_MS +OP +SEQ' "$OUT"
assert_match "recent: an event with --at shows its ISO-8601 UTC time" \
	" 8  $ISO  $AT  add +2($|"$'\n'")" "$OUT"
assert_match "recent: newest first (the remove of 7 first)" \
	$'^[^\n]*\n +7 [^\n]* remove +3\n' "$OUT"
tc recent article like 42 --limit 1
assert_eq "recent --limit 1: one row" 2 "$(printf '%s\n' "$OUT" | wc -l)"
assert_contains "a full page says how to get the next" "$ERR" "add --before 3 for the next page"
tc recent article like 42 --limit 1 --before 3
assert_match "--before 3 gives the page after" $'\n +8  '"$ISO" "$OUT"
tc --json recent article like 42 --limit 1
assert_eq "--json recent: next_before" 3 "$(json_get 'd["next_before"]')"
assert_eq "--json recent: the newest entry" "7 remove 3" \
	"$(json_get '" ".join(str(d["entries"][0][k]) for k in ("member", "op", "seq"))')"
tc --json recent article like 42 --limit 1 --before 3
assert_eq "--json recent --before: time in ISO-8601" "$ISO" "$(json_get 'd["entries"][0]["time"]')"
tc --json recent article like 42
assert_eq "--json recent: no next page" None "$(json_get 'd["next_before"]')"
tc has article like 42 8
assert_eq "has: yes, since when" "0 yes  $ISO  $AT" "$RC $OUT"
tc has article like 42 7
assert_eq "has: no (removed)" "0 no" "$RC $OUT"
tc --json has article like 42 8
assert_eq "--json has" "{\"has\":true,\"at_ms\":$AT,\"time\":\"$ISO\"}" "$OUT"
tc --json has article like 42 9
assert_eq "--json has: absent" '{"has":false}' "$OUT"
tc history 7 like
assert_match "history: the header" '^CTYPE +CONTENT +TIME \(UTC\) +AT_MS +OP +SEQ' "$OUT"
assert_eq "history: member 7's add and remove" 3 "$(printf '%s\n' "$OUT" | wc -l)"
tc history 7 like --limit 1
assert_match "history --limit 1: the newest, the remove" $'\narticle +42 .* remove +3$' "$OUT"
assert_contains "history: the next page's hint" "$ERR" "add --before 3 for the next page"
tc --json history 7 like --before 3
assert_eq "--json history --before: the add" "article 42 add 1" \
	"$(json_get '" ".join(str(d["entries"][0][k]) for k in ("ctype", "content", "op", "seq"))')"

section "types and ping"
tc types
assert_match "types: like is unique" $'(^|\n)like +unique($|\n)' "$OUT"
assert_match "types: view is total" $'(^|\n)view +total($|\n)' "$OUT"
tc type-add clap total
assert_eq "type-add" "0 OK" "$RC $OUT"
tc --json types
assert_eq "--json types lists the new type" total \
	"$(json_get '[t["mode"] for t in d["types"] if t["name"] == "clap"][0]')"
tc add post clap 1 0 --delta 3
assert_eq "the new type counts" "0 3" "$RC $OUT"
tc type-add clap unique
assert_eq "type-add of a name with the other mode is an error reply (1)" 1 "$RC"
assert_contains "its message" "$ERR" "exists with the other mode"
tc ping
assert_eq "ping" "0 PONG" "$RC $OUT"
tc --json ping
assert_eq "--json ping" '{"reply":"PONG"}' "$OUT"

section "reaching the server"
NOPORT=$(pick_port)
RC=0
OUT=$(timeout 20 "$TALLY" -p "$NOPORT" ping 2>&1) || RC=$?
assert_eq "no server: exit 3" 3 "$RC"
assert_contains "no server: the message says where" "$OUT" "cannot reach tallyd at 127.0.0.1:$NOPORT"
RC=0
OUT=$(timeout 20 "$TALLY" -h 127.0.0.1 -p "$T_RESP" get c:1 2>&1) || RC=$?
assert_eq "-h and -p" "0 40" "$RC $OUT"

section "passwords"
stop_tallyd
T_PASS=s3cret
start_tallyd "$TMP/data"
tc get c:1
assert_eq "no password: an error reply (1)" 1 "$RC"
assert_contains "no password: NOAUTH" "$ERR" "NOAUTH"
RC=0
OUT=$(timeout 20 "$TALLY" -p "$T_RESP" -a s3cret get c:1 2>&1) || RC=$?
assert_eq "-a PASSWORD" "0 40" "$RC $OUT"
RC=0
OUT=$(TALLY_PASSWORD=s3cret timeout 20 "$TALLY" -p "$T_RESP" get c:1 2>&1) || RC=$?
assert_eq "TALLY_PASSWORD" "0 40" "$RC $OUT"
RC=0
OUT=$(timeout 20 "$TALLY" -p "$T_RESP" -a wrong get c:1 2>&1) || RC=$?
assert_eq "a wrong password: an error reply (1)" 1 "$RC"
assert_contains "a wrong password: the server's answer" "$OUT" "WRONGPASS"
stop_and_check

finish
