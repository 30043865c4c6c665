# bench_lib.sh: what the benchmark scripts share, sourced by them: the
# machine's description, thousands separators, and writing a script's own
# section of docs/BENCHMARKS.md without touching the others'.

# The machine, for the record.
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
MEM=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null || true)

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
