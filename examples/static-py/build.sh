#!/usr/bin/env bash
# Builds the static-py component: `build.sh OUT.wasm` (default ./static_py.wasm).
# Needs componentize-py 0.25.1 (`pip install componentize-py==0.25.1`), which bundles
# CPython and generates the `cni:ipam@0.2.5` bindings from wit/ipam.wit as it builds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(realpath -m "${1:-static_py.wasm}")"
mkdir -p "$(dirname "$out")"
# Built from a copy of src/: componentize-py imports the app to snapshot it and would
# leave bytecode caches in the source tree.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here"/src/*.py "$work"/
cd "$work"
componentize-py --quiet -d "$here/../../wit/ipam.wit" -w ipam-module \
  componentize app -p . -o "$out"
