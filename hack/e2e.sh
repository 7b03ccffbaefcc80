#!/usr/bin/env bash
# make e2e: weighstation's stories (test/e2e) on a real Kubernetes node.
#
#   hack/e2e.sh          on a single-node cluster built on this machine
#                        (hack/setup-node.sh, hack/e2e-node.sh): needs root
#   KUBECONFIG=... hack/e2e.sh
#                        against an existing cluster (kind, a real one): the
#                        node's setup and the destructive steps are skipped;
#                        the images must already be there (E2E_IMAGE_REPOSITORY
#                        and E2E_IMAGE_TAG of a pushed image, or the tarballs
#                        of bin/e2e-images loaded with `kind load image-archive`)
#
# Each phase prints its time. E2E_TEST_FLAGS adds flags to the test binary
# (e.g. -test.run 'TestStories/install').
set -euo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root"

E2E_IMAGE_TAG=${E2E_IMAGE_TAG:-e2e}
E2E_IMAGE_REPOSITORY=${E2E_IMAGE_REPOSITORY:-weighstation.local/weighstation}
images_dir=$repo_root/bin/e2e-images

phase() { # name command...
  local name=$1 t0=$SECONDS
  shift
  echo "e2e: phase $name" >&2
  "$@"
  echo "e2e: phase $name done in $((SECONDS - t0))s" >&2
}

build_test() {
  go test -c -tags e2e -o bin/e2e.test ./test/e2e
}

build_images() {
  mkdir -p "$images_dir"
  make --no-print-directory image-oci IMAGE_OCI="$images_dir/weighstation.tar" \
    IMAGE_OCI_TAG="$E2E_IMAGE_REPOSITORY:$E2E_IMAGE_TAG"
  make --no-print-directory image-oci-e2e
}

test_env=(
  E2E_CHART="$repo_root/charts/weighstation"
  E2E_IMAGE_REPOSITORY="$E2E_IMAGE_REPOSITORY"
  E2E_IMAGE_TAG="$E2E_IMAGE_TAG"
)

if [ -n "${KUBECONFIG:-}" ]; then
  echo "e2e: against the cluster of KUBECONFIG=$KUBECONFIG: no node setup, no destructive steps" >&2
  phase envtest-tools hack/setup-envtest.sh
  phase images build_images
  echo "e2e: the cluster must have these images already (kind: kind load image-archive FILE, for each): $(ls "$images_dir"/*.tar | tr '\n' ' ')" >&2
  phase test-binary build_test
  phase stories env "${test_env[@]}" E2E_PULL_POLICY="${E2E_PULL_POLICY:-IfNotPresent}" E2E_DESTRUCTIVE=false \
    E2E_KUBECTL="$repo_root/bin/kubectl" E2E_HELM="$repo_root/bin/helm" \
    bin/e2e.test -test.v -test.timeout 30m ${E2E_TEST_FLAGS:-}
  exit 0
fi

phase node-tools hack/setup-node.sh
phase images build_images
phase test-binary build_test
# The egress counters and the interfaces are printed when the node stops
# (hack/e2e-node.sh down), and a packet that left fails the run.
phase stories hack/e2e-node.sh run -- env "${test_env[@]}" E2E_PULL_POLICY=Never E2E_DESTRUCTIVE=true \
  E2E_KUBECTL="$repo_root/bin/kubectl" E2E_HELM="$repo_root/bin/helm" E2E_PROMETHEUS="$repo_root/bin/node/prometheus" \
  E2E_KILL_CONTAINER_CMD="$repo_root/bin/node/ctr --address /run/containerd/containerd.sock -n k8s.io tasks kill -s SIGKILL {id}" \
  bin/e2e.test -test.v -test.timeout 30m ${E2E_TEST_FLAGS:-}
