#!/bin/sh
# Writes a release's version into the packages published beside the Go
# module, from the release tag: `scripts/release-version.sh v1.4.0` sets
# 1.4.0 in the TypeScript client's package.json and package-lock.json and
# in the Python client's pyproject.toml. The Go module and the relay binary
# need nothing: Go takes their version from the tag itself.
#
# RELAY_ROOT names the tree to change (the clone holding this script by
# default), so that a test can run the script on a copy.
set -eu

usage="usage: scripts/release-version.sh vMAJOR.MINOR.PATCH[-PRERELEASE]"
tag=${1:-}
if [ -z "$tag" ] || [ $# -ne 1 ]; then
	echo "$usage" >&2
	exit 2
fi
if ! printf '%s\n' "$tag" | grep -Eq '^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z][0-9A-Za-z.-]*)?$'; then
	echo "error: $tag is not a release tag (v1.4.0, v2.0.0-rc.1); $usage" >&2
	exit 2
fi
version=${tag#v}
root=${RELAY_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}

ts="$root/sdk/typescript"
py="$root/sdk/python/pyproject.toml"
for f in "$ts/package.json" "$ts/package-lock.json" "$py"; do
	if [ ! -f "$f" ]; then
		echo "error: $f is missing" >&2
		exit 1
	fi
done

# npm rewrites both package.json and the lock file's own entries, and
# nothing else; it needs no registry for this.
(cd "$ts" && npm version --no-git-tag-version --allow-same-version "$version" >/dev/null)

# pyproject.toml has one version line in its [project] table.
if [ "$(grep -c '^version = ' "$py")" -ne 1 ]; then
	echo "error: $py should have exactly one 'version = ' line" >&2
	exit 1
fi
tmp="$py.tmp.$$"
sed "s/^version = .*/version = \"$version\"/" "$py" >"$tmp" && mv "$tmp" "$py"

echo "set version $version in sdk/typescript and sdk/python"
