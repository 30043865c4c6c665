# lib.sh: shared helpers of the integration tests (sourced, not run).
#
#   source "$(dirname "$0")/lib.sh" "$@"     # $1 is the build folder
#
# TALLY_TEST_STORE=redis-cluster (default rocksdb) runs the script against
# the redis-cluster store: a 6-node Redis Cluster is started once for the
# script (tests/cluster/lib_cluster.sh) and every tallyd is given
# --store redis-cluster; a start on a data folder that does not exist yet
# empties the cluster first, as a fresh folder would be an empty store.
# on_cluster tells a script which store it runs against.
#
# Gives: a private temp folder ($TMP, removed at exit), a trap that kills
# every tallyd and background helper the script started (by pid, nothing
# else), tallyd start/stop on free loopback ports, client wrappers with
# bounded time, and assertions that count passes and failures. A script
# ends with `finish`, which prints "N passed, M failed" and exits non-zero
# on any failure. A script that dies early (set -e) still prints the
# summary, with the abort counted as a failure.
set -Eeuo pipefail
# CI runs with no standard input: no client may wait on it.
exec </dev/null

if [ $# -lt 1 ] || [ ! -d "$1" ]; then
	echo "usage: bash $(basename "$0") BUILD_DIR" >&2
	exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
TALLY_LIB_SH=1
TEST_STORE=${TALLY_TEST_STORE:-rocksdb}
case "$TEST_STORE" in
rocksdb | redis-cluster) ;;
*)
	echo "TALLY_TEST_STORE is rocksdb or redis-cluster, not '$TEST_STORE'" >&2
	exit 2
	;;
esac
on_cluster() { [ "$TEST_STORE" == redis-cluster ]; }
STORE_ARGS=()    # what start_tallyd adds to select the store
TALLYD=$BUILD_DIR/tallyd
IT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

PASS=0
FAIL=0
FINISHED=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tally-it.XXXXXX")
TALLYD_PIDS=()   # every tallyd this script started
BG_PIDS=()       # other background helpers (load generators ...)
ERR_LINE=""
ERR_CMD=""

# ---- reporting ---------------------------------------------------------------

say() { printf '%s\n' "$*"; }
section() { printf '\n== %s\n' "$*"; }

