#!/usr/bin/env bash
# Counts the instructions of N requests through the relay with valgrind's
# callgrind, whose counts for the same binary and inputs stay within about
# 2 % however busy the machine is (wall-clock figures from a loaded
# machine mean little). It runs cmd/relay's TestInstructionDriver under callgrind and
# has callgrind count the measured requests alone (after a warm-up of
# 200), with GOGC=off so that garbage collection, which lands in one
# window and not the next, does not blur the comparison; what a request
# leaves to the collector shows in its allocations instead
# (TestRESTGetAllocations).
#
#   scripts/instructions.sh TEST_BINARY OP N [OUT]
#
# TEST_BINARY is built with `go test -c -o /tmp/relay.test ./cmd/relay`;
# OP is get, bare (the same bytes from a bare net/http handler) or update;
# OUT (default /tmp/instructions-OP) receives callgrind's dump of the
# measured requests (OUT.1, for callgrind_annotate). It prints the
# instructions per request.
set -euo pipefail
bin=$1 op=$2 n=$3 out=${4:-/tmp/instructions-$2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
rm -f "$out" "$out".*
RELAY_INSTR_WINDOW=$dir RELAY_INSTR_OP=$op RELAY_INSTR_N=$n GOGC=off GODEBUG=asyncpreemptoff=1 \
	valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" -test.run '^TestInstructionDriver$' >"$out.log" 2>&1 &
pid=$!
wait_for() {
	until [ -e "$dir/$1" ]; do
		kill -0 "$pid" 2>/dev/null || { echo "the driver ended early; see $out.log" >&2; exit 1; }
		sleep 0.05
	done
}
wait_for start
callgrind_control -z "$pid" >/dev/null 2>&1
touch "$dir/started"
wait_for stop
callgrind_control -d "$pid" >/dev/null 2>&1
touch "$dir/stopped"
wait "$pid" || { echo "the driver failed; see $out.log" >&2; exit 1; }
total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out.1")
echo "$op: $((total / n)) instructions per request ($total for $n)"
