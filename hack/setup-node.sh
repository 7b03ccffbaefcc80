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
# K8S_VERSION (the apiserver's), write_module, kubernetes_go_mod,
# k8s_version_ldflags.
source "$repo_root/hack/lib/kubernetes.sh"
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.15.0
# The node's NetworkPolicy enforcement: kube-router's firewall alone (see
# build_kube_router).
KUBE_ROUTER_VERSION=v2.1.0
# Prometheus 3.5 (its Go module's v0.305.0), for the observability story:
# Debian's (2.42) is built without Kubernetes service discovery.
PROMETHEUS_VERSION=v0.305.0
# What apt installs when missing, and the binary that says it is there.
DEBIAN_PACKAGES="runc:runc containernetworking-plugins:/usr/lib/cni/bridge iptables:iptables conntrack:conntrack iproute2:ip ipset:ipset"

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

build_kubernetes_node() {
  local b ok=1
  for b in kubelet kube-controller-manager kube-scheduler kube-proxy; do [ -x "$node_dir/$b" ] || ok=0; done
  [ $ok = 1 ] && return 0
  local src=$cache_root/src/kubernetes-node-$K8S_VERSION
  log "building kubelet, kube-controller-manager, kube-scheduler and kube-proxy $K8S_VERSION (about 5 minutes once the apiserver is built)"
  local body
  body=$(kubernetes_go_mod weighstation.local/k8snode)
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

# kube-router, of which hack/e2e-node.sh runs only the NetworkPolicy
# controller (--run-firewall; no routing, no service proxy), which enforces
# with iptables and ipset (Debian's ipset; the kernel's ip_set).
# kube-network-policies, the sig-network one, cannot run here: it queues
# packets with nftables' `queue` expression, and this kernel has no
# CONFIG_NFT_QUEUE (docs/development.md). Its own folder in the cache, so
# that a new version builds it alone; bin/node gets the link.
build_kube_router() {
  build_go_command kube-router "$KUBE_ROUTER_VERSION" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
    "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
}

# Prometheus, for the observability story: Debian's (2.42) is built without
# Kubernetes service discovery. Built without its web UI's assets, which
# the API does not need.
build_prometheus() {
  build_go_command prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/prometheus ""
}

# build_go_command NAME VERSION PACKAGE LDFLAGS: a static build of a
# command from its Go module, in a throw-away module, into a cache folder
# of its own (NAME-VERSION, so that a new version builds it alone), linked
# from bin/node.
build_go_command() {
  local name=$1 version=$2 pkg=$3 ldflags=$4
  local dir=$cache_root/$name-$version
  if [ ! -x "$dir/$name" ]; then
    local src=$cache_root/src/$name-$version
    log "building $name $version from $pkg (2 to 4 minutes)"
    write_module "$src" "module weighstation.local/${name//-/}tool

go 1.26" 'package main

func main() {}'
    mkdir -p "$dir"
    (cd "$src" && go get "$pkg@$version" &&
      CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$dir/$name" "$pkg")
  fi
  ln -sf "$dir/$name" "$bin_dir/$name"
}

"$repo_root/hack/setup-envtest.sh"
install_debian_packages
build_kubernetes_node
build_containerd
build_coredns
build_kube_router
build_prometheus

for b in kubelet kube-controller-manager kube-scheduler kube-proxy containerd ctr containerd-shim-runc-v2 coredns; do
  ln -sf "$node_dir/$b" "$bin_dir/$b"
done
log "ready: $bin_dir"
