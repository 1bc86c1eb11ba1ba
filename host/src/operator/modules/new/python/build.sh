#!/usr/bin/env bash
# Builds {{lib}}.wasm with componentize-py 0.25.1 (`pip install componentize-py==0.25.1`),
# which bundles CPython with ipam.py and app.py and generates the bindings from
# wit/ipam.wit (the contract the wasm-ipam that made this project runs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# Built from a copy: componentize-py imports the app to snapshot it and would leave
# bytecode caches here.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here"/ipam.py "$here"/app.py "$work"/
cd "$work"
componentize-py --quiet -d "$here/wit/ipam.wit" -w ipam-module componentize app -p . -o "$here/{{lib}}.wasm"
