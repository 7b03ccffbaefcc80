#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, in a network
# namespace of its own with no route out, for `make e2e`.
#
#   hack/e2e-node.sh run -- CMD...  start, run CMD inside, stop (CMD's status)
#   hack/e2e-node.sh up             start and leave it running
#   hack/e2e-node.sh exec CMD...    run CMD inside the running cluster
#   hack/e2e-node.sh down           stop it and remove everything it made
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
# the kubelet, kube-proxy, CoreDNS and every pod live in one network
# namespace ($E2E_NETNS) that holds only lo, the CNI bridge and the pods'
# veths, with no default route: the node's address, the pod range and the
# service range exist only inside it, and a counter in the namespace's
# mangle table counts (and drops) any packet to an address outside them.
# The components share one private mount namespace (the kubelet's mounts
# must be visible to runc), with private /run, /var/lib/kubelet,
# /var/lib/cni and /var/log, so nothing they mount reaches the host and all
# of it goes when the last of them ends.
#
# Started and stopped by PID; a start first clears what an interrupted run
# left (processes in the namespace or in its pods' cgroups, the namespace,
# the state folder). It refuses to start on a machine without root or the
# kernel features, naming what is missing.
#
# The images come from OCI tarballs ($E2E_IMAGES: a folder of *.tar, which
# `make image-oci image-oci-e2e` writes), imported into containerd: nothing
# is pulled.
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
self=$repo_root/hack/e2e-node.sh
E2E_NETNS=${E2E_NETNS:-weighstation-e2e}
E2E_STATE=${E2E_STATE:-/var/tmp/$E2E_NETNS}
E2E_IMAGES=${E2E_IMAGES:-$repo_root/bin/e2e-images}
NODE_BIN=${NODE_BIN:-$repo_root/bin/node}
K8S_BIN=${K8S_BIN:-$repo_root/bin/k8s}
# The node's address (on lo: this kernel has no dummy interface), the pod
# range (the controller manager gives the node POD_CIDR's first /24) and
# the service range; none of them is routed anywhere outside.
NODE_NAME=weighstation-e2e-node
NODE_IP=10.255.0.1
POD_CIDR=10.244.0.0/16
NODE_POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
# How long the cluster may take to come up (seconds).
START_TIMEOUT=${E2E_START_TIMEOUT:-180}
# The kernel settings the kubelet changes globally, restored at the end.
# And net/netfilter/nf_log_all_netns, which this script turns on so that
# the egress counter's LOG rule (inside the namespace) names what it drops.
KERNEL_TUNABLES="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/netfilter/nf_log_all_netns"

log() { echo "e2e-node: $(date +%T) $*" >&2; }
die() { log "$*"; exit 1; }

# --- preflight -------------------------------------------------------------