# Long values are cut in failure messages so a log stays readable.
_show() {
	local s=$1
	if [ ${#s} -gt 600 ]; then
		s="${s:0:600}... (${#1} bytes)"
	fi
	printf '%s' "$s"
}

pass() {
	PASS=$((PASS + 1))
	say "ok   $*"
}

fail() {
	FAIL=$((FAIL + 1))
	say "FAIL $1"
	shift
	local line
	for line in "$@"; do
		say "       $(_show "$line")"
	done
}

assert_eq() { # DESC EXPECTED ACTUAL
	if [ "$2" == "$3" ]; then
		pass "$1"
	else
		fail "$1" "expected: $2" "actual:   $3"
	fi
}

assert_ne() { # DESC UNEXPECTED ACTUAL
	if [ "$2" != "$3" ]; then
		pass "$1"
	else
		fail "$1" "did not expect: $2"
	fi
}

assert_contains() { # DESC HAYSTACK NEEDLE
	if [[ "$2" == *"$3"* ]]; then
		pass "$1"
	else
		fail "$1" "expected to contain: $3" "actual: $2"
	fi
}

assert_not_contains() { # DESC HAYSTACK NEEDLE
	if [[ "$2" != *"$3"* ]]; then
		pass "$1"
	else
		fail "$1" "expected not to contain: $3" "actual: $2"
	fi
}

assert_match() { # DESC ERE ACTUAL
	if [[ "$3" =~ $2 ]]; then
		pass "$1"
	else
		fail "$1" "expected to match: $2" "actual: $3"
	fi
}

assert_int_cmp() { # DESC A OP B   (OP: -eq -ne -lt -le -gt -ge)
	if [[ "$2" =~ ^-?[0-9]+$ && "$4" =~ ^-?[0-9]+$ ]] && [ "$2" "$3" "$4" ]; then
		pass "$1"
	else
		fail "$1" "expected: $2 $3 $4"
	fi
}

assert_ok() { # DESC CMD...: the command exits 0
	local desc=$1 out rc=0
	shift
	out=$("$@" 2>&1) || rc=$?
	if [ $rc -eq 0 ]; then
		pass "$desc"
	else
		fail "$desc" "command failed (exit $rc): $*" "$out"
	fi
}

finish() {
	FINISHED=1
	say ""
	say "$PASS passed, $FAIL failed"
	if [ "$FAIL" -eq 0 ]; then
		exit 0
	fi
	exit 1
}

# ---- cleanup ------------------------------------------------------------------

_kill_pid() { # PID: SIGKILL one process we started, and reap it
	local pid=$1
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	{ wait "$pid"; } 2>/dev/null || true
}

_on_exit() {
	local rc=$?
	set +e
	trap - ERR
	local pid
	for pid in "${BG_PIDS[@]}"; do
		[ -n "$pid" ] && _kill_pid "$pid"
	done
	for pid in "${TALLYD_PIDS[@]}"; do
		[ -n "$pid" ] && _kill_pid "$pid"
	done
	if [ "$FINISHED" -eq 0 ]; then
		FAIL=$((FAIL + 1))
		say "FAIL script aborted (exit $rc) at line ${ERR_LINE:-?}: ${ERR_CMD:-?}"
		for f in "$TMP"/tallyd.*.log; do
			[ -f "$f" ] || continue
			say "--- tail of $f"
			tail -n 20 "$f"
		done
		say ""
		say "$PASS passed, $FAIL failed"
		rm -rf "$TMP"
		exit 1
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap 'ERR_LINE=$LINENO; ERR_CMD=$BASH_COMMAND' ERR
trap _on_exit EXIT
trap 'exit 130' INT TERM

need_cmd() { # NAME...: a missing tool fails the test (never a skip)
	local c
	for c in "$@"; do
		if ! command -v "$c" >/dev/null 2>&1; then
			fail "tool '$c' is installed (scripts/deps.sh installs it)"
			finish
		fi
	done
}

[ -x "$TALLYD" ] || { fail "tallyd is built at $TALLYD"; finish; }
need_cmd timeout perl

# ---- ports --------------------------------------------------------------------

PICKED_PORTS=" "

# Whether any socket (listening or connected, IPv4 or IPv6) uses the port
# locally or remotely: /proc/net/tcp* hold ports as 4 hex digits.
port_busy() {
	local hex
	hex=$(printf ':%04X ' "$1")
	grep -qi -- "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# A free port below the kernel's ephemeral range (so no outgoing
# connection can hold it), never one this script picked before. tallyd
# binds with SO_REUSEPORT, so a port in use by another tallyd of the same
# user would be shared silently: free means no socket at all uses it, and
# start_tallyd then checks that the RESP port answers with its own pid.
pick_port() {
	local lo=20000 hi=32000 eph p i
	eph=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	[ "$eph" -gt 21000 ] && hi=$((eph - 1))
	for ((i = 0; i < 500; i++)); do
		p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
		[[ "$PICKED_PORTS" == *" $p "* ]] && continue
		port_busy "$p" && continue
		PICKED_PORTS+="$p "
		echo "$p"
		return 0
	done
	echo "pick_port: no free port found" >&2
	return 1
}

# ---- tallyd -----------------------------------------------------------------

T_PID=""
T_RESP=""
T_HTTP=""
T_LOG=""
T_DATA=""
T_PASS=""        # set before start_tallyd to run with --requirepass
T_EXIT=""        # exit code of the last stop_tallyd / kill9_tallyd
T_STARTS=0

# redis-cli against the current tallyd, bounded in time; never fails (its
# output tells). Raw output (what redis-cli prints when piped).
rcli() {
	timeout 20 redis-cli -p "$T_RESP" ${T_PASS:+-a "$T_PASS" --no-auth-warning} "$@" 2>&1 || true
}
# The same with redis-cli's typed output: (integer) 1, "x", (nil), (error).
rcn() {
	timeout 20 redis-cli --no-raw -p "$T_RESP" ${T_PASS:+-a "$T_PASS" --no-auth-warning} "$@" 2>&1 || true
}

_ready() {
	local info
	info=$(timeout 3 redis-cli -p "$T_RESP" ${T_PASS:+-a "$T_PASS" --no-auth-warning} \
	       info server 2>/dev/null) || return 1
	[[ "$info" == *"process_id:$T_PID"* ]] || return 1
	timeout 3 curl -s -f -o /dev/null "http://127.0.0.1:$T_HTTP/healthz" || return 1
}

# _store_check FLAG...: the tallyd just started serves the store this run
# is about (unless the script chose one in FLAG...).
_store_check() {
	local want=rocksdb
	on_cluster && want=redis-cluster
	[[ " $* " == *" --store "* ]] && return 0
	if [[ "$(rcli info server)" != *"store:$want"* ]]; then
		fail "tallyd $T_PID serves the $want store (INFO server)"
	fi
}

# start_tallyd DATA_DIR [FLAG...]: start tallyd on two free loopback ports
# and wait (bounded) until both answer. Sets T_PID T_RESP T_HTTP T_LOG.
start_tallyd() {
	local data=$1 try deadline
	shift
	T_DATA=$data
	if on_cluster && [ ! -d "$data" ]; then
		cluster_flush || return 1
		mkdir -p "$data"
	fi
	for try in 1 2 3 4 5; do
		T_RESP=$(pick_port)
		T_HTTP=$(pick_port)
		T_STARTS=$((T_STARTS + 1))
		T_LOG=$TMP/tallyd.$T_STARTS.log
		"$TALLYD" --data "$data" --bind 127.0.0.1 --resp-port "$T_RESP" \
			--http-port "$T_HTTP" --threads 2 \
			${T_PASS:+--requirepass "$T_PASS"} "${STORE_ARGS[@]}" "$@" \
			>"$T_LOG" 2>&1 &
		T_PID=$!
		TALLYD_PIDS+=("$T_PID")
		deadline=$((SECONDS + 30))
		while [ $SECONDS -lt $deadline ]; do
			if ! kill -0 "$T_PID" 2>/dev/null; then
				break
			fi
			if _ready; then
				_store_check "$@"
				return 0
			fi
			sleep 0.1
		done
		_kill_pid "$T_PID"
		if grep -q 'cannot listen' "$T_LOG"; then
			say "(port clash on $T_RESP/$T_HTTP, trying others)"
			continue
		fi
		say "tallyd did not come up; its log:"
		cat "$T_LOG"
		return 1
	done
	return 1
}

_forget_pid() {
	local i
	for i in "${!TALLYD_PIDS[@]}"; do
		[ "${TALLYD_PIDS[$i]}" == "$1" ] && unset 'TALLYD_PIDS[i]'
	done
	return 0
}

# report FILE: a driver's "ok ..." / "FAIL ..." lines become assertions;
# other lines are printed.
report() {
	local line
	while IFS= read -r line; do
		case "$line" in
		"ok   "*) pass "${line#ok   }" ;;
		"FAIL "*) fail "${line#FAIL }" ;;
		*) say "$line" ;;
		esac
	done <"$1"
}

# _gone_within PID SECONDS: 0 once PID has ended, 1 if it still runs
# after SECONDS.
_gone_within() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	! kill -0 "$1" 2>/dev/null
}

