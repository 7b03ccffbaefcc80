#!/usr/bin/env bash
# Builds the weighstation-sidecar binary of another commit, for benches
# that compare two builds side by side (make bench-sidecar BASE=<commit>):
#
#   hack/build-base-sidecar.sh COMMIT OUT
#
# The commit is checked out into a temporary git worktree, built there
# (the module and build caches are shared, so a warm build takes seconds)
# and the worktree removed; this clone's work tree is not touched.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -ne 2 ]; then
	echo "usage: $0 COMMIT OUT" >&2
	exit 2
fi
commit=$1 out=$(realpath -m "$2")
rev=$(git rev-parse --verify "$commit^{commit}")
dir=$(mktemp -d)
trap 'git worktree remove --force "$dir" >/dev/null 2>&1 || rm -rf "$dir"; git worktree prune' EXIT
git worktree add --detach "$dir" "$rev" >/dev/null
mkdir -p "$(dirname "$out")"
(cd "$dir" && CGO_ENABLED=0 go build -trimpath -o "$out" ./cmd/weighstation-sidecar)
echo "built the sidecar of $(git log -1 --format='%h %s' "$rev" | cut -c1-80) into $out" >&2
