#!/bin/sh
# Install the Debian packages tally needs to build, test and benchmark.
# Idempotent: does nothing when everything is present; runs apt-get update
# only when something is missing. Needs root (or sudo) to install.
# Usage: scripts/deps.sh [--bench|--fuzz|--profile]
#   --bench  also what `make bench` compares against: PostgreSQL 15 and
#            gnuplot (charts); Redis comes with the plain set; and wrk, the
#            HTTP load generator of docs/PERFORMANCE.md's HTTP figures.
#   --fuzz   also what `make fuzz` builds with: clang and its compiler-rt
#            (libFuzzer and the sanitizer runtimes; only recommended by
#            clang, so named here).
#   --profile  also what `make profile` runs tallyd under: perf and
#            valgrind (callgrind).
set -eu

BENCH=0
FUZZ=0
PROFILE=0
case ${1:-} in
'') ;;
--bench) BENCH=1 ;;
--fuzz) FUZZ=1 ;;
--profile) PROFILE=1 ;;
*) echo "usage: $0 [--bench|--fuzz|--profile]" >&2; exit 2 ;;
esac

PKGS="build-essential cmake pkg-config
librocksdb-dev libuv1-dev libhttp-parser-dev libjansson-dev libhiredis-dev
libxxhash-dev libcmocka-dev libssl-dev
redis-server redis-tools curl python3 strace"
if [ "$BENCH" -eq 1 ]; then
	PKGS="$PKGS postgresql-15 gnuplot-nox wrk"
fi
if [ "$FUZZ" -eq 1 ]; then
	PKGS="$PKGS clang libclang-rt-14-dev"
fi
if [ "$PROFILE" -eq 1 ]; then
	PKGS="$PKGS linux-perf valgrind"
fi

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
# Node.js (for the Node Redis client test) may come from elsewhere than
# Debian, with its own npm: only a machine without npm gets Debian's.
if ! command -v npm >/dev/null 2>&1; then
	missing="$missing nodejs npm"
fi
[ -z "$missing" ] && exit 0

echo "deps: installing$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO="sudo"
	else
		echo "deps: missing packages:$missing; run this script as root" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
