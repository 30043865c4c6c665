#!/usr/bin/env bash
# test_offline.sh: black-box tests of the `tally` offline tools (import,
# export, stats, backup) and of its usage errors and exit statuses, on
# throw-away data folders. Usage: tests/cli/test_offline.sh [BUILD_DIR]
# (default build); builds nothing. Needs python3 (to pack records).
set -euo pipefail

BUILD=${1:-build}
TALLY=$(cd "$BUILD" && pwd)/tally
[[ -x $TALLY ]] || { echo "no $TALLY: build it first (cmake --build $BUILD --target tally_cli)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tally-cli-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

passed=0
failed=0
# check NAME FN: run the test function FN in a subshell with errexit on (a
# plain statement, not an `if` condition, where bash would ignore errexit)
# and count the result. Test functions therefore avoid `a && b` and `! a`,
# whose failures errexit does not catch; they use one check per line.
check() {
	local name=$1 rc
	shift
	set +e
	( set -e; "$@" ) >"$WORK/last.log" 2>&1
	rc=$?
	set -e
	if [[ $rc -eq 0 ]]; then
		passed=$((passed + 1))
		echo "ok   $name"
	else
		failed=$((failed + 1))
		echo "FAIL $name"
		sed 's/^/     | /' "$WORK/last.log"
	fi
}

# absent PATTERN FILE: FILE does not match PATTERN.
absent() {
	if grep -q -- "$1" "$2"; then
		echo "unexpected '$1' in $2:"
		cat "$2"
		return 1
	fi
}

# run_status WANT CMD...: CMD's exit status must be WANT; its stdout and
# stderr are kept in out.txt and err.txt for the caller's greps.
run_status() {
	local want=$1 got=0
	shift
	"$@" >out.txt 2>err.txt || got=$?
	if [[ $got -ne $want ]]; then
		echo "exit status $got, want $want: $*"
		cat out.txt err.txt
		return 1
	fi
}

# tallyd_on DIR: a tallyd on DIR, RESP alone, on a port below the kernel's
# ephemeral range that no socket uses; sets pid and port (the caller's
# locals) once it answers as itself, and a trap (in the test's subshell)
# that kills it.
tallyd_on() {
	port=$(python3 -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
used = open("/proc/net/tcp").read() + open("/proc/net/tcp6").read()
hi = min(lo, 32000) if lo > 21000 else 32000
while True:
    p = random.randrange(20000, hi)
    if (":%04X " % p) not in used:
        break
s = socket.socket()
s.bind(("127.0.0.1", p))
print(p)')
	"$(dirname "$TALLY")/tallyd" --data "$1" --bind 127.0.0.1 \
		--resp-port "$port" --http-port 0 --log-level error >tallyd.log 2>&1 &
	pid=$!
	trap "kill -9 $pid 2>/dev/null || true" EXIT
	for _ in $(seq 100); do
		if redis-cli -p "$port" info server 2>/dev/null | tr -d '\r' |
			grep -qx "process_id:$pid"; then
			return 0
		fi
		sleep 0.1
	done
	echo "tallyd on $1 did not answer on port $port"
	cat tallyd.log
	return 1
}

# ---- record files -----------------------------------------------------------
# rec.py pack OUT SPEC...: records from "ktype inc at content member total";
# rec.py last A: per object of A, "NAME CONTENT LAST-TOTAL REMOVES", sorted;
# rec.py same A A.types B B.types [--skip-noops]: per-object record sequences
# of A (named through A.types) equal those of B. Objects are compared, not
# file order: an export visits objects in key order, and each object's events
# oldest first. --skip-noops drops A's records that change no count (the
# engine does not store them, so they do not come back from an export).
cat >rec.py <<'EOF'
import struct, sys
EPOCH = 1577836800000

def pack(out, specs):
    with open(out, 'wb') as f:
        for s in specs:
            k, inc, at, c, m, tot = (int(x) for x in s.split())
            w0 = k << 42 | inc << 41 | (at - EPOCH)
            f.write(struct.pack('>QQq', w0, c << 32 | m, tot))

def names(path):
    d = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith('#'):
            i, n, mode = line.split()
            d[int(i)] = n
    return d

def objects(path, skip_noops):
    ids, data, objs = names(path + '.types'), open(path, 'rb').read(), {}
    for off in range(0, len(data), 24):
        w0, w1, tot = struct.unpack('>QQq', data[off:off + 24])
        key = (ids[w0 >> 42], w1 >> 32)
        seq = objs.setdefault(key, [])
        prev = seq[-1][4] if seq else 0
        if skip_noops and seq and tot == prev:
            continue
        seq.append(((w0 >> 41) & 1, w0 & (2**41 - 1), w1 & 0xffffffff,
                    key[1], tot))
    return objs

if sys.argv[1] == 'pack':
    pack(sys.argv[2], sys.argv[3:])
elif sys.argv[1] == 'last':
    for (name, content), recs in sorted(objects(sys.argv[2], False).items()):
        removes = sum(1 for r in recs if r[0] == 0)
        print(name, content, recs[-1][4], removes)
elif sys.argv[1] == 'same':
    a = objects(sys.argv[2], '--skip-noops' in sys.argv)
    b = objects(sys.argv[3], False)
    if a != b:
        print('differ:\n', a, '\n', b)
        sys.exit(1)
EOF

T0=1700000000000
# article: like (unique) on 42 and 43, view (total) on 42 with deltas and an
# anonymous member, clap (a new total type) on 7; objects interleave.
# Record 7 (member 8 likes 42 again) is a no-op.
python3 rec.py pack events.rec \
	"1 1 $((T0 + 1)) 42 7 1" \
	"6 1 $((T0 + 2)) 42 0 5" \
	"1 1 $((T0 + 3)) 42 8 2" \
	"40 1 $((T0 + 4)) 7 9 3" \
	"1 0 $((T0 + 5)) 42 7 1" \
	"6 0 $((T0 + 6)) 42 5 3" \
	"1 1 $((T0 + 7)) 42 8 1" \
	"1 1 $((T0 + 8)) 43 4294967295 1" \
	"6 1 $((T0 + 9)) 42 11 10" \
	"40 1 $((T0 + 10)) 7 9 4"
printf '# hand-made\n1 like unique\n6 view total\n40 clap total\n' >events.rec.types
EVENTS=9   # stored events: the records minus the one no-op
OBJECTS=4  # like/42, like/43, view/42, clap/7

# ---- tests --------------------------------------------------------------------

t_version_help() {
	run_status 0 "$TALLY" --version
	grep -q '^tally ' out.txt
	run_status 0 "$TALLY" --help
	grep -q 'exit status' out.txt
	run_status 0 "$TALLY" import --help
	grep -q 'IN.types' out.txt
	run_status 0 "$TALLY" help import
	grep -q 'IN.types' out.txt
	run_status 2 "$TALLY" help nosuch
	grep -q "no help for 'nosuch': not a command" err.txt
	# Help that cannot be written is not a success.
	local got=0
	"$TALLY" --help >/dev/full 2>err.txt || got=$?
	[[ $got -eq 1 ]]
	grep -q 'could not write the output' err.txt
	got=0
	"$TALLY" import --help >/dev/full 2>err.txt || got=$?
	[[ $got -eq 1 ]]
}

t_usage_errors() {
	run_status 2 "$TALLY" count article like 12x
	grep -q "CONTENT must be an integer" err.txt
	run_status 2 "$TALLY" frobnicate
	run_status 2 "$TALLY" add article like 1
	run_status 2 "$TALLY" recent article like 1 --limit 0
	# --before 0 meant no bound at all (the server's unset), not "older
	# than event 0"; the server takes 1000 contents per MCOUNT.
	run_status 2 "$TALLY" recent article like 1 --before 0
	run_status 2 "$TALLY" mcount article like $(seq 1 1001)
	run_status 2 "$TALLY" export --data d1 ""
	[[ ! -e .types ]]
	run_status 2 "$TALLY" import --data d --ctype article --window 0 x
	run_status 2 "$TALLY" import --data d x         # --ctype missing
	run_status 2 "$TALLY" stats                       # --data missing
	run_status 2 "$TALLY" -p 99999 ping
	[[ ! -e d ]]
}

t_unreachable_server() {
	run_status 3 "$TALLY" -h 127.0.0.1 -p 1 ping
	grep -q '127.0.0.1:1' err.txt
	grep -q 'make run' err.txt
	# `--` ends the global options too.
	run_status 3 "$TALLY" -h 127.0.0.1 -p 1 -- ping
	grep -q '127.0.0.1:1' err.txt
}

t_import() {
	run_status 0 "$TALLY" import --data d1 --ctype article events.rec
	grep -q 'imported 10 records' out.txt
	grep -q '1 no-ops' out.txt
	absent 'differ' out.txt
}

# A record the store refuses (a count past int64) is reported, counted as
# lost, and the records after it in its group still go in; the run exits 1
# and says whether a rerun has anything left to write.
t_import_lost_record() {
	python3 rec.py pack big.rec "6 1 $((T0 + 1)) 99 0 9223372036854775805"
	printf '6 view total\n' >big.rec.types
	run_status 0 "$TALLY" import --data d5 --ctype article big.rec
	python3 rec.py pack more.rec \
		"6 1 $((T0 + 2)) 99 0 1" \
		"6 1 $((T0 + 3)) 99 0 2" \
		"6 1 $((T0 + 4)) 99 0 3" \
		"6 1 $((T0 + 5)) 100 0 4"
	printf '6 view total\n' >more.rec.types
	run_status 1 "$TALLY" import --data d5 --ctype article more.rec
	grep -q 'record 2 of more.rec could not be written' err.txt
	grep -q '^tally: 1 records that could not be written' err.txt
	grep -q 'every other record is in and marked: a rerun writes nothing' err.txt
	absent 'rerun the same import' err.txt
	run_status 0 "$TALLY" export --data d5 --ctype article lost.rec
	python3 - <<'PY'
import struct
last = {}
data = open('lost.rec', 'rb').read()
for off in range(0, len(data), 24):
    w0, w1, tot = struct.unpack('>QQq', data[off:off + 24])
    last[w1 >> 32] = tot
assert last == {99: 2**63 - 1, 100: 4}, last
PY
	run_status 0 "$TALLY" import --data d5 --ctype article more.rec
	grep -q 'nothing written' out.txt
}

t_export_round_trip() {
	run_status 0 "$TALLY" export --data d1 --ctype article e1.rec
	grep -q "exported $EVENTS records" out.txt
	grep -q 'skipped 0 events' out.txt
	[[ $(stat -c %s e1.rec) -eq $((EVENTS * 24)) ]]
	grep -q '^[0-9]* clap total$' e1.rec.types
	[[ ! -e e1.rec.part ]]
	python3 rec.py same events.rec e1.rec --skip-noops
}

# An export's two files are fsynced before their renames, and the folder
# after them (strace): a crash never leaves an empty OUT.types renamed in.
# An OUT already there is removed, and the folder synced, before the new
# OUT.types is renamed in: a crash between the renames never leaves an
# old OUT beside a new OUT.types.
t_export_synced() {
	run_status 0 "$TALLY" export --data d1 --ctype article synced.rec
	# LeakSanitizer cannot run under ptrace: off for this run (the
	# sanitizer build runs every other command with it).
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
		strace -f -y -o trace.txt \
		-e trace=fsync,rename,renameat,renameat2,unlink,unlinkat \
		"$TALLY" export --data d1 --ctype article synced.rec >/dev/null
	python3 - <<'PY'
import os, re
synced, renamed, dirsync = set(), [], False
removed, removed_synced = False, False
for line in open("trace.txt"):
    if "= -1" in line:
        continue
    if re.search(r'unlink(?:at)?\((?:[^,]+, )?"synced\.rec"', line):
        assert not renamed, "the old OUT is removed after a rename"
        removed = True
        continue
    m = re.search(r'fsync\(\d+<([^>]+)>', line)
    if m:
        path = m.group(1)
        if path == os.getcwd():
            if renamed:
                dirsync = True
            elif removed:
                removed_synced = True
        synced.add(os.path.basename(path))
        continue
    m = re.search(r'rename(?:at2?)?\((?:[^,]+, )?"(synced[^"]+)", (?:[^,]+, )?"([^"]+)"', line)
    if m:
        assert m.group(1) in synced, (m.group(1), "renamed unsynced")
        renamed.append(m.group(2))
assert removed, "the old OUT is not removed first"
assert removed_synced, "the folder is not synced after the removal"
assert renamed == ["synced.rec.types", "synced.rec"], renamed
assert dirsync, "the folder is not synced after the renames"
PY
	python3 rec.py same events.rec synced.rec --skip-noops
}

# A data folder created by an open has its entry synced in its parent
# before anything is written in it (strace): a machine crash never loses
# the whole folder under acknowledged writes.
t_new_folder_synced() {
	rm -rf nf
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
		strace -f -y -o trace-nf.txt -e trace=mkdir,mkdirat,fsync \
		"$TALLY" import --data nf --ctype article events.rec >/dev/null
	python3 - <<'PY'
import os, re
made = synced = False
for line in open("trace-nf.txt"):
    if "= -1" in line:
        continue
    if re.search(r'mkdir(?:at)?\((?:[^,]+, )?"nf"', line):
        made = True
    m = re.search(r'fsync\(\d+<([^>]+)>', line)
    if made and m and m.group(1) == os.getcwd():
        synced = True
        break
assert made, "nf was not made"
assert synced, "the parent was not synced after nf was made"
PY
}

t_export_import_export_identical() {
	run_status 0 "$TALLY" import --data d2 --ctype article e1.rec
	grep -q '0 no-ops' out.txt
	run_status 0 "$TALLY" export --data d2 --ctype article e2.rec
	cmp e1.rec e2.rec
	cmp e1.rec.types e2.rec.types
}

t_stats() {
	run_status 0 "$TALLY" stats --data d1
	grep -Eq "^events +$EVENTS " out.txt
	grep -Eq "^objects +$OBJECTS \(summed over counting types" out.txt
	grep -Eq '^ *[0-9]+ +clap +total$' out.txt
	run_status 0 "$TALLY" stats --data d1 --json
	python3 -c 'import json, sys
d = json.load(open("out.txt"))
assert d["events"] == int(sys.argv[1]), d
assert d["objects"] == int(sys.argv[2]), d
assert [t["mode"] for t in d["types"] if t["name"] == "clap"] == ["total"]' \
		"$EVENTS" "$OBJECTS"
}

t_export_ctype_filter() {
	run_status 0 "$TALLY" import --data d1 --ctype video e1.rec --json
	python3 -c 'import json
d = json.load(open("out.txt"))
assert d["records"] == 9 and d["noops"] == 0, d'
	run_status 0 "$TALLY" export --data d1 --ctype video v.rec
	cmp e1.rec v.rec
	run_status 0 "$TALLY" export --data d1 all.rec
	[[ $(stat -c %s all.rec) -eq $((2 * EVENTS * 24)) ]]
	grep -q '2 content types in one file' err.txt
	run_status 0 "$TALLY" export --data d1 --ctype nosuch none.rec
	[[ ! -s none.rec ]]
	grep -q 'no events of content type' err.txt
}

# An export of two content types imported under one counts each object's
# sum: d1 holds the same events under article and video. (The second
# content type's totals were read as changes of the first's: view/42 came
# out at 10, with a remove of 5 that never happened.)
t_export_merges_ctypes() {
	run_status 0 "$TALLY" export --data d1 all.rec
	grep -q 'counts summed over them' err.txt
	run_status 0 "$TALLY" import --data dm --ctype both all.rec
	run_status 0 "$TALLY" export --data dm m.rec
	python3 rec.py last m.rec >last.txt
	diff last.txt - <<'EOF2'
clap 7 8 0
like 42 1 2
like 43 1 0
view 42 20 2
EOF2
}

# An event the export skips (a time past 2089) still moves the summed
# total, so its change reaches the next record even when that is another
# content type's: alpha +2 (its id lower, scanned last), beta +5 and +3 in
# 2095. (The sum took beta's last record only: 7.)
t_export_merge_keeps_skipped_changes() {
	local pid port
	tallyd_on ds
	printf 'TALLY.ADD alpha view 5 0 DELTA 2\nTALLY.ADD beta view 5 0 DELTA 5\nTALLY.ADD beta view 5 0 DELTA 3 AT 3944678400000\n' |
		redis-cli -p "$port" >adds.txt
	[[ $(paste -sd' ' adds.txt) == "2 5 8" ]]
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	run_status 0 "$TALLY" export --data ds s.rec
	grep -q 'skipped 1 events' out.txt
	run_status 0 "$TALLY" import --data ds2 --ctype both s.rec
	run_status 0 "$TALLY" export --data ds2 s2.rec
	[[ $(python3 rec.py last s2.rec) == "view 5 10 0" ]]
}

# The same file again writes nothing (its mark counts every record); another
# file of the same objects is imported, and its counts differ.
t_reimport() {
	run_status 0 "$TALLY" import --data d2 --ctype article e1.rec
	grep -q 'e1.rec was imported into d2 before' out.txt
	grep -q "counts all $EVENTS records): nothing written" out.txt
	run_status 0 "$TALLY" stats --data d2 --json
	python3 -c 'import json, sys
assert json.load(open("out.txt"))["events"] == int(sys.argv[1])' "$EVENTS"
	run_status 0 "$TALLY" import --data d2 --ctype article events.rec
	grep -q 'counts differ from the file' out.txt
	run_status 0 "$TALLY" import --data d2 --ctype article events.rec --json
	python3 -c 'import json
d = json.load(open("out.txt"))
assert d["resumed_at"] == d["records"] == 10 and d["writes"] == 0, d
assert d["mark"].startswith("tally.import:article:"), d'
}

# A total type goes the way its running total goes, whatever a record's
# add/remove bit says (an export folds an event it cannot write into the
# next record, whose bit may point the other way).
t_total_direction_from_totals() {
	python3 rec.py pack dir.rec "6 1 $((T0 + 1)) 5 0 5" "6 1 $((T0 + 2)) 5 0 3" \
		"6 0 $((T0 + 3)) 5 0 4"
	printf '6 view total\n' >dir.rec.types
	run_status 0 "$TALLY" import --data d4 --ctype article dir.rec
	absent 'differ' out.txt
	run_status 0 "$TALLY" export --data d4 --ctype article dir2.rec
	python3 -c 'import struct
d = open("dir2.rec", "rb").read()
recs = [struct.unpack(">QQq", d[i:i + 24]) for i in range(0, len(d), 24)]
assert [(w0 >> 41 & 1, t) for w0, _, t in recs] == [(1, 5), (0, 3), (1, 4)], recs'
}

# import_past_1m DIR: big.rec's import into DIR, in the background
# (IMPORT_PID), once its progress has passed 1M of its 2M records.
import_past_1m() {
	"$TALLY" import --data "$1" --ctype article --progress big.rec \
		>/dev/null 2>progress.txt &
	IMPORT_PID=$!
	for _ in $(seq 3000); do
		if grep -q '1000000 records sent' progress.txt; then break; fi
		sleep 0.01
	done
	grep -q '1000000 records sent' progress.txt
}

# resumed_as_whole DIR: big.rec's import into DIR again resumes where the
# one before stopped, and leaves what a whole import left (want.rec).
resumed_as_whole() {
	run_status 0 "$TALLY" import --data "$1" --ctype article --progress big.rec
	grep -q 'resumed at record [1-9][0-9]*: an earlier run' out.txt
	# Progress counts the records sent, not those passed over.
	absent '2000000 records sent' err.txt
	absent 'differ' out.txt
	run_status 0 "$TALLY" export --data "$1" --ctype article got.rec
	cmp want.rec got.rec
}

# An import killed half-way (kill -9, once its progress passed 1M records),
# then run again, leaves exactly what one whole import leaves: the rerun
# resumes at the mark the killed run's last kept group wrote. The same for
# an import that fails half-way.
t_interrupted_import_resumes() {
	local pid
	python3 -c '
import random, struct
EPOCH, T0, N, OBJS = 1577836800000, 1700000000000, 2000000, 1000
rec, rnd, tot = struct.Struct(">QQq"), random.Random(7), [0] * (OBJS + 1)
out = []
for i in range(N):
    c = rnd.randint(1, OBJS)
    d = rnd.choice((1, 1, 2, 5, -1))
    tot[c] += d
    w0 = 6 << 42 | (1 if d > 0 else 0) << 41 | (T0 + i - EPOCH)
    out.append(rec.pack(w0, c << 32, tot[c]))
open("big.rec", "wb").write(b"".join(out))
open("big.rec.types", "w").write("6 view total\n")'
	run_status 0 "$TALLY" import --data whole --ctype article big.rec
	run_status 0 "$TALLY" export --data whole --ctype article want.rec
	import_past_1m part
	kill -9 "$IMPORT_PID"
	wait "$IMPORT_PID" 2>/dev/null || true
	absent '2000000 records sent' progress.txt
	resumed_as_whole part
	# The file cut short while it is replayed (past 1M records, to 1.9M):
	# the import fails, saying so, and once the file is whole again its
	# rerun resumes at the mark and finishes it.
	cp big.rec big.orig
	local got=0
	import_past_1m cut
	truncate -s $((1900000 * 24)) big.rec
	wait "$IMPORT_PID" || got=$?
	[[ $got -eq 1 ]]
	grep -q 'cannot read big.rec at offset 45600000 (the file shrank)' progress.txt
	mv big.orig big.rec
	resumed_as_whole cut
	rm -rf whole part cut big.rec big.rec.types want.rec got.rec
}

t_backup() {
	run_status 0 "$TALLY" backup --data d1 copy
	run_status 0 "$TALLY" stats --data copy --json
	python3 -c 'import json, sys
assert json.load(open("out.txt"))["events"] == 2 * int(sys.argv[1])' \
		"$EVENTS"
	run_status 1 "$TALLY" backup --data d1 copy    # exists
	grep -q 'exists' err.txt
	# No progress unless asked when stderr is not a terminal.
	run_status 0 "$TALLY" backup --data d1 copy-quiet
	absent 'copy holds' err.txt
	rm -rf copy-quiet
}

# An offline backup shows the copy's size while it is made: the sync of
# the first file it copies is held (tests/fault/faultfs.so, stall-fsync)
# for 2.5 s, so a line comes meanwhile (one a second); the last gives
# what OUT holds.
t_backup_progress() {
	local shim bg i rc=0 files
	shim=$(dirname "$TALLY")/faultfs.so
	[[ -f $shim ]]
	mkdir slow
	echo stall-fsync >ctl
	# A sanitized tally wants its runtime first; the shim only forwards.
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		LD_PRELOAD=$shim TALLY_FAULT_DIR=$WORK/slow \
		TALLY_FAULT_CTL=$WORK/ctl \
		"$TALLY" backup --data d1 --progress slow/copy >out.txt 2>err.txt &
	bg=$!
	# A failed check must not leave it holding d1 for the tests after.
	trap "echo off >'$WORK/ctl'; kill $bg 2>/dev/null || true; wait $bg 2>/dev/null || true" EXIT
	for i in $(seq 200); do
		[[ ! -e ctl.stalled ]] || break
		sleep 0.05
	done
	[[ -e ctl.stalled ]]
	sleep 2.5
	[[ -d slow/copy.tally-partial ]]
	[[ ! -e slow/copy ]]
	grep -Eq '^tally: the copy holds [0-9.]+ [KMG]?i?B in [0-9]+ files \(of at most [0-9.]+ [KMG]?i?B\)$' err.txt
	echo off >ctl
	wait "$bg" || rc=$?
	cat out.txt err.txt
	[[ $rc -eq 0 ]]
	[[ $(grep -c '^tally: the copy holds ' err.txt) -ge 2 ]]
	files=$(find slow/copy -type f | wc -l)
	tail -n 1 err.txt | grep -Eq "^tally: the copy holds [0-9.]+ [KMG]?i?B in $files files "
	grep -q 'written to slow/copy' out.txt
	run_status 0 "$TALLY" stats --data slow/copy --json
	python3 -c 'import json, sys
assert json.load(open("out.txt"))["events"] == 2 * int(sys.argv[1])' \
		"$EVENTS"
	rm -rf slow ctl ctl.stalled
}

t_missing_folder() {
	run_status 1 "$TALLY" stats --data nowhere
	grep -q 'no tally database' err.txt
	[[ ! -e nowhere ]]
	run_status 1 "$TALLY" import --data nowhere/deeper --ctype article events.rec
	grep -q 'nowhere/deeper: the folder it would be created in does not exist' err.txt
	[[ ! -e nowhere ]]
}

t_partial_record() {
	head -c 25 events.rec >short.rec
	cp events.rec.types short.rec.types
	run_status 1 "$TALLY" import --data d3 --ctype article short.rec
	grep -q 'offset 24' err.txt
	[[ ! -e d3 ]]
}

t_unknown_type_id() {
	python3 rec.py pack unknown.rec "1 1 $T0 1 1 1" "99 1 $T0 1 1 1"
	printf '1 like unique\n' >unknown.rec.types
	run_status 1 "$TALLY" import --data d3 --ctype article unknown.rec
	grep -q 'record 1 (offset 24): counting type id 99 is not listed' err.txt
	[[ ! -e d3 ]]
	rm unknown.rec.types
	run_status 1 "$TALLY" import --data d3 --ctype article unknown.rec
	grep -q 'cannot open unknown.rec.types' err.txt
	[[ ! -e d3 ]]
}

t_bad_records() {
	python3 rec.py pack anon.rec "1 1 $T0 1 0 1"
	printf '1 like unique\n' >anon.rec.types
	run_status 1 "$TALLY" import --data d3 --ctype article anon.rec
	grep -q 'member 0 (anonymous)' err.txt
	printf '1 like unique\n1 view total\n' >anon.rec.types
	run_status 1 "$TALLY" import --data d3 --ctype article anon.rec
	grep -q 'line 2: this ID is listed twice' err.txt
	printf '\xff\xff\xff\xff\xff\xff\xff\xff%.0s' 1 2 3 >bits.rec
	printf '1 like unique\n' >bits.rec.types
	run_status 1 "$TALLY" import --data d3 --ctype article bits.rec
	grep -q 'not a reference record' err.txt
	[[ ! -e d3 ]]
}

t_type_mode_conflict() {
	python3 rec.py pack mode.rec "1 1 $T0 1 1 1"
	printf '1 like total\n' >mode.rec.types
	run_status 1 "$TALLY" import --data d1 --ctype article mode.rec
	grep -q "counting type 'like' exists there as unique" err.txt
}

# A folder held by another process (as tallyd holds its own): stats says so;
# backup asks the server instead (here none listens on port 1).
t_busy_folder() {
	local pid
	python3 -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
time.sleep(30)' d1/LOCK >locker.out &
	pid=$!
	# This subshell's own trap: the script's trap does not reach here.
	trap "kill $pid 2>/dev/null || true" EXIT
	for _ in $(seq 50); do
		if grep -q locked locker.out; then break; fi
		sleep 0.1
	done
	grep -q locked locker.out
	run_status 1 "$TALLY" stats --data d1
	grep -q 'is in use' err.txt
	run_status 3 "$TALLY" -p 1 backup --data d1 copy2
	grep -q 'asking the server at 127.0.0.1:1' err.txt
	grep -q 'cannot reach tallyd' err.txt
	grep -q 'a tally import is writing it' err.txt
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	run_status 0 "$TALLY" stats --data d1
}

# folder_sig DIR: every file under DIR with its size, modification time
# and bytes, one line each, sorted.
folder_sig() {
	(cd "$1" && find . -type f -printf '%p %s %T@ ' -exec sha256sum {} \; |
		sort)
}

# A folder left by a killed tallyd holds events since its last checkpoint,
# which a scan visited last, objects interleaved: stats counted each event
# of them as an object (27 for 9), export each as a content type (18).
# Both now open the folder read-only, and so does backup: they replay what
# the crash left into memory and change no file (before, their open wrote
# the events out, and RocksDB a new manifest, log and options file). While
# tallyd runs, the folder is in use.
t_stats_after_crash() {
	local pid port
	tallyd_on dk
	for m in 1 2 3; do
		for c in 10 20 30; do
			printf 'TALLY.ADD article like %s %s\nTALLY.ADD article view %s %s\nTALLY.ADD video like %s %s\n' \
				"$c" "$m" "$c" "$m" "$c" "$m"
		done
	done | redis-cli -p "$port" >adds.txt
	[[ $(grep -c . adds.txt) -eq 27 ]]
	run_status 1 "$TALLY" stats --data dk
	grep -q 'dk is in use' err.txt
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	folder_sig dk >sig-before.txt
	grep -q 'journal' sig-before.txt
	run_status 0 "$TALLY" stats --data dk --json
	python3 -c 'import json
d = json.load(open("out.txt"))
assert d["events"] == 27 and d["objects"] == 9, d
rows = sorted((r["ctype"], r["ktype"], r["objects"], r["events"]) for r in d["by_type"])
assert rows == [("article", "like", 3, 9), ("article", "view", 3, 9),
                ("video", "like", 3, 9)], rows'
	run_status 0 "$TALLY" export --data dk all.rec
	grep -q '2 content types in one file' err.txt
	[[ $(stat -c %s all.rec) -eq $((27 * 24)) ]]
	run_status 0 "$TALLY" backup --data dk dk-copy
	folder_sig dk >sig-after.txt
	cmp sig-before.txt sig-after.txt
	# The copy holds what the crash left, and replays it as dk would.
	run_status 0 "$TALLY" stats --data dk-copy --json
	python3 -c 'import json
d = json.load(open("out.txt"))
assert d["events"] == 27 and d["objects"] == 9, d'
}

check "version and help exit 0" t_version_help
check "usage errors exit 2" t_usage_errors
check "unreachable server exits 3 naming host:port" t_unreachable_server
check "import of hand-made records" t_import
check "import: a record the store refuses is reported, the rest go in" t_import_lost_record
check "export gives back every object's events" t_export_round_trip
check "export, import, export is byte-identical" t_export_import_export_identical
check "an export's files and folder are synced" t_export_synced
check "a new data folder's entry is synced in its parent" t_new_folder_synced
check "stats counts events, objects and types" t_stats
check "export --ctype keeps one content type" t_export_ctype_filter
check "an export of two content types imports as their sums" t_export_merges_ctypes
check "a skipped event's change reaches the next content type's record" t_export_merge_keeps_skipped_changes
check "re-import: the same file writes nothing, another reports differences" t_reimport
check "an import killed or cut short half-way resumes at its mark" t_interrupted_import_resumes
check "a total type follows its running totals, not the bit" t_total_direction_from_totals
check "backup makes a copy that stats reads" t_backup
check "backup --progress shows the copy's size while it is made" t_backup_progress
check "stats on a missing folder fails, creates nothing" t_missing_folder
check "25-byte file: error naming the offset" t_partial_record
check "unknown type id or no .types: clear error" t_unknown_type_id
check "bad records are refused before writing" t_bad_records
check "type with the other mode: clear error" t_type_mode_conflict
check "busy folder: stats explains, backup asks tallyd" t_busy_folder
check "stats and export of a folder a crash left: each object once, no file changed" t_stats_after_crash

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