# wait_bg PID SECONDS FAILURE: wait (bounded) for a background helper to
# end; past SECONDS it fails with FAILURE and is killed. WAIT_RC gets its
# exit code.
wait_bg() {
	local pid=$1
	if ! _gone_within "$pid" "$2"; then
		fail "$3"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	WAIT_RC=0
	wait "$pid" || WAIT_RC=$?
}

# stop_tallyd [SIGNAL]: SIGTERM (default) and wait up to 30 s for a clean
# exit; SIGKILL past that. T_EXIT gets the exit code (137 when killed).
stop_tallyd() {
	local sig=${1:-TERM}
	T_EXIT=""
	[ -n "$T_PID" ] || return 0
	kill -"$sig" "$T_PID" 2>/dev/null || true
	if ! _gone_within "$T_PID" 30; then
		say "tallyd $T_PID did not exit within 30 s of SIG$sig: SIGKILL"
		kill -KILL "$T_PID" 2>/dev/null || true
	fi
	T_EXIT=0
	{ wait "$T_PID"; } 2>/dev/null || T_EXIT=$?
	_forget_pid "$T_PID"
	T_PID=""
}

kill9_tallyd() {
	stop_tallyd KILL
}

# The log of the running (or last) tallyd holds no sanitizer report.
assert_log_clean() {
	local desc=${1:-"tallyd log has no sanitizer report"}
	if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:|Assertion .* failed' "$T_LOG"; then
		fail "$desc" "$(grep -m3 -E 'AddressSanitizer|LeakSanitizer|runtime error:|Assertion' "$T_LOG")"
	else
		pass "$desc"
	fi
}

