#!/usr/bin/env bash
# curl against a real tallyd: every route of DESIGN.md's HTTP contract,
# errors as 4xx with {"error":...} (never a 500 for bad input), /metrics
# in Prometheus text format, and HTTP/1.1 keep-alive. With
# TALLY_TEST_STORE=redis-cluster, the same on the cluster store, where
# ?at= is refused with 501 (README, "The redis-cluster store").
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd curl redis-cli

start_tallyd "$TMP/data"
say "tallyd pid $T_PID, RESP $T_RESP, HTTP $T_HTTP"
H="http://127.0.0.1:$T_HTTP"

# assert_http DESC CODE BODY_SUBSTRING: on the last http call
assert_http() {
	if [ "$HTTP_CODE" == "$2" ] && [[ "$HTTP_BODY" == *"$3"* ]]; then
		pass "$1"
	else
		fail "$1" "expected: $2 with body containing $3" \
			"actual:   $HTTP_CODE $HTTP_BODY"
	fi
}
# an error reply: status, and a JSON object {"error":"..."} as the body
ERR_RE='^\{"error":"([^"\\]|\\.)+"\}$'
assert_http_error() {
	if [ "$HTTP_CODE" == "$2" ] && [[ "$HTTP_BODY" =~ $ERR_RE ]] &&
		[[ "$HTTP_BODY" == *"${3-}"* ]]; then
		pass "$1"
	else
		fail "$1" "expected: $2 {\"error\":\"...${3-}...\"}" "actual:   $HTTP_CODE $HTTP_BODY"
	fi
}

section "/healthz"
http GET /healthz
assert_http "GET /healthz" 200 '{"status":"ok"}'
ct=$(curl -s -o /dev/null -w '%{content_type}' --max-time 10 "$H/healthz")
assert_contains "JSON content type" "$ct" "application/json"

section "counters"
http GET /v1/counters/hits
assert_http_error "GET a missing counter: 404" 404
http POST /v1/counters/hits/incr '{"by":5}'
assert_http "POST incr by 5" 200 '{"name":"hits","value":5}'
http POST /v1/counters/hits/incr
assert_http "POST incr without a body adds 1" 200 '{"name":"hits","value":6}'
http POST /v1/counters/hits/incr '{"by":-10}'
assert_http "POST incr by -10" 200 '{"name":"hits","value":-4}'
http GET /v1/counters/hits
assert_http "GET counter" 200 '{"name":"hits","value":-4}'
assert_eq "the same counter over RESP" "-4" "$(rcli get hits)"
rcli incrby hits 14 >/dev/null
http GET /v1/counters/hits
assert_http "a RESP write is seen over HTTP" 200 '"value":10'
http POST /v1/counters/hits/incr '{"by":1,"id":"tok-1"}'
assert_http "incr with an idempotency id" 200 '"value":11'
http POST /v1/counters/hits/incr '{"by":1,"id":"tok-1"}'
assert_http "retried id: first result, nothing added" 200 '"value":11'
http GET /v1/counters/hits
assert_http "retried id changed nothing" 200 '"value":11'
http POST "/v1/counters/a%2Fb%20c/incr" '{"by":2}'
assert_http "percent-encoded counter name" 200 '{"name":"a/b c","value":2}'
assert_eq "that name over RESP" "2" "$(rcli get 'a/b c')"
rcli set big 9223372036854775807 >/dev/null
http POST /v1/counters/big/incr '{"by":1}'
assert_http_error "overflow: 400" 400 "overflow"
http GET /v1/counters/big
assert_http "overflow changed nothing" 200 '"value":9223372036854775807'
http POST /v1/counters/hits/incr '{"by":"x"}'
assert_http_error "by not an integer: 400" 400
http POST /v1/counters/hits/incr '{"by":1.5}'
assert_http_error "by 1.5: 400" 400
http POST /v1/counters/hits/incr '{"by":1,"bogus":2}'
assert_http_error "unknown field: 400" 400
http POST /v1/counters/hits/incr '{"by":1'
assert_http_error "bad JSON: 400" 400 "invalid JSON"
http POST /v1/counters/hits/incr '[1,2]'
assert_http_error "JSON that is not an object: 400" 400
http GET "/v1/counters/$(head -c 600 /dev/zero | tr '\0' k)"
assert_http_error "reading a counter name over 512 bytes: 404, as GET's nil" 404
http POST "/v1/counters/$(head -c 600 /dev/zero | tr '\0' k)/incr" '{"by":1}'
assert_http_error "incrementing a counter name over 512 bytes: 400" 400
http GET /v1/counters/hits
assert_http "bad requests changed nothing" 200 '"value":11'

