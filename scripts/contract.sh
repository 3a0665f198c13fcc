#!/usr/bin/env bash
# Checks the contract in proto/ with buf, from a clean clone and offline once
# the Go modules are in the module cache:
#   - format: the protos are as `buf format` writes them;
#   - lint: buf's STANDARD rules (buf.yaml);
#   - build: the protos compile, google/api imports included;
#   - breaking: no change breaks callers of the recorded baseline
#     (baseline/contract.binpb), under buf's FILE rules (buf.yaml).
#
# `scripts/contract.sh baseline` records the current contract as the new
# baseline instead. Do that only when an incompatible change is meant to
# ship (a new major version, or the first release of something added since
# the baseline), in the same commit as the change, saying why: the
# baseline is what every later change is checked against.
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=baseline/contract.binpb
buf() { go tool -modfile=tools/go.mod buf "$@"; }

./scripts/third_party.sh

if [ "${1:-}" = "baseline" ]; then
	mkdir -p "$(dirname "$baseline")"
	# Comments do not matter to compatibility; leaving them out keeps the
	# baseline small and unchanged by documentation edits.
	buf build proto --exclude-source-info -o "$baseline"
	echo "contract: recorded $baseline"
	exit 0
fi

buf format --diff --exit-code proto
buf lint
buf build -o /dev/null
if [ ! -f "$baseline" ]; then
	echo "contract: $baseline is missing: run 'make contract-baseline' and commit it" >&2
	exit 1
fi
buf breaking proto --against "$baseline"
echo "contract: format, lint, build and breaking (against $baseline) passed"
