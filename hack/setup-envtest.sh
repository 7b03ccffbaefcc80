#!/usr/bin/env bash
# Builds the real control-plane binaries that the envtest suites run against
# (etcd, kube-apiserver, kubectl) and helm, from their Go modules: these
# machines reach package registries only, so nothing is downloaded prebuilt.
#
# Idempotent. The binaries live in a cache outside the clone, keyed by
# version, because CI starts every run from a fresh clone; bin/ gets links.
# A cold build takes about 10 minutes on 2 cores, a warm run under a second.
set -euo pipefail

ETCD_VERSION=v3.6.7
HELM_VERSION=v4.3.1

repo_root=$(cd "$(dirname "$0")/.." && pwd)
# K8S_VERSION, write_module, kubernetes_go_mod, k8s_version_ldflags.
source "$repo_root/hack/lib/kubernetes.sh"
cache_root=${WEIGHSTATION_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weighstation}
# "-stamped": kube-apiserver and kubectl carry their version (see
# k8s_version_ldflags); entries built before that report
# v0.0.0-master+$Format:%H$, so a new key makes a warm cache rebuild once.
k8s_dir=$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-stamped
helm_dir=$cache_root/helm-$HELM_VERSION
bin_dir=$repo_root/bin
mkdir -p "$k8s_dir" "$helm_dir" "$bin_dir/k8s"

log() { echo "setup-envtest: $*" >&2; }

build_etcd() {
  [ -x "$k8s_dir/etcd" ] && return 0
  local src=$cache_root/src/etcd-$ETCD_VERSION
  log "building etcd $ETCD_VERSION from go.etcd.io/etcd/server/v3 (about a minute)"
  write_module "$src" "module weighstation.local/etcdwrapper

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
  local body
  body=$(kubernetes_go_mod weighstation.local/k8stools)
  write_module "$src" "$body" 'package main

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

build_helm() {
  [ -x "$helm_dir/helm" ] && return 0
  local src=$cache_root/src/helm-$HELM_VERSION
  log "building helm $HELM_VERSION (about 3 minutes cold)"
  write_module "$src" "module weighstation.local/helmtool

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
