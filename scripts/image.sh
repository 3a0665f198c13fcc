#!/usr/bin/env bash
# Builds the container image (Containerfile) from the binary the checks
# ran, with Debian's buildah; containers are not run here.
#   1. the static binary: CGO_ENABLED=0, the commit stamped by Go;
#   2. that binary, started as the image starts it (its RELAY_* settings,
#      a fresh /data), answers `relay health` (/healthz and /readyz);
#   3. buildah builds the image from it; its configuration (non-root
#      user, /data volume, health check, entrypoint) is checked, and the
#      binary inside is compared with the one that ran.
# The image is tagged localhost/relay:dev (IMAGE overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${IMAGE:-localhost/relay:dev}
ctx=bin/image
rm -rf "$ctx"
mkdir -p "$ctx/data"
chmod 0700 "$ctx/data"
CGO_ENABLED=0 GOFLAGS=-buildvcs=auto go build -o "$ctx/relay" ./cmd/relay
# Go records how it built the binary; without cgo it links statically.
if ! go version -m "$ctx/relay" | grep -q 'CGO_ENABLED=0'; then
	echo "image: $ctx/relay was built with cgo, so it is not static" >&2
	exit 1
fi
"$ctx/relay" --version

# 2. Run it as the image would, on a free loopback port.
tmp=$(mktemp -d)
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RELAY_LISTEN=127.0.0.1:$port RELAY_DATA=$tmp/data RELAY_LOG_FORMAT=json "$ctx/relay" serve >/dev/null 2>"$tmp/log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
for _ in $(seq 1 150); do
	RELAY_ADDR=127.0.0.1:$port "$ctx/relay" health >/dev/null 2>&1 && break
	sleep 0.2
done
RELAY_ADDR=127.0.0.1:$port "$ctx/relay" health

# 3. The image.
# The previous build of this tag goes, so that builds do not pile up.
buildah rmi "$image" >/dev/null 2>&1 || true
buildah bud --quiet --format docker -f Containerfile -t "$image" "$ctx" >/dev/null
config=$(buildah inspect --type image "$image")
/usr/bin/python3 - "$config" <<'PY'
import json, sys
c = json.loads(sys.argv[1])["Docker"]["config"]
problems = []
if c.get("User") in (None, "", "0", "root") or c["User"].startswith("0:"):
    problems.append("runs as root: %r" % c.get("User"))
if "/data" not in (c.get("Volumes") or {}):
    problems.append("no /data volume")
if (c.get("Healthcheck") or {}).get("Test") != ["CMD", "/relay", "health"]:
    problems.append("health check %r" % c.get("Healthcheck"))
if c.get("Entrypoint") != ["/relay"] or c.get("Cmd") != ["serve"]:
    problems.append("entrypoint %r %r" % (c.get("Entrypoint"), c.get("Cmd")))
env = dict(e.split("=", 1) for e in c.get("Env") or [])
if env.get("RELAY_DATA") != "/data" or not env.get("RELAY_LISTEN", "").startswith("0.0.0.0:"):
    problems.append("environment %r" % env)
if problems:
    sys.exit("image: " + "; ".join(problems))
PY
container=$(buildah from "$image")
mnt=$(buildah mount "$container")
same=0
cmp -s "$mnt/relay" "$ctx/relay" && same=1
buildah umount "$container" >/dev/null
buildah rm "$container" >/dev/null
if [ "$same" != 1 ]; then
	echo "image: the binary in $image is not the one that ran" >&2
	exit 1
fi
echo "image: built $image from the binary that ran"
