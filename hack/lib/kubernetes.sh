# Sourced by hack/setup-envtest.sh (the apiserver, kubectl) and
# hack/setup-node.sh (the node's binaries): one Kubernetes version for both,
# and how its commands are built from k8s.io/kubernetes, whose go.mod
# replaces every staging repository (so `go install pkg@version` refuses
# it) and whose version stamp comes from its own build scripts.

K8S_VERSION=v1.37.0
K8S_STAGING_VERSION=v0.37.0

# write_module DIR GO.MOD-BODY [MAIN.GO-BODY]: a throw-away module to build in.
write_module() {
  mkdir -p "$1"
  printf '%s\n' "$2" >"$1/go.mod"
  if [ -n "${3:-}" ]; then printf '%s\n' "$3" >"$1/main.go"; fi
}

# kubernetes_go_mod MODULE-NAME: a go.mod that requires k8s.io/kubernetes
# with every staging repository replaced at its matching version.
kubernetes_go_mod() {
  local staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming"
  local body="module $1

go 1.26

require k8s.io/kubernetes $K8S_VERSION
" m
  for m in $staging; do body+="
replace k8s.io/$m => k8s.io/$m $K8S_STAGING_VERSION"; done
  printf '%s' "$body"
}

# What Kubernetes' own build (hack/lib/version.sh) stamps: without it the
# binaries say v0.0.0-master+$Format:%H$, which `kubectl version` cannot
# parse, which fails every chart's kubeVersion constraint, and which the
# kubelet reports as the node's version. The server's version comes from
# component-base, the clients' from client-go. No git checkout here: the
# commit is unknown (left empty), the tree state is "archive" (what
# version.sh says for a source archive), and the build date is the module's
# publication time, so rebuilds are reproducible. Runs in the module
# directory (go list needs its go.mod).
k8s_version_ldflags() {
  local major minor date flags="" pkg
  major=${K8S_VERSION#v}
  major=${major%%.*}
  minor=${K8S_VERSION#v*.}
  minor=${minor%%.*}
  date=$(go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=archive -X $pkg.buildDate=$date"
  done
  echo "${flags# }"
}
