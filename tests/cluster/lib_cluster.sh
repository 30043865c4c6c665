# lib_cluster.sh: a real Redis Cluster for the cluster tests (sourced, not
# run), on top of tests/integration/lib.sh (temp folder, assertions, a trap
# that kills only what the script started).
#
#   source "$(dirname "$0")/lib_cluster.sh" "$@"   # $1 is the build folder
#   cluster_start [appendonly yes|no]   # 6 nodes: 3 masters, 3 replicas
#
# Gives: CL_PORTS (every node's port), CL_SEEDS ("127.0.0.1:P,..." of all
# nodes), ccli PORT ARGS (redis-cli on a node, bounded in time),
# cluster_masters / cluster_replica_of PORT / owner_of_counter NAME /
# probe_on PORT / cluster_kill_master PORT /
# cluster_pause PORT MS / cluster_wait_ok / cluster_flush. Nodes run with
# cluster-node-timeout 2000 ms, so a failover takes a few seconds.
# lib.sh sources this file itself when TALLY_TEST_STORE=redis-cluster.
if [ -z "${TALLY_LIB_SH:-}" ]; then
	TALLY_CLUSTER_HARNESS=1
	# shellcheck source=../integration/lib.sh
	source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh" "$@"
fi
need_cmd redis-server redis-cli

CL_PORTS=()
declare -A CL_PID=()   # node port -> pid
CL_SEEDS=""
CL_NODE_TIMEOUT_MS=2000

# redis-cli on one node, bounded in time; never fails (its output tells).
ccli() {
	local port=$1
	shift
	timeout 10 redis-cli -h 127.0.0.1 -p "$port" "$@" 2>&1 || true
}

# Whether the node on PORT is up as far as this script knows. Ports that
# cluster_kill_master killed are listed in a file: it runs in a command
# substitution, whose variables never reach the caller.
_cl_live() {
	[ -n "${CL_PID[$1]:-}" ] && ! grep -qx "$1" "$TMP/cl_dead" 2>/dev/null
}

_cl_info() { # PORT FIELD: one field of CLUSTER INFO
	ccli "$1" cluster info | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'
}

# Every live node says cluster_state:ok, all 16384 slots assigned and
# every node knows the same number of nodes.
_cl_all_ok() {
	local p
	for p in "${CL_PORTS[@]}"; do
		_cl_live "$p" || continue
		[ "$(_cl_info "$p" cluster_state)" = ok ] || return 1
		[ "$(_cl_info "$p" cluster_slots_ok)" = 16384 ] || return 1
	done
}

cluster_wait_ok() { # [SECONDS]: wait until every live node is ok
	local limit=${1:-60} i
	for ((i = 0; i < limit * 5; i++)); do
		_cl_all_ok && return 0
		sleep 0.2
	done
	return 1
}

_cl_start_node() { # PORT BUSPORT AOF
	local port=$1 bus=$2 aof=$3 dir=$TMP/redis.$1
	mkdir -p "$dir"
	redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
		--cluster-port "$bus" --cluster-config-file nodes.conf \
		--cluster-node-timeout "$CL_NODE_TIMEOUT_MS" \
		--appendonly "$aof" --save '' --repl-diskless-sync-delay 0 \
		--dir "$dir" \
		--logfile "$dir/redis.log" --daemonize no \
		--enable-debug-command local >/dev/null 2>&1 &
	CL_PID[$port]=$!
	BG_PIDS+=("$!")
	if [ -f "$TMP/cl_dead" ]; then
		grep -vx "$port" "$TMP/cl_dead" >"$TMP/cl_dead.new" || true
		mv "$TMP/cl_dead.new" "$TMP/cl_dead"
	fi
}

# cluster_start [appendonly]: 6 nodes on free loopback ports, made a cluster
# of 3 masters with one replica each, and waited for (bounded).
cluster_start() {
	local aof=${1:-no} i n p bus ok try info addrs=()
	CL_PORTS=()
	for ((n = 0; n < 6; n++)); do
		# A port found free can be taken before the node binds it (by
		# another test running alongside): such a node exits, and is
		# started again on other ports.
		ok=0
		for ((try = 0; try < 5 && ok == 0; try++)); do
			# Not $(pick_port): its record of picked ports must
			# outlive the call, or a node's bus port could be
			# picked again as the next node's port.
			pick_port >"$TMP/cl_port" || break
			p=$(<"$TMP/cl_port")
			pick_port >"$TMP/cl_port" || break
			bus=$(<"$TMP/cl_port")
			_cl_start_node "$p" "$bus" "$aof"
			for ((i = 0; i < 100; i++)); do
				# Ours, not another test's server on that port.
				info=$(ccli "$p" info server | tr -d '\r')
				if [[ "$info" == *"process_id:${CL_PID[$p]}"$'\n'* ]]; then
					ok=1
					break
				fi
				kill -0 "${CL_PID[$p]}" 2>/dev/null || break
				sleep 0.1
			done
		done
		if [ $ok -eq 0 ]; then
			fail "redis-server on port $p answers"
			finish
		fi
		CL_PORTS+=("$p")
		addrs+=("127.0.0.1:$p")
	done
	if ! timeout 60 redis-cli --cluster create "${addrs[@]}" \
		--cluster-replicas 1 --cluster-yes >"$TMP/cluster-create.log" 2>&1; then
		fail "redis-cli --cluster create" "$(tail -n 5 "$TMP/cluster-create.log")"
		finish
	fi
	if ! cluster_wait_ok 60; then
		fail "the cluster reaches cluster_state:ok with all slots"
		finish
	fi
	# A failover needs each replica in sync with its master.
	for ((i = 0; i < 150; i++)); do
		[ "$(cluster_masters | wc -w)" -eq 3 ] && _cl_replicas_synced && break
		sleep 0.2
	done
	CL_SEEDS=$(IFS=,; echo "${addrs[*]}")
}

