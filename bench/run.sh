#!/usr/bin/env bash
# The one command for wasm-ipam's benchmark suite: installs what it needs (Debian's
# host-local as the reference peer, strace, the wasm32-wasip2 target), builds the
# release binary, the modules and the driver, runs every scenario and writes
# BENCHMARKS.md at the workspace root. Extra arguments go to the driver
# (`bench/target/release/wasm-ipam-bench --help` lists them).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

missing=()
[ -x /usr/lib/cni/host-local ] || missing+=(containernetworking-plugins)
command -v strace >/dev/null || missing+=(strace)
command -v protoc >/dev/null || missing+=(protobuf-compiler)
[ -x /usr/bin/etcd ] || missing+=(etcd-server)
[ -x /usr/bin/etcdctl ] || missing+=(etcd-client)
command -v minisign >/dev/null || missing+=(minisign)
[ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

# The host's code may change between runs: always rebuild before measuring, and
# record the revision being built (others commit while the suite runs).
revision="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    revision="$revision + uncommitted changes"
fi
target="${CARGO_TARGET_DIR:-$root/target}"
# The binary as packagers build it (docs/install.md): the dist profile, statically
# linked and non-PIE, the warm call's functions first (host/hot-text.txt). The
# explicit --target keeps these flags off build scripts and proc-macros, which must
# stay dynamic.
host_target="$(rustc -vV | sed -n 's/^host: //p')"
dist_flags="-C target-feature=+crt-static -C relocation-model=static -C link-arg=-Wl,--symbol-ordering-file=$root/host/hot-text.txt -C link-arg=-Wl,--no-warn-symbol-ordering"
# The compiler in a run of its own, so the per-call binary carries none.
RUSTFLAGS="$dist_flags" cargo build --profile dist --target "$host_target" -p wasm-ipam
RUSTFLAGS="$dist_flags" cargo build --profile dist --target "$host_target" -p wasm-ipam-compiler
cargo build --release --target wasm32-wasip2 -p host-local -p probe -p cluster-pool
cargo build --release --manifest-path bench/Cargo.toml
# Modules in other languages (scenario `languages`): static-go with the Go toolchain
# scripts/go-toolchain.sh installs; static-py when componentize-py is on the PATH
# (scripts/test.sh installs it), else that row is left out.
source scripts/go-toolchain.sh
guest-go/build.sh examples/static-go "$root/target/modules/go/static_go.wasm"
[ -x target/componentize-py/bin/componentize-py ] && export PATH="$root/target/componentize-py/bin:$PATH"
if command -v componentize-py >/dev/null; then
    examples/static-py/build.sh "$root/target/modules/bench/static_py.wasm"
fi
# The real node's peers (scenarios `kube-node`, `kube-del-herd`): kubelet, containerd 2 and the rest,
# built from their Go modules into a cache, or taken from it.
scripts/kube-peers.sh >/dev/null
bench_target="${CARGO_TARGET_DIR:-$root/bench/target}"

WASM_IPAM_BENCH_REVISION="$revision" WASM_IPAM_BENCH_COMMAND="./bench/run.sh${*:+ $*}" exec "$bench_target/release/wasm-ipam-bench" all \
    --out "$root/BENCHMARKS.md" \
    --wasm-ipam "$target/$host_target/dist/wasm-ipam" \
    --host-local-module "$target/wasm32-wasip2/release/host_local.wasm" \
    --probe-module "$target/wasm32-wasip2/release/probe.wasm" \
    --cluster-pool-module "$target/wasm32-wasip2/release/cluster_pool.wasm" \
    "$@"