section "POST /v1/events"
http POST /v1/events '{"ctype":"article","ktype":"like","content":42,"member":7}'
assert_http "one event" 200 '{"count":1}'
http POST /v1/events '{"ctype":"article","ktype":"like","content":42,"member":7}'
assert_http "the same member again: unique, no-op" 200 '{"count":1}'
http POST /v1/events '[{"ctype":"article","ktype":"like","content":42,"member":8},{"ctype":"article","ktype":"like","content":42,"member":9},{"ctype":"article","ktype":"view","content":42,"delta":3},{"ctype":"article","ktype":"like","content":42,"member":9,"op":"remove"}]'
assert_http "an array of events, counts in order" 200 '{"counts":[2,3,3,2]}'
http POST /v1/events '{"ctype":"article","ktype":"like","content":"18446744073709551615","member":"18446744073709551615","at":1700000000000}'
assert_http "u64 ids as strings, and at" 200 '{"count":1}'
assert_eq "that event over RESP (HAS)" "1700000000000" \
	"$(rcli tally.has article like 18446744073709551615 18446744073709551615)"
# Ids past 2^63 come back whole from the lists too (the cluster store's
# entries are text, read back as unsigned).
rcli tally.add article like 18446744073709551615 9223372036854775808 >/dev/null
assert_eq "RECENT lists members past 2^63 whole" \
	"$(printf '%s\n' 9223372036854775808 18446744073709551615)" \
	"$(rcli tally.recent article like 18446744073709551615 | grep -E '^[0-9]{19,}$')"
assert_eq "HISTORY lists a content past 2^63 whole" "18446744073709551615" \
	"$(rcli tally.history 9223372036854775808 like | grep -E '^[0-9]{19,}$')"
http POST /v1/events '{"ctype":"article","ktype":"like","content":43,"member":1,"id":"ev-1"}'
assert_http "event with an id" 200 '{"count":1}'
http POST /v1/events '{"ctype":"article","ktype":"like","content":43,"member":2,"id":"ev-1"}'
assert_http "retried event id" 200 '{"count":1}'
assert_eq "retried event id changed nothing" "1" "$(rcli tally.count article like 43)"
http POST /v1/events '{"ctype":"article","ktype":"nosuch","content":42,"member":7}'
assert_http_error "unknown counting type: 404" 404 "nosuch"
http POST /v1/events '[{"ctype":"article","ktype":"like","content":42,"member":50},{"ctype":"article","ktype":"nosuch","content":42,"member":7}]'
assert_http_error "array with an unknown type: 404, names the event" 404 "event 1"
assert_eq "a refused batch is refused whole" "(nil)" "$(rcn tally.has article like 42 50)"
http POST /v1/events '{"ctype":"article","ktype":"like","content":42'
assert_http_error "bad JSON: 400" 400 "invalid JSON"
http POST /v1/events 'not json at all'
assert_http_error "not JSON: 400" 400
http POST /v1/events '{"ctype":"article","ktype":"like","content":-1,"member":7}'
assert_http_error "negative content id: 400" 400 "content"
http POST /v1/events '{"ctype":"article","ktype":"like","content":"12a","member":7}'
assert_http_error "content id with letters: 400" 400 "content"
http POST /v1/events '{"ctype":"article","ktype":"like","content":"18446744073709551616","member":7}'
assert_http_error "content id 2^64: 400" 400 "content"
http POST /v1/events '{"ctype":"article","ktype":"like","content":1,"member":0}'
assert_http_error "member 0 on a unique type: 400" 400 "member"
http POST /v1/events '{"ctype":"article","ktype":"like","content":1,"member":3,"op":"toggle"}'
assert_http_error "bad op: 400" 400 "op"
http POST /v1/events '{"ctype":"bad ctype","ktype":"like","content":1,"member":3}'
assert_http_error "bad ctype name: 400" 400 "ctype"
http POST /v1/events '{"ktype":"like","content":1,"member":3}'
assert_http_error "missing ctype: 400" 400 "ctype"
http POST /v1/events '{"ctype":"article","ktype":"view","content":1,"delta":-2}'
assert_http_error "negative delta: 400" 400 "delta"
http POST /v1/events '{"ctype":"article","ktype":"view","content":1,"at":99999999999999}'
assert_http_error "at beyond 2100: 400" 400 "at"
http POST /v1/events '{"ctype":"article","ktype":"like","content":1,"member":3,"extra":1}'
assert_http_error "unknown field: 400" 400
http POST /v1/events '[1]'
assert_http_error "array of non-objects: 400" 400
big=$(printf '{"ctype":"article","ktype":"view","content":1},%.0s' $(seq 1001))
http POST /v1/events "[${big%,}]"
assert_http_error "over 1000 events: 400" 400 "1000"
# A body of many tiny values is refused before it is parsed: the parse
# takes a few hundred bytes per value (80 MB for this 1 MiB body).
python3 -c 'import sys; sys.stdout.write("[" + ",".join(["{}"] * 349000) + "]")' >"$TMP/tiny.json"
python3 -c 'import sys; sys.stdout.write("{" + ",".join("\"k%d\":0" % i for i in range(30000)) + "}")' >"$TMP/wide.json"
hwm0=$(awk '/^VmHWM/ {print $2}' "/proc/$T_PID/status")
for i in 1 2 3; do
	http POST /v1/events "" --data-binary "@$TMP/tiny.json" -H 'Content-Type: application/json'
