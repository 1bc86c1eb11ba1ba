#!/usr/bin/env bash
# Regenerates host/hot-text.txt: the functions a warm call runs (ADD, CHECK, DEL, DEL of
# an unknown container, VERSION; and ADD and DEL of a signed module under a trust
# policy that requires its signature), which the packaged build links first
# (docs/install.md, bench/run.sh). A call then touches ~1.5 MiB of code in one run of
# pages instead of pages spread over all 6 MiB: the kernel maps the pages around every
# page a process faults in, so scattered code made most of the binary resident.
#
# The names are symbols as the linker sees them, stable while the code and the
# dependencies' versions are: regenerate after upgrading dependencies or moving the
# call path, and check the benchmark's peak memory. A stale entry is ignored
# (--no-warn-symbol-ordering), and a function missing from the list only lands in the
# cold part of the binary. Needs valgrind, python3 and minisign (installed if missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

missing=()
command -v valgrind >/dev/null || missing+=(valgrind)
command -v python3 >/dev/null || missing+=(python3)
command -v minisign >/dev/null || missing+=(minisign)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

host_target="$(rustc -vV | sed -n 's/^host: //p')"
work="$root/target/hot-text"
mkdir -p "$work"
# The binary exactly as packaged (same profile and flags, so the same symbols), plus a
# link map naming each input section's symbols.
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static -C link-arg=-Wl,-Map=$work/wasm-ipam.map -C link-arg=-Wl,--no-demangle" \
    CARGO_TARGET_DIR="$work" cargo build --profile dist --target "$host_target" -p wasm-ipam
bin="$work/$host_target/dist/wasm-ipam"
# Any compiler of this source fills the cache (artifacts are keyed by the engine).
cargo build --release -p wasm-ipam-compiler
cp target/release/wasm-ipam-compile "$(dirname "$bin")/"
cargo build --release --target wasm32-wasip2 -p host-local

node="$(mktemp -d)"
trap 'rm -rf "$node"' EXIT
cat > "$node/conf.json" <<JSON
{"cniVersion":"1.0.0","name":"hot","type":"bridge","ipam":{"type":"wasm-ipam",
 "module":"$root/target/wasm32-wasip2/release/host_local.wasm","subnet":"10.22.0.0/16",
 "dataDir":"$node/data","lockFile":"$node/ipam.lock","cacheDir":"$node/cache","logFile":"$node/log"}}
JSON
# The same module signed, on a network whose netconf requires its signature.
cp target/wasm32-wasip2/release/host_local.wasm "$node/signed.wasm"
minisign -G -W -p "$node/key.pub" -s "$node/key.sec" >/dev/null
minisign -S -s "$node/key.sec" -m "$node/signed.wasm" >/dev/null
printf '{"requireSignature": true, "keys": ["%s"]}\n' "$(sed -n 2p "$node/key.pub")" > "$node/trust.json"
sed -e "s|$root/target/wasm32-wasip2/release/host_local.wasm|$node/signed.wasm\", \"trustPolicy\": \"$node/trust.json|" \
    -e 's|"name":"hot"|"name":"hot-signed"|' "$node/conf.json" > "$node/signed.json"
call() { # COMMAND CONTAINER-ID RUNNER...
    local command=$1 id=$2
    shift 2
    env -i CNI_COMMAND="$command" CNI_CONTAINERID="$id" CNI_NETNS=/var/run/netns/hot \
        CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin "$@" "$bin" < "${conf:-$node/conf.json}" > /dev/null
}
# Compiled under valgrind, whose CPU wasmtime sees with fewer features than the real
# one (an artifact compiled outside would be refused inside, and the reverse).
call ADD warm valgrind -q --tool=none --trace-children=yes
conf="$node/signed.json" call ADD warm valgrind -q --tool=none --trace-children=yes
# Past the cache's racy window the next call checks the artifact's digest once and
# records it; the traced calls then load it by its identity, as warm calls do.
sleep 2.2
call DEL warm valgrind -q --tool=none
conf="$node/signed.json" call DEL warm valgrind -q --tool=none
for command in ADD CHECK DEL DEL VERSION; do
    call "$command" traced valgrind -q --tool=lackey --vex-guest-chase=no \
        --trace-superblocks=yes --log-file="$node/trace.$command.%p"
done
for command in ADD DEL; do
    conf="$node/signed.json" call "$command" traced valgrind -q --tool=lackey --vex-guest-chase=no \
        --trace-superblocks=yes --log-file="$node/trace.signed.$command.%p"
done
python3 scripts/hot-text.py "$work/wasm-ipam.map" host/hot-text.txt "$node"/trace.*
