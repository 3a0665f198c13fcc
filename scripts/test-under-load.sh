#!/usr/bin/env bash
# Runs the cluster and stream tests RUNS times in a row under the race
# detector while busy loops keep every core occupied, and stops at the
# first failing run. The suite must not depend on a quiet machine: this is
# how that is checked. Each run's log goes to LOGDIR/run-N.log, and the
# one-minute load average is printed before and after each run.
set -euo pipefail

runs=${RUNS:-10}
pkgs=${PKGS:-./cluster/... ./cmd/relay/ ./link/ ./netlimit/ ./world/events/ ./world/script/}
logdir=${LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/relay-load.XXXXXX")}
busy=${BUSY:-$(nproc)}
mkdir -p "$logdir"

loops=()
stop_loops() {
	if ((${#loops[@]})); then kill "${loops[@]}" 2>/dev/null || true; fi
}
trap stop_loops EXIT
for ((i = 0; i < busy; i++)); do
	sh -c 'while :; do :; done' &
	loops+=($!)
done

load() { cut -d' ' -f1 /proc/loadavg; }

echo "$busy busy loops; $runs runs of: go test -race -count=1 $pkgs; logs in $logdir"
# Build the test binaries once, so that every run measures the tests and
# not the compiler.
# shellcheck disable=SC2086
go test -race -count=1 -run '^$' $pkgs >/dev/null
for ((n = 1; n <= runs; n++)); do
	before=$(load)
	start=$SECONDS
	# shellcheck disable=SC2086
	if go test -race -count=1 -timeout 30m $pkgs >"$logdir/run-$n.log" 2>&1; then
		echo "run $n/$runs passed in $((SECONDS - start)) s (load average $before before, $(load) after)"
	else
		echo "run $n/$runs FAILED after $((SECONDS - start)) s (load average $before before, $(load) after):"
		grep -E -- '^(--- FAIL|FAIL|panic:)|_test\.go:[0-9]+:' "$logdir/run-$n.log" | head -40
		exit 1
	fi
done
echo "all $runs runs passed"