_cl_replicas_synced() {
	local p
	for p in $(cluster_masters); do
		[ -n "$(cluster_replica_of "$p")" ] || return 1
		ccli "$p" info replication | tr -d '\r' |
			grep -q '^slave0:.*state=online' || return 1
	done
}

# Ports of the live masters, by a live node's CLUSTER NODES.
cluster_masters() {
	local p
	for p in "${CL_PORTS[@]}"; do
		_cl_live "$p" || continue
		ccli "$p" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ {
			split($2, a, "@"); n = split(a[1], b, ":"); print b[n] }' | sort -n
		return 0
	done
}

_cl_id() { ccli "$1" cluster myid | tr -d '\r'; }

# Port of the replica of the master on PORT (empty when none).
cluster_replica_of() {
	local id
	id=$(_cl_id "$1")
	ccli "$1" cluster nodes | awk -v id="$id" '$3 ~ /slave/ && $4 == id &&
		$3 !~ /fail/ { split($2, a, "@"); n = split(a[1], b, ":"); print b[n] }' |
		head -n 1
}

# Port of the master owning SLOT.
cluster_master_of_slot() {
	local p
	for p in "${CL_PORTS[@]}"; do
		_cl_live "$p" || continue
		ccli "$p" cluster slots | tr -d '\r' | awk -v s="$1" '
			NR % 1 == 0 { a[NR] = $0 }
			END {
				# CLUSTER SLOTS, raw: start, end, host, port, id, ...
				for (i = 1; i <= NR; i++)
					if (a[i] ~ /^[0-9]+$/ && a[i+1] ~ /^[0-9]+$/ &&
					    a[i+2] ~ /\./ && a[i] + 0 <= s && s <= a[i+1] + 0) {
						print a[i+3]; exit
					}
			}'
		return 0
	done
}

# A node that is up, to ask what does not depend on the node.
live_port() {
	local p
	for p in "${CL_PORTS[@]}"; do
		_cl_live "$p" && { echo "$p"; return 0; }
	done
	return 1
}

# Master owning counter NAME's shard 0.
owner_of_counter() {
	cluster_master_of_slot "$(ccli "$(live_port)" cluster keyslot "t:c:{$1}")"
}

# A counter name (probeN) whose shard 0 lives on the master on PORT.
probe_on() {
	local k
	for ((k = 1; k < 200; k++)); do
		if [ "$(owner_of_counter "probe$k")" = "$1" ]; then
			echo "probe$k"
			return 0
		fi
	done
	return 1
}

# Kill (SIGKILL) the master on PORT and wait until its replica is master
# and every live node is ok again. Prints the promoted replica's port, and
# nothing else: it runs in a command substitution, where fail would count
# nowhere, so what went wrong goes to stderr and the caller checks the
# status (or the empty port).
cluster_kill_master() {
	local port=$1 rep i
	rep=$(cluster_replica_of "$port")
	if [ -z "$rep" ]; then
		say "master $port has no replica to promote" >&2
		return 1
	fi
	_kill_pid "${CL_PID[$port]}"
	unset "CL_PID[$port]"
	echo "$port" >>"$TMP/cl_dead"
	for ((i = 0; i < 300; i++)); do
		if ccli "$rep" role | head -n 1 | grep -q '^master' && _cl_all_ok; then
			echo "$rep"
			return 0
		fi
		sleep 0.2
	done
	say "replica $rep of killed master $port is not promoted within 60 s" >&2
	return 1
}

# Empty the cluster: FLUSHALL on every live master.
cluster_flush() {
	local p out masters
	masters=$(cluster_masters)
	if [ -z "$masters" ]; then
		fail "the cluster has live masters to empty"
		return 1
	fi
	for p in $masters; do
		out=$(ccli "$p" flushall)
		if [ "$out" != OK ]; then
			fail "FLUSHALL on master $p" "$out"
			return 1
		fi
	done
}

# Pause every client of the node on PORT for MS milliseconds.
cluster_pause() {
	ccli "$1" client pause "$2" all >/dev/null
}
