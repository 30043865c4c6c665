# bench_lib.sh: what the benchmark and profile scripts share, sourced by
# them: the machine's description, a free port, waiting for a server's
# PONG, thousands separators, and writing a script's own section of
# docs/BENCHMARKS.md without touching the others'.

# The machine, for the record.
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
MEM=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null || true)

# A loopback port nothing listens on now.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ping PORT: until PONG, at most 60 s (the caller defines log).
wait_ping() {
	local i=0
	while [ "$(redis-cli -p "$1" ping 2>/dev/null)" != PONG ]; do
		i=$((i + 1))
		[ $i -gt 6000 ] && { log "no PONG on port $1"; return 1; }
		sleep 0.01
	done
}

# tree_rev: the commit checked out, and whether src/ or include/ differ
# from it; called before the build, what the build is made of. The
# caller sets ROOT.
tree_rev() {
	local rev
	rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "$(git -C "$ROOT" status --porcelain -- src include 2>/dev/null)" ]; then
		rev="$rev + uncommitted changes in src/ or include/"
	fi
	echo "$rev"
}

commas() { awk -v x="$1" 'BEGIN { s = sprintf("%.0f", x); r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) } print s r }'; }

# doc_section NAME SECTION_FILE OUT: put SECTION_FILE (which starts with
# "<!-- NAME:begin" and ends with "<!-- NAME:end -->") in place of OUT's
# section NAME, or append it when OUT has none.
doc_section() {
	local name=$1 sec=$2 out=$3 tmp
	tmp=$(mktemp)
	touch "$out"
	awk -v sec="$sec" -v b="^<!-- $name:begin" -v e="^<!-- $name:end" '
	$0 ~ b { skip = 1; while ((getline l < sec) > 0) print l; done = 1; next }
	$0 ~ e { skip = 0; next }
	!skip { print }
	END { if (!done) { print ""; while ((getline l < sec) > 0) print l } }' "$out" >"$tmp"
	cat "$tmp" >"$out"
	rm -f "$tmp"
}
