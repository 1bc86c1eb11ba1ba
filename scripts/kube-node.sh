#!/usr/bin/env bash
# A one-node Kubernetes cluster of real processes on this machine, with wasm-ipam as
# the node's IPAM, as kind or minikube would give one but without containers:
#
#   scripts/kube-node.sh up DIR [--store local|etcd|kubernetes] [--subnet CIDR] [--block-size N] [--qps Q --burst B] [--ipam host-local|whereabouts] [--replace]
#       --store: where the network keeps its addresses: local, host-local on the
#       embedded store; etcd, cluster-pool on the cluster's etcd; kubernetes,
#       cluster-pool in the Kubernetes API (the store's CRD and RBAC applied, the
#       netconf's kubeconfig the kubelet's, copied by `wasm-ipam install --kubeconfig`).
#       --qps, --burst: the cluster store's node-wide request rate (its defaults
#       when not given: etcd 50 and 100, kubernetes 5 and 100).
#       --ipam: the node's IPAM instead of wasm-ipam, in the same conflist, for the
#       benchmarks: host-local (the reference one, with --store local), or whereabouts
#       (scripts/whereabouts.sh's, with --store kubernetes: its CRDs and RBAC applied,
#       an identity of its own, its Lease in kube-system, the pod CIDR as its range).
#       --replace: a node already running (another DIR's) is taken down first; without
#       it `up` refuses one, naming its DIR. A node whose processes are all gone (its
#       run or its machine stopped before `down`) is always reclaimed.
#   scripts/kube-node.sh restart-runtime DIR [--wipe]
#       containerd killed (as a crash) and started again; --wipe: as a node reset, its
#       shims and pods killed too and its state and root removed before it starts
#   scripts/kube-node.sh down DIR
#
# `up` starts etcd and kube-apiserver on the host side of a veth, and containerd and
# kubelet inside a network namespace of their own (the node: kubelet refuses a
# loopback node address, and nothing the node does touches this machine's own
# interfaces). It returns when the Node is Ready, leaving DIR/kubeconfig (an admin's)
# and DIR/env (the paths a test or an operator needs, as shell assignments).
# `down` stops every process `up` started, by PID, and removes what they left: mounts,
# the namespace and its veth, cgroups, the few fixed paths kubelet and containerd use,
# and the kernel settings kubelet changed. docs/kubernetes-node.md says what each
# setting is for.
#
# Binaries: the peers from scripts/kube-peers.sh, runc from Debian, and wasm-ipam and
# its module from $WASM_IPAM_BIN / $WASM_IPAM_MODULE (built here when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

