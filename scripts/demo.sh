#!/usr/bin/env bash
# The main job, end to end on a fresh machine: builds the wasm-ipam host and the
# host-local module, then runs VERSION, ADD, CHECK, DEL and DEL again exactly as a
# container runtime would, on a temporary lock, data dir and log, printing each result.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2 >/dev/null
# protoc: the etcd client (the cluster store) generates etcd's API at build time.
if ! command -v protoc >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
fi
cargo build --release -p wasm-ipam
# The compiler, built on its own so the per-call binary carries none (docs/install.md, "1. Build").
cargo build --release -p wasm-ipam-compiler
cargo build --release --target wasm32-wasip2 -p host-local

bin=target/release/wasm-ipam
module=$PWD/target/wasm32-wasip2/release/host_local.wasm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

netconf=$(cat <<JSON
{
  "cniVersion": "1.0.0",
  "name": "demo-net",
  "type": "wasm-ipam",
  "ipam": {
    "type": "wasm-ipam",
    "module": "$module",
    "lockFile": "$work/run/ipam.lock",
    "dataDir": "$work/data",
    "logFile": "$work/wasm-ipam.log",
    "cacheDir": "$work/cache",
    "deadlineSeconds": 10,
    "subnet": "10.22.0.0/24",
    "routes": [{ "dst": "0.0.0.0/0" }]
  }
}
JSON
)

call() {
  local command=$1 container=$2
  echo "== CNI_COMMAND=$command CNI_CONTAINERID=$container"
  local rc=0
  echo "$netconf" | CNI_COMMAND=$command CNI_CONTAINERID=$container CNI_NETNS=/var/run/netns/$container \
    CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin "$bin" || rc=$?
  echo "(exit $rc)"
  return $rc
}

call VERSION none
call ADD pod-a
call ADD pod-b
call CHECK pod-a
call DEL pod-a
call DEL pod-a
call DEL pod-b
echo "== log ($work/wasm-ipam.log), one line per invocation (the first compiled the module, later ones loaded it from the cache):"
grep '"target":"invocation"' "$work/wasm-ipam.log"
echo "== wasm-ipam stats --data-dir $work/data"
"$bin" stats --data-dir "$work/data" --lock-file "$work/run/ipam.lock" --log-file "$work/wasm-ipam.log"
