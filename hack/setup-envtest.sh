#!/usr/bin/env bash
# Builds the real control-plane binaries that the envtest suites run against
# (etcd, kube-apiserver, kubectl) and helm, from their Go modules: these
# machines reach package registries only, so nothing is downloaded prebuilt.
#
# Idempotent. The binaries live in a cache outside the clone, keyed by
# version, because CI starts every run from a fresh clone; bin/ gets links.
# A cold build takes about 10 minutes on 2 cores, a warm run under a second.
set -euo pipefail

K8S_VERSION=v1.37.0
K8S_STAGING_VERSION=v0.37.0
ETCD_VERSION=v3.6.7
HELM_VERSION=v4.3.1

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${WEIGHSTATION_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weighstation}
# "-stamped": kube-apiserver and kubectl carry their version (see
# k8s_version_ldflags); entries built before that report
# v0.0.0-master+$Format:%H$, so a new key makes a warm cache rebuild once.
k8s_dir=$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-stamped
helm_dir=$cache_root/helm-$HELM_VERSION
bin_dir=$repo_root/bin
mkdir -p "$k8s_dir" "$helm_dir" "$bin_dir/k8s"

log() { echo "setup-envtest: $*" >&2; }

# A module of its own per tool: etcd's and kubernetes' modules carry replace
# directives, which `go install pkg@version` refuses.
build_in_module() { # dir module-name go.mod-body main-go-body(optional)
  local dir=$1 body=$2 main=${3:-}
  mkdir -p "$dir"
  printf '%s\n' "$body" >"$dir/go.mod"
  if [ -n "$main" ]; then printf '%s\n' "$main" >"$dir/main.go"; fi
}

build_etcd() {
  [ -x "$k8s_dir/etcd" ] && return 0
  local src=$cache_root/src/etcd-$ETCD_VERSION
  log "building etcd $ETCD_VERSION from go.etcd.io/etcd/server/v3 (about a minute)"
  build_in_module "$src" "module weighstation.local/etcdwrapper

go 1.26" 'package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }'
  if (cd "$src" && go get go.etcd.io/etcd/server/v3@$ETCD_VERSION && go mod tidy && go build -o "$k8s_dir/etcd" .); then
    return 0
  fi
  log "building etcd failed; falling back to Debian's etcd-server"
  if ! command -v etcd >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server
  fi
  ln -sf "$(command -v etcd)" "$k8s_dir/etcd"
}

build_kubernetes() {
  [ -x "$k8s_dir/kube-apiserver" ] && [ -x "$k8s_dir/kubectl" ] && return 0
  local src=$cache_root/src/kubernetes-$K8S_VERSION
  log "building kube-apiserver and kubectl $K8S_VERSION (about 9 minutes cold)"
  local staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming"
  local body="module weighstation.local/k8stools

go 1.26

require k8s.io/kubernetes $K8S_VERSION
"
  for m in $staging; do body+="
replace k8s.io/$m => k8s.io/$m $K8S_STAGING_VERSION"; done
  build_in_module "$src" "$body" 'package main

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubectl/pkg/cmd"
)

func main() {}'
  (cd "$src" && go mod tidy &&
    ldflags=$(k8s_version_ldflags) &&
    go build -ldflags "$ldflags" -o "$k8s_dir/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver &&
    go build -ldflags "$ldflags" -o "$k8s_dir/kubectl" k8s.io/kubernetes/cmd/kubectl)
}

# What Kubernetes' own build (hack/lib/version.sh) stamps: without it both
# binaries say v0.0.0-master+$Format:%H$, which `kubectl version` cannot
# parse and which fails every chart's kubeVersion constraint. The server's
# version comes from component-base, kubectl's client side from client-go.
# No git checkout here: the commit is unknown (left empty), the tree state
# is "archive" (what version.sh says for a source archive), and the build
# date is the module's publication time, so rebuilds are reproducible.
# Runs in the module directory (go list needs its go.mod).
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

build_helm() {
  [ -x "$helm_dir/helm" ] && return 0
  local src=$cache_root/src/helm-$HELM_VERSION
  log "building helm $HELM_VERSION (about 3 minutes cold)"
  build_in_module "$src" "module weighstation.local/helmtool

go 1.26" 'package main

import _ "helm.sh/helm/v4/pkg/cmd"

func main() {}'
  (cd "$src" && go get helm.sh/helm/v4@$HELM_VERSION && go mod tidy && go build -o "$helm_dir/helm" helm.sh/helm/v4/cmd/helm)
}

build_etcd
build_kubernetes
build_helm

for b in etcd kube-apiserver kubectl; do ln -sf "$k8s_dir/$b" "$bin_dir/k8s/$b"; done
ln -sf "$helm_dir/helm" "$bin_dir/helm"
ln -sf "$k8s_dir/kubectl" "$bin_dir/kubectl"
log "ready: KUBEBUILDER_ASSETS=$bin_dir/k8s"
