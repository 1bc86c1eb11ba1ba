#!/usr/bin/env bash
# Builds whereabouts, the Kubernetes-native IPAM plugin the benchmarks compare the
# Kubernetes store with, from its Go module at the version pinned by
# scripts/whereabouts/go.mod, caches it, and prints the directory that holds it (one
# line on stdout; progress goes to stderr):
#   whereabouts                      the CNI IPAM plugin (its cmd/ package)
#   ippools.yaml                     its CRDs, from the same module (doc/crds/), to apply
#   overlappingrangeipreservations.yaml   to the apiserver before the first call
#
# Apart from scripts/kube-peers.sh (the node's peers) so that a change of either
# rebuilds only its own: the cache is $WASM_IPAM_PEERS_CACHE/../whereabouts, else
# ~/.cache/wasm-ipam/whereabouts, one directory per key (the pin, this script, Go).
#
#   dir=$(scripts/whereabouts.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
pins=scripts/whereabouts
version=v0.9.2
module=github.com/k8snetworkplumbingwg/whereabouts

source scripts/go-toolchain.sh >&2
go_version=$(GOTOOLCHAIN=local go env GOVERSION)
key=$( { echo "$go_version"; cat "$0" "$pins/go.mod" "$pins/go.sum"; } | sha256sum | cut -c1-16)
cache_root=${WASM_IPAM_PEERS_CACHE:+$WASM_IPAM_PEERS_CACHE/../whereabouts}
cache_root=${cache_root:-${XDG_CACHE_HOME:-$HOME/.cache}/wasm-ipam/whereabouts}
out=$cache_root/$key
files=(whereabouts ippools.yaml overlappingrangeipreservations.yaml)

complete() {
  [[ -f $out/.complete ]] || return 1
  local f
  for f in "${files[@]}"; do [[ -s $out/$f ]] || return 1; done
}
if complete; then
  echo "$out"
  exit 0
fi

say() { echo "whereabouts: $*" >&2; }
grep -Eq "^[[:space:]]*(require[[:space:]]+)?$module $version( |$)" "$pins/go.mod" ||
  { say "$pins/go.mod does not pin $module $version"; exit 1; }
began=$SECONDS
say "building $version into $out with $go_version (key $key)"
mkdir -p "$out"
rm -f "$out/.complete"
# A copy of the pins under target/, so the go command never writes into the source
# tree; -mod=readonly: the committed go.sum must hold every module.
build=$PWD/target/peers-build/whereabouts
mkdir -p "$build"
cp "$pins/go.mod" "$pins/go.sum" "$build/"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
(cd "$build" && go build -trimpath \
  -ldflags="-s -w -X $module/pkg/version.Version=$version" \
  -o "$out/whereabouts" "$module/cmd")
# The CRDs come with the module's source, which the build just downloaded.
src=$(cd "$build" && go list -m -f '{{.Dir}}' "$module")
cp "$src/doc/crds/whereabouts.cni.cncf.io_ippools.yaml" "$out/ippools.yaml"
cp "$src/doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml" \
  "$out/overlappingrangeipreservations.yaml"
chmod u+w "$out"/*.yaml
touch "$out/.complete"
complete || { say "a file is missing from $out"; exit 1; }
say "built in $((SECONDS - began)) s"
echo "$out"