done
assert_http_error "349,000 events in 1 MiB: 400 before the parse" 400 "at most 1000 events"
hwm1=$(awk '/^VmHWM/ {print $2}' "/proc/$T_PID/status")
assert_int_cmp "... and tallyd's peak memory grew by under 20 MB (KiB)" \
	"$((hwm1 - hwm0))" -lt 20000
http POST /v1/events "" --data-binary "@$TMP/wide.json" -H 'Content-Type: application/json'
assert_http_error "an object of 30,000 fields: 400" 400 "more than 24000 JSON values"
# Values are counted, not separators: 20,000 fields are 20,001 values,
# which the parser gets (and whose first unknown field it names).
python3 -c 'import sys; sys.stdout.write("{" + ",".join("\"k%d\":0" % i for i in range(20000)) + "}")' >"$TMP/wide20.json"
http POST /v1/events "" --data-binary "@$TMP/wide20.json" -H 'Content-Type: application/json'
assert_http_error "an object of 20,000 fields is parsed" 400 "unknown field"
http POST /v1/counters/big/incr "" --data-binary "@$TMP/tiny.json" -H 'Content-Type: application/json'
assert_http_error "a large array to /incr is not called events" 400 "more than 24000 JSON values"
http POST /v1/events '[]'
assert_http "an empty array" 200 '{"counts":[]}'
assert_eq "refused events changed nothing" "0" "$(rcli tally.count article view 1)"

section "objects"
http GET /v1/objects/article/42
assert_http "all counts" 200 '{"ctype":"article","content":42,"counts":{"like":2,'
assert_contains "all counts has view" "$HTTP_BODY" '"view":3'
assert_contains "all counts has every type" "$HTTP_BODY" '"taste":0'
http GET /v1/objects/article/18446744073709551615
assert_http "content beyond 2^53 comes back as a string" 200 '"content":"18446744073709551615"'
http GET /v1/objects/article/42/like
assert_http "one count" 200 '{"count":2}'
http GET /v1/objects/article/4242/like
assert_http "one count, object with no events" 200 '{"count":0}'
rcli tally.add post like 1 101 AT 1700000000000 >/dev/null
rcli tally.add post like 1 102 AT 1700000100000 >/dev/null
if on_cluster; then
	http GET "/v1/objects/post/1/like?at=1700000050000"
	assert_http_error "count ?at= is refused on the cluster store: 501" 501 \
		"not supported by this store"
	# an expected refusal, not one of the 5xx the last check looks for
	[ "$HTTP_CODE" == 501 ] && HTTP_5XX=$((HTTP_5XX - 1))