usage() {
  echo "usage: $0 up DIR [--store local|etcd|kubernetes] [--subnet CIDR] [--block-size N] [--qps Q --burst B] [--ipam host-local|whereabouts] [--replace] | restart-runtime DIR [--wipe] | down DIR" >&2
  exit 2
}
(($# >= 2)) || usage
action=$1
dir=$(realpath -m "$2")
shift 2

# The node's fixed names and addresses. One node at a time on a machine: `up` refuses
# while another node is running, and reclaims one whose processes are all gone (a run
# killed before its `down`), found by the DIR recorded in $owner_file.
netns=wasm-ipam-node
owner_file=/run/wasm-ipam-node.owner
node_name=kube-node
host_veth=wipam-node0
host_ip=10.250.0.1
node_ip=10.250.0.2
link_prefix=30
pod_cidr=10.244.0.0/16
service_cidr=10.96.0.0/24
bridge=cni0
network=pods
# kubelet's cgroup root, made in every cgroup v1 hierarchy (kubelet refuses one that
# is missing from any).
cgroup_root=wasm-ipam-node
# What kubelet and containerd put in fixed places whatever their configuration.
fixed_paths=(/var/log/containers /var/lib/cni /run/containerd)
# The kernel settings kubelet sets at start (protectKernelDefaults: false); `up`
# records them and `down` puts them back.
kernel_settings=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

say() { echo "kube-node: $*" >&2; }
die() {
  say "$*"
  exit 1
}
elapsed() { echo "$((SECONDS - began)) s"; }

# wait_until SECONDS WHAT COMMAND...: runs COMMAND until it succeeds, at most SECONDS.
wait_until() {
  local limit=$1 what=$2 deadline=$((SECONDS + $1))
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

in_node() { nsenter --net="/run/netns/$netns" -- "$@"; }

# start NAME COMMAND...: starts COMMAND in the background, its output in DIR/logs/NAME.log,
# (appended: a restarted process keeps one log), its PID in DIR/pids/NAME (so `down` stops exactly what `up` started).
start() {
  local name=$1
  shift
  setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name"
}

# alive PID: the process runs. A killed daemon's parent is init, which here may take a
# second to reap it: a zombie is dead, though `kill -0` still finds it.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ ${stat##*) } != Z* ]]
}

running() { [[ -f $dir/pids/$1 ]] && alive "$(cat "$dir/pids/$1")"; }

# fail_start NAME: the process died or never answered: its log's end says why.
fail_start() {
  say "$1 did not start; the end of $dir/logs/$1.log:"
  tail -n 30 "$dir/logs/$1.log" >&2 || true
  exit 1
}

# --- up ---------------------------------------------------------------------------

certificates() {
  local pki=$dir/pki
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=wasm-ipam-node-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  # issue NAME SUBJECT [SANS]: a key and a certificate signed by the CA.
  issue() {
    local ext=$pki/$1.ext
    echo "basicConstraints=CA:FALSE" >"$ext"
    echo "keyUsage=digitalSignature,keyEncipherment" >>"$ext"
    echo "extendedKeyUsage=serverAuth,clientAuth" >>"$ext"
    [[ -n ${3:-} ]] && echo "subjectAltName=$3" >>"$ext"
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 30 -extfile "$ext" -out "$pki/$1.crt" 2>/dev/null
  }
  issue apiserver "/CN=kube-apiserver" \
    "IP:$host_ip,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost"
  issue admin "/O=system:masters/CN=wasm-ipam-admin"
  issue kubelet "/O=system:nodes/CN=system:node:$node_name"
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

# kubeconfig FILE CERT: a kubeconfig for the apiserver, as the client of CERT.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: wasm-ipam-node
  cluster:
    server: https://$host_ip:6443
    certificate-authority: $dir/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $dir/pki/$2.crt
    client-key: $dir/pki/$2.key
contexts:
- name: wasm-ipam-node
  context: {cluster: wasm-ipam-node, user: $2}
current-context: wasm-ipam-node
EOF
}

network() {
  ip netns add "$netns"
  ip link add "$host_veth" type veth peer name eth0 netns "$netns"
  ip addr add "$host_ip/$link_prefix" dev "$host_veth"
  ip link set "$host_veth" up
  in_node ip link set lo up
  in_node ip addr add "$node_ip/$link_prefix" dev eth0
  in_node ip link set eth0 up
  in_node ip route add default via "$host_ip"
}

cgroups() {
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    [[ $hierarchy == */unified/ ]] && continue
    mkdir -p "$hierarchy$cgroup_root"
    # cpuset's children start empty; a cgroup without cpus or mems takes no task.
    if [[ -f $hierarchy/cpuset.cpus ]]; then
      cat "$hierarchy/cpuset.cpus" >"$hierarchy$cgroup_root/cpuset.cpus"
      cat "$hierarchy/cpuset.mems" >"$hierarchy$cgroup_root/cpuset.mems"
    fi
  done
}

wasm_ipam() {
  bin=${WASM_IPAM_BIN:-}
  module=${WASM_IPAM_MODULE:-}
  if [[ -z $bin ]]; then
    cargo build --release -p wasm-ipam -p wasm-ipam-compiler >&2
    bin=$repo/target/release/wasm-ipam
  fi
  if [[ -z $module ]]; then
    local package=host-local file=host_local.wasm
    [[ $store != local ]] && package=cluster-pool file=cluster_pool.wasm
    cargo build --release --target wasm32-wasip2 -p "$package" >&2
    module=$repo/target/wasm32-wasip2/release/$file
  fi
  [[ -x $bin && -f $module ]] || die "no wasm-ipam binary ($bin) or module ($module)"
}

# The CNI config, written by `wasm-ipam install` as on a real node: wasm-ipam, its
# module and its main plugins (the 1.10 ones) into the bin dir, the conflist into the
# conf dir.
cni() {
  mkdir -p "$dir/cni/bin" "$dir/cni/net.d" "$dir/ipam"
  local plugin rate=""
  # The cluster store's request rate, when asked for (a value is checked by wasm-ipam's
  # own parsing of the netconf, at install).
  [[ -n $qps ]] && rate+=", \"qps\": $qps"
  [[ -n $burst ]] && rate+=", \"burst\": $burst"
  for plugin in bridge ptp loopback host-local portmap; do
    ln -sf "$peers/$plugin" "$dir/cni/bin/$plugin"
  done
  local install=("$bin" install --module "$module" --network "$network" --bridge "$bridge"
    --bin-dir "$dir/cni/bin" --module-dir "$dir/cni/wasm" --conf-dir "$dir/cni/net.d"
    --cache-dir "$dir/ipam/cache" --data-dir "$dir/ipam/data" --lock-file "$dir/ipam/ipam.lock"
    --log-file "$dir/ipam/wasm-ipam.log" --plugin-dir "$peers")
  case $store in
  local) install+=(--subnet "$subnet") ;;
  etcd)
    cat >"$dir/ipam/cluster.json" <<EOF
{
  "cidr": "$pod_cidr",
  "blockSize": $block_size,
  "nodeName": "$node_name",
  "store": {"type": "etcd", "endpoints": ["http://$host_ip:2379"], "prefix": "/wasm-ipam/"$rate}
}
EOF
    install+=(--main-plugin ptp --ipam-config "$dir/ipam/cluster.json")
    ;;
  kubernetes)
    store_manifests
    cat >"$dir/ipam/cluster.json" <<EOF
{
  "cidr": "$pod_cidr",
  "blockSize": $block_size,
  "nodeName": "$node_name",
  "store": {"type": "kubernetes"$rate}
}
EOF
    # The kubelet's own credentials (system:node:$node_name in system:nodes, which
    # the manifests' RBAC binds): install checks them against the apiserver and
    # writes the copy the netconf names.
    install+=(--main-plugin ptp --ipam-config "$dir/ipam/cluster.json"
      --kubeconfig "$dir/kubelet/kubeconfig")
    ;;
  esac
  "${install[@]}" >"$dir/logs/install.log" 2>&1 || {
    cat "$dir/logs/install.log" >&2
    die "wasm-ipam install failed"
  }
  # --ipam host-local: the same conflist with the reference host-local as its IPAM
  # instead, for benchmarks that compare the two under the same runtime and kubelet.
  if [[ $ipam == host-local ]]; then
    [[ $store == local ]] || die "--ipam host-local takes --store local"
    python3 - "$dir/cni/net.d/00-wasm-ipam.conflist" "$dir/host-local" "$subnet" <<'PY'
