#!/usr/bin/env bash
# Fails when `make generate` would change any generated file: the CRDs, the
# RBAC role, the chart's CRD and RBAC templates (hack/chartgen), the
# deepcopy code, the protobuf Go code, go.mod/go.sum and the tools module's
# tools/go.mod/tools/go.sum. It compares checksums
# before and after generating (rather than asking git), so it also holds in
# a working tree with uncommitted changes.
set -euo pipefail
cd "$(dirname "$0")/.."

generated() {
  find config/crd config/rbac charts/weighstation/templates/generated -type f 2>/dev/null
  find api -name 'zz_generated.*.go' -o -name '*.pb.go'
  echo go.mod
  echo go.sum
  echo tools/go.mod
  echo tools/go.sum
}
snapshot() { generated | sort | xargs sha256sum; }

before=$(snapshot)
make --no-print-directory generate >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "verify-generate: 'make generate' changed generated files; run it and commit the result:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
echo "verify-generate: generated files are up to date"
