#!/usr/bin/env bash
# Generates the Python gRPC stubs of the relay's protos into sdk/python/gen
# (git-ignored): relay/v1/*_pb2.py and *_pb2_grpc.py, and the google/api
# protos they import. It uses Debian's protoc (protobuf-compiler) and its
# gRPC Python plugin (protobuf-compiler-grpc), whose protobuf version
# matches Debian's python3-protobuf; the google/api protos come from Go
# modules, as for the Go code (scripts/third_party.sh). The stubs are made
# at build time and not committed: code from one protoc needs a protobuf
# runtime of its own age, so stubs made on one machine need not import on
# another, while the Go stubs are committed because their generators are
# pinned in go.mod.
set -euo pipefail
cd "$(dirname "$0")/../.."

plugin=$(command -v grpc_python_plugin || true)
if ! command -v protoc >/dev/null || [ -z "$plugin" ]; then
	echo "sdk/python: protoc and grpc_python_plugin are needed (apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2
	exit 1
fi
[ -f third_party/google/api/annotations.proto ] || ./scripts/third_party.sh
out=sdk/python/gen
rm -rf "$out"
mkdir -p "$out"
protoc -I proto -I third_party \
	--python_out="$out" --grpc_python_out="$out" --plugin=protoc-gen-grpc_python="$plugin" \
	proto/relay/v1/*.proto third_party/google/api/annotations.proto third_party/google/api/http.proto \
	third_party/google/api/field_behavior.proto