import json, sys
path, data_dir, subnet = sys.argv[1:]
conflist = json.load(open(path))
conflist["plugins"][0]["ipam"] = {"type": "host-local", "dataDir": data_dir,
    "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}
json.dump(conflist, open(path, "w"), indent=2)
PY
  fi
  if [[ $ipam == whereabouts ]]; then
    [[ $store == kubernetes ]] || die "--ipam whereabouts takes --store kubernetes"
    whereabouts_ipam
  fi
}

# --ipam whereabouts: its CRDs and its rights (scripts/whereabouts/rbac.yaml) applied
# as an operator applies them, an identity of its own
# (its DaemonSet's service account in a cluster; a client certificate here: the
# kubelet's identity may not use its Lease, which NodeRestriction confines to
# kube-node-lease), its binary in the bin dir, its flat configuration file, and the
# conflist's IPAM replaced by it.
whereabouts_ipam() {
  local wb kubectl=("$peers/kubectl" --kubeconfig "$dir/kubeconfig")
  wb=$(scripts/whereabouts.sh) || die "scripts/whereabouts.sh failed"
  mkdir -p "$dir/whereabouts"
  local pki=$dir/pki # issue's (certificates') directory
  issue whereabouts "/CN=whereabouts"
  kubeconfig "$dir/whereabouts/kubeconfig" whereabouts
  { cat "$wb/ippools.yaml"; echo ---; cat "$wb/overlappingrangeipreservations.yaml"; echo ---
    cat scripts/whereabouts/rbac.yaml
  } | "${kubectl[@]}" apply -f - >"$dir/logs/whereabouts-manifests.log" 2>&1 || {
    cat "$dir/logs/whereabouts-manifests.log" >&2
    die "applying whereabouts' CRDs and RBAC failed"
  }
  "${kubectl[@]}" wait --for=condition=Established --timeout=60s \
    crd/ippools.whereabouts.cni.cncf.io crd/overlappingrangeipreservations.whereabouts.cni.cncf.io \
    >>"$dir/logs/whereabouts-manifests.log" 2>&1 || die "whereabouts' CRDs were not Established in 60 s"
  wait_until 60 "whereabouts may update its Lease" bash -c \
    "[[ \$('$peers/kubectl' --kubeconfig '$dir/whereabouts/kubeconfig' auth can-i update leases -n kube-system) == yes ]]" ||
    die "the RBAC applied does not let whereabouts update its Lease"
  ln -sf "$wb/whereabouts" "$dir/cni/bin/whereabouts"
  python3 - "$dir/cni/net.d/00-wasm-ipam.conflist" "$dir/whereabouts" "$dir/whereabouts/kubeconfig" "$pod_cidr" <<'PY'
import json, sys
path, wb_dir, kubeconfig, cidr = sys.argv[1:]
import ipaddress
flat = wb_dir + "/whereabouts.conf"
json.dump({"datastore": "kubernetes", "kubernetes": {"kubeconfig": kubeconfig},
    "log_file": wb_dir + "/whereabouts.log", "log_level": "error"}, open(flat, "w"))
conflist = json.load(open(path))
# ptp gives the host's side of each pod's link the gateway of the IPAM's result
# (and fails without one): the range's first address, not one to hand to a pod.
gateway = str(ipaddress.ip_network(cidr)[1])
conflist["plugins"][0]["ipam"] = {"type": "whereabouts", "range": cidr,
    "gateway": gateway, "exclude": [gateway + "/32"],
    "kubernetes": {"kubeconfig": kubeconfig}, "configuration_path": flat}
json.dump(conflist, open(path, "w"), indent=2)
PY
}