else
	http GET "/v1/objects/post/1/like?at=1700000050000"
	assert_http "count ?at=" 200 '{"count":1}'
	http GET "/v1/objects/post/1/like?at=1699999999999"
	assert_http "count ?at= before any event" 200 '{"count":0}'
fi
http GET "/v1/objects/post/1/like?at=abc"
assert_http_error "?at=abc: 400" 400 "at"
http GET /v1/objects/article/42/nosuch
assert_http_error "unknown type: 404" 404 "nosuch"
http GET /v1/objects/article/abc/like
assert_http_error "bad content id: 400" 400 "content"
http GET /v1/objects/article/-5
assert_http_error "negative content id: 400" 400 "content"
http GET /v1/objects/article/99999999999999999999999
assert_http_error "content id past u64: 400" 400 "content"

section "recent, paging"
for m in 1 2 3 4 5; do rcli tally.add clip like 9 "$m" >/dev/null; done
rcli tally.remove clip like 9 2 >/dev/null
http GET "/v1/objects/clip/9/like/recent?limit=2"
assert_http "recent limit=2" 200 '"entries":[{"member":2,'
assert_match "recent: newest first (remove 2, then add 5)" \
	'^\{"entries":\[\{"member":2,"at":[0-9]+,"op":"remove","delta":1,"seq":[0-9]+\},\{"member":5,"at":[0-9]+,"op":"add","delta":1,"seq":[0-9]+\}\],"next_before":[0-9]+\}$' \
	"$HTTP_BODY"
next=$(sed -E 's/.*"next_before":([0-9]+).*/\1/' <<<"$HTTP_BODY")
last_seq=$(sed -E 's/.*"seq":([0-9]+)\}\].*/\1/' <<<"$HTTP_BODY")
assert_eq "next_before is the last entry's seq" "$last_seq" "$next"
members=""
pages=1
while [ "$next" != "null" ] && [ $pages -lt 10 ]; do
	http GET "/v1/objects/clip/9/like/recent?limit=2&before=$next"
	for m in $(grep -oE '"member":[0-9]+' <<<"$HTTP_BODY" | cut -d: -f2 || true); do
		members+="$m "
	done
	next=$(sed -E 's/.*"next_before":(null|[0-9]+).*/\1/' <<<"$HTTP_BODY")
	pages=$((pages + 1))
done
assert_eq "paging with before= walks every older event once" "4 3 2 1 " "$members"
# 6 events, pages of 2: three full pages; a full page may have more, so
# next_before is set on the third and the fourth is empty with null.
assert_eq "pages of 2 over 6 events (the last one empty)" "4" "$pages"
http GET "/v1/objects/clip/9/like/recent"
assert_eq "default page has every event here" "6" "$(grep -o '"member"' <<<"$HTTP_BODY" | wc -l)"
assert_contains "a last page has next_before null" "$HTTP_BODY" '"next_before":null'
http GET "/v1/objects/clip/9/like/recent?limit=0"
assert_http_error "limit=0: 400" 400 "limit"
http GET "/v1/objects/clip/9/like/recent?limit=1001"
assert_http_error "limit=1001: 400" 400 "limit"
http GET "/v1/objects/clip/9/like/recent?before=x"
assert_http_error "before=x: 400" 400 "before"
http GET "/v1/objects/clip/9/like/recent?limit=&before="
assert_eq "empty limit= and before= (README's form of the route): the defaults" \
	"200 6" "$HTTP_CODE $(grep -o '"member"' <<<"$HTTP_BODY" | wc -l)"

section "members"
http GET /v1/objects/clip/9/like/members/3
assert_match "member in: 200 with its time" '^\{"member":3,"at":[0-9]+\}$' "$HTTP_BODY"
assert_eq "member in: status" "200" "$HTTP_CODE"
http GET /v1/objects/clip/9/like/members/2
assert_http_error "member removed: 404" 404
http GET /v1/objects/clip/9/like/members/999
assert_http_error "member never in: 404" 404
http GET /v1/objects/clip/9/like/members/x
assert_http_error "bad member id: 400" 400 "member"
http GET /v1/objects/article/42/view/members/1
assert_http_error "membership of a total type: 400" 400 "total"
http GET /v1/objects/clip/9/like/members/0
assert_http_error "membership of member 0: 400, saying why" 400 \
	"member must be non-zero (0 is anonymous)"
