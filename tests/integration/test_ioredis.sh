#!/usr/bin/env bash
# ioredis (a Node Redis client, installed from the npm registry with the
# lock file in node/) against a real tallyd. No registry means a failed
# test, never a skipped one.
set -euo pipefail
source "$(dirname "$0")/lib.sh" "$@"
need_cmd node npm

NODE_DIR=$IT_DIR/node

section "npm ci (ioredis, pinned by node/package-lock.json)"
say "node $(node --version), npm $(npm --version 2>/dev/null)"
rc=0
(cd "$NODE_DIR" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) \
	>"$TMP/npm.log" 2>&1 || rc=$?
grep -v 'Unknown user config' "$TMP/npm.log" || true
assert_eq "npm ci installs the Node client (needs the npm registry)" "0" "$rc"
[ $rc -eq 0 ] || finish
assert_ok "ioredis is installed" test -f "$NODE_DIR/node_modules/ioredis/package.json"
say "ioredis $(node -p "require('$NODE_DIR/node_modules/ioredis/package.json').version")"

start_tallyd "$TMP/data"
say "tallyd pid $T_PID, RESP $T_RESP"

section "ioredis_test.js"
rc=0
timeout 120 node "$NODE_DIR/ioredis_test.js" "$T_RESP" "$TEST_STORE" >"$TMP/node.out" 2>&1 || rc=$?
while IFS= read -r line; do
	case "$line" in
	"ok   "*) pass "ioredis: ${line#ok   }" ;;
	"FAIL "*) fail "ioredis: ${line#FAIL }" ;;
	*"passed, "*"failed"*) ;;   # the script's own summary: ours follows
	*) say "$line" ;;
	esac
done <"$TMP/node.out"
assert_eq "ioredis_test.js exits 0" "0" "$rc"
assert_int_cmp "ioredis_test.js ran its checks" "$PASS" -ge 20

section "what the client did, as tallyd saw it"
calls=$(metric 'tally_command_calls_total{cmd="info"}')
assert_int_cmp "ioredis's ready check sent INFO" "${calls:-0}" -ge 1
assert_eq "the data is there for other clients" "(integer) 999" \
	"$(rcn tally.count article like 1)"
assert_alive
stop_and_check
finish