preflight() {
  local missing=() b
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, mounts, cgroups); run it as root"
  for b in ip nsenter unshare mount umount flock iptables openssl runc conntrack; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  for b in etcd kube-apiserver kubectl; do [ -x "$K8S_BIN/$b" ] || missing+=("$K8S_BIN/$b (hack/setup-envtest.sh)"); done
  for b in kubelet kube-controller-manager kube-scheduler kube-proxy containerd ctr containerd-shim-runc-v2 coredns; do
    [ -x "$NODE_BIN/$b" ] || missing+=("$NODE_BIN/$b (hack/setup-node.sh)")
  done
  # kube-router (NetworkPolicy) and what it runs: ipset, the legacy iptables.
  [ -x "$NODE_BIN/kube-router" ] || missing+=("$NODE_BIN/kube-router (hack/setup-node.sh)")
  for b in ipset xtables-legacy-multi; do command -v "$b" >/dev/null 2>&1 || missing+=("$b (apt-get install ipset iptables)"); done
  [ -x /usr/lib/cni/bridge ] || missing+=("the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)")
  [ ${#missing[@]} = 0 ] || die "missing: ${missing[*]}"
  grep -qw overlay /proc/filesystems || die "the kernel lacks overlayfs (CONFIG_OVERLAY_FS), which containerd's snapshotter needs"
  for b in cpu cpuacct cpuset memory pids; do
    [ -d /sys/fs/cgroup/$b ] || [ -f /sys/fs/cgroup/cgroup.controllers ] ||
      die "the cgroup controller $b is not mounted under /sys/fs/cgroup (the kubelet needs cpu, cpuacct, cpuset, memory, pids)"
  done
  # bridge, veth and br_netfilter, tried in a scratch namespace.
  local probe=weighstation-e2e-probe-$$
  ip netns add "$probe" || die "cannot create a network namespace (ip netns add)"
  local ok=1
  ip -n "$probe" link add wse2eprobe0 type bridge 2>/dev/null || { ok=0; log "the kernel lacks bridge (CONFIG_BRIDGE)"; }
  ip -n "$probe" link add wse2eprobe1 type veth peer name wse2eprobe2 2>/dev/null || { ok=0; log "the kernel lacks veth (CONFIG_VETH)"; }
  ip netns exec "$probe" test -e /proc/sys/net/bridge/bridge-nf-call-iptables || { ok=0; log "the kernel lacks br_netfilter (CONFIG_BRIDGE_NETFILTER)"; }
  ip netns del "$probe"
  [ $ok = 1 ] || die "missing kernel features (above)"
}

# --- cleanup of this or an interrupted run ---------------------------------

# Every process of the cluster: those in its network namespace (the
# components and the shims) and those in its pods' cgroups (the
# containers, which have namespaces of their own).
cluster_pids() {
  { ip netns pids "$E2E_NETNS" 2>/dev/null || true
    local f
    for f in $(find /sys/fs/cgroup/*/"$E2E_NETNS" -name cgroup.procs 2>/dev/null); do cat "$f" 2>/dev/null; done
    [ -f "$E2E_STATE/supervisor.pid" ] && cat "$E2E_STATE/supervisor.pid"
  } | sort -un | grep -v "^$$\$" || true
}

kill_cluster_processes() {
  local pids i sup
  # The supervisor first: it stops the kubelet before the pods and the
  # rest in reverse order of start.
  sup=$(cat "$E2E_STATE/supervisor.pid" 2>/dev/null || true)
  if [ -n "$sup" ] && kill -TERM "$sup" 2>/dev/null; then
    for i in $(seq 200); do kill -0 "$sup" 2>/dev/null || break; sleep 0.1; done
  fi
  pids=$(cluster_pids)
  [ -z "$pids" ] && return 0
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 50); do
    pids=$(for p in $pids; do if [ -d /proc/$p ]; then echo "$p"; fi; done)
    [ -z "$pids" ] && return 0
    sleep 0.1
  done
  kill -KILL $pids 2>/dev/null || true
  for i in $(seq 50); do
    pids=$(cluster_pids)
    [ -z "$pids" ] && return 0
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  die "processes still running after SIGKILL: $pids"
}

remove_pod_cgroups() {
  local d
  # Deepest first: a cgroup goes only once its children have.
  for d in $(find /sys/fs/cgroup/*/"$E2E_NETNS" -depth -type d 2>/dev/null); do rmdir "$d" 2>/dev/null || true; done
}

restore_kernel_tunables() {
  [ -f "$E2E_STATE/kernel-tunables" ] || return 0
  local name value
  while read -r name value; do
    echo "$value" >"/proc/sys/$name" 2>/dev/null || log "could not restore $name to $value"
  done <"$E2E_STATE/kernel-tunables"
}

teardown() {
  kill_cluster_processes
  remove_pod_cgroups
  restore_kernel_tunables
  ip netns del "$E2E_NETNS" 2>/dev/null || true
  # Nothing of ours may stay mounted on the host (all our mounts were in
  # the private namespace, gone with its last process).
  if grep -q "$E2E_STATE\|/run/netns/$E2E_NETNS" /proc/self/mountinfo; then
    grep "$E2E_STATE\|/run/netns/$E2E_NETNS" /proc/self/mountinfo >&2
    die "mounts left behind (above)"
  fi
  rm -f "$E2E_STATE/supervisor.pid" "$E2E_STATE/ready" "$E2E_STATE/failed"
}

# --- certificates and configuration ----------------------------------------

make_certs() {
  local pki=$E2E_STATE/pki
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=weighstation-e2e-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  # name CN O SANs (comma list, empty for a client)
  local spec name cn o sans
  for spec in \
    "apiserver|kube-apiserver||IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    "apiserver-kubelet-client|kube-apiserver-kubelet-client|system:masters|" \
    "admin|weighstation-e2e-admin|system:masters|" \
    "controller-manager|system:kube-controller-manager||" \
    "scheduler|system:kube-scheduler||" \
    "kube-proxy|system:kube-proxy||" \
    "coredns|weighstation-e2e-coredns|system:masters|" \
    "kubelet-client|system:node:$NODE_NAME|system:nodes|" \
    "kubelet-serving|$NODE_NAME||IP:$NODE_IP,DNS:$NODE_NAME"; do
    IFS='|' read -r name cn o sans <<<"$spec"
    local subj="/CN=$cn"
    [ -n "$o" ] && subj="/O=$o/CN=$cn"
    openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
    local ext=$pki/$name.ext
    if [ -n "$sans" ]; then
      printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" >"$ext"
    else
      printf 'extendedKeyUsage=clientAuth\n' >"$ext"
    fi
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 2 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
  done
  for name in admin controller-manager scheduler kube-proxy coredns kubelet-client; do
    write_kubeconfig "$E2E_STATE/$name.kubeconfig" "$pki/$name"
  done
  cp "$E2E_STATE/admin.kubeconfig" "$E2E_STATE/kubeconfig"
}

write_kubeconfig() { # file cert-prefix
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$E2E_STATE/pki/ca.crt"}
users:
- name: e2e
  user: {client-certificate: "$2.crt", client-key: "$2.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
EOF
}

write_configs() {
  local s=$E2E_STATE
  mkdir -p "$s/cni/net.d" "$s/containerd/root" "$s/volume-plugins"
  cat >"$s/cni/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "weighstation-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NODE_POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # containerd 2: the CRI's runtime on runc with cgroupfs; no oom_score_adj
  # below the containerd's own (root here may not set a negative one, and
  # the pause container's -998 failed every sandbox); the pause image
  # imported, pinned, never pulled.
  cat >"$s/containerd/config.toml" <<EOF
version = 3
root = "$s/containerd/root"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$s/cni/net.d"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.10"
EOF
  cat >"$s/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$s/pki/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$s/pki/kubelet-serving.crt"
tlsPrivateKeyFile: "$s/pki/kubelet-serving.key"
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
# The pods' cgroups under a root of this cluster's own, which the teardown
# sweeps and removes, away from anything else on the machine.
cgroupRoot: /$E2E_NETNS
failCgroupV1: false
failSwapOn: false
resolvConf: ""
clusterDNS: ["$NODE_IP"]
clusterDomain: cluster.local
volumePluginDir: "$s/volume-plugins"
# Imported images cannot be pulled back: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 87600h
# The disk is shared with the tests: evict only when nearly full.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
maxPods: 110
EOF
  cat >"$s/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$s/kube-proxy.kubeconfig"}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# The namespace's conntrack table is the kernel's; leave its size alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
  cat >"$s/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $s/coredns.kubeconfig e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
  # kube-router enforces NetworkPolicy with iptables and ipset. It rewrites
  # the whole filter table (iptables-save, then iptables-restore without
  # --noflush) on every change, which would undo a kube-proxy sync that fell
  # in between: so its iptables, iptables-save and iptables-restore are the
  # legacy ones (its own filter table, which the kernel runs beside
  # kube-proxy's nf_tables one), first on its PATH.
  mkdir -p "$s/kube-router/bin"
  local b
  for b in iptables iptables-save iptables-restore; do ln -sf "$(command -v xtables-legacy-multi)" "$s/kube-router/bin/$b"; done
}

# --- inside the namespaces -------------------------------------------------

# Mounts private to the cluster: /run (containerd's state, the pods'
# network namespace pins), the kubelet's and CNI's fixed paths, /var/log
# (pod logs), and a sysfs of this network namespace with the host's cgroup
# hierarchies moved back under it.
setup_mounts() {
  local s=$E2E_STATE d
  mkdir -p "$s/mnt/cgroup" "$s/var-lib-kubelet" "$s/var-lib-cni" "$s/var-log"
  mount --make-rprivate /
  mount --rbind /sys/fs/cgroup "$s/mnt/cgroup"
  mount -t sysfs sysfs /sys
  mount --rbind "$s/mnt/cgroup" /sys/fs/cgroup
  umount -l "$s/mnt/cgroup"
  mount -t tmpfs -o mode=755 tmpfs /run
  mkdir -p /run/netns /run/containerd
  for d in /var/lib/kubelet /var/lib/cni /var/log; do mkdir -p "$d"; done
  mount --bind "$s/var-lib-kubelet" /var/lib/kubelet
  mount --make-rshared /var/lib/kubelet
  mount --bind "$s/var-lib-cni" /var/lib/cni
  mount --bind "$s/var-log" /var/log
}

setup_network() {
  ip link set lo up
  ip addr add "$NODE_IP/32" dev lo
  # A connect() to a ClusterIP from the namespace itself (the apiserver
  # calling a webhook's Service) needs a route before kube-proxy's DNAT.
  ip route add "$SERVICE_CIDR" dev lo
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
  sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  # The proof that nothing leaves: every packet to an address outside the
  # node's, the pods' and the services' ranges (and loopback) is counted
  # and dropped, whether a pod sends it (PREROUTING) or a component
  # (OUTPUT). With no default route nothing should reach these counters.
  iptables -t mangle -N WS-E2E-EGRESS
  local r
  for r in 127.0.0.0/8 "$NODE_IP/32" "$POD_CIDR" "$SERVICE_CIDR"; do
    iptables -t mangle -A WS-E2E-EGRESS -d "$r" -j RETURN
  done
  # The bridge's IGMP reports (224.0.0.22): link-local multicast, which
  # no router forwards, counted apart so that the report shows them.
  iptables -t mangle -A WS-E2E-EGRESS -d 224.0.0.0/24 -m comment --comment "weighstation-e2e: link-local multicast" -j RETURN
  iptables -t mangle -A WS-E2E-EGRESS -m limit --limit 10/min -j LOG --log-prefix "weighstation-e2e egress: "
  iptables -t mangle -A WS-E2E-EGRESS -m comment --comment "weighstation-e2e: leaving the node" -j DROP
  iptables -t mangle -A PREROUTING -j WS-E2E-EGRESS
  iptables -t mangle -A OUTPUT -j WS-E2E-EGRESS
}

# start NAME CMD...: a component in the background, its output in
# $E2E_STATE/logs/NAME.log, its PID in $E2E_STATE/pids.
start() {
  local name=$1
  shift
  "$@" >"$E2E_STATE/logs/$name.log" 2>&1 &
  echo "$name $!" >>"$E2E_STATE/pids"
}

wait_for() { # description timeout-seconds command...
  local what=$1 timeout=$2 deadline
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.2
  done
}

kubectl_admin() { "$K8S_BIN/kubectl" --kubeconfig "$E2E_STATE/kubeconfig" "$@"; }

start_cluster() {
  local s=$E2E_STATE pki=$E2E_STATE/pki
  mkdir -p "$s/logs" "$s/etcd"
  start etcd "$K8S_BIN/etcd" --data-dir "$s/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    --unsafe-no-fsync
  start kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$NODE_IP" --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --authorization-mode Node,RBAC --allow-privileged=true \
    --enable-admission-plugins NodeRestriction
  wait_for "the apiserver" 60 kubectl_admin get --raw /readyz
  start kube-controller-manager "$NODE_BIN/kube-controller-manager" --kubeconfig "$s/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$s/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$s/controller-manager.kubeconfig" \
    --leader-elect=false --allocate-node-cidrs --cluster-cidr "$POD_CIDR" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "$SERVICE_CIDR" --service-account-private-key-file "$pki/sa.key" \
    --root-ca-file "$pki/ca.crt" --use-service-account-credentials \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --bind-address 127.0.0.1
  start kube-scheduler "$NODE_BIN/kube-scheduler" --kubeconfig "$s/scheduler.kubeconfig" \
    --authentication-kubeconfig "$s/scheduler.kubeconfig" --authorization-kubeconfig "$s/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1
  start containerd "$NODE_BIN/containerd" --config "$s/containerd/config.toml"
  wait_for "containerd" 30 "$NODE_BIN/ctr" --address /run/containerd/containerd.sock version
  import_images
  local c
  for c in /sys/fs/cgroup/*/; do [ -e "$c/cgroup.procs" ] && mkdir -p "$c$E2E_NETNS"; done
  start kubelet "$NODE_BIN/kubelet" --config "$s/kubelet.yaml" --kubeconfig "$s/kubelet-client.kubeconfig" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --root-dir /var/lib/kubelet --v 1
  start kube-proxy "$NODE_BIN/kube-proxy" --config "$s/kube-proxy.yaml"
  start coredns "$NODE_BIN/coredns" -conf "$s/Corefile"
  wait_for "the node $NODE_NAME Ready" 90 kubectl_admin wait --for condition=Ready "node/$NODE_NAME" --timeout 1s
  # NetworkPolicy: kube-router's firewall alone, once the node exists (it
  # exits at once if it cannot find its node); on legacy iptables (write_configs).
  start kube-router env PATH="$s/kube-router/bin:$PATH" "$NODE_BIN/kube-router" --kubeconfig "$s/admin.kubeconfig" \
    --hostname-override "$NODE_NAME" --run-firewall --run-router=false --run-service-proxy=false \
    --enable-ipv6=false --service-cluster-ip-range "$SERVICE_CIDR" --health-port 0 --metrics-port 0
  # Usable, not just Ready: a pod needs its namespace's ServiceAccount,
  # which the controller manager creates a moment after it starts.
  wait_for "the default ServiceAccount" 30 kubectl_admin get serviceaccount default -n default
}

import_images() {
  local f n=0
  for f in "$E2E_IMAGES"/*.tar; do
    [ -e "$f" ] || continue
    "$NODE_BIN/ctr" --address /run/containerd/containerd.sock -n k8s.io images import --digests --snapshotter overlayfs "$f" >/dev/null ||
      { log "importing $f failed"; return 1; }
    n=$((n + 1))
  done
  ((n > 0)) || { log "no images in $E2E_IMAGES (make image-oci image-oci-e2e)"; return 1; }
}

# The supervisor: the first process of the private mount namespace inside
# the cluster's network namespace. It starts everything, says ready, and on
# SIGTERM stops the components in reverse order.
supervise() {
  trap 'stop_components; exit 0' TERM INT
  setup_mounts
  setup_network
  start_cluster || touch "$E2E_STATE/failed"
  [ -e "$E2E_STATE/failed" ] || touch "$E2E_STATE/ready"
  # Wait (interruptibly: bash runs a trap only between commands) until the
  # host side stops the cluster with SIGTERM.
  sleep infinity &
  idle_pid=$!
  wait "$idle_pid" || true
}

stop_components() {
  local name pid pids=()
  # The kubelet first (so it restarts nothing), then the pods' processes
  # (the containers keep running when their shim goes), then the rest in
  # reverse order of start.
  pid=$(awk '$1 == "kubelet" { print $2 }' "$E2E_STATE/pids" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone 10 "$pid"
  fi
  local f
  for f in $(find /sys/fs/cgroup/*/"$E2E_NETNS" -name cgroup.procs 2>/dev/null); do
    xargs -r kill -KILL <"$f" 2>/dev/null || true
  done
  while read -r name pid; do pids=("$pid" "${pids[@]}"); done <"$E2E_STATE/pids"
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone 10 "$pid" || kill -KILL "$pid" 2>/dev/null || true
  done
  [ -n "${idle_pid:-}" ] && kill "$idle_pid" 2>/dev/null
  wait 2>/dev/null || true
}

# wait_gone SECONDS PID: whether PID (a child: reaped by wait) ended in time.
wait_gone() {
  local deadline=$((SECONDS + $1))
  while kill -0 "$2" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
  wait "$2" 2>/dev/null || true
}

# --- commands --------------------------------------------------------------

up() {
  preflight
  # One cluster of a name at a time: a second `up` or `run` waits for the
  # first to end (the lock is held by this script and by the supervisor,
  # which inherits it), rather than clearing a cluster in use as the
  # leftovers of an interrupted run.
  exec 9>"/run/lock/$E2E_NETNS.lock"
  if ! flock -n 9; then
    log "a cluster $E2E_NETNS is running; waiting up to ${E2E_LOCK_WAIT:-1800}s for it to stop (E2E_NETNS and E2E_STATE name another)"
    flock -w "${E2E_LOCK_WAIT:-1800}" 9 || die "the cluster $E2E_NETNS did not stop within ${E2E_LOCK_WAIT:-1800}s"
  fi
  log "clearing what an earlier run left"
  teardown
  rm -rf "$E2E_STATE"
  mkdir -p "$E2E_STATE/logs" "$E2E_STATE/home"
  local name
  for name in $KERNEL_TUNABLES; do echo "$name $(cat /proc/sys/$name)"; done >"$E2E_STATE/kernel-tunables"
  echo 1 >/proc/sys/net/netfilter/nf_log_all_netns
  make_certs
  write_configs
  ip netns add "$E2E_NETNS"
  log "starting the cluster in network namespace $E2E_NETNS (state: $E2E_STATE)"
  local t0=$SECONDS
  setsid nsenter --net="/run/netns/$E2E_NETNS" unshare --mount --propagation private -- \
    "$self" __supervise >"$E2E_STATE/logs/supervisor.log" 2>&1 </dev/null &
  echo $! >"$E2E_STATE/supervisor.pid"
  local deadline=$((SECONDS + START_TIMEOUT))
  until [ -e "$E2E_STATE/ready" ]; do
    if [ -e "$E2E_STATE/failed" ] || ! kill -0 "$(cat "$E2E_STATE/supervisor.pid")" 2>/dev/null || ((SECONDS >= deadline)); then
      log "the cluster did not start; the last lines of each component:"
      show_logs
      down
      exit 1
    fi
    sleep 0.2
  done
  log "node Ready in $((SECONDS - t0))s; KUBECONFIG=$E2E_STATE/kubeconfig (inside the namespace: hack/e2e-node.sh exec CMD)"
}

show_logs() {
  local f
  for f in "$E2E_STATE"/logs/*.log; do
    [ -s "$f" ] || continue
    echo "----- $(basename "$f") (last 20 lines)" >&2
    tail -n 20 "$f" >&2
  done
}

in_cluster() {
  local pid
  pid=$(cat "$E2E_STATE/supervisor.pid" 2>/dev/null) || die "no cluster is running (hack/e2e-node.sh up)"
  kill -0 "$pid" 2>/dev/null || die "no cluster is running (its supervisor, PID $pid, has gone)"
  # setsid, nsenter and unshare exec: the PID is the supervisor's, inside.
  nsenter --target "$pid" --net --mount --wd="$PWD" -- env KUBECONFIG="$E2E_STATE/kubeconfig" \
    E2E_LOGDIR="$E2E_STATE/logs" E2E_NODE_STATE="$E2E_STATE" HOME="$E2E_STATE/home" \
    PATH="$K8S_BIN:$NODE_BIN:$repo_root/bin:$PATH" "$@"
}

# What the namespace holds, and the proof that nothing left it: its
# interfaces (lo, the CNI bridge, the pods' veths), its routes (none by
# default) and the egress counter. Fails if any of them says otherwise.
egress_report() {
  local links route dropped
  links=$(in_cluster ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort | tr '\n' ' ')
  route=$(in_cluster ip route show default)
  local counters multicast
  counters=$(in_cluster iptables -t mangle -L WS-E2E-EGRESS -n -v -x)
  dropped=$(awk '/DROP/ { print $1 }' <<<"$counters")
  multicast=$(awk '/link-local multicast/ { print $1 }' <<<"$counters")
  log "namespace $E2E_NETNS: interfaces: $links; default route: ${route:-none}; packets to addresses outside the node's, pods' and services' ranges: ${dropped:-unknown} (link-local multicast on the bridge, which nothing forwards: ${multicast:-unknown})"
  local ok=0 l
  for l in $links; do
    case $l in lo | cni0 | veth*) ;; *) log "unexpected interface $l in the namespace"; ok=1 ;; esac
  done
  [ -z "$route" ] || { log "the namespace has a default route"; ok=1; }
  [ "${dropped:-x}" = 0 ] || { log "packets were sent towards addresses outside the node"; ok=1; }
  return $ok
}

down() {
  local t0=$SECONDS
  teardown
  log "stopped in $((SECONDS - t0))s; nothing left running or mounted"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  exec) shift; in_cluster "$@" ;;
  egress) egress_report ;;
  run)
    shift
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "run needs a command: hack/e2e-node.sh run -- CMD..."
    up
    trap 'down' EXIT
    # The command runs in the background so that a signal to this script
    # (bash runs traps only between commands) stops it and the cluster at
    # once, not when the command ends.
    in_cluster "$@" &
    child=$!
    trap 'kill -TERM $child 2>/dev/null; wait $child; exit 130' INT TERM
    rc=0
    wait $child || rc=$?
    egress_report || rc=1
    exit $rc
    ;;
  __supervise) supervise ;;
  *) die "usage: $0 run -- CMD... | up | exec CMD... | egress | down" ;;
esac