http GET "/v1/objects/bad%20name/9"
assert_http_error "a bad ctype name: 400, saying why" 400 \
	"ctype must be 1..64 bytes of [A-Za-z0-9_.:-]"
http GET "/v1/objects/clip/9/bad%20type"
assert_http_error "a bad ktype name: 400, saying why" 400 \
	"ktype must be 1..64 bytes of [A-Za-z0-9_.:-]"

section "member history"
rcli tally.add video like 5 3 >/dev/null
http GET "/v1/members/3/like"
assert_match "history: newest first, across objects" \
	'^\{"entries":\[\{"ctype":"video","content":5,"at":[0-9]+,"op":"add","delta":1,"seq":[0-9]+\},\{"ctype":"clip","content":9,' \
	"$HTTP_BODY"
http GET "/v1/members/3/like?limit=1"
assert_match "history limit=1 has next_before" '"next_before":[0-9]+\}$' "$HTTP_BODY"
next=$(sed -E 's/.*"next_before":([0-9]+).*/\1/' <<<"$HTTP_BODY")
http GET "/v1/members/3/like?limit=1&before=$next"
assert_match "history page 2" '^\{"entries":\[\{"ctype":"clip","content":9,' "$HTTP_BODY"
http GET "/v1/members/0/like"
assert_http_error "member 0: 400" 400 "member"
http GET "/v1/members/abc/like"
assert_http_error "bad member id: 400" 400 "member"
http GET "/v1/members/3/nosuch"
assert_http_error "unknown type: 404" 404 "nosuch"

section "unknown routes and methods"
http GET /nope
assert_http_error "unknown route: 404" 404
http GET /v1/objects
assert_http_error "partial route: 404" 404
http GET /v1/objects/a/1/like/recent/extra
assert_http_error "route with extra segment: 404" 404
http DELETE /v1/counters/hits
assert_http_error "wrong method on a known path: 405" 405
http POST /healthz '{}'
assert_http_error "POST /healthz: 405" 405
hdr=$(curl -s -i -X DELETE "http://127.0.0.1:$T_HTTP/healthz" -H "Authorization: Bearer ${T_PASS:-none}" | tr -d '\r')
assert_contains "a 405 names the methods the path takes" "$hdr" "Allow: GET, HEAD"
hdr=$(curl -s -i -X GET "http://127.0.0.1:$T_HTTP/v1/events" -H "Authorization: Bearer ${T_PASS:-none}" | tr -d '\r')
assert_contains "... POST for /v1/events" "$hdr" "Allow: POST"
hdr=$(curl -s -i -X DELETE "http://127.0.0.1:$T_HTTP/v1/counters/a/incr" -H "Authorization: Bearer ${T_PASS:-none}" | tr -d '\r')
assert_contains "... GET, HEAD and POST where a counter named x/incr meets POST x/incr" "$hdr" "Allow: GET, HEAD, POST"
head_out=$(curl -s -I "http://127.0.0.1:$T_HTTP/healthz" | tr -d '\r')
assert_match "HEAD /healthz: 200 with the GET's length, no body" \
	'^HTTP/1.1 200 OK.*Content-Length: 15' "$(paste -sd' ' <<<"$head_out")"