# The Kubernetes store's CRD and the nodes' RBAC, applied as the admin, as an operator
# does once per cluster; ready once the CRD is Established and the RBAC lets the
# node's identity list its objects (the authorizer's cache takes the binding a moment).
store_manifests() {
  local kubectl=("$peers/kubectl" --kubeconfig "$dir/kubeconfig")
  "$bin" kubernetes manifests | "${kubectl[@]}" apply -f - >"$dir/logs/manifests.log" 2>&1 || {
    cat "$dir/logs/manifests.log" >&2
    die "applying wasm-ipam kubernetes manifests failed"
  }
  "${kubectl[@]}" wait --for=condition=Established --timeout=60s crd/ipamshards.ipam.wasm-ipam.dev \
    >>"$dir/logs/manifests.log" 2>&1 || {
    cat "$dir/logs/manifests.log" >&2
    die "the CRD ipamshards.ipam.wasm-ipam.dev was not Established in 60 s"
  }
  wait_until 60 "the node may list ipamshards" bash -c \
    "[[ \$('$peers/kubectl' --kubeconfig '$dir/kubeconfig' auth can-i list ipamshards.ipam.wasm-ipam.dev --as 'system:node:$node_name' --as-group system:nodes) == yes ]]" ||
    die "the RBAC of wasm-ipam kubernetes manifests does not let system:node:$node_name list ipamshards"
}

