#!/usr/bin/env bash
# Builds and installs everything a real single-node cluster needs on this
# machine (hack/e2e-node.sh runs it): the node's Kubernetes binaries
# (kubelet, kube-controller-manager, kube-scheduler, kube-proxy) from the
# same k8s.io/kubernetes version as the apiserver that hack/setup-envtest.sh
# builds, containerd 2 and CoreDNS from their Go modules, and runc, the CNI
# plugins, iptables and conntrack from Debian's packages.
#
# Idempotent, the same shape as hack/setup-envtest.sh (which it runs first):
# binaries live in a cache outside the clone, keyed by version, and bin/node
# gets links. Cold: about 8 minutes on 2 cores once the apiserver's build
# cache is warm; warm: under a second.
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
# One source for the Kubernetes version: the apiserver's.
K8S_VERSION=$(sed -n 's/^K8S_VERSION=//p' "$repo_root/hack/setup-envtest.sh")
K8S_STAGING_VERSION=$(sed -n 's/^K8S_STAGING_VERSION=//p' "$repo_root/hack/setup-envtest.sh")
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.15.0
# What apt installs when missing, and the binary that says it is there.
DEBIAN_PACKAGES="runc:runc containernetworking-plugins:/usr/lib/cni/bridge iptables:iptables conntrack:conntrack iproute2:ip"

cache_root=${WEIGHSTATION_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weighstation}
node_dir=$cache_root/node-k8s-$K8S_VERSION-containerd-$CONTAINERD_VERSION-coredns-$COREDNS_VERSION
bin_dir=$repo_root/bin/node
mkdir -p "$node_dir" "$bin_dir"

log() { echo "setup-node: $*" >&2; }

install_debian_packages() {
  local missing="" entry pkg probe
  for entry in $DEBIAN_PACKAGES; do
    pkg=${entry%%:*} probe=${entry#*:}
    if [[ $probe == /* ]]; then [ -e "$probe" ] && continue
    else command -v "$probe" >/dev/null 2>&1 && continue; fi
    missing+=" $pkg"
  done
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    log "missing Debian packages:$missing; install them as root (apt-get install$missing) or run this as root"
    exit 1
  fi
  log "installing Debian packages:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
}

# A throw-away module per tool, as in setup-envtest.sh: k8s.io/kubernetes
# and containerd carry replace directives that `go install pkg@v` refuses.
write_module() { # dir go.mod-body main.go-body
  mkdir -p "$1"
  printf '%s\n' "$2" >"$1/go.mod"
  printf '%s\n' "$3" >"$1/main.go"
}

build_kubernetes_node() {
  local b ok=1
  for b in kubelet kube-controller-manager kube-scheduler kube-proxy; do [ -x "$node_dir/$b" ] || ok=0; done
  [ $ok = 1 ] && return 0
  local src=$cache_root/src/kubernetes-node-$K8S_VERSION
  log "building kubelet, kube-controller-manager, kube-scheduler and kube-proxy $K8S_VERSION (about 5 minutes once the apiserver is built)"
  local staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming"
  local body="module weighstation.local/k8snode

go 1.26

require k8s.io/kubernetes $K8S_VERSION
" m
  for m in $staging; do body+="
replace k8s.io/$m => k8s.io/$m $K8S_STAGING_VERSION"; done
  # The app packages, so that `go mod tidy` records every module the four
  # commands need.
  write_module "$src" "$body" 'package main

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-proxy/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {}'
  (cd "$src" && go mod tidy &&
    go build -ldflags "$(k8s_version_ldflags)" -o "$node_dir/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy)
}

# The version stamp Kubernetes' own build gives (see setup-envtest.sh): the
# kubelet reports it as the node's version, which the apiserver compares.
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

build_containerd() {
  [ -x "$node_dir/containerd" ] && [ -x "$node_dir/ctr" ] && [ -x "$node_dir/containerd-shim-runc-v2" ] && return 0
  local src=$cache_root/src/containerd-$CONTAINERD_VERSION
  log "building containerd $CONTAINERD_VERSION (about 2 minutes)"
  write_module "$src" "module weighstation.local/containerdtool

go 1.26" 'package main

func main() {}'
  # Debian's containerd 1.6 lacks the CRI RuntimeConfig call kubelet 1.37
  # uses; 2.x has it. The snapshotters this node does not use (btrfs,
  # devmapper, zfs, erofs) are left out: they need headers or kernel
  # features this machine does not have.
  local pkgs="github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
  (cd "$src" && go get $(for p in $pkgs; do echo "$p@$CONTAINERD_VERSION"; done) &&
    CGO_ENABLED=0 go build -tags "no_btrfs no_devmapper no_zfs no_erofs no_cri_dockerd" -o "$node_dir/" $pkgs)
}

build_coredns() {
  [ -x "$node_dir/coredns" ] && return 0
  local src=$cache_root/src/coredns-$COREDNS_VERSION
  log "building CoreDNS $COREDNS_VERSION (about 2 minutes)"
  write_module "$src" "module weighstation.local/corednstool

go 1.26" 'package main

func main() {}'
  (cd "$src" && go get "github.com/coredns/coredns@$COREDNS_VERSION" &&
    CGO_ENABLED=0 go build -o "$node_dir/coredns" github.com/coredns/coredns)
}

"$repo_root/hack/setup-envtest.sh"
install_debian_packages
build_kubernetes_node
build_containerd
build_coredns

for b in kubelet kube-controller-manager kube-scheduler kube-proxy containerd ctr containerd-shim-runc-v2 coredns; do
  ln -sf "$node_dir/$b" "$bin_dir/$b"
done
log "ready: $bin_dir"