# Pipelined: had the HEAD's answer carried a body, the GET after it on the
# same connection would be read out of step.
raw=$(printf 'HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' |
	timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; cat >&3; cat <&3' _ "$T_HTTP" | tr -d '\r' | paste -sd'|')
assert_match "HEAD then GET on one connection: one body, the GET's" \
	'^HTTP/1.1 200 OK\|[^{]*\|\|HTTP/1.1 200 OK\|.*\|\|\{"status":"ok"\}$' "$raw"

section "malformed HTTP"
resp=$(raw_resp "$T_HTTP" 'GARBAGE\r\n\r\n')
assert_match "a non-HTTP request gets a 4xx and a close" '^HTTP/1\.1 4[0-9][0-9] .*<EOF>$' "$resp"
resp=$(raw_resp "$T_HTTP" 'POST /v1/counters/te/incr HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n')
assert_match "a transfer coding other than chunked: 501 and a close" \
	'^HTTP/1\.1 501 .*only the chunked transfer coding.*<EOF>$' "$resp"
resp=$(raw_resp "$T_HTTP" 'HEAD /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n')
assert_match "a HEAD refused by the parser: 501 without a body (it had one)" \
	'^HTTP/1\.1 501 .*\\r\\n\\r\\n<EOF>$' "$resp"
resp=$(raw_resp "$T_HTTP" 'POST /v1/counters/te/incr HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n')
assert_match "two Transfer-Encoding fields: 501" '^HTTP/1\.1 501 ' "$resp"
resp=$(raw_resp "$T_HTTP" 'POST /v1/counters/te/incr HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n')
assert_match "Transfer-Encoding in HTTP/1.0: 400" '^HTTP/1\.1 400 .*HTTP/1\.0' "$resp"
resp=$(raw_resp "$T_HTTP" 'GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n')
assert_match "an HTTP/2.0 request line: 505" '^HTTP/1\.1 505 ' "$resp"
resp=$(raw_resp "$T_HTTP" 'GET /healthz HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n')
assert_match "a later HTTP/1.x is served as 1.1" '^HTTP/1\.1 200 ' "$resp"
resp=$(raw_resp "$T_HTTP" 'BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
assert_match "an undefined method (BREW): 400" '^HTTP/1\.1 400 ' "$resp"
resp=$(raw_resp "$T_HTTP" 'POST /v1/counters/te/incr HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked \r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n')
assert_match "chunked in any case, with spaces around it: taken" '^HTTP/1\.1 200 .*"name":"te"' "$resp"
resp=$(raw_resp "$T_HTTP" "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n{}")
assert_match "a body over the limit is refused with 413" '^HTTP/1\.1 413 ' "$resp"
hdr=$(head -c 20000 /dev/zero | tr '\0' a)
resp=$(raw_resp "$T_HTTP" "GET /healthz HTTP/1.1\r\nX-Big: $hdr\r\n\r\n")
# tallyd answers and closes at once; when it had not read the whole
# request, the kernel resets the connection and the answer can be lost.
assert_match "headers over the limit: 431/400 and a close (or a reset)" \
	'^(HTTP/1\.1 (431|400) .*)?<EOF>$' "$resp"
resp=$(raw_resp "$T_HTTP" "GET /v1/counters/$hdr HTTP/1.1\r\nHost: x\r\n\r\n")
assert_match "a URL over the header limit: 414 URI Too Long" '^HTTP/1\.1 414 ' "$resp"
resp=$(raw_resp "$T_HTTP" "GET /healthz HTTP/1.0\r\n\r\n")
assert_match "HTTP/1.0 without keep-alive: answered and closed" '^HTTP/1\.[01] 200 .*\{"status":"ok"\}<EOF>$' "$resp"
resp=$(raw_resp "$T_HTTP" "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/counters/hits HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
assert_match "two pipelined requests answered in order, then closed" \
	'^HTTP/1\.1 200 .*\{"status":"ok"\}HTTP/1\.1 200 .*"value":11\}<EOF>$' "$resp"

section "Expect: 100-continue"
# A client that waits for "100 Continue" before its body must get it: curl
# would wait 30 s here, past its 10 s limit, if tallyd said nothing.
got=$(curl -s --max-time 10 --expect100-timeout 30 -H 'Expect: 100-continue' \
	-H 'Content-Type: application/json' -d '{"by":5}' "$H/v1/counters/cont/incr")
assert_eq "curl with Expect: 100-continue is answered" '{"name":"cont","value":5}' "$got"
# By hand: the interim answer comes before the body is sent, and the final
# one after it.
got=$(timeout 10 bash -c '
	exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 9
	printf "POST /v1/counters/cont/incr HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 8\r\nConnection: close\r\n\r\n" >&3
	IFS= read -r -t 5 line <&3 || { echo "no interim answer"; exit 0; }
	IFS= read -r -t 5 blank <&3
	printf "%s|%s|" "$line" "$blank"
	printf "{\"by\":2}" >&3
	cat <&3' _ "$T_HTTP" | tr -d '\r' | paste -sd'|')
assert_match "100 Continue before the body, then the answer" \
	'^HTTP/1\.1 100 Continue\|\|HTTP/1\.1 200 OK\|.*\{"name":"cont","value":7\}$' "$got"

section "pipelined writes and reads: in order, each read sees the writes before it"
# 100 x (incr, get), then 200 gets (past the 128 requests a connection is
# answered before the loop turns to its other clients), then a get that
# closes. Reads are answered at once, writes once committed.
req=""
for ((i = 0; i < 100; i++)); do
	req+="POST /v1/counters/piped/incr HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
	req+="GET /v1/counters/piped HTTP/1.1\r\nHost: x\r\n\r\n"
done
for ((i = 0; i < 200; i++)); do
	req+="GET /v1/counters/piped HTTP/1.1\r\nHost: x\r\n\r\n"
done
req+="GET /v1/counters/piped HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
resp=$(raw_resp "$T_HTTP" "$req" 20)
want=$( (for ((i = 1; i <= 100; i++)); do echo "$i"; echo "$i"; done
	for ((i = 0; i <= 200; i++)); do echo 100; done) | paste -sd' ')
got=$(grep -o '"value":[0-9]*' <<<"$resp" | cut -d: -f2 | paste -sd' ')
assert_eq "401 pipelined answers in order, each read after its write" "$want" "$got"
assert_match "then closed" '<EOF>$' "$resp"

section "a client gone before its writes are answered"
# 1000 events, and the connection closed as soon as they are sent: the
# writes still land, and the answer to nobody is dropped.
body="[$(for ((i = 1; i <= 1000; i++)); do printf '{"ctype":"gone","ktype":"view","content":1,"member":%d}' "$i"; if [ $i -lt 1000 ]; then printf ','; fi; done)]"
timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" "${#2}" "$2" >&3; exec 3>&-' _ "$T_HTTP" "$body"
got=""
for ((i = 0; i < 100; i++)); do
	got=$(curl -s --max-time 5 "$H/v1/objects/gone/1/view")
	[ "$got" = '{"count":1000}' ] && break
	sleep 0.1
done
assert_eq "every write of the gone client landed" '{"count":1000}' "$got"
assert_eq "tallyd still answers" '{"status":"ok"}' "$(curl -s --max-time 5 "$H/healthz")"

section "chunked request bodies"
crc=0
body=$(curl -s --max-time 10 -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' \
	-X POST --data-binary '{"ctype":"chunk","ktype":"like","content":1,"member":1}' \
	"$H/v1/events") || crc=$?
assert_eq "POST /v1/events with a chunked body" '{"count":1}' "$body"

section "200 connections of random bytes"
# Each starts with a byte no method may hold, so the server must answer 400
# and close: `cat` ending by itself (not by its timeout) shows it did. The
# bounds are wide because 200 shells start at once on a loaded machine.
for ((i = 0; i < 200; i++)); do
	{ printf '\001'; head -c $((RANDOM % 4096)) /dev/urandom; } >"$TMP/garbage.$i"
done
gpids=()
for ((i = 0; i < 200; i++)); do
	timeout 60 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 0
		cat "$2" >&3 2>/dev/null
		timeout 30 cat <&3 >/dev/null 2>&1
		rc=$?
		[ "$rc" -eq 124 ] && exit 124
		exit 0' _ "$T_HTTP" "$TMP/garbage.$i" &
	gpids+=($!)
done
grc=0
for pid in "${gpids[@]}"; do wait "$pid" || grc=$?; done
assert_eq "every garbage connection was answered and closed by the server" "0" "$grc"
assert_alive "tallyd survived the garbage"
http GET /v1/counters/hits
assert_http "and still answers" 200 '"value":11'

section "/metrics"
metrics=$(curl -s --max-time 10 "$H/metrics")
ct=$(curl -s -o /dev/null -w '%{content_type}' --max-time 10 "$H/metrics")
assert_contains "metrics content type is Prometheus text" "$ct" "text/plain"
assert_match "has tally_writes_total" $'(^|\n)tally_writes_total [0-9]+(\n|$)' "$metrics"
assert_contains "has TYPE line for writes" "$metrics" "# TYPE tally_writes_total counter"
assert_match "has tally_fsync_seconds_bucket" $'(^|\n)tally_fsync_seconds_bucket\\{le="[0-9.e+-]+"\\} [0-9]+' "$metrics"
assert_contains "histogram has +Inf bucket" "$metrics" 'tally_fsync_seconds_bucket{le="+Inf"}'
assert_contains "histogram has _count" "$metrics" "tally_fsync_seconds_count "
assert_contains "histogram has _sum" "$metrics" "tally_fsync_seconds_sum "
# Every line is a comment or `name{labels} value` (Prometheus text format).
badlines=$(grep -vE '^(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+|[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? -?[0-9.e+Inf-]+)$' <<<"$metrics" || true)
assert_eq "every /metrics line is valid exposition format" "" "$badlines"
# histogram buckets are cumulative
nondecr=$(grep '^tally_fsync_seconds_bucket' <<<"$metrics" | awk '{ if ($2 < prev) bad = 1; prev = $2 } END { print bad + 0 }')
assert_eq "fsync buckets are cumulative" "0" "$nondecr"
w0=$(metric tally_writes_total)
rcli incr m1 >/dev/null
rcli incr m1 >/dev/null
http POST /v1/counters/m1/incr '{"by":1}'
w1=$(metric tally_writes_total)
assert_eq "tally_writes_total counts acknowledged writes (3 more)" "$((w0 + 3))" "$w1"

section "keep-alive: two requests, one connection"
c0=$(metric tally_connections_total)
ka=$(curl -s --max-time 10 -w '\n%{num_connects}\n' "$H/healthz" "$H/v1/counters/hits")
c1=$(metric tally_connections_total)
assert_eq "curl reused its connection (num_connects 1 then 0)" \
	$'{"status":"ok"}\n1\n{"name":"hits","value":11}\n0' "$ka"
# c0 and c1 are two scrapes (one connection each): the pair of requests
# added exactly one.
assert_eq "tally_connections_total grew by 2 (one for both requests, one scrape)" \
	"$((c0 + 2))" "$c1"
c2=$(metric tally_connections_total)
curl -s --max-time 10 -o /dev/null -H 'Connection: close' "$H/healthz" -o /dev/null "$H/healthz"
c3=$(metric tally_connections_total)
assert_eq "with Connection: close the server closes: two connections" "$((c2 + 3))" "$c3"

section "no 5xx for any input above"
assert_eq "no request above was answered with a 5xx" "0" "$HTTP_5XX"
assert_alive
stop_and_check

section "a large body's buffers leave with its request"
# 20 keep-alive connections each send a 1 MB body, get their answer and
# stay open: tallyd lets the buffers go once each request is answered
# (they stayed, 2 MiB or more per connection, for the connection's life).
# A fresh tallyd, whose memory no earlier request has grown; under ASan
# without its quarantine, which would keep the freed buffers as RSS.
saved_asan=${ASAN_OPTIONS-}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
start_tallyd "$TMP/bigbody"
export ASAN_OPTIONS="$saved_asan"
rcli tally.type add view total >/dev/null
python3 -c 'import sys; sys.stdout.write(" " * 1000000 + "{\"ctype\":\"article\",\"ktype\":\"view\",\"content\":77}")' >"$TMP/large.json"
len=$(stat -c %s "$TMP/large.json")
auth=""
[ -n "$T_PASS" ] && auth="Authorization: Bearer $T_PASS"$'\r\n'
rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$T_PID/status")
big_fds=()
answered=0
for ((i = 0; i < 20; i++)); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$T_HTTP"
	{
		printf 'POST /v1/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n' "$len" "$auth"
		cat "$TMP/large.json"
	} >&"$fd"
	line=""
	IFS= read -r -t 20 line <&"$fd" || true
	[[ "$line" == "HTTP/1.1 200"* ]] && answered=$((answered + 1))
	big_fds+=("$fd")
done
rss1=$(awk '/^VmRSS/ {print $2}' "/proc/$T_PID/status")
assert_eq "20 bodies of 1 MB answered 200" "20" "$answered"
assert_int_cmp "... and tallyd holds under 8 MB more with their connections open (KiB)" \
	"$((rss1 - rss0))" -lt 8000
for fd in "${big_fds[@]}"; do exec {fd}>&-; done
assert_eq "... each counted" "20" "$(rcli tally.count article view 77)"
stop_and_check
finish