assert_alive() {
	if [ -n "$T_PID" ] && kill -0 "$T_PID" 2>/dev/null; then
		pass "${1:-tallyd is still running}"
	else
		fail "${1:-tallyd is still running}" "$(tail -n 20 "$T_LOG" 2>/dev/null)"
	fi
}

# A reference redis-server (no persistence) on a free loopback port, for
# tests that compare with Redis or drive it: sets RS_PORT and RS_PID (killed
# at exit like every helper). Waits until it answers PING, up to 10 s; the
# caller asserts that it does.
start_ref_redis() {
	RS_PORT=$(pick_port)
	redis-server --port "$RS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize no --dir "$TMP" >"$TMP/redis-server.log" 2>&1 &
	RS_PID=$!
	BG_PIDS+=("$RS_PID")
	for _ in $(seq 100); do
		[ "$(timeout 2 redis-cli -p "$RS_PORT" ping 2>/dev/null)" == PONG ] && break
		sleep 0.1
	done
}

# SIGTERM, then: exit 0 and a clean log.
stop_and_check() {
	stop_tallyd TERM
	assert_eq "tallyd exits 0 on SIGTERM" "0" "$T_EXIT"
	assert_log_clean
}

# ---- raw bytes -----------------------------------------------------------------

# raw_resp PORT PRINTF_FORMAT [WAIT_S]: send the bytes (printf %b escapes:
# \r \n \xHH), then read until the server closes or WAIT_S (default 3)
# seconds pass. Prints the reply with CR and LF shown as \r and \n, and a
# final <EOF> when the server closed the connection.
raw_resp() {
	local port=$1 data=$2 wait_s=${3:-3} out rc=0
	out=$(timeout "$((wait_s + 2))" bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 9
		printf "%b" "$2" >&3 || true
		timeout "$3" cat <&3 2>/dev/null
		[ $? -ne 124 ] && echo -n "<EOF>"
		exit 0
	' _ "$port" "$data" "$wait_s" | perl -pe 's/\r/\\r/g; s/\n/\\n/g') || rc=$?
	printf '%s' "$out"
}

# ---- HTTP -----------------------------------------------------------------------

HTTP_CODE=""
HTTP_BODY=""
HTTP_5XX=0      # 5xx answers seen by http()
# http METHOD PATH [BODY [CURL_ARG...]]: sets HTTP_CODE and HTTP_BODY.
http() {
	local method=$1 path=$2 body=${3-} f=$TMP/http.body
	shift 2
	[ $# -gt 0 ] && shift
	local args=(-s -o "$f" -w '%{http_code}' --max-time 20 -X "$method")
	[ -n "$body" ] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
	[ -n "$T_PASS" ] && args+=(-H "Authorization: Bearer $T_PASS")
	HTTP_CODE=$(curl "${args[@]}" "$@" "http://127.0.0.1:$T_HTTP$path" 2>/dev/null) || true
	HTTP_BODY=$(cat "$f" 2>/dev/null || true)
	rm -f "$f"
	if [[ "$HTTP_CODE" == 5* ]]; then
		HTTP_5XX=$((HTTP_5XX + 1))
		say "     (5xx: $method $path -> $HTTP_CODE $HTTP_BODY)"
	fi
}

# One value of /metrics (the first sample of that name).
metric() {
	local text
	text=$(timeout 10 curl -s ${T_PASS:+-H "Authorization: Bearer $T_PASS"} \
		"http://127.0.0.1:$T_HTTP/metrics" || true)
	awk -v n="$1" '$1 == n { print $2; exit }' <<<"$text"
}

# VmRSS or VmHWM of a process in KiB.
proc_kib() { # PID FIELD
	awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

now_ms() { date +%s%3N; }

# ---- the redis-cluster store ---------------------------------------------------

# The cluster tests (tests/cluster) source lib_cluster.sh, which sources
# this file first and starts its own cluster.
if on_cluster && [ -z "${TALLY_CLUSTER_HARNESS:-}" ]; then
	# shellcheck source=../cluster/lib_cluster.sh
	source "$IT_DIR/../cluster/lib_cluster.sh"
	cluster_start no
	STORE_ARGS=(--store redis-cluster --cluster "$CL_SEEDS")
	say "store: redis-cluster on $CL_SEEDS"
fi
