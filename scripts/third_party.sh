#!/usr/bin/env bash
# Fills the git-ignored third_party/ module that buf reads beside proto/ with
# the google/api protos the contract imports, from Go modules only (nothing
# of googleapis is committed):
#   - annotations.proto, http.proto and httpbody.proto from grpc-gateway
#     v1.16.0's module source (its third_party/googleapis/), fetched through
#     the Go module proxy and checked against the Go checksum database;
#   - field_behavior.proto printed by scripts/googleapis from the descriptor
#     compiled into the genproto module that go.mod pins (no Go module
#     carries it as source).
set -euo pipefail
cd "$(dirname "$0")/.."

googleapis_module=github.com/grpc-ecosystem/grpc-gateway@v1.16.0
dir=$(cd tools && go mod download -json "$googleapis_module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ]; then
	echo "third_party: could not download $googleapis_module" >&2
	exit 1
fi
rm -rf third_party
mkdir -p third_party/google/api
for f in annotations.proto http.proto httpbody.proto; do
	install -m 0644 "$dir/third_party/googleapis/google/api/$f" third_party/google/api/
done
go run ./scripts/googleapis third_party
