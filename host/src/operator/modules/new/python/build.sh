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
if ! componentize-py --quiet -d "$here/wit/ipam.wit" -w ipam-module componentize app -p . \
  -o "$here/{{lib}}.wasm" 2> "$work/errors"; then
  # componentize-py names a missing export class deep in a backtrace: say it first.
  missing="$(grep -o "module 'app' has no attribute '[A-Za-z]*'" "$work/errors" | head -n1)"
  if [ -n "$missing" ]; then
    echo "build.sh: app.py does not define ${missing##* }: each interface the module exports is a class of that name (class Handler(exports.Handler) for cni:ipam/handler); nothing was built" >&2
  else
    cat "$work/errors" >&2
  fi
  exit 1
fi
