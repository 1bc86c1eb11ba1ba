#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, checks
# formatting and lints, then runs every unit and integration test. Needs root (it
# installs Debian packages, and the main-plugin tests create network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."

# Where the time goes: each phase's seconds, on stderr as it ends (cargo test adds
# each test binary's own "finished in").
phase_began=$SECONDS
phase() {
  echo "test.sh: $1 took $((SECONDS - phase_began)) s" >&2
  phase_began=$SECONDS
}

rustup target add wasm32-wasip2 >/dev/null
# Real peers for the integration tests: host-local, bridge and ptp from Debian's
# containernetworking-plugins (in /usr/lib/cni), ip and ping for network namespaces,
# GNU time, which measures the plugin's peak memory in the hostile-module suite,
# strace, which counts the store's disk syncs per call and kills calls at chosen system
# calls, util-linux's setpriv, flock and unshare (another local user; a full disk
# in a mount namespace of the test's own), and iptables, which bridge's ipMasq runs
# (the conflist `wasm-ipam install` writes).
if ! [[ -x /usr/lib/cni/host-local && -x /usr/lib/cni/bridge && -x /usr/bin/time && -x /usr/sbin/iptables ]] || ! command -v ping >/dev/null || ! command -v ip >/dev/null || ! command -v strace >/dev/null || ! command -v setpriv >/dev/null || ! command -v unshare >/dev/null || ! command -v flock >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins iproute2 iputils-ping time strace util-linux iptables >/dev/null
fi
rustup component add clippy rustfmt >/dev/null 2>&1 || true
# --- etcd, for tests/integration/etcd*.rs and cluster_*.rs (the cluster store against
# a real etcd, started by the tests on loopback): Debian's etcd-server and etcdctl;
# and protoc, which the etcd-client crate runs at build time to generate etcd's API.
if ! [[ -x /usr/bin/etcd && -x /usr/bin/etcdctl ]] || ! command -v protoc >/dev/null || ! command -v openssl >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client protobuf-compiler openssl >/dev/null
fi
# --- end of etcd

# --- componentize-py, for examples/static-py (an IPAM module written in Python, which
# tests/integration/static_py.rs builds and runs). Pinned to one version; when the PATH
# has no componentize-py of that version it is installed with pip into a virtualenv
# under target/ (Debian's python3 refuses system-wide pip installs), and that
# virtualenv goes first on the PATH for the tests.
componentize_py_version=0.25.1
componentize_py_venv=target/componentize-py
if [[ "$(componentize-py --version 2>/dev/null)" != "componentize-py $componentize_py_version" ]]; then
  if [[ "$("$componentize_py_venv/bin/componentize-py" --version 2>/dev/null)" != "componentize-py $componentize_py_version" ]]; then
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
    fi
    python3 -m venv "$componentize_py_venv"
    "$componentize_py_venv/bin/pip" install -q "componentize-py==$componentize_py_version"
  fi
  export PATH="$PWD/$componentize_py_venv/bin:$PATH"
fi
# --- end of componentize-py

# --- Go, for modules in Go (guest-go/, the SDK; examples/static-go and
# tests/modules/probe-go, which tests/integration/go_sdk*.rs, static_go.rs and
# hostile.rs build and run): scripts/go-toolchain.sh installs the pinned Go,
# wasm-tools and PyPI's wasmtime into target/go-toolchain when missing, and puts them
# first on the PATH.
source scripts/go-toolchain.sh
# --- end of Go

# --- the supply chain, for tests/integration/supply_chain*.rs (modules pushed to and
# pulled from a real OCI registry, signed with minisign): Debian's docker-registry
# (distribution 2.8; the tests start their own on a free loopback port and never use a
# system one) and minisign; and the ORAS Python SDK, a second OCI client for interop,
# pinned and installed with pip into a virtualenv under target/ when missing.
if ! [[ -x /usr/bin/docker-registry && -x /usr/bin/minisign ]]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry minisign >/dev/null
fi
oras_py_version=0.2.43
oras_py_venv=target/oras-py
if [[ "$("$oras_py_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("oras"))' 2>/dev/null)" != "$oras_py_version" ]]; then
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
  fi
  python3 -m venv "$oras_py_venv"
  "$oras_py_venv/bin/pip" install -q "oras==$oras_py_version"
fi
# --- end of the supply chain

# --- containerd, for tests/cri (pods run through a private containerd 1.6 and its CRI
# plugin, with Debian's bridge and wasm-ipam as IPAM): containerd and runc; Debian's
# static busybox, from which the test builds its sandbox image (nothing is pulled); and
# protoc, which the k8s-cri crate runs at build time to generate the CRI API. Installed
# only when missing. The test starts its own containerd, in namespaces of its own, and
# never uses a system one.
if ! command -v containerd >/dev/null || ! command -v ctr >/dev/null || ! command -v runc >/dev/null || ! command -v protoc >/dev/null || [[ "$(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null)" != "install ok installed" ]]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd runc busybox-static protobuf-compiler >/dev/null
fi
# --- end of containerd

# --- the real node, for tests/kube (kubelet and containerd 2 run pods with wasm-ipam
# as their IPAM, on a one-node cluster of real processes: scripts/kube-node.sh):
# etcd, kube-apiserver, kubelet, kubectl, containerd 2, crictl and the 1.10 CNI
# plugins, built from their Go modules at our pins by scripts/kube-peers.sh into a
# cache outside target/. Cold, that is most of half an hour on two cores, so it runs
# beside clippy and the test build, and the tests wait for it; runc from Debian;
# curl, which the node script asks etcd's health with.
if ! command -v curl >/dev/null || ! command -v nsenter >/dev/null || ! command -v runc >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl util-linux runc >/dev/null
fi
mkdir -p target
kube_peers_log=target/kube-peers.log
scripts/kube-peers.sh >/dev/null 2>"$kube_peers_log" &
kube_peers=$!
# --- end of the real node

phase "installing the peers"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
phase "clippy (host)"
cargo clippy --target wasm32-wasip2 -p wasm-ipam-guest -p host-local -p minimal -p probe -p legacy-v0-1 -p legacy-v0-2 -p cluster-pool -- -D warnings
phase "clippy (wasm32 modules)"
# The per-call binary must carry no compiler: nothing in its build graph may pull in
# Cranelift's code generator (the compiler is compiler/'s own binary). The check is
# live: the same query on wasm-ipam-compiler lists it.
if cargo tree -p wasm-ipam -e no-dev -i cranelift-codegen --prefix none 2>/dev/null | grep .; then
  echo "wasm-ipam's per-call binary depends on Cranelift's code generator" >&2
  exit 1
fi
if ! wait "$kube_peers"; then
  cat "$kube_peers_log" >&2
  echo "scripts/kube-peers.sh failed" >&2
  exit 1
fi
cat "$kube_peers_log" >&2
phase "waiting for the Kubernetes peers (built beside clippy)"
cargo test --workspace
phase "cargo test --workspace"