containerd_config() {
  cat >"$dir/containerd/config.toml" <<EOF
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"

[grpc]
  address = "$dir/containerd/containerd.sock"

[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "registry.k8s.io/pause:3.10.1"

[plugins.'io.containerd.cri.v1.runtime']
  # The sandboxes' network namespaces under the state dir, not /run/netns.
  netns_mounts_under_state_dir = true
  # This machine's cgroup v1 has no hugetlb hierarchy.
  tolerate_missing_hugetlb_controller = true
  # Its root lacks CAP_SYS_RESOURCE (bounding set 0x1fffeffffff), so no process may
  # lower its oom_score_adj: runc would fail every sandbox setting kubelet's -998.
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  # No systemd on this machine: cgroupfs, which kubelet then takes from the runtime.
  SystemdCgroup = false
  BinaryName = "$(command -v runc)"

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["$dir/cni/bin"]
  conf_dir = "$dir/cni/net.d"
EOF
}

start_containerd() {
  start containerd nsenter --net="/run/netns/$netns" -- "$peers/containerd" --config "$dir/containerd/config.toml"
  wait_until 60 "containerd answers" "$peers/ctr" --address "$dir/containerd/containerd.sock" version ||
    fail_start containerd
}

restart_runtime() {
  [[ -f $dir/env ]] || die "$dir holds no node that is up"
  peers=$(sed -n 's/^PEERS=//p' "$dir/env")
  running containerd || die "containerd is not running"
  local pid
  pid=$(cat "$dir/pids/containerd")
  kill -KILL "$pid"
  while alive "$pid"; do sleep 0.1; done
  if [[ ${1:-} == --wipe ]]; then
    # What a node reset leaves: no shim, no sandbox, no runtime state, and no CNI DEL
    # for any of them.
    kill_leftovers
    unmount_under "$dir/containerd"
    unmount_under /run/containerd
    rm -rf "$dir/containerd/root" "$dir/containerd/state" /run/containerd /var/lib/cni
  fi
  start_containerd
  "$peers/ctr" --address "$dir/containerd/containerd.sock" -n k8s.io images import "$peers/pause.tar" >/dev/null
  say "containerd restarted${1:+ ($1)}"
}

kubelet_config() {
  cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
# This machine: cgroup v1 (kubelet refuses it unless told), no systemd, swap allowed.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
cgroupsPerQOS: true
enforceNodeAllocatable: []
failSwapOn: false
address: $node_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
podLogsDir: $dir/kubelet/pod-logs
resolvConf: $dir/kubelet/resolv.conf
maxPods: 250
# The defaults, written out: what a DEL under a queued lock is measured against.
runtimeRequestTimeout: 2m
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization:
  mode: Webhook
# A test machine's disk may be fuller than a node's: evict only when nearly full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  echo "nameserver $host_ip" >"$dir/kubelet/resolv.conf"
}

# alive_in OWNER_DIR: whether any process the node of OWNER_DIR started, or any
# process in the node's network namespace, still runs.
alive_in() {
  local pidfile
  for pidfile in "$1"/pids/*; do
    [[ -f $pidfile ]] && alive "$(cat "$pidfile")" && return 0
  done
  [[ -n $(ip netns pids "$netns" 2>/dev/null) ]]
}

# reclaim_stale: a node whose processes are all gone (its run or its machine stopped
# before `down`) is taken down here, so one killed run does not block every later one;
# a live node is refused, naming its DIR, or with --replace taken down.
reclaim_stale() {
  [[ -e /run/netns/$netns || -f $owner_file ]] || return 0
  local owner
  owner=$(cat "$owner_file" 2>/dev/null || true)
  if alive_in "${owner:-/nonexistent}"; then
    ((replace)) ||
      die "a node is already up (network namespace $netns${owner:+, DIR $owner}): scripts/kube-node.sh down ${owner:-its DIR} first, or up --replace"
    say "replacing the running node of ${owner:-an unknown DIR} (--replace)"
  else
    say "reclaiming a node left behind by a run that ended without down (${owner:-DIR unknown})"
  fi
  (
    dir=${owner:-$(mktemp -d)}
    peers=
    down_all
  )
}

up() {
  [[ -e $dir/pids ]] && alive_in "$dir" && die "$dir holds a running node: scripts/kube-node.sh down $dir first"
  reclaim_stale
  [[ -e $dir/pids ]] && rm -rf "$dir/pids"
  command -v runc >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc >/dev/null
  }
  began=$SECONDS
  peers=$(scripts/kube-peers.sh)
  wasm_ipam
  mkdir -p "$dir"/{logs,pids,etcd,containerd,kubelet/pod-logs,fixed,kernel}
  echo "$dir" >"$owner_file"
  # Which fixed paths and kernel settings were there before, for `down`.
  local path setting
  for path in "${fixed_paths[@]}"; do
    [[ -e $path ]] && echo "$path" >>"$dir/fixed/existed"
  done
  touch "$dir/fixed/existed"
  for setting in "${kernel_settings[@]}"; do
    mkdir -p "$dir/kernel/$(dirname "$setting")"
    cat "/proc/sys/$setting" >"$dir/kernel/$setting"
  done
  # Everything `up` made is undone if a step fails.
  trap 'status=$?; if ((status != 0)); then say "up failed: taking down what it started"; down_all; fi' EXIT

  certificates
  kubeconfig "$dir/kubeconfig" admin
  kubeconfig "$dir/kubelet/kubeconfig" kubelet
  network
  cgroups

  start etcd "$peers/etcd" --name node-etcd --data-dir "$dir/etcd/data" \
    --listen-client-urls "http://$host_ip:2379" --advertise-client-urls "http://$host_ip:2379" \
    --listen-peer-urls "http://$host_ip:2380" --initial-advertise-peer-urls "http://$host_ip:2380" \
    --initial-cluster "node-etcd=http://$host_ip:2380" --log-level warn
  wait_until 60 "etcd answers" curl -sf "http://$host_ip:2379/health" || fail_start etcd

  start kube-apiserver "$peers/kube-apiserver" \
    --etcd-servers "http://$host_ip:2379" --bind-address "$host_ip" --advertise-address "$host_ip" \
    --secure-port 6443 --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-cluster-ip-range "$service_cidr" --allow-privileged \
    --kubelet-client-certificate "$dir/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$dir/pki/apiserver-kubelet-client.key"
  wait_until 120 "the apiserver is ready" "$peers/kubectl" --kubeconfig "$dir/kubeconfig" get --raw /readyz ||
    fail_start kube-apiserver
  # No controller-manager: the default namespace's service account, which admission
  # looks up for every pod, is made here.
  wait_until 60 "the default service account" "$peers/kubectl" --kubeconfig "$dir/kubeconfig" \
    create serviceaccount default --namespace default ||
    "$peers/kubectl" --kubeconfig "$dir/kubeconfig" get serviceaccount default >/dev/null ||
    die "cannot create the default service account"

  cni
  containerd_config
  start_containerd
  "$peers/ctr" --address "$dir/containerd/containerd.sock" -n k8s.io images import "$peers/pause.tar" >/dev/null

  kubelet_config
  start kubelet nsenter --net="/run/netns/$netns" -- "$peers/kubelet" \
    --config "$dir/kubelet/config.yaml" --kubeconfig "$dir/kubelet/kubeconfig" \
    --root-dir "$dir/kubelet/root" --hostname-override "$node_name" --node-ip "$node_ip" --v 2
  wait_until 180 "the Node is Ready" bash -c \
    "[[ \$('$peers/kubectl' --kubeconfig '$dir/kubeconfig' get node '$node_name' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]" ||
    fail_start kubelet

  cat >"$dir/env" <<EOF
KUBECONFIG=$dir/kubeconfig
PEERS=$peers
NODE_NAME=$node_name
NODE_NETNS=$netns
NODE_IP=$node_ip
STORE=$store
IPAM=$ipam
RUNTIME_ENDPOINT=unix://$dir/containerd/containerd.sock
CNI_CONF_DIR=$dir/cni/net.d
CNI_BIN_DIR=$dir/cni/bin
IPAM_DATA_DIR=$dir/ipam/data
IPAM_LOCK_FILE=$dir/ipam/ipam.lock
IPAM_LOG_FILE=$dir/ipam/wasm-ipam.log
IPAM_CACHE_DIR=$dir/ipam/cache
CONTAINERD_LOG=$dir/logs/containerd.log
KUBELET_LOG=$dir/logs/kubelet.log
ETCD_ENDPOINT=http://$host_ip:2379
EOF
  trap - EXIT
  say "node $node_name Ready in $(elapsed); export KUBECONFIG=$dir/kubeconfig"
}

# --- down -------------------------------------------------------------------------

# stop NAME: SIGTERM, then SIGKILL after 20 s, to the process `up` started as NAME.
stop() {
  running "$1" || return 0
  local pid
  pid=$(cat "$dir/pids/$1")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}

# Every process left in the node's cgroups (its pods) and every shim of its
# containerd, and with `all` anything else in the node's network namespace (kubelet
# among them: a runtime's restart keeps it, `down` of a DIR whose PIDs are unknown
# does not): killed, then waited for.
kill_leftovers() {
  local pids
  pids=$( {
    cat /sys/fs/cgroup/pids/"$cgroup_root"/cgroup.procs 2>/dev/null
    find /sys/fs/cgroup/pids/"$cgroup_root" -mindepth 1 -name cgroup.procs -exec cat {} + 2>/dev/null
    pgrep -f -- "-address $dir/containerd/containerd.sock" || true
    [[ ${1:-} != all ]] || ip netns pids "$netns" 2>/dev/null || true
  } | sort -u)
  [[ -z $pids ]] && return 0
  kill -KILL $pids 2>/dev/null || true
  local deadline=$((SECONDS + 20)) pid
  for pid in $pids; do
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
  done
}

unmount_under() {
  local mounts
  # Deepest first.
  mounts=$(awk -v prefix="$1" '$5 == prefix || index($5, prefix "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  local m
  for m in $mounts; do umount -l "$m" 2>/dev/null || true; done
}

down_all() {
  # kubelet first, so it restarts nothing; then the sandboxes through the runtime, so
  # their networks are torn down by CNI DEL and the IPAM store ends clean; then the rest.
  stop kubelet
  if running containerd && [[ -n ${peers:-} || -f $dir/env ]]; then
    local crictl=${peers:-$(sed -n 's/^PEERS=//p' "$dir/env")}/crictl
    timeout 120 "$crictl" --runtime-endpoint "unix://$dir/containerd/containerd.sock" rmp -fa >/dev/null 2>&1 || true
  fi
  stop containerd
  kill_leftovers all
  stop kube-apiserver
  stop etcd
  unmount_under "$dir"
  local path
  # Only what this node's `up` recorded as absent before it is removed.
  [[ -f $dir/fixed/existed ]] && for path in "${fixed_paths[@]}"; do
    grep -qx "$path" "$dir/fixed/existed" && continue
    unmount_under "$path"
    rm -rf "$path"
  done
  ip netns del "$netns" 2>/dev/null || true
  ip link del "$host_veth" 2>/dev/null || true
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    [[ -d $hierarchy$cgroup_root ]] || continue
    find "$hierarchy$cgroup_root" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  local setting
  for setting in "${kernel_settings[@]}"; do
    [[ -f $dir/kernel/$setting ]] && cat "$dir/kernel/$setting" >"/proc/sys/$setting" 2>/dev/null || true
  done
  rm -rf "$dir/pids"
  [[ $(cat "$owner_file" 2>/dev/null) == "$dir" ]] && rm -f "$owner_file"
  return 0
}

down() {
  [[ -d $dir ]] || die "$dir does not exist"
  peers=
  down_all
  local left=()
  ip netns list | grep -qw "$netns" && left+=("network namespace $netns")
  ip link show "$host_veth" >/dev/null 2>&1 && left+=("link $host_veth")
  for hierarchy in /sys/fs/cgroup/*/; do
    [[ -d $hierarchy$cgroup_root ]] && left+=("cgroup $hierarchy$cgroup_root")
  done
  grep -q " $dir" /proc/self/mountinfo && left+=("mounts under $dir")
  ((${#left[@]} == 0)) || die "left behind: ${left[*]}"
  say "down: every process stopped, nothing left but $dir"
}

case $action in
up)
  store=local
  ipam=wasm-ipam
  subnet=10.244.0.0/24
  block_size=26
  qps=""
  burst=""
  replace=0
  while (($#)); do
    case $1 in
    --store) store=${2:?}; shift 2 ;;
    --subnet) subnet=${2:?}; shift 2 ;;
    --ipam) ipam=${2:?}; shift 2 ;;
    --block-size) block_size=${2:?}; shift 2 ;;
    --qps) qps=${2:?}; shift 2 ;;
    --burst) burst=${2:?}; shift 2 ;;
    --replace) replace=1; shift ;;
    *) usage ;;
    esac
  done
  [[ $store == local || $store == etcd || $store == kubernetes ]] || usage
  [[ $ipam == wasm-ipam || $ipam == host-local || $ipam == whereabouts ]] || usage
  up
  ;;
restart-runtime) restart_runtime "$@" ;;
down) down ;;
*) usage ;;
esac
